"""When block-sparse FlexAttention is faster than dense SDPA: a small model of both kernels' time, fitted on the
one measurement we have (the H100 kernel probe in bench/gpu/README.md), used by `--sparse-attention auto` and by
the note a run prints when dense attention is predicted faster.

The probe (torch 2.11, compiled flex_attention, bf16, batch 1, 16 heads, head dim 64, forward + backward) timed a
layout of 128-token blocks, a sliding window of 3 blocks and 1 global block, bidirectional, against dense SDPA
(flash):

    seq      flex ms   dense ms
    4,096     2.76      0.70
    16,384    2.05      8.35
    65,536    7.2     131

Both kernels do their work in 128 x 128 tiles. Dense SDPA computes all of them: 8.35 ms / (16 heads x 128^2 tiles)
and 131 ms / (16 x 512^2) agree within 2%, so dense time = DENSE_MS_PER_TILE x heads x batch x tiles (a causal
dense kernel skips the tiles above the diagonal). FlexAttention computes the tiles the BlockMask keeps: the line
through the 16k and 64k points gives FLEX_MS + FLEX_MS_PER_TILE x kept tiles, and it never ran below about 2 ms
per call (2.76 ms at 4k is even slower than at 16k), so the model takes the larger of that floor (FLEX_FLOOR_MS)
and the line. It reproduces 4.1x at 16k and 18x at 64k and says dense wins at 4k (measured 0.25x; the model
says 0.25x too, through the floor).

What it does not know: partially masked tiles (layout blocks finer than 128 tokens) cost more than the probe's
whole tiles, other head dims and GPUs, and everything in a step that is not attention. So `auto` asks for
AUTO_MARGIN, and end-to-end figures are measured (bench/sparse/README.md), not predicted.
"""

from __future__ import annotations

PROBE = {
    "source": "bench/gpu/README.md (H100, torch 2.11, compiled flex_attention vs SDPA flash, bf16, batch 1, 16 heads, "
              "head dim 64, forward+backward)",
    "layout": "128-token blocks: sliding window of 3 blocks + 1 global block, bidirectional",
    "heads": 16,
    "seq": (4096, 16384, 65536),
    "flex_ms": (2.76, 2.05, 7.2),
    "dense_ms": (0.70, 8.35, 131.0),
}
TILE = 128


def probe_tiles(seq_len: int) -> int:
    """Tiles the probe's layout keeps at seq_len: the band of 3 around the diagonal plus row 0 and column 0."""
    nt = seq_len // TILE
    band = 3 * nt - 2
    return band + 2 * (nt - 2)  # row 0 and column 0 outside the band (tiles 2 .. nt-1 of each)


def _fit() -> tuple[float, float, float]:
    heads = PROBE["heads"]
    (_, s16, s64), (_, f16, f64), (_, d16, d64) = PROBE["seq"], PROBE["flex_ms"], PROBE["dense_ms"]
    dense_per_tile = (d16 / (s16 // TILE) ** 2 + d64 / (s64 // TILE) ** 2) / 2 / heads
    t16, t64 = probe_tiles(s16) * heads, probe_tiles(s64) * heads
    flex_per_tile = (f64 - f16) / (t64 - t16)
    return dense_per_tile, flex_per_tile, f16 - flex_per_tile * t16


DENSE_MS_PER_TILE, FLEX_MS_PER_TILE, FLEX_MS = _fit()
FLEX_FLOOR_MS = min(PROBE["flex_ms"])
"""The fastest flex call the probe measured (2.05 ms at 16k): shorter sequences were not faster."""
AUTO_MARGIN = 1.2
"""`auto` runs sparse attention only where it predicts the attention kernels at least this much faster."""


def dense_tiles(seq_len: int, causal: bool) -> int:
    """128-token tiles a dense kernel computes per head (causal: on and below the diagonal)."""
    nt = -(-seq_len // TILE)
    return nt * (nt + 1) // 2 if causal else nt * nt


def dense_ms(seq_len: int, heads: int, batch: int, causal: bool) -> float:
    return DENSE_MS_PER_TILE * heads * batch * dense_tiles(seq_len, causal)


def flex_ms(kept_tiles: int, batch: int) -> float:
    """kept_tiles: tiles the BlockMask keeps, summed over the heads."""
    return max(FLEX_FLOOR_MS, FLEX_MS + FLEX_MS_PER_TILE * kept_tiles * batch)


def speedup(seq_len: int, heads: int, batch: int, causal: bool, kept_tiles: int) -> float:
    """Predicted dense SDPA time / sparse FlexAttention time for one attention call, forward + backward."""
    return dense_ms(seq_len, heads, batch, causal) / flex_ms(kept_tiles, batch)
