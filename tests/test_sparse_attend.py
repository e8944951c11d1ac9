"""dsx.sparse.attention computes exactly the attention its layout allows, on both paths.

The SDPA path (CPU) against dense SDPA and against an eager softmax with a -inf mask (outputs and gradients); the
FlexAttention BlockMask's tiles against torch's own create_block_mask evaluating the same mask over every pair;
and the four model families built with attn_implementation "dsx_sparse".
"""

from __future__ import annotations

import random

import pytest
import torch

from dsx.models import assume_unpacked_batches, build_model, resolve_model, synthetic_batch
from dsx.sparse.attention import TILE, SparseAttention, activate, sparse_attention_forward
from dsx.sparse.layouts import make_layout
from dsx.sparse.spec import MODE_MODELS, ATTN_NAME


def sparse(mode: str, heads: int, seq: int, kernel: str = "sdpa", compile: bool = False, **keys) -> SparseAttention:
    block = MODE_MODELS[mode].model_validate({"mode": mode, **keys})
    layout = make_layout(block, heads, seq, rng=random.Random(7), compact=True)
    return SparseAttention(layout=layout, block=block.block, kernel=kernel, compile=compile,
                           unidirectional=getattr(block, "attention", "bidirectional") == "unidirectional")


def qkv(batch=2, heads=4, kv_heads=4, seq=64, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    make = lambda h: torch.randn(batch, h, seq, dim, generator=g, dtype=torch.float64).requires_grad_()  # noqa: E731
    return make(heads), make(kv_heads), make(kv_heads)


def reference(q, k, v, allowed: torch.Tensor, scale: float) -> torch.Tensor:
    """Eager attention: scores, -inf where not allowed, softmax, weighted values (GQA: keys repeated)."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    scores = (q @ k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def grads(out: torch.Tensor, *tensors) -> list[torch.Tensor]:
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    return torch.autograd.grad((out * weights).sum(), tensors)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_a_dense_layout_gives_sdpas_outputs_and_gradients(causal, kv_heads):
    q, k, v = qkv(kv_heads=kv_heads)
    attention = sparse("dense", 4, 64)
    got = attention.attend(q, k, v, None, 0.3, causal)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.3,
                                                                enable_gqa=kv_heads != 4)
    torch.testing.assert_close(got, expected)
    for a, b in zip(grads(got, q, k, v), grads(expected, q, k, v)):
        torch.testing.assert_close(a, b)


LAYOUTS = [
    ("bigbird", {"num_random_blocks": 1}),
    ("bigbird", {"num_random_blocks": 2, "different_layout_per_head": True, "block": 8}),
    ("fixed", {"different_layout_per_head": True, "num_different_global_patterns": 2, "num_local_blocks": 2}),
    ("fixed", {"attention": "unidirectional", "block": 4}),
    ("variable", {"local_window_blocks": [1, 2], "global_block_indices": [2], "num_random_blocks": 1}),
    ("bslongformer", {"global_block_indices": [1]}),
    ("local", {"num_sliding_window_blocks": 3, "block": 8}),
]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("mode, keys", LAYOUTS, ids=[f"{m}-{i}" for i, (m, _) in enumerate(LAYOUTS)])
def test_a_sparse_layout_equals_masked_eager_attention(mode, keys, causal):
    q, k, v = qkv(kv_heads=2)
    attention = sparse(mode, 4, 64, **keys)
    block = attention.block
    allowed = attention.layout.repeat_interleave(block, 1).repeat_interleave(block, 2).expand(4, 64, 64)
    if causal or attention.unidirectional:
        allowed = allowed & torch.ones(64, 64, dtype=torch.bool).tril()
    got = attention.attend(q, k, v, None, 0.25, causal or attention.unidirectional)
    expected = reference(q, k, v, allowed, 0.25)
    torch.testing.assert_close(got, expected)
    for a, b in zip(grads(got, q, k, v), grads(expected, q, k, v)):
        torch.testing.assert_close(a, b)
    assert attention.layout.sum() < attention.layout.numel()  # the case is sparse


def _tile_sets(block_mask) -> tuple[torch.Tensor, torch.Tensor]:
    """(partial, full) tiles of a BlockMask as dense [H, nt, nt] booleans."""
    def dense(counts, indices):  # indices hold a permutation of the key tiles, the first `counts` selected
        selected = torch.arange(indices.shape[-1]) < counts.unsqueeze(-1)
        return torch.zeros_like(selected).scatter_(-1, indices.long(), selected)[0]

    return dense(block_mask.kv_num_blocks, block_mask.kv_indices), dense(block_mask.full_kv_num_blocks,
                                                                         block_mask.full_kv_indices)


BLOCK_MASK_CASES = [
    ("bigbird", {"block": 16, "num_random_blocks": 2}, 512),
    ("bigbird", {"block": 128, "num_sliding_window_blocks": 3}, 1024),
    ("bigbird", {"block": 256}, 1024),
    ("fixed", {"block": 32, "different_layout_per_head": True, "num_different_global_patterns": 4}, 768),
    ("bslongformer", {"block": 64, "global_block_indices": [3]}, 1024),
    ("local", {"block": 16, "num_sliding_window_blocks": 1}, 384),
    ("dense", {"block": 16}, 256),
]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("mode, keys, seq", BLOCK_MASK_CASES, ids=[c[0] + str(i) for i, c in enumerate(BLOCK_MASK_CASES)])
def test_the_block_mask_skips_and_keeps_the_same_tiles_as_create_block_mask(mode, keys, seq, causal):
    from torch.nn.attention.flex_attention import create_block_mask

    attention = sparse(mode, 4, seq, kernel="flex", **keys)
    ours = attention.block_mask(seq, torch.device("cpu"), causal)
    heads = attention.layout.shape[0]
    theirs = create_block_mask(attention.mask_mod(torch.device("cpu"), causal), None, None if heads == 1 else heads,
                               seq, seq, device="cpu", BLOCK_SIZE=TILE)
    assert ours.BLOCK_SIZE == theirs.BLOCK_SIZE == (TILE, TILE)
    our_partial, our_full = _tile_sets(ours)
    their_partial, their_full = _tile_sets(theirs)
    assert torch.equal(our_full, their_full)
    assert torch.equal(our_partial, their_partial)
    assert torch.equal(ours.to_dense(), theirs.to_dense())


def test_the_block_mask_is_built_once_per_length_and_shared():
    attention = sparse("bigbird", 4, 512, kernel="flex")
    first = attention.block_mask(512, torch.device("cpu"), True)
    assert attention.block_mask(512, torch.device("cpu"), True) is first
    assert attention.block_mask(256, torch.device("cpu"), True) is not first


@pytest.mark.slow
def test_compiled_flex_attention_on_cpu_gives_the_sdpa_paths_output():
    # The BlockMask as the CUDA path uses it, run forward by compiled FlexAttention (CPU has no flex backward).
    q, k, v = (t.detach().float() for t in qkv(batch=1, heads=4, kv_heads=2, seq=256, dim=16))
    flex = sparse("bigbird", 4, 256, kernel="flex", compile=True, block=32, num_random_blocks=1)
    masked = SparseAttention(layout=flex.layout, block=32, kernel="sdpa", unidirectional=False)
    torch.testing.assert_close(flex.attend(q, k, v, None, 0.25, True), masked.attend(q, k, v, None, 0.25, True),
                               atol=2e-5, rtol=2e-5)


def test_attention_dropout_is_refused_not_skipped():
    activate(sparse("dense", 4, 64))
    q, k, v = qkv()
    with pytest.raises(RuntimeError, match=r"applies no attention dropout .* got dropout=0\.1"):
        sparse_attention_forward(torch.nn.Module(), q, k, v, None, dropout=0.1)


# ----------------------------------------------------------------------------------------------- whole models

NO_DROPOUT = {"gpt2-tiny": {"attn_pdrop": 0.0}, "bert-tiny": {"attention_probs_dropout_prob": 0.0},
              "albert-tiny": {}, "llama-tiny": {}}


def _twins(model: str, attention: SparseAttention):
    """The same weights built with sdpa and with dsx_sparse (eval mode: no dropout anywhere)."""
    resolved = resolve_model(model, NO_DROPOUT[model])
    torch.manual_seed(0)
    dense = build_model(resolved, "sdpa").eval()
    torch.manual_seed(0)
    name = activate(attention)
    assert name == ATTN_NAME
    ours = build_model(resolved, name).eval()
    ours.load_state_dict(dense.state_dict())
    return resolved, dense, ours


@pytest.mark.parametrize("model", list(NO_DROPOUT))
def test_each_family_with_a_dense_layout_computes_what_sdpa_computes(model):
    resolved, dense, ours = _twins(model, sparse("dense", 4, 64))
    batch = synthetic_batch(resolved, 2)
    expected, got = dense(**batch), ours(**batch)
    torch.testing.assert_close(got.logits, expected.logits, atol=1e-5, rtol=1e-5)
    got.loss.backward()
    expected.loss.backward()
    for (name, a), (_, b) in zip(ours.named_parameters(), dense.named_parameters()):
        if a.grad is not None or b.grad is not None:
            torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("model", list(NO_DROPOUT))
def test_each_family_with_block_diagonal_attention_keeps_blocks_apart(model):
    # Layout: each 16-token block attends only to itself. Changing the first token changes no later block.
    resolved, _, ours = _twins(model, sparse("local", 4, 64, num_sliding_window_blocks=1, attention="bidirectional"))
    batch = synthetic_batch(resolved, 1)
    changed = {k: v.clone() for k, v in batch.items()}
    changed["input_ids"][0, 0] = (changed["input_ids"][0, 0] + 1) % resolved.token_vocab_size
    with torch.no_grad():
        a, b = ours(**batch).logits, ours(**changed).logits
    torch.testing.assert_close(a[:, 16:], b[:, 16:], atol=0, rtol=0)
    assert not torch.equal(a[:, :16], b[:, :16])


def test_bert_padding_reaches_the_sparse_attention():
    resolved, dense, ours = _twins("bert-tiny", sparse("dense", 4, 64))
    batch = synthetic_batch(resolved, 2)
    batch["attention_mask"][1, 40:] = 0  # the second sequence is padded after 40 tokens
    with torch.no_grad():
        expected, got = dense(**batch).logits, ours(**batch).logits
    torch.testing.assert_close(got[0], expected[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1, :40], expected[1, :40], atol=1e-5, rtol=1e-5)
    unpadded = {k: v.clone() for k, v in batch.items()}
    unpadded["attention_mask"][1] = 1
    with torch.no_grad():
        assert not torch.allclose(ours(**unpadded).logits[1, :40], got[1, :40])


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gpt2-tiny", "llama-tiny"])
def test_a_model_on_the_flex_path_computes_what_the_mask_path_computes(model):
    # The CUDA path (compiled FlexAttention, the BlockMask) inside a transformers model, forward only: CPU has no
    # FlexAttention backward. Llama checks grouped-query attention (enable_gqa).
    layout = sparse("bigbird", 4, 128, block=32, num_random_blocks=1)
    flex = SparseAttention(layout=layout.layout, block=32, kernel="flex", compile=True, unidirectional=False)
    resolved = resolve_model(model, NO_DROPOUT[model], seq_len=128)
    torch.manual_seed(0)
    masked_model = build_model(resolved, activate(layout)).eval()
    batch = synthetic_batch(resolved, 2)
    with torch.no_grad():
        expected = masked_model(**batch).logits
        activate(flex)
        got = masked_model(**batch).logits
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def _compiled_twins():
    """gpt2-tiny (2 layers) on the SDPA mask path, the flex kernel of the same layout, and a batch, as a rank
    compiles them: unpacked batches (dsx.models.assume_unpacked_batches; else transformers hands the compiled
    attention a padding mask) and no KV cache (transformers' cache breaks the graph by itself)."""
    assume_unpacked_batches()
    layout = sparse("bigbird", 4, 128, block=32, num_random_blocks=1)
    flex = SparseAttention(layout=layout.layout, block=32, kernel="flex", compile=True, unidirectional=False)
    resolved = resolve_model("gpt2-tiny", NO_DROPOUT["gpt2-tiny"], seq_len=128)
    torch.manual_seed(0)
    model = build_model(resolved, activate(layout)).eval()
    model.config.use_cache = False
    torch._dynamo.reset()
    return layout, flex, model, {"input_ids": synthetic_batch(resolved, 2)["input_ids"]}


@pytest.mark.slow
def test_a_compiled_model_traces_prepared_flex_attention_into_its_one_graph(transformers_masks):
    # dsx run --compile builds the BlockMasks before compiling (SparseAttention.prepare): the attention is then part
    # of the model's single graph, no break per layer. The aot_eager backend checks the capture and its autograd
    # tracing: on CPU, inductor's flex template (torch 2.13) cannot lower it; CUDA's does (bench/sparse).
    layout, flex, model, batch = _compiled_twins()
    with torch.no_grad():
        expected = model(**batch).logits
        activate(flex)
        flex.prepare(128, torch.device("cpu"))
        explained = torch._dynamo.explain(model)(**batch)
        got = torch.compile(model, backend="aot_eager")(**batch).logits
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_an_unprepared_flex_attention_breaks_the_graph_at_every_layer(transformers_masks):
    # A length prepare did not build: the attention runs outside the model's graphs (its own compiled
    # FlexAttention), so every layer's attention breaks the graph, and nothing else does.
    layout, flex, model, batch = _compiled_twins()
    with torch.no_grad():
        activate(flex)
        explained = torch._dynamo.explain(model)(**batch)
    reasons = [reason.reason for reason in explained.break_reasons]
    assert len(reasons) >= model.config.n_layer
    assert all("SparseAttention._flex" in reason for reason in reasons)


@pytest.mark.slow
def test_a_compiled_model_runs_unprepared_flex_attention_outside_its_graphs():
    # Unprepared, compiled: same logits as the uncompiled mask path.
    layout = sparse("bigbird", 4, 128, block=32, num_random_blocks=1)
    flex = SparseAttention(layout=layout.layout, block=32, kernel="flex", compile=True, unidirectional=False)
    resolved = resolve_model("gpt2-tiny", NO_DROPOUT["gpt2-tiny"], seq_len=128)
    torch.manual_seed(0)
    model = build_model(resolved, activate(layout)).eval()
    batch = synthetic_batch(resolved, 2)
    torch._dynamo.reset()
    with torch.no_grad():
        expected = model(**batch).logits
        activate(flex)
        got = torch.compile(model)(**batch).logits
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("unpacked", [True, False])
def test_a_compiled_model_on_unpacked_batches_builds_no_full_mask(monkeypatch, transformers_masks, unpacked):
    # Compiled, transformers wraps the causal mask in a packed-sequence check it cannot evaluate; through sdpa_mask
    # that is a [B, 1, S, S] mask per forward (1 GiB at 32k) and a BlockMask rebuilt from it per layer. After
    # dsx.models.assume_unpacked_batches (a rank's models) no full mask is built; same logits either way.
    masking_utils = transformers_masks
    full_masks = []
    real = masking_utils.sdpa_mask
    monkeypatch.setattr(masking_utils, "sdpa_mask", lambda *a, **k: full_masks.append(1) or real(*a, **k))
    layout = sparse("bigbird", 4, 128, block=32, num_random_blocks=1)
    flex = SparseAttention(layout=layout.layout, block=32, kernel="flex", compile=True, unidirectional=False)
    resolved = resolve_model("gpt2-tiny", NO_DROPOUT["gpt2-tiny"], seq_len=128)
    torch.manual_seed(0)
    model = build_model(resolved, activate(layout)).eval()
    batch = {"input_ids": synthetic_batch(resolved, 2)["input_ids"]}
    torch._dynamo.reset()
    with torch.no_grad():
        expected = model(**batch).logits
        activate(flex)
        if unpacked:
            assume_unpacked_batches()
        got = torch.compile(model)(**batch).logits
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert bool(full_masks) is not unpacked


def test_a_shorter_sequence_uses_the_layouts_top_left_corner():
    # DeepSpeed's rule: a layout built for the longest sequence serves shorter ones with its top-left slice.
    attention = sparse("bigbird", 4, 512, kernel="flex", block=32, num_random_blocks=1)
    short = SparseAttention(layout=attention.layout[:, :8, :8].clone(), block=32, kernel="flex", unidirectional=False)
    assert torch.equal(attention.block_mask(256, torch.device("cpu"), True).to_dense(),
                       short.block_mask(256, torch.device("cpu"), True).to_dense())
    with pytest.raises(RuntimeError, match="sequence length 1024 does not fit the layout"):
        attention.token_mask(1024, torch.device("cpu"), True)


@pytest.mark.parametrize("per_head", [True, False])
def test_a_ulysses_ranks_head_slice_attends_as_those_heads_of_the_whole(per_head):
    # Under --sequence-parallel 2 rank r holds the whole sequence for heads [2r, 2r + 2) of 4: its layout is those
    # heads' (bigbird's random blocks differ per head when different_layout_per_head), its output theirs.
    whole = sparse("bigbird", 4, 128, block=16, num_random_blocks=2, different_layout_per_head=per_head)
    q, k, v = qkv(heads=4, kv_heads=2, seq=128)
    expected = whole.attend(q, k, v, None, 0.3, True)
    for rank in (0, 1):
        part = whole.heads_of(rank, 2)
        heads = slice(2 * rank, 2 * rank + 2)
        got = part.attend(q[:, heads], k[:, rank:rank + 1], v[:, rank:rank + 1], None, 0.3, True)
        torch.testing.assert_close(got, expected[:, heads])
    assert whole.heads_of(1, 2).layout.shape[0] == (2 if per_head else 1)
    if per_head:  # else a slice taken from the wrong heads would pass too
        assert not torch.equal(whole.layout[:2], whole.layout[2:])


def test_measured_flexattention_tiles_apply_to_hopper_bf16_head_dim_64_only():
    from dsx.sparse.attention import tuned_tiles

    hopper = tuned_tiles((9, 0), "bfloat16", 64)
    assert (hopper["fwd_BLOCK_M"], hopper["fwd_BLOCK_N"], hopper["bwd_BLOCK_N1"], hopper["bwd_num_warps"]) == (
        64, 128, 64, 4)
    assert [tuned_tiles(*key) for key in (((8, 0), "bfloat16", 64), ((9, 0), "float16", 64),
                                          ((9, 0), "bfloat16", 128))] == [None, None, None]


def test_a_row_says_inductors_tiles_where_none_were_measured():
    from dsx.sparse.attention import flex_kernel_options, tiles_note

    assert tiles_note("cpu", "bfloat16", 64) == (
        "FlexAttention tiles: inductor's defaults (none measured for this GPU, bfloat16, head dim 64)")
    assert flex_kernel_options(torch.zeros(1, 1, 4, 64)) is None
