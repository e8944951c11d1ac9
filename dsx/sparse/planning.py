"""dsx's side of a sparse run, decided before anything starts: is the layout buildable for this model and
sequence, what does it cost, sparse or dense (for `auto`), and what the rank plan and the row say.

Bad input is a SparseRequestError (dsx run turns it into a one-line refusal, exit 2): a block that does not divide
the sequence, parameters out of range for the sequence's blocks, attention dropout above 0 (FlexAttention has none;
dsx refuses rather than train a different model than asked), a layout that leaves a query with nothing to attend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsx.sparse import predict
from dsx.sparse.spec import SparsePlan, SparseRequestError, block_dict

LAYOUT_SEED = 1234
"""Seed of the random.Random every rank draws random blocks from (DeepSpeed used the unseeded global `random` and
broadcast rank 0's layout)."""

DROPOUT_KEYS = ("attn_pdrop", "attention_probs_dropout_prob", "attention_dropout")
"""The attention-dropout attribute of GPT-2, BERT/ALBERT and Llama configs."""


@dataclass
class SparseDecision:
    """What dsx run does about sparse attention: the rank plan (None: dense attention), the row's record, notes."""

    plan: SparsePlan | None
    info: dict[str, Any]
    """dsx.results.SparseAttentionInfo fields."""
    notes: list[str] = field(default_factory=list)


def kept_tiles_per_head(info: dict | None, seq_len: int) -> int | None:
    """The 128-token tiles a head's layout keeps at `seq_len`, from a decision's info (a row's sparse_attention):
    dsx.estimate prices FlexAttention by them. None where the run attends densely (no request, `none`, or `auto`
    predicted slower)."""
    if not info or not info.get("applied"):
        return None
    return round(info["tile_fraction"] * predict.dense_tiles(seq_len, bool(info.get("causal"))))


def _check_ranges(block: Any, nb: int, origin: str) -> None:
    """What DeepSpeed would silently wrap or ignore at nb blocks, refused."""
    def bad(key: str, problem: str) -> SparseRequestError:
        return SparseRequestError(f"sparse_attention.{key} ({origin}): {problem}")

    for key in ("num_sliding_window_blocks", "num_global_blocks"):
        value = getattr(block, key, None)
        if value is not None and value < 0:
            raise bad(key, f"{value} is negative")
    for key in ("global_block_indices", "global_block_end_indices"):
        for index in getattr(block, key, None) or []:
            if index < 0:
                raise bad(key, f"{index} is negative (DeepSpeed would wrap it to a block counted from the end)")
    for index in getattr(block, "global_block_indices", None) or []:
        if index >= nb:
            raise bad("global_block_indices", f"{index} is past the last block ({nb - 1}) of this sequence "
                                               f"({nb} blocks of {block.block}): DeepSpeed ignores it")


def _dropout(resolved) -> tuple[str, float] | None:
    for key in DROPOUT_KEYS:
        value = getattr(resolved.hf_config, key, None)
        if value:
            return key, float(value)
    return None


def _costs(sparse, seq_len: int, heads: int, causal: bool) -> tuple[float, float, int]:
    """(attended token pairs / dense's, kept 128-tiles / dense's, kept tiles summed over the model's heads)."""
    import torch

    blocks = sparse.blocks(seq_len).to(torch.int64)
    b, layout_heads = sparse.block, blocks.shape[0]
    if causal:
        below = torch.tril(blocks, -1).sum().item() * b * b
        diagonal = torch.diagonal(blocks, dim1=1, dim2=2).sum().item() * b * (b + 1) // 2
        attended, dense = below + diagonal, seq_len * (seq_len + 1) // 2
    else:
        attended, dense = blocks.sum().item() * b * b, seq_len * seq_len
    kept = sparse.kept_tiles(seq_len, causal)
    tile_fraction = kept / (predict.dense_tiles(seq_len, causal) * layout_heads)
    return attended / (dense * layout_heads), tile_fraction, kept * heads // layout_heads


def decide(requested: str, block: Any, resolved, device: str, *, handed_to_deepspeed: bool, origin: str,
           micro_batch: int = 1) -> SparseDecision:
    """The decision for a run of `resolved` on `device` ("cuda" or "cpu") asked for `requested` with `block`. The
    same with or without --compile: compiled, bigbird measured 1.42x dense at 16k and 2.48x at 32k on an H100 where
    the predictor says 2.89x and 6.55x for attention alone (bench/sparse/README.md)."""
    from dsx.sparse.attention import from_plan
    from dsx.sparse.layouts import LayoutError, direction_of

    seq_len, heads = resolved.seq_len, resolved.num_heads
    if seq_len % block.block:
        raise SparseRequestError(f"sparse attention: the sequence length {seq_len} (--seq-len) is not a multiple of "
                                 f"the block size {block.block} (--sparse-set block=N)")
    if (dropout := _dropout(resolved)) is not None:
        key, value = dropout
        raise SparseRequestError(
            f"--sparse-attention: {resolved.name} has attention dropout {key}={value:g}, and FlexAttention applies "
            f"none: pass --set {key}=0 (and the same to the dense run you compare with)")
    _check_ranges(block, seq_len // block.block, origin)
    kernel = "flex" if device == "cuda" else "sdpa"
    plan = SparsePlan(block=block_dict(block), seed=LAYOUT_SEED, kernel=kernel)
    try:
        sparse = from_plan(plan, heads, seq_len)
    except LayoutError as exc:
        key = str(exc).split(" ")[0]
        raise SparseRequestError(f"sparse_attention.{key} ({origin}): {exc} at sequence length {seq_len} (blocks "
                                 f"of {block.block})") from None
    causal = resolved.task == "causal-lm" or direction_of(block) == "unidirectional"
    if causal and not bool(sparse.layout.diagonal(dim1=1, dim2=2).all()):
        raise SparseRequestError(f"sparse_attention ({origin}): the {block.mode} layout leaves a block without its "
                                 "own block: its first tokens would attend to nothing (causal attention)")
    if not causal and not bool(sparse.layout.any(-1).all()):
        raise SparseRequestError(f"sparse_attention ({origin}): the {block.mode} layout leaves a block row empty")
    attended, kept_fraction, kept = _costs(sparse, seq_len, heads, causal)
    predicted = predict.speedup(seq_len, heads, micro_batch, causal, kept) if device == "cuda" else None
    info = {
        "requested": requested, "mode": block.mode, "params": block_dict(block), "block": block.block,
        "seed": LAYOUT_SEED, "causal": causal, "layout_density": float(sparse.layout.float().mean().item()),
        "attended_fraction": attended, "tile_fraction": kept_fraction, "applied_by": "dsx",
        "handed_to_deepspeed": handed_to_deepspeed, "predicted_attention_speedup": predicted,
    }
    notes: list[str] = []
    where = f"seq {seq_len}, {kept_fraction:.1%} of dense's 128-token tiles"
    if device != "cuda":
        applied = requested != "auto"
        why = ("CPU ranks apply the layout as a boolean mask through dense SDPA: the same math as FlexAttention on "
               "CUDA, no work skipped")
        decision = f"sparse: {why}" if applied else f"dense: {why}, so auto runs dense attention"
    else:
        faster = predicted >= predict.AUTO_MARGIN
        estimate = (f"attention forward+backward predicted {predicted:.2f}x dense SDPA ({where}; "
                    "dsx.sparse.predict, from the H100 kernel probe)")
        if requested == "auto":
            applied = faster
            decision = (f"sparse: {estimate}" if faster else
                        f"dense: {estimate}, below auto's {predict.AUTO_MARGIN}x")
        else:
            applied = True
            decision = f"sparse: {estimate}"
            if predicted < 1:
                notes.append(f"sparse attention: dense SDPA is predicted faster here: {estimate}; "
                             "--sparse-attention auto would run dense attention")
    info.update(applied=applied, kernel=(("flex_attention" if kernel == "flex" else "sdpa_mask") if applied else None),
                decision=decision)
    notes.append(f"sparse attention {block.mode} (block {block.block}, applied by dsx, "
                 f"{'kept in' if handed_to_deepspeed else 'removed from'} the DeepSpeed config): {decision}")
    return SparseDecision(plan=plan if applied else None, info=info, notes=notes)
