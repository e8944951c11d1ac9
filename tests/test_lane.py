"""The DeepSpeed-version lane (`--python`, dsx.lane): the probe and its cache, bad interpreters refused in one line,
the launch that starts the ranks with the lane's interpreter, the lane in trial keys and sweep ids.
Real runs through a DeepSpeed 0.18.9 lane: tests/test_lane_cpu.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsx import lane as lanes
from dsx.lane import Lane, LaneError, probe, problems
from dsx.launcher import LANE_EXEC, RANK_SCRIPT, ROOT, LaunchError, build_launch
from dsx.op_cache import environment_dir, lane_dir
from dsx.rank.lane_exec import lane_argv

LANE = Lane(python="/envs/ds18/bin/python", executable="/envs/ds18/bin/python", prefix="/envs/ds18",
            python_version="3.11.7", deepspeed="0.18.9", deepspeed_path="/envs/ds18/deepspeed/__init__.py",
            torch="2.13.0", transformers="5.24.0", pydantic="2.14.4", dsx_path=str(ROOT / "dsx" / "__init__.py"))


@pytest.fixture()
def env(tmp_path) -> dict:
    """The environment the probe runs in, with its own cache folder."""
    return {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}


def test_a_path_that_does_not_exist_is_refused(env):
    with pytest.raises(LaneError, match="^--python /no/such/python: no such file$"):
        probe("/no/such/python", env)


def test_a_folder_or_a_file_that_cannot_run_is_refused(env, tmp_path):
    with pytest.raises(LaneError, match=r"not an executable file \(give the interpreter, e.g. .venv18/bin/python\)$"):
        probe(str(tmp_path), env)
    text = tmp_path / "python"
    text.write_text("print(1)\n")
    with pytest.raises(LaneError, match="not an executable file"):
        probe(str(text), env)


def test_a_program_that_is_not_python_is_refused(env, tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    with pytest.raises(LaneError, match=rf"^--python {fake}: not a Python interpreter dsx can use \(it printed no "
                                        r"answer\)$"):
        probe(str(fake), env)


def test_a_file_the_system_cannot_start_is_refused(env, tmp_path):
    broken = tmp_path / "python"
    broken.write_text("#!/no/such/interpreter\n")
    broken.chmod(0o755)
    with pytest.raises(LaneError, match=rf"^--python {broken}: not an interpreter dsx can start \(\[Errno 2\]"):
        probe(str(broken), env)


def test_an_interpreter_without_deepspeed_is_refused_with_the_install_command(env, tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    python = tmp_path / "bare" / "bin" / "python"
    with pytest.raises(LaneError, match=rf"^--python {python}: has no DeepSpeed \(install it there, e.g. {python} -m "
                                        r"pip install deepspeed==0.18.9\)$"):
        probe(str(python), env)


def test_dsx_run_with_a_bad_python_says_so_in_one_line_and_exits_2(tmp_path):
    out = subprocess.run([sys.executable, "-m", "dsx", "run", "--model", "gpt2-tiny", "--python", "/no/such/python",
                          "--results", str(tmp_path / "runs.jsonl")], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.returncode == 2 and out.stderr.splitlines()[-1] == "Error: --python /no/such/python: no such file"
    assert not (tmp_path / "runs.jsonl").exists() and "Traceback" not in out.stderr


@pytest.fixture(scope="module")
def bad_pythons(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    """Interpreters --python refuses, each with the end of its one-line error."""
    folder = tmp_path_factory.mktemp("bad")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder / "bare")], check=True)
    bare = folder / "bare" / "bin" / "python"
    fake = folder / "python"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    return {"no DeepSpeed": (bare, f"has no DeepSpeed (install it there, e.g. {bare} -m pip install "
                                   "deepspeed==0.18.9)"),
            "not Python": (fake, "not a Python interpreter dsx can use (it printed no answer)")}


COMMANDS = {"run": ["run", "--model", "gpt2-tiny"], "sweep": ["sweep", "--model", "gpt2-tiny", "--zero", "1"],
            "launch": ["launch", "--config", str(ROOT / "tests/fixtures/configs/clean_zero2.json")]}


@pytest.mark.slow  # one subprocess each
@pytest.mark.parametrize("bad", ["no DeepSpeed", "not Python"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_with_a_lane_refuses_a_bad_python_in_one_line_and_records_nothing(bad_pythons, tmp_path,
                                                                                          command, bad):
    python, why = bad_pythons[bad]
    args = [*COMMANDS[command], "--python", str(python), "--results", str(tmp_path / "runs.jsonl")]
    args += ["--", "python", "train.py"] if command == "launch" else []
    out = subprocess.run([sys.executable, "-m", "dsx", *args], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache")},
                         timeout=120)
    assert out.returncode == 2 and out.stderr.splitlines()[-1] == f"Error: --python {python}: {why}", out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "runs.jsonl").exists()
    assert not (tmp_path / "runs").exists() and not out.stderr.startswith("dsx sweep")  # refused before the plan


def test_the_probe_asks_once_and_asks_again_when_the_interpreter_or_its_packages_change(env, monkeypatch):
    first = probe(sys.executable, env)
    assert first.deepspeed and first.python == os.path.abspath(sys.executable)
    calls = []
    monkeypatch.setattr(lanes, "_run_probe", lambda *a: calls.append(a) or pytest.fail("asked again"))
    assert probe(sys.executable, env) == first and calls == []
    entry = next((lanes.cache_dir(env)).glob("*.json"))
    data = lanes.read_json(entry)
    folder = next(p for p in data["stamps"] if p != first.python)
    data["stamps"][folder] -= 1  # as if a package was installed there since
    lanes.write_json(entry, data)
    with pytest.raises(pytest.fail.Exception, match="asked again"):
        probe(sys.executable, env)


def test_a_lane_importing_another_dsx_or_lacking_what_ranks_import_is_refused():
    assert problems(LANE, ROOT, None) == []
    other = Lane(**{**LANE.__dict__, "dsx_path": "/elsewhere/dsx/__init__.py", "dsx": "0.0.1"})
    assert problems(other, ROOT, "0.1.0") == [f"--python {LANE.python}: imports dsx 0.0.1 from "
                                              f"/elsewhere/dsx/__init__.py, not this dsx 0.1.0 ({ROOT}): install the "
                                              "same dsx there"]
    bare = Lane(**{**LANE.__dict__, "transformers": None, "dsx_path": None})
    assert problems(bare, ROOT, None) == [
        f"--python {LANE.python}: has no transformers (dsx's ranks build transformers models)",
        f"--python {LANE.python}: cannot import dsx (install dsx into it too: {LANE.python} -m pip install --no-deps "
        "dsx)"]


def test_a_lane_for_a_users_own_script_needs_deepspeed_and_torch_only():
    """dsx launch --python: the ranks run the user's script, so a venv with DeepSpeed and torch will do."""
    bare = Lane(**{**LANE.__dict__, "transformers": None, "pydantic": None, "dsx_path": None})
    assert problems(bare, ROOT, None, runs_dsx=False) == []
    assert problems(Lane(**{**bare.__dict__, "torch": None}), ROOT, None, runs_dsx=False) == [
        f"--python {LANE.python}: has no torch"]


# ----------------------------------------------------------------------------------------------------- launch


@pytest.mark.parametrize("args, argv", [
    (["--local_rank=1", "/py", "train.py", "--lr", "1"], ["/py", "-u", "train.py", "--local_rank=1", "--lr", "1"]),
    (["/py", "-m", "pkg.train", "--lr", "1"], ["/py", "-u", "-m", "pkg.train", "--lr", "1"]),
    (["--local_rank=0", "/py", "-m", "pkg.train"], ["/py", "-u", "-m", "pkg.train", "--local_rank=0"]),
])
def test_the_trampoline_puts_local_rank_where_deepspeeds_launcher_would(args, argv):
    assert lane_argv(args) == argv


def launch(**kwargs):
    return build_launch(world_size=2, device="cpu", master_port=29500, base_env={"PATH": "/usr/bin"}, cwd="/w",
                        cpu_count=2, **kwargs)


def test_a_run_with_a_lane_keeps_the_runner_and_starts_the_rank_script_with_the_lanes_python():
    plan = launch(plan_json="/r/plan.json", rank_python=LANE.python, extensions_dir="/cache/ds18")
    assert plan.argv[:4] == [sys.executable, "-u", "-m", "deepspeed.launcher.runner"]
    assert plan.argv[-5:] == [str(LANE_EXEC), LANE.python, str(RANK_SCRIPT), "--plan-json", "/r/plan.json"]
    assert plan.env["TORCH_EXTENSIONS_DIR"] == "/cache/ds18"
    assert plan.env["PATH"].split(os.pathsep)[:2] == ["/envs/ds18/bin", str(Path(sys.executable).parent)]


def test_a_launch_with_a_lane_runs_a_module_through_it_and_refuses_a_program():
    plan = launch(user_command=["python", "-m", "pkg.train", "--x"], rank_python=LANE.python)
    assert "--module" not in plan.argv and plan.argv[-5:] == [str(LANE_EXEC), LANE.python, "-m", "pkg.train", "--x"]
    with pytest.raises(LaunchError, match="^--python starts Python ranks: give the command as -- python SCRIPT.py "
                                          "ARGS or -- python -m MODULE ARGS$"):
        launch(user_command=["./train"], rank_python=LANE.python)


def test_the_lanes_ops_get_their_own_folder():
    from dsx.op_cache import _version

    chosen = {"TORCH_EXTENSIONS_DIR": "/ext"}
    assert lane_dir(chosen, LANE) == Path("/ext/deepspeed-0.18.9")
    assert lane_dir(chosen, Lane(**{**LANE.__dict__, "deepspeed": _version("deepspeed")})) == Path("/ext")
    home = {"HOME": "/home/u"}
    assert lane_dir(home, LANE) == environment_dir(home, "/envs/ds18", python="3.11", torch="2.13.0",
                                                   deepspeed="0.18.9")
    assert lane_dir(home, LANE).name.startswith("py3.11-torch2.13.0-deepspeed0.18.9-")


# ------------------------------------------------------------------------------------------ trial key, sweep id


def test_the_lane_is_part_of_a_trial_and_of_a_sweep_but_leaves_the_others_keys_as_they_were():
    from dsx.results import trial_key
    from dsx.sweep import SweepSpec, sweep_configurations
    from dsx.sweep.trials import run_command, run_request

    same = {"ds_config": {}, "model": {}, "toggles": {}, "device": "cpu", "world_size": 1, "steps": 1, "warmup": 0,
            "memory_cap": None}
    assert trial_key(**same) == trial_key(**same, lane=None)
    assert trial_key(**same, lane={"python": LANE.python, "deepspeed": "0.18.9"}) != trial_key(**same)
    spec = SweepSpec(model="gpt2-tiny", zero=[2], offload=["none"], micro_batch=[1])
    laned = SweepSpec(model="gpt2-tiny", zero=[2], offload=["none"], micro_batch=[1], python=LANE.python)
    assert spec.sweep_id() != laned.sweep_id()
    request = run_request(laned, sweep_configurations(laned)[0], 1, "fixed")
    assert request.python == LANE.python and run_command(request)[-4:-2] == ["--python", LANE.python]
