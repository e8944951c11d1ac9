"""data_types: defaults pinned to DeepSpeed's constants, dtype spellings pinned to DtypeEnum, the 0.19 additions."""

from __future__ import annotations

import typing

import pytest
from pydantic import ValidationError

from dsx.schema.data_types import DataTypesConfig, DtypeName

ADDED_IN_0_19 = {"param_dtype", "buffer_dtype", "keep_in_fp32_modules"}


@pytest.mark.deepspeed
def test_keys_and_defaults_match_deepspeed_constants():
    from deepspeed.runtime import constants as c

    theirs = {
        c.GRAD_ACCUM_DTYPE: c.GRAD_ACCUM_DTYPE_DEFAULT,
        c.PARAM_DTYPE: c.PARAM_DTYPE_DEFAULT,
        c.BUFFER_DTYPE: c.BUFFER_DTYPE_DEFAULT,
        c.KEEP_IN_FP32_MODULES: c.KEEP_IN_FP32_MODULES_DEFAULT,
    }
    assert {name: info.default for name, info in DataTypesConfig.model_fields.items()} == theirs


@pytest.mark.deepspeed
def test_dtype_names_are_dtypeenums_floating_point_spellings():
    import torch
    from deepspeed.runtime.config import DtypeEnum

    floating = {
        name for name, member in DtypeEnum._value2member_map_.items()
        if isinstance(name, str) and member.value in (torch.float16, torch.bfloat16, torch.float32)
    }
    assert set(typing.get_args(DtypeName)) == floating


def test_keys_new_in_0_19_are_gated():
    gated = {
        name for name, info in DataTypesConfig.model_fields.items()
        if (info.json_schema_extra or {}).get("dsx_added_in") == "0.19.0"
    }
    assert gated == ADDED_IN_0_19


def test_defaults_emit_nothing():
    assert DataTypesConfig().model_dump(exclude_defaults=True) == {}


def test_misspelled_key_is_rejected():
    with pytest.raises(ValidationError, match="grad_accum_type\n  Extra inputs are not permitted"):
        DataTypesConfig.model_validate({"grad_accum_type": "fp32"})


def test_fp64_is_rejected():
    # DeepSpeed accepts it when parsing and fails in deepspeed.initialize.
    with pytest.raises(ValidationError, match="grad_accum_dtype\n  Input should be 'fp16'"):
        DataTypesConfig.model_validate({"grad_accum_dtype": "fp64"})


def test_int8_is_rejected():
    with pytest.raises(ValidationError, match="buffer_dtype\n  Input should be 'fp16'"):
        DataTypesConfig.model_validate({"buffer_dtype": "int8"})


def test_dtype_aliases_are_accepted():
    cfg = DataTypesConfig(grad_accum_dtype="float32", param_dtype="bfloat16")
    assert cfg.model_dump(exclude_defaults=True) == {"grad_accum_dtype": "float32", "param_dtype": "bfloat16"}


def test_keep_in_fp32_modules_takes_auto_or_patterns():
    assert DataTypesConfig(keep_in_fp32_modules=["e_score_correction_bias"]).keep_in_fp32_modules == [
        "e_score_correction_bias"
    ]
    assert DataTypesConfig(keep_in_fp32_modules=[]).model_dump(exclude_defaults=True) == {"keep_in_fp32_modules": []}


def test_keep_in_fp32_modules_rejects_other_values():
    # DeepSpeed raises DeepSpeedConfigError for anything but "auto" or a list of strings.
    with pytest.raises(ValidationError, match="keep_in_fp32_modules"):
        DataTypesConfig.model_validate({"keep_in_fp32_modules": "none"})


def test_bool_for_a_dtype_is_rejected():
    with pytest.raises(ValidationError, match="param_dtype\n  Input should be 'fp16'"):
        DataTypesConfig.model_validate({"param_dtype": False})
