"""tensor_parallel: field parity with DeepSpeed 0.19.8's TPTrainingConfig / TPConfig, and the AutoTP value checks
DeepSpeed only makes inside deepspeed.initialize()."""

from __future__ import annotations

import typing

import pytest
from pydantic import ValidationError

from dsx.schema.tensor_parallel import TP_PRESET_MODELS, TensorParallelConfig, TPConfig
from tests.deepspeed_parser import require

# DeepSpeed fields with no JSON form: a torch.dtype, Python objects the engine fills in, and a tuple the engine
# overwrites for every layer it shards.
NOT_JSON = {"dtype", "injection_policy_tuple"}
TP_NOT_JSON = {"mpu", "tp_group"}


@pytest.fixture(scope="module")
def ds_models():
    config = pytest.importorskip("deepspeed.runtime.tensor_parallel.config")
    return config.TPTrainingConfig, config.TPConfig


# --- parity with DeepSpeed 0.19.8


@pytest.mark.deepspeed
def test_field_names_and_aliases_match_deepspeed(ds_models):
    ds_training, _ = ds_models
    theirs = {n: f.alias for n, f in ds_training.model_fields.items() if n not in NOT_JSON}
    ours = {n: f.alias for n, f in TensorParallelConfig.model_fields.items()}
    assert ours == theirs


@pytest.mark.deepspeed
def test_defaults_match_deepspeed(ds_models):
    ds_training, _ = ds_models
    for name, field in TensorParallelConfig.model_fields.items():
        if name == "tensor_parallel":  # an optional sub-section: None here, TPConfig() there
            continue
        assert field.get_default() == ds_training.model_fields[name].get_default(), name


@pytest.mark.deepspeed
def test_tp_sub_model_matches_deepspeed(ds_models):
    _, ds_tp = ds_models
    theirs = {n: f.get_default() for n, f in ds_tp.model_fields.items() if n not in TP_NOT_JSON}
    assert {n: f.get_default() for n, f in TPConfig.model_fields.items()} == theirs


@pytest.mark.deepspeed
def test_ce_backend_choices_match_deepspeed(ds_models):
    ds_training, _ = ds_models
    ours = typing.get_args(TensorParallelConfig.model_fields["vocab_parallel_ce_backend"].annotation)
    assert ours == typing.get_args(ds_training.model_fields["vocab_parallel_ce_backend"].annotation)


@pytest.mark.deepspeed
def test_presets_are_deepspeeds():
    presets = pytest.importorskip("deepspeed.module_inject.autotp_config").AutoTPPresets
    assert all(presets.get_preset(name) is not None for name in TP_PRESET_MODELS)
    assert presets.get_preset("gpt2") is None  # unknown names are silently "no preset" in DeepSpeed


@pytest.mark.deepspeed
def test_full_config_is_accepted_by_deepspeed(ds_models):
    ds_training, _ = ds_models
    cfg = TensorParallelConfig(
        autotp_size=4, tp_overlap_comm=True, vocab_parallel_lm_head=True, vocab_parallel_ce_backend="liger",
        tp={"tp_size": 4, "tp_grain_size": 64}, partition_config={"use_default_specs": False, "layer_specs": []},
        preset_model="llama", keep_module_on_host=True, kernel_inject=True,
    )
    parsed = ds_training(**cfg.model_dump(by_alias=True, exclude_defaults=True))
    assert parsed.tensor_parallel.tp_grain_size == 64
    assert parsed.replace_with_kernel_inject is True
    assert parsed.vocab_parallel_ce_backend == "liger"


def test_vocab_parallel_keys_are_gated_to_0_19():
    for name in ("vocab_parallel_lm_head", "vocab_parallel_ce_backend"):
        assert TensorParallelConfig.model_fields[name].json_schema_extra == {"dsx_added_in": "0.19.0"}


@pytest.mark.deepspeed
def test_vocab_parallel_keys_are_absent_from_0_18_9(legacy_deepspeed):
    require("0.18.9")
    source = (legacy_deepspeed / "deepspeed" / "runtime" / "tensor_parallel" / "config.py").read_text()
    assert "vocab_parallel_lm_head" not in source and "vocab_parallel_ce_backend" not in source


# --- keys and types


def test_defaults_are_autotp_off():
    cfg = TensorParallelConfig()
    assert cfg.autotp_size == 0 and cfg.tensor_parallel is None
    assert cfg.model_dump(exclude_defaults=True) == {}


def test_tp_alias_and_field_name_both_validate():
    assert TensorParallelConfig(tp={"tp_size": 2}).tensor_parallel.tp_size == 2
    assert TensorParallelConfig(tensor_parallel={"tp_size": 2}).tensor_parallel.tp_size == 2


def test_kernel_inject_alias_validates():
    assert TensorParallelConfig(kernel_inject=True).replace_with_kernel_inject is True


def test_misspelled_key_is_rejected():
    with pytest.raises(ValidationError, match="tp_overlap\n  Extra inputs are not permitted"):
        TensorParallelConfig(tp_overlap=True)


def test_tp_size_at_the_wrong_level_is_rejected():
    with pytest.raises(ValidationError, match="tp_size\n  Extra inputs are not permitted"):
        TensorParallelConfig(tp_size=2)


def test_dtype_is_rejected():
    with pytest.raises(ValidationError, match="dtype\n  Extra inputs are not permitted"):
        TensorParallelConfig(dtype="bf16")


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match="tp_overlap_comm\n  Input should be a valid boolean"):
        TensorParallelConfig(tp_overlap_comm="false")


def test_unknown_ce_backend_is_rejected():
    with pytest.raises(ValidationError, match="Input should be 'torch' or 'liger'"):
        TensorParallelConfig(vocab_parallel_ce_backend="triton")


def test_preset_is_lower_cased():
    assert TensorParallelConfig(preset_model="Qwen2").preset_model == "qwen2"


def test_unknown_preset_is_rejected():
    with pytest.raises(ValidationError, match="preset_model\n  Input should be 'llama', 'bloom'"):
        TensorParallelConfig(preset_model="gpt2")


def test_negative_autotp_size_is_rejected():
    with pytest.raises(ValidationError, match="autotp_size\n  Input should be greater than or equal to 0"):
        TensorParallelConfig(autotp_size=-1)


# --- checks DeepSpeed makes at initialize when autotp_size > 1


def test_tp_size_must_match_autotp_size():
    msg = r"tensor_parallel.tp.tp_size \(2\) does not match tensor_parallel.autotp_size \(4\)"
    with pytest.raises(ValidationError, match=msg):
        TensorParallelConfig(autotp_size=4, tp={"tp_size": 2})


def test_tp_size_1_or_equal_is_accepted():
    for tp_size in (1, 4):
        config = TensorParallelConfig(autotp_size=4, tp={"tp_size": tp_size})
        assert config.model_dump(by_alias=True, exclude_unset=True) == {"autotp_size": 4, "tp": {"tp_size": tp_size}}


def test_tp_size_is_not_checked_without_autotp():
    config = TensorParallelConfig(autotp_size=0, tp={"tp_size": 2})
    assert config.model_dump(by_alias=True, exclude_unset=True) == {"autotp_size": 0, "tp": {"tp_size": 2}}


def test_liger_needs_a_vocab_parallel_head():
    msg = 'vocab_parallel_ce_backend "liger" requires a vocabulary-parallel LM head, but vocab_parallel_lm_head is'
    with pytest.raises(ValidationError, match=msg):
        TensorParallelConfig(autotp_size=2, vocab_parallel_ce_backend="liger", vocab_parallel_lm_head=False)


def test_liger_with_automatic_head_is_accepted():
    config = TensorParallelConfig(autotp_size=2, vocab_parallel_ce_backend="liger")
    assert config.model_dump(exclude_unset=True) == {"autotp_size": 2, "vocab_parallel_ce_backend": "liger"}
