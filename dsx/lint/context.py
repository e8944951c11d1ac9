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
