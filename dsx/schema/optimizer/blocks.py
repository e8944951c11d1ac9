"""The `optimizer` block: one model per type, and OptimizerConfig, the union that the (case-insensitive) `type`
picks from, with one clear error for a missing or unknown type before the per-type models run.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional, Union

from pydantic import BeforeValidator, Discriminator, Tag

from dsx.schema.base import Bool, Field, Section
from dsx.schema.optimizer.kinds import REMOVED_OPTIMIZERS, TORCH_OPTIMIZER_NAMES, TorchOptimizerName, optimizer_kind
from dsx.schema.optimizer.params import (
    AdagradParams, AdamParams, AdamWParams, LambParams, LionParams, MuonParams, OneBitAdamParams, OneBitLambParams,
    ZeroOneAdamParams,
)


def _any_case(*names: str) -> str:
    """A JSON-Schema-portable pattern matching the names in any letter case ("adam" -> "^([Aa][Dd][Aa][Mm])$")."""
    spelled = ("".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in name) for name in names)
    return f"^({'|'.join(spelled)})$"


class _OptimizerBlock(Section):
    """Fields common to every optimizer block; each type narrows `type` to its own names."""

    type: str
    """Optimizer name; DeepSpeed names are case-insensitive, torch.optim names exact."""
    legacy_fusion: Bool = False
    """Legacy fused-Adam step of DeepSpeed's fp16 optimizer (FusedAdam with fp16, no ZeRO); no effect otherwise."""


class AdamOptimizer(_OptimizerBlock):
    """`type: Adam` (any case): FusedAdam, DeepSpeedCPUAdam under offload, or torch Adam/AdamW with torch_adam."""

    type: str = Field(pattern=_any_case("adam"))
    """Adam, in any letter case (DeepSpeed lower-cases it)."""
    params: Optional[AdamParams] = None
    """Constructor arguments (unset: the backend's defaults)."""


class AdamWOptimizer(_OptimizerBlock):
    """`type: AdamW` (any case): as Adam, always with decoupled weight decay."""

    type: str = Field(pattern=_any_case("adamw"))
    """AdamW, in any letter case (DeepSpeed lower-cases it)."""
    params: Optional[AdamWParams] = None
    """Constructor arguments (unset: the backend's defaults)."""


class LambOptimizer(_OptimizerBlock):
    """`type: Lamb` (any case): FusedLamb, CUDA only; not ZeRO-tested and needs dynamic fp16 loss scaling."""

    type: str = Field(pattern=_any_case("lamb"))
    """Lamb, in any letter case (DeepSpeed lower-cases it)."""
    params: Optional[LambParams] = None
    """Constructor arguments (unset: FusedLamb's defaults)."""


class LionOptimizer(_OptimizerBlock):
    """`type: Lion` (any case): FusedLion (GPU), DeepSpeedCPULion under offload."""

    type: str = Field(pattern=_any_case("lion"))
    """Lion, in any letter case (DeepSpeed lower-cases it)."""
    params: Optional[LionParams] = None
    """Constructor arguments (unset: the backend's defaults)."""


class AdagradOptimizer(_OptimizerBlock):
    """`type: Adagrad` (any case): torch.optim.Adagrad, DeepSpeedCPUAdagrad under offload."""

    type: str = Field(pattern=_any_case("adagrad"))
    """Adagrad, in any letter case (DeepSpeed lower-cases it)."""
    params: Optional[AdagradParams] = None
    """Constructor arguments (unset: the backend's defaults)."""


class MuonOptimizer(_OptimizerBlock):
    """`type: Muon` (any case): DeepSpeed's MuonWithAuxAdam."""

    type: str = Field(pattern=_any_case("muon"))
    """Muon, in any letter case (DeepSpeed lower-cases it)."""
    params: Optional[MuonParams] = None
    """Muon and auxiliary Adam settings (unset: MuonWithAuxAdam's defaults)."""


class OneBitAdamOptimizer(_OptimizerBlock):
    """`type: OneBitAdam` (any case): 1-bit Adam, DeepSpeed 0.18 and older."""

    type: str = Field(pattern=_any_case("onebitadam"), json_schema_extra=REMOVED_OPTIMIZERS["onebitadam"])
    """OneBitAdam (any case); removed in DeepSpeed 0.19."""
    params: Optional[OneBitAdamParams] = None
    """Constructor arguments (unset: OnebitAdam's defaults)."""


class ZeroOneAdamOptimizer(_OptimizerBlock):
    """`type: ZeroOneAdam` (any case): 0/1 Adam, DeepSpeed 0.18 and older."""

    type: str = Field(pattern=_any_case("zerooneadam"), json_schema_extra=REMOVED_OPTIMIZERS["zerooneadam"])
    """ZeroOneAdam (any case); removed in DeepSpeed 0.19."""
    params: Optional[ZeroOneAdamParams] = None
    """Constructor arguments (unset: ZeroOneAdam's defaults)."""


class OneBitLambOptimizer(_OptimizerBlock):
    """`type: OneBitLamb` (any case): 1-bit Lamb, DeepSpeed 0.18 and older."""

    type: str = Field(pattern=_any_case("onebitlamb"), json_schema_extra=REMOVED_OPTIMIZERS["onebitlamb"])
    """OneBitLamb (any case); removed in DeepSpeed 0.19."""
    params: Optional[OneBitLambParams] = None
    """Constructor arguments (unset: OnebitLamb's defaults)."""


class MupOptimizer(_OptimizerBlock):
    """`type: MuAdam`, `MuAdamW` or `MuSGD` (any case): the `mup` package's optimizers (not ZeRO-tested)."""

    type: str = Field(pattern=_any_case("muadam", "muadamw", "musgd"))
    """MuAdam, MuAdamW or MuSGD, in any letter case (DeepSpeed lower-cases it)."""
    params: Optional[dict[str, Any]] = None
    """Passed to mup's constructor as is: dsx cannot check these (without `mup` installed, initialize fails)."""


class TorchOptimizer(_OptimizerBlock):
    """An exact torch.optim class name, built as torch.optim.<type>(params) (not ZeRO-tested)."""

    type: TorchOptimizerName
    """Exact torch.optim class name. LBFGS needs a closure and SparseAdam sparse gradients, which DeepSpeed's
    step does not give; Adafactor needs torch >= 2.5."""
    params: Optional[dict[str, Any]] = None
    """Passed to the torch.optim constructor as is: dsx cannot check these (a wrong key fails at initialize)."""


def _tag(kind: Optional[str]) -> Optional[str]:
    """Which OptimizerConfig variant validates a kind."""
    if kind is None:
        return None
    if kind.startswith("torch:"):
        return "torch"
    if kind in ("muadam", "muadamw", "musgd"):
        return "mup"
    return kind


def _optimizer_tag(value: Any) -> Optional[str]:
    name = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return _tag(optimizer_kind(name))


def _unknown_type_message(name: Any) -> str:
    message = (
        f"unknown optimizer type {name!r}. DeepSpeed names (any case): Adam, AdamW, Lamb, Lion, Adagrad, Muon, "
        "MuAdam, MuAdamW, MuSGD; DeepSpeed 0.18 only: OneBitAdam, ZeroOneAdam, OneBitLamb; "
        f"exact torch.optim names: {', '.join(TORCH_OPTIMIZER_NAMES)}"
    )
    if isinstance(name, str):
        for torch_name in TORCH_OPTIMIZER_NAMES:
            if torch_name.lower() == name.lower():
                message += f" (torch.optim names are case-sensitive: did you mean {torch_name!r}?)"
    return message


def _check_type(value: Any) -> Any:
    """One clear error for a missing or unknown type, before the per-type models run."""
    if isinstance(value, dict):
        if "type" not in value:
            typo = [key for key in value if key not in ("params", "legacy_fusion")]
            raise ValueError(
                "optimizer.type is missing: without it DeepSpeed builds no optimizer and ignores params"
                + (f" ('{typo[0]}' is not a key: did you mean 'type'?)" if typo else "")
            )
        if optimizer_kind(value["type"]) is None:
            raise ValueError(_unknown_type_message(value["type"]))
    return value


OptimizerConfig = Annotated[
    Union[
        Annotated[AdamOptimizer, Tag("adam")],
        Annotated[AdamWOptimizer, Tag("adamw")],
        Annotated[LambOptimizer, Tag("lamb")],
        Annotated[LionOptimizer, Tag("lion")],
        Annotated[AdagradOptimizer, Tag("adagrad")],
        Annotated[MuonOptimizer, Tag("muon")],
        Annotated[OneBitAdamOptimizer, Tag("onebitadam")],
        Annotated[ZeroOneAdamOptimizer, Tag("zerooneadam")],
        Annotated[OneBitLambOptimizer, Tag("onebitlamb")],
        Annotated[MupOptimizer, Tag("mup")],
        Annotated[TorchOptimizer, Tag("torch")],
    ],
    Discriminator(
        _optimizer_tag,
        custom_error_type="optimizer_block",
        custom_error_message="optimizer must be an object with a known `type`",
    ),
    BeforeValidator(_check_type),
]
"""The `optimizer` block: one model per type, picked by the (case-insensitive) `type`."""
