"""Leftovers of DeepSpeed jobs that break later ones: shared-memory buffers and JIT-build locks (dsx.leftovers)."""

from __future__ import annotations

import mmap
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dsx import leftovers
from dsx.launcher import LaunchPlan
from dsx.processes import run_plan


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _buffer(shm_dir: Path, port: int, rank: int, addr: str = "127.0.0.1") -> Path:
    path = shm_dir / f"deepspeed_allreduce_buffer_{os.getuid()}_{addr}_{port}_{rank}"
    path.write_bytes(b"\0" * 4096)
    return path


@pytest.mark.slow
@pytest.mark.deepspeed
def test_deepspeed_leaves_its_cpu_allreduce_buffer_in_dev_shm_after_a_clean_exit():
    """The fact dsx works around: a launched CPU rank (LOCAL_SIZE set, as DeepSpeed's launcher does) creates
    /dev/shm/deepspeed_allreduce_buffer_<uid>_<addr>_<port>_<rank> and exits without unlinking it."""
    port = _port()
    env = dict(os.environ, DS_ACCELERATOR="cpu", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0",
               LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_SIZE="1")
    code = "import deepspeed; deepspeed.init_distributed(dist_backend='gloo')"
    try:
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        left = leftovers.shm_buffers("127.0.0.1", port)
        assert [p.name for p in left] == [f"deepspeed_allreduce_buffer_{os.getuid()}_127.0.0.1_{port}_0"]
        assert left == [leftovers.rank_shm_buffer(env)]  # the name a rank computes for its own buffer
        assert left[0].stat().st_size > 32 * 2**20  # tens of MB of RAM-backed tmpfs per rank
    finally:
        leftovers.remove(leftovers.shm_buffers("127.0.0.1", port))


def test_a_finished_rank_unlinks_its_own_buffer_after_the_last_barrier(tmp_path):
    """So a rank whose dsx was killed (kill -9 of a sweep) and that finishes on its own leaves nothing in
    /dev/shm (issue 21). After the barrier every rank has long opened every buffer; the name is not needed."""
    from dsx.rank.loop import leave_process_group

    own, peer = _buffer(tmp_path, 29500, 1), _buffer(tmp_path, 29500, 0)
    calls = []

    class Dist:
        def barrier(self):
            calls.append(("barrier", own.exists()))

        def destroy_process_group(self):
            calls.append(("destroy", own.exists()))

    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "RANK": "1"}
    leave_process_group(Dist(), env, shm_dir=tmp_path)
    assert calls == [("barrier", True), ("destroy", False)]
    assert peer.exists()  # rank 0 unlinks its own


def test_shm_buffers_of_a_job_are_those_of_its_address_and_port_only(tmp_path):
    mine = [_buffer(tmp_path, 29500, 0), _buffer(tmp_path, 29500, 1)]
    _buffer(tmp_path, 29501, 0)
    _buffer(tmp_path, 29500, 0, addr="10.0.0.2")
    assert leftovers.shm_buffers("127.0.0.1", 29500, shm_dir=tmp_path) == mine


def test_a_buffer_that_a_live_process_maps_is_not_stale(tmp_path):
    held = _buffer(tmp_path, 29500, 0)
    orphan = _buffer(tmp_path, 29500, 1)
    with open(held, "r+b") as f, mmap.mmap(f.fileno(), 4096):
        assert leftovers.stale_shm_buffers(shm_dir=tmp_path) == [orphan]
    assert leftovers.stale_shm_buffers(shm_dir=tmp_path) == [held, orphan]


def test_a_build_lock_that_a_live_process_holds_open_is_not_stale(tmp_path):
    """torch's FileBaton keeps the lock's descriptor open from acquire to release."""
    (tmp_path / "cpu_adam").mkdir()
    (tmp_path / "py311_cpu" / "fused_adam").mkdir(parents=True)
    held = tmp_path / "cpu_adam" / "lock"
    orphan = tmp_path / "py311_cpu" / "fused_adam" / "lock"
    fd = os.open(held, os.O_CREAT | os.O_EXCL)
    try:
        orphan.touch()
        assert leftovers.stale_jit_locks(tmp_path) == [orphan]
    finally:
        os.close(fd)
    assert leftovers.stale_jit_locks(tmp_path) == [held, orphan]


def test_extensions_dir_follows_torch_extensions_dir_else_torch_default(tmp_path):
    assert leftovers.extensions_dir({"TORCH_EXTENSIONS_DIR": str(tmp_path)}) == tmp_path
    assert leftovers.extensions_dir({"XDG_CACHE_HOME": "/x"}) == Path("/x/torch_extensions")


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs /dev/shm")
def test_run_plan_removes_a_stale_lock_before_and_the_jobs_buffers_after(tmp_path):
    port = _port()
    ext = tmp_path / "ext"
    (ext / "deepspeed_shm_comm").mkdir(parents=True)
    lock = ext / "deepspeed_shm_comm" / "lock"
    lock.touch()
    # the "job" creates its rank's buffer the way DeepSpeed's shm op names it, and exits
    create = (f"open('/dev/shm/deepspeed_allreduce_buffer_{os.getuid()}_127.0.0.1_{port}_0', 'wb')"
              ".write(bytes(4096))")
    plan = LaunchPlan(argv=[sys.executable, "-c", create], cwd=str(tmp_path), master_port=port,
                      env=dict(os.environ, DS_ACCELERATOR="cpu", TORCH_EXTENSIONS_DIR=str(ext)))
    done = run_plan(plan, timeout_s=60)
    assert done.returncode == 0
    assert not lock.exists()
    assert leftovers.shm_buffers("127.0.0.1", port) == []
    assert done.cleaned == [f"removed stale JIT-build lock(s) no live process held (a killed process left them; "
                            f"loading the op would have waited forever): {lock}"]


def test_enough_room_in_shm_for_the_ranks_is_no_shortfall(tmp_path):
    assert leftovers.shm_shortfall(1, shm_dir=tmp_path) is None  # tmp_path: a disk with room for one buffer


def test_too_little_room_in_shm_names_sizes_and_the_fix(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(64 * 2**20, 0, 64 * 2**20))
    assert leftovers.shm_shortfall(2, shm_dir=tmp_path) == (
        f"{tmp_path} has 64 MiB free; DeepSpeed's CPU ranks need 66 MiB each there for their shared-memory allreduce "
        "buffers (2 rank(s): 132 MiB). Free space in {0} or make it larger (docker: --shm-size=1g)".format(tmp_path))


def test_a_shortfall_is_first_met_by_removing_buffers_no_process_maps(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    stale = _buffer(tmp_path, 29500, 0)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(
        10**9, 0, 0 if stale.exists() else 10**9))  # the stale buffer is what fills it
    assert leftovers.shm_shortfall(1, shm_dir=tmp_path) is None
    assert not stale.exists()
