"""What this machine is: its device and GPUs, a free port, installed versions, ops built during a run.

Probes only: nothing here starts a training process (dsx.launcher does), and torch is imported only to count
devices (which creates no CUDA context)."""

from __future__ import annotations

import os
import socket
import statistics

from dsx.processes import capture


def process_start_time() -> float | None:
    try:
        import psutil

        return psutil.Process().create_time()
    except Exception:
        return None


def detect_device() -> tuple[str, int]:
    """('cuda', visible GPU count) or ('cpu', 0). torch.cuda.device_count() creates no CUDA context."""
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return "cuda", torch.cuda.device_count()
    return "cpu", 0


def probe_gpus(env: dict[str, str]) -> list[tuple[str, tuple[int, int] | None]]:
    """(name, compute capability) of each visible GPU, in CUDA order, from NVML or nvidia-smi (never through
    torch.cuda, which would hold a CUDA context in the dsx process during the run). [] when unknown."""
    rows: list[tuple[str, str, str, tuple[int, int] | None]] = []  # index, uuid, name, cc
    try:
        import pynvml

        pynvml.nvmlInit()
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else name
            uid = pynvml.nvmlDeviceGetUUID(h)
            uid = uid.decode() if isinstance(uid, bytes) else uid
            cc = tuple(pynvml.nvmlDeviceGetCudaComputeCapability(h))
            rows.append((str(i), uid, name, (int(cc[0]), int(cc[1]))))
    except Exception:
        rc, out = capture(["nvidia-smi", "--query-gpu=index,uuid,name,compute_cap", "--format=csv,noheader"])
        if rc == 0:
            for line in out.strip().splitlines():
                parts = [p.strip() for p in line.split(",")]
                if len(parts) >= 4:
                    try:
                        ma, mi = parts[3].split(".")
                        cc: tuple[int, int] | None = (int(ma), int(mi))
                    except ValueError:
                        cc = None
                    rows.append((parts[0], parts[1], parts[2], cc))
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [(name, cc) for _, _, name, cc in rows]
    chosen = []
    for token in [t.strip() for t in visible.split(",") if t.strip()]:
        for index, uid, name, cc in rows:
            if token == index or (token.startswith("GPU-") and uid.startswith(token)):
                chosen.append((name, cc))
    return chosen


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def as_one_rank() -> None:
    """The environment torch.distributed reads, for a process that calls deepspeed.initialize without a launcher:
    rank 0 of 1 on this host (what a launcher set already stays, e.g. torchrun's ranks)."""
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(key, value)
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(free_port())


def package_versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in ("torch", "deepspeed", "transformers", "dsx"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def cpu_count() -> int:
    """CPUs this process may run on (its affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cpu_model() -> str | None:
    """The host CPU's model name (Linux: /proc/cpuinfo's first 'model name', read at most 64 KiB), else
    platform.processor(); None when neither says. Rows carry it: eager and ZeRO-3 steps wait on the host's Python
    and kernel launches, and the same GPU kind has run one configuration 0.94-1.59 s a step on different hosts."""
    try:
        with open("/proc/cpuinfo", "rb") as f:
            text = f.read(65536).decode("utf-8", "replace")
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    import platform

    return platform.processor() or None


def python_loop_ns(iterations: int = 10_000, samples: int = 25) -> float:
    """This host's Python speed: one iteration of a loop that calls a small function, in ns, the fastest of
    `samples` short runs (~15 ms in all at the default). The fastest, not the median: a process competing for the core
    doubles a median (2 CPU cores, 3 busy loops beside it: 111 against 53 ns) and leaves the fastest short run where
    it was (49); on one H200 host a median of 5 x 200,000 read 85.2 ns before one run and 40.7 before the next.
    ZeRO-3's hooks run in Python on every module in every pass, so its step scales with this
    (bench/estimator/h200_host_probe: 1.05, 1.41 and 1.67 s for one configuration on hosts of 49, 68 and 83 ns;
    ZeRO-1's 470-492 ms)."""
    import time

    def bump(x):
        return x + 1

    def once() -> float:
        start = time.perf_counter()
        x = 0
        for _ in range(iterations):
            x = bump(x)
        return (time.perf_counter() - start) / iterations * 1e9

    return min(once() for _ in range(samples))


def speed_of(probes) -> float:
    """A run's host speed from its python_loop_ns probes (HostSpeedSampler's): their median, to 0.01 ns."""
    return round(statistics.median(probes), 2)


class HostSpeedSampler:
    """python_loop_ns just before a launch, every `every_s` seconds while it runs (a thread of dsx's own process, which
    only waits on the ranks then) and just after it: the host's Python speed over the run, not at one moment. On H200
    hosts one probe read 1.4-1.9x another of the same host minutes apart (bench/estimator/terms.md), and a machine
    whose probes before its runs read 40-45 ns ran ZeRO-3 as hosts of 60-75 ns do."""

    def __init__(self, every_s: float = 2.0, probe=None) -> None:
        import threading

        self.every_s = every_s
        self.probe = probe or python_loop_ns
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="dsx-host-speed", daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.every_s):
            self.samples.append(self.probe())

    def __enter__(self) -> "HostSpeedSampler":
        self.samples.append(self.probe())
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(self.probe())
