"""`dsx validate FILE...`: every mistake in each config, with where, how bad, and the fix.

Exit status: 0 clean, 1 findings (errors, or warnings too unless --errors-only), 2 a file could not be read.
"""

from __future__ import annotations

import json
import sys

import click

from dsx.cli.options import resolve_target_or_fail, target_option
from dsx.lint.autos import fold_unfilled
from dsx.lint.engine import lint
from dsx.lint.load import UnreadableConfig, read_config, read_config_stream


@click.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--world-size", type=click.IntRange(min=1),
              help="Data-parallel world size (GPUs, unless you use pipeline/tensor parallelism) to check batch "
                   "arithmetic against.")
@target_option
@click.option("--hf", is_flag=True, help='The config goes through the transformers Trainer / accelerate, which fill '
                                         '"auto" values.')
@click.option("--json", "as_json", is_flag=True, help="Machine-readable findings on stdout.")
@click.option("--errors-only", is_flag=True, help="Hide warnings; exit 0 when there are no errors.")
def command(files, world_size, target, hf, as_json, errors_only):
    """Lint DeepSpeed configs: every mistake DeepSpeed would swallow. FILE - reads the config from stdin."""
    version = resolve_target_or_fail(target)
    reports, unreadable, counted = [], False, 0
    for name in files:
        path = "<stdin>" if name == "-" else name
        try:
            loaded = read_config_stream(sys.stdin.buffer) if name == "-" else read_config(path)
        except UnreadableConfig as exc:
            unreadable = True
            reports.append({"file": path, "readable": False, "error": str(exc), "findings": []})
            continue
        findings = lint(loaded.data, target=version, world_size=world_size, hf=hf,
                        duplicate_keys=loaded.duplicate_keys)
        if errors_only:
            findings = [f for f in findings if f.severity == "error"]
        counted += len(findings)
        reports.append({"file": path, "readable": True, "hjson": loaded.is_hjson,
                        "findings": [f.as_dict() for f in findings], "_findings": findings})
    errors = sum(1 for r in reports for f in r["findings"] if f["severity"] == "error")
    warnings = sum(1 for r in reports for f in r["findings"] if f["severity"] == "warning")
    unreadable_count = sum(not r["readable"] for r in reports)
    if as_json:
        for r in reports:
            r.pop("_findings", None)
        summary = {"errors": errors, "warnings": warnings, "unreadable": unreadable_count}
        json.dump({"target_deepspeed": str(version), "world_size": world_size, "hf": hf, "files": reports,
                   "summary": summary}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for r in reports:
            if not r["readable"]:
                click.echo(f"{r['error']}", err=True)
                continue
            for finding in fold_unfilled(r["_findings"]):  # one line for the "auto" values --hf would clear
                click.echo(finding.render(r["file"]))
            if not r["_findings"]:
                click.echo(f"{r['file']}: clean for DeepSpeed {version}")
        unread = f"{unreadable_count} of {len(files)} file(s) unreadable; " if unreadable_count else ""
        click.echo(f"{unread}{errors} error(s), {warnings} warning(s) in {len(files) - unreadable_count} file(s) read "
                   f"(target DeepSpeed {version}{', world size ' + str(world_size) if world_size else ''})",
                   err=True)
    sys.exit(2 if unreadable else 1 if counted else 0)
