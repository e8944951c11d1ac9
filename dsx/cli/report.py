"""`dsx report RESULTS...`: tables, a sweep summary, plots, parameter effects and the best config, from rows only.

Exit status: 0 a report was made, 1 nothing to report (no rows, no ok row, nothing matches, the best config does
not lint clean), 2 a results file is missing or unreadable, or an option is wrong. Never imports torch or
deepspeed; matplotlib only when -o writes plots.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from dsx.cli.options import target_option

TERMINAL_WIDTH = 120
"""The terminal table's widest: the rest of the columns are in --format markdown."""


@click.command("report")
@click.argument("results", nargs=-1, required=True, type=click.Path())
@click.option("--all", "show_all", is_flag=True, help="Also list oom / error / timeout rows, with status and error.")
@click.option("--where", metavar="KEY=VALUE,...",
              help="Only rows matching every KEY=VALUE, e.g. zero=3,offload=cpu (keys: label, zero, offload, "
                   "offload_params, precision, act_ckpt, compile, model, gpu, micro_batch, grad_accum, world_size, "
                   "seq_len, sweep, search, status, pipeline_stages).")
@click.option("--baseline", metavar="RUN|LABEL|KEY=VALUE,...",
              help="Row the mem× and speed× columns are relative to: a run id prefix, a configuration label, or a "
                   "selector like zero=2,offload=none,micro_batch=8 (default: the first ok row shown).")
@click.option("--group-by", metavar="KEY,...",
              help="Group lines by label (default), zero, offload, precision, act_ckpt, model, gpu, micro_batch, "
                   "world_size, sweep or pipeline_stages; several keys separated by commas.")
@click.option("--format", "fmt", type=click.Choice(["rich", "markdown"]), default="rich", show_default=True,
              help="Tables for the terminal, or markdown to paste.")
@click.option("--effects", is_flag=True,
              help="Parameter effects: each row that changes one model dimension (--set, --seq-len, --vocab-pad) "
                   "against the unchanged model at the same configuration and micro-batch.")
@click.option("--best", is_flag=True,
              help="Write the DeepSpeed config of the fastest ok row (tokens/s), linted at its world size, to -o "
                   "FILE (default stdout); print its figures and the command that reproduces it.")
@click.option("--vs-estimate", is_flag=True,
              help="Predicted (dsx estimate) next to measured for every row on a calibrated GPU, with the error and "
                   "DeepSpeed's own estimator (imports torch: the model is built on the meta device).")
@click.option("-o", "--output", type=click.Path(), metavar="DIR|FILE",
              help="Write DIR/report.md with the tables and PNG plots in DIR (with --best: the config FILE).")
@target_option
def command(results, show_all, where, baseline, group_by, fmt, effects, best, vs_estimate, output, target):
    """Tables, plots and the best config from result rows.

    RESULTS are JSON-lines files written by `dsx run` / `dsx sweep` / `dsx launch` (torn lines are skipped with a
    warning). Launch rows (your own scripts) get a table of their own; --best, --effects, --vs-estimate and the
    plots read the run rows.

    \b
    dsx report results/runs.jsonl
    dsx report results/runs.jsonl --all --group-by zero,offload -o report/
    dsx report results/runs.jsonl --baseline zero=2,offload=none,micro_batch=8 --format markdown
    dsx report results/runs.jsonl --effects
    dsx report results/runs.jsonl --best --where zero=3 -o best.json
    """
    from dsx import report as rp

    try:
        _report(rp, results, show_all, where, baseline, group_by, fmt, effects, best, output, target, vs_estimate)
    except rp.ReportError as exc:
        click.echo(f"dsx report: {exc}", err=True)
        sys.exit(exc.exit_code)


def _report(rp, results, show_all, where, baseline, group_by, fmt, effects, best, output, target, vs_estimate=False):
    group_keys = rp.parse_group_by(group_by)  # option mistakes first: they do not depend on the files
    if where:
        rp.parse_selector(where)
    if baseline and "=" in baseline:
        rp.parse_selector(baseline, "--baseline")
    if output and not Path(output).parent.is_dir():  # dsx makes the report's folder, never the folders above it
        raise rp.ReportError(f"-o {output}: no such directory: {Path(output).parent}", 2)
    loaded = rp.load(list(results))
    for warning in loaded.warnings:
        click.echo(f"dsx report: warning: {warning}", err=True)
    if not loaded.rows:
        raise rp.ReportError(f"no rows to report in {', '.join(results)}", 1)
    rows = rp.select(loaded.rows, where)
    if not rows:
        raise rp.ReportError(f"no row matches --where {where} ({len(loaded.rows)} row(s) read)", 1)

    rows, launches = rp.split_kinds(rows)  # dsx launch rows: a table of their own, in no other table or plot
    if best:
        if not rows and launches:
            raise rp.ReportError(f"--best picks among dsx run / dsx sweep rows; the {len(launches)} row(s) read are "
                                 "dsx launch rows (your own script: its config is the one you launched it with)", 1)
        _best(rp, rows, output, target)
        return
    if output and Path(output).exists() and not Path(output).is_dir():  # before any table is printed
        raise rp.ReportError(f"-o {output}: is a file; give a directory for the report (a file only with --best)", 2)

    shown = rows if show_all else [r for r in rows if r["status"] == "ok"]
    shown_launches = launches if show_all else [r for r in launches if r["status"] == "ok"]
    if vs_estimate:
        table = rp.vs_estimate_table(rows)
        if not table.rows:
            raise rp.ReportError("no row ran on a GPU dsx estimate is calibrated for (dsx estimate --help)", 1)
        shown, shown_launches = rows, []
    if not shown and not (shown_launches and not effects):
        every = rows + launches
        counts = ", ".join(f"{sum(r['status'] == s for r in every)} {s}" for s in rp.STATUSES
                           if any(r["status"] == s for r in every))
        raise rp.ReportError(f"no ok row among {len(every)} row(s) ({counts}); --all lists them", 1)
    if vs_estimate:
        tables = [table]
    elif effects:
        table = rp.effects_table(shown)
        if table is None:
            raise rp.ReportError("no parameter effects: needs an ok row without --set overrides and ok rows that "
                                 "differ from it in exactly one of --set KEY / --seq-len / --vocab-pad, at the same "
                                 "configuration and micro-batch", 1)
        tables = [table]
    else:
        tables = []
        if shown:
            base = rp.find_baseline(shown, baseline)
            tables += [rp.runs_table(shown, every=rows, baseline=base, group_by=group_keys, show_status=show_all),
                       rp.configurations_table(rows)]
            sweeps = rp.sweeps_table(rows)
            if sweeps is not None:
                tables.append(sweeps)
            long_context = rp.long_context_table(rows if show_all else shown)
            if long_context is not None:
                tables.append(long_context)
            pipeline = rp.pipeline_table(shown)
            if pipeline is not None:
                tables.append(pipeline)
            comm = rp.comm_table(shown)
            if comm is not None:
                tables.append(comm)
            parity = rp.parity_table(rows)
            if parity is not None:
                tables.append(parity)
        if shown_launches:
            tables.append(rp.launches_table(shown_launches, show_status=show_all))

    if output:  # the files first: a reader that stops early (`| head`) must not cost the report
        _write(rp, loaded, rows, tables, where, output)
    try:
        _print(rp, loaded, tables, fmt)
    except BrokenPipeError:  # the reader went away (`| head`): what it did not read is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nor is the flush at exit


def _print(rp, loaded, tables, fmt):
    if fmt == "markdown":
        click.echo(rp.read_from_line(loaded))
        for table in tables:
            click.echo(f"\n## {table.title}\n\n{rp.to_markdown(table)}")
    else:
        from rich.console import Console

        # 120 columns at most (a pipe or a file too): columns that do not fit are dropped, with a note, and
        # --format markdown has them all
        console = Console(width=min(Console().width, TERMINAL_WIDTH) if sys.stdout.isatty() else TERMINAL_WIDTH)
        console.on_broken_pipe = _reader_gone  # rich's own exits 1
        console.print(rp.read_from_line(loaded), style="dim", highlight=False, soft_wrap=True)
        for table in tables:
            console.print()
            rich_table, notes = rp.to_rich(table, console.width)
            console.print(rich_table)
            for line in table.legend + notes:
                console.print(line, style="dim", highlight=False, soft_wrap=True)


def _reader_gone():
    raise BrokenPipeError


def _write(rp, loaded, rows, tables, where, output):
    """DIR/report.md and the plots."""
    from dsx.plots import write_plots

    folder = Path(output)
    try:
        images, left_out = write_plots(rows, folder)
        path = folder / "report.md"
        path.write_text(rp.markdown_report(loaded, tables, [(p.name, title) for p, title in images], where, left_out))
    except OSError as exc:
        raise rp.ReportError(f"-o {output}: cannot write: {exc.strerror}", 2) from None
    not_drawn = f" ({len(left_out)} left out: report.md says why)" if left_out else ""
    click.echo(f"dsx report: wrote {path} and {len(images)} plot(s){not_drawn}", err=True)


def _best(rp, rows, output, target):
    from dsx.versions import VersionError, resolve_target

    try:
        version = resolve_target(target) if target else None  # None: the version each row ran on
    except VersionError as exc:
        raise rp.ReportError(str(exc), 2) from None
    chosen = rp.pick_best(rows, version)
    text = json.dumps(chosen.config, indent=2) + "\n"
    summary = "\n".join(rp.best_summary(chosen))
    if output:
        if Path(output).is_dir():
            raise rp.ReportError(f"-o {output}: is a directory; --best writes one JSON file", 2)
        try:
            Path(output).write_text(text)
        except OSError as exc:
            raise rp.ReportError(f"-o {output}: cannot write: {exc.strerror}", 2) from None
        click.echo(summary)
        verdict = "lint clean" if not chosen.findings else f"{len(chosen.findings)} lint warning(s), no error"
        click.echo(f"  config: {output} ({verdict} for DeepSpeed {chosen.target} at world size "
                   f"{chosen.row['world_size']})")
    else:
        click.echo(summary, err=True)
        click.echo(text, nl=False)
