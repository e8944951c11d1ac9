"""flops_profiler: defaults pinned to DeepSpeed's constants and strict types."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dsx.schema.flops_profiler import FlopsProfilerConfig


@pytest.mark.deepspeed
def test_keys_and_defaults_match_deepspeed_constants():
    from deepspeed.profiling import constants as c

    theirs = {
        c.FLOPS_PROFILER_ENABLED: c.FLOPS_PROFILER_ENABLED_DEFAULT,
        c.FLOPS_PROFILER_RECOMPUTE_FWD_FACTOR: c.FLOPS_PROFILER_RECOMPUTE_FWD_FACTOR_DEFAULT,
        c.FLOPS_PROFILER_PROFILE_STEP: c.FLOPS_PROFILER_PROFILE_STEP_DEFAULT,
        c.FLOPS_PROFILER_MODULE_DEPTH: c.FLOPS_PROFILER_MODULE_DEPTH_DEFAULT,
        c.FLOPS_PROFILER_TOP_MODULES: c.FLOPS_PROFILER_TOP_MODULES_DEFAULT,
        c.FLOPS_PROFILER_DETAILED: c.FLOPS_PROFILER_DETAILED_DEFAULT,
        c.FLOPS_PROFILER_OUTPUT_FILE: c.FLOPS_PROFILER_OUTPUT_FILE_DEFAULT,
    }
    ours = {name: info.default for name, info in FlopsProfilerConfig.model_fields.items()}
    assert ours == theirs
    assert {k: type(v) for k, v in ours.items()} == {k: type(v) for k, v in theirs.items()}


@pytest.mark.deepspeed
def test_keys_are_the_ones_deepspeeds_reader_sets():
    from deepspeed.profiling.config import DeepSpeedFlopsProfilerConfig

    assert set(FlopsProfilerConfig.model_fields) == set(vars(DeepSpeedFlopsProfilerConfig({})))


def test_defaults_emit_nothing():
    assert FlopsProfilerConfig().model_dump(exclude_defaults=True) == {}


def test_misspelled_enable_is_rejected():
    # DeepSpeed silently ignores `enable`, leaving the profiler off.
    with pytest.raises(ValidationError, match="enable\n  Extra inputs are not permitted"):
        FlopsProfilerConfig.model_validate({"enable": True})


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match="detailed\n  Input should be a valid boolean"):
        FlopsProfilerConfig.model_validate({"detailed": "false"})


def test_string_step_is_rejected():
    with pytest.raises(ValidationError, match="profile_step\n  Input should be a valid integer"):
        FlopsProfilerConfig.model_validate({"profile_step": "10"})


def test_integer_recompute_factor_is_accepted():
    assert FlopsProfilerConfig(recompute_fwd_factor=1).recompute_fwd_factor == 1.0
