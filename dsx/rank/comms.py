"""A rank's communication per step, read from DeepSpeed's own comms logger.

dsx turns the logger on in the config it writes for the ranks (dsx.comm.logger_block: prof_all, verbose off).
DeepSpeed (0.18.9 and 0.19.8: deepspeed/comm/comm.py `timed_op`) then records every collective called through
deepspeed.comm: under the op's log name (all_reduce_coalesced and inference_all_reduce log as all_reduce), per
message size, a call count and latencies. The message size is element_size x numel of the op's *input* tensor
(deepspeed/comm/utils.py get_msg_size_from_args; list collectives: the sum over the list): this rank's shard for
all_gather / all_gather_into_tensor, the whole input for reduce_scatter(_tensor), the whole tensor for all_reduce
and broadcast. Those are the `logged_bytes` here, unchanged; dsx.comm turns them into the ZeRO paper's volume.
Collectives called on torch.distributed directly, bypassing deepspeed.comm, are not seen (DeepSpeed's ZeRO, 1-bit
and ZeRO++ code go through deepspeed.comm).

The logger records no process group, so an all-gather's gathered volume (logged bytes x the ranks it gathers
over) cannot be read from it: hpZ gathers within a secondary partition smaller than the world. The counter wraps
deepspeed.comm's `get_msg_size_from_args` (which `timed_op` calls for exactly the calls the logger records, in
0.18.9 and 0.19.8) and adds up, per log name, each gather's message size x its group's size.

Which steps it counts: the warm-up steps after the first, when there are two or more. The first step differs
(lazy allocations, ZeRO-3's first trace); the later ones send what a timed step sends. The counter then turns the
logger off before the first timed step, so the timed steps run without it. A 1-bit optimizer's timed steps are
counted instead (its compressed phase starts at its freeze step, inside them), and so are the timed steps of a run
with fewer than two warm-up steps; the row says which (`comm.counted`). The counter empties the logger before the
first counted step and after each (outside the clock) and reads its totals at the end of each, so
deepspeed.initialize's broadcasts are not counted and the logger's lists of latencies do not grow with the run.

What the logger costs where it is on: DeepSpeed synchronises the device after every collective (a no-op on CPU
ranks; on GPUs it keeps communication from overlapping computation: a ZeRO-3 step of gpt2-xl on 2 H200s took 4.75 s
with it and 1.17 s without, bench/multigpu/rows/logger-z3.jsonl), and its per-op timer is read with
elapsed(reset=False), which walks every earlier call of that op (so the logged latencies are running totals, not
per call, and each call costs more than the last). The counter resets those timers at every step boundary, which
keeps the walk to one step's calls; `dsx run --no-comm-log` runs without the logger at all.
"""

from __future__ import annotations

import functools
import inspect

from dsx.comm.logger import logger_in_timed_steps
from dsx.config_facts import ONEBIT
from dsx.rank.protocol import GATHERS, CollectiveCount, CommLog


def totals(comms_dict: dict) -> dict[str, tuple[int, int]]:
    """log name -> (calls, logged bytes) summed over message sizes. comms_dict is the logger's
    {log name: {message size: [count, [latencies], [algbw], [busbw]]}} (the same in 0.18.9 and 0.19.8); a name
    with the logger's debug suffix (' | [Caller Func: f]') counts under its op."""
    out: dict[str, tuple[int, int]] = {}
    for name, sizes in list(comms_dict.items()):
        op = name.split(" | ")[0]
        calls, logged = out.get(op, (0, 0))
        for size, record in list(sizes.items()):
            calls += int(record[0])
            logged += int(record[0]) * int(size)
        out[op] = (calls, logged)
    return out


class CommCounter:
    """Counts the collectives of the steps it counts (the module's docstring says which): `before(i)` and
    `after(i)` around step i of the run (0 = the first warm-up step; outside the clock), `log()` at the end. Counts
    nothing when the logger is off (dsx run --no-comm-log)."""

    def __init__(self, engine, ds_config: dict, warmup: int):
        import deepspeed.comm.comm as ds_comm

        self.logger = ds_comm.comms_logger
        self.timers = ds_comm.timers
        self.engine = engine
        self.warmup = warmup
        kind = str((ds_config.get("optimizer") or {}).get("type", "")).lower()
        self.onebit = kind in ONEBIT
        self.result = CommLog(compressed=[] if self.onebit else None)
        self.outside_clock = bool(self.logger.enabled) and not logger_in_timed_steps(True, ds_config, warmup)
        """Count warm-up steps 1..warmup-1 and turn the logger off for the timed steps."""
        if self.outside_clock:
            self.result.counted = "warm-up"
        self.gathered: dict[str, int] = {}
        """Log name -> this step's gathered bytes (message size x group size) of its all-gathers."""
        if not self.logger.enabled:
            self.result.note = "DeepSpeed's comms logger was off (dsx run --no-comm-log)"
        else:
            self._count_gather_groups(ds_comm)

    def _count_gather_groups(self, ds_comm) -> None:
        """Wrap deepspeed.comm's message sizing so each logged all-gather adds its size x its group's ranks."""
        current = ds_comm.get_msg_size_from_args
        original = getattr(current, "__wrapped__", current)  # a later counter replaces an earlier one's wrapper
        gathered = self.gathered

        def sized(func, *args, **kwargs):
            size = original(func, *args, **kwargs)
            signature, default_name = _op_facts(func)
            name = kwargs.get("log_name") or default_name
            if name in GATHERS and size:
                group = signature.bind_partial(*args, **kwargs).arguments.get("group")
                gathered[name] = gathered.get(name, 0) + size * ds_comm.get_world_size(group=group)
            return size

        sized.__wrapped__ = original
        ds_comm.get_msg_size_from_args = sized

    @property
    def enabled(self) -> bool:
        return bool(self.logger.enabled)

    def _reset_timers(self) -> None:
        for timer in list(getattr(self.timers, "timers", {}).values()):
            if not getattr(timer, "started_", False):
                timer.reset()

    def _forget(self) -> None:
        self.logger.comms_dict.clear()
        self.gathered.clear()
        self._reset_timers()

    def counts(self, index: int) -> bool:
        """Whether step `index` of the run (0 = the first warm-up step) is one the counter counts."""
        return 1 <= index < self.warmup if self.outside_clock else index >= self.warmup

    def before(self, index: int) -> None:
        """Before step `index`: forget what came before the first counted step; turn the logger off at the first
        timed step when the warm-up steps were counted."""
        if index == (1 if self.outside_clock else self.warmup):
            self._forget()
        if self.outside_clock and index == self.warmup:
            self.logger.enabled = False
        if self.onebit and self.counts(index):
            flag = getattr(self.engine, "pipeline_enable_backward_allreduce", None)
            flag = self.engine.enable_backward_allreduce if flag is None else flag
            self.result.compressed.append(not flag)

    def after(self, index: int) -> None:
        """After step `index`: its collectives, when counted."""
        if not self.enabled or not self.counts(index):
            return
        self.result.steps.append({name: CollectiveCount(calls=calls, logged_bytes=logged,
                                                        gathered_bytes=self.gathered.get(name))
                                  for name, (calls, logged) in totals(self.logger.comms_dict).items() if calls})
        self._forget()

    def log(self) -> CommLog:
        return self.result


@functools.lru_cache(maxsize=None)
def _op_facts(func) -> tuple[inspect.Signature, str]:
    """A deepspeed.comm op's signature and the name it is logged under when the call gives none (its log_name
    default, else its own name), read once per op: the counter needs them at every logged call."""
    signature = inspect.signature(func)
    default = signature.parameters.get("log_name")
    return signature, default.default if default is not None and isinstance(default.default, str) else func.__name__
