"""Batch sizes: train_batch_size = micro-batch x gradient accumulation x data-parallel world size.

DeepSpeed derives the missing one of the three at DeepSpeedConfig() with world size 1 and checks again with
the real world size inside deepspeed.initialize(); dsx solves and checks them up front for a given world.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class BatchError(ValueError):
    """The batch sizes given cannot hold together."""


class BatchSizes(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    train_batch_size: int = Field(gt=0)
    """Global batch per optimizer step."""
    train_micro_batch_size_per_gpu: int = Field(gt=0)
    """Samples per rank per forward/backward."""
    gradient_accumulation_steps: int = Field(gt=0)
    """Micro-batches per optimizer step."""
    world_size: int = Field(gt=0)
    """Data-parallel ranks the sizes were solved for."""


def solve_batch(world_size: int, train: int | None = None, micro: int | None = None,
                accum: int | None = None) -> BatchSizes:
    """Fill in the missing batch size from any two (or just the micro-batch, or just the global batch)."""
    if world_size < 1:
        raise BatchError(f"world size must be at least 1, got {world_size}")
    for name, value in (("train batch", train), ("micro-batch", micro), ("gradient accumulation", accum)):
        if value is not None and value < 1:
            raise BatchError(f"{name} must be at least 1, got {value}")
    if train is None and micro is None:
        if accum is not None:
            raise BatchError("gradient accumulation alone does not fix the batch: give the micro-batch or the "
                             "train batch too")
        micro = 1
    if train is None:
        accum = accum or 1
        train = micro * accum * world_size
    elif micro is None:
        accum = accum or 1
        if train % (accum * world_size):
            raise BatchError(f"train batch {train} is not divisible by gradient accumulation {accum} x world size "
                             f"{world_size} = {accum * world_size}")
        micro = train // (accum * world_size)
    elif accum is None:
        if train % (micro * world_size):
            raise BatchError(f"train batch {train} is not divisible by micro-batch {micro} x world size "
                             f"{world_size} = {micro * world_size}")
        accum = train // (micro * world_size)
    elif train != micro * accum * world_size:
        raise BatchError(f"train batch {train} != micro-batch {micro} x gradient accumulation {accum} x world size "
                         f"{world_size} = {micro * accum * world_size}")
    # already checked above: model_construct skips building a validator on dsx's cold-start path
    return BatchSizes.model_construct(train_batch_size=train, train_micro_batch_size_per_gpu=micro,
                                      gradient_accumulation_steps=accum, world_size=world_size)
