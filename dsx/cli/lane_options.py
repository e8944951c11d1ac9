"""Options issue 15 added to the commands that start ranks: the ranks' interpreter (`--python`, dsx.lane) on
dsx run, sweep and launch; counting communication and 1-bit optimizers on dsx run. Kept apart from
dsx.cli.options so each command takes them in one line."""

from __future__ import annotations

import click


def python_option(f):
    """--python PATH: the ranks' interpreter (dsx.lane)."""
    return click.option("--python", "python", metavar="PATH",
                        help="Run the ranks with this Python (e.g. a venv holding deepspeed==0.18.9 for the 1-bit "
                             "optimizers); the config is linted for its DeepSpeed.")(f)


def comm_log_option(f):
    """--comm-log/--no-comm-log of dsx run and of every trial of dsx sweep."""
    return click.option("--comm-log/--no-comm-log", "comm_log", default=True, show_default=True,
                        help="Count bytes and calls per collective with DeepSpeed's comms logger, over the warm-up "
                             "steps after the first (it synchronises the device after every collective, so the timed "
                             "steps run without it); over the timed steps with fewer than 2 warm-up steps or a 1-bit "
                             "optimizer.")(f)


def run_lane_options(f):
    """--python, --onebit and --comm-log/--no-comm-log of `dsx run`."""
    f = comm_log_option(f)
    f = click.option("--onebit", type=click.Choice(["adam", "zero-one-adam", "lamb"]),
                     help="1-bit optimizer (DeepSpeed 0.18 only: with --python; defaults to --zero 0 --precision "
                          "fp16 and a freeze step half-way through the timed steps).")(f)
    return python_option(f)
