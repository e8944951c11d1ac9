"""Block-sparse attention for transformers models: the layout (dsx.sparse.layouts) applied by FlexAttention on CUDA
and by a boolean mask through SDPA on CPU, registered as attn_implementation "dsx_sparse".

What a query token may attend to: key tokens whose layout block is 1 for its head, AND earlier-or-equal tokens
when the model is causal (GPT-2, Llama: `module.is_causal`) or the layout is unidirectional (DeepSpeed's
unidirectional layouts are only block-causal; their kernels left causality inside a block to the attention mask),
AND real (not padded) key tokens. The same mask on both paths, so CPU tests check the math CUDA runs.

- CUDA: `torch.compile(flex_attention)` with a BlockMask at 128-token tiles (FlexAttention's kernel tiles must
  divide the BlockMask's block): a tile is skipped when the layout has no 1-block in it, computed without a mask
  when every entry is attended (layout blocks all 1, strictly below the diagonal when causal), and computed with
  the mask_mod (the layout looked up at its own block size) otherwise. Built once per (sequence length, device)
  from the layout directly (no evaluation of the mask over all S x S pairs) and shared by every layer.
- CPU: FlexAttention has no backward on CPU (torch 2.13), so the layout is expanded to a [heads, S, S] boolean
  mask for torch.nn.functional.scaled_dot_product_attention: the same math, no speed-up.
- Kernel tiles: FlexAttention's Triton kernels take their tile sizes from inductor's defaults unless told
  (kernel_options); where dsx measured better ones (TUNED_TILES: on Hopper, bf16, head dim 64, inductor's
  max-autotune's choice at 32k) it passes them (flex_kernel_options). DSX_FLEX_TILES=default keeps inductor's
  defaults, for an A/B measurement (bench/sparse/tune32k.sh).

Attention dropout is not applied: FlexAttention has none (transformers' own flex path refuses dropout > 0 too).
dsx.sparse.planning refuses sparse attention for a model whose attention dropout is above 0, on both paths alike;
this function raises if it is handed one anyway.

transformers' masks: the model asks AttentionMaskInterface for its mask under our name; `sparse_mask` answers
None when every token is real (dsx's batches; BERT's all-ones attention_mask included), the [B, S] padding mask
when some are padded, and transformers' full 4-D boolean mask for anything else (offsets, packed sequences).
Without a registered mask function transformers hands the attention None and the padding would silently vanish.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from dsx.sparse.layouts import direction_of, make_layout
from dsx.sparse.spec import ATTN_NAME, SparsePlan, block_model

TILE = 128
"""The BlockMask block size (FlexAttention's default; its kernel tiles of 16-128 tokens must divide it)."""


@dataclass
class SparseAttention:
    """One layout ready to attend: a boolean [heads or 1, nb, nb] layout and the masks built from it."""

    layout: torch.Tensor
    block: int
    unidirectional: bool
    kernel: str
    """"flex" (FlexAttention, compiled when `compile`) or "sdpa" (boolean mask through SDPA)."""
    compile: bool = True
    cache: dict = field(default_factory=dict)

    # ------------------------------------------------------------------------------------------- masks

    def blocks(self, seq_len: int) -> torch.Tensor:
        """The layout's top-left [.., seq_len / block, seq_len / block] (DeepSpeed's rule for shorter sequences)."""
        built = self.layout.shape[-1] * self.block
        if seq_len % self.block or seq_len > built:
            raise RuntimeError(f"dsx sparse attention: sequence length {seq_len} does not fit the layout "
                               f"({built} tokens in blocks of {self.block})")
        nb = seq_len // self.block
        return self.layout[:, :nb, :nb]

    def token_mask(self, seq_len: int, device: torch.device, causal: bool) -> torch.Tensor:
        """[heads or 1, S, S] booleans: True where a query may attend a key (the SDPA path's mask)."""
        key = ("tokens", seq_len, str(device), causal)
        if key not in self.cache:
            mask = self.blocks(seq_len).repeat_interleave(self.block, 1).repeat_interleave(self.block, 2).to(device)
            if causal:
                mask = mask & torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()
            self.cache[key] = mask
        return self.cache[key]

    def mask_mod(self, device: torch.device, causal: bool):
        """FlexAttention's mask_mod: the layout at its block size, AND q >= kv when causal."""
        layout = self.layout.to(device)
        block, shared = self.block, layout.shape[0] == 1

        def layout_mod(b, h, q_idx, kv_idx):
            allowed = layout[0 if shared else h, q_idx // block, kv_idx // block]
            return allowed & (q_idx >= kv_idx) if causal else allowed

        return layout_mod

    def tiles(self, seq_len: int, causal: bool) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(any, all) booleans [heads or 1, nt, nt] per 128-token tile: some / every (query, key) pair attended.
        None when the tiles do not line up with the layout's blocks (then create_block_mask evaluates the mask)."""
        if seq_len % TILE or not (TILE % self.block == 0 or self.block % TILE == 0):
            return None
        nt = seq_len // TILE
        blocks = self.blocks(seq_len)
        if causal:  # a tile holds an attended pair only through a layout block on or below the diagonal
            blocks = blocks & torch.ones(blocks.shape[1], blocks.shape[1], dtype=torch.bool).tril()
        if TILE % self.block == 0:
            r = TILE // self.block
            grouped = blocks.reshape(blocks.shape[0], nt, r, nt, r)  # a shorter sequence's slice is not contiguous
            any_, all_ = grouped.any(4).any(2), grouped.all(4).all(2)
        else:
            r = self.block // TILE
            any_ = all_ = blocks.repeat_interleave(r, 1).repeat_interleave(r, 2)
        if causal:
            below = torch.ones(nt, nt, dtype=torch.bool).tril()
            any_ = any_ & below
            all_ = all_ & torch.ones(nt, nt, dtype=torch.bool).tril(-1)
        return any_, all_

    def kept_tiles(self, seq_len: int, causal: bool) -> int:
        """128-token tiles FlexAttention computes, summed over the layout's heads (what dsx.sparse.predict
        prices). Tiles that do not line up with the layout's blocks are counted through 2-D prefix sums."""
        tiles = self.tiles(seq_len, causal)
        if tiles is not None:
            return int(tiles[0].sum())
        blocks = self.blocks(seq_len).to(torch.int32)
        if causal:
            blocks = torch.tril(blocks)
        sums = torch.nn.functional.pad(blocks.cumsum(1).cumsum(2), (1, 0, 1, 0))
        starts = torch.arange(0, seq_len, TILE)
        first = starts // self.block
        last = (torch.clamp(starts + TILE, max=seq_len) - 1) // self.block + 1
        r0, r1 = first.view(-1, 1), last.view(-1, 1)
        c0, c1 = first.view(1, -1), last.view(1, -1)
        count = sums[:, r1, c1] - sums[:, r0, c1] - sums[:, r1, c0] + sums[:, r0, c0]
        kept = count > 0
        if causal:
            kept &= torch.ones(len(starts), len(starts), dtype=torch.bool).tril()
        return int(kept.sum())

    def block_mask(self, seq_len: int, device: torch.device, causal: bool):
        """The FlexAttention BlockMask of this layout at seq_len (cached per length, device and causality)."""
        key = _mask_key(seq_len, device, causal)
        if key not in self.cache:
            from torch.nn.attention.flex_attention import BlockMask, create_block_mask

            mask_mod = self.mask_mod(device, causal)
            tiles = self.tiles(seq_len, causal)
            if tiles is None:
                heads = self.layout.shape[0]
                self.cache[key] = create_block_mask(mask_mod, None, None if heads == 1 else heads, seq_len, seq_len,
                                                    device=device, BLOCK_SIZE=TILE)
            else:
                any_, all_ = tiles
                partial = any_ & ~all_
                counts, indices = _ordered(partial)
                full_counts, full_indices = _ordered(all_)
                self.cache[key] = BlockMask.from_kv_blocks(
                    counts.to(device), indices.to(device), full_counts.to(device), full_indices.to(device),
                    BLOCK_SIZE=TILE, mask_mod=mask_mod, seq_lengths=(seq_len, seq_len))
        return self.cache[key]

    # ------------------------------------------------------------------------------------------- attention

    def attend(self, query, key, value, attention_mask, scaling, causal):
        """[B, H, S, D] output of the layout's attention (GQA: key/value may have fewer heads)."""
        seq_len, heads = query.shape[2], query.shape[1]
        if key.shape[2] != seq_len:
            raise RuntimeError(f"dsx sparse attention is self-attention over whole sequences: {seq_len} queries, "
                               f"{key.shape[2]} keys (no KV cache, no cross-attention)")
        if attention_mask is not None and attention_mask.dtype != torch.bool:
            raise RuntimeError("dsx sparse attention takes boolean masks (its own mask function's)")
        if self.kernel == "flex":
            ready = self.cache.get(_mask_key(seq_len, query.device, causal))
            if ready is not None and attention_mask is None and torch.compiler.is_compiling():
                from torch.nn.attention.flex_attention import flex_attention

                return flex_attention(query, key, value, block_mask=ready, scale=scaling,
                                      enable_gqa=heads != key.shape[1], kernel_options=flex_kernel_options(query))
            return self._flex(query, key, value, attention_mask, scaling, causal, heads != key.shape[1])
        if heads != key.shape[1]:
            from transformers.integrations.sdpa_attention import repeat_kv

            key, value = repeat_kv(key, heads // key.shape[1]), repeat_kv(value, heads // value.shape[1])
        mask = self.token_mask(seq_len, query.device, causal).unsqueeze(0)
        if attention_mask is not None:
            mask = mask & (attention_mask[:, None, None, :] if attention_mask.dim() == 2 else attention_mask)
        return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling)

    def heads_of(self, rank: int, size: int) -> SparseAttention:
        """The layout of the heads rank `rank` of a Ulysses group of `size` attends with: after the all-to-all it
        holds the whole sequence for heads [rank * H / size, (rank + 1) * H / size) (a layout shared by every head is
        everyone's)."""
        heads = self.layout.shape[0]
        if heads == 1:
            return self
        if heads % size:
            raise RuntimeError(f"dsx sparse attention: {heads} heads' layouts do not split over {size} ranks")
        part = heads // size
        return replace(self, layout=self.layout[rank * part:(rank + 1) * part], cache={})

    def prepare(self, seq_len: int, device: torch.device) -> None:
        """Build the BlockMasks of seq_len (causal and not) before the model is compiled: a compiled model then
        traces FlexAttention into its own graph with the masks as graph inputs. Built while tracing, the mask's
        tensors would be the graph's intermediates, which inductor refuses ('All the buffers in the score and mask
        subgraph should be in ...input_buffers')."""
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:  # attend looks masks up by the query's device, cuda:N
            device = torch.device("cuda", torch.cuda.current_device())
        note_device(device)
        for causal in (True, False):
            self.block_mask(seq_len, device, causal)

    @torch.compiler.disable
    def _flex(self, query, key, value, attention_mask, scaling, causal, gqa):
        """Eager, or a length (or padded batch) `prepare` did not build: runs outside any graph of a compiled
        model, its own compiled FlexAttention (the model's graphs stop at the attention)."""
        from torch.nn.attention.flex_attention import create_block_mask

        seq_len = query.shape[2]
        note_device(query.device)
        if attention_mask is None:
            block_mask = self.block_mask(seq_len, query.device, causal)
        else:  # padded keys (or transformers' full mask): built for this batch, every tile through the mask_mod
            layout_mod, padded = self.mask_mod(query.device, causal), attention_mask

            def mask_mod(b, h, q_idx, kv_idx):
                real = padded[b, kv_idx] if padded.dim() == 2 else padded[b, 0, q_idx, kv_idx]
                return layout_mod(b, h, q_idx, kv_idx) & real

            block_mask = create_block_mask(mask_mod, query.shape[0], self.layout.shape[0] if self.layout.shape[0] > 1
                                           else None, seq_len, seq_len, device=query.device, BLOCK_SIZE=TILE)
        options = flex_kernel_options(query) if self.compile else None  # eager FlexAttention has no tiles
        return _flex_attention(self.compile)(query, key, value, block_mask=block_mask, scale=scaling,
                                             enable_gqa=gqa, kernel_options=options)


def _mask_key(seq_len: int, device, causal: bool) -> tuple:
    """The cache key of a BlockMask: block_mask stores under it, a compiled attend looks it up."""
    return ("blocks", seq_len, str(device), causal)


def _ordered(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A [H, nt, nt] tile mask as FlexAttention's (num_blocks [1, H, nt], indices [1, H, nt, nt]) int32: per
    query tile, how many key tiles and which (the selected ones first, in order)."""
    counts = mask.sum(-1, dtype=torch.int32)
    indices = torch.argsort((~mask).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    return counts.unsqueeze(0), indices.unsqueeze(0)


TUNED_TILES = {
    # (compute capability, dtype, head dim): FlexAttention kernel_options. Hopper (H100, H200), bf16, head dim 64:
    # what inductor's max-autotune chose for bigbird at 32,768 tokens on an H200 (bench/sparse/README.md, "What is
    # left at 32k"): forward 64x128 (3 stages, 4 warps), backward 64x64 (4 stages, 4 warps). Inductor's defaults
    # there: backward 64x128 with 8 warps. A layer's forward + backward with them: 1.04x at 16k, 1.37x at 32k, 1.53x
    # at 64k; end to end 1.07x at 64k.
    ((9, 0), "bfloat16", 64): {"fwd_BLOCK_M": 64, "fwd_BLOCK_N": 128, "fwd_num_stages": 3, "fwd_num_warps": 4,
                               "bwd_BLOCK_M1": 64, "bwd_BLOCK_N1": 64, "bwd_BLOCK_M2": 64, "bwd_BLOCK_N2": 64,
                               "bwd_num_stages": 4, "bwd_num_warps": 4},
}


def tuned_tiles(capability: tuple[int, int], dtype: str, head_dim: int) -> dict | None:
    """The measured tile sizes for this GPU generation, dtype and head dim, or None (inductor's defaults)."""
    found = TUNED_TILES.get((tuple(capability), dtype, head_dim))
    return dict(found) if found is not None else None


def flex_kernel_options(query) -> dict | None:
    """kernel_options for FlexAttention on `query`'s device: TUNED_TILES where measured, else None. Read inside a
    compiled graph, so it only looks up what note_device recorded outside it."""
    return _tiles_on(str(query.device), str(query.dtype).removeprefix("torch."), query.shape[-1])


def _tiles_on(device_key: str, dtype: str, head_dim: int) -> dict | None:
    """TUNED_TILES for a device note_device recorded, or None."""
    capability = _CAPABILITY.get(device_key)
    return tuned_tiles(capability, dtype, head_dim) if capability is not None else None


def note_device(device) -> None:
    """Record a CUDA device's compute capability for flex_kernel_options (not with DSX_FLEX_TILES=default: an A/B
    run on inductor's own tiles)."""
    device = torch.device(device)
    if device.type == "cuda" and os.environ.get("DSX_FLEX_TILES") != "default":
        _CAPABILITY[str(device)] = tuple(torch.cuda.get_device_capability(device))


def tiles_note(device, dtype: str, head_dim: int) -> str:
    """The row's note on the FlexAttention tiles this device uses for `dtype` and `head_dim`."""
    note_device(device)
    tiles = _tiles_on(str(torch.device(device)), dtype, head_dim)
    if tiles is not None:
        return "FlexAttention tiles: dsx's measured ones (" + ", ".join(f"{k} {v}" for k, v in tiles.items()) + ")"
    why = ("DSX_FLEX_TILES=default" if os.environ.get("DSX_FLEX_TILES") == "default"
           else f"none measured for this GPU, {dtype}, head dim {head_dim}")
    return f"FlexAttention tiles: inductor's defaults ({why})"


_CAPABILITY: dict[str, tuple[int, int]] = {}


_COMPILED: dict[bool, Any] = {}


def _flex_attention(compiled: bool):
    """flex_attention, compiled once per process (uncompiled it materialises the whole score matrix)."""
    if compiled not in _COMPILED:
        from torch.nn.attention.flex_attention import flex_attention

        _COMPILED[compiled] = torch.compile(flex_attention, dynamic=False) if compiled else flex_attention
    return _COMPILED[compiled]


# ----------------------------------------------------------------------------------------------- transformers

_ACTIVE: SparseAttention | None = None
_MASKING_UTILS: Any = None


def activate(sparse: SparseAttention) -> str:
    """Make `sparse` the layout every "dsx_sparse" attention of this process uses; registers the functions with
    transformers (idempotent) and returns the attn_implementation name for from_config. A rank trains one model,
    so one active layout per process."""
    global _ACTIVE
    _ACTIVE = sparse
    return register_functions()


def register_functions() -> str:
    """Register "dsx_sparse"'s attention and mask functions with transformers (both read the active layout when
    called, so registering before activate is fine: Ulysses wraps the attention function before the model is
    built); returns the name."""
    from transformers import AttentionInterface
    from transformers import masking_utils

    global _MASKING_UTILS
    _MASKING_UTILS = masking_utils  # for sparse_mask: compiled, an import there breaks the graph (dsx.models says why)
    AttentionInterface.register(ATTN_NAME, sparse_attention_forward)
    masking_utils.AttentionMaskInterface.register(ATTN_NAME, sparse_mask)
    return ATTN_NAME


def from_plan(plan: SparsePlan, num_heads: int, seq_len: int) -> SparseAttention:
    """The rank's layout: the plan's block at the run's sequence length, random blocks from the plan's seed."""
    block = block_model(plan.block)
    layout = make_layout(block, num_heads, seq_len, rng=random.Random(plan.seed), compact=True)
    return SparseAttention(layout=layout, block=block.block, kernel=plan.kernel,
                           unidirectional=direction_of(block) == "unidirectional")


def sparse_attention_forward(module, query, key, value, attention_mask, dropout: float = 0.0,
                             scaling: float | None = None, is_causal: bool | None = None, **kwargs):
    """transformers' attention signature: [B, H, S, D] inputs -> ([B, S, H, D] output, None)."""
    if _ACTIVE is None:
        raise RuntimeError("dsx sparse attention: no layout is active (dsx.sparse.attention.activate)")
    if dropout:
        raise RuntimeError(f"dsx sparse attention applies no attention dropout (FlexAttention has none), got "
                           f"dropout={dropout}: set the model's attention dropout to 0")
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    out = _ACTIVE.attend(query, key, value, attention_mask, scaling, causal or _ACTIVE.unidirectional)
    return out.transpose(1, 2).contiguous(), None


def sparse_mask(batch_size: int, q_length: int, kv_length: int, q_offset: Any = 0, kv_offset: Any = 0,
                mask_function=None, attention_mask: torch.Tensor | None = None, **kwargs):
    """transformers' mask function for "dsx_sparse": None (no padding), the [B, S] boolean padding mask, or
    transformers' own full 4-D mask where the pattern is more than causal/bidirectional over whole sequences
    (compiled, that is every causal mask unless dsx.models.assume_unpacked_batches ran: a rank's models do)."""
    masking_utils = _MASKING_UTILS

    plain = mask_function in (masking_utils.causal_mask_function, masking_utils.bidirectional_mask_function)
    whole = isinstance(q_offset, int) and isinstance(kv_offset, int) and q_offset == kv_offset == 0
    if not plain or not whole or q_length != kv_length:
        kwargs.update(allow_is_causal_skip=False, allow_is_bidirectional_skip=False)
        return masking_utils.sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length,
                                       q_offset=q_offset, kv_offset=kv_offset, mask_function=mask_function,
                                       attention_mask=attention_mask, **kwargs)
    if attention_mask is None:
        return None
    padding = attention_mask[:, :kv_length].to(torch.bool)
    if not torch.compiler.is_compiling() and bool(padding.all()):
        return None
    return padding
