"""`aio`: libaio (or GPUDirect Storage) settings for the NVMe swapping of ZeRO-Infinity offload.

DeepSpeed reads this section with dict.get (deepspeed/runtime/swap_tensor/aio_config.py): unknown or misspelled
keys, including the docs' `thread_count`, are silently IGNORED, and values are not type-checked.
"""

from __future__ import annotations

from dsx.schema.base import Bool, Field, Int, Section

__all__ = ["AioConfig"]


class AioConfig(Section):
    """Async I/O parameters of the NVMe swap handles (used only with offload device "nvme")."""

    block_size: Int = Field(1048576, gt=0)
    """Bytes per I/O request; > 0 (DeepSpeed does not check; the aio op divides by it at run time)."""
    queue_depth: Int = Field(8, gt=0)
    """Outstanding I/O requests per handle; > 0 (DeepSpeed does not check; libaio rejects 0 at run time)."""
    intra_op_parallelism: Int = Field(1, ge=1)
    """I/O threads per read/write call (the docs call it thread_count); >= 1 (0 divides by zero at run time)."""
    single_submit: Bool = False
    """Submit I/O requests one at a time instead of in batches."""
    overlap_events: Bool = True
    """Overlap submitting new requests with waiting for completed ones."""
    use_gds: Bool = False
    """Use NVIDIA GPUDirect Storage instead of libaio; DeepSpeed asserts a CUDA accelerator when parsing the config."""
