"""The launch as data: DeepSpeed launcher command lines and child environments (no process is started here,
except by the run_plan timeout test and the --dry-run CLI test, which launches nothing)."""

from __future__ import annotations

import _thread
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from importlib import metadata
from pathlib import Path

import pytest

from dsx import op_cache, processes
from dsx.launcher import RANK_SCRIPT, LaunchError, LaunchPlan, build_launch, clean_arch_list
from dsx.processes import run_plan

ROOT = Path(__file__).resolve().parent.parent
PY = "/venv/bin/python"


def plan(device="cpu", world_size=2, env=None, caps=None, cpu_count=2) -> LaunchPlan:
    return build_launch(plan_json="/runs/x/plan.json", world_size=world_size, device=device, master_port=29555,
                        base_env=env if env is not None else {"PATH": "/usr/bin"}, cwd="/work", python=PY,
                        gpu_capabilities=caps, cpu_count=cpu_count)


def test_a_ranks_variables_in_dsxs_own_environment_do_not_reach_the_job():
    p = plan(env={"PATH": "/usr/bin", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_SIZE": "1",
                  "CROSS_RANK": "0", "CROSS_SIZE": "1", "MASTER_ADDR": "10.0.0.1"})
    assert not {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE"} & set(p.env)
    assert p.env["MASTER_ADDR"] == "10.0.0.1"  # not a per-rank variable: left as it is


def deepspeed_parses(arch_list: str) -> bool:
    """What DeepSpeed 0.19.8's op builder does with each entry (builder.py compute_capability_args)."""
    try:
        for cc in arch_list.replace(" ", ";").split(";"):
            if cc.strip():
                tuple(int(part.split("+")[0]) for part in cc.strip().split("."))
        return True
    except ValueError:
        return False


# ---------------------------------------------------------------------------------------------- command lines


def test_cpu_ranks_go_through_deepspeeds_runner_with_an_explicit_rank_count():
    p = plan("cpu", 2)
    assert p.argv == [PY, "-u", "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--num_nodes", "1",
                      "--master_addr", "127.0.0.1", "--master_port", "29555", "--no_local_rank", str(RANK_SCRIPT),
                      "--plan-json", "/runs/x/plan.json"]
    assert RANK_SCRIPT == ROOT / "dsx" / "rank" / "train_rank.py" and RANK_SCRIPT.exists()
    assert p.cwd == "/work"


def test_cpu_environment_selects_the_cpu_accelerator_and_splits_the_cores():
    base = {"PATH": "/usr/bin", "TORCH_EXTENSIONS_DIR": "/cache/ext"}
    p = plan("cpu", 2, env=base, cpu_count=8)
    assert p.env["DS_ACCELERATOR"] == "cpu"
    assert p.env["OMP_NUM_THREADS"] == "4"
    assert p.env["TORCH_EXTENSIONS_DIR"] == "/cache/ext"
    assert p.env_changes == {"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "4", "OMP_WAIT_POLICY": "PASSIVE",
                             "PYTHONPATH": str(ROOT), "PATH": f"{Path(PY).parent}:/usr/bin"}
    assert base == {"PATH": "/usr/bin", "TORCH_EXTENSIONS_DIR": "/cache/ext"}  # the caller's env is not touched
    assert any("gloo" in n for n in p.notes)


def test_a_users_omp_num_threads_is_kept():
    p = plan("cpu", 2, env={"OMP_NUM_THREADS": "3"}, cpu_count=2)
    assert p.env["OMP_NUM_THREADS"] == "3" and "OMP_NUM_THREADS" not in p.env_changes


@pytest.mark.parametrize("users", [{"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "10000"}])
def test_cpu_ranks_wait_passively_unless_the_user_chose_how_openmp_waits(users):
    # spinning OpenMP threads made a 1-rank step 57x slower with one other busy core (bench/cpu_threads/README.md)
    assert plan("cpu", 1, env={}, cpu_count=2).env["OMP_WAIT_POLICY"] == "PASSIVE"
    p = plan("cpu", 1, env=dict(users), cpu_count=2)
    assert p.env.get("OMP_WAIT_POLICY") == users.get("OMP_WAIT_POLICY") and "OMP_WAIT_POLICY" not in p.env_changes


def test_one_rank_per_gpu_without_cpu_settings():
    p = plan("cuda", 4, env={"PATH": "/usr/bin"}, caps=[(9, 0)] * 4, cpu_count=64)
    assert p.argv[4:8] == ["--num_gpus", "4", "--num_nodes", "1"]
    assert "DS_ACCELERATOR" not in p.env and "OMP_WAIT_POLICY" not in p.env


def test_gpu_ranks_sharing_a_host_share_its_cores_out():
    p = plan("cuda", 4, env={"PATH": "/usr/bin"}, caps=[(9, 0)] * 4, cpu_count=64)
    assert p.env_changes["OMP_NUM_THREADS"] == "16"
    assert "OMP_NUM_THREADS=16 per rank: 64 cores shared by 4 ranks per host (set OMP_NUM_THREADS to choose)" \
        in p.notes


def test_one_gpu_rank_and_a_users_omp_num_threads_keep_openmp_as_it_is():
    assert "OMP_NUM_THREADS" not in plan("cuda", 1, env={"PATH": "/usr/bin"}, cpu_count=64).env
    mine = plan("cuda", 4, env={"OMP_NUM_THREADS": "64"}, cpu_count=64)
    assert mine.env["OMP_NUM_THREADS"] == "64" and "OMP_NUM_THREADS" not in mine.env_changes


def test_cuda_visible_devices_becomes_include_because_num_gpus_would_ignore_it():
    p = plan("cuda", 2, env={"CUDA_VISIBLE_DEVICES": "2,3,5"})
    assert p.argv[4:6] == ["--include", "localhost:2,3"]
    assert "--num_gpus" not in p.argv and "--num_nodes" not in p.argv


def test_more_ranks_than_visible_gpus_or_uuid_devices_are_refused():
    with pytest.raises(LaunchError, match=r"--gpus 4 but CUDA_VISIBLE_DEVICES='2,3' makes 2 visible"):
        plan("cuda", 4, env={"CUDA_VISIBLE_DEVICES": "2,3"})
    with pytest.raises(LaunchError, match="by UUID"):
        plan("cuda", 1, env={"CUDA_VISIBLE_DEVICES": "GPU-8f3c0a"})
    with pytest.raises(LaunchError, match="at least 1"):
        plan("cpu", 0)


def test_a_launch_caches_ops_in_this_python_environments_own_folder(tmp_path, monkeypatch):
    """Venvs sharing ~/.cache/torch_extensions rebuild each other's ops (issue 21): each gets a folder of its own,
    in the launch's environment (so --dry-run shows it); a TORCH_EXTENSIONS_DIR the user set is kept."""
    env = {"PATH": "/usr/bin", "HOME": str(tmp_path)}
    p = plan(env=env)
    folder = p.env["TORCH_EXTENSIONS_DIR"]
    assert folder == str(op_cache.environment_dir(env))
    assert Path(folder).parent == tmp_path / ".cache" / "dsx" / "torch_extensions"
    assert Path(folder).name.startswith(f"py{sys.version_info.major}.{sys.version_info.minor}-torch"
                                        f"{metadata.version('torch')}-deepspeed{metadata.version('deepspeed')}-")
    assert p.env_changes["TORCH_EXTENSIONS_DIR"] == folder and f"  TORCH_EXTENSIONS_DIR={folder}" in p.describe()
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "another-venv"))
    assert plan(env=env).env["TORCH_EXTENSIONS_DIR"] != folder
    mine = plan(env={**env, "TORCH_EXTENSIONS_DIR": "/cache/ext"})
    assert mine.env["TORCH_EXTENSIONS_DIR"] == "/cache/ext" and "TORCH_EXTENSIONS_DIR" not in mine.env_changes


def test_gpu_ranks_record_the_allocator_and_openmp_settings_they_inherit():
    p = plan("cuda", 4, env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "OMP_NUM_THREADS": "16"})
    assert "the ranks inherit PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, OMP_NUM_THREADS=16 from dsx's " \
           "environment" in p.notes
    assert not any("inherit" in note for note in plan("cuda", 4, env={}).notes)


def test_describe_shows_the_command_and_every_environment_change():
    p = plan("cuda", 1, env={"TORCH_CUDA_ARCH_LIST": "9.0a"}, caps=[(9, 0)])
    text = p.describe()
    assert "deepspeed.launcher.runner --num_gpus 1" in text
    assert "TORCH_CUDA_ARCH_LIST=9.0" in text
    assert "note: TORCH_CUDA_ARCH_LIST='9.0a' cannot be parsed" in text


# ---------------------------------------------------------------------------------------------- TORCH_CUDA_ARCH_LIST


@pytest.mark.parametrize("value, caps, expected", [
    ("9.0a", [(9, 0)], "9.0"),                          # the GPU hosts' value: derived from the visible H100
    ("8.0;9.0a+PTX", [(8, 0), (9, 0)], "8.0;9.0"),      # from the visible GPUs, whatever the list said
    ("8.0;9.0a+PTX", None, "8.0;9.0+PTX"),              # GPUs unknown: the suffix goes, +PTX stays
    ("9.0a 10.0f", None, "9.0;10.0"),                   # space-separated, Blackwell family suffix
    ("Hopper", None, ""),                               # nothing parseable left: unset, DeepSpeed probes itself
])
def test_an_arch_list_deepspeed_cannot_parse_is_replaced(value, caps, expected):
    assert not deepspeed_parses(value)
    cleaned, note = clean_arch_list(value, caps)
    assert cleaned == expected and deepspeed_parses(cleaned)
    assert note.startswith(f"TORCH_CUDA_ARCH_LIST={value!r} cannot be parsed by DeepSpeed's op builder")


@pytest.mark.parametrize("value", ["9.0", "8.0;8.6;9.0+PTX", "7.5 8.0"])
def test_a_parseable_arch_list_is_kept(value):
    assert clean_arch_list(value, [(9, 0)]) == (value, None)
    assert clean_arch_list(None, [(9, 0)]) == (None, None)


def test_the_child_env_gets_the_clean_arch_list_on_gpu_and_is_left_alone_on_cpu():
    gpu = plan("cuda", 2, env={"TORCH_CUDA_ARCH_LIST": "8.0;9.0a+PTX"}, caps=[(8, 0), (9, 0)])
    assert gpu.env["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0"
    assert gpu.env_changes["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0"
    assert any("from the visible GPUs" in n for n in gpu.notes)
    unset = plan("cuda", 1, env={"TORCH_CUDA_ARCH_LIST": "Hopper"})
    assert "TORCH_CUDA_ARCH_LIST" not in unset.env and unset.env_changes["TORCH_CUDA_ARCH_LIST"] is None
    cpu = plan("cpu", 1, env={"TORCH_CUDA_ARCH_LIST": "9.0a"})
    assert cpu.env["TORCH_CUDA_ARCH_LIST"] == "9.0a" and "TORCH_CUDA_ARCH_LIST" not in cpu.env_changes


def test_a_multi_gpu_launch_notes_the_nccl_variables_its_ranks_run_with():
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    p = build_launch(plan_json="{}", world_size=2, device="cuda", master_port=29500, cwd="/tmp",
                     base_env={**env, "NCCL_P2P_DISABLE": "1", "NCCL_NET": "Socket"})
    assert "NCCL settings from the environment: NCCL_NET=Socket, NCCL_P2P_DISABLE=1" in p.notes
    one = build_launch(plan_json="{}", world_size=1, device="cuda", master_port=29500, cwd="/tmp",
                       base_env={**env, "NCCL_P2P_DISABLE": "1"})
    assert not any(note.startswith("NCCL settings") for note in one.notes)  # one rank: no collective to change


# ---------------------------------------------------------------------------------------------- run_plan


@pytest.mark.slow
def test_a_timeout_kills_the_whole_process_group(tmp_path):
    child_pid = tmp_path / "child.pid"
    script = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; "
              f"time.sleep(60)']); open({str(child_pid)!r}, 'w').write(str(p.pid)); print('started', flush=True); "
              f"time.sleep(60)")
    p = LaunchPlan(argv=[sys.executable, "-c", script], env=dict(os.environ), cwd=str(tmp_path))
    start = time.monotonic()
    done = run_plan(p, timeout_s=3, log_path=tmp_path / "log")
    assert done.timed_out and done.returncode is None
    assert time.monotonic() - start < 20
    assert "started" in (tmp_path / "log").read_text() and "started" in done.tail
    pid = int(child_pid.read_text())
    time.sleep(0.2)
    with pytest.raises(ProcessLookupError):  # the grandchild died with its group
        os.kill(pid, 0)


@pytest.mark.slow
def test_run_plan_says_in_one_line_when_deepspeed_builds_an_op(tmp_path, capsys):
    """torch runs ninja in the op's build folder in every process that loads the op; a ninja that has started a
    compiler is a build, and the user hears of it once, even when the job's output is not shown."""
    op = tmp_path / "ext" / "cpu_adam"
    op.mkdir(parents=True)
    ninja = op / "ninja"
    ninja.write_text("#!/bin/sh\nsleep 3\ntrue\n")
    ninja.chmod(0o755)
    p = LaunchPlan(argv=["sh", "-c", f"cd {op} && ./ninja && ./ninja"], env=dict(os.environ), cwd=str(tmp_path))
    assert run_plan(p, timeout_s=60).returncode == 0
    assert capsys.readouterr().err == op_cache.build_notice("cpu_adam") + "\n"
    assert op_cache.build_notice("cpu_adam") == (
        "dsx: DeepSpeed is building its cpu_adam op (first use in this Python environment: a minute or two on CPU, "
        "less on a GPU host); the job goes on when it is built")


@pytest.mark.slow
def test_ctrl_c_names_the_processes_that_outlive_sigkill_instead_of_calling_them_stopped(tmp_path, monkeypatch):
    """A process the kernel does not remove (stuck in the kernel, say) is named, so no caller says "stopped"."""
    real_killpg = os.killpg
    monkeypatch.setattr(processes.os, "killpg", lambda pgid, sig: real_killpg(pgid, sig) if sig == 0 else None)
    monkeypatch.setattr(processes, "KILL_WAIT_S", 0.5)
    p = LaunchPlan(argv=[sys.executable, "-c", "import time; time.sleep(60)"], env=dict(os.environ), cwd=str(tmp_path))
    groups = []

    def on_start(pgid):
        groups.append(pgid)
        threading.Timer(1.0, _thread.interrupt_main).start()  # Ctrl-C once the job runs

    # a CI started in the background inherits SIGINT ignored, and interrupt_main then does nothing: handle it here
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(processes.NotStopped) as caught:
            run_plan(p, timeout_s=60, on_start=on_start)
    finally:
        signal.signal(signal.SIGINT, previous)
        if groups:
            real_killpg(groups[0], signal.SIGKILL)
    pgid = groups[0]
    assert caught.value.pgid == pgid and len(caught.value.left) == 1
    assert re.fullmatch(rf"{pgid} sleeping: \S*python\S* -c import time; time.sleep\(60\)", caught.value.left[0])
    assert processes.stopped_text(caught.value) == (
        f"not every rank could be stopped: 1 process(es) of its process group {pgid} were still there 0.5 s after "
        f"SIGKILL ({caught.value.left[0]})")
    assert processes.stopped_text(KeyboardInterrupt()) == "every rank was stopped"


def test_run_plan_returns_the_exit_status_and_output(tmp_path):
    p = LaunchPlan(argv=[sys.executable, "-c", "print('hello'); raise SystemExit(3)"], env=dict(os.environ),
                   cwd=str(tmp_path))
    done = run_plan(p, timeout_s=30)
    assert (done.returncode, done.timed_out) == (3, False) and done.tail.strip() == "hello"


# ---------------------------------------------------------------------------------------------- dsx run --dry-run


def test_dry_run_prints_argv_env_and_config_and_runs_nothing(tmp_path):
    results = tmp_path / "out" / "runs.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "TORCH_CUDA_ARCH_LIST")}
    out = subprocess.run([sys.executable, "-m", "dsx", "run", "--model", "gpt2-tiny", "--gpus", "2", "--zero", "3",
                          "--micro-batch", "2", "--results", str(results), "--dry-run"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "-m deepspeed.launcher.runner --num_gpus 2 --num_nodes 1 --master_addr 127.0.0.1 --master_port" in text
    assert f"--no_local_rank {RANK_SCRIPT} --plan-json" in text
    assert "  DS_ACCELERATOR=cpu" in text and "  OMP_NUM_THREADS=" in text
    config_text = text.split("; --dry-run writes nothing):\n", 1)[1].split("\nrank plan", 1)[0]
    config = json.loads(config_text)
    assert config["zero_optimization"]["stage"] == 3
    assert (config["train_micro_batch_size_per_gpu"], config["train_batch_size"]) == (2, 4)  # world size 2
    plan_line = next(line for line in text.splitlines() if line.startswith("rank plan (a run writes it to "))
    plan_data = json.loads(plan_line.split("): ", 1)[1])
    assert (plan_data["model"], plan_data["micro_batch"], plan_data["device"]) == ("gpt2-tiny", 2, "cpu")
    assert list(tmp_path.iterdir()) == []  # "run nothing": no row, no run folder (issue 21)


def test_run_and_doctor_help_do_not_import_torch_or_deepspeed():
    probe = ("import sys\nfrom dsx.cli import cli\nfor args in (['run', '--help'], ['doctor', '--help']):\n"
             "    try:\n        cli.main(args=args, prog_name='dsx', standalone_mode=True)\n"
             "    except SystemExit:\n        pass\n"
             "print('HEAVY:' + ','.join(sorted(m for m in ('torch', 'deepspeed', 'transformers') if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "HEAVY:", out.stderr
    assert "--inject-failure" not in out.stdout  # a test hook, hidden from users


def test_the_interpreters_bin_goes_first_on_path_once():
    """Local ranks see the PATH remote ranks get from .deepspeed_env: torch rebuilds JIT ops when it changes."""
    assert plan(env={"PATH": f"/usr/bin:{Path(PY).parent}"}).env["PATH"] == f"{Path(PY).parent}:/usr/bin"
    assert "PATH" not in plan(env={"PATH": f"{Path(PY).parent}:/usr/bin"}).env_changes


def _nodes(launcher="pdsh", **kw):
    from dsx.hostfile import Layout, select
    from dsx.launcher import Nodes

    layout = Layout.from_selection(select({"127.0.0.1": 1, "127.0.0.2": 1}))
    return Nodes(hostfile="/h/hosts", layout=layout, launcher=launcher, env_file="/runs/x/deepspeed_env", **kw)


def test_a_pdsh_launch_passes_the_hostfile_and_writes_the_remote_environment():
    p = build_launch(plan_json="/runs/x/plan.json", world_size=2, device="cpu", master_port=29555,
                     base_env={"PATH": "/usr/bin", "TORCH_EXTENSIONS_DIR": "/cache/ext", "NCCL_DEBUG": "INFO"},
                     cwd="/work", python=PY, cpu_count=2, nodes=_nodes(ssh_port=2222))
    assert p.argv == [PY, "-u", "-m", "deepspeed.launcher.runner", "--hostfile", "/h/hosts", "--launcher", "pdsh",
                      "--no_ssh_check", "--ssh_port", "2222", "--master_addr", "127.0.0.1", "--master_port", "29555",
                      "--no_local_rank", str(RANK_SCRIPT), "--plan-json", "/runs/x/plan.json"]
    assert p.env["DS_ENV_FILE"] == "/runs/x/deepspeed_env"
    assert p.files == {"/runs/x/deepspeed_env": (
        f"PATH={Path(PY).parent}:/usr/bin\nPYTHONPATH={ROOT}\nTORCH_EXTENSIONS_DIR=/cache/ext\nDS_ACCELERATOR=cpu\n"
        "OMP_NUM_THREADS=1\nOMP_WAIT_POLICY=PASSIVE\nNCCL_DEBUG=INFO\n")}


def test_a_remote_variable_the_runner_would_mangle_refuses_the_launch():
    with pytest.raises(LaunchError, match=r"the value of NCCL_SOCKET_IFNAME contains \$"):
        build_launch(plan_json="/p.json", world_size=2, device="cpu", master_port=1, cwd="/w", python=PY,
                     base_env={"PATH": "/usr/bin", "NCCL_SOCKET_IFNAME": "$IF"}, nodes=_nodes())


def test_no_ssh_starts_one_runner_per_node_with_its_node_rank():
    p = build_launch(plan_json="/p.json", world_size=2, device="cpu", master_port=29555, cwd="/w", python=PY,
                     base_env={"PATH": "/usr/bin"}, nodes=_nodes("no-ssh"))
    common = [PY, "-u", "-m", "deepspeed.launcher.runner", "--hostfile", "/h/hosts", "--master_addr", "127.0.0.1",
              "--master_port", "29555", "--no_local_rank"]
    assert p.node_argvs == [common + ["--no_ssh", "--node_rank", str(i), str(RANK_SCRIPT), "--plan-json", "/p.json"]
                            for i in (0, 1)]
    assert p.files == {} and "DS_ENV_FILE" not in p.env  # the runners are local: they inherit the environment


@pytest.mark.parametrize("command, expected", [
    (["python", "train.py", "--x", "1"], (["train.py", "--x", "1"], [])),
    (["python3.11", "train.py"], (["train.py"], [])),
    ([sys.executable, "train.py"], (["train.py"], [])),
    (["train.py", "--y"], (["train.py", "--y"], [])),
    (["torchrun-like-tool", "a"], (["torchrun-like-tool", "a"], ["--no_python"])),
    (["python", "-m", "pkg.train", "--x"], (["pkg.train", "--x"], ["--module"])),
])
def test_a_user_command_reaches_the_runner_as_a_script_a_module_or_with_no_python(command, expected):
    from dsx.launcher import user_rank_command

    assert user_rank_command(command) == expected


@pytest.mark.parametrize("command", [["python", "-c", "print(1)"], ["python", "-m"], ["python"]])
def test_python_options_other_than_m_are_refused(command):
    from dsx.launcher import user_rank_command

    with pytest.raises(LaunchError) as caught:
        user_rank_command(command)
    assert str(caught.value) == (
        "dsx launch runs a script or a module: -- python SCRIPT.py ARGS or -- python -m MODULE ARGS (python's "
        "other options, such as -c, are not supported by DeepSpeed's runner)")


def test_a_user_command_gets_local_rank_from_the_runner_unless_asked_not_to():
    """DeepSpeed's runner appends --local_rank=N to a script's arguments by default (dsx run's own rank script
    asks it not to, with --no_local_rank)."""
    def launch(**kw):
        return build_launch(world_size=1, device="cpu", master_port=29555, base_env={}, cwd="/w", python=PY,
                            user_command=["python", "-m", "pkg.train", "--x"], **kw).argv

    assert launch()[-5:] == ["--master_port", "29555", "--module", "pkg.train", "--x"]
    assert launch(local_rank_arg=False)[-4:] == ["--module", "--no_local_rank", "pkg.train", "--x"]


def test_dsx_launch_refuses_node_flags_without_a_hostfile_in_run_s_words(tmp_path):
    """dsx launch and dsx run place their ranks with the same code (dsx.run.nodes), so they refuse alike."""
    config = tmp_path / "ds.json"
    config.write_text('{"train_micro_batch_size_per_gpu": 1}')
    out = subprocess.run([sys.executable, "-m", "dsx", "launch", "--include", "a:0", "--launcher", "no-ssh",
                          "--config", str(config), "--", "python", "train.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1] == "Error: --include, --launcher need(s) --hostfile"


def test_dsx_launch_refuses_a_config_nested_10000_levels_deep_in_one_line(tmp_path):
    config = tmp_path / "ds.json"
    config.write_text('{"a": ' * 10_000 + "1" + "}" * 10_000)
    out = subprocess.run([sys.executable, "-m", "dsx", "launch", "--dry-run", "--config", str(config), "--",
                          "python", "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1] == (f"Error: {config}: nested more than 100 levels deep; a DeepSpeed "
                                                   "config is a few levels deep")


# ---------------------------------------------------------------------------------------------- dsx launch


def dsx_launch(tmp_path: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`dsx launch ARGS` in tmp_path, with TMPDIR=tmp_path/tmp, which it must leave empty of dsx-launch-* folders;
    the config is tmp_path/ds.json (one micro-batch, nothing else)."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    config = tmp_path / "ds.json"
    if not config.exists():
        config.write_text('{"train_micro_batch_size_per_gpu": 1}')
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    out = subprocess.run([sys.executable, "-m", "dsx", "launch", *args], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=timeout)
    assert "Traceback" not in out.stderr.split("dsx launch: world size", 1)[0], out.stderr  # none of dsx's own
    assert list((tmp_path / "tmp").glob("dsx-launch-*")) == []
    return out


def test_dsx_launch_dry_run_leaves_no_temporary_folder(tmp_path):
    out = dsx_launch(tmp_path, "--config", "ds.json", "--dry-run", "--", "python", "train.py")
    assert out.returncode == 0, out.stderr
    assert f" train.py --deepspeed_config {tmp_path / 'ds.json'}" in out.stdout


@pytest.mark.slow
def test_a_script_that_does_not_take_local_rank_exits_2_and_dsx_says_so_and_that_it_was_the_script(tmp_path):
    """DeepSpeed's runner appends --local_rank=N (dsx launch keeps that default); an argparse script without it
    exits 2, which dsx's own refusals also use: the last line says whose status it is (issue 21)."""
    (tmp_path / "train.py").write_text("import argparse\nparser = argparse.ArgumentParser()\n"
                                       "parser.add_argument('--deepspeed_config')\nparser.parse_args()\n")
    out = dsx_launch(tmp_path, "--config", "ds.json", "--", "python", "train.py")
    assert out.returncode == 2
    assert "train.py: error: unrecognized arguments: --local_rank=0" in out.stderr
    assert out.stderr.rstrip().splitlines()[-2:] == [
        "dsx launch: the script does not accept --local_rank=N, which DeepSpeed's runner appends to every rank's "
        "arguments: accept it (argparse: parser.add_argument(\"--local_rank\", type=int, default=-1)) or launch "
        "with --no-local-rank",
        "dsx launch: the job exited with 2: the exit status of your command on a rank, not a refusal by dsx (dsx "
        "refuses before starting anything, with \"Error: ...\")"]


@pytest.mark.slow
def test_python_m_module_is_launched_through_the_runners_module_flag_with_or_without_local_rank(tmp_path):
    (tmp_path / "tinymod.py").write_text("import json, os, sys\n"
                                         "open(f'argv-{os.environ[\"RANK\"]}.json', 'w').write(json.dumps(sys.argv[1:]))\n")
    config = str(tmp_path / "ds.json")
    out = dsx_launch(tmp_path, "--config", "ds.json", "--", "python", "-m", "tinymod", "--x", "1")
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "argv-0.json").read_text()) == ["--local_rank=0", "--x", "1", "--deepspeed_config",
                                                                  config]
    out = dsx_launch(tmp_path, "--no-local-rank", "--config", "ds.json", "--", "python", "-m", "tinymod")
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "argv-0.json").read_text()) == ["--deepspeed_config", config]


def test_gpu_ranks_over_a_hostfile_share_each_hosts_cores_by_its_own_ranks():
    one_each = build_launch(plan_json="/p.json", world_size=2, device="cuda", master_port=29555, cwd="/w", python=PY,
                            base_env={"PATH": "/usr/bin"}, nodes=_nodes("no-ssh"), cpu_count=64)
    assert "OMP_NUM_THREADS" not in one_each.env  # one rank per host keeps OpenMP as it is
