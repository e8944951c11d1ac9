"""`activation_checkpointing`: settings for `deepspeed.checkpointing` (partitioned, CPU and contiguous checkpoints).

DeepSpeed reads this section with dict.get (deepspeed/runtime/activation_checkpointing/config.py): misspelled keys
(even its own format string's `partitioned_activations`) are silently IGNORED, and the block only takes effect when
user code calls `deepspeed.checkpointing.configure(..., deepspeed_config=...)`; `deepspeed.initialize` never applies it.
"""

from __future__ import annotations

from typing import Optional

from pydantic import model_validator
from typing_extensions import Annotated

from dsx.schema.base import Bool, Field, Int, Section

__all__ = ["ActivationCheckpointingConfig"]


class ActivationCheckpointingConfig(Section):
    """How `deepspeed.checkpointing.checkpoint` stores the activations it keeps for the backward pass."""

    partition_activations: Bool = False
    """Split each checkpointed activation across the model-parallel ranks instead of replicating it."""
    contiguous_memory_optimization: Bool = False
    """Copy partitioned checkpoints into one preallocated buffer; needs partition_activations, number_checkpoints."""
    cpu_checkpointing: Bool = False
    """Keep checkpointed activations in CPU memory instead of on the accelerator."""
    number_checkpoints: Optional[Annotated[Int, Field(ge=1)]] = None
    """Number of checkpointed layers; only used to size the contiguous buffers (0 fails at the first forward)."""
    synchronize_checkpoint_boundary: Bool = False
    """Synchronize the device at the start and end of every checkpointed forward and backward (for timing)."""
    profile: Bool = False
    """Log the forward and backward time of every checkpointed call."""

    @model_validator(mode="after")
    def _contiguous_needs_partitioning(self) -> "ActivationCheckpointingConfig":
        # deepspeed.checkpointing.configure() asserts both conditions; the config parser does not.
        if self.contiguous_memory_optimization and not self.partition_activations:
            raise ValueError(
                "contiguous_memory_optimization requires partition_activations: true "
                "(deepspeed.checkpointing.configure asserts this)"
            )
        if self.contiguous_memory_optimization and self.number_checkpoints is None:
            raise ValueError(
                "contiguous_memory_optimization requires number_checkpoints (the number of checkpointed layers, "
                "used to size the contiguous buffers; deepspeed.checkpointing.configure asserts this)"
            )
        return self
