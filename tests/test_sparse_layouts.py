"""dsx.sparse.layouts builds DeepSpeed 0.18.9's layouts bit for bit, every mode, many parameters.

The reference is 0.18.9's own deepspeed/ops/sparse_attention/sparsity_config.py (the session's side install,
`legacy_deepspeed`), loaded by path: it imports only torch and random, not the rest of DeepSpeed. Random blocks:
DeepSpeed draws from the module-level `random` after `random.seed(s)`, dsx from `random.Random(s)`.
"""

from __future__ import annotations

import importlib.util
import itertools
import random

import pytest
import torch

from dsx.sparse.layouts import LayoutError, density, make_layout
from dsx.sparse.spec import MODE_MODELS

SEED = 20251125


@pytest.fixture(scope="module")
def deepspeed_sparsity(legacy_deepspeed):
    path = legacy_deepspeed / "deepspeed" / "ops" / "sparse_attention" / "sparsity_config.py"
    spec = importlib.util.spec_from_file_location("ds0189_sparsity_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CLASSES = {"dense": "DenseSparsityConfig", "fixed": "FixedSparsityConfig", "variable": "VariableSparsityConfig",
           "bigbird": "BigBirdSparsityConfig", "bslongformer": "BSLongformerSparsityConfig",
           "local": "LocalSlidingWindowSparsityConfig"}


def _grid(mode: str, **axes) -> list:
    keys = list(axes)
    return [(mode, dict(zip(keys, values))) for values in itertools.product(*axes.values())]


BI_UNI = ["bidirectional", "unidirectional"]
# (mode, block keys); each case also runs over heads x sequence lengths below. Invalid combinations (the models'
# own checks, e.g. horizontal global attention with unidirectional) are left out by the models.
CASES = (
    _grid("dense", block=[16, 32])
    + _grid("fixed", block=[16], different_layout_per_head=[False, True], num_local_blocks=[1, 2, 4, 6],
            num_global_blocks=[1, 2], attention=BI_UNI, horizontal_global_attention=[False, True],
            num_different_global_patterns=[1, 2, 3])
    + _grid("variable", block=[16], different_layout_per_head=[False, True], num_random_blocks=[0, 1, 3],
            local_window_blocks=[[4], [1, 2, 3], [2, 5], [3, 1]], global_block_indices=[[0], [1, 5], [-1]],
            attention=BI_UNI, horizontal_global_attention=[False, True])
    + _grid("variable", block=[32], num_random_blocks=[2], local_window_blocks=[[2]],
            global_block_indices=[[0, 3], [2, 9]], global_block_end_indices=[[2, 4], [3, 12]], attention=BI_UNI,
            horizontal_global_attention=[False, True])
    + _grid("bigbird", block=[16], different_layout_per_head=[False, True], num_random_blocks=[0, 1, 2],
            num_sliding_window_blocks=[0, 1, 2, 3, 5], num_global_blocks=[0, 1, 2])
    + _grid("bslongformer", block=[16], different_layout_per_head=[False, True],
            num_sliding_window_blocks=[1, 3, 4, 7], global_block_indices=[[0], [2, 6], [-2], [40]])
    + _grid("bslongformer", block=[16], num_sliding_window_blocks=[3], global_block_indices=[[0, 5]],
            global_block_end_indices=[[2, 7], [1, 99]])
    + _grid("local", block=[16, 64], num_sliding_window_blocks=[1, 2, 3, 6], attention=BI_UNI)
)
SHAPES = [(1, 64), (3, 128), (4, 208), (2, 512)]
"""(heads, seq_len): 4, 8, 13 and 32 blocks of 16."""
# The classes of bigbird, bslongformer and local take `attention`; their config block does not (dsx passes it).
CLASS_ATTENTION = {"bigbird": BI_UNI, "bslongformer": BI_UNI, "local": [None]}


def _valid_cases():
    for mode, keys in CASES:
        try:
            block = MODE_MODELS[mode].model_validate({"mode": mode, **keys})
        except ValueError:
            continue
        for attention in CLASS_ATTENTION.get(mode, [None]):
            for heads, seq in SHAPES:
                label = "-".join(f"{k[:6]}{v}" for k, v in keys.items()) + f"-{attention or ''}-h{heads}-s{seq}"
                yield pytest.param(block, attention, heads, seq, id=f"{mode}-{label}")


def _deepspeed_layout(module, block, attention, heads, seq):
    """0.18.9's layout (or the exception it raises) for the same parameters."""
    kwargs = block.model_dump()
    mode = kwargs.pop("mode")
    if attention is not None:
        kwargs["attention"] = attention
    random.seed(SEED)
    return getattr(module, CLASSES[mode])(num_heads=heads, **kwargs).make_layout(seq)


@pytest.mark.parametrize("block, attention, heads, seq", list(_valid_cases()))
def test_layout_equals_deepspeed_0189(deepspeed_sparsity, block, attention, heads, seq):
    try:
        expected = _deepspeed_layout(deepspeed_sparsity, block, attention, heads, seq)
    except ValueError as exc:  # DeepSpeed refuses these parameters at this length: so does dsx
        with pytest.raises(LayoutError):
            make_layout(block, heads, seq, rng=random.Random(SEED), attention=attention)
        assert str(exc)
        return
    got = make_layout(block, heads, seq, rng=random.Random(SEED), attention=attention)
    assert got.dtype == expected.dtype == torch.int64
    assert torch.equal(got, expected)


def test_the_grid_covers_every_mode_and_most_cases_build(deepspeed_sparsity):
    cases = list(_valid_cases())
    modes = {case.values[0].mode for case in cases}
    assert modes == set(CLASSES)
    assert len(cases) > 1500


def test_random_blocks_follow_the_seed_and_differ_between_seeds():
    block = MODE_MODELS["bigbird"].model_validate({"mode": "bigbird", "num_random_blocks": 2})
    a = make_layout(block, 2, 512, rng=random.Random(1))
    assert torch.equal(a, make_layout(block, 2, 512, rng=random.Random(1)))
    assert not torch.equal(a, make_layout(block, 2, 512, rng=random.Random(2)))


def test_compact_layout_is_one_head_of_bools_when_heads_share_it():
    block = MODE_MODELS["fixed"].model_validate({"mode": "fixed"})
    full = make_layout(block, 8, 256)
    compact = make_layout(block, 8, 256, compact=True)
    assert compact.shape == (1, 16, 16) and compact.dtype == torch.bool
    assert torch.equal(compact[0], full[0].bool())
    per_head = MODE_MODELS["fixed"].model_validate({"mode": "fixed", "different_layout_per_head": True,
                                                     "num_different_global_patterns": 4})
    assert make_layout(per_head, 8, 256, compact=True).shape == (8, 16, 16)


def test_block_must_divide_the_sequence():
    block = MODE_MODELS["bigbird"].model_validate({"mode": "bigbird", "block": 48})
    with pytest.raises(LayoutError, match="^the sequence length 1000 is not a multiple of the sparse block size 48$"):
        make_layout(block, 1, 1000)


def test_density_of_dense_is_one_and_of_a_window_is_its_share():
    assert density(make_layout(MODE_MODELS["dense"].model_validate({"mode": "dense"}), 2, 64)) == 1.0
    local = MODE_MODELS["local"].model_validate({"mode": "local", "num_sliding_window_blocks": 1})
    assert density(make_layout(local, 1, 64)) == 4 / 16  # the 4 diagonal blocks of 4 x 4
