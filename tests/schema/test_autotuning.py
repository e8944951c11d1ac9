"""autotuning: defaults and key names pinned to DeepSpeed 0.19.8's DeepSpeedAutotuningConfig (a dict reader that
silently ignores unknown keys), plus the two ways a valid-looking block breaks the autotuner."""

from __future__ import annotations

import typing

import pytest
from pydantic import ValidationError

from dsx.schema.autotuning import AutotuningConfig, AutotuningModelInfo

NON_DEFAULT = {
    "enabled": True, "fast": False, "results_dir": "res", "exps_dir": "exps", "overwrite": False,
    "start_profile_step": 2, "end_profile_step": 4, "metric": "latency", "metric_path": "m.json",
    "tuner_type": "model_based", "tuner_early_stopping": 3, "tuner_num_trials": 10,
    "arg_mappings": {"train_micro_batch_size_per_gpu": "--per_device_train_batch_size"},
    "model_info": {"profile": True, "num_params": 1000, "hidden_size": 64, "num_layers": 2},
    "model_info_path": "info.json", "mp_size": 2, "max_train_batch_size": 64, "min_train_batch_size": 2,
    "max_train_micro_batch_size_per_gpu": 16, "min_train_micro_batch_size_per_gpu": 2,
    "num_tuning_micro_batch_sizes": 4,
}


@pytest.fixture(scope="module")
def ds():
    return pytest.importorskip("deepspeed.autotuning.config"), pytest.importorskip("deepspeed.autotuning.constants")


def _read(ds, block):
    """What DeepSpeed's reader makes of an `autotuning` block: every field of AutotuningConfig, by name."""
    config_module, _ = ds
    parsed = config_module.DeepSpeedAutotuningConfig({"autotuning": block})
    return {name: getattr(parsed, name) for name in AutotuningConfig.model_fields}


# --- parity with DeepSpeed 0.19.8


@pytest.mark.deepspeed
def test_defaults_match_deepspeed(ds):
    ours = {n: f.get_default() for n, f in AutotuningConfig.model_fields.items()}
    assert ours == _read(ds, {})


@pytest.mark.deepspeed
def test_every_field_is_read_by_deepspeed(ds):
    dumped = AutotuningConfig(**NON_DEFAULT).model_dump(exclude_defaults=True)
    assert dumped == NON_DEFAULT
    assert _read(ds, dumped) == NON_DEFAULT


@pytest.mark.deepspeed
def test_model_info_defaults_match_deepspeed(ds):
    _, constants = ds
    assert AutotuningModelInfo().model_dump() == constants.MODEL_INFO_KEY_DEFAULT_DICT


@pytest.mark.deepspeed
def test_tuner_types_and_metrics_are_deepspeeds(ds):
    _, c = ds
    tuner_types = {c.AUTOTUNING_TUNER_GRIDSEARCH, c.AUTOTUNING_TUNER_RANDOM, c.AUTOTUNING_TUNER_MODELBASED}
    assert set(typing.get_args(AutotuningConfig.model_fields["tuner_type"].annotation)) == tuner_types
    metrics = {c.AUTOTUNING_METRIC_LATENCY, c.AUTOTUNING_METRIC_THROUGHPUT, c.AUTOTUNING_METRIC_FLOPS}
    assert set(typing.get_args(AutotuningConfig.model_fields["metric"].annotation)) == metrics


@pytest.mark.deepspeed
def test_deepspeed_ignores_the_format_strings_start_step(ds):
    # Why dsx rejects start_step: DeepSpeed reads start_profile_step and drops start_step silently.
    assert _read(ds, {"start_step": 7})["start_profile_step"] == 3


# --- keys and types


def test_format_string_key_start_step_is_rejected():
    with pytest.raises(ValidationError, match="start_step\n  Extra inputs are not permitted"):
        AutotuningConfig(start_step=5)


def test_misspelled_model_info_key_is_rejected():
    with pytest.raises(ValidationError, match="model_info.num_param\n  Extra inputs are not permitted"):
        AutotuningConfig(model_info={"num_param": 10})


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match="enabled\n  Input should be a valid boolean"):
        AutotuningConfig(enabled="false")


def test_empty_results_dir_is_rejected():
    with pytest.raises(ValidationError, match="results_dir\n  String should have at least 1 character"):
        AutotuningConfig(results_dir="")


def test_unknown_tuner_type_is_rejected():
    with pytest.raises(ValidationError, match="tuner_type\n  Input should be 'gridsearch', 'random' or 'model_based'"):
        AutotuningConfig(tuner_type="bayes")


def test_mp_size_zero_is_rejected():
    with pytest.raises(ValidationError, match="mp_size\n  Input should be greater than or equal to 1"):
        AutotuningConfig(mp_size=0)


# --- values that break the autotuner at run time


def test_flops_metric_is_rejected():
    with pytest.raises(ValidationError, match='autotuning.metric "flops" crashes the autotuner'):
        AutotuningConfig(metric="flops")


def test_end_profile_step_before_start_is_rejected():
    msg = r"autotuning.end_profile_step \(2\) is before start_profile_step \(3\)"
    with pytest.raises(ValidationError, match=msg):
        AutotuningConfig(enabled=True, end_profile_step=2)


def test_profile_window_is_not_checked_when_disabled():
    config = AutotuningConfig(enabled=False, end_profile_step=2)
    assert config.model_dump(exclude_unset=True) == {"enabled": False, "end_profile_step": 2}
