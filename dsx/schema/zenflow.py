"""ZenFlow (`zero_optimization.zenflow`): stall-free ZeRO-Offload that updates the top-k gradient columns on the GPU.

DeepSpeed parses it with a pydantic model (extra="forbid"): misspelled keys are REJECTED by DeepSpeed too; the
strategy/interval combinations below are only checked by DeepSpeed inside deepspeed.initialize().
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import Discriminator, Tag, model_validator
from typing_extensions import Annotated

from dsx.schema.base import Bool, Field, Float, Int, Section

__all__ = ["ZenFlowConfig"]


def _auto_or_int(value: Any) -> str:
    """Pick the union branch, so an error names one branch ("auto" for strings, "int" otherwise), not both."""
    return "auto" if isinstance(value, str) else "int"


SelectInterval = Annotated[
    Union[Annotated[Literal["auto"], Tag("auto")], Annotated[Int, Tag("int")]], Discriminator(_auto_or_int)
]
"""The string "auto" or an integer."""

UpdateInterval = Annotated[
    Union[Annotated[Literal["auto"], Tag("auto")], Annotated[Int, Field(ge=1), Tag("int")]],
    Discriminator(_auto_or_int),
]
"""The string "auto" or an integer >= 1."""


class ZenFlowConfig(Section):
    """ZenFlow settings; with ZeRO stage 1/2 DeepSpeed also requires CPU optimizer offload."""

    topk_ratio: Float = Field(0.1, gt=0.0, lt=1.0)
    """Fraction of gradient columns (the most important) updated on the GPU each step; 0 < x < 1 (0.18: 0 <= x <= 1)."""
    select_strategy: Literal["auto", "step", "epoch"] = "auto"
    """When to re-select the important columns: per "step" or "epoch" interval; "auto" means every epoch."""
    select_interval: SelectInterval = "auto"
    """Steps (strategy "step") or epochs (strategy "epoch") between re-selections; "auto" only with strategy "auto"."""
    update_interval: UpdateInterval = "auto"
    """Steps between applying the accumulated unimportant gradients; "auto" adapts it (0.19: an integer is >= 1)."""
    overlap_step: Bool = False
    """Overlap the CPU optimizer step with the next forward/backward."""
    offload: Bool = False
    """Offload the selective optimizer states to the CPU to save GPU memory."""
    auto_ratio: Float = Field(0.99, ge=0.0, le=1.0)
    """Threshold the "auto" update_interval uses to decide when to apply accumulated gradients."""
    full_warm_up_rounds: Int = 0
    """Initial steps that update all gradients (no selection)."""
    pt_reserved_cores_perc: Float = Field(0.5, ge=0.0, le=1.0)
    """Fraction of CPU cores kept for PyTorch threads; the rest run ZenFlow's optimizer workers."""
    steps_per_epoch: Optional[Int] = None
    """Filled in by DeepSpeed from the training dataloader at run time; not meant to be set in a config."""

    @model_validator(mode="after")
    def _intervals_match_strategy(self) -> "ZenFlowConfig":
        if self.select_strategy == "auto" and self.select_interval != "auto":
            raise ValueError(
                f'zenflow.select_interval={self.select_interval} needs select_strategy "step" or "epoch": with '
                'select_strategy "auto" DeepSpeed raises in deepspeed.initialize() (set select_interval to "auto")'
            )
        if self.select_strategy != "auto" and self.select_interval == "auto":
            raise ValueError(
                f'zenflow.select_strategy "{self.select_strategy}" needs an integer select_interval: with '
                'select_interval "auto" DeepSpeed raises in deepspeed.initialize()'
            )
        if (
            self.select_strategy == "step"
            and self.update_interval != "auto"
            and self.select_interval != 0
            and self.select_interval < self.update_interval
        ):
            raise ValueError(
                f"zenflow.select_interval ({self.select_interval}) must be >= zenflow.update_interval "
                f'({self.update_interval}) with select_strategy "step"; DeepSpeed raises in deepspeed.initialize()'
            )
        return self
