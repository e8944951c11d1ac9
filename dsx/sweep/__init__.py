"""`dsx sweep`: run a grid of configurations, each trial its own `dsx run` launch; the results file is the state.

A sweep is a list of configurations (the product of the axes: ZeRO stage x offload x offload of parameters x
precision x activation checkpointing x compile x GPUs x model variations) and, for each, the micro-batches to run:
a fixed list, or `auto` - grow geometrically until a trial runs out of memory, then bisect between the largest
micro-batch that fit and the smallest that did not, and measure there. Every trial is one launched job through
dsx.run (one process group, a timeout); its row - ok, oom, error or timeout - is appended before the next trial
starts, so an OOM, a crash or a hung rank never stops the sweep.

Resuming is re-running the same command: a trial whose key (dsx.results.RunRow.trial_key: the resolved DeepSpeed
config, model, toggles, world size, steps...) already has a row in the results file is not run again; its row
stands in for it, so the micro-batch search replays to the same point and goes on. Rows are appended whole
(dsx.results.append_row), so a SIGKILL of dsx loses at most the trial that was running. That trial's ranks live
in their own process group; its id is kept in a lock file beside the results, and the next sweep on the same
file kills what is left of that group before it starts anything.

    grid      SweepSpec (the axes and trial settings), its Configurations, sweep_id; SweepError; default_model
    space     sweep_configurations: the product of the axes, or the default search's configurations (no axis given)
    search    the micro-batches of one configuration: the auto search for the OOM boundary, or a fixed list
    lock      SweepLock on `<results>.lock` (one sweep per file) and reap_orphans (what a killed sweep left running)
    trials    a configuration at a micro-batch as a dsx.run request, its `dsx run` command, the rows already done
    planning  before the first trial: configurations dsx refuses (preflight), dsx estimate's order and skips (plan)
    loop      sweep(): the lock, the plan, every configuration's search, one launch per trial; SweepRun

dsx.run and dsx.estimate are imported only when a sweep plans or runs, so `dsx sweep --help` imports no torch.
Every public name of the modules is re-exported here: `from dsx.sweep import SweepSpec, sweep` works.
"""

from dsx.sweep.grid import (
    AUTO, OFFLOAD_CHOICES, PRECISION_CHOICES, Configuration, SweepError, SweepSpec, default_model,
)
from dsx.sweep.lock import SweepLock, reap_orphans
from dsx.sweep.loop import ConfigurationResult, SweepRun, TrialOutcome, sweep, sweep_device_seconds
from dsx.sweep.planning import PREDICTED_STEP, Plan, plan, preflight, visible_gpu_kind
from dsx.sweep.space import sweep_configurations
from dsx.sweep.search import MB_FLAT, Probe, SearchResult, fixed_micro_batches, flat_stop, search_micro_batch
from dsx.sweep.trials import DONE_STATUSES, done_rows, run_command, run_request

__all__ = [
    "AUTO", "OFFLOAD_CHOICES", "PRECISION_CHOICES", "DONE_STATUSES", "PREDICTED_STEP", "SweepError",
    "Configuration", "SweepSpec", "default_model", "Probe", "SearchResult", "search_micro_batch",
    "fixed_micro_batches", "SweepLock", "reap_orphans", "done_rows", "run_request", "run_command", "preflight",
    "Plan", "visible_gpu_kind", "plan", "TrialOutcome", "ConfigurationResult", "SweepRun", "sweep",
    "sweep_device_seconds", "MB_FLAT", "flat_stop", "sweep_configurations",
]
