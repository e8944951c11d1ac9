"""timers: timers.throughput field parity with DeepSpeed's DeepSpeedThroughputTimerConfig and strict types."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dsx.schema.timers import ThroughputTimerConfig, TimersConfig


def _fields(model):
    """name -> (alias, default, type of default); the type keeps False from comparing equal to 0."""
    out = {}
    for name, info in model.model_fields.items():
        default = info.get_default(call_default_factory=True)
        out[name] = (info.alias, default, type(default).__name__)
    return out


@pytest.mark.deepspeed
def test_throughput_field_names_aliases_and_defaults_match_deepspeed():
    from deepspeed.utils.config import DeepSpeedThroughputTimerConfig

    assert _fields(ThroughputTimerConfig) == _fields(DeepSpeedThroughputTimerConfig)


@pytest.mark.deepspeed
def test_throughput_is_the_only_key_deepspeed_reads():
    from deepspeed.utils.config import TIMERS_THROUGHPUT

    assert set(TimersConfig.model_fields) == {TIMERS_THROUGHPUT}


def test_defaults_emit_nothing():
    assert TimersConfig().model_dump(exclude_defaults=True) == {}
    assert ThroughputTimerConfig().model_dump(exclude_defaults=True) == {}


def test_sibling_of_throughput_is_rejected():
    # DeepSpeed silently ignores anything next to `throughput`.
    with pytest.raises(ValidationError, match="throughput_\n  Extra inputs are not permitted"):
        TimersConfig.model_validate({"throughput_": {"enabled": False}})


def test_misspelled_throughput_key_is_rejected():
    with pytest.raises(ValidationError, match="throughput.sync\n  Extra inputs are not permitted"):
        TimersConfig.model_validate({"throughput": {"sync": False}})


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match="throughput.synchronized\n  Input should be a valid boolean"):
        TimersConfig.model_validate({"throughput": {"synchronized": "false"}})


def test_disabling_is_emitted():
    cfg = TimersConfig.model_validate({"throughput": {"enabled": False}})
    assert cfg.model_dump(exclude_defaults=True) == {"throughput": {"enabled": False}}
