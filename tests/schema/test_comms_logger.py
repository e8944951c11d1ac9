"""comms_logger: field parity with DeepSpeed's CommsLoggerConfig and strict types."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dsx.schema.comms_logger import CommsLoggerConfig


def _fields(model):
    """name -> (alias, default, type of default); the type keeps False from comparing equal to 0."""
    out = {}
    for name, info in model.model_fields.items():
        default = info.get_default(call_default_factory=True)
        out[name] = (info.alias, default, type(default).__name__)
    return out


@pytest.mark.deepspeed
def test_field_names_aliases_and_defaults_match_deepspeed():
    from deepspeed.comm.config import CommsLoggerConfig as DeepSpeedCommsLoggerConfig

    assert _fields(CommsLoggerConfig) == _fields(DeepSpeedCommsLoggerConfig)


def test_defaults_emit_nothing():
    assert CommsLoggerConfig().model_dump(exclude_defaults=True) == {}


def test_misspelled_key_is_rejected():
    with pytest.raises(ValidationError, match="verbos\n  Extra inputs are not permitted"):
        CommsLoggerConfig.model_validate({"verbos": True})


def test_true_string_is_rejected_for_a_bool():
    # DeepSpeed's lax pydantic model would take "true" (and "false") strings.
    with pytest.raises(ValidationError, match="enabled\n  Input should be a valid boolean"):
        CommsLoggerConfig.model_validate({"enabled": "true"})


def test_auto_is_rejected():
    # DeepSpeed drops "auto" values before validation, so the logger would silently stay off.
    with pytest.raises(ValidationError, match="enabled\n  Input should be a valid boolean"):
        CommsLoggerConfig.model_validate({"enabled": "auto"})


def test_prof_ops_are_names():
    cfg = CommsLoggerConfig(prof_all=False, prof_ops=["all_reduce", "all_gather"])
    assert cfg.model_dump(exclude_defaults=True) == {"prof_all": False, "prof_ops": ["all_reduce", "all_gather"]}
    with pytest.raises(ValidationError, match="prof_ops.0\n  Input should be a valid string"):
        CommsLoggerConfig.model_validate({"prof_ops": [1]})
