"""The `dsx` command. Subcommands live in dsx/cli/<name>.py and are imported only when run, so `dsx --help`
never pays for pydantic models, let alone torch or deepspeed."""

from __future__ import annotations

import importlib
import os
import signal
import sys

import click

# dsx uses no pydantic plugins; looking them up scans every installed package's entry points (~20 ms of start)
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

# name -> (module, one-line help shown by `dsx --help`)
COMMANDS = {
    "config": ("dsx.cli.config", "Write a DeepSpeed config from a few choices or a preset."),
    "validate": ("dsx.cli.validate", "Lint DeepSpeed configs: every mistake DeepSpeed would swallow."),
    "schema": ("dsx.cli.schema", "Write the JSON Schema of the DeepSpeed config (for editors)."),
    "models": ("dsx.cli.models", "List the model presets with parameter counts."),
    "run": ("dsx.cli.run", "Train a model preset with DeepSpeed for a few steps; measure; append a result row."),
    "estimate": ("dsx.cli.estimate", "Predict peak GPU memory, host memory, the largest micro-batch and speed; no GPU."),
    "check": ("dsx.cli.check", "Does a configuration train the same model as plain data parallel? Loss, step by step."),
    "sweep": ("dsx.cli.sweep", "Run many configurations (ZeRO x offload x batch x ...); survives OOMs; resumable."),
    "launch": ("dsx.cli.launch", "Launch your own script under a checked DeepSpeed config (hostfile, multi-node)."),
    "report": ("dsx.cli.report", "Tables, plots and the best config from result rows."),
    "doctor": ("dsx.cli.doctor", "Check torch, CUDA, nvcc, ninja, libaio, pdsh and DeepSpeed's ops; say how to fix."),
}


class LazyGroup(click.Group):
    def invoke(self, ctx):
        """A refusal is one line, "Error: ...": click's Usage banner and help hint put it on line 4 (--help is
        unchanged, and every command's --help says what it takes)."""
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            if not isinstance(exc, getattr(click.exceptions, "NoArgsIsHelpError", ())):
                exc.ctx = None
            raise

    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        module = importlib.import_module(COMMANDS[name][0])
        return module.command

    def format_commands(self, ctx, formatter):
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dsx", prog_name="dsx")
def cli():
    """dsx: pick, validate, run and measure DeepSpeed configs for Hugging Face models."""


def _stop(signum, frame):
    raise KeyboardInterrupt


def main(argv=None):
    """Entry point: user mistakes become one clear line and a non-zero exit, never a traceback. SIGTERM (a
    scheduler's, `timeout`'s, `kill`'s) stops any command as Ctrl-C does: a run's, sweep's or launch's ranks are
    killed with it, not left running on the GPUs."""
    signal.signal(signal.SIGTERM, _stop)
    try:
        return cli.main(args=argv, prog_name="dsx", standalone_mode=True)
    except KeyboardInterrupt:
        click.echo("dsx: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # a bug in dsx: say so plainly; DSX_DEBUG=1 shows the traceback
        if os.environ.get("DSX_DEBUG"):
            raise
        from dsx.safe_io import OutputError, UnreadableFile

        if isinstance(exc, (OutputError, UnreadableFile)):  # a file the user named, refused: not a bug
            click.echo(f"Error: {exc}", err=True)
            sys.exit(2)
        click.echo(f"dsx: internal error: {type(exc).__name__}: {exc} (set DSX_DEBUG=1 for the traceback)",
                   err=True)
        sys.exit(3)
