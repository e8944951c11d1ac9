"""compile: field parity with DeepSpeed's CompileConfig, the 0.19 additions, and the engine.compile() conflicts."""

from __future__ import annotations

import typing

import pytest
from pydantic import ValidationError

from dsx.schema.compile import PASS_ADDED_IN, CompileConfig, PassName
from tests.deepspeed_parser import deepspeed_check_many, require

ADDED_IN_0_19 = {"autoep_non_moe", "offload_activation_pin_memory"}


def _fields(model, skip=()):
    """name -> (alias, default, type of default); the type keeps False from comparing equal to 0."""
    out = {}
    for name, info in model.model_fields.items():
        if name not in skip:
            default = info.get_default(call_default_factory=True)
            out[name] = (info.alias, default, type(default).__name__)
    return out


def _gate(name):
    return CompileConfig.model_fields[name].json_schema_extra or {}


@pytest.fixture(scope="module")
def checked_by_0189(legacy_deepspeed):
    """DeepSpeed 0.18.9's verdict on each 0.19 addition: the two new keys and each pass name."""
    require("0.18.9")
    blocks = [{"autoep_non_moe": False}, {"offload_activation_pin_memory": True}]
    blocks += [{"passes": [name]} for name in typing.get_args(PassName)]
    results = deepspeed_check_many([{"train_batch_size": 1, "compile": b} for b in blocks], "0.18.9")
    return dict(zip(["autoep_non_moe", "offload_activation_pin_memory", *typing.get_args(PassName)], results))


# --- parity with DeepSpeed 0.19.8


@pytest.mark.deepspeed
def test_field_names_aliases_and_defaults_match_deepspeed():
    from deepspeed.compile.config import CompileConfig as DeepSpeedCompileConfig

    assert _fields(CompileConfig) == _fields(DeepSpeedCompileConfig)


@pytest.mark.deepspeed
def test_pass_names_match_deepspeed():
    from deepspeed.compile.config import PassName as DeepSpeedPassName

    assert typing.get_args(PassName) == typing.get_args(DeepSpeedPassName)


# --- 0.18.9 differences


def test_keys_new_in_0_19_are_gated():
    assert {name for name in CompileConfig.model_fields if _gate(name).get("dsx_added_in")} == ADDED_IN_0_19
    assert all(_gate(name) == {"dsx_added_in": "0.19.0"} for name in ADDED_IN_0_19)


@pytest.mark.deepspeed
@pytest.mark.parametrize("name", sorted(ADDED_IN_0_19))
def test_gated_keys_are_rejected_by_0189(checked_by_0189, name):
    accepted, detail = checked_by_0189[name]
    # The detail carries the first line only; CompileConfig is extra="forbid" in 0.18.9 too.
    assert (accepted, detail) == (False, "ValidationError: 1 validation error for CompileConfig")


@pytest.mark.deepspeed
@pytest.mark.parametrize("name", typing.get_args(PassName))
def test_pass_added_in_lists_exactly_the_passes_0189_rejects(checked_by_0189, name):
    accepted, detail = checked_by_0189[name]
    expected = (False, "ValidationError: 1 validation error for CompileConfig") if name in PASS_ADDED_IN else (True, "")
    assert (accepted, detail) == expected


# --- keys and types


def test_defaults_emit_nothing():
    assert CompileConfig().model_dump(exclude_defaults=True) == {}


def test_misspelled_key_is_rejected():
    with pytest.raises(ValidationError, match="offload_param\n  Extra inputs are not permitted"):
        CompileConfig.model_validate({"offload_param": True})


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match="deepcompile\n  Input should be a valid boolean"):
        CompileConfig.model_validate({"deepcompile": "false"})


def test_unknown_pass_is_rejected():
    with pytest.raises(ValidationError, match="passes.0\n  Input should be 'z1', 'z3', 'autosp' or 'autotp'"):
        CompileConfig.model_validate({"passes": ["z2"]})


# --- conflicts DeepSpeed raises at engine.compile()


def test_offload_parameters_and_opt_states_together_are_rejected():
    with pytest.raises(ValidationError, match="offload_parameters and offload_opt_states cannot both be true"):
        CompileConfig(deepcompile=True, offload_parameters=True, offload_opt_states=True)


@pytest.mark.parametrize("other", ["offload_parameters", "offload_opt_states"])
def test_offload_activation_with_another_offload_is_rejected(other):
    msg = "offload_activation cannot be combined with offload_parameters or offload_opt_states"
    with pytest.raises(ValidationError, match=msg):
        CompileConfig.model_validate({"deepcompile": True, "offload_activation": True, other: True})


def test_autotp_pass_with_other_passes_is_rejected():
    msg = 'passes: "autotp" cannot yet be combined with "autosp" or the ZeRO passes "z1"/"z3"'
    with pytest.raises(ValidationError, match=msg):
        CompileConfig(deepcompile=True, passes=["autotp", "z3"])


def test_autotp_pass_alone_is_accepted():
    assert CompileConfig(deepcompile=True, passes=["autotp"]).passes == ["autotp"]


def test_autoep_non_moe_with_deepcompile_is_rejected():
    with pytest.raises(ValidationError, match="autoep_non_moe uses plain torch.compile and cannot be combined"):
        CompileConfig(deepcompile=True, autoep_non_moe=True)
