"""ZeRO offload sub-sections: `zero_optimization.offload_param` and `zero_optimization.offload_optimizer`.

DeepSpeed parses both with pydantic models (extra="forbid"): a misspelled key is REJECTED by DeepSpeed too, but
lax coercion lets "true" strings through and a value of "auto" silently falls back to the default.
"""

from __future__ import annotations

from typing import Literal, Optional

from dsx.schema.base import Bool, Field, Float, Int, Section

__all__ = ["OffloadDevice", "OffloadParamConfig", "OffloadOptimizerConfig"]

OffloadDevice = Literal["none", "cpu", "nvme"]
"""DeepSpeed's OffloadDeviceEnum values (case-sensitive)."""


class OffloadParamConfig(Section):
    """ZeRO-3 parameter offload to CPU or NVMe (DeepSpeed ignores this block at stages 0-2)."""

    device: OffloadDevice = "none"
    """Where parameters live when not in use: "cpu", "nvme", or "none" (an empty block means no offload)."""
    nvme_path: Optional[str] = None
    """Directory on the NVMe device for swapped parameters; required with device "nvme" at stage 3."""
    buffer_count: Int = Field(5, ge=0)
    """Number of buffers in the pool for swapping parameters to NVMe."""
    buffer_size: Int = Field(100000000, ge=0)
    """Elements per buffer in the NVMe parameter swap pool."""
    max_in_cpu: Int = Field(1000000000, ge=0)
    """Parameter elements kept in CPU memory when offloading to NVMe."""
    pin_memory: Optional[Bool] = None
    """Use page-locked CPU memory (async copies); default false in 0.18, true in 0.19, so dsx always writes it."""


class OffloadOptimizerConfig(Section):
    """Optimizer-state offload to CPU or NVMe, with the optimizer step run on the CPU (ZeRO stages 1-3)."""

    device: OffloadDevice = "none"
    """Where optimizer states live: "cpu", "nvme" (stage 3 only; stages 1/2 treat it as "cpu"), or "none"."""
    nvme_path: Optional[str] = None
    """Directory on the NVMe device for optimizer states; required with device "nvme" at stage 3."""
    buffer_count: Int = Field(4, ge=0)
    """Buffers in the NVMe swap pool; at least the optimizer's states per parameter (Adam: 4)."""
    pin_memory: Optional[Bool] = None
    """Use page-locked CPU memory (async copies); default false in 0.18, true in 0.19, so dsx always writes it."""
    pipeline_read: Bool = False
    """ZeRO-Infinity: overlap reading the next optimizer tile from NVMe with computing the current one."""
    pipeline_write: Bool = False
    """ZeRO-Infinity: overlap writing the previous optimizer tile to NVMe with computing the current one."""
    fast_init: Bool = False
    """Faster optimizer initialisation when offloading to NVMe."""
    ratio: Float = Field(1.0, ge=0.0, le=1.0)
    """Fraction of optimizer states offloaded to the CPU; below 1 only with ZeRO stage 3 and DeepSpeedCPUAdam."""
    super_offload: Bool = False
    """SuperOffload for Superchips (e.g. GH200); stage 3 on CUDA only, silently ignored at stages 1/2."""
    cpuadam_cores_perc: Float = Field(0.8, ge=0.0, le=1.0)
    """Fraction of CPU cores used by CPU Adam with super_offload (stage 3)."""
