"""What every lint check knows about the config it checks: the target version, the world size, the Trainer's fill."""

from __future__ import annotations

from dataclasses import dataclass, field

from dsx.versions import Version


@dataclass
class LintContext:
    target: Version
    world_size: int | None = None
    hf: bool = False
    model_params: int | None = None
    """The model's parameter count when the config is checked for a model (dsx run / estimate / config for a model);
    None for a pasted config (dsx validate)."""
    filled_by_hf: set[str] = field(default_factory=set)
    """Paths whose "auto" the Trainer/accelerate will fill (known to exist, value unknown)."""
    autos: set[str] = field(default_factory=set)
    """Paths that held "auto" (filled or already reported): later rules must not call them missing."""


def as_dict(value) -> dict:
    """A section as a dict, {} when it is anything else: rules read configs whose types may still be wrong."""
    return value if isinstance(value, dict) else {}


def is_true(value) -> bool:
    """Only the JSON true (DeepSpeed reads the string "false" as true; the section models reported that)."""
    return value is True


def zero_stage(data: dict, ctx: LintContext) -> int | None:
    """The ZeRO stage DeepSpeed will run, or None when unknown (filled by the Trainer/accelerate)."""
    zero = data.get("zero_optimization")
    if isinstance(zero, bool):
        return 1 if zero else 0
    if zero is None:
        return 0
    if "zero_optimization.stage" in ctx.filled_by_hf:
        return None
    stage = as_dict(zero).get("stage", 0)
    return stage if isinstance(stage, int) and not isinstance(stage, bool) and 0 <= stage <= 3 else None


def offload_device(data: dict, which: str) -> str:
    """The offload device a ZeRO block names ("none" when absent, "auto"-filled or not a string)."""
    block = as_dict(as_dict(data.get("zero_optimization")).get(which))
    device = block.get("device", "none")
    return device if isinstance(device, str) else "none"
