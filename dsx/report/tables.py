"""Report tables as data: a `Table` of column names and rows of formatted cells, with group header lines and a legend.

Columns follow the tables users already keep (GPU | precision | vocab | layers | hidden | forward | batch |
memory | batch/s | mem/ex | ex/s, then ratios against a baseline), plus what dsx measures on top: tokens/s,
TFLOP/s per GPU and MFU. dsx.report.render turns a Table into rich or markdown.
"""

from __future__ import annotations

import json

from dsx.report.best import best_ok
from dsx.report.facts import (
    STATUSES, batches_per_s, boundaries, configuration, describe, device_seconds, examples_per_s, gpu_label, group_name,
    label, memory, memory_per_example, model_text, offload_text, search_key, short_error, spread, tokens_per_s,
    zero_stage,
)
from dsx.report.table import Table
from dsx.units import fmt_gib, fmt_mib, fmt_num, fmt_params, fmt_pct, fmt_ratio, fmt_spread, fmt_tflops


def fmt_seconds(total: float, missing: int, rows: list[dict]) -> str:
    """Device-seconds with their unit (GPU-s or CPU-s), and how many rows did not record them."""
    if missing == len(rows):
        return "-"
    unit = "GPU-s" if all(r["device"] == "cuda" for r in rows) else "CPU-s" if all(
        r["device"] == "cpu" for r in rows) else "device-s"
    return f"{total:,.1f} {unit}" + (f" ({missing} row(s) without)" if missing else "")


def _ratio(value: float | None, base: float | None) -> float | None:
    return None if value is None or not base else value / base


RUN_COLUMNS = ["GPU", "model", "precision", "vocab", "seq", "layers", "hidden", "ffn", "embed", "ZeRO", "offload",
               "ckpt", "micro-batch", "memory GiB", "batch/s", "mem/ex MiB", "ex/s", "tokens/s", "spread", "TFLOP/s", "MFU",
               "mem×", "speed×", "loss", "parity"]


def _dim(row: dict, key: str) -> str:
    value = row["model"]["dims"].get(key)
    return "-" if value is None else f"{value:,}" if isinstance(value, int) else str(value)


def runs_table(rows: list[dict], *, every: list[dict] | None = None, baseline: dict | None = None,
               group_by: list[str] = ("label",), show_status: bool = False) -> Table:
    """One line per row, grouped under bold header lines; the seeds' columns plus tokens/s, TFLOP/s and MFU, then
    memory per example and examples/s relative to the baseline row.

    `every` is all rows the boundaries are found from (OOM rows included even when only ok rows are shown)."""
    columns = list(RUN_COLUMNS) + (["status", "error"] if show_status else [])
    table = Table("Runs", columns)
    bounds = boundaries(every if every is not None else rows)
    base_mem = memory_per_example(baseline) if baseline else None
    base_speed = examples_per_s(baseline) if baseline else None
    from dsx.report.parity import loss_cell, parity_cell, verdicts

    judged = verdicts(every if every is not None else rows)
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(group_name(r, list(group_by)), []).append(r)
    marked = False
    for name, members in groups.items():
        table.rows.append(name)
        for r in members:
            b = bounds[search_key(r)]
            mb = str(r["micro_batch"])
            if r["status"] == "ok" and b.searched and b.fits == r["micro_batch"]:
                mb += "*"
                marked = True
            if r["grad_accum"] > 1:
                mb += f" x{r['grad_accum']} accum"
            f = r["figures"]
            cells = [
                gpu_label(r), model_text(r), r["precision"], _dim(r, "vocab_size"), str(r["model"]["seq_len"]),
                _dim(r, "layers"), _dim(r, "hidden"), _dim(r, "ffn"), _dim(r, "embedding"), str(zero_stage(r)),
                offload_text(r), "yes" if r["toggles"]["act_ckpt"] else "no", mb, fmt_gib(memory(r)),
                fmt_num(batches_per_s(r), 2), fmt_mib(memory_per_example(r)), fmt_num(examples_per_s(r)),
                fmt_num(tokens_per_s(r), 0), fmt_spread(spread(r)), fmt_tflops(f["model_tflops_per_s"]),
                fmt_pct(f["mfu"]),
                fmt_ratio(_ratio(memory_per_example(r), base_mem)), fmt_ratio(_ratio(examples_per_s(r), base_speed)),
                loss_cell(r), parity_cell(r, judged),
            ]
            if show_status:
                cells += [r["status"], short_error(r)]
            table.rows.append(cells)
    table.legend = memory_legend(rows)
    table.legend.append("mem/ex: memory / (micro-batch x grad-accum), per rank; batch/s: 1 / median step time; ex/s, "
                        "tokens/s: all ranks; spread: (slowest - fastest timed step) / median step, the run's noise (speeds closer "
                        "than it are a tie); TFLOP/s: model FLOPs per GPU; MFU: of the GPU's dense peak.")
    if baseline:
        table.legend.append(f"mem× and speed×: mem/ex and ex/s relative to {describe(baseline)}.")
    table.legend.append("loss: the last timed step's (the mean over every replica); parity: the verdict of a parity "
                        "check on the row (dsx check; ref: a check's reference run; -: not checked).")
    if marked:
        any_oom = any(b.oom_at is not None for b in bounds.values())
        table.legend.append("*: the largest micro-batch that fit in its configuration" + (
            " (the per-configuration table says where it ran out of memory)." if any_oom
            else " (none of these runs ran out of memory: the search stopped for another reason)."))
    return table


def memory_legend(rows: list[dict]) -> list[str]:
    kinds = {r["device"] for r in rows}
    out = []
    if "cuda" in kinds:
        out.append("memory (GPU rows): memory.max.peak_reserved, the peak reserved by torch's caching allocator on "
                   "one GPU (max over ranks).")
    if "cpu" in kinds:
        out.append("memory (CPU rows): memory.max.host_rss_peak, the peak resident set of one rank process (max over "
                   "ranks).")
    return out


def configurations_table(rows: list[dict]) -> Table:
    """One line per configuration (rows that differ only in micro-batch): how far the micro-batch went, where it ran
    out of memory, the best throughput and what it cost."""
    table = Table("Per configuration", ["configuration", "model", "GPU", "fits ≤", "OOM at", "best tokens/s",
                                        "its memory GiB", "MFU", "trials", "device-seconds"])
    by_key: dict[tuple, list[dict]] = {}
    for r in rows:
        by_key.setdefault(search_key(r), []).append(r)
    bounds = boundaries(rows)
    for key, group in by_key.items():
        b, best, first = bounds[key], best_ok(group), group[0]
        counts = {s: sum(r["status"] == s for r in group) for s in STATUSES}
        trials = f"{len(group)} (" + ", ".join(f"{n} {s}" for s, n in counts.items() if n) + ")"
        spent, missing = device_seconds(group)
        table.rows.append([
            label(first), model_text(first), gpu_label(first), "-" if b.fits is None else str(b.fits),
            "-" if b.oom_at is None else str(b.oom_at), fmt_num(tokens_per_s(best), 0) if best else "-",
            fmt_gib(memory(best)) if best else "-", fmt_pct(best["figures"]["mfu"]) if best else "-", trials,
            fmt_seconds(spent, missing, group),
        ])
    table.legend = [("fits ≤: the largest micro-batch that ran ok; OOM at: the smallest that ran out of memory; "
                     "device-seconds: the sum of the rows' overhead.device_seconds (launch to exit, times the ranks).")]
    return table


def sweeps_table(rows: list[dict]) -> Table | None:
    """Per sweep: trials by status, what it cost in device-seconds, how many configurations, the best one.
    None when no row came from `dsx sweep`."""
    by_sweep: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("sweep"):
            by_sweep.setdefault(r["sweep"]["sweep_id"], []).append(r)
    if not by_sweep:
        return None
    table = Table("Sweeps", ["sweep", "trials", *STATUSES, "device-seconds", "configurations", "best configuration"])
    for sweep_id, group in by_sweep.items():
        spent, missing = device_seconds(group)
        best = best_ok(group)
        table.rows.append([
            sweep_id[:12], str(len(group)), *(str(sum(r["status"] == s for r in group)) for s in STATUSES),
            fmt_seconds(spent, missing, group), str(len({search_key(r) for r in group})),
            (f"{label(best)}, micro-batch {best['micro_batch']}: {fmt_num(tokens_per_s(best), 0)} tokens/s"
             if best else "-"),
        ])
    return table


# ------------------------------------------------------------------------------------------------ effects

_OVERRIDE_DIMS = {
    "n_layer": "layers", "num_hidden_layers": "layers", "n_embd": "hidden", "hidden_size": "hidden",
    "n_inner": "ffn", "intermediate_size": "ffn", "vocab_size": "vocab_size", "n_head": "heads",
    "num_attention_heads": "heads", "embedding_size": "embedding", "n_positions": "max_positions",
    "max_position_embeddings": "max_positions",
}
"""transformers config attributes -> the model.dims key holding the base model's value, to print 'n_layer 2→1'."""


def _model_keys(row: dict) -> dict:
    """What the model of a row is made of, beyond the preset: --set overrides, seq_len, vocab_pad."""
    m = row["model"]
    return {**m["overrides"], "seq_len": m["seq_len"], "vocab_pad": m["vocab_pad"]}


def _effects_family(row: dict) -> tuple:
    """Rows whose effects can be compared: same configuration (less its model variations), micro-batch, GPUs."""
    conf = {k: v for k, v in configuration(row).items() if k != "vary"}
    return (json.dumps(conf, sort_keys=True, default=str), row["model"]["preset"], row["micro_batch"],
            row["grad_accum"], gpu_label(row), row["device"])


def _pick_base(group: list[dict]) -> dict | None:
    """The row with no --set overrides (the longest sequence if several): what every change is measured from."""
    plain = [r for r in group if not r["model"]["overrides"]]
    return max(plain, key=lambda r: r["model"]["seq_len"]) if plain else None


def _effect_line(r: dict, base: dict, change: str) -> list[str]:
    """One line of the effects table; the configuration is the base's (a sweep's label also names the --vary)."""
    return [r["model"]["preset"], label(base), str(r["micro_batch"]), change, fmt_params(r["model"]["params"]),
            fmt_gib(memory(r)), fmt_ratio(_ratio(memory(r), memory(base))), fmt_num(examples_per_s(r)),
            fmt_ratio(_ratio(examples_per_s(r), examples_per_s(base))), fmt_num(tokens_per_s(r), 0)]


def effects_table(rows: list[dict]) -> Table | None:
    """The seeds' parameter-effects table: change one model dimension at a time (a --set override, the sequence
    length or the vocab pad) and see memory and speed relative to the unchanged model at the same configuration and
    micro-batch. None when no ok row differs from such a base in exactly one key."""
    table = Table("Parameter effects", ["model", "configuration", "micro-batch", "change", "params", "memory GiB",
                                        "mem×", "ex/s", "speed×", "tokens/s"])
    families: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["status"] == "ok" and tokens_per_s(r) is not None:
            families.setdefault(_effects_family(r), []).append(r)
    found = False
    for group in families.values():
        base = _pick_base(group)
        if base is None:
            continue
        base_keys = _model_keys(base)
        changes = []
        for r in group:
            if r is base:
                continue
            keys = _model_keys(r)
            diff = [k for k in sorted(set(keys) | set(base_keys)) if keys.get(k) != base_keys.get(k)]
            if len(diff) == 1:
                changes.append((diff[0], r))
        if not changes:
            continue
        found = True

        table.rows.append(_effect_line(base, base, "base"))
        for key, r in changes:
            before = base_keys.get(key)
            if before is None and key in _OVERRIDE_DIMS:
                before = base["model"]["dims"].get(_OVERRIDE_DIMS[key])
            table.rows.append(_effect_line(r, base, f"{key} {'preset' if before is None else before}→{_model_keys(r)[key]}"))
    if not found:
        return None
    table.legend = memory_legend(rows) + [
        ("mem× and speed×: memory and ex/s relative to the base line above them (same configuration and micro-batch, "
         "no --set override).")]
    return table


# ------------------------------------------------------------------------------------------------ plots' data


def plot_rows(rows: list[dict]) -> dict[str, list[dict]]:
    """Rows per configuration line of the plots ('z2 bf16 · gpt2'; the model only when the rows hold several), in
    first-seen order."""
    one_model = len({model_text(r) for r in rows}) == 1
    out: dict[str, list[dict]] = {}
    for r in rows:
        name = label(r) if one_model else f"{label(r)} · {model_text(r)}"
        out.setdefault(name + ("" if r["world_size"] == 1 else f" · {gpu_label(r)}"), []).append(r)
    return out


