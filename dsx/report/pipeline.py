"""The pipeline table of `dsx report`: one line per row run with --pipeline-stages (dsx.results.PipelineInfo)."""

from __future__ import annotations

from dsx.report.facts import gpu_label, label, memory_field, model_text, tokens_per_s
from dsx.report.table import Table
from dsx.units import fmt_gib, fmt_num, fmt_params, fmt_pct, fmt_tflops

PIPELINE_COLUMNS = ["configuration", "model", "GPU", "stages×DP", "micro-batch", "μ-batches/step", "bubble",
                    "partition", "params per stage", "peak GiB per stage", "largest", "tokens/s", "TFLOP/s", "MFU",
                    "tied"]


def pipeline_table(rows: list[dict]) -> Table | None:
    """Stages, replicas, micro-batches and the ideal bubble, each stage's parameters and peak memory (the max over
    its ranks), the largest stage, and the speed. None when no row ran a pipeline."""
    piped = [r for r in rows if r.get("pipeline")]
    if not piped:
        return None
    table = Table("Pipeline stages", list(PIPELINE_COLUMNS))
    for r in piped:
        p, f = r["pipeline"], r["figures"]
        stages = p["per_stage"]
        field = memory_field(r)
        table.rows.append([
            label(r), model_text(r), gpu_label(r), f"{p['stages']}×{p['data_parallel']}", str(r["micro_batch"]),
            str(p["micro_batches"]), fmt_pct(p["bubble_fraction"]), p["partition"],
            " / ".join(fmt_params(s["params"]) if s["params"] is not None else "-" for s in stages) or "-",
            " / ".join(fmt_gib(s["memory"][field]) for s in stages) or "-",
            "-" if p["largest_stage"] is None else str(p["largest_stage"]), fmt_num(tokens_per_s(r), 0),
            fmt_tflops(f["model_tflops_per_s"]), fmt_pct(f["mfu"]),
            {True: "equal", False: "DIFFER", None: "-"}[p["tied_weights_equal"]],
        ])
    table.legend = [
        "stages×DP: pipeline stages × data-parallel replicas (the ranks); μ-batches/step: pipeline micro-batches per "
        "optimizer step (grad-accum); bubble: the 1F1B schedule's ideal idle share (stages-1)/(μ-batches+stages-1).",
        "params / peak GiB per stage: stage 0 first; peak is peak reserved on GPUs, peak RSS on CPU ranks (max over "
        "the stage's ranks); largest: the stage with the highest peak. tied: the first and the last stage's copies of "
        "a tied embedding are bit-for-bit equal after the run (- : untied).",
    ]
    return table
