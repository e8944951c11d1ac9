"""bf16: field parity with DeepSpeed's DeepSpeedBF16Config, the 0.19 check_grad_overflow default change, and the
bf16_optimizer_states rule."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from dsx.schema.bf16 import BF16Config
from dsx.schema.docs import field_docstring
from tests.deepspeed_parser import deepspeed_check_many, deepspeed_probe_many, require

# Default changed false (0.18.9) -> true (0.19.8): dsx uses None and always writes it.
VERSION_DEPENDENT_DEFAULTS = {"check_grad_overflow"}


def _fields(model, skip=()):
    return {name: (info.alias, info.default) for name, info in model.model_fields.items() if name not in skip}


@pytest.mark.deepspeed
def test_field_names_aliases_and_defaults_match_deepspeed():
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config

    assert set(BF16Config.model_fields) == set(DeepSpeedBF16Config.model_fields)
    assert _fields(BF16Config, VERSION_DEPENDENT_DEFAULTS) == _fields(DeepSpeedBF16Config, VERSION_DEPENDENT_DEFAULTS)


@pytest.mark.slow
@pytest.mark.deepspeed
def test_check_grad_overflow_default_changed_between_0_18_9_and_0_19_8(legacy_deepspeed):
    require("0.18.9")
    require("0.19.8")
    config = {"train_batch_size": 1, "bf16": {"enabled": True}}
    old = deepspeed_probe_many([config], "0.18.9")[0]["probe"]["bf16_check_grad_overflow"]
    new = deepspeed_probe_many([config], "0.19.8")[0]["probe"]["bf16_check_grad_overflow"]
    assert (old, new) == (False, True)
    assert BF16Config.model_fields["check_grad_overflow"].default is None
    assert "dsx always writes it explicitly" in " ".join(field_docstring(BF16Config, "check_grad_overflow").split())


def test_explicit_check_grad_overflow_is_emitted_even_when_false():
    assert BF16Config(enabled=True, check_grad_overflow=False).model_dump(exclude_defaults=True) == {
        "enabled": True,
        "check_grad_overflow": False,
    }


@pytest.mark.deepspeed
def test_deepspeed_parses_a_non_default_dump_to_the_same_values():
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config

    ours = BF16Config(enabled=True, immediate_grad_update=True, check_grad_overflow=False,
                      bf16_master_weights_and_grads=True, bf16_optimizer_states=True)
    dumped = json.loads(json.dumps(ours.model_dump(exclude_defaults=True)))
    assert set(dumped) == set(BF16Config.model_fields)
    assert DeepSpeedBF16Config(**dumped).model_dump() == dumped


def test_optimizer_states_need_master_weights_and_grads():
    with pytest.raises(
        ValidationError, match="bf16.bf16_optimizer_states requires bf16.bf16_master_weights_and_grads: true"
    ):
        BF16Config(enabled=True, bf16_optimizer_states=True)


@pytest.mark.deepspeed
def test_deepspeed_asserts_the_same_rule():
    require("0.19.8")
    config = {"train_batch_size": 1, "zero_optimization": {"stage": 2},
              "bf16": {"enabled": True, "bf16_optimizer_states": True}}
    [(accepted, detail)] = deepspeed_check_many([config], "0.19.8")
    assert not accepted
    assert detail == "AssertionError: bf16_optimizer_states requires bf16_master_weights_and_grads to be enabled."


def test_master_weights_alone_are_accepted():
    assert BF16Config(bf16_master_weights_and_grads=True).bf16_optimizer_states is False


@pytest.mark.parametrize("key", ["check_overflow", "immediate_grad_updates", "enabeld"])
def test_misspelled_key_is_rejected(key):
    with pytest.raises(ValidationError, match=rf"{key}\n  Extra inputs are not permitted"):
        BF16Config.model_validate({key: True})


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match=r"enabled\n  Input should be a valid boolean"):
        BF16Config.model_validate({"enabled": "false"})


def test_every_field_has_a_docstring():
    assert [name for name in BF16Config.model_fields if not field_docstring(BF16Config, name)] == []
