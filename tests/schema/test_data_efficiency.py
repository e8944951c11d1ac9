"""data_efficiency: defaults and key names pinned to DeepSpeed 0.19.8's get_data_efficiency_config (a dict reader
that silently ignores unknown keys), the keys it asserts when a feature is enabled, and the two blocks it passes on
unchecked (curriculum_learning, random_ltd), where dsx accepts extra keys too."""

from __future__ import annotations

import copy

import pytest
from pydantic import ValidationError

from dsx.schema.data_efficiency import (
    CurriculumLearningConfig,
    DataEfficiencyConfig,
    DataRoutingConfig,
    DataSamplingConfig,
    DynamicBatchingConfig,
    RandomLTDConfig,
)

METRICS = {
    "seqlen": {"index_to_sample_path": "/d/seqlen_index_to_sample", "index_to_metric_path": "/d/seqlen_metric",
               "difficulty_type": "value", "clustering_type": "single_cluster", "min_difficulty": 8,
               "max_difficulty": 1024, "schedule_type": "fixed_linear",
               "schedule_config": {"total_curriculum_step": 1000, "difficulty_step": 8}},
}
RANDOM_LTD = {
    "enabled": True, "total_layer_num": 24, "random_ltd_layer_num": 22, "random_ltd_layer_id": list(range(1, 23)),
    "model_mask_name": "attention_mask", "model_type": "decoder", "hidden_state_order": "seq_batch_dim",
    "random_ltd_schedule": {"min_value": 128, "max_value": 2048, "schedule_type": "fixed_linear",
                            "schedule_config": {"require_steps": 1000, "seq_per_step": 16}},
    "layer_token_lr_schedule": {"enabled": False},
}
NON_DEFAULT = {
    "enabled": True, "seed": 42,
    "data_sampling": {
        "enabled": True, "num_epochs": 2, "num_workers": 4, "pin_memory": True,
        "curriculum_learning": {"enabled": True, "data_cluster_path": "/d/clusters", "curriculum_metrics": METRICS},
        "dynamic_batching": {"enabled": True, "lr_scaling_method": "sqrt", "min_batch_size": 2, "max_batch_size": 16,
                             "sequence_picking_order": "seqlen", "max_tokens": 8192, "verbose": True,
                             "metrics_path": "/d/metrics"},
    },
    "data_routing": {"enabled": True, "random_ltd": RANDOM_LTD},
}


@pytest.fixture(scope="module")
def ds():
    return (pytest.importorskip("deepspeed.runtime.data_pipeline.config"),
            pytest.importorskip("deepspeed.runtime.data_pipeline.constants"))


def _read(ds, block):
    config_module, _ = ds
    return config_module.get_data_efficiency_config({"data_efficiency": copy.deepcopy(block)})


def _defaults(model):
    return {n: f.get_default() for n, f in model.model_fields.items()}


# --- parity with DeepSpeed 0.19.8


@pytest.mark.deepspeed
def test_defaults_match_deepspeed_constants(ds):
    _, c = ds
    assert _defaults(DataEfficiencyConfig) == {
        "enabled": c.DATA_EFFICIENCY_ENABLED_DEFAULT, "seed": c.DATA_EFFICIENCY_SEED_DEFAULT,
        "data_sampling": None, "data_routing": None}
    sampling = _defaults(DataSamplingConfig)
    assert (sampling["enabled"], sampling["num_epochs"], sampling["num_workers"], sampling["pin_memory"]) == (
        c.DATA_SAMPLING_ENABLED_DEFAULT, c.DATA_SAMPLING_NUM_EPOCHS_DEFAULT, c.DATA_SAMPLING_NUM_WORKERS_DEFAULT,
        c.DATA_SAMPLING_PIN_MEMORY_DEFAULT)
    batching = _defaults(DynamicBatchingConfig)
    assert (batching["enabled"], batching["lr_scaling_method"], batching["min_batch_size"],
            batching["max_batch_size"], batching["sequence_picking_order"]) == (
        c.DYNAMIC_BATCHING_ENABLED_DEFAULT, c.DYNAMIC_BATCHING_LR_SCALING_METHOD_DEFAULT,
        c.DYNAMIC_BATCHING_MIN_BATCH_SIZE_DEFAULT, c.DYNAMIC_BATCHING_MAX_BATCH_SIZE_DEFAULT,
        c.DYNAMIC_BATCHING_SEQUENCE_PICKING_ORDER_DEFAULT)
    assert _defaults(CurriculumLearningConfig)["enabled"] == c.CURRICULUM_LEARNING_ENABLED_DEFAULT
    assert _defaults(DataRoutingConfig)["enabled"] == c.DATA_ROUTING_ENABLED_DEFAULT
    assert _defaults(RandomLTDConfig)["enabled"] == c.RANDOM_LTD_ENABLED_DEFAULT


@pytest.mark.deepspeed
def test_empty_blocks_read_as_dsx_defaults(ds):
    # What DeepSpeed derives from empty blocks equals dsx's defaults, key for key.
    parsed = _read(ds, {"data_sampling": {"curriculum_learning": {}, "dynamic_batching": {}},
                        "data_routing": {"random_ltd": {}}})
    sampling = parsed.pop("data_sampling")
    routing = parsed.pop("data_routing")
    assert parsed == {k: v for k, v in _defaults(DataEfficiencyConfig).items() if k in parsed}
    batching = sampling.pop("dynamic_batching")
    assert batching == {k: v for k, v in _defaults(DynamicBatchingConfig).items() if k in batching}
    assert sampling.pop("curriculum_learning") == {"enabled": False}
    assert sampling == {k: v for k, v in _defaults(DataSamplingConfig).items() if k in sampling}
    no_ltd = {"enabled": False, "layer_token_lr_schedule": {"enabled": False}}
    assert routing == {"enabled": False, "random_ltd": no_ltd}


@pytest.mark.deepspeed
def test_every_field_is_read_by_deepspeed(ds):
    dumped = DataEfficiencyConfig(**NON_DEFAULT).model_dump(exclude_defaults=True)
    assert dumped == NON_DEFAULT
    assert _read(ds, dumped) == NON_DEFAULT


@pytest.mark.deepspeed
def test_deepspeed_ignores_misspelled_keys(ds):
    # Why dsx rejects typos: DeepSpeed's reader drops them silently.
    assert _read(ds, {"data_samplng": {"enabled": True}})["data_sampling"]["enabled"] is False


# --- required keys when a feature is enabled (DeepSpeedConfig asserts them)


def test_curriculum_needs_metrics():
    msg = "curriculum_learning is enabled, so curriculum_metrics must be specified"
    with pytest.raises(ValidationError, match=msg):
        DataEfficiencyConfig(data_sampling={"curriculum_learning": {"enabled": True}})


def test_dynamic_batching_needs_max_tokens():
    msg = "dynamic_batching is enabled, so max_tokens must be specified"
    with pytest.raises(ValidationError, match=msg):
        DataEfficiencyConfig(data_sampling={"dynamic_batching": {"enabled": True}})


@pytest.mark.deepspeed
@pytest.mark.parametrize("sampling", [{"curriculum_learning": {"enabled": True}},
                                      {"dynamic_batching": {"enabled": True}}])
def test_deepspeed_asserts_the_same_keys(ds, sampling):
    with pytest.raises(AssertionError, match="must be specified"):
        _read(ds, {"data_sampling": sampling})


def test_random_ltd_needs_its_schedule_keys():
    msg = ("random_ltd is enabled, so total_layer_num, random_ltd_layer_num, random_ltd_layer_id, random_ltd_schedule "
           "must be specified")
    with pytest.raises(ValidationError, match=msg):
        DataEfficiencyConfig(data_routing={"random_ltd": {"enabled": True}})


def test_random_ltd_layer_token_lr_schedule_is_rejected():
    block = dict(RANDOM_LTD, layer_token_lr_schedule={"enabled": True})
    with pytest.raises(ValidationError, match="layer_token_lr_schedule.enabled is not implemented"):
        RandomLTDConfig(**block)


def test_disabled_features_need_nothing():
    given = {"data_sampling": {"curriculum_learning": {"enabled": False}, "dynamic_batching": {"enabled": False}},
             "data_routing": {"random_ltd": {"enabled": False}}}
    assert DataEfficiencyConfig(**given).model_dump(exclude_unset=True) == given


# --- keys and types


def test_misspelled_key_is_rejected():
    with pytest.raises(ValidationError, match="data_samplng\n  Extra inputs are not permitted"):
        DataEfficiencyConfig(data_samplng={})


def test_misspelled_dynamic_batching_key_is_rejected():
    with pytest.raises(ValidationError, match="max_token\n  Extra inputs are not permitted"):
        DynamicBatchingConfig(max_token=4096)


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match="enabled\n  Input should be a valid boolean"):
        DataSamplingConfig(enabled="false")


def test_curriculum_and_random_ltd_keep_extra_keys():
    # DeepSpeed hands these two blocks on unchecked; their consumers read keys its parser never names.
    assert CurriculumLearningConfig(my_key=1).model_dump(exclude_defaults=True) == {"my_key": 1}
    assert RandomLTDConfig(my_key=1).model_dump(exclude_defaults=True) == {"my_key": 1}


def test_unknown_lr_scaling_method_is_rejected():
    with pytest.raises(ValidationError, match="lr_scaling_method\n  Input should be 'linear', 'sqrt' or 'none'"):
        DynamicBatchingConfig(lr_scaling_method="log")


def test_zero_epochs_is_rejected():
    with pytest.raises(ValidationError, match="num_epochs\n  Input should be greater than or equal to 1"):
        DataSamplingConfig(num_epochs=0)
