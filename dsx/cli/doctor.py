"""`dsx doctor`: check torch, CUDA, nvcc, ninja, libaio, pdsh and DeepSpeed's ops; print a fix for each problem."""

from __future__ import annotations

import json
import sys

import click


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable: a JSON list of checks.")
def command(as_json):
    """Check what dsx run and DeepSpeed need on this machine.

    Each line is OK, WARN (something will be missing or slow, with the fix), INFO or FAIL (dsx run cannot
    work). Exit status 1 only on FAIL.
    """
    from dsx.doctor import run_checks

    checks = run_checks()
    if as_json:
        click.echo(json.dumps([c.as_dict() for c in checks], indent=2))
    else:
        for check in checks:
            click.echo(check.render())
        warns = sum(c.level == "WARN" for c in checks)
        fails = sum(c.level == "FAIL" for c in checks)
        click.echo(f"\n{fails} failure(s), {warns} warning(s)")
    if any(c.level == "FAIL" for c in checks):
        sys.exit(1)
