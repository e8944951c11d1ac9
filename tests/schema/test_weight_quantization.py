"""weight_quantization: field parity with DeepSpeed 0.19.8's WeightQuantConfig."""

from __future__ import annotations

import typing

import pytest
from pydantic import ValidationError

from dsx.schema.weight_quantization import WeightQuantizationConfig

NON_DEFAULT = {
    "enabled": False, "num_bits": 4, "q_type": "asymmetric", "q_groups": 8,
    "quantized_initialization": {"num_bits": 8, "group_size": 64, "group_dim": 1, "symmetric": False},
    "post_init_quant": {"fc": {"num_bits": 4, "group_size": 32, "group_dim": 1, "symmetric": False}},
}


@pytest.fixture(scope="module")
def ds_model():
    return pytest.importorskip("deepspeed.inference.config").WeightQuantConfig


def _plain(value):
    return getattr(value, "value", value)  # QuantTypeEnum.sym -> "symmetric"


@pytest.mark.deepspeed
def test_field_names_aliases_and_defaults_match_deepspeed(ds_model):
    theirs = {n: (f.alias, _plain(f.get_default())) for n, f in ds_model.model_fields.items()}
    assert {n: (f.alias, f.get_default()) for n, f in WeightQuantizationConfig.model_fields.items()} == theirs


@pytest.mark.deepspeed
def test_q_type_choices_match_deepspeed(ds_model):
    theirs = {member.value for member in ds_model.model_fields["q_type"].annotation}
    assert set(typing.get_args(WeightQuantizationConfig.model_fields["q_type"].annotation)) == theirs


@pytest.mark.deepspeed
def test_every_field_is_read_by_deepspeed(ds_model):
    parsed = ds_model(**WeightQuantizationConfig(**NON_DEFAULT).model_dump(exclude_defaults=True)).model_dump()
    assert {k: _plain(v) for k, v in parsed.items()} == NON_DEFAULT


def test_empty_block_emits_nothing():
    assert WeightQuantizationConfig().model_dump(exclude_defaults=True) == {}


def test_unknown_q_type_is_rejected():
    with pytest.raises(ValidationError, match="q_type\n  Input should be 'symmetric' or 'asymmetric'"):
        WeightQuantizationConfig(q_type="sym")


def test_misspelled_key_is_rejected():
    with pytest.raises(ValidationError, match="num_bit\n  Extra inputs are not permitted"):
        WeightQuantizationConfig(num_bit=4)


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match="enabled\n  Input should be a valid boolean"):
        WeightQuantizationConfig(enabled="false")
