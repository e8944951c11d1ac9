"""Rendering a report: a Table as rich (the terminal, narrowed to its width) or markdown, and the report.md file."""

from __future__ import annotations

import re

from dsx.report.load import Loaded, read_from_line
from dsx.report.table import Table


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def to_markdown(table: Table) -> str:
    """A GitHub markdown table; group headers become bold lines like the seeds' '<b>From the box</b>' rows."""
    lines = ["| " + " | ".join(_md_cell(c) for c in table.columns) + " |",
             "|" + "|".join("---" for _ in table.columns) + "|"]
    for row in table.rows:
        if isinstance(row, str):
            row = [f"**{row}**"] + [""] * (len(table.columns) - 1)
        lines.append("| " + " | ".join(_md_cell(c) for c in row) + " |")
    out = "\n".join(lines)
    if table.legend:
        out += "\n\n" + "\n".join(table.legend)
    return out


RICH_DROP_ORDER = ("error", "config", "steps/s", "loss", "embed", "ffn", "vocab", "hidden", "layers", "seq", "precision",
                   "batch/s", "TFLOP/s", "ckpt", "its memory GiB", "device-seconds", "mem/ex MiB", "calls/step",
                   "DeepSpeed", "max rank")
"""Columns the terminal table gives up first when it is narrower than the table (markdown keeps them all)."""


HEADER_WIDTH = 16
"""Group header lines sit in the first column: past this many characters they wrap rather than widen it."""

MIN_SHOWN = 4
"""Columns a narrowed table keeps even when they are the same on every line (the first ones of the table)."""


def to_rich(table: Table, width: int | None = None):
    """(a rich Table, notes to print under it with the legend).

    Columns that are '-' on every line are dropped. When the table is wider than `width`, columns with one value
    on every line go next (a note says what that value is; MIN_SHOWN columns stay), then those of RICH_DROP_ORDER,
    one at a time, until it fits: a terminal has no room to spare, and a cut or wrapped cell is worse than a
    missing column (`--format markdown` keeps every column)."""
    from rich import box
    from rich.table import Table as RichTable
    from rich.text import Text

    lines = [r for r in table.rows if not isinstance(r, str)]
    headers = [r for r in table.rows if isinstance(r, str)]
    keep = [i for i, _ in enumerate(table.columns) if not lines or any(r[i] not in ("-", "") for r in lines)]
    notes = []

    def needed(i: int) -> int:
        cells = [len(r[i]) for r in lines] + [len(table.columns[i])]
        if i == keep[0]:
            cells += [min(HEADER_WIDTH, len(h)) for h in headers]
        return max(cells) + 3  # padding either side and the column separator

    def too_wide() -> bool:
        return bool(width) and sum(needed(i) for i in keep) > width

    if too_wide() and len(lines) > 1:
        same = [i for i in keep[1:] if len({r[i] for r in lines}) == 1]
        while same and len(keep) - len(same) < min(MIN_SHOWN, len(keep)):
            same.pop(0)  # lines alike in everything: still show what they are, not one column under a wrapped title
        if same:
            notes.append("Same on every line: " + ", ".join(f"{table.columns[i]} {lines[0][i]}" for i in same) + ".")
            keep = [i for i in keep if i not in same]
    dropped = []
    for name in RICH_DROP_ORDER:
        if not too_wide():
            break
        if any(table.columns[i] == name for i in keep[1:]):
            keep = [i for i in keep if table.columns[i] != name or i == keep[0]]
            dropped.append(name)
    if dropped:
        notes.append(f"Not shown for want of width: {', '.join(dropped)} (--format markdown has every column).")
    out = RichTable(title=table.title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                    padding=(0, 1), pad_edge=False)
    for i in keep:
        numeric = bool(lines) and all(re.fullmatch(r"[-\d.,%×*]+( .*)?", r[i]) for r in lines)
        first = i == keep[0] and headers
        out.add_column(table.columns[i], justify="right" if numeric else "left",
                       max_width=max(HEADER_WIDTH, needed(i) - 3) if first else None)
    for row in table.rows:
        if isinstance(row, str):
            if out.row_count:
                out.add_section()
            out.add_row(Text(row, style="bold"), *([""] * (len(keep) - 1)))
        else:
            out.add_row(*(Text(row[i]) for i in keep))
    return out, notes


def markdown_report(loaded: Loaded, tables: list[Table], images: list[tuple[str, str]],
                    where: str | None = None, left_out: list[tuple[str, str]] = ()) -> str:
    """The report file: what it was read from, every table in markdown, the plots (paths relative to it) and why
    any plot was left out."""
    lines = ["# dsx report", "", read_from_line(loaded)]
    if loaded.warnings:
        lines += [""] + [f"- warning: {w}" for w in loaded.warnings]
    if where:
        lines += ["", f"Rows selected with `--where {where}`."]
    for table in tables:
        lines += ["", f"## {table.title}", "", to_markdown(table)]
    if images:
        lines += ["", "## Plots"]
        for path, title in images:
            lines += ["", f"![{title}]({path})"]
    if left_out:
        lines += ["", "Plots left out, as they would show nothing on these rows:", ""]
        lines += [f"- {title}: {why}." for title, why in left_out]
    return "\n".join(lines) + "\n"

