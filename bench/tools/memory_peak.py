"""What holds a GPU's memory at its peak, from the allocation history a rank wrote under DSX_MEMORY_HISTORY=DIR
(dsx/rank/memory_history.py): the history is replayed to the moment the most bytes were allocated, and the blocks
alive then are summed by the code that allocated them, beside what `dsx estimate` says the row's peak holds.

    DSX_MEMORY_HISTORY=$OUT/hist python3 -m dsx run ... --results $OUT/rows.jsonl
    python3 bench/tools/memory_peak.py $OUT/hist/RUN_ID/rank0.pickle --row $OUT/rows.jsonl --out $OUT/peak.md

Why: `dsx estimate` predicts memory by parts (parameters, optimizer states, checkpointed inputs, the loss's tiles,
...); where a row's peak differs from the prediction, the parts are what must be checked, not the total.
"""

from __future__ import annotations

import argparse
import json
import pickle
from collections import defaultdict
from pathlib import Path

GIB = 1024**3
FREES = ("free_requested", "free_completed")  # whichever comes first ends the block
OWN_CODE = ("/deepspeed/", "/transformers/", "/dsx/", "/liger_kernel/")  # frames worth naming (not torch's own)


def peak_blocks(events: list[dict]) -> tuple[int, int, dict[int, dict]]:
    """(peak bytes, index of the event that reached it, the blocks alive then by address): allocations count from
    'alloc' to 'free_requested' (as torch.cuda.max_memory_allocated counts them: a block another stream still uses
    is 'free_completed' later, and ZeRO-3's all-gathers on 2 GPUs logged no completion at all); a free of a block
    allocated before the history began is skipped, and an address allocated again ends its earlier block."""
    live: dict[int, int] = {}
    current = peak = peak_at = 0
    for i, event in enumerate(events):
        if event["action"] == "alloc":
            current += event["size"] - live.get(event["addr"], 0)  # an address reused: its free was not recorded
            live[event["addr"]] = event["size"]
            if current > peak:
                peak, peak_at = current, i
        elif event["action"] in FREES and event["addr"] in live:
            current -= live.pop(event["addr"])
    blocks: dict[int, dict] = {}
    for event in events[:peak_at + 1]:
        if event["action"] == "alloc":
            blocks[event["addr"]] = event
        elif event["action"] in FREES:
            blocks.pop(event["addr"], None)
    return peak, peak_at, blocks


def site(frames: list[dict], depth: int = 2) -> str:
    """The innermost `depth` frames of dsx, DeepSpeed, transformers or Liger code that led to an allocation, as
    'file.py:function:line < caller...'; torch's own frames only where nothing else is on the stack."""
    own = [f for f in frames if any(part in f["filename"] for part in OWN_CODE)]
    chosen = (own or frames)[:depth]
    return " < ".join(f"{Path(f['filename']).name}:{f['name']}:{f['line']}" for f in chosen) or "(no stack)"


def by_site(blocks: dict[int, dict], depth: int = 2) -> list[tuple[str, int, int]]:
    """(site, bytes, blocks) of the live blocks, the most bytes first."""
    total: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for event in blocks.values():
        entry = total[site(event.get("frames") or [], depth)]
        entry[0] += event["size"]
        entry[1] += 1
    return sorted(((name, n, count) for name, (n, count) in total.items()), key=lambda item: -item[1])


def estimate_parts(rows_path: str) -> tuple[dict[str, int], float, int | None] | None:
    """dsx estimate's breakdown at its peak for the last row of a JSONL, its peak, and the row's measured peak;
    None when the file has no row."""
    from dsx.estimate import estimate, setup_of_row
    from dsx.results import read_rows

    rows = read_rows(rows_path) if Path(rows_path).exists() else []
    if not rows:
        return None
    row = rows[-1]
    e = estimate(setup_of_row(row), search_max=False)
    return e.breakdown, e.peak_allocated, row["memory"]["max"].get("peak_allocated")


def report(snapshot: dict, rows_path: str | None, top: int, depth: int) -> tuple[str, list[dict]]:
    """The markdown report and its figures (per device: the peak and every site's bytes)."""
    lines, figures = [], []
    for device, events in enumerate(snapshot["device_traces"]):
        if not events:
            continue
        peak, at, blocks = peak_blocks(events)
        ranked = by_site(blocks, depth)
        figures.append({"device": device, "peak": peak, "sites": ranked})
        lines.append(f"## device {device}: {len(events):,} events, peak {peak / GIB:.2f} GiB allocated at event "
                     f"{at:,} ({events[at]['action']} of {events[at]['size'] / 2**20:,.1f} MiB by "
                     f"{site(events[at].get('frames') or [], depth)})\n")
        lines.append("| GiB | blocks | allocated by (innermost dsx / DeepSpeed / transformers frames) |")
        lines.append("|---|---|---|")
        for name, n, count in ranked[:top]:
            lines.append(f"| {n / GIB:.3f} | {count} | `{name}` |")
        rest = ranked[top:]
        if rest:
            lines.append(f"| {sum(n for _, n, _ in rest) / GIB:.3f} | {sum(c for _, _, c in rest)} | "
                         f"{len(rest)} other sites |")
        lines.append("")
    estimated = estimate_parts(rows_path) if rows_path else None
    if estimated:
        parts, predicted, measured = estimated
        lines.append(f"dsx estimate for the row: peak {predicted / GIB:.2f} GiB"
                     + (f" (the row measured {measured / GIB:.2f} GiB)" if measured else ""))
        lines.append("")
        lines.append("| GiB | part |")
        lines.append("|---|---|")
        lines += [f"| {n / GIB:.3f} | {name} |" for name, n in parts.items()]
        lines.append("")
    return "\n".join(lines), figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("snapshot", help="DIR/<run id>/rank<N>.pickle written under DSX_MEMORY_HISTORY=DIR")
    parser.add_argument("--row", help="the run's rows (JSONL): dsx estimate's parts for its last row beside")
    parser.add_argument("--top", type=int, default=25, help="sites listed (the rest summed)")
    parser.add_argument("--depth", type=int, default=2, help="frames named per site")
    parser.add_argument("--out", help="also write the report here")
    args = parser.parse_args()
    with open(args.snapshot, "rb") as f:
        snapshot = pickle.load(f)
    text, figures = report(snapshot, args.row, args.top, args.depth)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
        Path(args.out).with_suffix(".json").write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
