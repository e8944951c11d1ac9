"""Every scheduler param dsx accepts is taken by DeepSpeed: each DeepSpeed schedule is really built by
deepspeed.initialize (one CPU process, gloo) from a block that dsx validated, holding every param at a non-default
value, and the schedule object holds those values.
"""

from __future__ import annotations


import pytest
from pydantic import TypeAdapter

from dsx.schema.scheduler import DEEPSPEED_SCHEDULER_NAMES, SchedulerConfig

pytestmark = [pytest.mark.deepspeed, pytest.mark.usefixtures("single_process_group")]

torch = pytest.importorskip("torch")
deepspeed = pytest.importorskip("deepspeed")


OPTIMIZER = {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}}


def build(block: dict, zero: dict | None = None):
    """Validate the block with dsx, then build the engine from what dsx emits; returns the engine's schedule."""
    emitted = TypeAdapter(SchedulerConfig).validate_python(block).model_dump(exclude_unset=True)
    config = {"train_micro_batch_size_per_gpu": 1, "optimizer": OPTIMIZER, "scheduler": emitted}
    if zero:
        config["zero_optimization"] = zero
    _, _, _, scheduler = deepspeed.initialize(model=torch.nn.Linear(4, 3), config=config)
    return scheduler


# name -> (params with every key at a non-default value, {scheduler attribute: expected value})
CASES = {
    "WarmupLR": (
        {"warmup_min_lr": 1e-5, "warmup_max_lr": 2e-3, "warmup_num_steps": 50, "warmup_type": "linear",
         "last_batch_iteration": 10},
        {"min_lrs": [1e-5], "max_lrs": [2e-3], "warmup_num_steps": 50, "warmup_type": "linear",
         "last_batch_iteration": 10},
    ),
    "WarmupDecayLR": (
        {"total_num_steps": 500, "warmup_min_lr": [1e-5], "warmup_max_lr": [2e-3], "warmup_num_steps": 50,
         "warmup_type": "linear", "last_batch_iteration": 3},
        {"total_num_steps": 500, "min_lrs": [1e-5], "max_lrs": [2e-3], "warmup_num_steps": 50,
         "warmup_type": "linear", "last_batch_iteration": 3},
    ),
    "WarmupCosineLR": (
        {"total_num_steps": 500, "warmup_min_ratio": 0.1, "warmup_num_steps": 20, "cos_min_ratio": 0.01,
         "warmup_type": "linear", "last_batch_iteration": 5},
        {"total_num_steps": 500, "warmup_min_ratio": 0.1, "warmup_num_steps": 20, "cos_min_ratio": 0.01,
         "warmup_type": "linear", "last_batch_iteration": 5},
    ),
    "OneCycle": (
        {"cycle_min_lr": 1e-5, "cycle_max_lr": [1e-3], "decay_lr_rate": 0.1, "cycle_first_step_size": 100,
         "cycle_second_step_size": 50, "cycle_first_stair_count": 4, "cycle_second_stair_count": 2,
         "decay_step_size": 10, "cycle_momentum": True, "cycle_min_mom": 0.85, "cycle_max_mom": [0.95],
         "decay_mom_rate": 0.1, "last_batch_iteration": 7},
        {"min_lrs": [1e-5], "max_lrs": [1e-3], "decay_lr_rate": 0.1, "first_step_size": 100.0,
         "second_step_size": 50.0, "first_stair_count": 4, "second_stair_count": 2, "decay_step_size": 10,
         "cycle_momentum": True, "min_moms": [(0.85, 0.99)], "max_moms": [(0.95, 0.99)], "decay_mom_rate": 0.1,
         "last_batch_iteration": 7},
    ),
    "LRRangeTest": (
        {"lr_range_test_min_lr": 1e-4, "lr_range_test_step_size": 100, "lr_range_test_step_rate": 2.0,
         "lr_range_test_staircase": True, "last_batch_iteration": 3},
        {"min_lr": [1e-4], "step_size": 100, "step_rate": 2.0, "staircase": True, "last_batch_iteration": 3},
    ),
}


def test_cases_cover_every_schedule_and_every_param():
    from dsx.schema.scheduler import (LRRangeTestParams, OneCycleParams, WarmupCosineLRParams, WarmupDecayLRParams,
                                      WarmupLRParams)

    models = {"WarmupLR": WarmupLRParams, "WarmupDecayLR": WarmupDecayLRParams,
              "WarmupCosineLR": WarmupCosineLRParams, "OneCycle": OneCycleParams, "LRRangeTest": LRRangeTestParams}
    assert set(CASES) == set(DEEPSPEED_SCHEDULER_NAMES)
    for name, (params, _) in CASES.items():
        assert set(params) == set(models[name].model_fields), name


@pytest.mark.parametrize("name", sorted(CASES))
def test_deepspeed_builds_the_schedule_from_every_accepted_param(name):
    params, expected = CASES[name]
    scheduler = build({"type": name, "params": params})
    assert type(scheduler).__name__ == name
    assert {key: getattr(scheduler, key) for key in expected} == expected


def test_onecycle_without_momentum_cycling_still_takes_the_momentum_keys():
    params = {"cycle_min_lr": 1e-5, "cycle_max_lr": 1e-3, "cycle_momentum": False, "cycle_min_mom": 0.85,
              "cycle_max_mom": 0.95, "decay_mom_rate": 0.1}
    assert build({"type": "OneCycle", "params": params}).cycle_momentum is False


def test_deepspeed_schedules_run_under_zero():
    scheduler = build({"type": "WarmupLR", "params": {"warmup_num_steps": 10}}, {"stage": 1})
    assert type(scheduler).__name__ == "WarmupLR"


def test_deepspeed_builds_a_torch_scheduler_by_exact_name_without_a_wrapped_optimizer():
    scheduler = build({"type": "StepLR", "params": {"step_size": 10, "gamma": 0.5}})
    assert type(scheduler) is torch.optim.lr_scheduler.StepLR


def test_torch_schedulers_reject_deepspeeds_zero_optimizer():
    # What TorchLRScheduler's docstring says: torch schedulers only work without ZeRO/fp16/bf16 wrappers.
    with pytest.raises(TypeError, match="DeepSpeedZeroOptimizer is not an Optimizer"):
        build({"type": "StepLR", "params": {"step_size": 10}}, {"stage": 1})


@pytest.mark.parametrize("steps", [0, 100.0])
def test_deepspeed_rejects_what_dsx_rejects_for_warmup_num_steps(steps):
    config = {"train_micro_batch_size_per_gpu": 1, "optimizer": OPTIMIZER,
              "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": steps}}}
    with pytest.raises(ValueError, match="warmup_num_steps must be a positive integer"):
        deepspeed.initialize(model=torch.nn.Linear(4, 3), config=config)


def test_deepspeed_fails_without_params():
    config = {"train_micro_batch_size_per_gpu": 1, "optimizer": OPTIMIZER, "scheduler": {"type": "WarmupLR"}}
    with pytest.raises(TypeError, match="argument after \\*\\* must be a mapping"):
        deepspeed.initialize(model=torch.nn.Linear(4, 3), config=config)
