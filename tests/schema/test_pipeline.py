"""pipeline: defaults pinned to DeepSpeed's get_pipeline_config, strict types, the "auto" stage count."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dsx.schema.pipeline import PipelineConfig


@pytest.mark.deepspeed
def test_defaults_match_deepspeeds_merged_defaults():
    from deepspeed.runtime.config import get_pipeline_config

    theirs = get_pipeline_config({})
    ours = {name: info.default for name, info in PipelineConfig.model_fields.items() if name != "use_reentrant"}
    assert ours == theirs
    assert {k: type(v) for k, v in ours.items()} == {k: type(v) for k, v in theirs.items()}


@pytest.mark.deepspeed
def test_use_reentrant_is_not_in_deepspeeds_defaults_and_absent_means_true():
    # The pipeline engine sets use_reentrant to True when it is absent (deepspeed/runtime/pipe/engine.py).
    from deepspeed.runtime.config import get_pipeline_config

    assert "use_reentrant" not in get_pipeline_config({})
    assert PipelineConfig.model_fields["use_reentrant"].default is True


def test_defaults_emit_nothing():
    assert PipelineConfig().model_dump(exclude_defaults=True) == {}


def test_stages_accepts_auto_or_an_int():
    assert PipelineConfig(stages="auto").stages == "auto"
    assert PipelineConfig(stages=4).stages == 4


def test_stages_rejects_other_strings():
    with pytest.raises(ValidationError, match="stages"):
        PipelineConfig.model_validate({"stages": "4"})


def test_misspelled_key_is_rejected():
    # DeepSpeed keeps the misspelled key in its dict and never reads it.
    with pytest.raises(ValidationError, match="activation_checkpoint_intervall\n  Extra inputs are not permitted"):
        PipelineConfig.model_validate({"activation_checkpoint_intervall": 1})


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match="pipe_partitioned\n  Input should be a valid boolean"):
        PipelineConfig.model_validate({"pipe_partitioned": "false"})


def test_zero_one_is_rejected_for_partitioned_flags():
    # deepspeed.initialize asserts isinstance(..., bool) for pipe_partitioned and grad_partitioned.
    with pytest.raises(ValidationError, match="grad_partitioned\n  Input should be a valid boolean"):
        PipelineConfig.model_validate({"grad_partitioned": 0})


def test_non_default_values_are_emitted():
    cfg = PipelineConfig(activation_checkpoint_interval=2, use_reentrant=False)
    assert cfg.model_dump(exclude_defaults=True) == {"activation_checkpoint_interval": 2, "use_reentrant": False}
