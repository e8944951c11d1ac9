"""Parity checks in `dsx report` (dsx.parity): each row's verdict, for the runs table's column, and a table of the
checks, one line each: the candidate, the steps compared, its loss from first to last step, the largest difference
from plain data parallel against the tolerance, and the verdict."""

from __future__ import annotations

from dsx.report.facts import curve, gpu_label, label, model_text
from dsx.report.table import Table

PARITY_COLUMNS = ["check", "candidate", "model", "GPU", "data", "steps", "loss first→last", "max |Δloss|", "at step",
                  "ref. spread", "tolerance", "verdict"]


def verdicts(rows: list[dict]) -> dict[str, dict]:
    """run_id -> the parity part that judges that row: a check's candidate row carries its own; a row checked after it
    ran (dsx sweep --check) is judged by the last reference's row (candidate_run_id names it)."""
    out: dict[str, dict] = {}
    for r in rows:
        parity = r.get("parity") or {}
        if parity.get("verdict") and parity.get("candidate_run_id"):
            out[parity["candidate_run_id"]] = parity
    return out


def verdict_word(verdict: str) -> str:
    """same, DIFFERS (capitals: what a reader must not miss), by design, unknown."""
    return "DIFFERS" if verdict == "differs" else verdict


def parity_cell(row: dict, judged: dict[str, dict]) -> str:
    """The runs table's parity column: same / DIFFERS / by design / unknown, 'ref' for a reference run, '-'."""
    if row["run_id"] in judged:
        return verdict_word(judged[row["run_id"]]["verdict"])
    return "ref" if (row.get("parity") or {}).get("role") == "reference" else "-"


def loss_cell(row: dict) -> str:
    """The last timed step's loss (rank 0's: every rank records the step's mean over replicas)."""
    ranks = row.get("ranks") or []
    losses = ranks[0].get("loss") if ranks else None
    return f"{losses[-1]:.4g}" if losses else "-"


def parity_table(rows: list[dict]) -> Table | None:
    """One line per judged row (None when no row took part in a parity check)."""
    judged = verdicts(rows)
    by_id = {r["run_id"]: r for r in rows}
    if not judged:
        return None
    table = Table("Parity: does the configuration train the same model as plain data parallel?", list(PARITY_COLUMNS))
    for run_id, p in judged.items():
        r = by_id.get(run_id)
        if r is None:
            continue
        losses = curve(r)
        first_last = f"{losses[0]:.4g}→{losses[-1]:.4g}" if losses else "-"
        verdict = verdict_word(p["verdict"])
        if p.get("by_design"):
            verdict += f" ({p['by_design']})"
        table.rows.append([
            p["check_id"], label(r), model_text(r), gpu_label(r), (r.get("data") or {}).get("label", "random"),
            str(p.get("steps") or "-"), first_last, _g(p.get("max_abs_diff")),
            "-" if p.get("at_step") is None else str(p["at_step"]), _g(p.get("reference_spread")),
            _g(p.get("tolerance")), verdict,
        ])
    table.legend = [
        "Each check ran plain data parallel twice on the same data and global batch (reference A at the candidate's "
        "precision and split; B the same training in fp32 for a bf16/fp16 candidate, else split the other way); "
        "tolerance: a multiple of the references' spread (dsx.parity.MARGIN), at least a precision's floor; steps: "
        "every step from the first, warm-up included.",
        "by design: pipeline stages, 1-bit optimizers and sparse attention change the arithmetic on purpose; their "
        "difference is shown, not judged.",
    ]
    return table


def _g(value) -> str:
    return "-" if value is None else f"{value:.3g}"
