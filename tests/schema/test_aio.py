"""aio: keys and defaults pinned to DeepSpeed's swap_tensor constants; strict where DeepSpeed ignores."""

from __future__ import annotations

import pytest

from dsx.schema.docs import field_docstring
from pydantic import ValidationError

from dsx.schema.aio import AioConfig


@pytest.mark.deepspeed
def test_keys_and_defaults_match_deepspeed_constants():
    from deepspeed.runtime.swap_tensor.aio_config import AIO_DEFAULT_DICT

    assert AioConfig().model_dump() == AIO_DEFAULT_DICT
    assert {name: type(value) for name, value in AioConfig().model_dump().items()} == {
        name: type(value) for name, value in AIO_DEFAULT_DICT.items()
    }


@pytest.mark.deepspeed
def test_deepspeed_reads_a_non_default_dump_to_the_same_values():
    from deepspeed.runtime.swap_tensor.aio_config import get_aio_config

    ours = AioConfig(block_size=262144, queue_depth=32, intra_op_parallelism=4, single_submit=True,
                     overlap_events=False)
    assert get_aio_config({"aio": ours.model_dump(exclude_defaults=True)}) == ours.model_dump()


@pytest.mark.deepspeed
def test_deepspeed_ignores_thread_count_so_dsx_rejects_it():
    from deepspeed.runtime.swap_tensor.aio_config import AIO_DEFAULT_DICT, get_aio_config

    assert get_aio_config({"aio": {"thread_count": 8}}) == AIO_DEFAULT_DICT
    with pytest.raises(ValidationError, match="thread_count\n  Extra inputs are not permitted"):
        AioConfig.model_validate({"thread_count": 8})




def test_empty_block_is_all_defaults():
    assert AioConfig().model_dump(exclude_defaults=True) == {}


def test_misspelled_key_is_rejected():
    with pytest.raises(ValidationError, match="queue_dept\n  Extra inputs are not permitted"):
        AioConfig.model_validate({"queue_dept": 16})


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match="single_submit\n  Input should be a valid boolean"):
        AioConfig.model_validate({"single_submit": "false"})


def test_integral_float_block_size_is_accepted_as_int():
    assert AioConfig.model_validate({"block_size": 1.048576e6}).model_dump(exclude_defaults=True) == {}


def test_string_number_is_rejected():
    with pytest.raises(ValidationError, match="queue_depth\n  Input should be a valid integer"):
        AioConfig.model_validate({"queue_depth": "8"})


@pytest.mark.parametrize("key", ["block_size", "queue_depth"])
def test_sizes_must_be_positive(key):
    with pytest.raises(ValidationError, match=f"{key}\n  Input should be greater than 0"):
        AioConfig.model_validate({key: 0})


def test_intra_op_parallelism_must_be_at_least_1():
    with pytest.raises(ValidationError, match="intra_op_parallelism\n  Input should be greater than or equal to 1"):
        AioConfig.model_validate({"intra_op_parallelism": 0})


def test_intra_op_parallelism_docstring_names_the_docs_spelling():
    assert "thread_count" in field_docstring(AioConfig, "intra_op_parallelism")
