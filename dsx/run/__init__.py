"""`dsx run`: resolve a model and a DeepSpeed config, launch it through DeepSpeed's launcher, measure, append a row.

The journey, one module per stage:
  request  RunRequest -> Trial: the model, device, world size (nodes.py: one machine or a hostfile's nodes) and
           the DeepSpeed config linted for that world size; errors refuse the run (RunRefused: nothing is
           started and no row is written)
  prepare  Trial -> Prepared: the run's folder (config + rank plan) and the launch as data (--dry-run prints it)
  execute  (here) starts it through dsx.processes.run_plan, then
  gather   the ranks' reports -> one RunRow (figures, memory, ranks, overhead), appended to the results file
           whatever the outcome: a run that ran out of memory, failed, hung or lost a rank is a row with status
           oom / error / timeout and the message
  summary  the lines `dsx run` prints
The ranks themselves are dsx.rank; what they read and write is dsx.rank.protocol.

The config is used as the user asked. In particular the default optimizer (AdamW) makes DeepSpeed JIT-build its
FusedAdam op on first use (about 50 s on a GPU host, once per TORCH_EXTENSIONS_DIR); dsx does not swap in
torch's AdamW behind the user's back: `--ds-set optimizer.params.torch_adam=true` does that explicitly, and the
build time shows up in the row (overhead.ds_initialize_s, overhead.jit_built).
"""

from __future__ import annotations

from dsx.processes import run_plan
from dsx.results import RunRow, append_row
from dsx.run.gather import gather
from dsx.run.nodes import NODE_KEYS, NodeRequest, check_ssh, resolve_nodes
from dsx.run.prepare import Prepared, describe_dry_run, node_commands, prepare
from dsx.run.refused import RunRefused
from dsx.run.request import (
    CONFIG_FLAGS, DEFAULT_RESULTS, DEFAULT_TIMEOUT_S, RunRequest, Trial, config_flags, resolve_config, resolve_trial,
)
from dsx.run.summary import summary

__all__ = [
    "CONFIG_FLAGS", "DEFAULT_RESULTS", "DEFAULT_TIMEOUT_S", "NODE_KEYS", "NodeRequest", "Prepared", "RunRefused",
    "RunRequest", "Trial", "check_ssh", "config_flags", "describe_dry_run", "execute", "gather", "node_commands",
    "prepare", "resolve_config", "resolve_nodes", "resolve_trial", "run", "summary",
]


def run(request: RunRequest) -> RunRow:
    return execute(prepare(request))


def execute(prepared: Prepared, on_start=None, amend=None) -> RunRow:
    """Launch, wait (killing the whole process group on timeout or Ctrl-C), gather, append the row.

    on_start(process_group_id) is called once the launcher runs (`dsx sweep` records it to reap the group if dsx
    itself is killed); amend(row), when given, completes the row before it is appended (dsx.parity adds its
    verdict)."""
    from dsx.host import HostSpeedSampler

    with HostSpeedSampler() as host_speed:  # the host's Python speed before, during and after the run
        completed = run_plan(prepared.launch, prepared.request.timeout_s, log_path=prepared.run_dir / "launcher.log",
                             echo=prepared.request.echo, on_start=on_start)
    row = gather(prepared, completed, tuple(host_speed.samples))
    if amend is not None:
        amend(row)
    append_row(prepared.request.results, row)
    return row
