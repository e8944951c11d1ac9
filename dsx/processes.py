"""The only module of dsx that starts processes.

`run_plan(plan, timeout_s)` starts a launch that dsx.launcher built as data (DeepSpeed's runner, or one runner per
node with --launcher no-ssh) in its own process group, copies its output to a log, and kills the whole group on
timeout, on a node's failure or on Ctrl-C, saying which of its processes outlived that (NotStopped, left_running);
it removes what earlier jobs left behind (dsx.leftovers) before and after.
`capture(argv)` runs short probes (nvidia-smi, nvcc --version, ssh checks, another interpreter's versions).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from dsx import leftovers, op_cache
from dsx.launcher import LaunchPlan


@dataclass
class Completed:
    returncode: int | None
    """The launcher's exit status (None if it had to be killed)."""
    timed_out: bool
    started: float
    """time.time() when the launcher was started."""
    ended: float
    log_path: str | None
    tail: str
    """The last lines of the launcher's output (all ranks)."""
    cleaned: list[str] = field(default_factory=list)
    """What dsx removed that earlier or this job's processes left behind (see dsx.leftovers)."""
    jit_built: list[str] = field(default_factory=list)
    """The ops the job JIT-built (their shared library in its op cache was written while it ran)."""
    left_running: list[str] = field(default_factory=list)
    """Processes of the job's group still alive after dsx killed it (timeout, a node's failure): see _kill_group."""
    pgid: int | None = None


KILL_WAIT_S = 30.0
"""After SIGKILL, how long dsx waits for the kernel to remove a group's processes (seconds on a loaded machine with
big ranks) before it says which are still there."""


class NotStopped(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) stopped a job, but processes of its group outlived SIGKILL by KILL_WAIT_S: what is still
    there, so the caller says so instead of "every rank was stopped" (a sweep keeps the group in its lock, and the
    next sweep on the file kills it before it starts)."""

    def __init__(self, pgid: int, left: list[str]):
        super().__init__(pgid, left)
        self.pgid, self.left = pgid, left


def _kill_group(procs: list[subprocess.Popen], grace_s: float = 10.0) -> list[str]:
    """SIGTERM the whole process group (runner(s), launch.py, every rank), then SIGKILL what is left, and wait until
    the kernel has removed them; returns what is still alive after that ('pid status: command' each; empty when the
    group is gone). The first process leads the group (run_plan made it so): its pid is the group id even after it
    exited and was reaped, when its ranks may still run."""
    pgid = procs[0].pid
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, KILL_WAIT_S)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return []
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            for proc in procs:
                proc.poll()  # reap our own children, or the group never empties
            try:
                os.killpg(pgid, 0)  # anything left in the group?
            except ProcessLookupError:
                return []
            time.sleep(0.1)
    return group_members(pgid)


def group_processes(pgid: int) -> list:
    """The live processes of process group `pgid` (psutil.Process, each with info['cmdline'] and info['status']);
    zombies, whose memory is already freed and which their parent reaps, do not count."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "status", "cmdline"]):
        try:
            if os.getpgid(proc.info["pid"]) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def alive(proc) -> bool:
    """`proc` (a psutil.Process) still runs: not gone, not a zombie."""
    import psutil

    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def command_line(proc) -> str:
    return " ".join(proc.info["cmdline"] or [])


def group_members(pgid: int) -> list[str]:
    """The live processes of process group `pgid`, each as 'pid status: command'."""
    return [f"{p.info['pid']} {p.info['status']}: {command_line(p)[:120]}" for p in group_processes(pgid)]


def left_running_text(pgid: int, left: list[str]) -> str:
    """One clause saying which processes of a killed job's group outlived SIGKILL."""
    return (f"{len(left)} process(es) of its process group {pgid} were still there {KILL_WAIT_S:g} s after SIGKILL "
            f"({'; '.join(left[:4])}{'; ...' if len(left) > 4 else ''})")


def stopped_text(exc: BaseException) -> str:
    """What an interrupted job's callers print after 'interrupted; ': the truth about its processes."""
    if isinstance(exc, NotStopped):
        return "not every rank could be stopped: " + left_running_text(exc.pgid, exc.left)
    return "every rank was stopped"


NODE_FAILURE_GRACE_S = 60.0
"""--launcher no-ssh: after one node's launcher fails, how long the others get to notice (their ranks lose a peer
and exit) before the whole group is killed, so a failure never hangs the job."""


def _print_build_notice(op: str) -> None:
    sys.stderr.write(op_cache.build_notice(op) + "\n")
    sys.stderr.flush()


def run_plan(plan: LaunchPlan, timeout_s: float | None, log_path: str | os.PathLike | None = None,
             echo: bool = False, tail_lines: int = 40, on_start=None, on_build=_print_build_notice) -> Completed:
    """Start the plan in a new process group (with --launcher no-ssh: every node's runner, in the same group), send
    its output (all ranks) to `log_path` (and the terminal with echo), wait. On timeout or Ctrl-C the whole group is
    killed; Ctrl-C is re-raised after that. `on_start(pgid)` is called right after the start; `on_build(op)` when
    DeepSpeed starts JIT-building an op (default: one line on stderr, whether or not the output is echoed)."""
    ops = leftovers.extensions_dir(plan.env)
    since = time.time() - 1.0
    cleaned = _remove_leftovers(plan, ops, before=True)
    log = open(log_path, "ab") if log_path else None
    tail: list[bytes] = []
    lock = threading.Lock()
    started = time.time()
    procs: list[subprocess.Popen] = []
    commands = plan.node_argvs or [plan.argv]
    for argv in commands:
        # one command: its own session; several: one new process group in this session (a group cannot span
        # sessions), so killpg stops them all
        if procs:
            group = {"process_group": procs[0].pid}
        else:
            group = {"start_new_session": True} if len(commands) == 1 else {"process_group": 0}
        procs.append(subprocess.Popen(argv, env=plan.env, cwd=plan.cwd, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **group))
    if on_start is not None:
        on_start(procs[0].pid)

    def pump(proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in iter(proc.stdout.readline, b""):
            with lock:
                if log:
                    log.write(line)
                    log.flush()
                if echo:
                    sys.stderr.buffer.write(line)
                    sys.stderr.flush()
                tail.append(line)
                if len(tail) > tail_lines:
                    del tail[0]

    readers = [threading.Thread(target=pump, args=(proc,), daemon=True) for proc in procs]
    for reader in readers:
        reader.start()
    timed_out = False
    left_running: list[str] = []
    deadline = time.monotonic() + timeout_s if timeout_s and timeout_s > 0 else None
    try:
        try:
            with op_cache.BuildWatcher([proc.pid for proc in procs], on_build):
                failed_at = None
                while any(proc.poll() is None for proc in procs):
                    now = time.monotonic()
                    if deadline is not None and now > deadline:
                        timed_out = True
                        left_running = _kill_group(procs)
                        break
                    if failed_at is None and any(proc.returncode for proc in procs):
                        failed_at = now
                    if failed_at is not None and now - failed_at > NODE_FAILURE_GRACE_S:
                        left_running = _kill_group(procs)
                        break
                    time.sleep(0.1)
        except BaseException as exc:  # Ctrl-C or anything else: leave no rank behind
            left = _kill_group(procs, grace_s=5.0)
            if left and isinstance(exc, KeyboardInterrupt):
                raise NotStopped(procs[0].pid, left) from exc
            raise
    finally:
        for reader in readers:
            reader.join(timeout=5)
        if log:
            log.close()
        cleaned += _remove_leftovers(plan, ops, before=False)
    ended = time.time()
    codes = [proc.returncode for proc in procs]
    returncode = None if timed_out else next((c for c in codes if c), codes[0])
    return Completed(returncode=returncode, timed_out=timed_out, started=started,
                     ended=ended, log_path=str(log_path) if log_path else None,
                     tail=b"".join(tail).decode("utf-8", "replace"), cleaned=cleaned,
                     jit_built=op_cache.built_since(ops, since), left_running=left_running, pgid=procs[0].pid)


def _remove_leftovers(plan: LaunchPlan, ops: Path, before: bool) -> list[str]:
    """Before a start: stale JIT-build locks in the op cache `ops` (a rank waiting on one never starts) and buffers
    under this job's port. After the job: its shared-memory buffers, which DeepSpeed never unlinks. Returns what was
    removed."""
    messages = []
    if before:
        locks = leftovers.remove(leftovers.stale_jit_locks(ops))
        if locks:
            messages.append("removed stale JIT-build lock(s) no live process held (a killed process left them; "
                            "loading the op would have waited forever): " + ", ".join(map(str, locks)))
    if plan.master_port is not None and plan.env.get("DS_ACCELERATOR") == "cpu":
        buffers = leftovers.remove(leftovers.shm_buffers(plan.master_addr, plan.master_port))
        if buffers and before:
            messages.append(f"removed {len(buffers)} stale DeepSpeed shared-memory buffer(s) of an earlier job on "
                            f"port {plan.master_port}")
    return messages


def capture(argv: Sequence[str], timeout_s: float = 15.0, env: Mapping[str, str] | None = None) -> tuple[int | None, str]:
    """Run a short probe (with `env`, default this process's environment); (exit status or None when it could not
    run / timed out, stdout+stderr, or the error's text)."""
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                             env=None if env is None else dict(env))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    return out.returncode, (out.stdout + out.stderr)
