"""The communication table: bytes per optimizer step and per parameter of the rows that counted them (RunRow.comm,
dsx.comm), next to dsx.comm.predict's figure and the ZeRO paper's, and a 1-bit run's two phases."""

from __future__ import annotations

from dsx.report.facts import gpu_label, label, model_text
from dsx.report.table import Table
from dsx.units import format_bytes

COMM_COLUMNS = ["GPU", "model", "configuration", "mb", "nodes", "DeepSpeed", "bytes/step", "max rank", "B/param",
                "predicted", "÷ pred.", "ZeRO paper", "calls/step", "1-bit warm-up", "1-bit compressed"]
SHORT = {"all_reduce": "AR", "all_gather_into_tensor": "AG", "all_gather": "AG", "reduce_scatter_tensor": "RS",
         "reduce_scatter": "RS", "all_to_all_single": "A2A", "all_to_all": "A2A", "broadcast": "BC"}
"""The calls column's names for DeepSpeed's log names (others as they are)."""


def _phase(comm: dict, name: str, predicted: float | None = None) -> str:
    phase = (comm.get("phases") or {}).get(name)
    if not phase:
        return "-"
    time = phase.get("step_time_s_median")
    return (f"{format_bytes(phase.get('bytes_per_step'))}" + (f", {time * 1e3:.0f} ms" if time else "")
            + f" ({len(phase['steps'])} steps" + (f"; predicted {format_bytes(predicted)}" if predicted is not None
                                                  else "") + ")")


def measured_over_predicted(comm: dict) -> float | None:
    """The measured bytes per step over the prediction: a 1-bit row's warm-up steps (what the prediction is for;
    its compressed steps have their own, compressed_bytes_per_step), else all its timed steps."""
    predicted = (comm.get("predicted") or {}).get("bytes_per_step")
    warmup = (comm.get("phases") or {}).get("warmup")
    measured = warmup.get("bytes_per_step") if warmup else comm.get("bytes_per_step")
    return measured / predicted if predicted and measured is not None else None


def comm_table(rows: list[dict]) -> Table | None:
    """One line per row with counted communication; None when no row has any (rows of older dsx, --no-comm-log)."""
    counted = [r for r in rows if (r.get("comm") or {}).get("bytes_per_step") is not None]
    if not counted:
        return None
    table = Table("Communication per optimizer step", COMM_COLUMNS)
    for r in counted:
        c = r["comm"]
        predicted = c.get("predicted") or {}
        pred = predicted.get("bytes_per_step")
        ratio = measured_over_predicted(c)
        calls = " ".join(f"{SHORT.get(name, name)}×{v['calls_per_step']:g}" for name, v in sorted(c["collectives"].items()))
        table.rows.append([
            gpu_label(r), model_text(r), label(r), f"{r['micro_batch']} x {r.get('grad_accum') or 1}",
            str(len((r.get("nodes") or {}).get("hosts") or [None])), (r.get("versions") or {}).get("deepspeed") or "-",
            format_bytes(c["bytes_per_step"]), format_bytes(c.get("bytes_per_step_max")),
            "-" if c.get("bytes_per_param") is None else f"{c['bytes_per_param']:.2f}", format_bytes(pred),
            "-" if ratio is None else f"{ratio:.3f}", format_bytes(predicted.get("paper_bytes_per_step")),
            calls or "-", _phase(c, "warmup"), _phase(c, "compressed", predicted.get("compressed_bytes_per_step")),
        ])
    table.legend = [
        "mb: micro-batch x grad-accum per rank; nodes: the hosts the ranks ran on (a hostfile's). "
        "bytes: the ZeRO paper's data volume per rank (an all-reduce counts twice its tensor, an all-gather its "
        "gathered output, the rest their input), from DeepSpeed's comms logger over the timed steps, rank 0; max "
        "rank: the largest rank's; B/param: bytes / the model's parameters; calls/step: AR all-reduce, AG all-gather, "
        "RS reduce-scatter, A2A all-to-all, BC broadcast.",
        "predicted: dsx estimate's figure for what DeepSpeed sends (dsx.comm.predict), ÷ pred. the measured over it "
        "(a 1-bit row's warm-up steps); ZeRO paper: 2 x params (ZeRO 0-2) or 3 x params (ZeRO-3) in the "
        "communication dtype. 1-bit columns: the optimizer's uncompressed warm-up and compressed steps, bytes and "
        "median step time each, the compressed ones beside their own prediction.",
    ]
    return table
