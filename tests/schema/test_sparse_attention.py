"""sparse_attention (DeepSpeed 0.18.9 only): per-mode fields pinned to 0.18.9's parser, and the value checks of
0.18.9's *SparsityConfig classes reproduced with exact messages."""

from __future__ import annotations

import importlib.util

import pytest
from pydantic import TypeAdapter, ValidationError

from dsx.schema.sparse_attention import (
    SPARSE_MODES,
    BigBirdSparseAttentionConfig,
    BSLongformerSparseAttentionConfig,
    DenseSparseAttentionConfig,
    FixedSparseAttentionConfig,
    SparseAttentionConfig,
    VariableSparseAttentionConfig,
)
from tests.deepspeed_parser import deepspeed_probe_many, require

SPARSE = TypeAdapter(SparseAttentionConfig)

# One non-default value for every field of every mode (all valid together).
NON_DEFAULT = {
    "fixed": {"mode": "fixed", "block": 32, "different_layout_per_head": True, "num_local_blocks": 8,
              "num_global_blocks": 2, "attention": "unidirectional", "horizontal_global_attention": False,
              "num_different_global_patterns": 4},
    "variable": {"mode": "variable", "block": 64, "different_layout_per_head": True, "num_random_blocks": 2,
                 "local_window_blocks": [4, 8], "global_block_indices": [0, 16], "global_block_end_indices": [2, 18],
                 "attention": "bidirectional", "horizontal_global_attention": True},
    "bigbird": {"mode": "bigbird", "block": 32, "different_layout_per_head": True, "num_random_blocks": 2,
                "num_sliding_window_blocks": 5, "num_global_blocks": 2},
    "bslongformer": {"mode": "bslongformer", "block": 32, "different_layout_per_head": True,
                     "num_sliding_window_blocks": 5, "global_block_indices": [0, 8],
                     "global_block_end_indices": [1, 9]},
    "dense": {"mode": "dense", "block": 32},
}


def _parse(data):
    return SPARSE.validate_python(data)


@pytest.fixture(scope="module")
def parsed_by_0189(legacy_deepspeed):
    """DeepSpeed 0.18.9's parsed sparse_attention dict for: each mode alone, then each NON_DEFAULT block."""
    require("0.18.9")
    blocks = [{"mode": m} for m in SPARSE_MODES] + [NON_DEFAULT[m] for m in SPARSE_MODES]
    results = deepspeed_probe_many([{"train_batch_size": 1, "sparse_attention": b} for b in blocks], "0.18.9")
    assert all(r["accepted"] for r in results), results
    parsed = [r["probe"]["sparse_attention"] for r in results]
    n = len(SPARSE_MODES)
    return dict(zip(SPARSE_MODES, parsed[:n])), dict(zip(SPARSE_MODES, parsed[n:]))


@pytest.fixture(scope="module")
def sparsity_classes(legacy_deepspeed):
    """deepspeed/ops/sparse_attention/sparsity_config.py of 0.18.9, loaded by path (it needs only torch)."""
    require("0.18.9")
    path = legacy_deepspeed / "deepspeed" / "ops" / "sparse_attention" / "sparsity_config.py"
    spec = importlib.util.spec_from_file_location("ds0189_sparsity_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {
        "fixed": module.FixedSparsityConfig,
        "variable": module.VariableSparsityConfig,
        "bigbird": module.BigBirdSparsityConfig,
        "bslongformer": module.BSLongformerSparsityConfig,
        "dense": module.DenseSparsityConfig,
    }


# --- parity with DeepSpeed 0.18.9's parser


@pytest.mark.deepspeed
@pytest.mark.parametrize("mode", SPARSE_MODES)
def test_fields_and_defaults_of_each_mode_match_0189_parser(parsed_by_0189, mode):
    defaults, _ = parsed_by_0189
    assert _parse({"mode": mode}).model_dump() == defaults[mode]


@pytest.mark.deepspeed
@pytest.mark.parametrize("mode", SPARSE_MODES)
def test_every_field_is_read_by_0189_parser(parsed_by_0189, mode):
    # Feeding every field a non-default value: 0.18.9 reads back exactly what dsx holds.
    _, non_default = parsed_by_0189
    assert _parse(NON_DEFAULT[mode]).model_dump() == non_default[mode]


@pytest.mark.deepspeed
def test_absent_mode_is_fixed_as_in_0189(parsed_by_0189):
    defaults, _ = parsed_by_0189
    cfg = _parse({})
    assert isinstance(cfg, FixedSparseAttentionConfig)
    assert cfg.model_dump() == defaults["fixed"]


@pytest.mark.deepspeed
@pytest.mark.parametrize("mode", SPARSE_MODES)
def test_non_default_blocks_build_in_0189_sparsity_classes(sparsity_classes, mode):
    params = _parse(NON_DEFAULT[mode]).model_dump()
    del params["mode"]
    built = sparsity_classes[mode](num_heads=8, **params)
    assert {name: getattr(built, name) for name in params} == params  # 0.18.9 keeps each argument as given


# --- mode selection and keys


def test_each_mode_selects_its_model():
    models = {
        "fixed": FixedSparseAttentionConfig,
        "variable": VariableSparseAttentionConfig,
        "bigbird": BigBirdSparseAttentionConfig,
        "bslongformer": BSLongformerSparseAttentionConfig,
        "dense": DenseSparseAttentionConfig,
    }
    assert {m: type(_parse({"mode": m})) for m in SPARSE_MODES} == models


def test_unknown_mode_is_rejected():
    msg = 'mode must be one of "fixed", "variable", "bigbird", "bslongformer", "dense"'
    with pytest.raises(ValidationError, match=msg):
        _parse({"mode": "longformer"})


def test_key_of_another_mode_is_rejected():
    # 0.18.9 silently ignores keys the chosen mode does not read (bigbird has no `attention`).
    with pytest.raises(ValidationError, match="bigbird.attention\n  Extra inputs are not permitted"):
        _parse({"mode": "bigbird", "attention": "unidirectional"})


def test_misspelled_key_is_rejected():
    with pytest.raises(ValidationError, match="fixed.num_local_block\n  Extra inputs are not permitted"):
        _parse({"num_local_block": 4})


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match="different_layout_per_head\n  Input should be a valid boolean"):
        _parse({"mode": "variable", "different_layout_per_head": "false"})


def test_default_fixed_block_emits_nothing_and_other_modes_keep_mode():
    assert _parse({"mode": "fixed"}).model_dump(exclude_defaults=True) == {}
    assert _parse({"mode": "bigbird"}).model_dump(exclude_defaults=True) == {"mode": "bigbird"}


def test_block_must_be_positive():
    with pytest.raises(ValidationError, match="block\n  Input should be greater than or equal to 1"):
        _parse({"mode": "dense", "block": 0})


# --- the *SparsityConfig checks


INVALID = [
    ({"num_local_blocks": 6, "num_global_blocks": 4},
     r"num_local_blocks \(6\) must be a multiple of num_global_blocks \(4\)"),
    ({"attention": "unidirectional", "horizontal_global_attention": True},
     'horizontal_global_attention requires attention "bidirectional"'),
    ({"num_different_global_patterns": 2},
     "num_different_global_patterns > 1 requires different_layout_per_head: true"),
    ({"different_layout_per_head": True, "num_local_blocks": 4, "num_global_blocks": 2,
      "num_different_global_patterns": 3},
     r"num_different_global_patterns \(3\) cannot exceed num_local_blocks / num_global_blocks = 4 / 2 = 2"),
    ({"mode": "variable", "attention": "unidirectional", "horizontal_global_attention": True},
     'horizontal_global_attention requires attention "bidirectional"'),
    ({"mode": "variable", "global_block_indices": [0, 4], "global_block_end_indices": [2]},
     r"global_block_end_indices must have as many entries as global_block_indices \(1 != 2\)"),
    ({"mode": "variable", "global_block_indices": [0, 4], "global_block_end_indices": [2, 4]},
     r"each global_block_indices entry must be smaller than its global_block_end_indices entry \(start 4 >= end 4\)"),
    ({"mode": "bslongformer", "global_block_indices": [0], "global_block_end_indices": [1, 2]},
     r"global_block_end_indices must have as many entries as global_block_indices \(2 != 1\)"),
    ({"mode": "bslongformer", "global_block_indices": [3], "global_block_end_indices": [1]},
     r"each global_block_indices entry must be smaller than its global_block_end_indices entry \(start 3 >= end 1\)"),
]


@pytest.mark.parametrize("block, message", INVALID)
def test_layout_rules_are_enforced(block, message):
    with pytest.raises(ValidationError, match=message):
        _parse(block)


@pytest.mark.deepspeed
@pytest.mark.parametrize("block, message", INVALID)
def test_layout_rules_are_the_ones_0189_enforces(sparsity_classes, block, message):
    params = dict(block)
    mode = params.pop("mode", "fixed")
    with pytest.raises(ValueError):
        sparsity_classes[mode](num_heads=8, **params)


def test_attention_must_be_uni_or_bidirectional():
    with pytest.raises(ValidationError, match="attention\n  Input should be 'unidirectional' or 'bidirectional'"):
        _parse({"attention": "causal"})


def test_local_window_blocks_must_be_non_empty():
    with pytest.raises(ValidationError, match="local_window_blocks\n  List should have at least 1 item"):
        _parse({"mode": "variable", "local_window_blocks": []})
