"""What a rank measures about memory, and the cap it enforces: every figure with the method that produced it,
or the reason it is missing (in the RankReport).

peak_allocated / peak_reserved  torch.cuda.max_memory_allocated / max_memory_reserved over the whole process;
nvml_used                      NVML device memory used (whole GPU), max over samples taken after each step;
host_rss_peak                  VmHWM of /proc/self/status (peak resident set), else getrusage ru_maxrss;
pinned_host                    torch.cuda.host_memory_stats() peak of the CUDA pinned-host allocator, which every
                               tensor.pin_memory() of DeepSpeed's offload goes through.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dsx.rank.faults import one_line
from dsx.rank.protocol import RankReport


def host_rss_peak() -> tuple[int | None, str]:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024, "VmHWM of /proc/self/status (peak resident set size)"
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak * (1 if sys.platform == "darwin" else 1024), "resource.getrusage(RUSAGE_SELF).ru_maxrss"


class NvmlSampler:
    """Device memory used on this rank's GPU, from NVML; max over samples."""

    method = "NVML nvmlDeviceGetMemoryInfo(handle).used: the whole GPU (all processes), max over samples after " \
             "each step and at the end (or the failure)"

    def __init__(self, torch, device):
        self.handle = None
        self.peak: int | None = None
        self.reason: str | None = None
        try:
            import pynvml
        except ImportError:
            self.reason = "pynvml (nvidia-ml-py) is not installed"
            return
        try:
            pynvml.nvmlInit()
            props = torch.cuda.get_device_properties(device)
            uuid = getattr(props, "uuid", None)
            if uuid is not None:
                text = str(uuid)
                self.handle = pynvml.nvmlDeviceGetHandleByUUID(text if text.startswith("GPU-") else f"GPU-{text}")
            else:
                bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
                self.handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus)
            self.pynvml = pynvml
        except Exception as exc:  # NVML missing in a container, driver mismatch, ...
            self.reason = f"NVML unavailable: {one_line(exc)}"

    def sample(self) -> None:
        if self.handle is None:
            return
        try:
            used = int(self.pynvml.nvmlDeviceGetMemoryInfo(self.handle).used)
        except Exception as exc:
            self.reason = f"NVML query failed: {one_line(exc)}"
            self.handle = None
            return
        self.peak = used if self.peak is None else max(self.peak, used)


def reset_peaks(torch, device, on_cuda: bool, report: RankReport) -> None:
    """Forget the memory peaks of the flop check, so the figures are the run's own."""
    if on_cuda:
        torch.cuda.reset_peak_memory_stats(device)
        try:
            torch.cuda.reset_peak_host_memory_stats()
        except Exception:
            pass
    try:
        Path("/proc/self/clear_refs").write_text("5")  # Linux: resets VmHWM to the current RSS
        report.notes.append("memory peaks were reset after the --flop-check (rank 0)")
    except OSError:
        report.notes.append("host_rss_peak includes the --flop-check models (could not reset VmHWM)")


def collect_memory(torch, device, on_cuda: bool, nvml: NvmlSampler | None, report: RankReport) -> None:
    mem: dict = {}
    methods: dict = {}
    unavailable: dict = {}
    if on_cuda:
        mem["peak_allocated"] = int(torch.cuda.max_memory_allocated(device))
        mem["peak_reserved"] = int(torch.cuda.max_memory_reserved(device))
        methods["peak_allocated"] = "torch.cuda.max_memory_allocated (whole process)"
        methods["peak_reserved"] = "torch.cuda.max_memory_reserved (whole process)"
        if nvml is not None:
            nvml.sample()
        if nvml is not None and nvml.peak is not None:
            mem["nvml_used"] = nvml.peak
            methods["nvml_used"] = NvmlSampler.method
        else:
            mem["nvml_used"] = None
            unavailable["nvml_used"] = nvml.reason if nvml else "NVML not sampled"
        pinned, how = None, None
        try:
            stats = torch.cuda.host_memory_stats()
            for key in ("allocated_bytes.peak", "allocated_bytes.all.peak"):
                if key in stats:
                    pinned, how = int(stats[key]), f"torch.cuda.host_memory_stats()['{key}']: peak bytes of the " \
                                                    "CUDA pinned-host allocator (every tensor.pin_memory())"
                    break
        except Exception as exc:
            unavailable["pinned_host"] = f"torch.cuda.host_memory_stats failed: {one_line(exc)}"
        mem["pinned_host"] = pinned
        if how:
            methods["pinned_host"] = how
        elif "pinned_host" not in unavailable:
            unavailable["pinned_host"] = "torch.cuda.host_memory_stats() has no allocated_bytes peak in this torch"
    else:
        for key in ("peak_allocated", "peak_reserved"):
            mem[key] = None
            unavailable[key] = "CPU rank: no device allocator (the process's memory is in host_rss_peak)"
        mem["nvml_used"] = None
        unavailable["nvml_used"] = "CPU rank: no GPU"
        mem["pinned_host"] = None
        unavailable["pinned_host"] = ("CPU accelerator: DeepSpeed's pin_memory() is a no-op there, nothing is "
                                      "page-locked")
    rss, how = host_rss_peak()
    mem["host_rss_peak"] = rss
    methods["host_rss_peak"] = how
    report.memory = mem
    report.memory_methods = methods
    report.memory_unavailable = unavailable


def apply_memory_cap(torch, device, on_cuda: bool, cap: int | None, report: RankReport) -> None:
    """Record what this rank may use (memory.capacity) and enforce --memory-cap.

    CUDA: torch.cuda.set_per_process_memory_fraction - the caching allocator refuses to reserve past the cap and
    raises torch.OutOfMemoryError like a smaller GPU would. CPU ranks: RLIMIT_DATA (the kernel refuses data
    mappings past it, torch's allocator raises "can't allocate memory"); it counts the process's whole data
    segment, imports and thread stacks included, so it is set after the imports and a cap must leave room for
    them."""
    if on_cuda:
        total = int(torch.cuda.get_device_properties(device).total_memory)
        if cap:
            fraction = min(1.0, cap / total)
            torch.cuda.set_per_process_memory_fraction(fraction, device)
            report.capacity = min(cap, total)
            report.capacity_source = (f"--memory-cap (torch.cuda.set_per_process_memory_fraction({fraction:.4f}) "
                                              f"of {total} bytes)")
        else:
            report.capacity = total
            report.capacity_source = "GPU total memory (torch.cuda.get_device_properties)"
        return
    import resource

    if cap:
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        resource.setrlimit(resource.RLIMIT_DATA, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
        report.capacity = cap
        report.capacity_source = "--memory-cap (RLIMIT_DATA of each CPU rank, set after the imports)"
    else:
        try:
            import psutil

            report.capacity = int(psutil.virtual_memory().total)
            report.capacity_source = "host total memory (psutil.virtual_memory), shared by all CPU ranks"
        except Exception:
            pass


