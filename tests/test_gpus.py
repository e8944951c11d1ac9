"""Peak TFLOP/s table: lookups by the names torch / nvidia-smi report, None when unknown, sources everywhere."""

import re

import pytest

from dsx.gpus import DTYPES, GPUS, PEAK_TFLOPS, match_gpu, mfu, normalize_dtype, peak_tflops


@pytest.mark.parametrize("name, dtype, expected", [
    ("NVIDIA H100 80GB HBM3", "bf16", 989.4),  # SXM5
    ("NVIDIA H100 80GB HBM3", "tf32", 494.7),
    ("NVIDIA H100 80GB HBM3", "fp32", 66.9),
    ("NVIDIA H100 PCIe", "bf16", 756.0),
    ("NVIDIA H100 NVL", "bf16", 835.5),
    ("NVIDIA H200", "bf16", 989.4),
    ("NVIDIA H200 NVL", "bf16", 835.5),
    ("NVIDIA GH200 480GB", "bf16", 989.4),
    ("NVIDIA A100-SXM4-80GB", "bf16", 312.0),
    ("NVIDIA A100-SXM4-40GB", "tf32", 156.0),
    ("NVIDIA A100 80GB PCIe", "fp32", 19.5),
    ("NVIDIA A10", "bf16", 125.0),
    ("NVIDIA L4", "bf16", 121.0),
    ("NVIDIA L40S", "bf16", 362.05),
    ("NVIDIA L40", "bf16", 181.05),
    ("NVIDIA GeForce RTX 4090", "fp16", 165.2),
    ("NVIDIA GeForce RTX 3090", "bf16", 71.0),
    ("Tesla V100-SXM2-32GB", "fp16", 125.0),
    ("Tesla V100-PCIE-16GB", "fp16", 112.0),
    ("Tesla V100S-PCIE-32GB", "fp16", 130.0),
    ("Tesla T4", "fp16", 65.0),
    ("AMD Instinct MI300X", "bf16", 1307.4),
])
def test_known_gpus(name, dtype, expected):
    assert peak_tflops(name, dtype) == expected


@pytest.mark.parametrize("name, dtype", [
    (None, "bf16"), ("", "bf16"), ("cpu", "bf16"),
    ("NVIDIA A10G", "bf16"),  # AWS part, other clocks: not the A10
    ("NVIDIA GeForce RTX 4090 D", "bf16"), ("NVIDIA GeForce RTX 3090 Ti", "bf16"),
    ("NVIDIA B200", "bf16"), ("Some Future GPU", "bf16"),
    ("Tesla V100-SXM2-32GB", "bf16"), ("Tesla T4", "tf32"),  # no tensor-core path for that dtype
])
def test_unknown_gpu_or_dtype_path_is_none_never_a_guess(name, dtype):
    assert peak_tflops(name, dtype) is None


def test_dtype_aliases_and_bad_dtypes():
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bfloat16") == 989.4
    assert normalize_dtype("torch.float16") == "fp16" and normalize_dtype("float32") == "fp32"
    with pytest.raises(ValueError, match=re.escape("unknown dtype 'int8' for a peak-FLOP/s lookup: use one of "
                                                   "fp8, bf16, fp16, tf32, fp32")):
        peak_tflops("NVIDIA H100 80GB HBM3", "int8")


def test_the_most_specific_entry_wins():
    assert match_gpu("NVIDIA H100 PCIe").model.startswith("H100 PCIe")
    assert match_gpu("NVIDIA H200 NVL").model.startswith("H200 NVL")
    assert match_gpu("NVIDIA GH200 480GB").model.startswith("GH200")
    assert match_gpu("NVIDIA A100-PCIE-40GB").model.startswith("A100")
    assert match_gpu("NVIDIA L40S").model == "L40S"


@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.model)
def test_every_entry_has_a_source_and_sane_figures(gpu):
    assert "http" in gpu.source
    assert set(gpu.tflops) <= set(DTYPES) and "fp32" in gpu.tflops
    order = [gpu.tflops[d] for d in ("fp32", "tf32", "bf16", "fp8") if d in gpu.tflops]
    assert order == sorted(order)  # fp32 <= tf32 <= bf16 <= fp8
    if "bf16" in gpu.tflops:
        assert gpu.tflops["bf16"] == gpu.tflops["fp16"]
    assert PEAK_TFLOPS[gpu.pattern] is gpu.tflops


def test_mfu():
    assert mfu(494.7, peak_tflops("NVIDIA H100 80GB HBM3", "bf16")) == pytest.approx(0.5)
    assert mfu(100.0, peak_tflops("cpu", "bf16")) is None
