"""The machine an estimate is for, and where each part of it came from: the GPU kind and the host's RAM.

`dsx estimate` needs no GPU, so it usually runs where the training will not: on a laptop it plans for an H100.
Judging that H100's CPU offload against the laptop's RAM answered "fits: NO" for gpt2-xl ZeRO-3 + CPU offload on
a 23.5 GiB laptop (issue 34). Without --host-memory, the host is this machine only when it has a GPU of the kind
planned for; otherwise it is that kind's typical host (TYPICAL_HOST_BYTES), the one its calibration ran on.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from dsx.units import GIB

DEFAULT_GPU_KIND = "h100-80gb"
"""What an estimate is for when neither --gpu-kind nor a visible calibrated GPU says otherwise."""

TYPICAL_HOST_BYTES = {"h100-80gb": 125 * GIB, "h200-141gb": 125 * GIB}
"""RAM of the host each kind was measured on (the H100 SXM5 host, 16 cores: 125 GiB, as README's plans give it with
--host-memory 125GiB; the 1-GPU H200 host the device tool lends has 128 GiB, the same 125 usable assumed): an
estimate for that kind plans with it when the kind is not here."""


@dataclass(frozen=True)
class Assumed:
    """What the estimate plans for; each *_from says where it came from, in words for its output."""

    gpu_kind: str
    gpu_kind_from: str
    host_memory: int
    host_memory_from: str

    def as_dict(self) -> dict:
        return asdict(self)

    def lines(self) -> list[str]:
        """'assumed GPU kind: ...' and 'assumed host memory: ...' (the sizes in GiB, as the fit lines give them)."""
        return [f"assumed GPU kind: {self.gpu_kind} ({self.gpu_kind_from})",
                f"assumed host memory: {self.host_memory / GIB:.2f} GiB ({self.host_memory_from})"]


def visible_gpus() -> list[str]:
    """The names of this machine's GPUs (NVML or nvidia-smi; [] without one)."""
    from dsx.host import probe_gpus

    return [name for name, _ in probe_gpus(dict(os.environ))]


def assume(gpu_kind: str | None, host_memory: int | None, visible: list[str] | None = None) -> Assumed:
    """The GPU kind (--gpu-kind, else the first visible GPU when calibrated, else DEFAULT_GPU_KIND) and the host RAM
    (--host-memory, else this machine's when it has a GPU of that kind, else the kind's typical host) an estimate
    plans for. `visible`: the GPU names here (default: probed)."""
    from dsx.estimate import gpu_kind_of
    from dsx.fit import host_memory_bytes

    visible = visible_gpus() if visible is None else visible
    kinds_here = [kind.key if kind else None for kind in map(gpu_kind_of, visible)]
    if gpu_kind:
        kind, kind_from = gpu_kind, "--gpu-kind"
    elif kinds_here and kinds_here[0]:
        kind, kind_from = kinds_here[0], f"the visible GPU, {visible[0]}"
    else:
        kind = DEFAULT_GPU_KIND
        kind_from = (f"the default: the visible {visible[0]} is not a calibrated kind" if visible
                     else "the default: no GPU is visible here") + "; --gpu-kind KIND names one"
    if host_memory is not None:
        return Assumed(kind, kind_from, host_memory, "--host-memory")
    if kind in kinds_here:
        return Assumed(kind, kind_from, host_memory_bytes(),
                       f"this machine's RAM, beside its {kind}; --host-memory SIZE plans for another host")
    if kind in TYPICAL_HOST_BYTES:
        return Assumed(kind, kind_from, TYPICAL_HOST_BYTES[kind],
                       f"the {kind} host dsx is calibrated on, not this machine's RAM: no {kind} here; "
                       "--host-memory SIZE plans for another host")
    return Assumed(kind, kind_from, host_memory_bytes(),
                   f"this machine's RAM: no typical host is known for {kind}; --host-memory SIZE plans for another")
