"""`dsx sweep` as issue 16 has it, without launching anything: the --offload-ratio axis, the default search when no
axis is given (its space, the grad-accum it picks, its pruning by GPU, host and NVMe fit), the training semantics it
keeps, the ETA on every trial line and the best configuration it ends with. Plans are for the H100 kind
(--gpu-kind h100-80gb) and its 125 GiB host (--host-memory), so they hold on any machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ROOT
from dsx.cli.sweep import command as sweep_command
from dsx.run import resolve_trial
from dsx.sweep import Configuration, SweepSpec, plan, run_request, sweep_configurations
from dsx.sweep.best import best_lines
from dsx.sweep.eta import Eta
from dsx.sweep.space import GRAD_ACCUM_CHOICES, choose_grad_accum, default_configurations, partial_ratios
from dsx.units import GIB

H100 = ["--gpu-kind", "h100-80gb", "--host-memory", "125GiB"]


def dry_run(tmp_path: Path, *args: str) -> list[str]:
    out = CliRunner().invoke(sweep_command, [*args, "--dry-run", "--results", str(tmp_path / "r.jsonl")])
    assert out.exit_code == 0, out.output
    assert not (tmp_path / "r.jsonl").exists()
    return out.output.splitlines()


def planned(lines: list[str]) -> list[str]:
    return [line for line in lines if line[:4].strip().rstrip(".").isdigit()]


def running(lines: list[str]) -> list[str]:
    return [line.split("  (")[0].split(". ", 1)[1] for line in planned(lines) if "(skipped" not in line]


def default_spec(model: str, **changes) -> SweepSpec:
    base = dict(model=model, zero=[1, 2, 3], offload=["none"], search="default",
                grad_accum_choices=GRAD_ACCUM_CHOICES, host_memory=125 * GIB, mb_max=1024)
    return SweepSpec(**{**base, **changes})


# ------------------------------------------------------------------------------------------ --offload-ratio


def test_an_offload_ratio_applies_to_the_cpu_offload_points_only():
    spec = SweepSpec(model="gpt2-tiny", zero=[2, 3], offload=["none", "cpu"], offload_ratio=[0.5, None])
    assert [c.label for c in sweep_configurations(spec)] == ["z2 bf16", "z2 off=cpu:0.5 bf16", "z2 off=cpu bf16",
                                                        "z3 bf16", "z3 off=cpu:0.5 bf16", "z3 off=cpu bf16"]


def test_a_partial_ratio_below_zero3_is_an_impossible_point_with_deepspeeds_reason():
    assert Configuration(2, "cpu", "none", "bf16", False, False, None, offload_ratio=0.5).problem(None) == (
        "partial optimizer offload (--offload-ratio below 1) needs ZeRO-3 (DeepSpeed: 'Partial offloading only "
        "supported for ZeRO Stage 3.')")


def test_the_ratio_reaches_the_deepspeed_config_and_the_command_that_repeats_the_trial():
    spec = SweepSpec(model="llama-tiny", zero=[3], offload=["cpu"], offload_ratio=[0.7])
    (configuration,) = sweep_configurations(spec)
    request = run_request(spec, configuration, 2, "grow")
    trial = resolve_trial(request)
    assert trial.ds_config["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True,
                                                                         "ratio": 0.7}
    assert request.command[request.command.index("--ds-set") + 1] == "zero_optimization.offload_optimizer.ratio=0.7"
    assert configuration.as_dict()["offload_ratio"] == 0.7
    assert "offload_ratio" not in sweep_configurations(SweepSpec(model="gpt2-tiny", zero=[3], offload=["cpu"]))[0].as_dict()


def test_no_comm_log_reaches_every_trial_and_its_reproduce_line():
    quiet = SweepSpec(model="gpt2-tiny", zero=[3], offload=["none"], comm_log=False)
    (configuration,) = sweep_configurations(quiet)
    request = run_request(quiet, configuration, 2, "grow")
    assert request.comm_log is False and "--no-comm-log" in request.command
    logged = SweepSpec(model="gpt2-tiny", zero=[3], offload=["none"])
    assert "--no-comm-log" not in run_request(logged, configuration, 2, "grow").command
    assert quiet.sweep_id() != logged.sweep_id()


def test_offload_ratio_alone_means_cpu_offload(tmp_path):
    lines = dry_run(tmp_path, "--zero", "3", "--offload-ratio", "0.5,1", "--micro-batch", "1")
    assert planned(lines) == ["  1. z3 off=cpu:0.5 bf16", "  2. z3 off=cpu bf16"]


@pytest.mark.parametrize("args, message", [
    (["--offload-ratio", "0"], "--offload-ratio: 0 is out of range (above 0, at most 1: the share of the optimizer "
                               "offloaded to the CPU)"),
    (["--offload-ratio", "1.5"], "--offload-ratio: 1.5 is out of range (above 0, at most 1: the share of the "
                                 "optimizer offloaded to the CPU)"),
    (["--offload-ratio", "half"], "--offload-ratio: 'half' is not a number"),
    (["--offload", "none", "--offload-ratio", "0.5"], "--offload-ratio applies to CPU optimizer offload: add cpu to "
                                                      "--offload none"),
])
def test_bad_offload_ratios_are_refused_with_the_reason(tmp_path, args, message):
    out = CliRunner().invoke(sweep_command, [*args, "--results", str(tmp_path / "r.jsonl")])
    assert out.exit_code == 2, out.output
    assert out.output.splitlines()[-1] == f"Error: {message}"


# ------------------------------------------------------------------------------------------ the default search


def test_partial_ratios_are_one_per_split_of_the_sub_groups_the_largest_of_each():
    assert partial_ratios(7) == [0.8, 0.7, 0.5, 0.4, 0.2, 0.1]  # llama-7b on one GPU: 2 of 7 on the GPU at 0.7
    assert partial_ratios(2) == [0.5]
    assert partial_ratios(1) == []  # one sub-group: any ratio offloads all of it or none


def test_the_default_space_is_zero_by_offload_by_checkpointing_by_compile_with_the_models_ratios():
    configurations = default_configurations(default_spec("llama-7b"))
    assert len(configurations) == (3 * 2 + 6) * 2 * 2
    assert {c.offload_ratio for c in configurations if c.zero == 3} == {None, 0.8, 0.7, 0.5, 0.4, 0.2, 0.1}
    assert {(c.zero, c.offload, c.offload_ratio) for c in configurations if c.zero < 3} == {
        (1, "none", None), (1, "cpu", None), (2, "none", None), (2, "cpu", None)}
    assert {(c.act_ckpt, c.compile) for c in configurations} == {(False, False), (False, True), (True, False),
                                                                 (True, True)}
    assert {c.grad_accum for c in configurations} == {None}  # the plan picks it


def test_the_default_search_keeps_what_is_trained_as_the_user_gave_it():
    """Every configuration of the default search trains the same model the same way: the user's dropout (--set),
    clipping and optimizer (--ds-set, --optimizer, --lr) and precision; only how it runs differs."""
    spec = default_spec("gpt2-tiny", overrides={"resid_pdrop": 0.0}, optimizer="Lion", lr=3e-4, precision=["fp16"],
                        ds_sets=("gradient_clipping=0.5",))
    for configuration in sweep_configurations(spec):
        trial = resolve_trial(run_request(spec, configuration, 1, "fixed"))
        assert trial.resolved.overrides == {"resid_pdrop": 0.0}
        assert trial.ds_config["gradient_clipping"] == 0.5 and trial.ds_config["fp16"]["enabled"] is True
        assert trial.ds_config["optimizer"] == {"type": "Lion", "params": {"lr": 3e-4}}


def test_without_an_axis_and_with_a_calibrated_gpu_kind_the_default_search_runs(tmp_path):
    lines = dry_run(tmp_path, "--model", "gpt2-tiny", *H100)
    assert lines[1] == ("no axis given: the default search (dsx estimate on h100-80gb: ZeRO 1-3 x offload "
                        "none/partial/full x checkpointing x compile at the grad-accum (1/2/4/8/16) and the "
                        "micro-batch it predicts fastest; the model, precision, optimizer and --set/--ds-set as "
                        "given)")
    assert len(planned(lines)) == 24  # gpt2-tiny is one sub-group: no partial ratio
    # the fastest first; ZeRO-2 runs as ZeRO-1 on one GPU (twins: one of each pair runs), ZeRO-3 predicted far slower
    assert running(lines)[0] == "z1 bf16 compile ga16"
    assert all(label.startswith("z1 ") for label in running(lines))
    assert any(line.endswith(". z2 bf16 compile ga16  (skipped: predicted the same as z1 bf16 compile ga16 (same "
                             "largest micro-batch and tokens/s): the default search runs one of them (--no-prune runs "
                             "both))") for line in lines)


def test_under_max_global_batch_the_default_search_plans_within_the_cap(tmp_path):
    """The grad-accum is no longer the estimate's pick but the cap's share: the plan starts no configuration above
    the cap (gpt2-tiny fits far more than 6 sequences on an H100)."""
    lines = dry_run(tmp_path, "--model", "gpt2-tiny", "--max-global-batch", "6", *H100)
    assert "compile at grad-accum up to the global batch of 6 and the micro-batch it predicts fastest" in lines[1]
    assert planned(lines)[0].startswith("  1. z1 bf16 compile  (start at micro-batch 6, predicted ")


def test_an_axis_given_runs_its_grid_not_the_default_search(tmp_path):
    lines = dry_run(tmp_path, "--model", "gpt2-tiny", "--zero", "2", *H100)
    assert planned(lines) == ["  1. z2 bf16  (start at micro-batch 8, predicted 170,490 tokens/s)"]
    assert not any(line.startswith("no axis given") for line in lines)


def test_several_precisions_are_an_axis_too(tmp_path):
    lines = dry_run(tmp_path, "--model", "gpt2-tiny", "--precision", "bf16,fp32", "--micro-batch", "1", *H100)
    assert sorted(line.split("  (")[0].split(". ")[1] for line in planned(lines)) == [
        "z1 bf16", "z1 fp32", "z2 bf16", "z2 fp32", "z3 bf16", "z3 fp32"]
    assert not any(line.startswith("no axis given") for line in lines)


def test_without_dsx_estimate_no_axis_means_the_plain_grid(tmp_path):
    lines = dry_run(tmp_path, "--model", "gpt2-tiny", "--no-prune")
    assert lines[1] == ("no axis given, but the default search needs dsx estimate (a calibrated GPU, or --gpu-kind, and "
                        "no --no-prune): running the grid --zero 1,2,3 instead")
    assert planned(lines) == ["  1. z1 bf16", "  2. z2 bf16", "  3. z3 bf16"]


@pytest.mark.slow  # seconds of estimates / subprocesses: out of the fast tier
def test_llama_7b_on_the_h100_host_runs_the_partial_offload_configurations_predicted_fastest(tmp_path):
    """Issue 16's machine: 80 GB GPU, 125 GiB host. Without offload nothing fits the GPU, full offload does not fit
    the host; of the partial ratios that fit both, those within --keep-within of the fastest run, fastest predicted
    first (ratio 0.5 first, as measured: bench/largest/h100/llama7b.jsonl; 0.8 is predicted 15% slower)."""
    lines = dry_run(tmp_path, "--model", "llama-7b", "--mb-max", "1024", *H100)
    assert running(lines) == ["z3 off=cpu:0.5 bf16 ckpt ga8", "z3 off=cpu:0.7 bf16 ckpt ga4"]
    skipped = {line.split(". ", 1)[1].split("  (skipped: ")[0]: line.split("  (skipped: ")[1][:-1]
               for line in planned(lines) if "(skipped" in line}
    assert skipped["z3 off=cpu bf16 ckpt ga2"] == ("predicted not to fit: host memory needs 129.7 GiB (1 rank x "
                                                    "129.71 GiB), has 125.0 GiB (--no-prune runs it)")
    assert skipped["z2 bf16 ga1"].startswith("predicted not to fit: 142.3 GiB at micro-batch 1, 79.2 GiB available")
    assert len(planned(lines)) == 48


def test_the_grad_accum_is_the_smallest_within_two_percent_of_the_best_with_steps_under_thirty_seconds():
    assert choose_grad_accum({1: (100.0, 1.0), 2: (120.0, 2.0), 4: (130.0, 4.0), 8: (131.0, 8.0)}) == 4
    assert choose_grad_accum({1: (100.0, 20.0), 2: (120.0, 40.0)}) == 1  # 2 would make a 40 s step
    assert choose_grad_accum({2: (100.0, 40.0), 4: (110.0, 80.0)}) == 2  # none under the limit: the smallest


def test_the_plan_gives_each_default_configuration_its_grad_accum():
    spec = default_spec("gpt2-xl")
    configurations = [c for c in sweep_configurations(spec) if (c.zero, c.offload, c.act_ckpt, c.compile) ==
                      (1, "none", False, True)]
    (item,) = plan(spec, configurations, "h100-80gb")
    assert (item.configuration.label, item.start) == ("z1 bf16 compile ga8", 18)


# ------------------------------------------------------------------------------------------ progress and the end


def test_the_eta_is_the_trials_left_times_the_mean_trial_time():
    eta = Eta(runnable=3)
    eta.configuration_started()
    assert eta.text() == "ETA after the first trial that runs (about 9 trial(s) left, 0 of 3 configuration(s) done)"
    eta.trial_done(60.0, ran=True)
    eta.trial_done(0.1, ran=False)  # a row an earlier run left: no time, not in the mean
    assert eta.trials_left() == 2 * 3 + 1 and eta.seconds_left() == 7 * 60.0
    eta.configuration_started()  # the first configuration took 2 trials
    eta.trial_done(120.0, ran=True)
    assert eta.trials_left() == 1 * 2 + 1 and eta.seconds_left() == 3 * 90.0
    assert eta.text() == "ETA ~4 min (about 3 trial(s) left, 1 of 3 configuration(s) done)"


def test_a_sweep_ends_with_its_best_row_its_dsx_run_command_and_its_config_as_json():
    rows = ROOT / "tests/fixtures/rows/cpu_sweep.jsonl"
    lines = best_lines(rows, "01d63980066bcb88")
    assert lines[1] == "best configuration of sweep 01d63980066bcb88 (as dsx report --best picks it):"
    assert lines[2] == "best: run c2fe308e (gpt2-tiny vocab_size=50000, z3 bf16 ckpt, micro-batch 5, CPU)"
    assert lines[4].startswith("  reproduce: dsx run --model gpt2-tiny --set vocab_size=50000 --seq-len 128 --zero 3 ")
    config = json.loads(lines[-1])
    assert config["zero_optimization"]["stage"] == 3 and config["train_micro_batch_size_per_gpu"] == 5
    assert best_lines(rows, "another sweep") == []


def test_the_default_search_takes_the_tiled_loss_where_only_it_fits(tmp_path):
    """llama-1b at 262,144 tokens: its plain loss's fp32 logits (128 GiB) fit no configuration, the tiled loss's do."""
    lines = dry_run(tmp_path, "--model", "llama-1b", "--seq-len", "262144", "--set", "max_position_embeddings=262144",
                    "--mb-max", "1024", *H100)
    assert lines[1].endswith(
        "; --loss tiled: with the plain loss no configuration is predicted to fit at micro-batch 1 (closest, z1 "
        "off=cpu bf16 ckpt compile: GPU memory needs 290.30 GiB (per GPU: peak allocated + CUDA context + allocator "
        "headroom), has 79.18 GiB), with the tiled loss one is")
    assert "(start at micro-batch 1, predicted" in planned(lines)[0]


def test_the_default_search_keeps_the_plain_loss_where_it_fits_or_is_asked_for(tmp_path):
    assert "--loss tiled" not in dry_run(tmp_path, "--model", "llama-1b", "--seq-len", "2048", *H100)[1]
    assert "--loss tiled" not in dry_run(tmp_path, "--model", "llama-1b", "--seq-len", "262144", "--set",
                                         "max_position_embeddings=262144", "--loss", "plain", *H100)[1]
