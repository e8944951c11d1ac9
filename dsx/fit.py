"""Which resource a training setup needs more of than it has: GPU memory, host memory, NVMe space.

A run fits when every resource it uses fits: the GPU's memory per rank (dsx.estimate), the host's RAM that the
ranks on it share (their process, and the optimizer states and parameters offloaded to the CPU), and the free
space of the NVMe path (offload to NVMe). The capacities come from this machine (psutil's total RAM, the free space
under --nvme-path) or are given, to plan for another machine (--host-memory, --nvme-free).

Arithmetic only, apart from the two probes; nothing here imports torch.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass
from typing import Any

from dsx.units import gib

GPU, HOST, NVME = "GPU memory", "host memory", "NVMe"


@dataclass(frozen=True)
class Resource:
    """One resource: what the setup needs of it and what there is (None: not known, so not checked)."""

    name: str
    needed: int
    capacity: int | None
    detail: str = ""
    """How `needed` is made up, e.g. '1 rank x 93.87 GiB'."""

    @property
    def checked(self) -> bool:
        return self.capacity is not None

    @property
    def fits(self) -> bool:
        return self.capacity is None or self.needed <= self.capacity

    @property
    def margin(self) -> float | None:
        """(capacity - needed) / capacity: negative when it does not fit; None when not checked."""
        if not self.capacity:
            return None
        return (self.capacity - self.needed) / self.capacity

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fits": self.fits, "margin": self.margin}


def binding(resources: list[Resource]) -> Resource | None:
    """The resource that binds: the first that does not fit (GPU, host, NVMe in that order), else the checked one
    with the least margin left; None when nothing was checked."""
    short = [r for r in resources if not r.fits]
    if short:
        return short[0]
    checked = [r for r in resources if r.checked and r.needed > 0]
    return min(checked, key=lambda r: r.margin) if checked else None


def shortfall_text(resource: Resource) -> str:
    """'host memory needs 129.71 GiB (1 rank x 129.71 GiB), has 125.00 GiB'."""
    detail = f" ({resource.detail})" if resource.detail else ""
    return f"{resource.name} needs {gib(resource.needed)}{detail}, has {gib(resource.capacity or 0)}"


def host_memory_bytes() -> int:
    """This machine's RAM (psutil: MemTotal). The ranks of a run on one host share it."""
    import psutil

    return int(psutil.virtual_memory().total)


def nvme_free_bytes(path: str) -> int:
    """Free bytes of the filesystem holding `path` (its nearest existing parent: DeepSpeed creates the folder)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    return int(shutil.disk_usage(probe).free)


def host_capacity(given: int | None) -> int:
    """--host-memory when given, else this machine's RAM."""
    return given if given is not None else host_memory_bytes()


def nvme_capacity(given: int | None, nvme_path: str | None) -> int | None:
    """--nvme-free when given, else the free space under --nvme-path, else None (not known: not checked)."""
    if given is not None:
        return given
    return nvme_free_bytes(nvme_path) if nvme_path else None


def fit_resources(ranks: int, gpu_needed: int, gpu_capacity: int, host_per_rank: int, host_memory: int | None,
                  nvme_per_rank: int, nvme_free: int | None, activation_margin: float = 0.0) -> list[Resource]:
    """GPU memory per GPU, then the host's RAM and the NVMe space the `ranks` of one host share (NVMe only when
    something is offloaded there). `activation_margin`: the share of the activations gpu_needed keeps free."""
    ranks_text = f"{ranks} rank{'s' if ranks > 1 else ''}"
    kept_free = f" + {activation_margin:.0%} of the activations" if activation_margin else ""
    resources = [Resource(GPU, gpu_needed, gpu_capacity,
                          f"per GPU: peak allocated + CUDA context + allocator headroom{kept_free}"),
                 Resource(HOST, host_per_rank * ranks, host_memory, f"{ranks_text} x {gib(host_per_rank)}")]
    if nvme_per_rank:
        resources.append(Resource(NVME, nvme_per_rank * ranks, nvme_free, f"{ranks_text} x {gib(nvme_per_rank)}"))
    return resources


HOST_ERROR = 0.141
"""The estimator's worst judged under-prediction of a CPU-offload rank's host memory: 14.1% (llama-1b ZeRO-1/2
with CPU offload on the H100 host, 31.7 GiB measured, 27.2 predicted; bench/estimator/summary.txt, 24 judged rows).
`dsx estimate --largest` keeps that share of the host free of its prediction: its answer is meant to be run as is,
and a host out of memory takes more down than a GPU out of memory."""


ACTIVATION_ERROR = 0.265
"""The estimator's worst judged under-prediction of the activations on the eager, checkpointed long-context rows
(32,768 tokens and more, peak in the forward/backward pass): 26.5% (llama-8b at 200,704 tokens on one H200, both
memory savers, --longest's own answer: 137.4 GiB measured, 131.3 predicted, 6.1 GiB more than the predicted 22.9 GiB
of activations; bench/long/h200_longest; tests/test_longest.py recomputes it from the rows). `dsx estimate --longest`
keeps that share of the predicted activations free on the GPU: at its answer's length they are what grows, and the
answer is meant to be run as is."""


EXPANDABLE = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
"""The environment the --largest and --longest answers run in: they plan a GPU to its edge, where torch's caching
allocator, without expandable segments, split the last gigabytes into blocks too small for the next allocation.
Measured: --longest's llama-8b answer on an H200 ran out of memory with 4.76 GiB reserved but unallocated (dsx
counts 2.5 GiB of allocator headroom) and ran with it (bench/long/h200_longest); the 30.2B --largest row on 4 H100s
ran with it (bench/multigpu/measured.md), where the 16.9B row without it reserved 30% more than it allocated."""


def with_host_margin(capacity: int) -> int:
    """The host memory --largest plans with: the capacity less HOST_ERROR of it."""
    return int(capacity * (1 - HOST_ERROR))
