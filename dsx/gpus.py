"""Peak dense TFLOP/s per GPU and dtype, for MFU. Unknown GPU, unknown dtype for it, or CPU -> None, never a guess.

Every figure is the vendor's DENSE peak (no 2:4 sparsity: datasheets print sparse figures with an asterisk; the
dense one is half) at boost clock, per GPU. Dtypes:
- "bf16", "fp16": tensor-core matmul with FP32 accumulate (what PyTorch uses; GeForce cards run FP16-accumulate
  at twice the rate, which PyTorch does not use).
- "tf32": tensor-core TF32 (fp32 matmuls with torch.backends.cuda.matmul.allow_tf32 / --tf32).
- "fp32": plain FP32 on the CUDA cores (no tensor cores): the peak of an fp32 run without TF32.
- "fp8": tensor-core FP8 (Hopper, Ada), listed where the datasheet gives it.
A dtype a GPU has no tensor-core path for (bf16 on V100 / T4, tf32 before Ampere) is absent: None.

Names are matched against torch.cuda.get_device_name() / nvidia-smi names (case-insensitive regex search, first
match wins, most specific first): "NVIDIA H100 80GB HBM3" is the SXM5 board, "NVIDIA H100 PCIe" the PCIe one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DTYPES = ("fp8", "bf16", "fp16", "tf32", "fp32")

_ALIASES = {
    "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "torch.float16": "fp16",
    "tf32": "tf32",
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "torch.float32": "fp32",
    "fp8": "fp8", "float8": "fp8",
}


@dataclass(frozen=True)
class GpuPeak:
    pattern: str
    """Regex searched (case-insensitive) in the device name."""
    model: str
    """What the entry is, in words."""
    tflops: dict[str, float]
    """dtype -> dense peak TFLOP/s."""
    source: str


_H100_WP = ("NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022), Table 'NVIDIA H100 compared to A100', "
            "https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper")
_ADA_WP = ("NVIDIA Ada GPU Architecture whitepaper, Appendix A (GeForce RTX 4090), "
           "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf")
_GA102_WP = ("NVIDIA Ampere GA102 GPU Architecture whitepaper, Appendix A (GeForce RTX 3090), "
             "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf")

GPUS: tuple[GpuPeak, ...] = (
    # Hopper. H100 SXM5 (80GB HBM3): whitepaper gives dense/sparse; the datasheet rounds (1,979* -> 989.4 dense).
    GpuPeak(r"\bH100\b.*\bPCIe\b", "H100 PCIe (80GB HBM2e)",
            {"fp8": 1513.0, "bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.2},
            _H100_WP + "; H100 datasheet https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-"
                       "datasheet (BF16 1,513* sparse)"),
    GpuPeak(r"\bH100 NVL\b", "H100 NVL (94GB)",
            {"fp8": 1670.5, "bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0},
            "NVIDIA H100 datasheet, H100 NVL column (per GPU: BF16 1,671*, TF32 835*, FP8 3,341* sparse; FP32 60), "
            "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"),
    GpuPeak(r"\bH100\b.*\bHBM3\b", "H100 SXM5 (80GB HBM3)",
            {"fp8": 1978.9, "bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}, _H100_WP),
    GpuPeak(r"\bGH200\b", "GH200 Grace Hopper (H100 SXM compute)",
            {"fp8": 1978.9, "bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9},
            "NVIDIA GH200 datasheet (FP8 3,958*, BF16 1,979*, TF32 989* sparse; FP32 67): the H100 SXM5 figures of "
            + _H100_WP),
    GpuPeak(r"\bH200 NVL\b", "H200 NVL (141GB, PCIe)",
            {"fp8": 1670.5, "bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0},
            "NVIDIA H200 datasheet, H200 NVL column (BF16 1,671*, TF32 835*, FP8 3,341* sparse; FP32 60), "
            "https://www.nvidia.com/en-us/data-center/h200/"),
    GpuPeak(r"\bH200\b", "H200 SXM (141GB HBM3e)",
            {"fp8": 1978.9, "bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9},
            "NVIDIA H200 datasheet, H200 SXM column (FP8 3,958*, BF16 1,979*, TF32 989* sparse; FP32 67), "
            "https://www.nvidia.com/en-us/data-center/h200/ : the same GH100 SXM5 compute as H100 SXM, so the "
            "unrounded figures of " + _H100_WP),
    # Ampere data centre: every A100 (SXM4 / PCIe, 40 / 80 GB) has the same tensor peaks.
    GpuPeak(r"\bA100\b", "A100 (SXM4 or PCIe, 40/80GB)",
            {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5},
            "NVIDIA A100 datasheet (BF16/FP16 312, TF32 156, FP32 19.5 TFLOPS dense), "
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
            "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"),
    GpuPeak(r"\bA10\b", "A10 (24GB; not the A10G of AWS, which clocks differently)",
            {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2},
            "NVIDIA A10 datasheet (BF16 125 | 250*, TF32 62.5 | 125*, FP32 31.2), "
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf"),
    # Ada data centre.
    GpuPeak(r"\bL40S\b", "L40S",
            {"fp8": 733.0, "bf16": 362.05, "fp16": 362.05, "tf32": 183.0, "fp32": 91.6},
            "NVIDIA L40S datasheet (FP8 733 | 1,466*, BF16 362.05 | 733*, TF32 183 | 366*, FP32 91.6), "
            "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413"),
    GpuPeak(r"\bL40\b", "L40",
            {"fp8": 362.0, "bf16": 181.05, "fp16": 181.05, "tf32": 90.5, "fp32": 90.5},
            "NVIDIA L40 datasheet (FP8 362 | 724*, BF16 181.05 | 362.1*, TF32 90.5 | 181*, FP32 90.5), "
            "https://www.nvidia.com/content/dam/en-zz/Solutions/design-visualization/support-guide/"
            "NVIDIA-L40-Datasheet-January-2023.pdf"),
    GpuPeak(r"\bL4\b", "L4",
            {"fp8": 242.5, "bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3},
            "NVIDIA L4 datasheet (FP8 485*, BF16/FP16 242*, TF32 120* sparse; FP32 30.3), "
            "https://www.nvidia.com/en-us/data-center/l4/"),
    # GeForce: tensor peaks with FP32 accumulate (PyTorch's), half the FP16-accumulate figure.
    GpuPeak(r"RTX 4090$", "GeForce RTX 4090 (not the 4090 D or Laptop)",
            {"bf16": 165.2, "fp16": 165.2, "tf32": 82.6, "fp32": 82.6},
            _ADA_WP + " (BF16/FP16 with FP32 accumulate 165.2 | 330.4*, TF32 82.6 | 165.2*, FP32 82.6)"),
    GpuPeak(r"RTX 3090$", "GeForce RTX 3090 (not the Ti)",
            {"bf16": 71.0, "fp16": 71.0, "tf32": 35.6, "fp32": 35.6},
            _GA102_WP + " (BF16/FP16 with FP32 accumulate 71 | 142*, TF32 35.6 | 71*, FP32 35.6)"),
    # Volta / Turing: FP16 tensor cores only (no bf16, no tf32).
    GpuPeak(r"\bV100S\b", "V100S PCIe",
            {"fp16": 130.0, "fp32": 16.4},
            "NVIDIA V100 datasheet, V100S PCIe column (Tensor 130, FP32 16.4), "
            "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"),
    GpuPeak(r"\bV100\b.*SXM2", "V100 SXM2",
            {"fp16": 125.0, "fp32": 15.7},
            "NVIDIA V100 datasheet, V100 SXM2 column (Tensor 125, FP32 15.7), "
            "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"),
    GpuPeak(r"\bV100\b.*PCIE", "V100 PCIe",
            {"fp16": 112.0, "fp32": 14.0},
            "NVIDIA V100 datasheet, V100 PCIe column (Tensor 112, FP32 14), "
            "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"),
    GpuPeak(r"\bT4\b", "T4",
            {"fp16": 65.0, "fp32": 8.1},
            "NVIDIA T4 datasheet (mixed-precision FP16/FP32 65, FP32 8.1), "
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-"
            "951643.pdf"),
    # AMD (ROCm torch reports "AMD Instinct MI300X").
    GpuPeak(r"\bMI300X\b", "AMD Instinct MI300X",
            {"fp8": 2614.9, "bf16": 1307.4, "fp16": 1307.4, "tf32": 653.7, "fp32": 163.4},
            "AMD Instinct MI300X data sheet (FP8 2,614.9, BF16/FP16 1,307.4, TF32 653.7, FP32 163.4 dense), "
            "https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/"
            "amd-instinct-mi300x-data-sheet.pdf"),
)

PEAK_TFLOPS: dict[str, dict[str, float]] = {g.pattern: g.tflops for g in GPUS}
"""{gpu name pattern: {dtype: dense peak TFLOP/s}}; sources in GPUS."""


def normalize_dtype(dtype: object) -> str:
    """'bf16' / 'bfloat16' / torch.bfloat16 -> 'bf16', and so on; ValueError for anything else."""
    key = str(dtype).strip().lower()
    if key not in _ALIASES:
        raise ValueError(f"unknown dtype '{dtype}' for a peak-FLOP/s lookup: use one of {', '.join(DTYPES)}")
    return _ALIASES[key]


def match_gpu(gpu_name: str | None) -> GpuPeak | None:
    """The table entry for a device name, or None (unknown GPU, CPU, empty)."""
    if not gpu_name or gpu_name.strip().lower() == "cpu":
        return None
    for gpu in GPUS:
        if re.search(gpu.pattern, gpu_name.strip(), re.IGNORECASE):
            return gpu
    return None


def peak_tflops(gpu_name: str | None, dtype: object) -> float | None:
    """Dense peak TFLOP/s of one GPU for `dtype` ("bf16", "fp16", "tf32", "fp32", "fp8"); None when the GPU is
    unknown (or CPU) or has no such path. peak_tflops("NVIDIA H100 80GB HBM3", "bf16") -> 989.4."""
    key = normalize_dtype(dtype)
    gpu = match_gpu(gpu_name)
    return None if gpu is None else gpu.tflops.get(key)


def mfu(achieved_tflops_per_gpu: float | None, peak: float | None) -> float | None:
    """Model FLOPs utilisation (0..1): achieved model TFLOP/s per GPU over the dense peak; None without a peak."""
    if peak is None or achieved_tflops_per_gpu is None:
        return None
    return achieved_tflops_per_gpu / peak
