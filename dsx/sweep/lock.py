"""One sweep per results file, and nothing left running by a sweep that was killed.

SweepLock is a flock on `<results>.lock` that also records the running trial's process group; the kernel drops
the lock however dsx dies, so the next sweep on the file finds the group there and reap_orphans kills what is
left of it before anything starts.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import time
from pathlib import Path

from dsx import leftovers, op_cache
from dsx.processes import alive, command_line, group_processes
from dsx.results import read_rows
from dsx.sweep.grid import SweepError


class SweepLock:
    """An exclusive lock on `<results>.lock` for the sweep's lifetime, holding the running trial's process group.

    flock is released by the kernel when dsx dies, however it dies, so the next sweep can always take it; the file's
    content then tells it which process group the dead sweep left running."""

    def __init__(self, results: Path):
        self.path = results.with_name(results.name + ".lock")
        self.fd: int | None = None

    def acquire(self) -> dict | None:
        """Take the lock; returns what the previous holder left in it (None when it ended cleanly)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = _read_json(self.path) or {}
            raise SweepError(f"another dsx sweep (pid {holder.get('pid', '?')}) is writing to "
                             f"{self.path.with_suffix('')}; wait for it or use another --results") from None
        self.fd = fd
        left = _read_json(self.path)
        self.write(pgid=None)
        return left if left and (left.get("pgid") or left.get("run_dir")) else None

    def write(self, pgid: int | None, run_dir: str | None = None) -> None:
        assert self.fd is not None
        data = json.dumps({"pid": os.getpid(), "pgid": pgid, "run_dir": run_dir}).encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)
        os.fsync(self.fd)

    def release(self, keep_trial: bool = False) -> None:
        """Drop the lock; with `keep_trial` the running trial's group stays recorded (its processes outlived dsx's
        kill: the next sweep on the file reaps them)."""
        if self.fd is not None:
            if not keep_trial:
                self.write(pgid=None)
            os.close(self.fd)  # closing releases the flock
            self.fd = None


def _read_json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text() or "null")
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def reap_orphans(left: dict, results: Path | None = None) -> str | None:
    """Kill what is left of the trial a killed sweep was running (its process group), if anything, and remove what
    it left: shared-memory buffers and build locks no live process holds, and its run folder when it has no row in
    `results` (the trial runs again); say what."""
    pgid = left.get("pgid")
    members = group_processes(pgid) if isinstance(pgid, int) and pgid > 1 else []
    ours = [p for p in members if any(word in command_line(p) for word in ("train_rank", "deepspeed"))]
    if ours:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            ours = []
        deadline = time.monotonic() + 10  # the kernel unmaps a killed process's memory as it dies: wait for that
        while time.monotonic() < deadline and any(alive(p) for p in members):
            time.sleep(0.1)
    # The killed (or finished, orphaned) ranks' shared-memory buffers and any JIT-build lock they held outlive them.
    leftovers.remove(leftovers.stale_shm_buffers())
    leftovers.remove(leftovers.stale_jit_locks(op_cache.effective_dir(os.environ)[0]))
    folder = _remove_run_dir_without_row(left.get("run_dir"), results) if results else None
    if ours:
        return (f"stopped {len(ours)} process(es) of the trial a killed dsx sweep left running (process group {pgid}, "
                f"{left.get('run_dir')}); that trial runs again")
    if folder:
        return f"removed {folder}, the folder of a trial a killed dsx sweep left without a row; that trial runs again"
    return None


def _remove_run_dir_without_row(run_dir: str | None, results: Path) -> Path | None:
    """Remove the folder of a run that has no row in `results` (its dsx was killed before writing it), when it is
    a run folder (dsx.run.prepare wrote its rank plan there); the folder removed, else None."""
    import shutil

    from dsx.rank.protocol import PLAN_FILE

    if not run_dir or not (Path(run_dir) / PLAN_FILE).is_file():
        return None
    if any(row.get("run_dir") == run_dir for row in read_rows(results)):
        return None
    shutil.rmtree(run_dir, ignore_errors=True)
    return Path(run_dir)
