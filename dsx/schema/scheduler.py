"""The `scheduler` block: the learning-rate schedule DeepSpeed builds around the optimizer.

DeepSpeed reads this block with dict.get (IGNORED regime) and calls `<type>(optimizer, **params)` inside
deepspeed.initialize, so a misspelled param or a missing `params` fails only there, and a misspelled `type` key
silently means no schedule. dsx checks each DeepSpeed schedule's params against its own model.

Validate a block on its own with `pydantic.TypeAdapter(SchedulerConfig).validate_python(block)`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union, get_args

from pydantic import BeforeValidator, Discriminator, Tag, field_validator

from dsx.schema.base import Bool, Field, Float, Int, Section

__all__ = [
    "SchedulerConfig",
    "WarmupLRScheduler",
    "WarmupDecayLRScheduler",
    "WarmupCosineLRScheduler",
    "OneCycleScheduler",
    "LRRangeTestScheduler",
    "TorchLRScheduler",
    "WarmupLRParams",
    "WarmupDecayLRParams",
    "WarmupCosineLRParams",
    "OneCycleParams",
    "LRRangeTestParams",
    "scheduler_kind",
    "DEEPSPEED_SCHEDULER_NAMES",
    "TORCH_SCHEDULER_NAMES",
]

# deepspeed.runtime.lr_schedules.VALID_LR_SCHEDULES (exact case; looked up before torch.optim.lr_scheduler).
DeepSpeedSchedulerName = Literal["WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest"]
DEEPSPEED_SCHEDULER_NAMES = get_args(DeepSpeedSchedulerName)

# torch.optim.lr_scheduler classes whose arguments a JSON config can hold (not LambdaLR/MultiplicativeLR, which need
# a function, nor SequentialLR/ChainedScheduler, which need scheduler objects).
TorchSchedulerName = Literal[
    "StepLR",
    "MultiStepLR",
    "ConstantLR",
    "LinearLR",
    "ExponentialLR",
    "PolynomialLR",
    "CosineAnnealingLR",
    "CosineAnnealingWarmRestarts",
    "CyclicLR",
    "OneCycleLR",
    "ReduceLROnPlateau",
]
TORCH_SCHEDULER_NAMES = get_args(TorchSchedulerName)


def scheduler_kind(type_name: Any) -> Optional[str]:
    """The DeepSpeed schedule name ("WarmupLR", ...), "torch:<name>" for a torch scheduler, or None if unknown."""
    if type_name in DEEPSPEED_SCHEDULER_NAMES:
        return type_name
    if type_name in TORCH_SCHEDULER_NAMES:
        return f"torch:{type_name}"
    return None


# --------------------------------------------------------------------------------------------------------------
# Shared value types

LR = Annotated[Float, Field(ge=0)]
LROrList = Union[LR, list[LR]]
Momentum = Annotated[Float, Field(ge=0, lt=1)]
MomentumOrList = Union[Momentum, list[Momentum]]
LastBatchIteration = Annotated[Int, Field(ge=-1)]


def _positive_strict_int(value: Any, key: str) -> Any:
    """DeepSpeed 0.19 checks `isinstance(value, int) and value > 0`: 0, negatives and floats such as 100.0 fail."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"{key} must be a positive integer, got {value!r}: DeepSpeed 0.19 rejects 0 and non-integers "
            "such as 100.0 at initialize"
        )
    return value


class _WarmupParamsBase(Section):
    """Fields shared by WarmupLR, WarmupDecayLR and WarmupCosineLR."""

    warmup_num_steps: Int = 1000
    """Steps of warm-up; a positive integer (0 and 100.0 fail at initialize in 0.19; values below 2 act as 2)."""
    warmup_type: Literal["log", "linear"] = "log"
    """Shape of the warm-up curve (DeepSpeed falls back to log, with a warning, for any other value)."""
    last_batch_iteration: LastBatchIteration = -1
    """Index of the last batch, for resuming; -1 starts the schedule from the beginning."""

    @field_validator("warmup_num_steps", mode="before")
    @classmethod
    def _check_warmup_num_steps(cls, value: Any) -> Any:
        return _positive_strict_int(value, "scheduler.params.warmup_num_steps")


class WarmupLRParams(_WarmupParamsBase):
    """Params of WarmupLR: warm up from warmup_min_lr to warmup_max_lr, then hold."""

    warmup_min_lr: LROrList = 0.0
    """Learning rate at step 0 (one number, or one per optimizer param group)."""
    warmup_max_lr: Optional[LROrList] = None
    """Learning rate after warm-up (unset: each param group's optimizer lr)."""


class WarmupDecayLRParams(_WarmupParamsBase):
    """Params of WarmupDecayLR: WarmupLR, then a linear decay to 0 at total_num_steps."""

    total_num_steps: Annotated[Int, Field(gt=0)]
    """Total training steps; the learning rate reaches 0 here (required)."""
    warmup_min_lr: LROrList = 0.0
    """Learning rate at step 0 (one number, or one per optimizer param group)."""
    warmup_max_lr: LROrList = 0.001
    """Learning rate after warm-up (default 0.001, NOT the optimizer lr as in WarmupLR)."""


class WarmupCosineLRParams(_WarmupParamsBase):
    """Params of WarmupCosineLR: ratios of the optimizer lr; warm-up, then a cosine decay (no warmup_min_lr or
    warmup_max_lr here: DeepSpeed rejects them)."""

    total_num_steps: Annotated[Int, Field(gt=0)]
    """Total training steps; the cosine reaches cos_min_ratio here (required)."""
    warmup_min_ratio: Annotated[Float, Field(ge=0)] = 0.0
    """Learning rate at step 0 as a fraction of the optimizer lr."""
    cos_min_ratio: Annotated[Float, Field(ge=0)] = 0.0001
    """Final learning rate as a fraction of the optimizer lr."""


class OneCycleParams(Section):
    """Params of OneCycle: one triangular lr cycle (and inverse momentum cycle), then optional decay."""

    cycle_min_lr: LROrList
    """Lower learning-rate bound of the cycle (required; one number or one per param group)."""
    cycle_max_lr: LROrList
    """Upper learning-rate bound of the cycle (required; one number or one per param group)."""
    decay_lr_rate: Annotated[Float, Field(ge=0)] = 0.0
    """Learning-rate decay rate after the cycle (0: no decay)."""
    cycle_first_step_size: Annotated[Int, Field(gt=0)] = 2000
    """Steps of the increasing half of the cycle (must be > 0: 0.19 raises ValueError, 0.18 divides by zero)."""
    cycle_second_step_size: Optional[Annotated[Int, Field(ge=0)]] = None
    """Steps of the decreasing half (unset: cycle_first_step_size)."""
    cycle_first_stair_count: Annotated[Int, Field(ge=0)] = 0
    """Stairs in the first half (lr held flat per stair); 0 is a continuous schedule."""
    cycle_second_stair_count: Optional[Annotated[Int, Field(ge=0)]] = None
    """Stairs in the second half (unset: cycle_first_stair_count)."""
    decay_step_size: Annotated[Int, Field(ge=0)] = 0
    """Interval of the post-cycle decay steps; 0 disables decay."""
    cycle_momentum: Bool = True
    """Cycle beta1 inversely to the lr (optimizers with betas only; beta2 is then set to 0.99)."""
    cycle_min_mom: MomentumOrList = 0.8
    """Lower momentum (beta1) bound (one number or one per param group)."""
    cycle_max_mom: MomentumOrList = 0.9
    """Upper momentum (beta1) bound (one number or one per param group)."""
    decay_mom_rate: Annotated[Float, Field(ge=0)] = 0.0
    """Momentum decay rate after the cycle (0: no decay)."""
    last_batch_iteration: LastBatchIteration = -1
    """Index of the last batch, for resuming; -1 starts the schedule from the beginning."""


class LRRangeTestParams(Section):
    """Params of LRRangeTest: grow the lr from lr_range_test_min_lr to find the largest stable lr."""

    lr_range_test_min_lr: LROrList = 1e-3
    """Starting learning rate (one number or one per param group)."""
    lr_range_test_step_size: Int = 2000
    """Steps between lr increases; a positive integer (DeepSpeed 0.19 rejects 0 and floats)."""
    lr_range_test_step_rate: Annotated[Float, Field(ge=0)] = 1.0
    """Rate of the lr increase per interval."""
    lr_range_test_staircase: Bool = False
    """Increase in steps instead of continuously."""
    last_batch_iteration: LastBatchIteration = -1
    """Index of the last batch, for resuming; -1 starts the schedule from the beginning."""

    @field_validator("lr_range_test_step_size", mode="before")
    @classmethod
    def _check_step_size(cls, value: Any) -> Any:
        return _positive_strict_int(value, "scheduler.params.lr_range_test_step_size")


# --------------------------------------------------------------------------------------------------------------
# Scheduler blocks, one per type


class _SchedulerBlock(Section):
    """Fields common to every scheduler block. `params` is required: DeepSpeed calls `<type>(optimizer, **params)`,
    so a block without it fails at initialize ("argument after ** must be a mapping"); write `params: {}` for the
    defaults."""


class WarmupLRScheduler(_SchedulerBlock):
    """`type: WarmupLR`."""

    type: Literal["WarmupLR"]
    """Schedule name (exact case)."""
    params: WarmupLRParams
    """Constructor arguments."""


class WarmupDecayLRScheduler(_SchedulerBlock):
    """`type: WarmupDecayLR`."""

    type: Literal["WarmupDecayLR"]
    """Schedule name (exact case)."""
    params: WarmupDecayLRParams
    """Constructor arguments (total_num_steps is required)."""


class WarmupCosineLRScheduler(_SchedulerBlock):
    """`type: WarmupCosineLR`."""

    type: Literal["WarmupCosineLR"]
    """Schedule name (exact case)."""
    params: WarmupCosineLRParams
    """Constructor arguments (total_num_steps is required)."""


class OneCycleScheduler(_SchedulerBlock):
    """`type: OneCycle`."""

    type: Literal["OneCycle"]
    """Schedule name (exact case)."""
    params: OneCycleParams
    """Constructor arguments (cycle_min_lr and cycle_max_lr are required)."""


class LRRangeTestScheduler(_SchedulerBlock):
    """`type: LRRangeTest`."""

    type: Literal["LRRangeTest"]
    """Schedule name (exact case)."""
    params: LRRangeTestParams
    """Constructor arguments."""


class TorchLRScheduler(_SchedulerBlock):
    """An exact torch.optim.lr_scheduler class name, built as <type>(optimizer, **params). torch schedulers
    reject DeepSpeed's optimizer wrappers ("... is not an Optimizer"), so they only work without ZeRO, fp16 and
    bf16."""

    type: TorchSchedulerName
    """Exact torch.optim.lr_scheduler class name (ReduceLROnPlateau also needs lr_kwargs={"metrics": ...} in
    engine.step())."""
    params: dict[str, Any]
    """Passed to the torch constructor as is: dsx cannot check these (a wrong key fails at initialize)."""


def _scheduler_tag(value: Any) -> Optional[str]:
    name = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    kind = scheduler_kind(name)
    if kind is None:
        return None
    return "torch" if kind.startswith("torch:") else kind


def _unknown_type_message(name: Any) -> str:
    message = (
        f"unknown scheduler type {name!r}. DeepSpeed schedules (exact case): {', '.join(DEEPSPEED_SCHEDULER_NAMES)}; "
        f"torch.optim.lr_scheduler classes (exact case): {', '.join(TORCH_SCHEDULER_NAMES)}"
    )
    if name in ("LambdaLR", "MultiplicativeLR", "SequentialLR", "ChainedScheduler"):
        message += f" ({name} needs Python objects: pass it as deepspeed.initialize(lr_scheduler=...) instead)"
    elif isinstance(name, str):
        for known in DEEPSPEED_SCHEDULER_NAMES + TORCH_SCHEDULER_NAMES:
            if known.lower() == name.lower():
                message += f" (names are case-sensitive: did you mean {known!r}?)"
    return message


def _check_type(value: Any) -> Any:
    """One clear error for a missing or unknown type, before the per-type models run."""
    if isinstance(value, dict):
        if "type" not in value:
            raise ValueError("scheduler.type is missing: without it DeepSpeed silently builds no scheduler")
        if scheduler_kind(value["type"]) is None:
            raise ValueError(_unknown_type_message(value["type"]))
        if "params" not in value:
            raise ValueError(
                "scheduler.params is missing: DeepSpeed calls <type>(optimizer, **params) and fails at initialize "
                "('argument after ** must be a mapping'); write params: {} for the defaults"
            )
    return value


SchedulerConfig = Annotated[
    Union[
        Annotated[WarmupLRScheduler, Tag("WarmupLR")],
        Annotated[WarmupDecayLRScheduler, Tag("WarmupDecayLR")],
        Annotated[WarmupCosineLRScheduler, Tag("WarmupCosineLR")],
        Annotated[OneCycleScheduler, Tag("OneCycle")],
        Annotated[LRRangeTestScheduler, Tag("LRRangeTest")],
        Annotated[TorchLRScheduler, Tag("torch")],
    ],
    Discriminator(
        _scheduler_tag,
        custom_error_type="scheduler_block",
        custom_error_message="scheduler must be an object with a known `type`",
    ),
    BeforeValidator(_check_type),
]
"""The `scheduler` block: one model per type, picked by the exact `type`."""
