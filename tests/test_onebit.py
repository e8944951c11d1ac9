"""1-bit optimizers in `dsx run` (dsx.onebit): what dsx sets for them, what it checks, and the refusals: on a
DeepSpeed 0.19 interpreter (removed there) and on CPU ranks (none of them runs on gloo: bench/onebit/cpu_attempt.md).
The GPU run is bench/onebit/h100.sh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsx.lane import Lane
from dsx.onebit import kind_of, run_defaults, run_problems

ROOT = Path(__file__).resolve().parent.parent
ONEBIT_CONFIG = {"fp16": {"enabled": True}, "zero_optimization": {"stage": 0},
                 "optimizer": {"type": "OneBitAdam", "params": {"freeze_step": 2}}}
CPU_REFUSAL = ("Error: 1-bit Adam cannot run on CPU ranks: DeepSpeed 0.18.9's compressed allreduce needs cupy and "
               "NCCL (comm_backend_name nccl), cupy and mpi4py under an MPI launch (mpi) or the XPU-only packbits op "
               "(compressed), and gloo offers none (tried: bench/onebit/cpu_attempt.md); run it on GPUs")
ON_019 = ("1-bit Adam was removed in DeepSpeed 0.19 (the ranks' DeepSpeed is 0.19.8): run it with a DeepSpeed 0.18.9 "
          "interpreter (python3 -m venv .venv18 && .venv18/bin/pip install torch==2.13.0 deepspeed==0.18.9 "
          "transformers; then dsx run --python .venv18/bin/python ...), or cut gradient traffic between nodes "
          "on 0.19 with ZeRO++ quantized gradients (qgZ, multi-node runs only): --zero 3 --ds-set "
          "zero_optimization.zero_quantized_gradients=true")


def test_dsx_run_onebit_defaults_to_no_zero_fp16_and_a_freeze_step_half_way_through_the_timed_steps():
    changes = {"onebit": "adam"}
    assert run_defaults(changes, (), warmup=2, steps=6) == ["optimizer.params.freeze_step=5"]
    assert changes == {"onebit": "adam", "zero": 0, "precision": "fp16"}
    assert run_defaults({"onebit": "zero-one-adam"}, (), 1, 4) == ["optimizer.params.var_freeze_step=3"]


def test_what_the_user_gave_stays():
    changes = {"onebit": "lamb", "zero": 2, "precision": "bf16"}
    assert run_defaults(changes, ("optimizer.params.freeze_step=100",), 2, 6) == []
    assert changes == {"onebit": "lamb", "zero": 2, "precision": "bf16"}  # the linter refuses ZeRO-2 later
    assert run_defaults({}, (), 2, 6) == []


def test_the_kind_is_read_from_the_config_in_any_case():
    assert kind_of(ONEBIT_CONFIG) == "onebitadam"
    assert kind_of({"optimizer": {"type": "zeroOneAdam"}}) == "zerooneadam" and kind_of({"optimizer": 3}) is None


LANE = Lane(python="/envs/ds18/bin/python", executable="/envs/ds18/bin/python", prefix="/envs/ds18",
            python_version="3.11.7", deepspeed="0.18.9", cupy="/envs/ds18/cupy/__init__.py")


def with_backend(name: str) -> dict:
    return {**ONEBIT_CONFIG, "optimizer": {"type": "OneBitLamb", "params": {"comm_backend_name": name}}}


def test_on_gpus_only_the_nccl_backend_with_cupy_is_launched():
    assert run_problems(ONEBIT_CONFIG, "cuda", LANE) == []
    assert run_problems({"optimizer": {"type": "AdamW"}}, "cpu", None) == []
    assert run_problems(with_backend("mpi"), "cuda", LANE) == [
        "1-bit LAMB with comm_backend_name mpi needs an MPI launch (mpirun) and mpi4py; dsx launches with DeepSpeed's "
        "runner: use comm_backend_name nccl"]
    assert run_problems(with_backend("compressed"), "cuda", LANE) == [
        "1-bit LAMB with comm_backend_name compressed runs only on XPU (the packbits op): use comm_backend_name nccl"]
    assert run_problems(with_backend("gloo"), "cuda", LANE) == [
        "optimizer.params.comm_backend_name 'gloo': 1-bit LAMB takes one of nccl, mpi, compressed, hccl"]
    no_cupy = Lane(**{**LANE.__dict__, "cupy": None})
    assert run_problems(ONEBIT_CONFIG, "cuda", no_cupy) == [
        "1-bit Adam with comm_backend_name nccl imports cupy, which /envs/ds18/bin/python does not have: install the "
        "one for its CUDA (e.g. pip install cupy-cuda12x)"]


def test_on_cpu_ranks_every_1_bit_optimizer_is_refused():
    assert run_problems(ONEBIT_CONFIG, "cpu", LANE) == [CPU_REFUSAL.removeprefix("Error: ")]


def dsx_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsx", "run", "--model", "gpt2-tiny", *args,
                           "--results", str(tmp_path / "runs.jsonl")], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)


def test_onebit_on_a_deepspeed_0_19_interpreter_is_refused_with_the_venv_and_zero_plus_plus(tmp_path):
    out = dsx_run(tmp_path, "--onebit", "adam")
    assert out.returncode == 2 and out.stderr.splitlines()[-1] == f"Error: --onebit adam: {ON_019}"
    assert not (tmp_path / "runs.jsonl").exists() and not (tmp_path / "runs").exists()


def test_a_1_bit_config_file_on_a_deepspeed_0_19_interpreter_is_refused_the_same_way(tmp_path):
    config = tmp_path / "onebit.json"
    config.write_text(json.dumps({"train_batch_size": 1, **ONEBIT_CONFIG}))
    out = dsx_run(tmp_path, "--config", str(config))
    assert out.returncode == 2 and out.stderr.splitlines()[-1] == f"Error: {config}: optimizer.type: {ON_019}"


@pytest.fixture(scope="module")
def lane18(legacy_deepspeed, tmp_path_factory) -> Path:
    from lanes import make_lane

    return make_lane(tmp_path_factory.mktemp("lane") / "ds18", legacy_deepspeed)


def test_onebit_through_a_0_18_9_lane_on_cpu_ranks_is_refused_before_anything_starts(lane18, tmp_path):
    out = dsx_run(tmp_path, "--python", str(lane18), "--onebit", "adam", "--gpus", "2")
    assert out.returncode == 2 and out.stderr.splitlines()[-1] == CPU_REFUSAL
    assert not (tmp_path / "runs.jsonl").exists() and not (tmp_path / "runs").exists()


def test_onebit_with_zero_through_the_lane_is_refused(lane18, tmp_path):
    out = dsx_run(tmp_path, "--python", str(lane18), "--onebit", "lamb", "--zero", "2", "--dry-run")
    assert out.returncode == 2 and out.stderr.splitlines()[-1] == ("Error: 1-bit optimizers do not work with ZeRO: use "
                                                                   "--zero 0")


def test_the_config_dsx_run_onebit_makes_for_a_0_18_9_lane(lane18):
    from dsx.run import RunRequest
    from dsx.run.request import resolve_config, resolve_lane

    lane = resolve_lane(str(lane18))
    request = RunRequest(model="gpt2-tiny", config_flags={"onebit": "adam"}, warmup=2, steps=6, python=str(lane18))
    config, source, warnings = resolve_config(request, 2, lane)
    assert (lane.deepspeed, source, warnings) == ("0.18.9", "flags", [])
    assert config["zero_optimization"] == {"stage": 0} and config["fp16"]["enabled"] is True
    assert config["optimizer"]["type"] == "OneBitAdam"
    assert config["optimizer"]["params"]["freeze_step"] == 5  # warm-up 2 + half of the 6 timed steps
