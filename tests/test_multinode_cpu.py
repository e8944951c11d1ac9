"""Multi-node for real on one machine: sshd on 127.0.0.1 and 127.0.0.2, pdsh, DeepSpeed's runner, CPU ranks (gloo).

The two loopback addresses are two "nodes" to DeepSpeed: the runner takes its multi-node path (pdsh over ssh,
.deepspeed_env, --world_info, one launch.py per node). The sshd has its own temporary config, host key and
authorized key, listens on port 2222 (or a free port when 2222 is taken), and is stopped afterwards. Needs
/usr/sbin/sshd and pdsh (.ci/run installs them); without them these tests skip, except under CI, where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsx.results import parse_row, read_rows

ROOT = Path(__file__).resolve().parent.parent
HOSTFILES = ROOT / "hostfiles"
USER_SCRIPT = ROOT / "tests" / "fixtures" / "scripts" / "user_train.py"
TINY = ["--model", "gpt2-tiny", "--steps", "3", "--warmup", "1"]


def _port_is_free(port: int) -> bool:
    for host in ("127.0.0.1", "127.0.0.2"):
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """(port, environment for dsx): an sshd for 127.0.0.1 and 127.0.0.2 with its own keys; stopped at the end."""
    missing = [tool for tool in ("/usr/sbin/sshd", "pdsh", "ssh-keygen") if not shutil.which(tool)]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the multi-node tests; missing {missing} (.ci/run installs them)")
        pytest.skip(f"needs {', '.join(missing)} (apt-get install openssh-server pdsh)")
    d = tmp_path_factory.mktemp("sshd")
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    shutil.copy(d / "client_key.pub", d / "authorized_keys")
    port = 2222 if _port_is_free(2222) else next(p for p in range(22220, 22300) if _port_is_free(p))
    config = d / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", "ListenAddress 127.0.0.2", f"HostKey {d / 'host_key'}",
        f"PidFile {d / 'sshd.pid'}", f"AuthorizedKeysFile {d / 'authorized_keys'}", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no", "PermitRootLogin prohibit-password", ""]))
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    subprocess.run(["/usr/sbin/sshd", "-f", str(config), "-E", str(d / "sshd.log")], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "DSX_DEBUG")}
    env.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".cache" / "torch_extensions"))
    env["PDSH_SSH_ARGS_APPEND"] = (f"-i {d / 'client_key'} -o StrictHostKeyChecking=no "
                                   "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR")
    # the ranks get the venv's bin first on PATH (.deepspeed_env); the same here keeps one JIT build of each op
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    try:
        yield port, env
    finally:
        pid = int((d / "sshd.pid").read_text()) if (d / "sshd.pid").exists() else None
        if pid:
            os.kill(pid, signal.SIGTERM)


def dsx(env: dict, cwd: Path, *args: str, timeout: float = 600, script_fails: bool = False
        ) -> subprocess.CompletedProcess:
    """Run dsx; no traceback anywhere (script_fails: the user's script prints its own, but dsx none)."""
    out = subprocess.run([sys.executable, "-m", "dsx", *args], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=timeout)
    if script_fails:
        assert "internal error" not in out.stderr and out.stderr.rstrip().splitlines()[-1].startswith("dsx launch: ")
    else:
        assert "Traceback" not in out.stdout + out.stderr, out.stdout + out.stderr
    return out


def assert_one_ok_multinode_row(results: Path, out, world: int, hosts: list[str], launcher: str = "pdsh"):
    assert out.returncode == 0, out.stdout + out.stderr
    rows = read_rows(results)
    assert len(rows) == 1
    row = parse_row(rows[0])
    assert row.status == "ok" and row.world_size == world
    assert (row.nodes.hosts, row.nodes.launcher, row.nodes.master_addr) == (hosts, launcher, "127.0.0.1")
    per_node = world // len(hosts)
    assert row.nodes.ranks_per_node == [per_node] * len(hosts)
    assert [r.node_rank for r in row.ranks] == [i // per_node for i in range(world)]
    assert set(row.nodes.host_rss_peak) == set(hosts) and all(v > 0 for v in row.nodes.host_rss_peak.values())
    assert all(r.loss == row.ranks[0].loss and len(r.loss) == 3 for r in row.ranks)  # data parallel: same loss
    return row


@pytest.mark.slow
@pytest.mark.deepspeed
@pytest.mark.parametrize("zero", ["2", "3"])
def test_a_two_node_pdsh_run_over_a_hostfile_records_both_nodes(sshd, tmp_path, zero):
    port, env = sshd
    results = tmp_path / "r.jsonl"
    out = dsx(env, tmp_path, "run", *TINY, "--zero", zero, "--hostfile", str(HOSTFILES / "loopback-2x1"),
              "--ssh-port", str(port), "--results", str(results))
    row = assert_one_ok_multinode_row(results, out, 2, ["127.0.0.1", "127.0.0.2"])
    assert row.ds_config["zero_optimization"]["stage"] == int(zero)
    env_file = Path(row.run_dir) / "deepspeed_env"
    assert env_file.read_text().startswith(f"PATH={Path(sys.executable).parent}{os.pathsep}")


@pytest.mark.slow
@pytest.mark.deepspeed
def test_two_nodes_of_two_slots_make_world_size_four(sshd, tmp_path):
    port, env = sshd
    results = tmp_path / "r.jsonl"
    out = dsx(env, tmp_path, "run", *TINY, "--zero", "1", "--hostfile", str(HOSTFILES / "loopback-2x2"),
              "--ssh-port", str(port), "--results", str(results))
    assert_one_ok_multinode_row(results, out, 4, ["127.0.0.1", "127.0.0.2"])


@pytest.mark.slow
@pytest.mark.deepspeed
def test_the_no_ssh_launcher_starts_every_nodes_runner_from_here(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "DSX_DEBUG")}
    env.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".cache" / "torch_extensions"))
    results = tmp_path / "r.jsonl"
    out = dsx(env, tmp_path, "run", *TINY, "--zero", "2", "--hostfile", str(HOSTFILES / "loopback-2x1"),
              "--launcher", "no-ssh", "--results", str(results))
    assert_one_ok_multinode_row(results, out, 2, ["127.0.0.1", "127.0.0.2"], launcher="no-ssh")


@pytest.mark.slow
@pytest.mark.deepspeed
def test_a_rank_that_dies_on_the_second_node_ends_the_job_with_an_error_row(sshd, tmp_path):
    port, env = sshd
    results = tmp_path / "r.jsonl"
    results.write_text('{"an earlier row": 1}\n')
    started = time.monotonic()
    out = dsx(env, tmp_path, "run", *TINY, "--zero", "2", "--hostfile", str(HOSTFILES / "loopback-2x1"),
              "--ssh-port", str(port), "--inject-failure", "exit:2@1", "--timeout", "300", "--results", str(results))
    assert out.returncode == 1 and time.monotonic() - started < 300
    rows = read_rows(results)
    assert rows[0] == {"an earlier row": 1} and len(rows) == 2
    row = parse_row(rows[1])
    assert row.status == "error" and row.error.startswith("rank 1 stopped during ")
    assert row.nodes.hosts == ["127.0.0.1", "127.0.0.2"]


@pytest.mark.slow
def test_a_host_that_does_not_answer_is_refused_in_seconds_and_named(sshd, tmp_path):
    port, env = sshd
    hostfile = tmp_path / "hosts"
    hostfile.write_text("127.0.0.1 slots=1\n127.0.0.3 slots=1\n")  # no sshd listens on 127.0.0.3
    started = time.monotonic()
    out = dsx(env, tmp_path, "run", *TINY, "--hostfile", str(hostfile), "--ssh-port", str(port), "--results",
              str(tmp_path / "r.jsonl"))
    assert out.returncode == 2 and time.monotonic() - started < 60
    assert "host 127.0.0.3 is not reachable over ssh (ssh 127.0.0.3 true: " in out.stderr
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.slow
@pytest.mark.deepspeed
def test_dsx_launch_runs_a_users_script_on_both_nodes_with_the_checked_config(sshd, tmp_path):
    port, env = sshd
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
                                  "zero_optimization": {"stage": 2},
                                  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}}))
    out = dsx(env, tmp_path, "launch", "--hostfile", str(HOSTFILES / "loopback-2x1"), "--ssh-port", str(port),
              "--config", str(config), "--", "python", str(USER_SCRIPT), "--out", str(tmp_path / "out"))
    assert out.returncode == 0, out.stdout + out.stderr
    ranks = [json.loads((tmp_path / "out" / f"rank-{i}.json").read_text()) for i in range(2)]
    assert [(r["rank"], r["local_rank"], r["world_size"]) for r in ranks] == [(0, 0, 2), (1, 0, 2)]
    assert ranks[0]["losses"] == ranks[1]["losses"] and len(ranks[0]["losses"]) == 3


@pytest.mark.slow
@pytest.mark.deepspeed
def test_dsx_launch_exits_with_the_jobs_status_when_a_rank_fails(sshd, tmp_path):
    port, env = sshd
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 1},
                                  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}}))
    out = dsx(env, tmp_path, "launch", "--hostfile", str(HOSTFILES / "loopback-2x1"), "--ssh-port", str(port),
              "--config", str(config), "--timeout", "300", "--", "python", str(USER_SCRIPT), "--out",
              str(tmp_path / "out"), "--fail-rank", "1", script_fails=True)
    # rank 1 exits with 3 (user_train.py --fail-rank); rank 0 then loses its peer and exits with 1; pdsh -S
    # returns the largest status of its nodes, so the job's status is the failing rank's 3, and dsx exits with it
    assert out.returncode == 3, out.stdout + out.stderr
    assert out.stderr.splitlines()[-1] == ("dsx launch: the job exited with 3: the exit status of your command on a rank, "
                                           "not a refusal by dsx (dsx refuses before starting anything, with \"Error: ...\")")
    assert "127.0.0.2: ssh exited with exit code 3" in out.stderr


def test_dsx_launch_refuses_a_config_with_errors_for_the_world_size(tmp_path):
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"train_batch_size": 3, "train_micro_batch_size_per_gpu": 1,
                                  "gradient_accumulation_steps": 1}))
    out = subprocess.run([sys.executable, "-m", "dsx", "launch", "--hostfile", str(HOSTFILES / "loopback-2x1"),
                          "--launcher", "no-ssh", "--config", str(config), "--", "python", "train.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"{config} has errors for DeepSpeed" in out.stderr and "at world size 2:" in out.stderr


@pytest.mark.slow
@pytest.mark.deepspeed
def test_a_rank_killed_with_sigkill_mid_run_on_the_second_node_ends_the_job_in_bounded_time(sshd, tmp_path):
    port, env = sshd
    results = tmp_path / "r.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "dsx", "run", "--model", "gpt2-tiny", "--steps", "2000",
                             "--warmup", "1", "--zero", "2", "--hostfile", str(HOSTFILES / "loopback-2x1"),
                             "--ssh-port", str(port), "--timeout", "600", "--results", str(results)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    rank1 = None
    while time.monotonic() < deadline and proc.poll() is None:
        for path in tmp_path.glob("r/*/rank-1.json"):
            try:
                rank1 = json.loads(path.read_text())
            except ValueError:  # being rewritten
                continue
        if rank1 and rank1["phase"] == "warmup_done":  # in its timed steps
            break
        time.sleep(0.5)
    assert rank1 and rank1["phase"] == "warmup_done", "rank 1 never reached its timed steps"
    os.kill(rank1["pid"], signal.SIGKILL)
    killed = time.monotonic()
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1 and time.monotonic() - killed < 180, stdout + stderr
    assert "Traceback" not in stdout + stderr
    row = parse_row(read_rows(results)[0])
    assert row.status == "error"
    assert row.error.startswith("rank 1 stopped during 'warmup_done' without a result"), row.error


def refused(tmp_path, **changes) -> str:
    from dsx.run import RunRefused, RunRequest, prepare

    request = RunRequest(**{"model": "gpt2-tiny", "results": str(tmp_path / "r.jsonl"), **changes})
    with pytest.raises(RunRefused) as info:
        prepare(request)
    assert not (tmp_path / "r.jsonl").exists()
    return str(info.value)


def test_node_options_without_a_hostfile_are_refused(tmp_path):
    assert refused(tmp_path, include="a:0", launcher="no-ssh") == "--include, --launcher need(s) --hostfile"


def test_a_bad_hostfile_is_refused_with_its_line(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1 slots=2\nnode1 slots=2\n")
    assert refused(tmp_path, hostfile=str(hostfile)) == (
        f"{hostfile}:2: duplicate host 'node1' (first listed on line 1)")


def test_no_ssh_refuses_nodes_that_are_not_this_machine(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("127.0.0.1 slots=1\nnode-elsewhere.example slots=1\n")
    assert refused(tmp_path, hostfile=str(hostfile), launcher="no-ssh").startswith(
        "--launcher no-ssh starts every node's launcher from this machine, but node-elsewhere.example is not this "
        "machine")


def test_a_launcher_whose_program_is_missing_is_refused(tmp_path):
    assert refused(tmp_path, hostfile=str(HOSTFILES / "loopback-2x1"), launcher="slurm") == (
        "--launcher slurm needs srun on PATH")
