"""`pipeline`: settings of DeepSpeed's pipeline engine (used only when the model is a `deepspeed.pipe.PipelineModule`).

DeepSpeed merges this dict over its defaults (deepspeed/runtime/config.py get_pipeline_config): unknown or misspelled
keys are KEPT and never read, and values are not type-checked until `deepspeed.initialize` asserts the two bools.
"""

from __future__ import annotations

from typing import Literal, Union

from dsx.schema.base import Bool, Int, Section

__all__ = ["PipelineConfig"]


class PipelineConfig(Section):
    """Pipeline-engine options; the stage count and layer partitioning come from the PipelineModule, not from here."""

    stages: Union[Literal["auto"], Int] = "auto"
    """Dead key: DeepSpeed never reads it; the PipelineModule's num_stages (or topology) decides the stage count."""
    partition: str = "best"
    """Dead key: DeepSpeed never reads it; the PipelineModule's partition_method decides the layer split."""
    seed_layers: Bool = False
    """Dead key: DeepSpeed never reads it; the PipelineModule's seed_layers argument decides."""
    activation_checkpoint_interval: Int = 0
    """Checkpoint activations every N layers; 0 (or less) keeps the PipelineModule's own interval."""
    pipe_partitioned: Bool = True
    """Partition activations sent between stages across the tensor-parallel ranks (only with model parallelism)."""
    grad_partitioned: Bool = True
    """Partition gradients sent between stages across the tensor-parallel ranks (only with model parallelism)."""
    use_reentrant: Bool = True
    """Use reentrant activation checkpointing; false selects non_reentrant_checkpoint (absent means true)."""
