"""DSX_MEMORY_HISTORY=DIR: every CUDA allocation of a rank recorded with its Python stack, dumped to
DIR/<run id>/rank<N>.pickle when the rank ends (after an OOM too; a sweep's trials each in a folder of their own),
to see what holds the memory at the peak (bench/tools/memory_peak.py reads it; pytorch.org/memory_viz draws it).

A diagnostic, off by default: recording costs host time on every allocation (a long-context step with few, large
allocations showed none: 11.78 s with it, 11.85 without, bench/tools/h200_memory_peak), so a row measured with it
says so in its notes.
"""

from __future__ import annotations

import os
from pathlib import Path

from dsx.rank.faults import one_line

ENV = "DSX_MEMORY_HISTORY"
MAX_ENTRIES = 2_000_000  # allocation events kept (a ring buffer): enough for deepspeed.initialize + a few steps


def start(torch, on_cuda: bool, report, run_id: str) -> Path | None:
    """Record from now on; the folder to dump into (DIR/<run id>), or None when not asked for (or on CPU ranks)."""
    where = os.environ.get(ENV)
    if not where:
        return None
    if not on_cuda:
        report.notes.append(f"{ENV} ignored: CPU ranks have no CUDA allocator to record")
        return None
    # stacks of allocations only: with the frees' stacks too (context="all") torch 2.11 broke a long-context rank
    # ("SystemError: <built-in function cross_entropy_loss> returned NULL without setting an exception")
    torch.cuda.memory._record_memory_history(context="alloc", stacks="python", max_entries=MAX_ENTRIES)
    report.notes.append(f"{ENV}: every CUDA allocation recorded with its Python stack (its host time is in the steps)")
    return Path(where) / run_id


def dump(torch, where: Path, rank: int, report) -> None:
    """Write DIR/<run id>/rank<N>.pickle; a failure to write is a note, never the rank's failure."""
    try:
        where.mkdir(parents=True, exist_ok=True)
        path = where / f"rank{rank}.pickle"
        torch.cuda.memory._dump_snapshot(str(path))
        report.notes.append(f"{ENV}: allocation history in {path}")
    except Exception as exc:  # noqa: BLE001 - the run's figures matter more than the diagnostic
        report.notes.append(f"{ENV}: could not write the allocation history: {one_line(exc)}")
