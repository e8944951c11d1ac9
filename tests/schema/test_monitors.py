"""Monitors (tensorboard, wandb, csv_monitor, comet): field parity with DeepSpeed's models and strict types."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dsx.schema.monitors import CometConfig, CSVMonitorConfig, TensorBoardConfig, WandbConfig

OURS = {"tensorboard": TensorBoardConfig, "wandb": WandbConfig, "csv_monitor": CSVMonitorConfig, "comet": CometConfig}


def _fields(model):
    """name -> (alias, default, type of default); the type keeps False from comparing equal to 0."""
    out = {}
    for name, info in model.model_fields.items():
        default = info.get_default(call_default_factory=True)
        out[name] = (info.alias, default, type(default).__name__)
    return out


@pytest.mark.deepspeed
@pytest.mark.parametrize("key", sorted(OURS))
def test_field_names_aliases_and_defaults_match_deepspeed(key):
    from deepspeed.monitor.config import DeepSpeedMonitorConfig

    theirs = DeepSpeedMonitorConfig.model_fields[key].annotation
    assert _fields(OURS[key]) == _fields(theirs)


@pytest.mark.deepspeed
def test_every_deepspeed_monitor_has_a_model():
    from deepspeed.monitor.config import DeepSpeedMonitorConfig

    assert set(DeepSpeedMonitorConfig.model_fields) == set(OURS)


@pytest.mark.parametrize("key", sorted(OURS))
def test_defaults_emit_nothing(key):
    assert OURS[key]().model_dump(exclude_defaults=True) == {}


@pytest.mark.parametrize(
    "key, typo",
    [("tensorboard", "output_dir"), ("wandb", "projct"), ("csv_monitor", "jobname"), ("comet", "workspce")],
)
def test_misspelled_key_is_rejected(key, typo):
    with pytest.raises(ValidationError, match=f"{typo}\n  Extra inputs are not permitted"):
        OURS[key].model_validate({typo: "x"})


@pytest.mark.parametrize("key", sorted(OURS))
def test_false_string_is_rejected_for_enabled(key):
    with pytest.raises(ValidationError, match="enabled\n  Input should be a valid boolean"):
        OURS[key].model_validate({"enabled": "false"})


def test_comet_mode_is_one_of_comets_three():
    assert CometConfig(mode="get_or_create").mode == "get_or_create"
    with pytest.raises(ValidationError, match="mode\n  Input should be 'get', 'create' or 'get_or_create'"):
        CometConfig.model_validate({"mode": "resume"})


def test_comet_experiment_key_must_be_32_to_50_alphanumerics():
    assert CometConfig(experiment_key="a" * 32).experiment_key == "a" * 32
    with pytest.raises(ValidationError, match="experiment_key\n  String should match pattern"):
        CometConfig.model_validate({"experiment_key": "run-1"})


def test_tensorboard_values_are_emitted():
    cfg = TensorBoardConfig(enabled=True, output_path="logs/", job_name="gpt2")
    assert cfg.model_dump(exclude_defaults=True) == {"enabled": True, "output_path": "logs/", "job_name": "gpt2"}
