"""What `dsx launch` knows of a user's job without running it: the Trainer's command line, the checks before a
launch (--hf, the warmup crash, CPU ranks), the Trainer's own figures after it, the sampler, and the launch row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from dsx.results import RunRow, read_rows
from dsx.userjob.preflight import check, is_trainer_launch, script_and_args
from dsx.userjob.sampler import JobSampler
from dsx.userjob.trainer import arg_value, asks_for_warmup, flag_on, precision, trainer_figures, warmup_finding
from dsx.versions import Version

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "fixtures" / "configs"
ROWS = ROOT / "tests" / "fixtures" / "rows"
V0198, V0189 = Version("0.19.8"), Version("0.18.9")


def config(name: str) -> dict:
    return json.loads((CONFIGS / name).read_text())


# ------------------------------------------------------------------------------------------- the command line


def test_the_last_value_of_a_flag_wins_in_either_spelling():
    args = ["--output_dir", "a", "--warmup_steps=3", "--output_dir=b"]
    assert arg_value(args, "--output_dir") == "b"
    assert arg_value(args, "--warmup_steps") == "3"
    assert arg_value(args, "--max_steps") is None


@pytest.mark.parametrize("args, asked", [
    ([], False), (["--warmup_steps", "0"], False), (["--warmup_steps", "5"], True), (["--warmup-steps=5"], True),
    (["--warmup_steps", "0.1"], True), (["--warmup_ratio", "0.05"], True), (["--warmup_ratio", "0"], False),
    (["--warmup_steps", "x"], False),
])
def test_warmup_is_asked_for_by_positive_steps_or_ratio(args, asked):
    assert asks_for_warmup(args) is asked


@pytest.mark.parametrize("args, on", [
    (["--use_cpu"], True), (["--use_cpu", "--bf16"], True), (["--use_cpu", "false"], False),
    (["--use_cpu=True"], True), (["--use-cpu"], True), ([], False), (["--use_cpu", "--use_cpu=no"], False),
])
def test_a_boolean_training_argument_reads_as_hfargumentparser_reads_it(args, on):
    assert flag_on(args, "use_cpu") is on


def test_the_precision_of_a_trainer_launch_is_the_configs_or_what_bf16_fp16_fill():
    auto = config("hf_trainer_zero2_auto.json")
    assert precision(auto, []) == "fp32"
    assert precision(auto, ["--bf16"]) == "bf16"
    assert precision(auto, ["--fp16", "true"]) == "fp16"
    assert precision({"bf16": {"enabled": True}}, []) == "bf16"


def test_the_script_and_its_arguments_are_what_follows_python_or_m():
    assert script_and_args(["python", "dir/train.py", "--a", "1"]) == ("train.py", ["--a", "1"])
    assert script_and_args(["python", "-m", "pkg.train", "--a"]) == ("pkg.train", ["--a"])
    assert script_and_args(["python", "-c", "print()"]) == ("", [])


def test_a_trainer_launch_is_one_whose_config_goes_through_the_trainers_own_flag():
    assert is_trainer_launch("--deepspeed", [])
    assert is_trainer_launch("none", ["--deepspeed", "ds.json"])
    assert not is_trainer_launch("--deepspeed_config", ["--deepspeed_config", "ds.json"])


# ------------------------------------------------------------------------------------------- the warmup crash


ZERO_WARMUP_ERROR = (
    'error: scheduler.params.warmup_num_steps: the Trainer of transformers 5.17.0 fills "auto" here with its warmup '
    "steps, 0 when the command line asks for none (no --warmup_steps N > 0 or --warmup_ratio R > 0 among the "
    "script's arguments), and DeepSpeed 0.19.8's WarmupLR rejects 0 at deepspeed.initialize (\"warmup_num_steps "
    "must be a positive integer, got 0\") [hf-zero-warmup]\n"
    "    fix: add --warmup_steps N (N > 0) to the script's arguments, or use a scheduler without warmup (drop the "
    "scheduler block and the Trainer schedules with --lr_scheduler_type)")


def test_a_trainer_before_5_18_that_asks_for_no_warmup_is_an_error_with_the_fix():
    """transformers 5.17 fills 0, DeepSpeed 0.19.8 rejects it (tests/test_clients_cpu.py crashes it for real)."""
    finding = warmup_finding(config("hf_trainer_zero2_auto.json"), ["--output_dir", "o"], "5.17.0", V0198)
    assert finding.render() == ZERO_WARMUP_ERROR


@pytest.mark.parametrize("args", [["--warmup_steps", "10"], ["--warmup_ratio", "0.1"]])
def test_asking_for_warmup_clears_it(args):
    assert warmup_finding(config("hf_trainer_zero3_auto.json"), args, "5.17.0", V0198) is None


def test_transformers_5_18_fills_one_step_of_warmup_which_is_only_a_warning():
    finding = warmup_finding(config("hf_trainer_zero3_auto.json"), [], "5.24.0", V0198)
    assert (finding.severity, finding.message) == (
        "warning", "the command line asks for no warmup, so the Trainer of transformers 5.24.0 fills 1 here: "
                   "WarmupDecayLR runs the first step at warmup_min_lr")


@pytest.mark.parametrize("data", [
    {"scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": "auto"}}},
    {"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 100}}},
    {},
])
def test_no_warmup_scheduler_or_a_fixed_warmup_needs_nothing(data):
    assert warmup_finding(data, [], "5.17.0", V0198) is None


def test_deepspeed_0_18_accepts_a_zero_warmup():
    assert warmup_finding(config("hf_trainer_zero2_auto.json"), [], "5.17.0", V0189) is None


# ------------------------------------------------------------------------------------------- the checks


@pytest.mark.parametrize("name", ["hf_trainer_zero2_auto.json", "hf_trainer_zero3_auto.json"])
@pytest.mark.parametrize("world", [1, 2, 8])
def test_the_stock_trainer_configs_pass_with_the_fill_rules_at_any_world_size(name, world):
    checked = check(config(name), duplicate_keys=[], target=V0198, world_size=world, hf=True, trainer=True,
                    args=["--warmup_steps", "5", "--use_cpu"], device="cpu")
    assert checked.errors == []


def test_errors_only_hf_would_clear_are_folded_into_one_line_that_says_so():
    checked = check(config("hf_trainer_zero2_auto.json"), duplicate_keys=[], target=V0198, world_size=1, hf=False,
                    trainer=False, args=[])
    assert len(checked.errors) == 14 and checked.hf_only == checked.errors
    assert checked.error_lines() == [
        '  14 "auto" value(s) only the transformers Trainer / accelerate fill (fp16.enabled, bf16.enabled, '
        "optimizer.params.lr, optimizer.params.betas, optimizer.params.eps, optimizer.params.weight_decay, "
        "scheduler.params.warmup_min_lr, scheduler.params.warmup_max_lr, scheduler.params.warmup_num_steps, "
        "zero_optimization.reduce_bucket_size, gradient_accumulation_steps, gradient_clipping, train_batch_size, "
        "train_micro_batch_size_per_gpu): if the script is one, launch with --hf (implied by --config-arg --deepspeed "
        "or accelerate)"]


def test_errors_hf_would_not_clear_stay_listed_in_full():
    data = {**config("hf_trainer_zero2_auto.json"), "steps_per_prnt": 10}
    checked = check(data, duplicate_keys=[], target=V0198, world_size=1, hf=False, trainer=False, args=[])
    lines = checked.error_lines()
    assert len(lines) == 2 and lines[0].startswith("  error: steps_per_prnt: ")
    assert lines[1].startswith('  14 "auto" value(s) only the transformers Trainer / accelerate fill')


def test_the_trainer_on_several_cpu_ranks_without_use_cpu_is_refused():
    checked = check(config("hf_trainer_zero2_auto.json"), duplicate_keys=[], target=V0198, world_size=2, hf=True,
                    trainer=True, args=["--warmup_steps", "1"], device="cpu")
    assert [f.render() for f in checked.errors] == [
        "error: (the script's arguments): the transformers Trainer on 2 CPU ranks needs --use_cpu: without it "
        "accelerate sees no distributed job (its DeepSpeed path wants a GPU), every rank fills train_batch_size for "
        "a world of 1, and deepspeed.initialize asserts \"train_batch_size is not equal to micro_batch_per_gpu * "
        "gradient_acc_step * world_size\" [trainer-cpu-ranks]\n    fix: add --use_cpu to the script's arguments"]


def test_a_trainer_at_zero_3_on_several_cpu_ranks_is_warned_about_zero_init():
    checked = check(config("hf_trainer_zero3_auto.json"), duplicate_keys=[], target=V0198, world_size=2, hf=True,
                    trainer=True, args=["--warmup_steps", "1", "--use_cpu"], device="cpu")
    assert not checked.errors
    assert [f.code for f in checked.warnings] == ["trainer-cpu-zero3-init"]
    assert checked.warnings[0].fix == ("build the model directly (e.g. GPT2LMHeadModel(config)), or call "
                                       "deepspeed.init_distributed() before building it")
    for world, device in ((1, "cpu"), (2, "cuda")):
        assert not check(config("hf_trainer_zero3_auto.json"), duplicate_keys=[], target=V0198, world_size=world,
                         hf=True, trainer=True, args=["--warmup_steps", "1", "--use_cpu"], device=device).findings


def launch_refusal(tmp_path: Path, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "dsx", "launch", *args], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "results").exists()  # refused: nothing recorded
    return out.stderr


def test_dsx_launch_without_hf_says_in_one_line_that_hf_would_clear_a_trainer_config(tmp_path):
    err = launch_refusal(tmp_path, "--dry-run", "--config", str(CONFIGS / "hf_trainer_zero2_auto.json"), "--",
                         "python", "train.py")
    assert err.strip().splitlines()[-2:] == [
        f"Error: {CONFIGS / 'hf_trainer_zero2_auto.json'} has errors for DeepSpeed 0.19.8 at world size 1:",
        '  14 "auto" value(s) only the transformers Trainer / accelerate fill (fp16.enabled, bf16.enabled, '
        "optimizer.params.lr, optimizer.params.betas, optimizer.params.eps, optimizer.params.weight_decay, "
        "scheduler.params.warmup_min_lr, scheduler.params.warmup_max_lr, scheduler.params.warmup_num_steps, "
        "zero_optimization.reduce_bucket_size, gradient_accumulation_steps, gradient_clipping, train_batch_size, "
        "train_micro_batch_size_per_gpu): if the script is one, launch with --hf (implied by --config-arg --deepspeed "
        "or accelerate)"]


@pytest.mark.parametrize("flags", [["--config-arg", "--deepspeed"], ["--hf"]])
def test_dsx_launch_accepts_a_trainer_config_with_hf_or_the_trainers_flag(tmp_path, flags):
    out = subprocess.run([sys.executable, "-m", "dsx", "launch", "--dry-run", *flags, "--config",
                          str(CONFIGS / "hf_trainer_zero3_auto.json"), "--", "python", "train.py", "--warmup_steps",
                          "2"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "error" not in out.stderr


@pytest.mark.slow  # dsx launch subprocesses
def test_dsx_launch_gives_an_accelerate_script_the_config_in_accelerates_environment(tmp_path):
    """--config-arg accelerate: the environment `accelerate launch` gives a DeepSpeed plugin's script, nothing on its
    command line, and the fill rules of --hf (accelerate fills "auto")."""
    config = CONFIGS / "accelerate_zero3_auto_stage.json"
    out = subprocess.run([sys.executable, "-m", "dsx", "launch", "--dry-run", "--config-arg", "accelerate", "--config",
                          str(config), "--", "python", "train.py", "--steps", "3"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "error" not in out.stderr
    assert "  ACCELERATE_USE_DEEPSPEED=true" in out.stdout.splitlines()
    assert f"  ACCELERATE_DEEPSPEED_CONFIG_FILE={config}" in out.stdout.splitlines()
    command = out.stdout.splitlines()[1]
    assert command.endswith("--no_local_rank train.py --steps 3") and str(config) not in command


@pytest.mark.slow  # dsx launch subprocesses
def test_dsx_launch_refuses_an_accelerate_script_on_several_cpu_ranks(tmp_path):
    err = launch_refusal(tmp_path, "--dry-run", "--config-arg", "accelerate", "--gpus", "2", "--config",
                         str(CONFIGS / "clean_zero2.json"), "--", "python", "train.py")
    assert err.strip().splitlines()[-2:] == [
        "  error: (the script's arguments): an accelerate script on 2 CPU ranks: without a GPU accelerate's DeepSpeed "
        "path counts one process, so every rank would train on all the data as the main process "
        "[accelerate-cpu-ranks]",
        "    fix: launch 1 CPU rank (--gpus 1), or run on GPUs"]


@pytest.mark.slow  # dsx launch subprocesses
def test_dsx_launch_lints_the_batch_sizes_the_trainer_leaves_for_the_launchs_world_size(tmp_path):
    """train_batch_size 4 with micro-batch 2 and "auto" accumulation holds at 1 or 2 ranks, at 4 for none."""
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
                                  "gradient_accumulation_steps": "auto", "gradient_clipping": 1.0}))
    args = ["--dry-run", "--hf", "--config", str(config), "--hostfile"]
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("127.0.0.1 slots=4\n")
    err = launch_refusal(tmp_path, *args, str(hostfile), "--launcher", "no-ssh", "--", "python", "train.py")
    assert err.strip().splitlines()[-3:] == [
        f"Error: {config} has errors for DeepSpeed 0.19.8 at world size 4, with the Trainer / accelerate filling its "
        "auto values (--hf):",
        "  error: train_batch_size: train_batch_size 4 is not divisible by train_micro_batch_size_per_gpu 2 x world "
        "size 4 [batch-arithmetic]",
        "    fix: choose sizes with train = micro x accumulation x world size"]
    hostfile.write_text("127.0.0.1 slots=2\n")
    out = subprocess.run([sys.executable, "-m", "dsx", "launch", *args, str(hostfile), "--launcher", "no-ssh", "--",
                          "python", "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "error" not in out.stderr, out.stderr


# ------------------------------------------------------------------------------------------- the Trainer's figures


STATE = {"global_step": 3, "log_history": [
    {"loss": 4.86, "step": 1}, {"train_runtime": 0.25, "train_samples_per_second": 48.0,
                                "train_steps_per_second": 12.0, "train_loss": 4.85, "step": 3}]}


def test_the_trainer_figures_come_from_the_trainer_state_written_during_the_launch(tmp_path):
    since = time.time() - 1
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "trainer_state.json").write_text(json.dumps(STATE))
    figures = trainer_figures(["--output_dir", "out", "--per_device_train_batch_size", "4"], str(tmp_path), "", since,
                              seq_len=128)
    assert figures.model_dump() == {
        "samples_per_s": 48.0, "steps_per_s": 12.0, "runtime_s": 0.25, "train_loss": 4.85, "global_step": 3,
        "tokens_per_s": 48.0 * 128, "seq_len": 128, "micro_batch": 4, "grad_accum": 1,
        "source": str(tmp_path / "out" / "trainer_state.json")}


def test_a_trainer_state_older_than_the_launch_is_not_read_and_the_log_is(tmp_path):
    (tmp_path / "trainer_output").mkdir()
    old = tmp_path / "trainer_output" / "trainer_state.json"
    old.write_text(json.dumps(STATE))
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    log = ("{'loss': '4.863', 'grad_norm': '0.8', 'epoch': '0.5'}\n"
           "{'train_runtime': '0.1012', 'train_samples_per_second': '59.3', 'train_steps_per_second': '29.64', "
           "'train_loss': '4.859', 'epoch': '1'}\n")
    figures = trainer_figures([], str(tmp_path), log, time.time() - 10, seq_len=None)
    assert (figures.source, figures.samples_per_s, figures.steps_per_s, figures.tokens_per_s) == (
        "log", 59.3, 29.64, None)


def test_a_script_that_reported_nothing_has_no_trainer_figures(tmp_path):
    assert trainer_figures(["--output_dir", "out"], str(tmp_path), "step 1 loss 3.2\n", 0.0, 128) is None


# ------------------------------------------------------------------------------------------- the sampler


def test_the_sampler_finds_the_ranks_of_the_jobs_process_group_and_their_peak_rss(tmp_path):
    """A real process group like DeepSpeed's launcher makes: a parent without RANK, two rank processes (one holding
    200 MiB), and a rank's child that inherited its environment (not a rank of its own)."""
    rank = ("import os, subprocess, sys, time; hold = bytearray(int(os.environ['HOLD_MB']) << 20); "
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); time.sleep(120)")
    parent = ("import os, subprocess, sys, time\n"
              "procs = [subprocess.Popen([sys.executable, '-c', sys.argv[1]], env={**os.environ, 'RANK': str(r), "
              "'LOCAL_RANK': str(r), 'HOLD_MB': str(200 if r else 1)}) for r in range(2)]\n"
              "time.sleep(120)\n")
    # the launcher's environment has no RANK (an earlier in-process test of the session may have left one)
    clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    job = subprocess.Popen([sys.executable, "-c", parent, rank], start_new_session=True, env=clean)
    try:
        sampler = JobSampler("cpu", interval=0.2)
        sampler.start(job.pid)
        # a loaded 2-core machine starts three Pythons slowly, and rank 1 touches its 200 MiB page by page: wait for
        # the whole hold (stopping at 150 MiB left a peak of 196.7 MiB once, on CI)
        deadline = time.time() + 90
        while time.time() < deadline and (len(sampler.rss_peak) < 2 or sampler.rss_peak[1] < 200 << 20):
            time.sleep(0.2)
        sampler.stop()
        assert set(sampler.rank_pids()) == {0, 1}
        memory = sampler.memory(2)
    finally:
        os.killpg(job.pid, 9)
        job.wait()
    assert memory.per_rank[1].host_rss_peak >= 200 << 20 > memory.per_rank[0].host_rss_peak
    assert memory.max.host_rss_peak == memory.per_rank[1].host_rss_peak
    assert memory.per_rank[0].unavailable["nvml_used"] == "CPU ranks: no GPU"
    assert memory.max.nvml_used is None and "VmHWM" in memory.methods["host_rss_peak"]


# ------------------------------------------------------------------------------------------- the row


def test_old_rows_are_runs_and_still_parse():
    for path in ROWS.glob("*.jsonl"):
        for data in read_rows(path):
            if data.get("kind") != "launch":
                assert RunRow.model_validate(data, extra="ignore").kind == "run"


def test_a_run_row_still_needs_its_model_and_a_launch_row_its_launch():
    data = dict(read_rows(ROWS / "cpu_effects.jsonl")[0])
    del data["model"]
    with pytest.raises(ValidationError, match="a run row needs model"):
        RunRow.model_validate(data, extra="ignore")
    with pytest.raises(ValidationError, match="a launch row needs `launch`"):
        RunRow.model_validate({**data, "kind": "launch"}, extra="ignore")
