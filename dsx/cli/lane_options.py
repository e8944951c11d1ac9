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
    """--comm-log/--no-comm-log of dsx run."""
    return click.option("--comm-log/--no-comm-log", "comm_log", default=True, show_default=True,
                        help="Count bytes and calls per collective with DeepSpeed's comms logger (it synchronises the "
                             "device after every collective, thousands per step under ZeRO-3: --no-comm-log times "
                             "a run without it).")(f)


def sweep_comm_log_option(f):
    """--comm-log/--no-comm-log of every trial of dsx sweep: unset, off when a trial spans several ranks."""
    return click.option("--comm-log/--no-comm-log", "comm_log", default=None,
                        help="Count each trial's communication with DeepSpeed's comms logger. Default: on when every "
                             "trial runs on one rank, off when a trial spans several (the logger synchronises the "
                             "device after every collective and slows ZeRO-3 trials most: the ranking would not be "
                             "a run's; the bytes are then dsx.comm's prediction).")(f)


def run_lane_options(f):
    """--python, --onebit and --comm-log/--no-comm-log of `dsx run`."""
    f = comm_log_option(f)
    f = click.option("--onebit", type=click.Choice(["adam", "zero-one-adam", "lamb"]),
                     help="1-bit optimizer (DeepSpeed 0.18 only: with --python; defaults to --zero 0 --precision "
                          "fp16 and a freeze step half-way through the timed steps).")(f)
    return python_option(f)
