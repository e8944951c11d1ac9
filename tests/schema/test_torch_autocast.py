"""torch_autocast: dtype spellings from DeepSpeed's DtypeEnum, module-name checks, strict keys."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dsx.schema.docs import field_docstring
from dsx.schema.torch_autocast import _NOT_AUTOCAST_DTYPES, AUTOCAST_DTYPES, TorchAutocastConfig
from tests.deepspeed_parser import deepspeed_check_many, require


@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES)
def test_bf16_and_fp16_spellings_are_accepted(dtype):
    assert TorchAutocastConfig(enabled=True, dtype=dtype).dtype == dtype


@pytest.mark.deepspeed
def test_dtype_spellings_are_deepspeeds_dtype_enum():
    import torch
    from deepspeed.runtime.config import DtypeEnum

    assert {DtypeEnum(s).value for s in AUTOCAST_DTYPES} == {torch.bfloat16, torch.float16}
    every_spelling = {v for member in DtypeEnum for v in member._all_values if isinstance(v, str)}
    assert set(AUTOCAST_DTYPES) | set(_NOT_AUTOCAST_DTYPES) == every_spelling


@pytest.mark.parametrize("dtype", ["fp32", "float", "torch.int8"])
def test_non_autocast_dtypes_are_rejected_with_the_reason(dtype):
    with pytest.raises(ValidationError, match=rf"torch_autocast.dtype '{dtype}' is accepted by DeepSpeed but is no "
                                              r"lower-precision autocast dtype"):
        TorchAutocastConfig(enabled=True, dtype=dtype)


@pytest.mark.parametrize("dtype", ["bfloat", "BF16", "torch.half", 16])
def test_unknown_dtypes_are_rejected(dtype):
    with pytest.raises(ValidationError, match="Input should be 'torch.bfloat16', 'bf16'"):
        TorchAutocastConfig(dtype=dtype)


def test_dtype_default_is_unset():
    assert TorchAutocastConfig().dtype is None
    assert "float16 on CUDA" in field_docstring(TorchAutocastConfig, "dtype")


def test_lower_precision_safe_modules_are_qualified_class_names():
    config = TorchAutocastConfig(lower_precision_safe_modules=["torch.nn.Linear", "transformers.pytorch_utils.Conv1D"])
    assert config.lower_precision_safe_modules == ["torch.nn.Linear", "transformers.pytorch_utils.Conv1D"]


@pytest.mark.parametrize("name", ["Linear", ".Linear", "torch.nn."])
def test_unqualified_module_names_are_rejected(name):
    with pytest.raises(ValidationError, match=rf"'{name}' is not a fully qualified class name such as"):
        TorchAutocastConfig(lower_precision_safe_modules=[name])


def test_non_string_module_names_are_rejected():
    with pytest.raises(ValidationError, match="Input should be a valid string"):
        TorchAutocastConfig(lower_precision_safe_modules=[1])


@pytest.mark.parametrize("key", ["enable", "dtyp"])
def test_misspelled_key_is_rejected(key):
    with pytest.raises(ValidationError, match=rf"{key}\n  Extra inputs are not permitted"):
        TorchAutocastConfig.model_validate({key: True})


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match=r"enabled\n  Input should be a valid boolean"):
        TorchAutocastConfig.model_validate({"enabled": "false"})


@pytest.mark.deepspeed
def test_enabled_default_is_deepspeeds():
    from deepspeed.runtime.constants import TORCH_AUTOCAST_ENABLED_DEFAULT

    assert TorchAutocastConfig.model_fields["enabled"].default is TORCH_AUTOCAST_ENABLED_DEFAULT


@pytest.mark.deepspeed
@pytest.mark.parametrize("version", ["0.19.8", "0.18.9"])
def test_deepspeed_parses_a_full_block(request, version):
    if version == "0.18.9":
        request.getfixturevalue("legacy_deepspeed")
    require(version)
    block = TorchAutocastConfig(enabled=True, dtype="bfloat16", lower_precision_safe_modules=["torch.nn.Linear"])
    [(accepted, detail)] = deepspeed_check_many(
        [{"train_batch_size": 1, "torch_autocast": block.model_dump(exclude_defaults=True)}], version
    )
    assert accepted, detail


def test_every_field_has_a_docstring():
    assert [n for n in TorchAutocastConfig.model_fields if not field_docstring(TorchAutocastConfig, n)] == []
