"""What a finished sweep ends with: its fastest ok row as `dsx report --best` gives it (the figures, the `dsx run`
command that repeats it, the DeepSpeed config as JSON to paste), from the rows of that sweep only."""

from __future__ import annotations

import json
from pathlib import Path

from dsx.results import read_rows


def sweep_rows(results: Path, sweep_id: str) -> list[dict]:
    """The rows of one sweep in a results file (a check's reference rows belong to no sweep)."""
    return [r for r in read_rows(results) if (r.get("sweep") or {}).get("sweep_id") == sweep_id]


def best_lines(results: Path, sweep_id: str, passed_over: set[str] = frozenset()) -> list[str]:
    """The lines to print: nothing when the sweep has no ok row; the reason when --best would refuse (a config
    with lint errors); else the summary of dsx.report.best and the config, indented JSON. Rows of the
    configurations in `passed_over` (labels that failed `dsx sweep --check`) are left out."""
    from dsx.report.best import best_summary, pick_best
    from dsx.report.load import ReportError
    from dsx.versions import VersionError

    rows = [r for r in sweep_rows(results, sweep_id) if r["sweep"].get("label") not in passed_over]
    if not any(r.get("status") == "ok" for r in rows):
        return []
    try:
        chosen = pick_best(rows)  # each row judged by the DeepSpeed it ran on (a --python lane's, say)
    except (ReportError, VersionError) as exc:
        return [f"best configuration: not given ({exc})"]
    return ["", f"best configuration of sweep {sweep_id} (as dsx report --best picks it):", *best_summary(chosen),
            "  DeepSpeed config:", json.dumps(chosen.config, indent=2)]
