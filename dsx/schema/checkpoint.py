"""`checkpoint`: how engine.save_checkpoint / load_checkpoint name, validate and write checkpoint files.

DeepSpeed reads this section with dict.get (deepspeed/runtime/config.py and runtime/model_checkpointing/config.py):
misspelled keys such as `tag_validate` are silently IGNORED; only the enum values (case-insensitive) and
`parallel_write.pipeline_stage` are checked when the config is parsed.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BeforeValidator
from typing_extensions import Annotated

from dsx.schema.base import Bool, Field, Int, Section

__all__ = ["CheckpointConfig", "CheckpointParallelWriteConfig", "CheckpointWriterConfig"]


def _upper(value: Any) -> Any:
    """DeepSpeed upper-cases these enum strings before checking them."""
    return value.upper() if isinstance(value, str) else value


class CheckpointParallelWriteConfig(Section):
    """Spread checkpoint writing over data-parallel ranks."""

    pipeline_stage: Bool = False
    """Pipeline models: data-parallel ranks split a stage's layer files among them instead of rank 0 writing all."""


class CheckpointWriterConfig(Section):
    """The checkpoint writer; its presence replaces torch.save with DeepSpeed's FastCheckpointEngine."""

    type: Annotated[Literal["MOCK", "PYTHON", "FAST"], BeforeValidator(_upper)] = "FAST"
    """Writer: FAST (DeepNVMe async I/O through the `aio` settings), PYTHON (plain file writes) or MOCK (no I/O)."""
    decoupled: Bool = False
    """Write checkpoints in a separate process so training continues meanwhile (DecoupledCheckpointEngine)."""
    io_buffer_size: Annotated[Int, Field(gt=0)] = 64 * 1024**2
    """Bytes of the pinned I/O buffer of the FAST writer (a 0-byte buffer never drains)."""
    io_buffer_double: Bool = True
    """FAST writer: split the buffer in two to overlap filling with writing."""
    show_statistics: Bool = False
    """Print write statistics after each file."""
    data_parallel: Optional[Annotated[Literal["REPLICA", "SOCKET", "MACHINE"], BeforeValidator(_upper)]] = None
    """Which data-parallel ranks write in parallel: per REPLICA, SOCKET or MACHINE; None: rank 0 writes alone."""
    io_multiplier: Int = 1
    """FAST writer: parallel writers = data-parallel writers x io_multiplier."""


class CheckpointConfig(Section):
    """Checkpoint save/load options."""

    tag_validation: Annotated[Literal["IGNORE", "WARN", "FAIL"], BeforeValidator(_upper)] = "WARN"
    """What to do when ranks save under different tags: Ignore, Warn or Fail (case-insensitive)."""
    load_universal: Bool = False
    """Load a universal checkpoint (converted with ds_to_universal), e.g. to resume on a different parallel layout."""
    use_node_local_storage: Bool = False
    """Each node saves to its own local storage: ranks are named by local rank instead of global rank."""
    checkpoint_serialization: Bool = True
    """Save with torch's zipfile serialization (false uses the legacy format)."""
    parallel_write: Optional[CheckpointParallelWriteConfig] = None
    """Parallel writing of pipeline-stage checkpoints."""
    writer: Optional[CheckpointWriterConfig] = None
    """Checkpoint writer options; absent means torch.save (or DataStates when datastates_ckpt is set)."""
