"""What "bytes" means in a row's `comm`, and the ranks' counts gathered into it.

Two figures per collective and timed step (RunRow.comm.collectives):
- logged_bytes: DeepSpeed's comms logger's message size, unchanged: element_size x numel of the op's input tensor
  (dsx.rank.comms says where DeepSpeed computes it). For an all-gather that is this rank's shard.
- bytes: the ZeRO paper's data volume, the unit its "2Ψ per step" and "3Ψ per step" are in: an all-reduce of T
  bytes counts 2T (a reduce-scatter plus an all-gather of T), an all-gather counts the gathered output (logged x
  the ranks of the group it gathered over, which the rank reads from each call: hpZ's secondary partition gathers
  over fewer ranks than the world; logged x world size for a rank that did not say), a reduce-scatter, an
  all-to-all, a broadcast, a send or a recv its input. What one rank actually puts on the wire is smaller by about
  (n-1)/n for the ring collectives (NCCL's "bus bandwidth" factor): 1/2 of it on 2 ranks.

Per step is the mean over the counted steps: the warm-up steps after the first, or a 1-bit run's timed steps (its
phases each get their own mean); dsx.rank.comms says which and why. `bytes_per_param` is
bytes / the model's parameters: 6 for DeepSpeed's ZeRO-1 in bf16 (2 x 2 bytes of gradient all-reduce + 2 of
parameter all-gather), where the paper's 2Ψ would be 4.
"""

from __future__ import annotations

import statistics

from dsx.rank.protocol import GATHERS, RankReport
from dsx.results import CollectiveComm, Comm, CommPhase, CommPredicted

VOLUME_FACTORS = {"all_reduce": 2, "all_reduce_coalesced": 2, "inference_all_reduce": 2}
"""Log name -> bytes counted per logged byte; all-gathers (GATHERS) count the ranks of their group, everything else
1."""

_BYTES = ("bytes: the ZeRO paper's volume (dsx.comm.volume: all-reduce 2x, all-gather x the ranks of its group, "
          "others 1x the logged input size)")
METHOD = {"warm-up": "DeepSpeed's comms logger (comms_logger, prof_all) over the warm-up steps after the first, off in "
                     "the timed steps (it synchronises the device after every collective); " + _BYTES,
          "timed": "DeepSpeed's comms logger (comms_logger, prof_all) over the timed steps; " + _BYTES + "; the logger "
                   "synchronises the device after every collective, inside the timed steps"}
"""What a row's comm.method says, by where the logger counted (dsx.rank.comms)."""


def volume_bytes(name: str, logged_bytes: float, world_size: int, gathered_bytes: float | None = None) -> float:
    if name in GATHERS:
        return float(gathered_bytes) if gathered_bytes is not None else float(logged_bytes) * world_size
    return float(logged_bytes) * VOLUME_FACTORS.get(name, 1)


def _per_step(report: RankReport, world_size: int, steps: list[int] | None = None) -> dict[str, CollectiveComm]:
    """A rank's collectives, each its mean over `steps` (default: all its timed steps)."""
    log = report.comm
    chosen = [log.steps[i] for i in (steps if steps is not None else range(len(log.steps))) if i < len(log.steps)]
    if not chosen:
        return {}
    names = sorted({name for step in chosen for name in step})
    out = {}
    for name in names:
        calls = sum(step[name].calls for step in chosen if name in step) / len(chosen)
        logged = sum(step[name].logged_bytes for step in chosen if name in step) / len(chosen)
        counted = [step[name].gathered_bytes for step in chosen if name in step]
        gathered = sum(counted) / len(chosen) if counted and None not in counted else None
        out[name] = CollectiveComm(calls_per_step=calls, logged_bytes_per_step=logged,
                                   bytes_per_step=volume_bytes(name, logged, world_size, gathered))
    return out


def _total(collectives: dict[str, CollectiveComm]) -> float:
    return sum(c.bytes_per_step for c in collectives.values())


def comm_of(ranks: list[RankReport | None], world_size: int, params: int | None,
            step_times: list[float] | None = None, predicted: CommPredicted | None = None) -> Comm | None:
    """The row's `comm` from every rank's counts (None when no rank counted anything). world_size: the ranks an
    all-gather spans (a pipeline's data-parallel size); step_times: the row's per-step times (slowest rank), for
    the 1-bit phases' step time."""
    counted = [r for r in ranks if r is not None and r.comm is not None and r.comm.steps]
    first = next((r for r in ranks if r is not None and r.comm is not None), None)
    if not counted:
        if first is not None and first.comm.note:
            return Comm(steps=0, method=METHOD[first.comm.counted], notes=[first.comm.note], predicted=predicted)
        return None
    zero = next((r for r in counted if r.rank == 0), counted[0])
    per_rank = [_per_step(r, world_size) for r in counted]
    collectives = per_rank[counted.index(zero)]
    names = sorted({name for c in per_rank for name in c})
    collectives_max = {
        name: CollectiveComm(**{field: max(getattr(c[name], field) for c in per_rank if name in c)
                                for field in CollectiveComm.model_fields})
        for name in names}
    total = _total(collectives)
    comm = Comm(steps=len(zero.comm.steps), counted=zero.comm.counted, bytes_per_step=total,
                bytes_per_step_max=max(_total(c) for c in per_rank),
                bytes_per_param=total / params if params else None, collectives=collectives,
                collectives_max=collectives_max, predicted=predicted, method=METHOD[zero.comm.counted])
    if len(counted) < len([r for r in ranks if r is not None]):
        comm.notes.append(f"{len(counted)} of {len(ranks)} ranks counted their communication")
    if zero.comm.compressed is not None:
        comm.phases = {}
        for phase, flag in (("warmup", False), ("compressed", True)):
            indices = [i for i, c in enumerate(zero.comm.compressed) if c == flag]
            if not indices:
                continue
            times = [step_times[i] for i in indices if step_times and i < len(step_times)]
            comm.phases[phase] = CommPhase(steps=indices, bytes_per_step=_total(_per_step(zero, world_size, indices)),
                                           step_time_s_median=statistics.median(times) if times else None)
    return comm
