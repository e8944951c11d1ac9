"""`dsx sweep` without launching anything: the grid, the micro-batch search, resume bookkeeping, the lock, the CLI's
refusals. The real sweeps on CPU ranks are in test_sweep_cpu.py."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
import types
from dataclasses import replace
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from dsx.cli.options import SIZE
from dsx.cli.sweep import command as sweep_command
from dsx.models import resolve_model
from dsx.processes import NotStopped
from dsx.results import append_row
from dsx.sweep import (
    Configuration, SweepError, SweepLock, SweepSpec, done_rows, fixed_micro_batches, flat_stop, reap_orphans,
    run_request, search_micro_batch, sweep, sweep_configurations,
)
from dsx.sweep.eta import Eta
from dsx.sweep.search import search_goes_on
from dsx.sweep.trials import cap_filling_micro_batches


def fits_below(limit: int, fail_at: int | None = None):
    """A probe whose trials fit up to `limit` (and fail, not OOM, at `fail_at`); records what was asked."""
    asked = []

    def probe(mb, search):
        asked.append((mb, search))
        if mb == fail_at:
            return "fail"
        return "fit" if mb <= limit else "oom"
    probe.asked = asked
    return probe


# ------------------------------------------------------------------------------------------ micro-batch search


def test_auto_grows_by_doubling_then_bisects_to_the_exact_boundary():
    probe = fits_below(20)
    result = search_micro_batch(probe, start=1, maximum=1024)
    assert probe.asked == [(1, "grow"), (2, "grow"), (4, "grow"), (8, "grow"), (16, "grow"), (32, "grow"),
                           (24, "bisect"), (20, "bisect"), (22, "bisect"), (21, "bisect")]
    assert (result.largest_fit, result.first_oom, result.stopped) == (20, 21, None)


def test_auto_with_a_tolerance_stops_bisecting_when_the_gap_is_small_enough():
    probe = fits_below(20)
    result = search_micro_batch(probe, start=4, maximum=256, tolerance=0.25)
    assert [mb for mb, _ in probe.asked] == [4, 8, 16, 32, 24, 20]
    assert (result.largest_fit, result.first_oom) == (20, 24)


def test_auto_searches_below_the_start_when_the_start_does_not_fit():
    probe = fits_below(2)
    result = search_micro_batch(probe, start=8, maximum=64)
    assert [mb for mb, _ in probe.asked] == [8, 4, 2, 3]
    assert (result.largest_fit, result.first_oom) == (2, 3)


def test_auto_reports_that_nothing_fits_when_micro_batch_1_runs_out_of_memory():
    result = search_micro_batch(fits_below(0), start=4, maximum=64)
    assert (result.largest_fit, result.first_oom) == (None, 1)
    assert [mb for mb, _ in result.tried] == [4, 2, 1]


def test_auto_stops_at_mb_max_and_says_the_boundary_lies_above():
    result = search_micro_batch(fits_below(10_000), start=1, maximum=6)
    assert [mb for mb, _ in result.tried] == [1, 2, 4, 6]
    assert result.largest_fit == 6 and result.first_oom is None
    assert result.stopped == "--mb-max 6 fits; the out-of-memory boundary lies above it"


def test_a_trial_that_fails_for_another_reason_stops_the_search_of_its_configuration():
    result = search_micro_batch(fits_below(100, fail_at=8), start=1, maximum=1024)
    assert [mb for mb, _ in result.tried] == [1, 2, 4, 8]
    assert result.largest_fit == 4 and result.first_oom is None
    assert result.stopped == "micro-batch 8 failed (not out of memory); search stopped"


def test_a_fixed_list_runs_in_order_and_skips_what_is_above_an_oom():
    probe = fits_below(8, fail_at=2)
    result = fixed_micro_batches(probe, [16, 1, 2, 8, 32, 12])
    assert probe.asked == [(1, "fixed"), (2, "fixed"), (8, "fixed"), (12, "fixed")]
    assert (result.largest_fit, result.first_oom) == (8, 12)
    assert result.stopped == "micro-batch 12 ran out of memory; skipped 16, 32"


def test_a_fixed_list_reads_a_probe_that_also_reports_tokens_per_s():
    # the sweep's probe answers (outcome, tokens/s): the list's largest fit and OOM come out as with the bare word
    answers = {1: ("fit", 100.0), 2: ("fit", 180.0), 4: ("oom", None), 8: ("oom", None)}
    result = fixed_micro_batches(lambda mb, search: answers[mb], [2, 8, 1, 4])
    assert (result.largest_fit, result.first_oom) == (2, 4)
    assert result.tried == [(1, "fit"), (2, "fit"), (4, "oom")] and result.speeds == {1: 100.0, 2: 180.0}


# ------------------------------------------------------------------------------------------ the grid


def spec(**changes) -> SweepSpec:
    base = dict(model="gpt2-tiny", zero=[1, 2, 3], offload=["none", "cpu"])
    base.update(changes)
    return SweepSpec(**base)


def test_the_grid_is_the_product_of_the_axes_in_the_order_given():
    labels = [c.label for c in sweep_configurations(spec(act_ckpt=[False, True]))]
    assert labels == ["z1 bf16", "z1 bf16 ckpt", "z1 off=cpu bf16", "z1 off=cpu bf16 ckpt", "z2 bf16",
                      "z2 bf16 ckpt", "z2 off=cpu bf16", "z2 off=cpu bf16 ckpt", "z3 bf16", "z3 bf16 ckpt",
                      "z3 off=cpu bf16", "z3 off=cpu bf16 ckpt"]


def test_vary_takes_every_combination_or_one_key_at_a_time():
    vary = {"n_layer": [1, 4], "seq_len": [32]}
    product = [c.vary for c in sweep_configurations(spec(zero=[2], offload=["none"], vary=vary))]
    assert product == [(("n_layer", 1), ("seq_len", 32)), (("n_layer", 4), ("seq_len", 32))]
    one = [c.vary for c in sweep_configurations(spec(zero=[2], offload=["none"], vary=vary, one_at_a_time=True))]
    assert one == [(), (("n_layer", 1),), (("n_layer", 4),), (("seq_len", 32),)]


@pytest.mark.parametrize("configuration, problem", [
    (Configuration(0, "cpu", "none", "bf16", False, False, None), "optimizer offload needs ZeRO 1-3"),
    (Configuration(2, "cpu", "cpu", "bf16", False, False, None), "parameter offload needs ZeRO-3"),
    (Configuration(3, "nvme", "none", "bf16", False, False, None), "NVMe offload needs --nvme-path"),
    (Configuration(3, "cpu", "cpu", "bf16", True, True, 2), None),
])
def test_impossible_points_of_the_grid_are_named(configuration, problem):
    assert configuration.problem(nvme_path=None) == problem


def test_the_sweep_id_depends_on_what_decides_the_trials_only():
    a = spec()
    assert a.sweep_id() == spec().sweep_id()
    assert a.sweep_id() == spec(results="elsewhere.jsonl", trial_timeout_s=5).sweep_id()
    assert a.sweep_id() != spec(steps=9).sweep_id() != spec(zero=[3]).sweep_id()


def test_a_trial_is_a_dsx_run_request_whose_command_repeats_it():
    s = spec(vary={"n_layer": [3]}, memory_cap=1 << 30, ds_sets=("steps_per_print=5",), steps=3, warmup=1,
             results="r.jsonl")
    configuration = sweep_configurations(s)[-1]
    request = run_request(s, configuration, micro_batch=8, search="bisect")
    assert request.overrides == {"n_layer": 3} and request.config_flags["micro_batch"] == 8
    assert request.sweep["label"] == "z3 off=cpu bf16 n_layer=3" and request.sweep["search"] == "bisect"
    assert request.command == ["dsx", "run", "--model", "gpt2-tiny", "--set", "n_layer=3", "--zero", "3",
                               "--offload", "cpu", "--offload-params", "none", "--precision", "bf16",
                               "--micro-batch", "8", "--grad-accum", "1", "--ds-set", "steps_per_print=5",
                               "--steps", "3", "--warmup", "1", "--memory-cap", "1GiB", "--results", "r.jsonl"]


def test_the_printed_command_is_accepted_by_dsx_run(tmp_path):
    request = run_request(spec(results=str(tmp_path / "r.jsonl")), sweep_configurations(spec())[3], 4, "grow")
    out = subprocess.run([sys.executable, "-m", "dsx", *request.command[1:], "--dry-run"], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "micro-batch 4, grad-accum 1, bf16, model gpt2-tiny" in out.stdout


# ------------------------------------------------------------------------------------------ resume bookkeeping


def test_rows_that_count_as_done_are_ok_and_oom_and_also_failures_unless_retried(tmp_path):
    results = tmp_path / "r.jsonl"
    for key, status in [("a", "ok"), ("b", "oom"), ("c", "error"), ("d", "timeout"), (None, "ok")]:
        append_row(results, {"trial_key": key, "status": status})
    assert sorted(done_rows(results, retry_failed=False)) == ["a", "b", "c", "d"]
    assert sorted(done_rows(results, retry_failed=True)) == ["a", "b"]


def test_a_row_measured_on_another_gpu_does_not_stand_in_for_a_trial_here(tmp_path):
    """A results file carried from an H100 host to an H200 one (issue 30's pipe2, 2026-11-28): the same trial key,
    another GPU's speed; only the rows of this machine's GPU, and rows without one (CPU), count as done. A machine
    without a GPU (a head node launching onto a hostfile's GPU nodes) goes by the key alone."""
    results = tmp_path / "r.jsonl"
    for key, gpu in [("a", "NVIDIA H100 80GB HBM3"), ("b", "NVIDIA H200"), ("c", None)]:
        append_row(results, {"trial_key": key, "status": "ok", "gpu_name": gpu})
    elsewhere: list[str] = []
    assert sorted(done_rows(results, retry_failed=False, gpu_name="NVIDIA H200", elsewhere=elsewhere)) == ["b", "c"]
    assert elsewhere == ["NVIDIA H100 80GB HBM3"]
    assert sorted(done_rows(results, retry_failed=False, gpu_name=None)) == ["a", "b", "c"]


def test_a_second_sweep_on_the_same_results_file_is_refused_while_the_first_holds_it(tmp_path):
    first = SweepLock(tmp_path / "r.jsonl")
    assert first.acquire() is None
    with pytest.raises(SweepError) as caught:
        SweepLock(tmp_path / "r.jsonl").acquire()
    assert str(caught.value) == (f"another dsx sweep (pid {os.getpid()}) is writing to {tmp_path / 'r.jsonl'}; "
                                 "wait for it or use another --results")
    first.release()
    assert SweepLock(tmp_path / "r.jsonl").acquire() is None


def test_the_lock_tells_the_next_sweep_which_trial_a_killed_sweep_left_running(tmp_path):
    lock = SweepLock(tmp_path / "r.jsonl")
    lock.acquire()
    lock.write(pgid=4242, run_dir="/somewhere")
    os.close(lock.fd)  # what the kernel does when dsx is killed: the flock goes, the content stays
    assert SweepLock(tmp_path / "r.jsonl").acquire() == {"pid": os.getpid(), "pgid": 4242, "run_dir": "/somewhere"}


def test_a_sweep_whose_trial_outlived_its_kill_leaves_that_trial_in_the_lock_for_the_next_sweep(tmp_path):
    lock = SweepLock(tmp_path / "r.jsonl")
    lock.acquire()
    lock.write(pgid=4242, run_dir="/somewhere")
    lock.release(keep_trial=True)
    assert SweepLock(tmp_path / "r.jsonl").acquire() == {"pid": os.getpid(), "pgid": 4242, "run_dir": "/somewhere"}


def test_orphans_of_a_killed_trial_are_killed_by_process_group(tmp_path):
    script = tmp_path / "train_rank.py"  # named like dsx's rank entry point
    script.write_text("import time\ntime.sleep(120)\n")
    orphan = subprocess.Popen([sys.executable, str(script)], start_new_session=True)
    try:
        note = reap_orphans({"pgid": orphan.pid, "run_dir": "/x"})
        assert note == (f"stopped 1 process(es) of the trial a killed dsx sweep left running (process group "
                        f"{orphan.pid}, /x); that trial runs again")
        assert orphan.wait(timeout=10) == -signal.SIGKILL
    finally:
        if orphan.poll() is None:
            orphan.kill()


def test_a_process_group_that_is_not_a_dsx_trial_is_left_alone():
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        assert reap_orphans({"pgid": other.pid}) is None
        time.sleep(0.2)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def _run_folder(tmp_path, name: str) -> Path:
    folder = tmp_path / "r" / name
    folder.mkdir(parents=True)
    (folder / "plan.json").write_text("{}")
    (folder / "rank-0.json").write_text("{}")  # the orphaned rank finished and reported; its dsx was gone
    return folder


def test_the_folder_of_a_killed_sweeps_trial_without_a_row_is_removed_and_one_with_a_row_kept(tmp_path):
    """A sweep killed while a trial ran leaves that trial's folder without a row; the trial runs again, in a new
    folder, so the next sweep removes the old one (issue 21: run folders without rows piled up)."""
    results = tmp_path / "r.jsonl"
    unrecorded = _run_folder(tmp_path, "a1")
    assert reap_orphans({"pgid": None, "run_dir": str(unrecorded)}, results) == (
        f"removed {unrecorded}, the folder of a trial a killed dsx sweep left without a row; that trial runs again")
    assert not unrecorded.exists()
    recorded = _run_folder(tmp_path, "b2")  # dsx was killed after writing the row, before clearing the lock
    append_row(results, {"trial_key": "k", "status": "ok", "run_dir": str(recorded)})
    assert reap_orphans({"pgid": None, "run_dir": str(recorded)}, results) is None
    assert recorded.exists()
    assert reap_orphans({"pgid": None, "run_dir": str(tmp_path)}, results) is None  # not a run folder: kept
    assert tmp_path.exists()


def test_the_lock_names_the_trial_folder_of_a_sweep_killed_before_its_launcher_started(tmp_path):
    lock = SweepLock(tmp_path / "r.jsonl")
    lock.acquire()
    lock.write(pgid=None, run_dir="/somewhere")
    os.close(lock.fd)
    assert SweepLock(tmp_path / "r.jsonl").acquire() == {"pid": os.getpid(), "pgid": None, "run_dir": "/somewhere"}


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs /dev/shm")
def test_the_next_sweep_removes_buffers_of_a_killed_sweeps_trial_even_when_its_ranks_are_gone(tmp_path):
    from dsx import leftovers

    buffer = Path(f"/dev/shm/{leftovers.SHM_PREFIX}_{os.getuid()}_127.0.0.1_1_0")  # port 1: no real job's
    buffer.write_bytes(b"\0" * 4096)
    try:
        reap_orphans({"pgid": 999_999_999, "run_dir": None}, tmp_path / "r.jsonl")
        assert not buffer.exists()
    finally:
        buffer.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------ CLI


@pytest.mark.parametrize("text, size", [("1000", 1000), ("512MiB", 512 << 20), ("40GiB", 40 << 30),
                                        ("1.5GB", 1_500_000_000), ("2 KiB", 2048)])
def test_sizes_are_read_in_binary_and_decimal_units(text, size):
    assert SIZE.convert(text, None, None) == size


def test_a_size_that_is_not_one_is_refused():
    with pytest.raises(click.BadParameter) as caught:
        SIZE.convert("lots", None, None)
    assert caught.value.message == "'lots' is not a size (examples: 40GiB, 512MiB, 1.5GB, 1000000)"


@pytest.mark.parametrize("args, message", [
    (["--zero", "1,4"], "--zero: 4 is out of range (0-3)"),
    (["--zero", "1,,2"], "--zero '1,,2': give a comma-separated list, e.g. --zero 1,2,3"),
    (["--offload", "gpu"], "--offload: 'gpu' is not one of none, cpu, nvme"),
    (["--act-ckpt", "maybe"], "--act-ckpt: 'maybe' is not on/off"),
    (["--act-ckpt", "off,cpu"], "--act-ckpt: 'cpu' (DeepSpeed's CPU activation checkpointing) is for dsx config, for "
                                "models that call deepspeed.checkpointing; dsx's transformers models checkpoint with "
                                "gradient_checkpointing_enable: use on"),
    (["--gpu-kind", "h100-80gb", "--estimate-gpu", "a100"],
     "--gpu-kind h100-80gb and --estimate-gpu a100 conflict: --estimate-gpu is the old name of --gpu-kind; give one"),
    (["--gpu-kind", "a100"], "unknown --gpu-kind 'a100': kinds are h100-80gb, h200-141gb (--memory-cap SIZE "
                             "estimates a smaller GPU of that kind)"),
    (["--micro-batch", "4,x"], "--micro-batch: 'x' is not a whole number"),
    (["--vary", "n_layer"], "--vary 'n_layer': write KEY=V1,V2 (e.g. --vary n_layer=12,24)"),
    (["--vary", "n_layer=1", "--vary", "n_layer=2"], "--vary n_layer is given twice; list all its values in one --vary"),
    (["--one-at-a-time"], "--one-at-a-time needs at least one --vary KEY=V1,V2"),
    (["--zero", "0", "--offload", "cpu"], "no configuration can run: z0 off=cpu bf16: optimizer offload needs ZeRO 1-3"),
    (["--max-global-batch", "8", "--grad-accum", "2"],
     "--max-global-batch 8 derives each trial's grad-accum from its micro-batch: drop --grad-accum 2"),
    (["--seq-len", "4096"], "seq_len 4096 is longer than gpt2-tiny's n_positions=128: pass a shorter --seq-len, "
                            "or --set n_positions=4096 (adds learned position embeddings, so the parameter count "
                            "changes)"),
])
def test_bad_sweep_options_are_refused_with_the_reason(tmp_path, args, message):
    out = CliRunner().invoke(sweep_command, [*args, "--results", str(tmp_path / "r.jsonl")])
    assert out.exit_code == 2, out.output
    assert out.output.splitlines()[-1] == f"Error: {message}"
    assert not (tmp_path / "r.jsonl").exists()


def test_dry_run_lists_the_configurations_and_the_impossible_ones(tmp_path):
    out = CliRunner().invoke(sweep_command, ["--zero", "0,3", "--offload", "none,cpu", "--dry-run",
                                             "--results", str(tmp_path / "r.jsonl")])
    assert out.exit_code == 0, out.output
    assert [line for line in out.output.splitlines() if line[:4].strip().rstrip(".").isdigit()] == [
        "  1. z0 bf16", "  2. z0 off=cpu bf16  (skipped: optimizer offload needs ZeRO 1-3)", "  3. z3 bf16",
        "  4. z3 off=cpu bf16"]
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize("gpus, flags, noted", [("2", [], False), ("2", ["--warmup", "1"], True),
                                                ("2", ["--warmup", "1", "--no-comm-log"], False),
                                                ("1", ["--warmup", "1"], False)])
def test_a_sweep_over_several_ranks_says_when_the_comms_logger_would_time_its_trials(tmp_path, gpus, flags, noted):
    from dsx.cli.sweep import LOGGER_NOTE

    out = CliRunner().invoke(sweep_command, ["--zero", "1,3", "--gpus", gpus, *flags, "--dry-run",
                                             "--results", str(tmp_path / "r.jsonl")])
    assert out.exit_code == 0, out.output
    assert (LOGGER_NOTE in out.output.splitlines()) is noted


def _sweep_id(tmp_path, *flags: str) -> str:
    out = CliRunner().invoke(sweep_command, ["--zero", "1,3", *flags, "--dry-run", "--results", str(tmp_path / "r")])
    assert out.exit_code == 0, out.output
    return out.output.split("dsx sweep ", 1)[1].split(":", 1)[0]


@pytest.mark.parametrize("gpus", ["1", "2"])
def test_a_sweeps_trials_count_their_communication_unless_told_not_to(tmp_path, gpus):
    assert _sweep_id(tmp_path, "--gpus", gpus) == _sweep_id(tmp_path, "--gpus", gpus, "--comm-log")
    assert _sweep_id(tmp_path, "--gpus", gpus) != _sweep_id(tmp_path, "--gpus", gpus, "--no-comm-log")


def test_dry_run_with_a_calibrated_gpu_shows_the_estimated_plan(tmp_path):
    out = CliRunner().invoke(sweep_command, [
        "--model", "gpt2-xl", "--zero", "1,3", "--act-ckpt", "on", "--mb-max", "128", "--estimate-gpu", "h100-80gb",
        "--dry-run", "--results", str(tmp_path / "r.jsonl")])
    assert out.exit_code == 0, out.output
    assert [line for line in out.output.splitlines() if line[:4].strip().rstrip(".").isdigit()] == [
        "  1. z3 bf16 ckpt  (start at micro-batch 69, predicted 23,346 tokens/s)",
        "  2. z1 bf16 ckpt  (start at micro-batch 74, predicted 22,952 tokens/s)"]
    out = CliRunner().invoke(sweep_command, [
        "--model", "gpt2-xl", "--zero", "1", "--micro-batch", "8,16", "--estimate-gpu", "h100-80gb", "--dry-run",
        "--results", str(tmp_path / "r.jsonl")])
    assert "  1. z1 bf16  (micro-batch 8; 16 predicted not to fit; predicted up to 20,533 tokens/s)" in out.output
    assert not (tmp_path / "r.jsonl").exists()


def test_sweep_takes_gpu_kind_and_act_ckpt_words_as_dsx_estimate_does(tmp_path):
    out = CliRunner().invoke(sweep_command, [
        "--model", "gpt2-xl", "--zero", "1", "--act-ckpt", "none,on", "--mb-max", "128", "--gpu-kind", "h100-80gb",
        "--dry-run", "--results", str(tmp_path / "r.jsonl")])
    assert out.exit_code == 0, out.output
    assert [line.split("(")[0].strip() for line in out.output.splitlines()
            if line[:4].strip().rstrip(".").isdigit()] == ["1. z1 bf16 ckpt", "2. z1 bf16"]


UNBUILDABLE_AXIS = "--vary n_layer=6 cannot be built: unknown BertConfig key 'n_layer' for bert-base (nothing was run)"


def test_dry_run_stops_at_a_vary_axis_the_model_does_not_have(tmp_path):
    out = CliRunner().invoke(sweep_command, [
        "--model", "bert-base", "--zero", "2", "--micro-batch", "32", "--one-at-a-time", "--vary", "n_layer=6",
        "--dry-run", "--results", str(tmp_path / "r.jsonl")])
    assert out.exit_code == 2, out.output
    assert out.output.splitlines()[-1] == f"Error: {UNBUILDABLE_AXIS}"


def test_a_real_sweep_stops_at_a_vary_axis_the_model_does_not_have_before_any_trial(tmp_path):
    results = tmp_path / "r.jsonl"
    base = SweepSpec(model="bert-base", zero=[2], offload=["none"], micro_batch=[32], vary={"n_layer": [6]},
                     one_at_a_time=True, results=str(results), prune=False)
    with pytest.raises(SweepError) as caught:
        sweep(base, on_configuration=lambda index, configuration: pytest.fail("a configuration started"))
    assert str(caught.value) == UNBUILDABLE_AXIS
    assert not results.exists()


def test_a_vary_value_the_model_rejects_in_every_configuration_stops_the_sweep(tmp_path):
    out = CliRunner().invoke(sweep_command, ["--zero", "2", "--micro-batch", "1", "--vary", "n_head=3", "--vary",
                                             "n_layer=1,2", "--dry-run", "--results", str(tmp_path / "r.jsonl")])
    assert out.exit_code == 2, out.output
    assert out.output.splitlines()[-1] == (
        "Error: --vary n_head=3 cannot be built: gpt2-tiny: hidden size 64 is not a multiple of the 3 attention "
        "heads: change --set n_embd=... or --set n_head=... (nothing was run)")


def test_dry_run_lists_a_combination_the_model_rejects_as_skipped(tmp_path):
    out = CliRunner().invoke(sweep_command, ["--zero", "2", "--micro-batch", "1", "--vary", "n_embd=64,96",
                                             "--vary", "n_head=2,3", "--dry-run", "--results", str(tmp_path / "r.jsonl")])
    assert out.exit_code == 0, out.output
    assert ("  2. z2 bf16 n_embd=64 n_head=3  (skipped: refused: gpt2-tiny: hidden size 64 is not a multiple of the "
            "3 attention heads: change --set n_embd=... or --set n_head=...)") in out.output.splitlines()


def test_the_help_examples_are_sweeps_dsx_can_build(tmp_path):
    """Each example of `dsx sweep --help`, as a dry run: the help never shows an axis dsx would refuse."""
    help_text = CliRunner().invoke(sweep_command, ["--help"]).output.replace("\\\n", " ")
    examples = [line.split()[2:] for line in help_text.splitlines() if line.strip().startswith("dsx sweep")]
    assert len(examples) == 6
    for args in examples:
        model = args[args.index("--model") + 1] if "--model" in args else "gpt2-tiny"
        for key, _, value in (args[i + 1].partition("=") for i, arg in enumerate(args) if arg == "--vary"):
            resolve_model(model, {key: json.loads(value)})  # ModelError: the help shows an axis dsx cannot build
        out = CliRunner().invoke(sweep_command, [*args, "--dry-run", "--results", str(tmp_path / "r.jsonl")])
        assert out.exit_code == 0, (args, out.output)
        assert "skipped: refused" not in out.output, out.output


def test_sweep_rows_validate_as_run_rows():
    from dsx.results import SweepInfo

    info = SweepInfo(**run_request(spec(), sweep_configurations(spec())[0], 2, "grow").sweep)
    assert json.loads(info.model_dump_json())["configuration"]["zero"] == 1


# ------------------------------------------------------------------------------------------ flat throughput


def saturating(limit: int, speeds: dict[int, float]):
    """A probe that fits up to `limit` and reports tokens/s from `speeds` (micro-batch -> tokens/s)."""
    asked = []

    def probe(mb, search):
        asked.append(mb)
        return ("fit", speeds[mb]) if mb <= limit else ("oom", None)
    probe.asked = asked
    return probe


def test_the_search_stops_when_the_sizes_left_below_the_oom_cannot_add_a_percent():
    """The GPU host's gpt2 ZeRO-3 offload search: 53 fit, 66 ran out of memory, 59 was 0.4% faster than 53: the six
    sizes left (60..65) at that rate could add 0.4% at most, so 62 and 63 are not tried."""
    probe = saturating(63, {53: 10_000.0, 59: 10_040.0, 62: 10_045.0, 63: 10_046.0})
    result = search_micro_batch(probe, start=53, maximum=1024, step=1.25, flat=0.01)
    assert probe.asked == [53, 66, 59]
    assert (result.largest_fit, result.first_oom) == (59, 66)
    assert result.stopped == ("throughput flat: micro-batch 53 -> 59 changed tokens/s by +0.4%, so the sizes left "
                              "below the OOM at 66 could add at most 0.4% (< --mb-flat 1%); search stopped")


def test_throughput_still_rising_keeps_the_search_going_to_the_boundary():
    """gpt2-xl z3 off=cpu ckpt on the H100 (bench/sweep/h100/gpt2xl.jsonl: 8..96 measured; above, made up to
    saturate): 32 -> 64 gained 36% and 64 -> 96 11%, so the bisection goes on until 96 -> 100 gains 0.7%."""
    speeds = {8: 3548.2, 16: 7333.4, 32: 12391.8, 64: 16813.9, 96: 18668.9, 100: 18800.0}
    probe = saturating(100, speeds)
    result = search_micro_batch(probe, start=8, maximum=1024, flat=0.01)
    assert probe.asked == [8, 16, 32, 64, 128, 96, 112, 104, 100]
    assert (result.largest_fit, result.first_oom) == (100, 104)
    assert result.stopped.startswith("throughput flat: micro-batch 96 -> 100 changed tokens/s by +0.7%")


def test_a_size_slower_than_the_one_before_stops_the_search():
    probe = saturating(31, {8: 100.0, 16: 180.0, 24: 179.0})
    result = search_micro_batch(probe, start=8, maximum=1024, flat=0.01)
    assert probe.asked == [8, 16, 32, 24]
    assert result.stopped.startswith("throughput flat: micro-batch 16 -> 24 changed tokens/s by -0.6%, so the sizes "
                                     "left below the OOM at 32 could add at most 0.0%")


def test_mb_flat_0_searches_to_the_exact_boundary_whatever_the_throughput():
    probe = saturating(20, {mb: 100.0 for mb in range(1, 21)})
    result = search_micro_batch(probe, start=1, maximum=1024, flat=0.0)
    assert (result.largest_fit, result.first_oom, result.stopped) == (20, 21, None)


def test_flat_stop_needs_two_fits_below_the_oom():
    assert flat_stop({53: 10_000.0}, 66, 0.01) is None
    assert flat_stop({53: 10_000.0, 59: 10_040.0}, 66, 0.0) is None


# ------------------------------------------------------------------------------------------ progress (issue 34)


def test_a_search_is_known_to_end_as_its_last_trial_answers():
    auto = functools.partial(search_micro_batch, start=1, maximum=4)
    assert search_goes_on(auto, ["fit", "fit"]) is True
    assert search_goes_on(auto, ["fit", "fit", "fit"]) is False  # 4 is --mb-max and fits
    fixed = functools.partial(fixed_micro_batches, values=[1, 2, 4])
    assert search_goes_on(fixed, ["fit", "oom"]) is False  # 4 would run out of memory too


def test_the_configurations_done_count_includes_the_one_whose_last_trial_just_ended():
    eta = Eta(runnable=3, per_configuration=1.0)
    for _ in range(3):
        eta.configuration_started()
        eta.trial_done(30.0, ran=True, last=True)
    assert eta.text() == "ETA ~0 s (about 0 trial(s) left, 3 of 3 configuration(s) done)"


def test_the_eta_leaves_out_the_time_a_trial_spent_building_ops():
    eta = Eta(runnable=2, per_configuration=1.0)
    eta.configuration_started()
    built = {"overhead": {"ds_initialize_s": 540.0, "jit_built": ["fused_adam"]}}
    eta.trial_done(600.0, ran=True, last=True, row=built)
    assert eta.trial_seconds() == [60.0]  # no trial without a build yet: all of deepspeed.initialize is left out
    eta.configuration_started()
    eta.trial_done(80.0, ran=True, last=False, row={"overhead": {"ds_initialize_s": 20.0, "jit_built": []}})
    assert eta.trial_seconds() == [80.0, 80.0]  # the build is what went beyond an initialize that built nothing


def test_an_auto_search_that_goes_on_past_the_mean_says_at_least_one_trial_is_left():
    eta = Eta(runnable=1, per_configuration=3.0)
    eta.configuration_started()
    for _ in range(3):
        eta.trial_done(10.0, ran=True, last=False)
    assert eta.text() == "ETA ~10 s (at least 1 trial(s) left, 0 of 1 configuration(s) done)"


def test_ctrl_c_during_a_trial_removes_its_folder_so_that_nothing_is_left_without_a_row(tmp_path, monkeypatch):
    folder = _run_folder(tmp_path, "c3")

    def interrupted(prepared, on_start=None):
        raise KeyboardInterrupt

    monkeypatch.setattr("dsx.run.prepare", lambda request, trial: types.SimpleNamespace(run_dir=folder))
    monkeypatch.setattr("dsx.run.execute", interrupted)
    outcome = sweep(SweepSpec(model="gpt2-tiny", zero=[1], offload=["none"], micro_batch=[1], prune=False,
                              results=str(tmp_path / "r.jsonl")))
    assert outcome.interrupted and not folder.exists()
    assert outcome.notes == [f"removed {folder}, the folder of the interrupted trial (no row): the same command runs "
                             "it again"]


def test_a_trial_whose_processes_outlive_the_kill_keeps_its_folder_and_its_group_for_the_next_sweep(tmp_path,
                                                                                                      monkeypatch):
    folder = _run_folder(tmp_path, "c3")

    def stuck(prepared, on_start=None):
        on_start(4242)
        raise NotStopped(4242, ["4243 disk-sleep: python train_rank.py"])

    monkeypatch.setattr("dsx.run.prepare", lambda request, trial: types.SimpleNamespace(run_dir=folder))
    monkeypatch.setattr("dsx.run.execute", stuck)
    outcome = sweep(SweepSpec(model="gpt2-tiny", zero=[1], offload=["none"], micro_batch=[1], prune=False,
                              results=str(tmp_path / "r.jsonl")))
    assert outcome.interrupted and folder.exists() and outcome.notes == []
    assert outcome.left_running == ("1 process(es) of its process group 4242 were still there 30 s after SIGKILL "
                                    "(4243 disk-sleep: python train_rank.py)")
    assert SweepLock(tmp_path / "r.jsonl").acquire() == {"pid": os.getpid(), "pgid": 4242, "run_dir": str(folder)}


def test_dsx_sweep_says_which_processes_outlived_the_kill_instead_of_calling_them_stopped(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from dsx.cli import cli

    def stuck(prepared, on_start=None):
        on_start(4242)
        raise NotStopped(4242, ["4243 disk-sleep: python train_rank.py"])

    monkeypatch.setattr("dsx.run.prepare", lambda request, trial: types.SimpleNamespace(run_dir=tmp_path / "run"))
    monkeypatch.setattr("dsx.run.execute", stuck)
    result = CliRunner().invoke(cli, ["sweep", "--model", "gpt2-tiny", "--zero", "1", "--micro-batch", "1",
                                      "--no-prune", "--results", str(tmp_path / "r.jsonl")])
    assert result.exit_code == 130, result.output
    assert result.output.strip().splitlines()[-1] == (
        "dsx sweep: interrupted; the running trial was killed, but 1 process(es) of its process group 4242 were still "
        "there 30 s after SIGKILL (4243 disk-sleep: python train_rank.py). Run the same command to stop them and "
        "resume.")


@pytest.mark.parametrize("args, message", [
    (["--top", "1", "--no-prune"], "--top 1 cannot apply with --no-prune, which runs every configuration dsx "
                                   "estimate would skip: drop one of them"),
    (["--keep-within", "0.2", "--no-prune"], "--keep-within 0.2 cannot apply with --no-prune, which runs every "
                                             "configuration dsx estimate would skip: drop one of them"),
    (["--top", "1"], "--top 1 cannot apply: it keeps the configurations dsx estimate predicts fastest, and no "
                     "GPU of a known kind is visible here; name one with --gpu-kind (h100-80gb, h200-141gb) or drop --top"),
])
def test_pruning_options_that_cannot_apply_are_refused_not_ignored(tmp_path, args, message, monkeypatch):
    monkeypatch.setattr("dsx.host.probe_gpus", lambda env: [])  # no GPU, whatever this machine has
    out = CliRunner().invoke(sweep_command, [*args, "--dry-run", "--results", str(tmp_path / "r.jsonl")])
    assert out.exit_code == 2, out.output
    assert out.output.splitlines()[-1] == f"Error: {message}"


def test_an_unknown_model_is_refused_before_the_sweep_says_anything(tmp_path):
    out = CliRunner().invoke(sweep_command, ["--model", "gpt3", "--dry-run", "--results", str(tmp_path / "r.jsonl")])
    assert out.exit_code == 2, out.output
    assert "configuration(s)" not in out.output  # the banner: 'dsx sweep ID: MODEL on ..., N configuration(s), ...'
    assert out.output.splitlines()[-1].startswith("Error: unknown model 'gpt3'")


def test_each_trial_says_whether_it_ended_its_configurations_search(tmp_path, monkeypatch):
    statuses = iter(["ok", "oom", "ok", "ok"])  # z1: mb 1 fits, 2 runs out of memory (4 is skipped); z2: 1, 2, 4
    row = {"overhead": {}, "figures": {"tokens_per_s": 1.0}, "run_id": "r"}
    monkeypatch.setattr("dsx.run.prepare", lambda request, trial: types.SimpleNamespace(run_dir=tmp_path / "x"))
    monkeypatch.setattr("dsx.run.execute", lambda prepared, on_start=None: types.SimpleNamespace(
        model_dump=lambda mode: {**row, "status": next(statuses, "ok")}))
    outcome = sweep(SweepSpec(model="gpt2-tiny", zero=[1, 2], offload=["none"], micro_batch=[1, 2, 4], prune=False,
                              results=str(tmp_path / "r.jsonl")))
    assert [(t.configuration.label, t.micro_batch, t.last) for t in outcome.trials] == [
        ("z1 bf16", 1, False), ("z1 bf16", 2, True), ("z2 bf16", 1, False), ("z2 bf16", 2, False),
        ("z2 bf16", 4, True)]


def _fake_trials(tmp_path, monkeypatch, fits_up_to: int) -> list[tuple[int, int, int]]:
    """Run sweeps without launching: every trial up to `fits_up_to` fits, larger ones OOM; returns the list the
    fake launcher fills with each trial's (micro-batch, grad-accum, train_batch_size) from its DeepSpeed config."""
    seen: list[tuple[int, int, int]] = []

    def execute(prepared, on_start=None):
        config = prepared.trial.ds_config
        seen.append((config["train_micro_batch_size_per_gpu"], config["gradient_accumulation_steps"],
                     config["train_batch_size"]))
        status = "ok" if seen[-1][0] <= fits_up_to else "oom"
        return types.SimpleNamespace(model_dump=lambda mode: {
            "overhead": {}, "figures": {"tokens_per_s": float(seen[-1][2])}, "run_id": "r", "status": status})
    monkeypatch.setattr("dsx.run.prepare", lambda request, trial: types.SimpleNamespace(run_dir=tmp_path / "x",
                                                                                          trial=trial))
    monkeypatch.setattr("dsx.run.execute", execute)
    return seen


def test_max_global_batch_derives_each_trials_grad_accum_and_caps_the_micro_batch(tmp_path, monkeypatch):
    """As the autotuner's max_train_batch_size: micro-batch x grad-accum stays within the cap (10 sequences:
    mb 1 x 10, 2 x 5, 5 x 2, 10 x 1), and the auto search never tries a micro-batch above it."""
    seen = _fake_trials(tmp_path, monkeypatch, fits_up_to=1024)
    sweep(SweepSpec(model="gpt2-tiny", zero=[1], offload=["none"], prune=False, mb_max=64, max_global_batch=10,
                    results=str(tmp_path / "r.jsonl")))
    assert seen == [(1, 10, 10), (2, 5, 10), (5, 2, 10), (10, 1, 10)]


def test_max_global_batch_searches_only_the_micro_batches_that_fill_the_cap(tmp_path, monkeypatch):
    """Under a cap of 64 the search moves among 64 // grad-accum (..., 10, 12, 16, 21, 32, 64): with 16 the
    largest that fits, it never tries 17 or 18 (grad-accum 3: a global batch of 51 or 54 instead of 64)."""
    seen = _fake_trials(tmp_path, monkeypatch, fits_up_to=16)
    outcome = sweep(SweepSpec(model="gpt2-tiny", zero=[1], offload=["none"], prune=False, mb_max=1024,
                              mb_flat=0.0, max_global_batch=64, results=str(tmp_path / "r.jsonl")))
    assert seen == [(1, 64, 64), (2, 32, 64), (4, 16, 64), (8, 8, 64), (16, 4, 64), (32, 2, 64), (21, 3, 63)]
    assert (outcome.results[0].search.largest_fit, outcome.results[0].search.first_oom) == (16, 21)


def test_cap_filling_micro_batches_are_the_cap_over_each_grad_accum():
    spec = SweepSpec(model="gpt2-tiny", zero=[1], offload=["none"], mb_max=1024, max_global_batch=64)
    configuration = sweep_configurations(spec)[0]
    assert cap_filling_micro_batches(spec, configuration) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16, 21, 32, 64]
    assert cap_filling_micro_batches(replace(spec, mb_max=20), configuration) == \
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16]
    assert cap_filling_micro_batches(replace(spec, max_global_batch=None), configuration) is None


def test_a_search_among_candidates_starts_below_a_prediction_between_them():
    """Predicted 18 under a cap of 64: the search starts at 16 and grows to 21, never 17 or 18."""
    tried = []

    def probe(mb, search):
        tried.append((mb, search))
        return "fit" if mb <= 16 else "oom"
    result = search_micro_batch(probe, start=18, maximum=64, step=1.25,
                                candidates=[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16, 21, 32, 64])
    assert tried == [(16, "grow"), (21, "grow")]
    assert (result.largest_fit, result.first_oom, result.stopped) == (16, 21, None)


def test_a_search_among_candidates_says_when_the_cap_fits():
    result = search_micro_batch(lambda mb, search: "fit", start=1, maximum=10, candidates=[1, 2, 3, 5, 10])
    assert [mb for mb, _ in result.tried] == [1, 2, 5, 10]
    assert result.stopped == "micro-batch 10 fits, the largest of the candidates (the global-batch cap)"


def test_max_global_batch_drops_the_fixed_micro_batches_above_it(tmp_path, monkeypatch):
    seen = _fake_trials(tmp_path, monkeypatch, fits_up_to=1024)
    outcome = sweep(SweepSpec(model="gpt2-tiny", zero=[1], offload=["none"], prune=False, micro_batch=[2, 4, 16],
                              max_global_batch=8, results=str(tmp_path / "r.jsonl")))
    assert seen == [(2, 4, 8), (4, 2, 8)]
    assert outcome.results[0].pruned == [16]


def test_max_global_batch_belongs_to_the_sweep_id():
    base = dict(model="gpt2-tiny", zero=[1], offload=["none"])
    assert SweepSpec(**base).sweep_id() != SweepSpec(**base, max_global_batch=8).sweep_id()
    assert SweepSpec(**base, max_global_batch=8).sweep_id() == SweepSpec(**base, max_global_batch=8).sweep_id()
