"""zenflow: field parity with DeepSpeed's ZenFlowConfig, "auto" values and the strategy/interval rules."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dsx.schema.zenflow import ZenFlowConfig


def _fields(model):
    """name -> (alias, default, type of default)."""
    fields = {}
    for name, info in model.model_fields.items():
        default = info.get_default(call_default_factory=True)
        fields[name] = (info.alias, default, type(default).__name__)
    return fields


@pytest.fixture(scope="module")
def ds_zenflow():
    from deepspeed.runtime.zenflow.zenflow_config import ZenFlowConfig as DeepSpeedZenFlowConfig

    return DeepSpeedZenFlowConfig


@pytest.mark.deepspeed
def test_field_names_aliases_and_defaults_match_deepspeed(ds_zenflow):
    assert _fields(ZenFlowConfig) == _fields(ds_zenflow)


@pytest.mark.deepspeed
def test_deepspeed_parses_a_non_default_dump_to_the_same_values(ds_zenflow):
    ours = ZenFlowConfig.model_validate(
        {"topk_ratio": 0.05, "select_strategy": "step", "select_interval": 8, "update_interval": 4,
         "overlap_step": True, "offload": True, "auto_ratio": 0.9, "full_warm_up_rounds": 2,
         "pt_reserved_cores_perc": 0.25}
    )
    dumped = ours.model_dump(exclude_defaults=True)
    assert ds_zenflow(**dumped).model_dump(exclude_unset=True) == dumped


@pytest.mark.deepspeed
@pytest.mark.parametrize(
    "config",
    [{"topk_ratio": 0.0}, {"topk_ratio": 1.0}, {"select_strategy": "steps"}, {"select_interval": "5"},
     {"update_interval": 0}, {"update_intervl": 4}, {"auto_ratio": 1.5}],
)
def test_deepspeed_rejects_the_same_configs(ds_zenflow, config):
    with pytest.raises(ValidationError):
        ds_zenflow(**config)
    with pytest.raises(ValidationError):
        ZenFlowConfig.model_validate(config)




def test_empty_block_is_all_defaults():
    assert ZenFlowConfig().model_dump(exclude_defaults=True) == {}


def test_misspelled_key_is_rejected():
    with pytest.raises(ValidationError, match="update_intervl\n  Extra inputs are not permitted"):
        ZenFlowConfig.model_validate({"update_intervl": 4})


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match="overlap_step\n  Input should be a valid boolean"):
        ZenFlowConfig.model_validate({"overlap_step": "false"})


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_topk_ratio_is_strictly_between_0_and_1(value):
    with pytest.raises(ValidationError, match="topk_ratio\n  Input should be (greater|less) than"):
        ZenFlowConfig.model_validate({"topk_ratio": value})


@pytest.mark.parametrize("key", ["select_interval", "update_interval"])
def test_intervals_accept_auto(key):
    assert getattr(ZenFlowConfig.model_validate({key: "auto"}), key) == "auto"


def test_update_interval_accepts_an_int():
    assert ZenFlowConfig.model_validate({"update_interval": 4}).update_interval == 4


def test_update_interval_must_be_at_least_1():
    with pytest.raises(ValidationError, match="update_interval.int\n  Input should be greater than or equal to 1"):
        ZenFlowConfig.model_validate({"update_interval": 0})


def test_interval_rejects_a_numeric_string():
    with pytest.raises(ValidationError, match="select_interval.auto\n  Input should be 'auto'"):
        ZenFlowConfig.model_validate({"select_strategy": "step", "select_interval": "5"})


def test_interval_rejects_a_bool():
    with pytest.raises(ValidationError, match="update_interval.int\n  Input should be a valid integer"):
        ZenFlowConfig.model_validate({"update_interval": True})


def test_select_strategy_must_be_a_known_name():
    with pytest.raises(ValidationError, match="select_strategy\n  Input should be 'auto', 'step' or 'epoch'"):
        ZenFlowConfig.model_validate({"select_strategy": "steps"})


def test_int_select_interval_needs_a_non_auto_strategy():
    with pytest.raises(ValidationError, match='zenflow.select_interval=4 needs select_strategy "step" or "epoch"'):
        ZenFlowConfig.model_validate({"select_interval": 4})


@pytest.mark.parametrize("strategy", ["step", "epoch"])
def test_step_or_epoch_strategy_needs_an_int_select_interval(strategy):
    with pytest.raises(ValidationError, match=f'zenflow.select_strategy "{strategy}" needs an integer select_interval'):
        ZenFlowConfig.model_validate({"select_strategy": strategy})


def test_step_select_interval_must_not_be_below_update_interval():
    with pytest.raises(
        ValidationError,
        match=r"zenflow.select_interval \(2\) must be >= zenflow.update_interval \(4\) with select_strategy \"step\"",
    ):
        ZenFlowConfig.model_validate({"select_strategy": "step", "select_interval": 2, "update_interval": 4})


@pytest.mark.parametrize(
    "config",
    [
        {"select_strategy": "step", "select_interval": 4, "update_interval": 4},
        {"select_strategy": "step", "select_interval": 0, "update_interval": 4},
        {"select_strategy": "step", "select_interval": 2, "update_interval": "auto"},
        {"select_strategy": "epoch", "select_interval": 1, "update_interval": 4},
    ],
)
def test_consistent_intervals_are_accepted(config):
    assert ZenFlowConfig.model_validate(config).model_dump(exclude_unset=True) == config


@pytest.mark.deepspeed
@pytest.mark.parametrize(
    "config, message",
    [
        ({"select_interval": 4}, "If use auto select strategy"),
        ({"select_strategy": "step"}, "select_interval must be a number"),
        ({"select_strategy": "step", "select_interval": 2, "update_interval": 4}, "Select interval must be greater"),
    ],
)
def test_rules_mirror_deepspeed_initialize(config, message):
    """DeepSpeed's model accepts these; its engine setup (configure_zenflow) raises on them."""
    from types import SimpleNamespace

    from deepspeed.runtime.zenflow.engine import configure_zenflow
    from deepspeed.runtime.zenflow.zenflow_config import ZenFlowConfig as DeepSpeedZenFlowConfig

    ds_block = DeepSpeedZenFlowConfig(**config)
    engine = SimpleNamespace(zenflow_config=lambda: ds_block, training_dataloader=None)
    with pytest.raises((ValueError, Warning), match=message):
        configure_zenflow(engine)
    with pytest.raises(ValidationError):
        ZenFlowConfig.model_validate(config)
