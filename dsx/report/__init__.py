"""`dsx report`: tables, a sweep summary, parameter effects and the best config, from result rows only.

Everything here is a pure function from row dicts (as `dsx.results.read_rows` returns them) to table data. The CLI
(dsx/cli/report.py) renders them with rich or as markdown; dsx/plots.py draws the figures. Nothing here imports
torch, deepspeed or matplotlib (or dsx.run and the launcher), so a report starts in well under a second.

    load         reading result files: Loaded rows, the "read from" line, ReportError
    facts        what a row means (label, configuration, memory, speed, loss curve) and the selectors that pick rows
    table        Table: the one shape every table below is built as
    tables       the runs / per-configuration / sweeps / parameter-effects tables, the plots' rows
    render       a Table as rich or markdown, and report.md
    best         the fastest ok row, its config linted, and the command that reproduces it (--best)
    vs_estimate  dsx estimate's prediction next to the measured rows (--vs-estimate; imports dsx.estimate lazily)
    long_context sequence length against speed and memory, sparse attention beside dense (rows of dsx.sparse)
    pipeline     the pipeline-stages table (rows run with --pipeline-stages)
    launches     `dsx launch` rows (a user's own script) apart from the runs, and their table
    comm         bytes per step and per parameter of the rows that counted their communication
    parity       the parity checks' verdicts (dsx check): the runs table's column and a table of the checks

Every public name of the modules is re-exported here: `from dsx.report import label` and `rp.runs_table` work.
"""

from dsx.report.best import Best, best_ok, best_summary, pick_best
from dsx.report.facts import (
    GROUP_KEYS, SELECTOR_KEYS, STATUSES, Boundary, attributes, batches_per_s, boundaries, configuration,
    derived_label, describe, device_seconds, examples_per_s, find_baseline, gpu_label, group_name, is_launch, label,
    launch_label, launch_zero, matches,
    memory, memory_field, memory_per_example, model_text, offload_devices, offload_text, parse_group_by,
    parse_selector, samples_per_rank, search_key, select, short_error, short_gpu, tokens_per_s, zero_stage,
)
from dsx.report.launches import LAUNCH_COLUMNS, launches_table, split_kinds
from dsx.report.load import Loaded, ReportError, load, read_from_line
from dsx.report.long_context import attention_text, long_context_table
from dsx.report.pipeline import PIPELINE_COLUMNS, pipeline_table
from dsx.report.render import HEADER_WIDTH, RICH_DROP_ORDER, markdown_report, to_markdown, to_rich
from dsx.report.table import Table
from dsx.report.tables import (
    RUN_COLUMNS, configurations_table, effects_table, fmt_seconds, memory_legend, plot_rows, runs_table,
    sweeps_table,
)
from dsx.report.vs_estimate import deepspeed_estimator_gpu_bytes, vs_estimate_table
from dsx.report.comm import comm_table
from dsx.report.parity import PARITY_COLUMNS, parity_table, verdicts
from dsx.units import GIB, MIB, fmt_gib, fmt_mib, fmt_num, fmt_params, fmt_pct, fmt_ratio, fmt_tflops

__all__ = [
    "PARITY_COLUMNS", "parity_table", "verdicts",
    "attention_text", "long_context_table", "GIB", "MIB", "STATUSES", "GROUP_KEYS", "SELECTOR_KEYS", "ReportError", "Loaded", "load", "read_from_line",
    "short_gpu", "gpu_label", "zero_stage", "offload_devices", "offload_text", "derived_label", "label",
    "configuration", "model_text", "attributes", "memory_field", "memory", "samples_per_rank", "memory_per_example",
    "batches_per_s", "examples_per_s", "tokens_per_s", "device_seconds", "fmt_gib", "fmt_mib", "fmt_num",
    "fmt_tflops", "fmt_pct", "fmt_ratio", "fmt_params", "fmt_seconds", "short_error", "parse_selector", "matches",
    "select", "find_baseline", "parse_group_by", "group_name", "Table", "search_key", "Boundary", "boundaries",
    "RUN_COLUMNS", "runs_table", "memory_legend", "describe", "best_ok", "configurations_table", "sweeps_table",
    "effects_table", "plot_rows", "to_markdown", "RICH_DROP_ORDER", "HEADER_WIDTH", "to_rich", "Best", "pick_best",
    "best_summary", "markdown_report", "vs_estimate_table", "deepspeed_estimator_gpu_bytes", "PIPELINE_COLUMNS",
    "pipeline_table", "is_launch", "launch_label", "launch_zero", "LAUNCH_COLUMNS", "launches_table", "split_kinds",
    "comm_table",
]
