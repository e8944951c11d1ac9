"""offload_param / offload_optimizer: field parity with DeepSpeed's offload models and strict types."""

from __future__ import annotations

import enum
import json

import pytest

from dsx.schema.docs import field_docstring
from pydantic import ValidationError

from dsx.schema.offload import OffloadOptimizerConfig, OffloadParamConfig

# Defaults that changed between DeepSpeed 0.18.9 (false) and 0.19.8 (true): dsx uses None and always writes them.
VERSION_DEPENDENT_DEFAULTS = {"pin_memory"}


def _fields(model, skip=()):
    """name -> (alias, default, type of default); enum defaults as their values."""
    fields = {}
    for name, info in model.model_fields.items():
        if name not in skip:
            default = info.get_default(call_default_factory=True)
            if isinstance(default, enum.Enum):
                default = default.value
            elif isinstance(default, int) and not isinstance(default, bool):
                default = int(default)  # DeepSpeed's pp_int
            fields[name] = (info.alias, default, type(default).__name__)
    return fields


def _ds_models():
    from deepspeed.runtime.zero.offload_config import (
        DeepSpeedZeroOffloadOptimizerConfig,
        DeepSpeedZeroOffloadParamConfig,
    )

    return {
        OffloadParamConfig: DeepSpeedZeroOffloadParamConfig,
        OffloadOptimizerConfig: DeepSpeedZeroOffloadOptimizerConfig,
    }


MODELS = [OffloadParamConfig, OffloadOptimizerConfig]


@pytest.mark.deepspeed
@pytest.mark.parametrize("model", MODELS)
def test_field_names_aliases_and_defaults_match_deepspeed(model):
    theirs = _ds_models()[model]
    assert set(model.model_fields) == set(theirs.model_fields)
    assert _fields(model, skip=VERSION_DEPENDENT_DEFAULTS) == _fields(theirs, skip=VERSION_DEPENDENT_DEFAULTS)


@pytest.mark.deepspeed
@pytest.mark.parametrize("model", MODELS)
def test_pin_memory_is_none_because_deepspeed_0_19_changed_it_to_true(model):
    assert _ds_models()[model].model_fields["pin_memory"].default is True
    assert model.model_fields["pin_memory"].default is None
    assert "dsx always writes it" in field_docstring(model, "pin_memory")


@pytest.mark.deepspeed
def test_deepspeed_parses_a_non_default_dump_to_the_same_values():
    ours = OffloadOptimizerConfig.model_validate(
        {"device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 8, "pin_memory": False, "pipeline_read": True,
         "pipeline_write": True, "fast_init": True, "ratio": 0.4, "super_offload": True, "cpuadam_cores_perc": 0.5}
    )
    dumped = json.loads(json.dumps(ours.model_dump(exclude_defaults=True)))
    theirs = _ds_models()[OffloadOptimizerConfig](**dumped)
    assert {k: str(v) if k == "nvme_path" else v for k, v in theirs.model_dump(exclude_unset=True).items()} == dumped


@pytest.mark.deepspeed
@pytest.mark.parametrize(
    "model, config",
    [
        (OffloadParamConfig, {"device": "CPU"}),
        (OffloadParamConfig, {"pin_memroy": True}),
        (OffloadParamConfig, {"buffer_count": -1}),
        (OffloadOptimizerConfig, {"ratio": 1.5}),
        (OffloadOptimizerConfig, {"cpuadam_cores_perc": -0.1}),
        (OffloadOptimizerConfig, {"pipeline": True}),
    ],
)
def test_deepspeed_rejects_the_same_configs(model, config):
    with pytest.raises(ValidationError):
        _ds_models()[model](**config)
    with pytest.raises(ValidationError):
        model.model_validate(config)




@pytest.mark.parametrize("model", MODELS)
def test_empty_block_means_no_offload(model):
    block = model()
    assert block.device == "none"
    assert block.model_dump(exclude_defaults=True) == {}


@pytest.mark.parametrize("model", MODELS)
def test_pin_memory_is_emitted_when_set(model):
    block = model(device="cpu", pin_memory=True)
    assert block.model_dump(exclude_defaults=True) == {"device": "cpu", "pin_memory": True}


@pytest.mark.parametrize("model", MODELS)
def test_misspelled_key_is_rejected(model):
    with pytest.raises(ValidationError, match="pin_memroy\n  Extra inputs are not permitted"):
        model.model_validate({"device": "cpu", "pin_memroy": True})


@pytest.mark.parametrize("model", MODELS)
def test_false_string_is_rejected_for_a_bool(model):
    with pytest.raises(ValidationError, match="pin_memory\n  Input should be a valid boolean"):
        model.model_validate({"device": "cpu", "pin_memory": "false"})


@pytest.mark.parametrize("device", ["CPU", "auto", "gpu", ""])
def test_device_must_be_an_exact_deepspeed_spelling(device):
    with pytest.raises(ValidationError, match="device\n  Input should be 'none', 'cpu' or 'nvme'"):
        OffloadParamConfig.model_validate({"device": device})


def test_integral_float_sizes_are_accepted_as_ints():
    block = OffloadParamConfig.model_validate({"device": "nvme", "buffer_size": 1e8, "max_in_cpu": 2e9})
    assert block.model_dump(exclude_defaults=True) == {"device": "nvme", "max_in_cpu": 2000000000}


def test_negative_buffer_count_is_rejected():
    with pytest.raises(ValidationError, match="buffer_count\n  Input should be greater than or equal to 0"):
        OffloadOptimizerConfig.model_validate({"buffer_count": -1})


@pytest.mark.parametrize("ratio", [-0.1, 1.01])
def test_ratio_is_a_fraction(ratio):
    with pytest.raises(ValidationError, match="ratio\n  Input should be (greater|less) than or equal to"):
        OffloadOptimizerConfig.model_validate({"ratio": ratio})


def test_ratio_accepts_an_int():
    assert OffloadOptimizerConfig.model_validate({"ratio": 0}).ratio == 0.0


def test_ratio_rejects_a_bool():
    with pytest.raises(ValidationError, match="ratio\n  Input should be a valid number"):
        OffloadOptimizerConfig.model_validate({"ratio": True})


def test_cpuadam_cores_perc_is_a_fraction():
    with pytest.raises(ValidationError, match="cpuadam_cores_perc\n  Input should be less than or equal to 1"):
        OffloadOptimizerConfig.model_validate({"cpuadam_cores_perc": 80})


def test_param_offload_has_no_optimizer_keys():
    with pytest.raises(ValidationError, match="ratio\n  Extra inputs are not permitted"):
        OffloadParamConfig.model_validate({"device": "cpu", "ratio": 0.5})


def test_json_schema_carries_the_bounds_as_standard_keywords():
    properties = OffloadOptimizerConfig.model_json_schema()["properties"]
    assert properties["buffer_count"]["minimum"] == 0
    assert (properties["ratio"]["minimum"], properties["ratio"]["maximum"]) == (0.0, 1.0)
    assert properties["device"]["enum"] == ["none", "cpu", "nvme"]
