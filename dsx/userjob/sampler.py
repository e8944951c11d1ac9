"""Memory of a user's job, sampled from the dsx process while it runs: nothing is added to the script.

Each GPU of a one-node launch: NVML's used memory of the whole device (every process on it), the max over samples.
Each rank: the peak resident set the kernel keeps for the process (VmHWM in /proc/PID/status), read at every
sample, so the figure is exact up to the last read before the rank exited. The ranks are the processes of the
job's process group (dsx.processes.run_plan starts the job in its own) whose environment has RANK and LOCAL_RANK
(what DeepSpeed's launch.py gives each rank), the top-most one where a rank has children (data loader workers).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

from dsx.results import MEMORY_FIELDS, Memory, MemoryMax, RankMemory

INTERVAL_S = 0.5

NVML_METHOD = ("NVML nvmlDeviceGetMemoryInfo(handle).used of the rank's GPU (the whole device, every process on it), "
               "the max over samples taken by dsx every {interval:g} s while the job ran")
RSS_METHOD = ("VmHWM (the kernel's peak resident set) of each rank process, /proc/PID/status, read by dsx every "
              "{interval:g} s while the job ran: exact up to the last read before the rank exited")


def peak_rss(pid: int) -> int | None:
    """VmHWM of a process in bytes (None when it is gone or the kernel does not say)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _rank_of(pid: int) -> int | None:
    """The RANK of a DeepSpeed rank process (its environment has RANK and LOCAL_RANK), else None."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return None
    env = dict(e.split(b"=", 1) for e in entries if b"=" in e)
    if b"LOCAL_RANK" not in env or b"RANK" not in env:
        return None
    try:
        return int(env[b"RANK"])
    except ValueError:
        return None


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class JobSampler:
    """Samples the job every `interval` s on a thread, from start(pgid) (run_plan's on_start) to stop()."""

    device: str
    gpu_indices: list[int] = field(default_factory=list)
    """NVML indices of the GPUs of ranks 0..N-1 (a one-node launch); [] samples none."""
    gpu_unavailable: str | None = None
    """Why no GPU is sampled (CPU ranks, a multi-node launch, no NVML), when none is."""
    interval: float = INTERVAL_S
    samples: int = 0
    gpu_peak: dict[int, int] = field(default_factory=dict)
    """rank -> the max NVML used bytes of its GPU."""
    rss_peak: dict[int, int] = field(default_factory=dict)
    """rank -> the rank process's peak resident set, bytes."""

    def __post_init__(self):
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pgid: int | None = None
        self._ranks: dict[int, int | None] = {}  # pid -> RANK (None: not a rank), read once per process
        self._handles = []
        if self.device != "cuda":
            self.gpu_unavailable = self.gpu_unavailable or "CPU ranks: no GPU"
            self.gpu_indices = []
        elif self.gpu_indices:
            try:
                import pynvml

                pynvml.nvmlInit()
                self._nvml = pynvml
                self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in self.gpu_indices]
            except Exception as exc:  # pynvml missing, no driver
                self.gpu_unavailable = f"NVML unavailable: {exc}"
                self._handles = []

    def start(self, pgid: int) -> None:
        self._pgid = pgid
        self._thread = threading.Thread(target=self._loop, name="dsx-job-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval):
                return

    def rank_pids(self) -> dict[int, int]:
        """RANK -> pid of each rank process now in the job's process group (the top-most where a rank has
        children that inherited its environment)."""
        members = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            try:
                if os.getpgid(pid) != self._pgid:
                    continue
            except OSError:
                continue
            if pid not in self._ranks:
                self._ranks[pid] = _rank_of(pid)
            if self._ranks[pid] is not None:
                members.append(pid)
        inner = set(members)
        out: dict[int, int] = {}
        for pid in members:
            if _parent(pid) not in inner:
                out.setdefault(self._ranks[pid], pid)
        return out

    def sample(self) -> None:
        self.samples += 1
        for rank, handle in enumerate(self._handles):
            try:
                used = int(self._nvml.nvmlDeviceGetMemoryInfo(handle).used)
            except Exception:
                continue
            self.gpu_peak[rank] = max(self.gpu_peak.get(rank, 0), used)
        if self._pgid is None:
            return
        for rank, pid in self.rank_pids().items():
            value = peak_rss(pid)
            if value is not None:
                self.rss_peak[rank] = max(self.rss_peak.get(rank, 0), value)

    def memory(self, world_size: int) -> Memory:
        """The figures as a row's memory: per rank and the max; every null with its reason."""
        per_rank = []
        for rank in range(world_size):
            unavailable = {}
            nvml = self.gpu_peak.get(rank)
            if nvml is None:
                unavailable["nvml_used"] = self.gpu_unavailable or "no sample of this rank's GPU"
            rss = self.rss_peak.get(rank)
            if rss is None:
                unavailable["host_rss_peak"] = ("no process of this rank was seen in the job's process group on this "
                                                "machine (it ran on another node, or ended within one sample)")
            for name in ("peak_allocated", "peak_reserved", "pinned_host"):
                unavailable[name] = "measured inside the process only: dsx launch does not touch the script"
            per_rank.append(RankMemory(rank=rank, nvml_used=nvml, host_rss_peak=rss, unavailable=unavailable))
        maxima = {}
        for name in MEMORY_FIELDS:
            values = [getattr(m, name) for m in per_rank if getattr(m, name) is not None]
            maxima[name] = max(values) if values else None
        methods = {}
        if self.gpu_peak:
            methods["nvml_used"] = NVML_METHOD.format(interval=self.interval)
        if self.rss_peak:
            methods["host_rss_peak"] = RSS_METHOD.format(interval=self.interval)
        return Memory(per_rank=per_rank, max=MemoryMax(**maxima), methods=methods)
