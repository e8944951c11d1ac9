"""--kernels liger and --fp8: refused where they cannot apply, recorded and repeated where they can
(dsx.run.kernels; the kernels themselves run on GPU hosts only: bench/kernels)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dsx.cli import cli
from dsx.run import RunRefused
from dsx.run.kernels import KernelPlan, kernel_plan, kernel_toggles, liger_chunk_tokens


class _Request:
    def __init__(self, kernels="none", fp8="none", tiled_mlp=False, compile=False, loss="plain"):
        self.kernels, self.fp8, self.tiled_mlp, self.compile, self.loss = kernels, fp8, tiled_mlp, compile, loss


def _plan(model="llama-1b", kernels="none", fp8="none", zero=2, device="cuda", sequence=None, tiled=False,
          pipeline=None, tiled_mlp=False, compile=False, loss="plain"):
    from dsx.models import resolve_model

    notes: list[str] = []
    request = _Request(kernels, fp8, tiled_mlp, compile, "tiled" if tiled else loss)
    plan = kernel_plan(request, resolve_model(model), device, zero, pipeline, sequence, notes, check_installed=False)
    return plan, notes


def test_the_fused_loss_alone_is_ligers_loss_without_its_other_kernels_for_any_causal_lm():
    plan, notes = _plan(model="gpt2", loss="fused")
    assert plan == KernelPlan(liger=False, fused_loss=True, fp8=None)
    assert notes == ["kernels: Liger's fused linear cross-entropy as the loss (--loss fused)"]
    assert kernel_toggles(plan) == {"kernels": None, "liger_fused_loss": True, "fp8": None}


@pytest.mark.parametrize("kwargs, message", [
    ({"device": "cpu"}, "--loss fused needs a CUDA GPU: Liger's fused linear cross-entropy is a Triton kernel "
                        "(--loss tiled computes the same loss without the whole logits on any device)"),
    ({"zero": 3}, "--loss fused at ZeRO-3: the head's weight is partitioned and Liger reads it outside the head's "
                  "forward; use --loss tiled (it calls the head tile by tile)"),
    ({"sequence": 2}, "--loss fused with --sequence-parallel: Ulysses computes the loss from its shard's logits; use "
                      "--loss tiled")])
def test_the_fused_loss_is_refused_where_it_cannot_apply(kwargs, message):
    with pytest.raises(RunRefused) as refused:
        _plan(loss="fused", **kwargs)
    assert str(refused.value) == message


def test_the_fused_loss_is_planned_with_compile():
    plan, _ = _plan(loss="fused", compile=True)
    assert plan == KernelPlan(liger=False, fused_loss=True, fp8=None)


def test_nothing_asked_is_no_plan():
    assert _plan() == (None, [])


def test_liger_on_llama_takes_the_loss_too():
    plan, notes = _plan(kernels="liger")
    assert plan == KernelPlan(liger=True, fused_loss=True, fp8=None)
    assert notes == ["kernels: Liger: RoPE, RMSNorm, SwiGLU, fused linear cross-entropy"]
    assert kernel_toggles(plan) == {"kernels": "liger", "liger_fused_loss": True, "fp8": None}


@pytest.mark.parametrize("zero, sequence, tiled, why", [
    (3, None, False, "ZeRO-3 partitions the head weight it reads outside the head's forward"),
    (2, None, True, "--loss tiled owns the loss"),
    (2, 2, False, "Ulysses computes the loss from its shard's logits")])
def test_liger_leaves_the_loss_where_something_else_owns_it(zero, sequence, tiled, why):
    plan, notes = _plan(kernels="liger", zero=zero, sequence=sequence, tiled=tiled)
    assert plan.liger and not plan.fused_loss
    assert notes[0] == f"--kernels liger: without its fused linear cross-entropy ({why})"


@pytest.mark.parametrize("kwargs, message", [
    ({"model": "gpt2", "kernels": "liger"}, "--kernels liger: Liger Kernel patches Llama-family models here; gpt2 "
                                            "is a gpt2 model (Liger 0.8.5 has no gpt2 support)"),
    ({"fp8": "rowwise", "zero": 3}, "--fp8 rowwise with ZeRO-3: not supported by dsx (torchao's float8 all-gather "
                                    "is FSDP2's; ZeRO-3 partitions the weights Float8Linear casts); use ZeRO 0-2"),
    ({"kernels": "liger", "device": "cpu"}, "--kernels liger needs a CUDA GPU: Liger's kernels are Triton kernels"),
    ({"fp8": "tensorwise", "device": "cpu"}, "--fp8 tensorwise needs an FP8 GPU (compute capability 8.9 or more: "
                                             "H100, H200, L4, L40)"),
    ({"kernels": "liger", "tiled_mlp": True}, "--kernels liger replaces the Llama MLP with its own SwiGLU, which "
                                              "--tiled-mlp would bypass: drop one"),
    ({"kernels": "liger", "compile": True},
     "--kernels liger with --compile: not supported by dsx (Liger 0.8.5's RMSNorm inside torch 2.11's compiled step "
     "stops it with a CUDA illegal memory access, on an H100 and an H200; its RoPE and SwiGLU were no faster "
     "compiled: bench/kernels/README.md); for Liger's fused loss with --compile use --loss fused, or run Liger eager"),
    ({"kernels": "liger", "fp8": "tensorwise", "pipeline": object()},
     "--kernels liger and --fp8 tensorwise with pipeline stages: not supported by dsx; drop one"),
])
def test_what_cannot_apply_is_refused_with_its_reason(kwargs, message):
    with pytest.raises(RunRefused) as caught:
        _plan(**kwargs)
    assert str(caught.value) == message


def test_dsx_run_on_cpu_refuses_in_one_line():
    result = CliRunner().invoke(cli, ["run", "--model", "llama-tiny", "--kernels", "liger", "--dry-run"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == ["Error: --kernels liger needs a CUDA GPU: Liger's kernels are "
                                                  "Triton kernels"]


def test_liger_chunks_its_loss_as_liger_does():
    # ceil(128256 / 2048) = 63 words per hidden unit; 16,384 tokens / 63 -> 261 -> 512
    assert liger_chunk_tokens(128256, 2048, 16384) == 512
    assert liger_chunk_tokens(32000, 4096, 4096) == 512 and liger_chunk_tokens(50000, 64, 1) == 1


def test_the_estimate_prices_ligers_loss_a_chunk_at_a_time():
    args = ["estimate", "--model", "llama-1b", "--zero", "2", "--micro-batch", "4", "--gpu-kind", "h100-80gb"]
    plain = CliRunner().invoke(cli, args)
    liger = CliRunner().invoke(cli, [*args, "--kernels", "liger"])
    assert plain.exit_code == liger.exit_code == 0, plain.output + liger.output
    assert "loss gradients" in plain.output and "loss tile" not in plain.output
    assert "loss tile" in liger.output and "note: kernels: Liger: RoPE, RMSNorm, SwiGLU, fused linear" in liger.output


def test_the_estimate_prices_the_fused_loss_a_chunk_at_a_time_for_any_causal_lm():
    args = ["estimate", "--model", "gpt2", "--zero", "2", "--micro-batch", "4", "--gpu-kind", "h100-80gb"]
    plain = CliRunner().invoke(cli, args)
    fused = CliRunner().invoke(cli, [*args, "--loss", "fused"])
    assert plain.exit_code == fused.exit_code == 0, plain.output + fused.output
    assert "loss tile" in fused.output and "loss tile" not in plain.output
    assert "note: kernels: Liger's fused linear cross-entropy as the loss (--loss fused)" in fused.output


def _tokens_per_s(*extra):
    args = ["estimate", "--model", "llama-1b", "--zero", "1", "--micro-batch", "8", "--gpu-kind", "h100-80gb",
            "--json", *extra]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["tokens_per_s"]


def test_the_estimate_prices_float8_slower_eager_and_faster_compiled_as_measured():
    """bench/kernels: tensorwise float8 ran at half the speed eager and 1.05-1.08x compiled (llama-1b, one H100)."""
    assert _tokens_per_s("--fp8", "tensorwise") < 0.6 * _tokens_per_s()
    assert 1.03 < _tokens_per_s("--fp8", "tensorwise", "--compile") / _tokens_per_s("--compile") < 1.12


def test_the_estimate_prices_liger_near_its_measured_gain():
    """bench/kernels: Liger eager 1.35x the stock kernels in alternating pairs (the estimate: the same compute factor
    on its own step split)."""
    assert 1.3 < _tokens_per_s("--kernels", "liger") / _tokens_per_s() < 1.45


def test_the_kernels_reach_the_command_that_repeats_the_run():
    from dsx.run import RunRequest
    from dsx.run.command_line import run_command

    argv = run_command(RunRequest(model="llama-1b", kernels="liger", fp8="rowwise"))
    assert argv[argv.index("--kernels") + 1] == "liger" and argv[argv.index("--fp8") + 1] == "rowwise"
    assert "--kernels" not in run_command(RunRequest(model="llama-1b", kernels="none"))


def test_the_default_search_runs_each_point_with_each_kernel_liger_only_eager_and_float8_only_below_zero_3():
    from dsx.sweep import SweepSpec
    from dsx.sweep.space import default_configurations

    spec = SweepSpec(model="llama-tiny", zero=[1], offload=["none"], kernels=[None, "liger"],
                     fp8=[None, "tensorwise"])
    points = default_configurations(spec)
    assert {(p.kernels, p.fp8) for p in points if p.zero != 3} == {(None, None), ("liger", None),
                                                                   (None, "tensorwise"), ("liger", "tensorwise")}
    assert {p.fp8 for p in points if p.zero == 3} == {None}
    assert {p.kernels for p in points if p.compile} == {None}
    liger = next(p for p in points if p.kernels and p.fp8 and p.zero == 1 and not p.act_ckpt and not p.compile
                 and p.offload == "none")
    assert liger.label == "z1 bf16 liger fp8=tensorwise"
    assert liger.as_dict()["kernels"] == "liger" and "fp8" not in points[0].as_dict()


def test_a_kernel_axis_word_dsx_does_not_know_is_refused():
    result = CliRunner().invoke(cli, ["sweep", "--model", "llama-tiny", "--zero", "2", "--fp8", "none,e5m2",
                                      "--dry-run"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == ("Error: --fp8: unknown word 'e5m2' (known: none, tensorwise, "
                                                      "rowwise)")


def test_on_cpu_the_sweep_lists_the_kernel_points_as_refused(tmp_path):
    result = CliRunner().invoke(cli, ["sweep", "--model", "llama-tiny", "--zero", "2", "--micro-batch", "1",
                                      "--kernels", "none,liger", "--dry-run", "--results", str(tmp_path / "r.jsonl")])
    assert result.exit_code == 0, result.output
    assert "z2 bf16 liger  (skipped: refused: --kernels liger needs a CUDA GPU: Liger's kernels are Triton " \
           "kernels)" in result.output


def test_float8_is_judged_against_a_stated_one_percent_of_the_loss():
    from dsx.parity import FP8_FLOOR, judge

    reference = [10.0, 9.0, 8.0]
    assert FP8_FLOOR == 0.01
    inside = judge([10.0, 9.05, 8.07], reference, reference, "bf16", fp8=True)
    assert inside.verdict == "same" and "float8 matmuls" in inside.rule
    assert judge([10.0, 9.05, 8.07], reference, reference, "bf16").verdict == "differs"
    outside = judge([10.0, 9.0, 8.2], reference, reference, "bf16", fp8=True)
    assert outside.verdict == "differs" and outside.reason == "step 2: |8.2 - 8| = 0.2 > 0.08"


def test_report_labels_tell_the_kernel_rows_apart():
    from conftest import ROOT
    from dsx.report.facts import derived_label
    from dsx.results import read_rows

    rows = read_rows(ROOT / "bench/kernels/h100/kernels.jsonl")  # one H100: stock, --kernels liger, --fp8 tensorwise
    assert [derived_label(r) for r in rows] == ["z1 bf16", "z1 bf16 liger", "z1 bf16 fp8=tensorwise"]
    assert [r["toggles"]["liger_fused_loss"] for r in rows] == [False, True, False]
