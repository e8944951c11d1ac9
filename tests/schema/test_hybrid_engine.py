"""hybrid_engine: field parity with DeepSpeed 0.19.8's HybridEngineConfig."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dsx.schema.hybrid_engine import HybridEngineConfig

NON_DEFAULT = {
    "enabled": True, "max_out_tokens": 1024, "inference_tp_size": 2, "release_inference_cache": True,
    "pin_parameters": False, "tp_gather_partition_size": 4, "enable_cuda_graph": True,
}


@pytest.fixture(scope="module")
def ds_model():
    return pytest.importorskip("deepspeed.runtime.config").HybridEngineConfig


@pytest.mark.deepspeed
def test_field_names_aliases_and_defaults_match_deepspeed(ds_model):
    theirs = {n: (f.alias, f.get_default()) for n, f in ds_model.model_fields.items()}
    assert {n: (f.alias, f.get_default()) for n, f in HybridEngineConfig.model_fields.items()} == theirs


@pytest.mark.deepspeed
def test_max_out_tokens_bound_matches_deepspeed(ds_model):
    theirs = [m for m in ds_model.model_fields["max_out_tokens"].metadata if hasattr(m, "gt")]
    assert theirs == [m for m in HybridEngineConfig.model_fields["max_out_tokens"].metadata if hasattr(m, "gt")]


@pytest.mark.deepspeed
def test_every_field_is_read_by_deepspeed(ds_model):
    assert ds_model(**HybridEngineConfig(**NON_DEFAULT).model_dump(exclude_defaults=True)).model_dump() == NON_DEFAULT


def test_non_default_values_are_all_emitted():
    assert HybridEngineConfig(**NON_DEFAULT).model_dump(exclude_defaults=True) == NON_DEFAULT


def test_enable_cuda_graph_is_gated_to_0_19():
    assert HybridEngineConfig.model_fields["enable_cuda_graph"].json_schema_extra == {"dsx_added_in": "0.19.0"}


def test_max_out_tokens_must_be_positive():
    with pytest.raises(ValidationError, match="max_out_tokens\n  Input should be greater than 0"):
        HybridEngineConfig(max_out_tokens=0)


def test_misspelled_key_is_rejected():
    with pytest.raises(ValidationError, match="max_out_token\n  Extra inputs are not permitted"):
        HybridEngineConfig(max_out_token=256)


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match="enabled\n  Input should be a valid boolean"):
        HybridEngineConfig(enabled="false")
