"""Proof: `dsx run --python` with a DeepSpeed 0.18.9 interpreter runs a ZeRO-2 row on 2 CPU ranks, records 0.18.9 as
the ranks' DeepSpeed, and counts its communication like any row; `dsx sweep --python` and `dsx launch --python` run
their ranks there too. The interpreter is the light lane tests/lanes.py builds from the side-installed 0.18.9 (the
README shows the full venv a user makes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsx.results import parse_row, read_rows

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def lane_row(legacy_deepspeed, tmp_path_factory):
    """One real ZeRO-2 run through the lane (its first run JIT-builds the 0.18.9 shm op: a minute or two)."""
    from lanes import make_lane

    folder = tmp_path_factory.mktemp("lane")
    python = make_lane(folder / "ds18", legacy_deepspeed)
    results = folder / "runs.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-m", "dsx", "run", "--python", str(python), "--model", "gpt2-tiny",
                          "--gpus", "2", "--zero", "2", "--steps", "2", "--warmup", "1",
                          "--ds-set", "optimizer.params.torch_adam=true", "--results", str(results)],
                         cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    return parse_row(read_rows(results)[-1]), python, env


@pytest.mark.slow
@pytest.mark.deepspeed
def test_a_zero_2_row_through_the_lane_records_deepspeed_0_18_9_as_the_ranks(lane_row):
    row, python, env = lane_row
    assert row.status == "ok" and row.python == str(python)
    assert row.versions.deepspeed == "0.18.9" and row.versions.torch
    assert {r.status for r in row.ranks} == {"ok"} and len(row.ranks) == 2
    assert f"the ranks run {python} (--python), started through lane_exec.py; DeepSpeed's runner runs " \
           f"{sys.executable}" in row.notes
    ops = Path(env["TORCH_EXTENSIONS_DIR"]) / "deepspeed-0.18.9"
    assert any(f"TORCH_EXTENSIONS_DIR={ops}" in note for note in row.notes)


@pytest.mark.slow
@pytest.mark.deepspeed
def test_the_lanes_communication_is_counted_and_matches_the_prediction(lane_row):
    comm = lane_row[0].comm
    assert set(comm.collectives) == {"all_reduce", "all_gather_into_tensor"}
    assert comm.bytes_per_step == pytest.approx(comm.predicted.bytes_per_step, rel=0.01)


@pytest.mark.slow
@pytest.mark.deepspeed
def test_a_sweep_through_the_lane_trains_its_trials_on_deepspeed_0_18_9(lane_row, tmp_path):
    _, python, env = lane_row
    results = tmp_path / "runs.jsonl"
    out = subprocess.run([sys.executable, "-m", "dsx", "sweep", "--python", str(python), "--model", "gpt2-tiny",
                          "--gpus", "2", "--zero", "1", "--micro-batch", "2", "--steps", "2", "--warmup", "1",
                          "--ds-set", "optimizer.params.torch_adam=true", "--results", str(results)], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [parse_row(r) for r in read_rows(results)]
    assert [(r.status, r.python, r.versions.deepspeed) for r in rows] == [("ok", str(python), "0.18.9")]


@pytest.mark.slow
@pytest.mark.deepspeed
def test_a_launch_through_the_lane_runs_the_users_script_on_deepspeed_0_18_9_and_records_it(lane_row, tmp_path):
    _, python, env = lane_row
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
                                  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}}))
    results = tmp_path / "runs.jsonl"
    out = subprocess.run([sys.executable, "-m", "dsx", "launch", "--python", str(python), "--config", str(config),
                          "--gpus", "2", "--results", str(results), "--", "python",
                          str(ROOT / "tests/fixtures/scripts/user_train.py"), "--out", "out", "--steps", "2"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    for rank in (0, 1):
        ran = json.loads((tmp_path / "out" / f"rank-{rank}.json").read_text())
        assert ran["deepspeed"] == "0.18.9" and len(ran["losses"]) == 2
    [row] = [parse_row(r) for r in read_rows(results)]
    assert (row.kind, row.status, row.python, row.versions.deepspeed) == ("launch", "ok", str(python), "0.18.9")
