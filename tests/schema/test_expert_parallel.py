"""expert_parallel (AutoEP, DeepSpeed 0.19.8): defaults and key names pinned to parse_autoep_config (a dict reader
that silently ignores unknown keys), and the in-section checks validate_autoep_config makes at initialize."""

from __future__ import annotations

import logging
import typing

import pytest
from pydantic import ValidationError

from dsx.schema.expert_parallel import EP_PRESET_MODELS, EXPERT_ACTIVATIONS, ExpertParallelConfig

# Every field but three at a non-default value: use_grouped_mm stays true (gate_up_impl "fused" needs it),
# expert_tensor_parallel_size stays 1 (the only value 0.19.8 supports) and load_balance_coeff stays null.
NON_DEFAULT = {
    "enabled": True, "autoep_size": 2, "validate_folding_routing": True, "async_split_plan": True,
    "preset_model": "mixtral", "moe_layer_pattern": r"model\.layers\.\d+\.block_sparse_moe",
    "expert_pattern": "experts", "router_pattern": "gate", "disable_triton_grouped_mm": True,
    "route_norm": True, "route_scale": 2.0, "score_apply": "post", "combine_impl": "weighted_sum",
    "row_weighting_impl": "fused", "gate_up_impl": "fused", "comm_backend": "deepep", "comm_num_sm": 24,
    "comm_qp_margin": 2, "comm_max_tokens_per_rank": 4096, "num_expert_groups": 4, "num_limited_groups": 2,
    "score_func": "sigmoid", "top_k": 2, "routed_scaling_factor": 2.5, "expert_w1": "w1", "expert_w2": "w2",
    "expert_w3": "w3", "num_experts_attr": "num_local_experts", "top_k_attr": "num_experts_per_tok",
    "has_shared_experts": True, "shared_experts_pattern": "shared_experts",
    "shared_experts_gate_pattern": "shared_expert_gate", "expert_activation": "swiglu",
}
# Fields whose default DeepSpeed keeps only as a flag or sentinel (checked separately below).
SPECIAL = {"expert_w3", "load_balance_coeff"}


@pytest.fixture(scope="module")
def autoep():
    module = pytest.importorskip("deepspeed.module_inject.auto_ep_config")
    logging.getLogger("DeepSpeed").setLevel(logging.ERROR)
    return module


def _ds_rejects(autoep, block):
    """DeepSpeed's own initialize-time check (world size 4, no AutoTP, no sequence parallelism)."""
    try:
        autoep.validate_autoep_config(autoep.parse_autoep_config(block), world_size=4, pp_size=1, tp_size=0, sp_size=1)
    except ValueError:
        return True
    return False


# --- parity with DeepSpeed 0.19.8


@pytest.mark.deepspeed
def test_defaults_match_deepspeed(autoep):
    parsed = autoep.parse_autoep_config({"enabled": False})  # non-empty, so every .get() default is taken
    for name, field in ExpertParallelConfig.model_fields.items():
        if name not in SPECIAL:
            assert field.get_default() == getattr(parsed, name), name
    assert parsed.load_balance_coeff is None and parsed.expert_w3 is autoep._UNSET


@pytest.mark.deepspeed
def test_every_field_is_read_by_deepspeed(autoep):
    dumped = ExpertParallelConfig(**NON_DEFAULT).model_dump(exclude_defaults=True)
    assert dumped == NON_DEFAULT
    parsed = autoep.parse_autoep_config(dumped)
    assert {name: getattr(parsed, name) for name in NON_DEFAULT} == NON_DEFAULT


@pytest.mark.deepspeed
def test_full_config_passes_deepspeeds_initialize_check(autoep):
    assert not _ds_rejects(autoep, ExpertParallelConfig(**NON_DEFAULT).model_dump(exclude_defaults=True))


@pytest.mark.deepspeed
def test_dataclass_field_names_match_deepspeed(autoep):
    theirs = {f for f in autoep.AutoEPConfig.__dataclass_fields__ if not f.startswith("_")}
    assert set(ExpertParallelConfig.model_fields) == theirs


@pytest.mark.deepspeed
@pytest.mark.parametrize("name", ["score_apply", "combine_impl", "row_weighting_impl", "gate_up_impl",
                                  "comm_backend", "score_func"])
def test_choices_match_deepspeed(autoep, name):
    hints = typing.get_type_hints(autoep.AutoEPConfig)
    ours = typing.get_args(ExpertParallelConfig.model_fields[name].annotation)
    assert ours == typing.get_args(hints[name])


@pytest.mark.deepspeed
def test_presets_and_activations_match_deepspeed(autoep):
    assert EP_PRESET_MODELS == autoep.available_preset_names()
    from deepspeed.moe.ep_experts import EXPERT_ACTIVATIONS as ds_activations

    assert set(EXPERT_ACTIVATIONS) == set(ds_activations)


@pytest.mark.deepspeed
def test_deepspeed_ignores_misspelled_keys(autoep):
    # Why dsx rejects typos: DeepSpeed's reader drops them silently.
    assert autoep.parse_autoep_config({"autoep_sze": 8}).autoep_size == 1


# --- "auto", null and explicit values


def test_auto_is_a_legitimate_value():
    cfg = ExpertParallelConfig(score_func="auto", top_k="auto", routed_scaling_factor="auto", score_apply="auto")
    assert cfg.model_dump(exclude_defaults=True) == {}


def test_top_k_integer():
    assert ExpertParallelConfig(top_k=8).top_k == 8


def test_top_k_other_string_is_rejected():
    with pytest.raises(ValidationError, match="top_k.auto\n  Input should be 'auto'"):
        ExpertParallelConfig(top_k="8")


def test_explicit_null_expert_w3_is_emitted():
    # null means "gate and up fused in expert_w1"; absent means "the preset's expert_w3".
    assert ExpertParallelConfig(expert_w3=None).model_dump(exclude_defaults=True) == {"expert_w3": None}
    assert ExpertParallelConfig().model_dump(exclude_defaults=True) == {}


@pytest.mark.deepspeed
def test_explicit_null_expert_w3_reaches_deepspeed_as_null(autoep):
    dumped = ExpertParallelConfig(expert_w3=None).model_dump(exclude_defaults=True)
    assert autoep.parse_autoep_config(dumped).expert_w3 is None


def test_load_balance_coeff_null_is_accepted():
    config = ExpertParallelConfig(load_balance_coeff=None)
    assert config.model_dump(exclude_unset=True) == {"load_balance_coeff": None}


def test_load_balance_coeff_value_is_rejected_even_when_disabled():
    with pytest.raises(ValidationError, match=r"expert_parallel.load_balance_coeff=0.001 is not supported"):
        ExpertParallelConfig(load_balance_coeff=0.001)


@pytest.mark.deepspeed
def test_deepspeed_rejects_load_balance_coeff_at_parse(autoep):
    with pytest.raises(ValueError, match="load_balance_coeff=0.001 is not supported"):
        autoep.parse_autoep_config({"load_balance_coeff": 0.001})


# --- keys and types


def test_misspelled_key_is_rejected():
    with pytest.raises(ValidationError, match="autoep_sze\n  Extra inputs are not permitted"):
        ExpertParallelConfig(autoep_sze=8)


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match="enabled\n  Input should be a valid boolean"):
        ExpertParallelConfig(enabled="false")


def test_unknown_preset_is_rejected():
    with pytest.raises(ValidationError, match="preset_model\n  Input should be 'mixtral', 'qwen3_moe'"):
        ExpertParallelConfig(preset_model="llama")


def test_dotted_attribute_name_is_rejected():
    with pytest.raises(ValidationError, match=r"expert_w1\n  String should match pattern '\^\[\^\.\]\+\$'"):
        ExpertParallelConfig(expert_w1="mlp.w1")


def test_expert_tensor_parallel_size_above_1_is_rejected():
    with pytest.raises(ValidationError, match="expert_tensor_parallel_size\n  Input should be less than or equal to 1"):
        ExpertParallelConfig(expert_tensor_parallel_size=2)


# --- checks DeepSpeed makes at initialize when enabled (dsx and DeepSpeed must agree)

INVALID = [
    ({"gate_up_impl": "fused", "use_grouped_mm": False}, 'gate_up_impl "fused" needs use_grouped_mm true'),
    ({"row_weighting_impl": "fused"}, 'row_weighting_impl "fused" only runs inside the DeepEP route'),
    ({"comm_backend": "deepep"}, 'comm_max_tokens_per_rank must be > 0 with comm_backend "deepep"'),
    ({"comm_backend": "deepep", "comm_max_tokens_per_rank": 8, "combine_impl": "fused_weighted_sum"},
     'combine_impl "fused_weighted_sum" cannot be used with comm_backend "deepep"'),
    ({"num_expert_groups": 2, "num_limited_groups": 3}, r"num_limited_groups \(3\) must be <= num_expert_groups \(2\)"),
    ({"expert_tensor_parallel_size": 2}, "expert_tensor_parallel_size\n  Input should be less than or equal to 1"),
    ({"preset_model": "llama"}, "preset_model\n  Input should be 'mixtral'"),
    ({"expert_w2": "a.b"}, "expert_w2\n  String should match pattern"),
]


@pytest.mark.parametrize("block, message", INVALID)
def test_invalid_enabled_block_is_rejected(block, message):
    with pytest.raises(ValidationError, match=message):
        ExpertParallelConfig(enabled=True, autoep_size=2, **block)


@pytest.mark.deepspeed
@pytest.mark.parametrize("block", [b for b, _ in INVALID])
def test_deepspeed_rejects_the_same_blocks(autoep, block):
    assert _ds_rejects(autoep, {"enabled": True, "autoep_size": 2, **block})


def test_fused_weighted_sum_with_pre_scores_is_rejected():
    with pytest.raises(ValidationError, match='combine_impl "fused_weighted_sum" requires score_apply "post"'):
        ExpertParallelConfig(enabled=True, combine_impl="fused_weighted_sum", score_apply="pre")


def test_combinations_are_not_checked_when_disabled():
    given = {"enabled": False, "gate_up_impl": "fused", "use_grouped_mm": False, "comm_backend": "deepep"}
    assert ExpertParallelConfig(**given).model_dump(exclude_unset=True) == given
