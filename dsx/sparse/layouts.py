"""Block layouts of DeepSpeed 0.18.9's sparse attention, built the way its `SparsityConfig.make_layout` builds them.

A layout is an int64 tensor [heads, nb, nb] (nb = seq_len / block) whose entry [h, i, j] is 1 when the tokens of
query block i may attend to the tokens of key block j in head h. DeepSpeed's block-sparse Triton kernels computed
exactly the 1-blocks; dsx hands the same layout to FlexAttention (dsx.sparse.attention). The parameters are the
`sparse_attention` block of a DeepSpeed config, as dsx's pydantic models (dsx.schema.sparse_attention) hold it.

Equal bit for bit to DeepSpeed 0.18.9 (tests/test_sparse_layouts.py compares every mode over many parameters with
0.18.9's own classes), including its quirks, which a user of the config block got too:
- A "unidirectional" layout is only block-causal: diagonal blocks stay full (DeepSpeed relied on an attention mask
  inside them; dsx.sparse.attention ANDs q >= kv).
- Even sliding windows widen to the next odd width (num_sliding_window_blocks // 2 blocks on each side).
- Global indices past the last block are ignored; negative indices and ranges follow Python's slicing (they wrap).
  dsx.sparse.spec refuses negative ones before a run.
- bigbird and bslongformer apply `tril` to the whole layout when unidirectional.

Random blocks (variable, bigbird): DeepSpeed draws them with the module-level `random.sample(range(...), k)`, one
call per block row, rows in order, heads in order, before the other parts of each head; it never seeds `random`
itself (the layout depended on whatever state the user's program left), and it then broadcast rank 0's layout.
Here the draws come from a `random.Random` the caller passes: the same calls in the same order, so
`make_layout(..., rng=random.Random(s))` equals DeepSpeed's layout after `random.seed(s)`, and every rank seeded
alike builds the same layout without a broadcast.

Pure torch: no DeepSpeed import.
"""

from __future__ import annotations

import random
from typing import Any

import torch

MODES = ("dense", "fixed", "variable", "bigbird", "bslongformer", "local")
"""Every layout this module builds: DeepSpeed's five config modes and "local" (0.18.9's
LocalSlidingWindowSparsityConfig, a class its config parser has no mode for)."""


class LayoutError(ValueError):
    """Parameters DeepSpeed's make_layout would fail on for this sequence length; the message names the key."""


def num_blocks(seq_len: int, block: int) -> int:
    """nb = seq_len / block; LayoutError when the block does not divide the sequence (DeepSpeed raises too)."""
    if block < 1 or seq_len % block:
        raise LayoutError(f"the sequence length {seq_len} is not a multiple of the sparse block size {block}")
    return seq_len // block


def make_layout(params: Any, num_heads: int, seq_len: int, *, rng: random.Random | None = None,
                attention: str | None = None, compact: bool = False) -> torch.Tensor:
    """The [num_heads, nb, nb] int64 layout of `params` (a dsx.schema.sparse_attention mode model, or
    dsx.sparse.spec.LocalSparseAttentionConfig) at `seq_len`.

    `rng` draws the random blocks (variable, bigbird; a fresh random.Random(0) when None). `attention` sets the
    direction of bigbird, bslongformer and local, whose classes take it but whose config block does not (the
    config parser builds them bidirectional); for fixed and variable it comes from `params`.

    compact=True returns booleans, one head when the heads share the layout ([1, nb, nb]): at 64k tokens in
    16-token blocks DeepSpeed's int64 [heads, nb, nb] holds 128 MiB per head for one pattern."""
    mode = params.mode
    if mode not in MODES:
        raise LayoutError(f"unknown sparse attention mode {mode!r} (known: {', '.join(MODES)})")
    nb = num_blocks(seq_len, params.block)
    per_head = bool(getattr(params, "different_layout_per_head", False)) and mode != "dense"
    built = num_heads if per_head else 1
    layout = torch.zeros((built, nb, nb), dtype=torch.bool if compact else torch.int64)
    if mode == "dense":
        layout[:] = 1
    else:
        rng = rng if rng is not None else random.Random(0)
        direction = direction_of(params, attention)
        for h in range(built):
            _BUILDERS[mode](layout, h, params, direction, rng)
            if mode in ("bigbird", "bslongformer") and direction == "unidirectional":
                layout = torch.tril(layout)  # DeepSpeed trims every head's future blocks after each head
    if compact or built == num_heads:
        return layout
    return layout.expand(num_heads, nb, nb).clone()


def direction_of(params: Any, attention: str | None = None) -> str:
    """"unidirectional" or "bidirectional": fixed, variable and local carry it in their block; bigbird and
    bslongformer take `attention` (their classes' default when None: bidirectional)."""
    if params.mode in ("fixed", "variable", "local"):
        return params.attention
    return attention or "bidirectional"


# ------------------------------------------------------------------------------------------------ the parts


def _index_grids(nb: int) -> tuple[torch.Tensor, torch.Tensor]:
    rows = torch.arange(nb).unsqueeze(1)
    cols = torch.arange(nb).unsqueeze(0)
    return rows, cols


def _windows(layout: torch.Tensor, h: int, starts: list[int], ends: list[int], direction: str) -> None:
    """Local windows [start, end): every block of a window attends to the window's blocks (only earlier and
    itself when unidirectional)."""
    nb = layout.shape[1]
    window = torch.full((nb,), -1, dtype=torch.int64)
    for number, (start, end) in enumerate(zip(starts, ends)):
        window[start:end] = number
    rows, cols = _index_grids(nb)
    same = (window.unsqueeze(1) == window.unsqueeze(0)) & (window.unsqueeze(1) >= 0)
    if direction == "unidirectional":
        same &= cols <= rows
    layout[h][same] = 1


def _sliding(layout: torch.Tensor, h: int, width: int, direction: str, *, causal_band: bool = False) -> None:
    """The band |row - col| <= width // 2 (only col <= row for the local mode's unidirectional band)."""
    nb = layout.shape[1]
    if nb < width:
        raise LayoutError(f"num_sliding_window_blocks {width} is more than the {nb} blocks of a row")
    half = width // 2
    rows, cols = _index_grids(nb)
    band = (cols >= rows - half) & (cols <= rows + half)
    if causal_band and direction == "unidirectional":
        band &= cols <= rows
    layout[h][band] = 1


def _random(layout: torch.Tensor, h: int, count: int, direction: str, rng: random.Random) -> None:
    """`count` random blocks per row, one rng.sample per row in row order (from the blocks up to the row when
    unidirectional)."""
    nb = layout.shape[1]
    if nb < count:
        raise LayoutError(f"num_random_blocks {count} is more than the {nb} blocks of a row")
    for row in range(nb):
        population = range(nb) if direction == "bidirectional" else range(row + 1)
        if count > len(population):
            raise LayoutError(f"num_random_blocks {count} with unidirectional attention: block row {row} has only "
                              f"{len(population)} earlier block(s) to draw from (DeepSpeed's random.sample fails "
                              "the same way)")
        layout[h, row, rng.sample(population, count)] = 1


def _global_ranges(params: Any) -> list[tuple[int, int | None]]:
    """(start, end) per global entry: end None for a single index."""
    ends = params.global_block_end_indices
    if ends is None:
        return [(index, None) for index in params.global_block_indices]
    return list(zip(params.global_block_indices, ends))


def _globals(layout: torch.Tensor, h: int, params: Any, direction: str, *, rows_too: bool) -> None:
    """Global blocks of variable / bslongformer: their columns (from their own row on when unidirectional) and,
    with rows_too, their rows. Indices follow Python indexing and slicing, as DeepSpeed's do."""
    nb = layout.shape[1]
    for start, end in _global_ranges(params):
        if start >= nb:
            continue
        picked = start if end is None else slice(start, min(end, nb))
        first_row = 0 if direction == "bidirectional" else start
        if rows_too:
            layout[h, picked, :] = 1
        layout[h, first_row:, picked] = 1


# ------------------------------------------------------------------------------------------------ the modes


def _fixed(layout: torch.Tensor, h: int, params: Any, direction: str, rng: random.Random) -> None:
    nb = layout.shape[1]
    size, count = params.num_local_blocks, params.num_global_blocks
    starts = list(range(0, nb, size))
    _windows(layout, h, starts, [min(s + size, nb) for s in starts], direction)
    # Global blocks: in window w the `count` blocks ending (1 + h % patterns) * count before the window's end.
    first = size - (1 + h % params.num_different_global_patterns) * count
    whole = nb - nb % size
    groups = [(start, start + count) for start in range(first, whole, size)]
    if whole < nb:  # a short last window: its global blocks are moved inside the sequence
        start = min(whole + first, nb - count)
        groups.append((start, start + count))
    for start, end in groups:
        first_row = 0 if direction == "bidirectional" else start
        layout[h, first_row:, start:end] = 1
        if params.horizontal_global_attention:
            layout[h, start:end, :] = 1


def _variable(layout: torch.Tensor, h: int, params: Any, direction: str, rng: random.Random) -> None:
    nb = layout.shape[1]
    _random(layout, h, params.num_random_blocks, "bidirectional", rng)  # variable draws from every block
    sizes = list(params.local_window_blocks)
    starts, ends, start = [], [], 0
    for size in sizes:
        starts.append(start)
        ends.append(min(start + size, nb))
        start += size
    while start < nb:  # the last size repeats over the rest of the sequence
        starts.append(start)
        ends.append(min(start + sizes[-1], nb))
        start += sizes[-1]
    _windows(layout, h, starts, ends, direction)
    _globals(layout, h, params, direction, rows_too=params.horizontal_global_attention)


def _bigbird(layout: torch.Tensor, h: int, params: Any, direction: str, rng: random.Random) -> None:
    nb = layout.shape[1]
    _random(layout, h, params.num_random_blocks, direction, rng)
    _sliding(layout, h, params.num_sliding_window_blocks, direction)
    count = params.num_global_blocks
    if nb < count:
        raise LayoutError(f"num_global_blocks {count} is more than the {nb} blocks of a row")
    layout[h, 0:count, :] = 1
    layout[h, :, 0:count] = 1


def _bslongformer(layout: torch.Tensor, h: int, params: Any, direction: str, rng: random.Random) -> None:
    _sliding(layout, h, params.num_sliding_window_blocks, direction)
    _globals(layout, h, params, "bidirectional", rows_too=True)


def _local(layout: torch.Tensor, h: int, params: Any, direction: str, rng: random.Random) -> None:
    _sliding(layout, h, params.num_sliding_window_blocks, direction, causal_band=True)


_BUILDERS = {"fixed": _fixed, "variable": _variable, "bigbird": _bigbird, "bslongformer": _bslongformer,
             "local": _local}


def density(layout: torch.Tensor) -> float:
    """Share of the layout's blocks that are attended (1.0 for dense), over all heads."""
    return float(layout.count_nonzero()) / layout.numel() if layout.numel() else 0.0
