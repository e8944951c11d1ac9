"""Synthetic (learnable) against random data, from one command's alternating rows: each pair's tokens/s ratio and
the median over pairs (bench/parity/h100.sh's `data` part).

    python bench/parity/pairs.py ROWS.jsonl
"""

from __future__ import annotations

import statistics
import sys

from dsx.results import read_rows


def main(path: str) -> None:
    rows = [r for r in read_rows(path) if r["status"] == "ok" and r.get("data")]
    pairs = []
    for first, second in zip(rows[::2], rows[1::2]):
        by = {r["data"]["source"]: r for r in (first, second)}
        if set(by) == {"synthetic", "random"}:
            pairs.append(by)
    for i, pair in enumerate(pairs, 1):
        s, r = (pair[k]["figures"]["tokens_per_s"] for k in ("synthetic", "random"))
        waits = {k: pair[k]["data"]["wait_s_median"] * 1e3 for k in pair}
        losses = {k: pair[k]["ranks"][0]["loss"][-1] for k in pair}
        print(f"pairs {i}: synthetic {s:,.0f} tokens/s, random {r:,.0f}: {s / r:.4f}x; data wait "
              f"{waits['synthetic']:.1f} / {waits['random']:.1f} ms a step; last loss {losses['synthetic']:.3f} / "
              f"{losses['random']:.3f}")
    if pairs:
        ratios = [p["synthetic"]["figures"]["tokens_per_s"] / p["random"]["figures"]["tokens_per_s"] for p in pairs]
        print(f"ratio synthetic / random tokens/s: median {statistics.median(ratios):.4f} over {len(pairs)} pair(s) "
              f"(min {min(ratios):.4f}, max {max(ratios):.4f})")


if __name__ == "__main__":
    main(sys.argv[1])
