"""--precision bf16-autocast: fp32 weights under torch.autocast(bfloat16), DeepSpeed's torch_autocast section.

What it writes, what it refuses, how the estimate counts it (fp32 states, the activation probe's emulation of CUDA's
autocast; tests/test_estimate.py checks it against a real CPU autocast forward), and one real DeepSpeed run on a CPU
rank beside the same run in fp32.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsx.activations import saved_bytes
from dsx.cli import cli
from dsx.config_facts import checks_overflow, precision_of
from dsx.estimate import model_states
from dsx.models import build_model, resolve_model
from dsx.parity import reference_config
from dsx.results import read_rows

ROOT = Path(__file__).resolve().parent.parent
AUTOCAST_SECTION = {"enabled": True, "dtype": "bfloat16"}


def test_dsx_config_writes_the_torch_autocast_section_over_fp32_weights(tmp_path):
    out = CliRunner().invoke(cli, ["config", "--precision", "bf16-autocast", "-o", str(tmp_path / "ds.json")])
    assert out.exit_code == 0, out.output
    config = json.loads((tmp_path / "ds.json").read_text())
    assert config["torch_autocast"] == AUTOCAST_SECTION
    assert config["bf16"] == {"enabled": False} and config["fp16"] == {"enabled": False}
    assert precision_of(config) == "bf16-autocast" and not checks_overflow(config)


@pytest.mark.parametrize("dtype, precision", [("bfloat16", "bf16-autocast"), ("bf16", "bf16-autocast"),
                                              ("fp16", "fp32")])
def test_a_config_reads_as_autocast_only_in_bfloat16(dtype, precision):
    assert precision_of({"torch_autocast": {"enabled": True, "dtype": dtype}}) == precision


@pytest.mark.parametrize("flags, message", [
    (["--pipeline-stages", "2", "--world-size", "2"],
     "Error: --precision bf16-autocast with pipeline stages: not tried by dsx (its stages would pass the fp32 residual "
     "stream between GPUs); use bf16"),
    (["--hf-auto"], "Error: --precision bf16-autocast with --hf-auto: the Trainer's --bf16 decides the precision "
                    "there; drop one"),
])
def test_what_autocast_cannot_train_with_is_refused(flags, message):
    out = CliRunner().invoke(cli, ["config", "--precision", "bf16-autocast", *flags])
    assert out.exit_code == 2 and out.output.strip() == message


def test_a_run_with_zero_quantized_weights_is_refused(tmp_path):
    from dsx.run import RunRefused, RunRequest, prepare

    request = RunRequest(model="gpt2-tiny", results=str(tmp_path / "runs.jsonl"),
                         config_flags={"precision": "bf16-autocast", "zero": 3},
                         ds_sets=("zero_optimization.zero_quantized_weights=true",))
    with pytest.raises(RunRefused, match=r"^--precision bf16-autocast with zero_optimization.zero_quantized_weights "
                                         r"\(ZeRO\+\+ qwZ\): DeepSpeed refuses the pair at deepspeed.initialize"):
        prepare(request)


def test_the_estimate_holds_weights_and_gradients_in_fp32():
    autocast, fp32 = (model_states(params=1000, world=4, stage=2, precision=p, optimizer_bytes=8, offload="none",
                                   offload_params="none", bucket=500_000_000) for p in ("bf16-autocast", "fp32"))
    assert autocast == fp32 and autocast["forward"]["parameters"] == 4000


def test_the_probe_keeps_the_fp32_residual_stream_and_the_bf16_weight_copies():
    resolved = resolve_model("gpt2-tiny")
    autocast, bf16 = saved_bytes(resolved, "sdpa", "bf16-autocast"), saved_bytes(resolved, "sdpa", "bf16")
    assert autocast.layer_input_per_sample == 2 * bf16.layer_input_per_sample  # what checkpointing keeps
    model = build_model(resolved, "sdpa")
    weights = sum(p.numel() for name, p in model.named_parameters() if ".h." in name and name.endswith(".weight")
                  and p.dim() == 2)
    assert autocast.layers_fixed == 2 * weights  # autocast's bf16 copy of each matrix, kept for the backward


def test_parity_reference_b_of_an_autocast_candidate_trains_in_fp32():
    config = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
              "bf16": {"enabled": False}, "torch_autocast": AUTOCAST_SECTION, "zero_optimization": {"stage": 2}}
    assert precision_of(reference_config(config, 8, 1, 1, 0)) == "bf16-autocast"
    assert precision_of(reference_config(config, 8, 1, 1, 0, fp32=True)) == "fp32"


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> dict[str, dict]:
    """gpt2-tiny on one CPU rank, 4 steps, in bf16-autocast and in fp32: the same batches and initial weights."""
    results = tmp_path_factory.mktemp("autocast") / "runs.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "DSX_DEBUG")}
    env.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".cache" / "torch_extensions"))
    for precision in ("bf16-autocast", "fp32"):
        out = subprocess.run([sys.executable, "-m", "dsx", "run", "--model", "gpt2-tiny", "--precision", precision,
                              "--steps", "3", "--warmup", "1", "--results", str(results)], cwd=results.parent,
                             env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
    return {row["precision"]: row for row in read_rows(results)}


@pytest.mark.slow
@pytest.mark.deepspeed
def test_an_autocast_run_records_its_precision_and_counts_flops_in_bf16(rows):
    row = rows["bf16-autocast"]
    assert row["status"] == "ok" and row["ds_config"]["torch_autocast"] == AUTOCAST_SECTION
    assert row["figures"]["flops_dtype"] == "bf16"
    assert "bf16-autocast" in " ".join(row["command"])


@pytest.mark.slow
@pytest.mark.deepspeed
def test_an_autocast_run_multiplies_in_bf16_yet_trains_as_fp32_does(rows):
    """Autocast ran (its losses are not fp32's to the last bit) and trains the same model (within bf16's rounding)."""
    def losses(row):
        rank = row["ranks"][0]
        return [*rank["warmup_loss"], *rank["loss"]]

    autocast, fp32 = losses(rows["bf16-autocast"]), losses(rows["fp32"])
    assert autocast != fp32
    assert max(abs(a - b) / b for a, b in zip(autocast, fp32)) < 1e-2


@pytest.mark.parametrize("kernels, fp8, flag", [("liger", "none", "--kernels liger"),
                                                ("none", "tensorwise", "--fp8 tensorwise")])
def test_kernels_dsx_measured_on_bf16_weights_only_are_refused(kernels, fp8, flag):
    from types import SimpleNamespace

    from dsx.run import RunRefused
    from dsx.run.kernels import kernel_plan

    request = SimpleNamespace(kernels=kernels, fp8=fp8, tiled_mlp=False, compile=False, loss="plain")
    with pytest.raises(RunRefused) as info:
        kernel_plan(request, resolve_model("llama-1b"), "cuda", 2, None, None, [], check_installed=False,
                    precision="bf16-autocast")
    assert str(info.value) == (f"{flag} with --precision bf16-autocast: not measured by dsx (its kernels were tried "
                               "on bf16 weights only); use bf16")


@pytest.mark.parametrize("zero, noted", [(0, True), (2, False)])
def test_a_run_without_zero_says_deepspeed_steps_through_an_overflow(tmp_path, zero, noted):
    from dsx.config_facts import AUTOCAST_AT_ZERO0
    from dsx.run.request import RunRequest, resolve_trial

    trial = resolve_trial(RunRequest(model="gpt2-tiny", results=str(tmp_path / "runs.jsonl"),
                                     config_flags={"precision": "bf16-autocast", "zero": zero}))
    assert (AUTOCAST_AT_ZERO0 in trial.notes) is noted


def test_a_run_of_a_config_file_in_autocast_with_pipeline_stages_is_refused(tmp_path):
    from dsx.config_facts import AUTOCAST_WITH_PIPELINE
    from dsx.run import RunRefused, RunRequest, resolve_trial

    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
                                "bf16": {"enabled": False}, "torch_autocast": AUTOCAST_SECTION,
                                "zero_optimization": {"stage": 0}, "optimizer": {"type": "AdamW"}}))
    with pytest.raises(RunRefused) as info:
        resolve_trial(RunRequest(model="gpt2-tiny", gpus=2, pipeline_stages=2, config_path=str(path)))
    assert str(info.value) == AUTOCAST_WITH_PIPELINE


def test_the_estimate_prices_autocasts_fp32_gradients_at_zero_1_and_2_only():
    """llama-1b on 2 H200s, micro-batch 4 x 2 (bench/multigpu/rows/autocast2.jsonl): 2 micro-batches of 1.24B
    parameters at ZeRO-2; nothing at ZeRO-3 (not seen there) or in bf16."""
    from dsx.calibration import AUTOCAST_S_PER_PARAM
    from dsx.estimate import setup_of_row
    from dsx.estimate.predict import autocast_seconds

    priced = {(row["ds_config"]["zero_optimization"]["stage"], precision_of(row["ds_config"])):
              autocast_seconds(setup_of_row(row))
              for row in read_rows(ROOT / "bench/multigpu/rows/autocast2.jsonl") if row["model"]["preset"] == "llama-1b"}
    assert priced == {(2, "bf16"): 0.0, (2, "bf16-autocast"): AUTOCAST_S_PER_PARAM * 1_235_814_400 * 2,
                      (3, "bf16"): 0.0, (3, "bf16-autocast"): 0.0}
