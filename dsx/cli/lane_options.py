"""The options of `dsx run` (and, where they apply, `dsx sweep` / `dsx launch`) that issue 15 added: counting
communication and the ranks' interpreter. Kept apart from dsx.cli.options so the commands take them in one line."""

from __future__ import annotations

import click


def run_lane_options(f):
    """--no-comm-log: time the run without DeepSpeed's comms logger (dsx.comm.logger)."""
    return click.option("--comm-log/--no-comm-log", "comm_log", default=True, show_default=True,
                        help="Count bytes and calls per collective with DeepSpeed's comms logger (it synchronises "
                             "the device after every collective: --no-comm-log times a run without it).")(f)
