"""The micro-batches of one configuration: the `auto` search for the out-of-memory boundary, or a fixed list.

Both only call a probe (one trial: fit, oom or fail), so they are plain arithmetic, tested without launching.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

Probe = Callable[[int, str], "str | tuple[str, float | None]"]
"""probe(micro_batch, search) -> 'fit' | 'oom' | 'fail', or (that, tokens/s of the trial) so that the search can
stop where throughput has gone flat (flat_stop)."""

MB_FLAT = 0.01
"""The default --mb-flat: a micro-batch search stops when the sizes it has left could add less than 1% tokens/s."""


@dataclass
class SearchResult:
    largest_fit: int | None = None
    first_oom: int | None = None
    stopped: str | None = None
    """Why the search ended early: a trial failed for another reason than memory, --mb-max was reached, or the
    throughput went flat (flat_stop)."""
    tried: list[tuple[int, str]] = field(default_factory=list)
    speeds: dict[int, float] = field(default_factory=dict)
    """Tokens/s of each fitting micro-batch whose probe reported it."""


def flat_stop(speeds: dict[int, float], first_oom: int, flat: float) -> str | None:
    """Why the sizes left below the first OOM cannot matter, or None.

    From the two largest fits a < b: throughput grows with the micro-batch at a falling rate (the fixed cost of a
    step is spread ever thinner), so no size up to first_oom - 1 gains more than the last step's rate carried on:
    (t_b - t_a) / (b - a) x (first_oom - 1 - b). When that is below `flat` of t_b (or t_b did not beat t_a), the
    search stops: on gpt2 with ZeRO-3 offload, 53 -> 60 -> 63 measured within 1% of one another."""
    if flat <= 0:
        return None
    fits = sorted(mb for mb in speeds if mb < first_oom)
    if len(fits) < 2:
        return None
    a, b = fits[-2], fits[-1]
    ta, tb = speeds[a], speeds[b]
    if tb <= 0:
        return None
    gained = tb / ta - 1 if ta > 0 else float("inf")
    bound = max(0.0, (tb - ta) / (b - a) * (first_oom - 1 - b) / tb)
    if bound >= flat:
        return None
    return (f"throughput flat: micro-batch {a} -> {b} changed tokens/s by {gained:+.1%}, so the sizes left below the "
            f"OOM at {first_oom} could add at most {bound:.1%} (< --mb-flat {flat:.0%}); search stopped")


def search_micro_batch(probe: Probe, start: int, maximum: int, tolerance: float = 0.0,
                       step: float = 2.0, flat: float = 0.0, candidates: list[int] | None = None) -> SearchResult:
    """Grow x`step` from `start` until a trial runs out of memory (or `maximum` fits), then bisect the boundary.

    Memory grows with the micro-batch, so one OOM bounds everything above it. When `start` itself does not fit
    the bisection runs between 0 and `start` (x2 search), or it first shrinks /`step` until one fits (a predicted
    start, step < 2: the boundary is near). A trial that fails for another reason than memory ends the search;
    with `flat` > 0, so does a throughput that the sizes left cannot raise by `flat` (flat_stop). `candidates`
    (ascending, up to `maximum`): the only micro-batches it may try (cap_filling_micro_batches), each move going
    to the nearest of them on its side."""
    result = SearchResult()
    allowed = sorted(c for c in set(candidates) if 1 <= c <= maximum) if candidates else None

    def at_least(mb: int) -> int:
        return mb if allowed is None else next((c for c in allowed if c >= mb), allowed[-1])

    def at_most(mb: int) -> int:
        return mb if allowed is None else next((c for c in reversed(allowed) if c <= mb), allowed[0])

    def middle(low: int, high: int) -> int | None:
        if allowed is None:
            return (low + high) // 2
        between = [c for c in allowed if low < c < high]
        return between[(len(between) - 1) // 2] if between else None

    class Failed(Exception):
        pass

    def fits(mb: int, search: str) -> bool:
        outcome = probe(mb, search)
        if isinstance(outcome, tuple):
            outcome, speed = outcome
            if outcome == "fit" and speed:
                result.speeds[mb] = speed
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
        mb = at_most(min(start, maximum))
        top = maximum if allowed is None else allowed[-1]
        while fits(mb, "grow"):
            if mb >= top:
                result.stopped = (
                    f"--mb-max {maximum} fits; the out-of-memory boundary lies above it" if allowed is None
                    else f"micro-batch {top} fits, the largest of the candidates (the global-batch cap)")
                return result
            mb = min(at_least(max(mb + 1, int(mb * step))), top)
        if result.largest_fit is None and step < 2:
            while mb > (1 if allowed is None else allowed[0]):
                mb = at_most(max(1, min(mb - 1, int(mb / step))))
                if fits(mb, "shrink"):
                    break
        low, high = result.largest_fit or 0, result.first_oom
        while high - low > max(1, int(tolerance * low)):
            result.stopped = flat_stop(result.speeds, high, flat)
            if result.stopped:
                break
            mid = middle(low, high)
            if mid is None:
                break
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
        if isinstance(outcome, tuple):  # (outcome, tokens/s): as search_micro_batch reads it
            outcome, speed = outcome
            if outcome == "fit" and speed:
                result.speeds[mb] = speed
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



def search_goes_on(run: Callable[[Probe], SearchResult], answers: list) -> bool:
    """Whether the search `run(probe)` would try another micro-batch after the probes answered `answers` in order
    (so that progress can say a configuration is done as its last trial ends, not when the next one starts).

    Both searches are plain arithmetic on their probes' answers, so replaying the answers and stopping at the first
    call past them tells; nothing is launched."""
    replay = iter(answers)

    class _Next(Exception):
        pass

    def probe(micro_batch: int, search: str):
        try:
            return next(replay)
        except StopIteration:
            raise _Next from None
    try:
        run(probe)
    except _Next:
        return True
    return False
