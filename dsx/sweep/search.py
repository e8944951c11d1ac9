"""The micro-batches of one configuration: the `auto` search for the out-of-memory boundary, or a fixed list.

Both only call a probe (one trial: fit, oom or fail), so they are plain arithmetic, tested without launching.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

Probe = Callable[[int, str], str]
"""probe(micro_batch, search) -> 'fit' | 'oom' | 'fail'."""


@dataclass
class SearchResult:
    largest_fit: int | None = None
    first_oom: int | None = None
    stopped: str | None = None
    """Why the search ended early: a trial failed for another reason than memory, or --mb-max was reached."""
    tried: list[tuple[int, str]] = field(default_factory=list)


def search_micro_batch(probe: Probe, start: int, maximum: int, tolerance: float = 0.0,
                       step: float = 2.0) -> SearchResult:
    """Grow x`step` from `start` until a trial runs out of memory (or `maximum` fits), then bisect the boundary.

    Memory grows with the micro-batch, so one OOM bounds everything above it. When `start` itself does not fit
    the bisection runs between 0 and `start` (x2 search), or it first shrinks /`step` until one fits (a predicted
    start, step < 2: the boundary is near). A trial that fails for another reason than memory ends the search."""
    result = SearchResult()

    class Failed(Exception):
        pass

    def fits(mb: int, search: str) -> bool:
        outcome = probe(mb, search)
        result.tried.append((mb, outcome))
        if outcome == "fail":
            result.stopped = f"micro-batch {mb} failed (not out of memory); search stopped"
            raise Failed
        if outcome == "oom":
            result.first_oom = mb
            return False
        result.largest_fit = mb
        return True

    try:
        mb = min(start, maximum)
        while fits(mb, "grow"):
            if mb >= maximum:
                result.stopped = f"--mb-max {maximum} fits; the out-of-memory boundary lies above it"
                return result
            mb = min(max(mb + 1, int(mb * step)), maximum)
        if result.largest_fit is None and step < 2:
            while mb > 1:
                mb = max(1, min(mb - 1, int(mb / step)))
                if fits(mb, "shrink"):
                    break
        low, high = result.largest_fit or 0, result.first_oom
        while high - low > max(1, int(tolerance * low)):
            mid = (low + high) // 2
            if fits(mid, "bisect"):
                low = mid
            else:
                high = mid
    except Failed:
        pass
    return result


def fixed_micro_batches(probe: Probe, values: list[int]) -> SearchResult:
    """Run the given micro-batches in increasing order; after an OOM the larger ones are skipped (they would OOM)."""
    result = SearchResult()
    for mb in sorted(set(values)):
        outcome = probe(mb, "fixed")
        result.tried.append((mb, outcome))
        if outcome == "oom":
            result.first_oom = mb
            skipped = [v for v in sorted(set(values)) if v > mb]
            if skipped:
                result.stopped = f"micro-batch {mb} ran out of memory; skipped {', '.join(map(str, skipped))}"
            break
        if outcome == "fit":
            result.largest_fit = mb
    return result

