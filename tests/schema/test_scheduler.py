"""scheduler: type resolution, per-schedule params models, and pins against deepspeed.runtime.lr_schedules.

The real construction of every schedule through deepspeed.initialize is in test_scheduler_deepspeed.py.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from dsx.schema.docs import field_docstring
from dsx.schema.scheduler import (
    DEEPSPEED_SCHEDULER_NAMES,
    TORCH_SCHEDULER_NAMES,
    LRRangeTestParams,
    LRRangeTestScheduler,
    OneCycleParams,
    OneCycleScheduler,
    SchedulerConfig,
    TorchLRScheduler,
    WarmupCosineLRParams,
    WarmupCosineLRScheduler,
    WarmupDecayLRParams,
    WarmupDecayLRScheduler,
    WarmupLRParams,
    WarmupLRScheduler,
    scheduler_kind,
)

ADAPTER = TypeAdapter(SchedulerConfig)


def validate(block):
    return ADAPTER.validate_python(block)


@pytest.mark.parametrize(
    "type_name, model",
    [
        ("WarmupLR", WarmupLRScheduler),
        ("WarmupDecayLR", WarmupDecayLRScheduler),
        ("WarmupCosineLR", WarmupCosineLRScheduler),
        ("OneCycle", OneCycleScheduler),
        ("LRRangeTest", LRRangeTestScheduler),
        ("StepLR", TorchLRScheduler),
        ("CosineAnnealingLR", TorchLRScheduler),
    ],
)
def test_type_selects_its_own_model(type_name, model):
    params = {"total_num_steps": 100} if "Decay" in type_name or "Cosine" in type_name else {}
    if type_name == "OneCycle":
        params = {"cycle_min_lr": 1e-5, "cycle_max_lr": 1e-3}
    assert type(validate({"type": type_name, "params": params})) is model


@pytest.mark.parametrize(
    "name, kind", [("WarmupLR", "WarmupLR"), ("OneCycle", "OneCycle"), ("StepLR", "torch:StepLR"),
                   ("warmuplr", None), ("LambdaLR", None), (None, None)]
)
def test_scheduler_kind(name, kind):
    assert scheduler_kind(name) == kind


def test_unknown_type_is_one_error_listing_the_accepted_names():
    with pytest.raises(ValidationError) as info:
        validate({"type": "Cosine", "params": {}})
    assert info.value.error_count() == 1
    assert "unknown scheduler type 'Cosine'. DeepSpeed schedules (exact case): WarmupLR, WarmupDecayLR" in str(
        info.value
    )


def test_names_are_case_sensitive_with_a_hint():
    with pytest.raises(ValidationError, match=r"unknown scheduler type 'warmuplr'.*did you mean 'WarmupLR'\?"):
        validate({"type": "warmuplr", "params": {}})


def test_schedulers_needing_python_objects_are_rejected_with_the_way_out():
    with pytest.raises(ValidationError, match=r"LambdaLR needs Python objects: pass it as deepspeed.initialize"):
        validate({"type": "LambdaLR", "params": {}})


def test_missing_type_is_rejected():
    with pytest.raises(ValidationError, match="scheduler.type is missing: without it DeepSpeed silently builds no"):
        validate({"params": {"warmup_num_steps": 10}})


def test_missing_params_is_rejected():
    with pytest.raises(ValidationError, match=r"scheduler.params is missing: .*write params: \{\} for the defaults"):
        validate({"type": "WarmupLR"})


def test_misspelled_params_key_is_rejected():
    with pytest.raises(ValidationError, match="scheduler.params is missing"):
        validate({"type": "WarmupLR", "parms": {}})


def test_misspelled_param_is_rejected():
    with pytest.raises(ValidationError, match=r"params\.warmup_num_step\n  Extra inputs are not permitted"):
        validate({"type": "WarmupLR", "params": {"warmup_num_step": 10}})


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match=r"params\.lr_range_test_staircase\n  Input should be a valid boolean"):
        validate({"type": "LRRangeTest", "params": {"lr_range_test_staircase": "false"}})


@pytest.mark.parametrize("type_name", ["WarmupLR", "WarmupDecayLR", "WarmupCosineLR"])
@pytest.mark.parametrize("steps", [0, -5, 100.0, 1.5, "100", True])
def test_warmup_num_steps_must_be_a_positive_int(type_name, steps):
    params = {"warmup_num_steps": steps} | ({} if type_name == "WarmupLR" else {"total_num_steps": 1000})
    with pytest.raises(
        ValidationError,
        match=r"scheduler\.params\.warmup_num_steps must be a positive integer, got .*: DeepSpeed 0\.19 rejects 0 "
        r"and non-integers such as 100\.0 at initialize",
    ):
        validate({"type": type_name, "params": params})


def test_warmup_num_steps_accepts_a_positive_int():
    assert validate({"type": "WarmupLR", "params": {"warmup_num_steps": 1}}).params.warmup_num_steps == 1


@pytest.mark.parametrize("step_size", [0, 100.0])
def test_lr_range_test_step_size_must_be_a_positive_int(step_size):
    with pytest.raises(ValidationError, match="lr_range_test_step_size must be a positive integer"):
        validate({"type": "LRRangeTest", "params": {"lr_range_test_step_size": step_size}})


def test_warmup_type_is_log_or_linear():
    with pytest.raises(ValidationError, match=r"params\.warmup_type\n  Input should be 'log' or 'linear'"):
        validate({"type": "WarmupLR", "params": {"warmup_type": "cosine"}})


@pytest.mark.parametrize("type_name", ["WarmupDecayLR", "WarmupCosineLR"])
def test_total_num_steps_is_required(type_name):
    with pytest.raises(ValidationError, match=r"params\.total_num_steps\n  Field required"):
        validate({"type": type_name, "params": {}})


def test_onecycle_needs_both_lr_bounds():
    with pytest.raises(ValidationError) as info:
        validate({"type": "OneCycle", "params": {}})
    assert {e["loc"][-1] for e in info.value.errors()} == {"cycle_min_lr", "cycle_max_lr"}


def test_onecycle_first_step_size_must_be_positive():
    with pytest.raises(ValidationError, match=r"params\.cycle_first_step_size\n  Input should be greater than 0"):
        validate({"type": "OneCycle", "params": {"cycle_min_lr": 1e-5, "cycle_max_lr": 1e-3,
                                                 "cycle_first_step_size": 0}})


def test_warmup_cosine_has_no_lr_keys():
    with pytest.raises(ValidationError, match=r"params\.warmup_max_lr\n  Extra inputs are not permitted"):
        validate({"type": "WarmupCosineLR", "params": {"total_num_steps": 100, "warmup_max_lr": 1e-3}})


def test_lr_bounds_accept_one_value_per_param_group():
    block = validate({"type": "WarmupLR", "params": {"warmup_min_lr": [0.0, 1e-6], "warmup_max_lr": [1e-3, 1e-4]}})
    assert block.params.warmup_max_lr == [1e-3, 1e-4]


def test_warmup_max_lr_defaults_differ_between_warmup_lr_and_warmup_decay_lr():
    assert WarmupLRParams.model_fields["warmup_max_lr"].default is None
    assert WarmupDecayLRParams.model_fields["warmup_max_lr"].default == 0.001


def test_integral_float_total_num_steps_is_emitted_as_int():
    block = validate({"type": "WarmupDecayLR", "params": {"total_num_steps": 1e4}})
    assert block.model_dump(exclude_defaults=True) == {"type": "WarmupDecayLR", "params": {"total_num_steps": 10000}}


def test_empty_params_are_emitted():
    assert validate({"type": "WarmupLR", "params": {}}).model_dump(exclude_defaults=True) == {
        "type": "WarmupLR",
        "params": {},
    }


def test_torch_scheduler_params_are_an_open_dict():
    block = validate({"type": "StepLR", "params": {"step_size": 10, "gamma": 0.5}})
    assert block.params == {"step_size": 10, "gamma": 0.5}
    assert "dsx cannot check these" in field_docstring(TorchLRScheduler, "params")


ALL_MODELS = [WarmupLRScheduler, WarmupDecayLRScheduler, WarmupCosineLRScheduler, OneCycleScheduler,
              LRRangeTestScheduler, TorchLRScheduler, WarmupLRParams, WarmupDecayLRParams, WarmupCosineLRParams,
              OneCycleParams, LRRangeTestParams]


@pytest.mark.parametrize("model", ALL_MODELS)
def test_every_field_has_a_docstring(model):
    assert [name for name in model.model_fields if not field_docstring(model, name)] == []


def test_torch_scheduler_names_exist_in_torch():
    torch = pytest.importorskip("torch")
    for name in TORCH_SCHEDULER_NAMES:
        assert hasattr(torch.optim.lr_scheduler, name)


# ---------------------------------------------------------------------------------------- pins against DeepSpeed

PARAMS_OF = {
    "WarmupLR": WarmupLRParams,
    "WarmupDecayLR": WarmupDecayLRParams,
    "WarmupCosineLR": WarmupCosineLRParams,
    "OneCycle": OneCycleParams,
    "LRRangeTest": LRRangeTestParams,
}


@pytest.mark.deepspeed
def test_deepspeed_schedule_names_match():
    from deepspeed.runtime import lr_schedules

    assert set(DEEPSPEED_SCHEDULER_NAMES) == set(lr_schedules.VALID_LR_SCHEDULES) == set(PARAMS_OF)


@pytest.mark.deepspeed
@pytest.mark.parametrize("name", sorted(PARAMS_OF))
def test_params_are_the_constructor_arguments_with_deepspeeds_defaults(name):
    from deepspeed.runtime import lr_schedules

    signature = dict(inspect.signature(getattr(lr_schedules, name).__init__).parameters)
    signature.pop("self")
    signature.pop("optimizer")
    model = PARAMS_OF[name]
    assert set(model.model_fields) == set(signature)
    for key, parameter in signature.items():
        if parameter.default is inspect.Parameter.empty:
            assert model.model_fields[key].is_required(), f"{name}.{key} should be required"
        else:
            assert model.model_fields[key].default == parameter.default, f"{name}.{key}"


@pytest.mark.deepspeed
def test_warmup_types_are_deepspeeds():
    from deepspeed.runtime.lr_schedules import WARMUP_LINEAR_RATE, WARMUP_LOG_RATE

    assert set(WarmupLRParams.model_fields["warmup_type"].annotation.__args__) == {WARMUP_LOG_RATE, WARMUP_LINEAR_RATE}


def test_schema_module_does_not_import_torch_or_deepspeed():
    source = Path(__file__).resolve().parents[2].joinpath("dsx/schema/scheduler.py").read_text()
    assert "import torch" not in source and "import deepspeed" not in source
