"""fp16: field parity with DeepSpeed's DeepSpeedFP16Config, strict types, and the dynamic-loss-scale rules."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from dsx.schema.docs import field_docstring
from dsx.schema.fp16 import FP16Config


def _fields(model):
    return {name: (info.alias, info.default) for name, info in model.model_fields.items()}


@pytest.mark.deepspeed
def test_field_names_aliases_and_defaults_match_deepspeed():
    from deepspeed.runtime.precision_config import DeepSpeedFP16Config

    assert _fields(FP16Config) == _fields(DeepSpeedFP16Config)


@pytest.mark.deepspeed
def test_deepspeed_parses_a_non_default_dump_to_the_same_values():
    from deepspeed.runtime.precision_config import DeepSpeedFP16Config

    ours = FP16Config(enabled=True, auto_cast=True, loss_scale=128, initial_scale_power=12, loss_scale_window=500,
                      hysteresis=4, consecutive_hysteresis=True, min_loss_scale=2, fp16_master_weights_and_grads=True)
    dumped = json.loads(json.dumps(ours.model_dump(exclude_defaults=True)))
    assert set(dumped) == set(FP16Config.model_fields)
    assert DeepSpeedFP16Config(**dumped).model_dump() == dumped


@pytest.mark.deepspeed
@pytest.mark.parametrize("key", ["loss_scale_window", "min_loss_scale"])
def test_dynamic_loss_scale_messages_are_deepspeeds(key):
    from deepspeed.runtime.precision_config import DeepSpeedFP16Config

    with pytest.raises(ValidationError) as theirs:
        DeepSpeedFP16Config(enabled=True, **{key: 0})
    with pytest.raises(ValidationError) as ours:
        FP16Config(enabled=True, **{key: 0})
    assert ours.value.errors()[0]["msg"] == theirs.value.errors()[0]["msg"]


@pytest.mark.parametrize("key", ["loss_scale_window", "min_loss_scale"])
def test_dynamic_loss_scaling_needs_positive_window_and_floor(key):
    with pytest.raises(ValidationError, match=rf"fp16\.{key} must be > 0 when dynamic loss scaling is enabled"):
        FP16Config(enabled=True, **{key: 0})


@pytest.mark.parametrize("config", [{"enabled": False}, {"enabled": True, "loss_scale": 1024}])
def test_window_and_floor_are_unchecked_without_dynamic_scaling(config):
    assert FP16Config(loss_scale_window=0, min_loss_scale=0, **config).loss_scale_window == 0


@pytest.mark.parametrize(
    "loss_scale, message",
    [
        (-1, "Input should be greater than or equal to 0"),
        (math.inf, "Input should be a finite number"),
        (math.nan, "Input should be a finite number"),
        (True, "Input should be a valid number"),
        ("128", "Input should be a valid number"),
    ],
)
def test_loss_scale_is_a_finite_non_negative_number(loss_scale, message):
    with pytest.raises(ValidationError, match=message):
        FP16Config(loss_scale=loss_scale)


def test_integral_loss_scale_is_accepted():
    assert FP16Config(loss_scale=65536).loss_scale == 65536.0


@pytest.mark.parametrize("value", [0.5, True, "1"])
def test_min_loss_scale_is_an_int(value):
    with pytest.raises(ValidationError, match="Input should be a valid integer"):
        FP16Config(min_loss_scale=value)


def test_misspelled_key_is_rejected():
    with pytest.raises(ValidationError, match=r"loss_scale_windows\n  Extra inputs are not permitted"):
        FP16Config.model_validate({"enabled": True, "loss_scale_windows": 500})


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match=r"enabled\n  Input should be a valid boolean"):
        FP16Config.model_validate({"enabled": "false"})


def test_auto_is_rejected_where_deepspeed_would_silently_drop_it():
    with pytest.raises(ValidationError, match="Input should be a valid boolean"):
        FP16Config.model_validate({"enabled": "auto"})


def test_every_field_has_a_docstring():
    assert [name for name in FP16Config.model_fields if not field_docstring(FP16Config, name)] == []
