"""checkpoint: defaults pinned to DeepSpeed's constants, its case-insensitive enums, strict types."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dsx.schema.checkpoint import CheckpointConfig, CheckpointParallelWriteConfig, CheckpointWriterConfig


def _defaults(model):
    return {name: info.default for name, info in model.model_fields.items()}


@pytest.mark.deepspeed
def test_top_level_defaults_match_deepspeed_constants():
    from deepspeed.runtime import constants as c
    from deepspeed.runtime.model_checkpointing import constants as mc

    theirs = {
        c.CHECKPOINT_TAG_VALIDATION: c.CHECKPOINT_TAG_VALIDATION_DEFAULT,
        c.LOAD_UNIVERSAL_CHECKPOINT: c.LOAD_UNIVERSAL_CHECKPOINT_DEFAULT,
        c.USE_NODE_LOCAL_STORAGE_CHECKPOINT: c.USE_NODE_LOCAL_STORAGE_CHECKPOINT_DEFAULT,
        mc.CHECKPOINT_SERIALIZATION: mc.CHECKPOINT_SERIALIZATION_DEFAULT,
        c.CHECKPOINT_PARALLEL_WRITE: None,  # an optional sub-section: absent
        mc.CHECKPOINT_WRITER: mc.CHECKPOINT_WRITER_DEFAULT,
    }
    assert _defaults(CheckpointConfig) == theirs


@pytest.mark.deepspeed
def test_parallel_write_defaults_match_deepspeed_constants():
    from deepspeed.runtime import constants as c

    theirs = {c.CHECKPOINT_PARALLEL_WRITE_PIPELINE_STAGE: c.CHECKPOINT_PARALLEL_WRITE_PIPELINE_STAGE_DEFAULT}
    assert _defaults(CheckpointParallelWriteConfig) == theirs


@pytest.mark.deepspeed
def test_writer_keys_and_defaults_match_deepspeeds_reader():
    from deepspeed.runtime.model_checkpointing.config import get_checkpoint_writer_config

    assert _defaults(CheckpointWriterConfig) == get_checkpoint_writer_config({"writer": {}})


@pytest.mark.deepspeed
def test_enum_values_match_deepspeed_constants():
    from deepspeed.runtime.model_checkpointing import constants as mc

    def literal(model, name):
        return set(model.model_fields[name].annotation.__args__)

    assert literal(CheckpointConfig, "tag_validation") == set(mc.CHECKPOINT_TAG_VALIDATION_MODES)
    assert literal(CheckpointWriterConfig, "type") == set(mc.CHECKPOINT_WRITER_TYPES)
    assert CheckpointWriterConfig(data_parallel="socket").data_parallel in mc.CHECKPOINT_DATA_PARALLEL_UNITS


@pytest.mark.deepspeed
def test_emitted_values_are_what_deepspeed_reads():
    from deepspeed.runtime.model_checkpointing.config import get_checkpoint_config

    cfg = CheckpointConfig.model_validate(
        {"tag_validation": "Fail", "checkpoint_serialization": False,
         "writer": {"type": "python", "data_parallel": "replica", "io_buffer_size": 1e6}}
    )
    parsed = get_checkpoint_config({"checkpoint": cfg.model_dump(exclude_defaults=True)})
    assert parsed["tag_validation"] == cfg.tag_validation == "FAIL"
    assert parsed["checkpoint_serialization"] is False
    assert parsed["writer"] == cfg.writer.model_dump()


def test_defaults_emit_nothing():
    assert CheckpointConfig().model_dump(exclude_defaults=True) == {}


def test_tag_validation_is_case_insensitive():
    assert CheckpointConfig(tag_validation="Ignore").tag_validation == "IGNORE"
    assert CheckpointConfig(tag_validation="warn").model_dump(exclude_defaults=True) == {}


def test_unknown_tag_validation_is_rejected():
    with pytest.raises(ValidationError, match="tag_validation\n  Input should be 'IGNORE', 'WARN' or 'FAIL'"):
        CheckpointConfig.model_validate({"tag_validation": "Strict"})


def test_unknown_writer_type_is_rejected():
    with pytest.raises(ValidationError, match="writer.type\n  Input should be 'MOCK', 'PYTHON' or 'FAST'"):
        CheckpointConfig.model_validate({"writer": {"type": "async"}})


def test_misspelled_key_is_rejected():
    with pytest.raises(ValidationError, match="tag_validate\n  Extra inputs are not permitted"):
        CheckpointConfig.model_validate({"tag_validate": "Fail"})


def test_misspelled_writer_key_is_rejected():
    with pytest.raises(ValidationError, match="writer.io_buffer\n  Extra inputs are not permitted"):
        CheckpointConfig.model_validate({"writer": {"io_buffer": 1024}})


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match="load_universal\n  Input should be a valid boolean"):
        CheckpointConfig.model_validate({"load_universal": "false"})


def test_pipeline_stage_must_be_a_bool():
    with pytest.raises(ValidationError, match="parallel_write.pipeline_stage\n  Input should be a valid boolean"):
        CheckpointConfig.model_validate({"parallel_write": {"pipeline_stage": "yes"}})


def test_io_buffer_size_must_be_positive():
    with pytest.raises(ValidationError, match="io_buffer_size\n  Input should be greater than 0"):
        CheckpointWriterConfig(io_buffer_size=0)
