"""The parity check (dsx.parity, `dsx check`, `dsx sweep --check`): the verdict's arithmetic, the reference it
builds, and, for real on CPU ranks, a configuration that trains the same model and one broken on purpose."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsx.parity import FLOOR, MARGIN, alternate_split, dropouts, judge, reference_config
from dsx.results import parse_row, read_rows

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------------ the verdict

def test_a_candidate_within_the_references_spread_trains_the_same_model():
    ref_a, ref_b = [6.9, 6.5, 6.1], [6.9, 6.5001, 6.1002]
    j = judge([6.9, 6.5002, 6.1005], ref_a, ref_b, "fp32")
    assert (j.verdict, j.reference_spread, j.tolerance) == ("same", pytest.approx(2e-4), pytest.approx(8e-4))
    assert (j.max_abs_diff, j.at_step) == (pytest.approx(5e-4), 2)


def test_a_step_outside_the_tolerance_is_a_different_model():
    j = judge([6.9, 6.5, 6.2], [6.9, 6.5, 6.1], [6.9, 6.5, 6.1001], "fp32")
    assert j.verdict == "differs"
    assert j.reason == "step 2: |6.2 - 6.1| = 0.1 > 0.0004"


def test_references_that_agree_exactly_leave_the_precisions_floor():
    j = judge([5.0, 4.0 + 3e-6], [5.0, 4.0], [5.0, 4.0], "fp32")
    assert j.reference_spread == 0 and j.tolerance == pytest.approx(FLOOR["fp32"] * 5.0)
    assert j.verdict == "same"
    assert judge([5.0, 4.0 + 1e-5], [5.0, 4.0], [5.0, 4.0], "fp32").verdict == "differs"
    assert judge([5.0, 4.002], [5.0, 4.0], [5.0, 4.0], "bf16").verdict == "same"


def test_pipeline_onebit_and_sparse_differences_are_reported_not_judged():
    j = judge([6.9, 6.0], [6.9, 6.5], [6.9, 6.5], "bf16", design="2 pipeline stages")
    assert (j.verdict, j.max_abs_diff, j.by_design) == ("by design", pytest.approx(0.5), "2 pipeline stages")


def test_a_non_finite_loss_differs_and_curves_of_other_lengths_are_unknown():
    assert judge([6.9, float("nan")], [6.9, 6.5], [6.9, 6.5], "fp32").verdict == "differs"
    assert judge([6.9], [6.9, 6.5], [6.9, 6.5], "fp32").verdict == "unknown"


@pytest.mark.parametrize("split, other", [((8, 1), (4, 2)), ((2, 4), (1, 8)), ((1, 6), (2, 3)), ((1, 1), (1, 1)),
                                          ((3, 2), (1, 6))])
def test_the_second_reference_splits_the_same_batch_the_other_way(split, other):
    assert alternate_split(*split) == other and other[0] * other[1] == split[0] * split[1]


def test_the_reference_config_keeps_what_is_trained_and_drops_how():
    config = {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
              "bf16": {"enabled": True}, "gradient_clipping": 1.0,
              "optimizer": {"type": "OneBitAdam", "params": {"lr": 3e-4, "freeze_step": 5, "weight_decay": 0.1,
                                                             "comm_backend_name": "nccl"}},
              "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}},
              "pipeline": {"stages": 2}, "compile": {"deepcompile": True}}
    assert reference_config(config, 2, 4, 2, 0) == {
        "train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
        "bf16": {"enabled": True}, "gradient_clipping": 1.0,
        "optimizer": {"type": "Adam", "params": {"lr": 3e-4, "weight_decay": 0.1}}, "zero_optimization": {"stage": 0}}


def test_reference_b_of_a_bf16_candidate_trains_in_fp32():
    config = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
              "bf16": {"enabled": True, "check_grad_overflow": True}, "zero_optimization": {"stage": 2}}
    assert reference_config(config, 4, 2, 1, 0, fp32=True) == {
        "train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
        "bf16": {"enabled": False}, "zero_optimization": {"stage": 0}}


def test_references_drifting_apart_by_a_large_share_of_the_loss_say_the_check_is_weak():
    j = judge([11.2, 8.3, 15.0, 13.9], [11.2, 8.28, 15.03, 7.16], [11.2, 8.2, 14.0, 9.0], "bf16")
    assert j.verdict == "same" and j.tolerance == pytest.approx(MARGIN * 1.84)
    assert j.notes == ["the references drift apart by 1.84, more than 5% of a step's loss: at this learning rate and "
                       "precision any small difference grows that large, so the check cannot tell configurations "
                       "apart (a learning-rate warm-up, or a lower rate, makes it sharp)"]


def test_dropout_that_would_blur_the_check_is_named():
    from dsx.models import resolve_model

    assert dropouts(resolve_model("gpt2-tiny")) == {"attn_pdrop": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.1}
    assert dropouts(resolve_model("gpt2-tiny", {"attn_pdrop": 0, "embd_pdrop": 0, "resid_pdrop": 0})) == {}


# ------------------------------------------------------------------------------------------------ for real on CPU

NO_DROPOUT = ["--set", "resid_pdrop=0", "--set", "embd_pdrop=0", "--set", "attn_pdrop=0"]
COMMON = ["--model", "gpt2-tiny", *NO_DROPOUT, "--precision", "fp32", "--lr", "3e-3", "--steps", "10", "--warmup", "2"]


def dsx(command: str, results: Path, *args: str) -> subprocess.CompletedProcess:
    """`dsx COMMAND ARGS --results RESULTS` in a subprocess, as a user runs it (the test session's op cache)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "DSX_DEBUG")}
    env.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".cache" / "torch_extensions"))
    return subprocess.run([sys.executable, "-m", "dsx", command, *args, "--results", str(results)],
                          cwd=results.parent, env=env, capture_output=True, text=True, timeout=600)


def dsx_check(results: Path, *args: str) -> subprocess.CompletedProcess:
    return dsx("check", results, *COMMON, *args)


@pytest.fixture(scope="module")
def zero3_offload(tmp_path_factory):
    """One real check: ZeRO-3 with the optimizer on the CPU, micro-batch 4 x grad-accum 2, against plain data
    parallel (three runs, one results file)."""
    results = tmp_path_factory.mktemp("parity") / "runs.jsonl"
    out = dsx_check(results, "--zero", "3", "--offload", "cpu", "--micro-batch", "4", "--grad-accum", "2")
    return out, read_rows(results)


@pytest.mark.slow
@pytest.mark.deepspeed
def test_zero3_with_cpu_offload_trains_the_same_model_as_plain_data_parallel(zero3_offload):
    out, rows = zero3_offload
    assert out.returncode == 0, out.stdout + out.stderr
    ref_a, ref_b, candidate = (parse_row(r) for r in rows)
    assert [r.parity.role for r in (ref_a, ref_b, candidate)] == ["reference", "reference", "candidate"]
    assert (ref_a.micro_batch, ref_a.grad_accum, ref_b.micro_batch, ref_b.grad_accum) == (4, 2, 2, 4)
    assert ref_a.ds_config["zero_optimization"] == {"stage": 0} and ref_a.data.label == "synthetic"
    p = candidate.parity
    assert (p.verdict, p.steps, p.reference_run_ids) == ("same", 12, [ref_a.run_id, ref_b.run_id])
    curve = candidate.ranks[0].warmup_loss + candidate.ranks[0].loss
    assert curve[-1] < 0.8 * curve[0]  # the learnable data: the model learns in a dozen steps
    assert p.max_abs_diff < 1e-4 and p.tolerance <= max(MARGIN * p.reference_spread, FLOOR["fp32"] * curve[0])
    assert f"verdict: SAME model: largest |candidate - reference| {p.max_abs_diff:.3g}" in out.stdout


@pytest.mark.slow
@pytest.mark.deepspeed
def test_a_configuration_that_loses_a_layers_gradients_is_caught(tmp_path, zero3_offload):
    out = dsx_check(tmp_path / "runs.jsonl", "--zero", "2", "--micro-batch", "4", "--grad-accum", "2",
                    "--inject-failure", "grad")
    assert out.returncode == 1, out.stdout + out.stderr
    candidate = parse_row(read_rows(tmp_path / "runs.jsonl")[-1])
    assert candidate.parity.verdict == "differs" and candidate.parity.max_abs_diff > 1e-3
    assert "injected: the first block's gradients are zeroed (--inject-failure grad)" in candidate.notes
    assert "verdict: DIFFERS" in out.stdout


@pytest.mark.slow
def test_report_shows_the_verdict_in_the_runs_table_and_a_table_of_checks(tmp_path, zero3_offload):
    _, rows = zero3_offload
    results = tmp_path / "runs.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = subprocess.run([sys.executable, "-m", "dsx", "report", str(results), "--format", "markdown"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    runs = [line for line in out.stdout.splitlines() if line.startswith("| CPU | gpt2-tiny")]
    assert sorted(line.rstrip(" |").rsplit("|", 1)[-1].strip() for line in runs[:3]) == ["ref", "ref", "same"]
    assert "## Parity: does the configuration train the same model as plain data parallel?" in out.stdout


@pytest.mark.slow
@pytest.mark.deepspeed
def test_a_sweep_with_check_verifies_its_best_row_before_calling_it_best(tmp_path):
    results = tmp_path / "runs.jsonl"
    out = dsx("sweep", results, "--zero", "2", "--micro-batch", "2", "--steps", "3", "--warmup", "1", "--check",
              "--precision", "fp32", "--lr", "3e-3", *NO_DROPOUT)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = read_rows(results)
    best, ref_a, ref_b = rows
    assert best["sweep"]["label"] == "z2 fp32" and ref_a["parity"]["role"] == "reference"
    assert (ref_b["parity"]["verdict"], ref_b["parity"]["candidate_run_id"]) == ("same", best["run_id"])
    assert "dsx sweep --check: does z2 fp32 mb2 train the same model as plain data parallel?" in out.stderr
    assert f"best: run {best['run_id'][:8]}" in out.stdout


@pytest.mark.slow
@pytest.mark.deepspeed
@pytest.mark.parametrize("zero", ["2", "3"])
def test_the_tiled_loss_trains_the_same_model_as_the_plain_one(tmp_path, zero):
    """--loss tiled at grad-accum 2 (engine.backward halves the loss: the head's gradient must follow), in tiles of
    24 tokens (not a divisor of the micro-batch's 128): ZeRO-2 computes the gradients in the forward pass, ZeRO-3
    recomputes checkpointed tiles."""
    out = dsx_check(tmp_path / "runs.jsonl", "--zero", zero, "--micro-batch", "2", "--grad-accum", "2",
                    "--loss", "tiled", "--loss-tile-tokens", "24")
    assert out.returncode == 0, out.stdout + out.stderr
    ref_a, _, candidate = (parse_row(r) for r in read_rows(tmp_path / "runs.jsonl"))
    assert (ref_a.toggles.loss, candidate.toggles.loss, candidate.toggles.loss_tile_tokens) == ("plain", "tiled", 24)
    assert candidate.parity.verdict == "same" and candidate.parity.max_abs_diff < 1e-5


@pytest.mark.slow
@pytest.mark.deepspeed
@pytest.mark.parametrize("zero, extra", [("2", ()), ("3", ("--loss", "tiled", "--loss-tile-tokens", "24"))])
def test_ulysses_over_two_ranks_trains_the_same_model_as_one_replica(tmp_path, zero, extra):
    """--sequence-parallel 2 on 2 CPU ranks (one replica) against plain data parallel on 1 rank, grad-accum 2. At
    ZeRO-3 DeepSpeed averages the group's gradients where ZeRO-2 sums them (dsx.rank.ulysses): without dsx's
    compensation this check says "differs"."""
    out = dsx("check", tmp_path / "runs.jsonl", "--model", "llama-tiny", "--precision", "fp32", "--lr", "3e-3",
              "--steps", "8", "--warmup", "2", "--gpus", "2", "--sequence-parallel", "2", "--zero", zero,
              "--micro-batch", "2", "--grad-accum", "2", *extra)
    assert out.returncode == 0, out.stdout + out.stderr
    ref_a, _, candidate = (parse_row(r) for r in read_rows(tmp_path / "runs.jsonl"))
    assert (ref_a.world_size, candidate.world_size, candidate.ds_config["sequence_parallel_size"]) == (1, 2, 2)
    assert candidate.parity.verdict == "same" and candidate.parity.max_abs_diff < 1e-5
    a2a = [note for note in candidate.comm.notes if note.startswith("Ulysses all-to-alls: ")]
    assert len(a2a) == 1 and "predicted (x1.00;" in a2a[0]
    assert candidate.comm.predicted.parts["Ulysses all-to-alls"] > 0  # ZeRO over both ranks, and the all-to-alls
    assert candidate.comm.predicted.bytes_per_step == pytest.approx(candidate.comm.bytes_per_step, rel=0.02)


@pytest.mark.slow
@pytest.mark.deepspeed
@pytest.mark.parametrize("zero", ["2", "3"])
def test_checkpoint_offload_and_the_tiled_mlp_train_the_same_model(tmp_path, zero):
    """--act-ckpt --act-ckpt-offload --tiled-mlp on 2 CPU ranks at grad-accum 2, sequence 128 (two MLP slices of
    llama-tiny's 64-wide hidden states: TiledMLP holds ZeRO's reduction to the last slice) against plain data
    parallel."""
    out = dsx("check", tmp_path / "runs.jsonl", "--model", "llama-tiny", "--precision", "fp32", "--lr", "3e-3",
              "--seq-len", "128", "--steps", "6", "--warmup", "1", "--gpus", "2", "--zero", zero,
              "--micro-batch", "2", "--grad-accum", "2", "--act-ckpt", "--act-ckpt-offload", "--tiled-mlp")
    assert out.returncode == 0, out.stdout + out.stderr
    ref_a, _, candidate = (parse_row(r) for r in read_rows(tmp_path / "runs.jsonl"))
    assert (ref_a.toggles.act_ckpt_offload, ref_a.toggles.tiled_mlp) == (False, False)
    assert (candidate.toggles.act_ckpt_offload, candidate.toggles.tiled_mlp) == (True, True)
    assert "--tiled-mlp: 2 MLP(s) run through TiledMLP" in candidate.notes
    assert candidate.parity.verdict == "same" and candidate.parity.max_abs_diff < 1e-5
