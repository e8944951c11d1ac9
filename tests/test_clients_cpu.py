"""Real clients on CPU ranks: a transformers Trainer script, an accelerate script and a plain deepspeed.initialize
script, unchanged, trained for a few steps with real DeepSpeed under configs from the transformers docs and from
dsx; each `dsx launch` leaves one row in one shared results file, which `dsx report` then shows.

Each launch costs ~20-35 s on 2 cores, so every launch checks everything about its row at once. The scripts are
tests/fixtures/scripts/: train_hf.py (TrainingArguments from the command line, a tiny GPT-2 built from a config,
random tokens, save_metrics + save_state like the transformers examples), train_accelerate.py, user_train.py.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsx.results import config_hash, parse_row, read_rows

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "fixtures" / "configs"
SCRIPTS = ROOT / "tests" / "fixtures" / "scripts"
SEQ = 32

pytestmark = [pytest.mark.slow, pytest.mark.deepspeed]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("clients") / "runs.jsonl"


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "DSX_DEBUG")}
    return {**env, **extra}


def dsx_launch(results: Path, cwd: Path, *args: str, timeout: float = 400) -> tuple[subprocess.CompletedProcess,
                                                                                     list[dict]]:
    """`dsx launch --results RESULTS ARGS` in cwd; (the process, the rows it appended)."""
    before = len(read_rows(results))
    out = subprocess.run([sys.executable, "-m", "dsx", "launch", "--results", str(results), *args], cwd=cwd,
                         env=child_env(), capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in out.stderr.split("dsx launch: world size", 1)[0], out.stderr
    return out, read_rows(results)[before:]


def trained(ran: Path, world: int, stage: int) -> dict:
    """What the script's rank 0 wrote: DeepSpeed's engine at the given ZeRO stage, over the world, finite losses."""
    data = json.loads(ran.read_text())
    assert (data["engine"], data["zero_stage"], data["world_size"]) == ("DeepSpeedEngine", stage, world)
    assert data["losses"] and all(math.isfinite(loss) for loss in data["losses"])
    return data


def assert_launch_row(row: dict, *, world: int, config: Path, script: str) -> object:
    row = parse_row(row)
    assert (row.kind, row.status, row.error, row.launch.exit_code) == ("launch", "ok", None, 0)
    assert (row.device, row.world_size, row.launch.script) == ("cpu", world, script)
    assert row.ds_config == json.loads(config.read_text()) and row.ds_config_hash == config_hash(row.ds_config)
    assert row.ds_config_source == str(config)
    assert row.command[:2] == [str(ROOT / "dsx" / "__main__.py"), "launch"]  # dsx's own command line (python -m dsx)
    assert 0 < row.launch.wall_s < row.overhead.total_s
    assert [m.rank for m in row.memory.per_rank] == list(range(world))
    assert all(m.host_rss_peak > 100 << 20 for m in row.memory.per_rank)  # torch + deepspeed are in every rank
    assert row.memory.max.nvml_used is None and row.memory.per_rank[0].unavailable["nvml_used"] == "CPU ranks: no GPU"
    assert Path(row.launch.log).is_file()
    return row


# ------------------------------------------------------------------------------------------- the Trainer


def hf_auto_config(folder: Path) -> Path:
    path = folder / "ds_hf_auto.json"
    subprocess.run([sys.executable, "-m", "dsx", "config", "--zero", "2", "--offload", "cpu", "--hf-auto", "-o",
                    str(path)], check=True, capture_output=True, env=child_env())
    return path


TRAINER_RUNS = [
    pytest.param("hf_trainer_zero2_auto.json", 1, 2, ["--warmup_steps", "1"], id="docs-zero2-1rank"),
    pytest.param("hf_trainer_zero2_auto.json", 2, 2, ["--warmup_steps", "1", "--no_save_state"],
                 id="docs-zero2-2ranks-log-only"),
    pytest.param("hf_trainer_zero3_auto.json", 2, 3, ["--warmup_steps", "0.5"], id="docs-zero3-2ranks-warmup-as-ratio"),
    pytest.param("hf_trainer_zero3_auto.json", 1, 3, ["--warmup_steps", "1"], id="docs-zero3-1rank"),
    pytest.param("dsx config --zero 2 --offload cpu --hf-auto", 1, 2, [], id="dsx-hf-auto-1rank"),
    pytest.param("dsx config --zero 2 --offload cpu --hf-auto", 2, 2, [], id="dsx-hf-auto-2ranks"),
]


@pytest.mark.parametrize("config_name, world, stage, extra", TRAINER_RUNS)
def test_a_trainer_script_trains_under_dsx_launch_and_leaves_a_row_with_its_own_throughput(
        results, tmp_path, config_name, world, stage, extra):
    config = hf_auto_config(tmp_path) if config_name.startswith("dsx") else CONFIGS / config_name
    args = ["--output_dir", "out", "--max_steps", "3", "--per_device_train_batch_size", "2", "--logging_steps", "1",
            "--report_to", "none", "--seq_len", str(SEQ), *(["--use_cpu"] if world > 1 else []), *extra]
    out, rows = dsx_launch(results, tmp_path, "--config", str(config), "--config-arg", "--deepspeed", "--gpus",
                           str(world), "--seq-len", str(SEQ), "--", "python", str(SCRIPTS / "train_hf.py"), *args)
    assert out.returncode == 0, out.stderr[-3000:]
    ran = trained(tmp_path / "out" / "ran.json", world, stage)
    assert len(rows) == 1
    row = assert_launch_row(rows[0], world=world, config=config, script="train_hf.py")
    assert (row.launch.hf, row.launch.config_arg, row.precision) == (True, "--deepspeed", "fp32")
    assert (row.micro_batch, row.grad_accum) == (2, 1)
    t = row.launch.trainer
    state = tmp_path / "out" / "trainer_state.json"
    assert t.source == ("log" if "--no_save_state" in extra else str(state))
    assert t.samples_per_s > 0 and t.steps_per_s > 0 and t.tokens_per_s == pytest.approx(t.samples_per_s * SEQ)
    # 3 steps of 2 samples on each rank: samples/s over steps/s is the global batch (the log rounds to 4 digits)
    assert t.samples_per_s / t.steps_per_s == pytest.approx(2 * world, rel=2e-3)
    assert t.train_loss == pytest.approx(ran["train_loss"], rel=1e-3) and math.isfinite(t.train_loss)
    if t.source != "log":
        assert t.global_step == 3
    assert f"Trainer's own figures ({t.source}): " in out.stderr
    assert out.stderr.rstrip().splitlines()[-1] == f"  row {row.run_id} appended to {results}"


def test_the_trainer_of_transformers_5_17_crashes_deepspeed_0_19_on_a_zero_warmup_and_dsx_launch_refuses_it(
        tmp_path):
    """The GPU host's Trainer (transformers 5.17) fills warmup_num_steps 0 when the command line asks for no warmup,
    and DeepSpeed 0.19.8 rejects it at deepspeed.initialize: the real crash under DeepSpeed's own launcher, then
    dsx launch refusing the same command before anything starts."""
    from legacy_transformers import transformers_517

    folder = transformers_517()
    if folder is None:
        if os.environ.get("CI"):
            pytest.fail("transformers 5.17.0 could not be installed (pip; see stderr)")
        pytest.skip("transformers 5.17.0 could not be installed (offline?)")
    env = child_env(PYTHONPATH=os.pathsep.join([str(folder), str(ROOT), os.environ.get("PYTHONPATH", "")]),
                    DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
    config = CONFIGS / "hf_trainer_zero2_auto.json"
    command = ["python", str(SCRIPTS / "train_hf.py"), "--output_dir", "out", "--max_steps", "2", "--report_to",
               "none"]
    crash = subprocess.run([sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "1", "--num_nodes", "1",
                            "--master_port", str(_port()), *command[1:], "--deepspeed", str(config)], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=400)
    assert crash.returncode != 0
    assert "ValueError: warmup_num_steps must be a positive integer, got 0" in crash.stdout + crash.stderr
    refused = subprocess.run([sys.executable, "-m", "dsx", "launch", "--config", str(config), "--config-arg",
                              "--deepspeed", "--results", str(tmp_path / "runs.jsonl"), "--", *command],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and not (tmp_path / "runs.jsonl").exists()
    assert ('error: scheduler.params.warmup_num_steps: the Trainer of transformers 5.17.0 fills "auto" here with its '
            "warmup steps, 0 when the command line asks for none") in refused.stderr
    assert "fix: add --warmup_steps N (N > 0) to the script's arguments" in refused.stderr


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------- accelerate


def test_accelerate_launch_trains_with_a_dsx_config_in_its_deepspeed_plugin(tmp_path):
    """`accelerate launch` with a DeepSpeed plugin config file pointing at `dsx config` output. One process: on CPU
    accelerate's DeepSpeed path forms no multi-process job (it wants a GPU), so the 2-rank CPU case is the Trainer's
    above (the Trainer runs on accelerate)."""
    config = tmp_path / "ds.json"
    subprocess.run([sys.executable, "-m", "dsx", "config", "--zero", "2", "--micro-batch", "2", "--world-size", "1",
                    "-o", str(config)], check=True, capture_output=True, env=child_env())
    (tmp_path / "accelerate.yaml").write_text(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
        f"  deepspeed_config_file: {config}\n  zero3_init_flag: false\nmachine_rank: 0\nnum_machines: 1\n"
        "num_processes: 1\nuse_cpu: true\n")
    out = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--config_file", "accelerate.yaml",
                          str(SCRIPTS / "train_accelerate.py"), "--out", "out", "--steps", "3"], cwd=tmp_path,
                         env=child_env(DS_ACCELERATOR="cpu"), capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert len(trained(tmp_path / "out" / "ran.json", 1, 2)["losses"]) == 3


def test_an_accelerate_script_trains_under_dsx_launch_with_the_config_where_accelerate_launch_puts_it(results,
                                                                                                      tmp_path):
    """The same script and a dsx config, started by dsx launch instead of `accelerate launch`: accelerate's
    environment carries the config (--config-arg accelerate), the script is unchanged, the launch leaves a row."""
    config = tmp_path / "ds.json"
    subprocess.run([sys.executable, "-m", "dsx", "config", "--zero", "2", "--micro-batch", "2", "--world-size", "1",
                    "-o", str(config)], check=True, capture_output=True, env=child_env())
    out, rows = dsx_launch(results, tmp_path, "--config", str(config), "--config-arg", "accelerate", "--", "python",
                           str(SCRIPTS / "train_accelerate.py"), "--out", "out", "--steps", "3")
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(trained(tmp_path / "out" / "ran.json", 1, 2)["losses"]) == 3
    assert len(rows) == 1
    row = assert_launch_row(rows[0], world=1, config=config, script="train_accelerate.py")
    assert (row.launch.hf, row.launch.config_arg, row.launch.trainer) == (True, "accelerate", None)
    assert (row.micro_batch, row.grad_accum, row.precision) == (2, 1, "bf16")


# ------------------------------------------------------------------------------------------- plain DeepSpeed


def test_a_plain_deepspeed_script_trains_under_dsx_launch_and_leaves_a_row_without_trainer_figures(results, tmp_path):
    config = tmp_path / "ds.json"
    subprocess.run([sys.executable, "-m", "dsx", "config", "--zero", "1", "--micro-batch", "2", "--precision", "fp32",
                    "--world-size", "2", "-o", str(config)], check=True, capture_output=True, env=child_env())
    out, rows = dsx_launch(results, tmp_path, "--config", str(config), "--gpus", "2", "--", "python",
                           str(SCRIPTS / "user_train.py"), "--out", "out", "--steps", "3")
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(rows) == 1
    for rank in (0, 1):
        losses = json.loads((tmp_path / "out" / f"rank-{rank}.json").read_text())["losses"]
        assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    row = assert_launch_row(rows[0], world=2, config=config, script="user_train.py")
    assert (row.launch.hf, row.launch.config_arg, row.launch.trainer) == (False, "--deepspeed_config", None)
    assert (row.micro_batch, row.grad_accum, row.precision) == (2, 1, "fp32")


def test_a_failing_script_leaves_an_error_row_with_its_exit_code(results, tmp_path):
    config = tmp_path / "ds.json"
    config.write_text('{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}')
    out, rows = dsx_launch(results, tmp_path, "--config", str(config), "--", "python", str(SCRIPTS / "user_train.py"),
                           "--out", "out", "--fail-rank", "0")
    assert out.returncode != 0
    row = parse_row(rows[0])
    assert (row.status, row.launch.exit_code) == ("error", out.returncode)
    assert row.error.startswith(f"the job exited with {out.returncode}: "), row.error


def test_dsx_report_shows_the_launch_rows_beside_nothing_else(results):
    """Every launch of this module left one row; the report lists the ok ones in its Launches table, --all them all."""
    rows = read_rows(results)
    assert rows and all(r["kind"] == "launch" for r in rows)  # one per launch of this module that ran
    out = subprocess.run([sys.executable, "-m", "dsx", "report", str(results), "--all", "--format", "markdown"],
                         capture_output=True, text=True, timeout=120, env=child_env())
    assert out.returncode == 0, out.stderr
    assert "## Launches" in out.stdout and "## Runs" not in out.stdout
    lines = [line for line in out.stdout.splitlines() if any(script in line for script in (
        "train_hf.py", "user_train.py", "train_accelerate.py"))]
    assert len(lines) == len(rows)
