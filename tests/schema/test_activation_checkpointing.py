"""activation_checkpointing: defaults pinned to DeepSpeed's constants, strict types, the configure() assertions."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dsx.schema.activation_checkpointing import ActivationCheckpointingConfig


@pytest.mark.deepspeed
def test_keys_and_defaults_match_deepspeed_constants():
    from deepspeed.runtime.activation_checkpointing.config import ACT_CHKPT_DEFAULT

    ours = {name: info.default for name, info in ActivationCheckpointingConfig.model_fields.items()}
    assert ours == ACT_CHKPT_DEFAULT
    assert {k: type(v) for k, v in ours.items()} == {k: type(v) for k, v in ACT_CHKPT_DEFAULT.items()}


@pytest.mark.deepspeed
def test_keys_are_the_ones_deepspeeds_reader_sets():
    from deepspeed.runtime.activation_checkpointing.config import DeepSpeedActivationCheckpointingConfig

    parsed = DeepSpeedActivationCheckpointingConfig({})
    assert set(ActivationCheckpointingConfig.model_fields) == set(vars(parsed))


def test_defaults_emit_nothing():
    assert ActivationCheckpointingConfig().model_dump(exclude_defaults=True) == {}


def test_format_string_spelling_partitioned_activations_is_rejected():
    # DeepSpeed's own format string says partitioned_activations; DeepSpeed then ignores it.
    with pytest.raises(ValidationError, match="partitioned_activations\n  Extra inputs are not permitted"):
        ActivationCheckpointingConfig.model_validate({"partitioned_activations": True})


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match="cpu_checkpointing\n  Input should be a valid boolean"):
        ActivationCheckpointingConfig.model_validate({"cpu_checkpointing": "false"})


def test_contiguous_memory_needs_partition_activations():
    with pytest.raises(ValidationError, match="contiguous_memory_optimization requires partition_activations: true"):
        ActivationCheckpointingConfig(contiguous_memory_optimization=True, number_checkpoints=24)


def test_contiguous_memory_needs_number_checkpoints():
    with pytest.raises(ValidationError, match="contiguous_memory_optimization requires number_checkpoints"):
        ActivationCheckpointingConfig(contiguous_memory_optimization=True, partition_activations=True)


def test_contiguous_memory_with_partitioning_and_count_is_accepted():
    cfg = ActivationCheckpointingConfig(
        partition_activations=True, contiguous_memory_optimization=True, number_checkpoints=24
    )
    assert cfg.model_dump(exclude_defaults=True) == {
        "partition_activations": True,
        "contiguous_memory_optimization": True,
        "number_checkpoints": 24,
    }


def test_number_checkpoints_must_be_positive():
    with pytest.raises(ValidationError, match="number_checkpoints\n  Input should be greater than or equal to 1"):
        ActivationCheckpointingConfig(number_checkpoints=0)
