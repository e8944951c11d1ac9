"""When block-sparse FlexAttention is faster than dense SDPA: a small model of both kernels' time, fitted on dsx's
own kernel probes, used by `--sparse-attention auto` and by the note a run prints when dense attention is predicted
faster.

The probes (bench/sparse/kernel.py on an H100: torch 2.11, dsx's SparseAttention with compiled flex_attention
against causal SDPA, bf16, batch 1, 16 heads, head dim 64, forward + backward, 128-token blocks) timed two
DeepSpeed layouts with the config parser's defaults:

    layout    seq      kept tiles/head   flex ms   dense ms
    bigbird   16,384        381           1.52       4.43     (bench/sparse/h100_rest/kernel.txt)
    bigbird   32,768        765           2.71      17.99
    bigbird   65,536      1,533           5.01      68.56
    fixed     16,384      2,304           2.91       4.52     (bench/sparse/h100_profile/kernel_fixed.txt)
    fixed     32,768      8,704           8.36      18.01
    fixed     65,536     33,792          28.00      68.87

Both kernels work in 128 x 128 tiles. Dense SDPA computes all of them: dense time = DENSE_MS_PER_TILE x heads x
batch x tiles (a causal kernel skips those above the diagonal; 16k-64k agree within 4%). FlexAttention's time is
not the kept tiles alone: bigbird keeps ~3 tiles per row of query tiles and costs ~4x more per tile than fixed
(~34 per row at 32k), so each row of query tiles has a cost of its own (loading its queries, its softmax state,
writing its output). The least-squares plane FLEX_MS + FLEX_MS_PER_ROW x rows + FLEX_MS_PER_TILE x kept tiles
through the six points (rows = query tiles x heads x batch) reproduces each within 3%; a line through kept tiles
alone (the model before the fixed probe) priced fixed at 32k at 0.70x dense, measured 2.15x.

What it does not know: below 16k the probes' fixed costs (launches) matter, where it predicts dense a little
faster than measured (bigbird at 4k 0.41x, measured 0.67x): `auto` errs towards dense there; partially masked tiles
(layout blocks finer than 128 tokens) cost more than whole ones; other head dims and GPUs; everything in a step
that is not attention. So `auto` asks for AUTO_MARGIN, and end-to-end figures are measured (bench/sparse/README.md),
not predicted.
"""

from __future__ import annotations

TILE = 128
HEADS = 16
PROBES = (  # (layout, seq, kept 128-tiles per head, flex ms, dense ms): the probes' lines from 16k on
    ("bigbird", 16384, 381, 1.5186010000007855, 4.427911000000506),
    ("bigbird", 32768, 765, 2.708860500007404, 17.992776499994534),
    ("bigbird", 65536, 1533, 5.014244999998141, 68.5577214999995),
    ("fixed", 16384, 2304, 2.9117925000008427, 4.520254999995643),
    ("fixed", 32768, 8704, 8.36027350000279, 18.006100499995625),
    ("fixed", 65536, 33792, 27.9972459999982, 68.8745510000004),
)
"""bench/sparse/h100_rest/kernel.txt (bigbird) and bench/sparse/h100_profile/kernel_fixed.txt (fixed), as measured;
tests/test_sparse_planning.py checks these against the committed files."""


def dense_tiles(seq_len: int, causal: bool) -> int:
    """128-token tiles a dense kernel computes per head (causal: on and below the diagonal)."""
    nt = -(-seq_len // TILE)
    return nt * (nt + 1) // 2 if causal else nt * nt


def _solve3(a: list[list[float]], b: list[float]) -> list[float]:
    """x with a x = b for a 3 x 3 system (Cramer's rule: the normal equations of a 3-term least squares)."""
    def det(m):
        return (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
                + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]))
    d = det(a)
    return [det([[b[i] if j == k else a[i][j] for j in range(3)] for i in range(3)]) / d for k in range(3)]


def _fit() -> tuple[float, float, float, float]:
    """(DENSE_MS_PER_TILE, FLEX_MS, FLEX_MS_PER_ROW, FLEX_MS_PER_TILE) from PROBES."""
    dense = [d / (dense_tiles(seq, True) * HEADS) for _, seq, _, _, d in PROBES]
    xs = [(1.0, seq // TILE * HEADS, kept * HEADS) for _, seq, kept, _, _ in PROBES]
    ys = [f for *_, f, _ in PROBES]
    normal = [[sum(x[i] * x[j] for x in xs) for j in range(3)] for i in range(3)]
    rhs = [sum(x[i] * y for x, y in zip(xs, ys)) for i in range(3)]
    return (sum(dense) / len(dense), *_solve3(normal, rhs))


DENSE_MS_PER_TILE, FLEX_MS, FLEX_MS_PER_ROW, FLEX_MS_PER_TILE = _fit()
AUTO_MARGIN = 1.2
"""`auto` runs sparse attention only where it predicts the attention kernels at least this much faster."""


def dense_ms(seq_len: int, heads: int, batch: int, causal: bool) -> float:
    return DENSE_MS_PER_TILE * heads * batch * dense_tiles(seq_len, causal)


def flex_ms(seq_len: int, heads: int, batch: int, kept_tiles: int) -> float:
    """kept_tiles: tiles the BlockMask keeps, summed over the heads (per sequence of the batch)."""
    rows = -(-seq_len // TILE) * heads
    return FLEX_MS + (FLEX_MS_PER_ROW * rows + FLEX_MS_PER_TILE * kept_tiles) * batch


def speedup(seq_len: int, heads: int, batch: int, causal: bool, kept_tiles: int) -> float:
    """Predicted dense SDPA time / sparse FlexAttention time for one attention call, forward + backward."""
    return dense_ms(seq_len, heads, batch, causal) / flex_ms(seq_len, heads, batch, kept_tiles)
