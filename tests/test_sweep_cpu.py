"""`dsx sweep` for real on CPU ranks: an OOM boundary found under a memory cap, failed and hung trials that do not
stop the sweep, resume from the results file, Ctrl-C, and a SIGKILL of dsx itself.

Every trial is a real launch through DeepSpeed's runner (~12-15 s on 2 cores), so each test keeps its grid small.
The memory cap on CPU ranks is RLIMIT_DATA: an allocation past it fails inside torch exactly like a real host
out-of-memory ("DefaultCPUAllocator: can't allocate memory").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from dsx.results import parse_row, read_rows

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.deepspeed, pytest.mark.slow]

# A tiny GPT-2 with a 32k vocabulary: the logits grow ~10 MB per sample, so a 1 GiB cap sits near micro-batch 20.
# fp32 because bf16 matmuls are slow on CPUs without AMX.
BIG_VOCAB = ["--model", "gpt2-tiny", "--set", "vocab_size=32000", "--precision", "fp32", "--steps", "1",
             "--warmup", "1"]


def env() -> dict:
    e = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "DSX_DEBUG")}
    e.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".cache" / "torch_extensions"))
    return e


def sweep_argv(results: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "dsx", "sweep", *args, "--results", str(results)]


def shm_buffers() -> set[str]:
    return {p.name for p in Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_{os.getuid()}_*")}


def dsx_sweep(results: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    out = subprocess.run(sweep_argv(results, *args), cwd=results.parent, env=env(), capture_output=True, text=True,
                         timeout=timeout)
    assert "Traceback" not in out.stdout + out.stderr, out.stdout + out.stderr
    return out


def trial_lines(out: subprocess.CompletedProcess) -> list[str]:
    return [line for line in out.stderr.splitlines() if line.startswith("[")]


def test_auto_finds_the_oom_boundary_under_a_memory_cap_and_a_rerun_runs_nothing(tmp_path):
    results = tmp_path / "r.jsonl"
    args = [*BIG_VOCAB, "--zero", "0", "--mb-start", "4", "--mb-max", "256", "--mb-tolerance", "0.25",
            "--memory-cap", "1GiB", "--mb-flat", "0"]  # the boundary itself, however flat CPU throughput is
    out = dsx_sweep(results, *args)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [parse_row(r) for r in read_rows(results)]
    fits = sorted(r.micro_batch for r in rows if r.status == "ok")
    ooms = sorted(r.micro_batch for r in rows if r.status == "oom")
    assert fits and ooms and {r.status for r in rows} == {"ok", "oom"}
    assert max(fits) < min(ooms), "memory grows with the micro-batch: nothing fits above an OOM"
    assert min(ooms) - max(fits) <= max(1, int(0.25 * max(fits)))
    assert [r.micro_batch for r in rows][:2] == [4, 8]  # grows x2 from --mb-start
    assert {r.sweep.search for r in rows} == {"grow", "bisect"} and len({r.sweep.sweep_id for r in rows}) == 1
    for row in rows:
        assert row.memory_cap == 1 << 30 and row.memory.capacity == 1 << 30
        assert row.memory.capacity_source == "--memory-cap (RLIMIT_DATA of each CPU rank, set after the imports)"
        assert row.overhead.device_seconds > 0 and row.model.dims["vocab_size"] == 32000
        assert row.overhead.dsx_startup_s is None  # trials of one sweep share the dsx process
        assert row.overhead.device_seconds <= row.overhead.total_s < row.overhead.device_seconds + 30
        assert row.command[:4] == ["dsx", "run", "--model", "gpt2-tiny"] and "--memory-cap" in row.command
        if row.status == "oom":
            assert "DefaultCPUAllocator: can't allocate memory" in row.error
    assert "z0 fp32 n" not in out.stdout  # no vary in the label
    assert f"z0 fp32                                  fits up to micro-batch {max(fits)}, first OOM at {min(ooms)}" \
        in out.stdout
    assert all(" | ETA " in line for line in trial_lines(out))  # a progress line per trial, with the time left
    best = json.loads(out.stdout.split("  DeepSpeed config:\n", 1)[1])  # the sweep ends with its best config
    assert best["zero_optimization"]["stage"] == 0 and best["train_micro_batch_size_per_gpu"] in fits

    again = dsx_sweep(results, *args)
    assert again.returncode == 0
    assert len(read_rows(results)) == len(rows), "a re-run of a finished sweep runs nothing"
    assert f"0 trial(s) run, {len(rows)} already done" in again.stdout
    assert all("already done (row in the results file)" in line for line in trial_lines(again))


def test_a_dead_rank_and_a_hung_trial_are_rows_and_the_sweep_goes_on(tmp_path):
    results = tmp_path / "r.jsonl"
    started = time.time()
    out = dsx_sweep(results, *BIG_VOCAB, "--zero", "1", "--micro-batch", "1,2,3", "--trial-timeout", "45",
                    "--inject", "1=exit:0", "--inject", "2=hang:0")
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [parse_row(r) for r in read_rows(results)]
    assert [(r.micro_batch, r.status) for r in rows] == [(1, "error"), (2, "timeout"), (3, "ok")]
    assert "rank 0 stopped during 'warmup_done' without a result (launcher exit code 17" in rows[0].error
    assert rows[1].error.startswith("timed out after 45 s and was killed (rank 0: warmup_done)")
    assert time.time() - started < 300
    lines = trial_lines(out)
    assert lines[0].startswith("[  1] z1 fp32 mb1 (fixed): error - rank 0 stopped during 'warmup_done'")
    assert lines[1].startswith("[  2] z1 fp32 mb2 (fixed): timeout - timed out after 45 s")


def wait_for(condition, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def running_trial(lock: Path) -> int | None:
    try:
        return json.loads(lock.read_text() or "null")["pgid"]
    except (OSError, ValueError, TypeError, KeyError):
        return None


def group_alive(pgid: int) -> list[psutil.Process]:
    alive = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_stops_the_running_trial_and_the_sweep_resumes_after_it(tmp_path, sig):
    results = tmp_path / "r.jsonl"
    lock = Path(str(results) + ".lock")
    args = [*BIG_VOCAB, "--zero", "1", "--micro-batch", "1,2"]
    buffers = shm_buffers()
    # SIGINT as a terminal leaves it: a shell without job control starts background jobs with SIGINT ignored, and
    # Python then never raises KeyboardInterrupt (a CI started with `&` would test nothing)
    proc = subprocess.Popen(sweep_argv(results, *args), cwd=tmp_path, env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    pgid = wait_for(lambda: running_trial(lock), 120, "the first trial to start")
    wait_for(lambda: any("train_rank" in " ".join(p.cmdline()) for p in group_alive(pgid)), 60, "a rank process")
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stdout + stderr
    assert "Traceback" not in stdout + stderr
    assert "dsx sweep: interrupted; the running trial's processes were stopped. Run the same command to resume." \
        in stderr, stderr
    assert "interrupted after 0 finished trial(s); the same command resumes it" in stdout
    assert f"no row was written to {results} (nothing ran)" in stdout
    assert group_alive(pgid) == [], [str(p) for p in group_alive(pgid)]
    assert read_rows(results) == [] and running_trial(lock) is None
    assert shm_buffers() <= buffers, "the stopped trial's /dev/shm buffers were not removed"

    out = dsx_sweep(results, *args)
    assert out.returncode == 0 and [r["status"] for r in read_rows(results)] == ["ok", "ok"]


def test_after_a_sigkill_of_dsx_the_next_run_reaps_the_orphaned_trial_and_loses_or_repeats_no_row(tmp_path):
    results = tmp_path / "r.jsonl"
    lock = Path(str(results) + ".lock")
    args = [*BIG_VOCAB, "--zero", "1", "--micro-batch", "1,2,3"]
    buffers = shm_buffers()
    proc = subprocess.Popen(sweep_argv(results, *args), cwd=tmp_path, env=env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    wait_for(lambda: len(read_rows(results)) == 1, 300, "the first row")
    pgid = wait_for(lambda: running_trial(lock), 60, "the second trial to start")
    wait_for(lambda: any("train_rank" in " ".join(p.cmdline()) for p in group_alive(pgid)), 60, "a rank process")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert group_alive(pgid), "the trial's ranks outlive dsx (their own process group)"

    out = dsx_sweep(results, *args)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "stopped" in out.stdout and f"(process group {pgid}," in out.stdout
    assert group_alive(pgid) == []
    rows = read_rows(results)
    assert rows.skipped == []
    assert [r["micro_batch"] for r in rows] == [1, 2, 3] and {r["status"] for r in rows} == {"ok"}
    assert max(Counter(r["trial_key"] for r in rows).values()) == 1
    assert "1 already done" in out.stdout
    assert shm_buffers() <= buffers, "the orphaned trial's /dev/shm buffers were not removed"
