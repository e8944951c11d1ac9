"""`dsx report`: tables, a sweep summary, parameter effects and the best config, from result rows only.

Everything here is a pure function from row dicts (as `dsx.results.read_rows` returns them) to table data: a
`Table` of column names and rows of already formatted cells, with group header lines and a legend. The CLI
(dsx/cli/report.py) renders them with rich or as markdown; dsx/plots.py draws the figures. Nothing here imports
torch, deepspeed or matplotlib, so a report starts in well under a second.

Columns follow the tables users already keep (GPU | precision | vocab | layers | hidden | forward | batch |
memory | batch/s | mem/ex | ex/s, then ratios against a baseline), plus what dsx measures on top: tokens/s,
TFLOP/s per GPU and MFU.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from dsx.results import SCHEMA_VERSION, RunRow, read_rows

GIB = 1024 ** 3
MIB = 1024 ** 2
STATUSES = ("ok", "oom", "error", "timeout")

GROUP_KEYS = ("label", "zero", "offload", "precision", "act_ckpt", "model", "gpu", "micro_batch", "world_size",
              "sweep")
"""What --group-by accepts."""

SELECTOR_KEYS = ("label", "zero", "offload", "offload_params", "precision", "act_ckpt", "compile", "model", "gpu",
                 "micro_batch", "grad_accum", "world_size", "seq_len", "sweep", "search", "status")
"""What --where and --baseline selectors accept (KEY=VALUE,...)."""

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class ReportError(Exception):
    """A user mistake or an input with nothing to report: one line for the user, and the exit status."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


# ------------------------------------------------------------------------------------------------ loading


@dataclass
class Loaded:
    """The rows of every results file, normalised (every optional field present), and what was left out."""

    rows: list[dict] = field(default_factory=list)
    files: list[tuple[str, int, int]] = field(default_factory=list)
    """(path, rows used, lines or rows skipped) per file, for the report's "read from" line."""
    warnings: list[str] = field(default_factory=list)


def load(paths: list[str]) -> Loaded:
    """Read every file; rows that are not dsx rows of this schema version are skipped with a warning.

    Rows are validated with dsx.results.RunRow and dumped back to dicts, so a row written before an optional
    field existed reads that field as its default (None, {}) and the table code needs no `.get` chains.
    Raises ReportError (exit 2) for a missing or unreadable file; no usable row at all is the caller's to refuse
    (after it has shown the warnings that say why).
    """
    loaded = Loaded()
    for path in paths:
        p = Path(path)
        if not p.exists():
            raise ReportError(f"{path}: no such file", 2)
        if p.is_dir():
            raise ReportError(f"{path}: is a directory, not a results file", 2)
        if not os.access(p, os.R_OK):
            raise ReportError(f"{path}: cannot be read (permission denied)", 2)
        raw = read_rows(p)
        skipped = len(raw.skipped)
        if raw.skipped:
            shown = "; ".join(f"line {n}: {why}" for n, why in raw.skipped[:3])
            more = f"; and {len(raw.skipped) - 3} more" if len(raw.skipped) > 3 else ""
            loaded.warnings.append(f"{path}: skipped {len(raw.skipped)} line(s) that are not JSON rows "
                                   f"({shown}{more})")
        versions: dict[object, int] = {}
        invalid: list[str] = []
        used = 0
        for index, data in enumerate(raw, start=1):
            version = data.get("schema_version")
            if version != SCHEMA_VERSION:
                versions[version] = versions.get(version, 0) + 1
                continue
            try:
                row = RunRow.model_validate(data, extra="ignore")  # fields a newer dsx added
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(part) for part in first["loc"]) or "row"
                invalid.append(f"row {index}: {where}: {first['msg']}")
                continue
            loaded.rows.append(row.model_dump(mode="json"))
            used += 1
        for version, count in versions.items():
            what = ("without a schema_version (not a dsx run row)" if version is None
                    else f"of schema_version {version!r} (this dsx reads {SCHEMA_VERSION})")
            loaded.warnings.append(f"{path}: skipped {count} row(s) {what}")
        if invalid:
            loaded.warnings.append(f"{path}: skipped {len(invalid)} row(s) that are not valid dsx rows "
                                   f"({'; '.join(invalid[:3])})")
        skipped += sum(versions.values()) + len(invalid)
        loaded.files.append((path, used, skipped))
    return loaded


def read_from_line(loaded: Loaded) -> str:
    """Which files were read and how many rows: every report says what it was made from."""
    parts = [f"{path} ({used} row(s)" + (f", {skipped} skipped" if skipped else "") + ")"
             for path, used, skipped in loaded.files]
    return f"Read {len(loaded.rows)} row(s) from " + ", ".join(parts) + "."


# ------------------------------------------------------------------------------------------------ facts of a row


def short_gpu(name: str | None) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100', 'NVIDIA A100-SXM4-40GB' -> 'A100', 'NVIDIA GeForce RTX 4090' -> 'RTX 4090'."""
    if not name:
        return "GPU"
    words = [w for w in re.split(r"[\s-]+", name.strip()) if w.lower() not in ("nvidia", "geforce", "tesla", "amd")]
    if not words:
        return name
    if words[0].upper() in ("RTX", "GTX", "QUADRO", "RADEON", "INSTINCT") and len(words) > 1:
        return " ".join(words[:2])
    return words[0]


def gpu_label(row: dict) -> str:
    """The seeds' GPU column: '1060', '2 x T4'; CPU ranks read 'CPU'."""
    one = short_gpu(row["gpu_name"]) if row["device"] == "cuda" else "CPU"
    return one if row["world_size"] == 1 else f"{row['world_size']} x {one}"


def zero_stage(row: dict) -> int:
    return int((row["ds_config"].get("zero_optimization") or {}).get("stage", 0))


def offload_devices(row: dict) -> tuple[str, str]:
    """(optimizer device, parameter device), each none | cpu | nvme, from the resolved DeepSpeed config."""
    zero = row["ds_config"].get("zero_optimization") or {}
    return tuple((zero.get(key) or {}).get("device") or "none" for key in ("offload_optimizer", "offload_param"))


def offload_text(row: dict) -> str:
    opt, param = offload_devices(row)
    if opt == "none" and param == "none":
        return "none"
    if param == "none":
        return opt
    return f"{opt}+params" if opt == param else f"{opt}, params {param}"


def derived_label(row: dict) -> str:
    """A configuration label for a plain `dsx run` row, in the style of `dsx sweep` labels ('z3 off=cpu bf16 ckpt')."""
    opt, param = offload_devices(row)
    parts = [f"z{zero_stage(row)}"]
    if opt != "none":
        parts.append(f"off={opt}")
    if param != "none":
        parts.append(f"params={param}")
    parts.append(row["precision"])
    if row["toggles"]["act_ckpt"]:
        parts.append("ckpt")
    if row["toggles"]["compile"]:
        parts.append("compile")
    if row["world_size"] > 1:
        parts.append(f"{row['world_size']}{'gpu' if row['device'] == 'cuda' else 'cpu'}")
    if row["memory_cap"]:
        parts.append(f"cap={fmt_gib(row['memory_cap'])}GiB")
    return " ".join(parts)


def label(row: dict) -> str:
    """The sweep's label when the row comes from `dsx sweep`, else one derived from the row's config."""
    return row["sweep"]["label"] if row.get("sweep") else derived_label(row)


def configuration(row: dict) -> dict:
    """The axis values of the row's configuration, whether or not it came from a sweep (sweep rows carry theirs;
    plain rows get the same keys from the DeepSpeed config, precision, toggles and world size)."""
    if row.get("sweep"):
        return dict(row["sweep"]["configuration"])
    opt, param = offload_devices(row)
    return {"zero": zero_stage(row), "offload": opt, "offload_params": param, "precision": row["precision"],
            "act_ckpt": row["toggles"]["act_ckpt"], "gpus": row["world_size"], "compile": row["toggles"]["compile"],
            "vary": dict(row["model"]["overrides"])}


def model_text(row: dict) -> str:
    """Preset plus its --set overrides and a changed vocab pad: what distinguishes the model of a row."""
    m = row["model"]
    extra = [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in sorted(m["overrides"].items())]
    return " ".join([m["preset"], *extra])


def attributes(row: dict) -> dict[str, str]:
    """Every selector / group-by key of a row, as the lower-case text a selector value is compared with."""
    opt, param = offload_devices(row)
    values = {
        "label": label(row), "zero": zero_stage(row), "offload": opt, "offload_params": param,
        "precision": row["precision"], "act_ckpt": row["toggles"]["act_ckpt"], "compile": row["toggles"]["compile"],
        "model": row["model"]["preset"], "gpu": gpu_label(row), "micro_batch": row["micro_batch"],
        "grad_accum": row["grad_accum"], "world_size": row["world_size"], "seq_len": row["model"]["seq_len"],
        "sweep": row["sweep"]["sweep_id"] if row.get("sweep") else "-",
        "search": row["sweep"]["search"] if row.get("sweep") else "-", "status": row["status"],
    }
    return {k: (str(v).lower() if not isinstance(v, bool) else ("true" if v else "false")) for k, v in values.items()}


def memory_field(row: dict) -> str:
    """The figure the memory column shows: what torch's caching allocator reserved on a GPU (what decides an OOM),
    the process's peak resident set on CPU ranks (they have no device allocator)."""
    return "peak_reserved" if row["device"] == "cuda" else "host_rss_peak"


def memory(row: dict) -> int | None:
    """Peak memory of one rank (max over ranks), bytes."""
    return row["memory"]["max"][memory_field(row)]


def samples_per_rank(row: dict) -> int:
    return row["micro_batch"] * row["grad_accum"]


def memory_per_example(row: dict) -> float | None:
    """Bytes of peak memory per sample a rank processes in an optimizer step (the seeds' mem/ex)."""
    m = memory(row)
    return None if m is None else m / samples_per_rank(row)


def batches_per_s(row: dict) -> float | None:
    """Optimizer steps per second: 1 / median step time (the seeds' batch/s)."""
    step = row["figures"]["step_time_s"]
    return 1.0 / step["median"] if step and step["median"] else None


def examples_per_s(row: dict) -> float | None:
    return row["figures"]["samples_per_s"]


def tokens_per_s(row: dict) -> float | None:
    return row["figures"]["tokens_per_s"]


def device_seconds(rows: list[dict]) -> tuple[float, int]:
    """(sum of overhead.device_seconds, rows that lack it): what the rows cost in GPU-seconds (CPU-rank-seconds)."""
    known = [r["overhead"]["device_seconds"] for r in rows if r["overhead"]["device_seconds"] is not None]
    return sum(known), len(rows) - len(known)


# ------------------------------------------------------------------------------------------------ formatting


def fmt_gib(n: float | None) -> str:
    return "-" if n is None else f"{n / GIB:,.1f}"


def fmt_mib(n: float | None) -> str:
    return "-" if n is None else f"{n / MIB:,.1f}"


def fmt_num(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def fmt_tflops(v: float | None) -> str:
    """Three significant figures below 100 (CPU runs are tiny), whole numbers above."""
    if v is None:
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def fmt_pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def fmt_ratio(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def fmt_params(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def fmt_seconds(total: float, missing: int, rows: list[dict]) -> str:
    """Device-seconds with their unit (GPU-s or CPU-s), and how many rows did not record them."""
    if missing == len(rows):
        return "-"
    unit = "GPU-s" if all(r["device"] == "cuda" for r in rows) else "CPU-s" if all(
        r["device"] == "cpu" for r in rows) else "device-s"
    return f"{total:,.1f} {unit}" + (f" ({missing} row(s) without)" if missing else "")


def short_error(row: dict, limit: int = 60) -> str:
    """The row's error cut to one short line. An allocation failure keeps its size, which is what tells one OOM from
    another: 'rank 0: RuntimeError: … tried to allocate 204800000 bytes' rather than the allocator's preamble."""
    text = (row.get("error") or "").splitlines()[0] if row.get("error") else ""
    size = re.search(r"tried to allocate (\d+(?:\.\d+)? ?(?:[KMGT]i?B|bytes))", text, re.IGNORECASE)
    if size and len(text) > limit:
        head = ":".join(text.split(":")[:2])
        text = f"{head}: … tried to allocate {size.group(1)}"
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _ratio(value: float | None, base: float | None) -> float | None:
    return None if value is None or not base else value / base


# ------------------------------------------------------------------------------------------------ selecting


def parse_selector(text: str, option: str = "--where") -> dict[str, str]:
    """'zero=2,offload=none' -> {'zero': '2', 'offload': 'none'}; ReportError (exit 2) on a bad one."""
    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise ReportError(f"bad {option} '{text}': expected KEY=VALUE[,KEY=VALUE...]", 2)
        if key not in SELECTOR_KEYS:
            raise ReportError(f"unknown key '{key}' in {option} '{text}' (known: {', '.join(SELECTOR_KEYS)})", 2)
        value = value.lower()
        out[key] = "true" if value in _TRUE and key in ("act_ckpt", "compile") else (
            "false" if value in _FALSE and key in ("act_ckpt", "compile") else value)
    return out


def matches(row: dict, selector: dict[str, str]) -> bool:
    """Every key equal (case-insensitive); a sweep id also matches by prefix."""
    attrs = attributes(row)
    for key, want in selector.items():
        have = attrs[key]
        if key == "sweep" and have.startswith(want):
            continue
        if have != want:
            return False
    return True


def select(rows: list[dict], where: str | None) -> list[dict]:
    return rows if not where else [r for r in rows if matches(r, parse_selector(where))]


def find_baseline(shown: list[dict], spec: str | None) -> dict | None:
    """The row ratios are taken against: a run_id prefix, a configuration label, or a KEY=VALUE selector (first
    match among the rows shown); by default the first ok row shown."""
    ok = [r for r in shown if r["status"] == "ok"]
    if not spec:
        return ok[0] if ok else None
    if "=" in spec:
        selector = parse_selector(spec, "--baseline")
        found = [r for r in ok if matches(r, selector)]
    else:
        found = [r for r in ok if r["run_id"].startswith(spec.lower())] or [r for r in ok if label(r) == spec]
    if not found:
        raise ReportError(f"--baseline '{spec}' matches no ok row shown (give a run id prefix, a configuration "
                          f"label, or KEY=VALUE[,KEY=VALUE...])", 1)
    return found[0]


def parse_group_by(text: str | None) -> list[str]:
    keys = [k.strip() for k in (text or "label").split(",") if k.strip()]
    for key in keys:
        if key not in GROUP_KEYS:
            raise ReportError(f"unknown --group-by key '{key}' (known: {', '.join(GROUP_KEYS)})", 2)
    return keys or ["label"]


def group_name(row: dict, keys: list[str]) -> str:
    """The bold header line of a group: 'z2 bf16' when grouped by label, else 'zero=2, gpu=h100'."""
    attrs = attributes(row)
    shown = {**attrs, "label": label(row), "gpu": gpu_label(row),
             "sweep": (row["sweep"]["sweep_id"][:8] if row.get("sweep") else "no sweep")}
    return ", ".join(shown[k] if k == "label" else f"{k}={shown[k]}" for k in keys)


# ------------------------------------------------------------------------------------------------ tables


@dataclass
class Table:
    """Formatted table data, independent of how it is rendered.

    `rows` holds lists of cells (strings, one per column) and group header lines (a plain string)."""

    title: str
    columns: list[str]
    rows: list[list[str] | str] = field(default_factory=list)
    legend: list[str] = field(default_factory=list)


def search_key(row: dict) -> tuple:
    """Rows that differ only in micro-batch: one sweep (or none) + one configuration + one model on one GPU kind."""
    m = row["model"]
    return (row["sweep"]["sweep_id"] if row.get("sweep") else None, label(row), m["preset"],
            json.dumps(m["overrides"], sort_keys=True), m["seq_len"], m["vocab_pad"], gpu_label(row),
            row["grad_accum"], row["memory_cap"], row["toggles"]["attn"], row["toggles"]["tf32"])


@dataclass
class Boundary:
    """Where a configuration stopped fitting: the largest micro-batch that ran ok, the smallest that ran out."""

    fits: int | None
    oom_at: int | None
    searched: bool
    """True when the rows are a micro-batch search (an OOM among them, or a sweep's grow/bisect steps)."""


def boundaries(rows: list[dict]) -> dict[tuple, Boundary]:
    by_key: dict[tuple, list[dict]] = {}
    for r in rows:
        by_key.setdefault(search_key(r), []).append(r)
    out = {}
    for key, group in by_key.items():
        ok = [r["micro_batch"] for r in group if r["status"] == "ok"]
        oom = [r["micro_batch"] for r in group if r["status"] == "oom"]
        searched = bool(oom) or any(r.get("sweep") and r["sweep"]["search"] != "fixed" for r in group)
        out[key] = Boundary(max(ok) if ok else None, min(oom) if oom else None, searched)
    return out


RUN_COLUMNS = ["GPU", "model", "precision", "vocab", "seq", "layers", "hidden", "ffn", "embed", "ZeRO", "offload",
               "ckpt", "micro-batch", "memory GiB", "batch/s", "mem/ex MiB", "ex/s", "tokens/s", "TFLOP/s", "MFU",
               "mem×", "speed×"]


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
                fmt_num(tokens_per_s(r), 0), fmt_tflops(f["model_tflops_per_s"]), fmt_pct(f["mfu"]),
                fmt_ratio(_ratio(memory_per_example(r), base_mem)), fmt_ratio(_ratio(examples_per_s(r), base_speed)),
            ]
            if show_status:
                cells += [r["status"], short_error(r)]
            table.rows.append(cells)
    table.legend = memory_legend(rows)
    table.legend.append("mem/ex: memory / (micro-batch x grad-accum), per rank; batch/s: 1 / median step time; ex/s, "
                        "tokens/s: all ranks; TFLOP/s: model FLOPs per GPU; MFU: of the GPU's dense peak.")
    if baseline:
        table.legend.append(f"mem× and speed×: mem/ex and ex/s relative to {describe(baseline)}.")
    if marked:
        table.legend.append("*: the largest micro-batch that fit in its configuration (the per-configuration table "
                            "says where it ran out of memory).")
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


def describe(row: dict) -> str:
    """A row in a few words: 'run 2695a46b (albert-base, z1 bf16, micro-batch 128, H100)'."""
    return (f"run {row['run_id'][:8]} ({model_text(row)}, {label(row)}, micro-batch {row['micro_batch']}, "
            f"{gpu_label(row)})")


def best_ok(rows: list[dict]) -> dict | None:
    """The ok row with the most tokens/s."""
    ok = [r for r in rows if r["status"] == "ok" and tokens_per_s(r) is not None]
    return max(ok, key=tokens_per_s) if ok else None


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


# ------------------------------------------------------------------------------------------------ renderers


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


RICH_DROP_ORDER = ("error", "embed", "ffn", "vocab", "hidden", "layers", "seq", "precision", "batch/s", "TFLOP/s",
                   "ckpt", "its memory GiB", "device-seconds", "mem/ex MiB")
"""Columns the terminal table gives up first when it is narrower than the table (markdown keeps them all)."""


HEADER_WIDTH = 16
"""Group header lines sit in the first column: past this many characters they wrap rather than widen it."""


def to_rich(table: Table, width: int | None = None):
    """(a rich Table, notes to print under it with the legend).

    Columns that are '-' on every line are dropped. When the table is wider than `width`, columns with one value
    on every line go next (a note says what that value is), then those of RICH_DROP_ORDER, one at a time, until it
    fits: a terminal has no room to spare, and a cut or wrapped cell is worse than a missing column
    (`--format markdown` keeps every column)."""
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


# ------------------------------------------------------------------------------------------------ the best row


@dataclass
class Best:
    row: dict
    config: dict
    findings: list
    """dsx.lint findings of the row's ds_config at its world size (warnings only, or it would have been refused)."""
    command: str
    """The argv that made the row, shell-quoted: run it to reproduce."""


def pick_best(rows: list[dict], target) -> Best:
    """The ok row with the most tokens/s, its DeepSpeed config linted at the row's world size against `target`.

    Refused (ReportError, exit 1) when there is no ok row, or when the config has lint errors: a config dsx would
    itself reject is no recommendation."""
    import shlex

    from dsx.lint.engine import lint

    row = best_ok(rows)
    if row is None:
        raise ReportError(f"no ok row with a throughput among {len(rows)} row(s): nothing to pick", 1)
    findings = lint(row["ds_config"], target=target, world_size=row["world_size"])
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        details = "; ".join(f.render().replace("\n    ", " ") for f in errors)
        raise ReportError(f"the best row {row['run_id'][:8]} has a DeepSpeed config with {len(errors)} lint "
                          f"error(s) for DeepSpeed {target} at world size {row['world_size']}, not writing it: "
                          f"{details}", 1)
    return Best(row, row["ds_config"], findings, shlex.join(row["command"]))


def best_summary(best: Best) -> list[str]:
    """What `--best` prints: which row, its figures, and the command that reproduces it."""
    r, f = best.row, best.row["figures"]
    lines = [
        f"best: {describe(r)}",
        (f"  {fmt_num(tokens_per_s(r), 0)} tokens/s, {fmt_num(examples_per_s(r))} ex/s, "
         f"{fmt_tflops(f['model_tflops_per_s'])} TFLOP/s per GPU, MFU {fmt_pct(f['mfu'])}, "
         f"peak memory {fmt_gib(memory(r))} GiB ({memory_field(r)})"),
        f"  reproduce: {best.command}",
    ]
    lines += ["  " + finding.render("config").replace("\n", "\n  ") for finding in best.findings]
    return lines


# ------------------------------------------------------------------------------------------------ report.md


def markdown_report(loaded: Loaded, tables: list[Table], images: list[tuple[str, str]],
                    where: str | None = None) -> str:
    """The report file: what it was read from, every table in markdown, and the plots (paths relative to it)."""
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
    return "\n".join(lines) + "\n"


def vs_estimate_table(rows: list[dict]) -> Table:
    """Predicted (dsx estimate) next to measured for every row whose GPU is calibrated, with the error; DeepSpeed's
    own model-states estimators (estimate_zero2/3_model_states_mem_needs, additional_buffer_factor 1) beside them.
    Imports torch and transformers (the model is built on the meta device)."""
    from dsx.calibration import calibration_role
    from dsx.estimate import EstimateError, estimate, setup_of_row

    table = Table("Predicted vs measured (dsx estimate)", [
        "configuration", "model", "mb", "status", "peak alloc GiB", "predicted", "error", "fit predicted",
        "host GiB", "predicted host", "tokens/s", "predicted tokens/s", "DeepSpeed estimator GiB", "role"])
    for r in rows:
        try:
            e = estimate(setup_of_row(r), search_max=False)
        except EstimateError:
            continue
        measured = r["memory"]["max"].get("peak_allocated")
        ok = r["status"] == "ok"
        error = fmt_pct((e.peak_allocated - measured) / measured) if ok and measured else "-"
        if ok and measured and e.peak_allocated > measured:
            error = "+" + error
        right = (e.fits and ok) or (not e.fits and r["status"] == "oom")
        host = r["memory"]["max"].get("host_rss_peak")
        table.rows.append([
            label(r), model_text(r), str(r["micro_batch"]), r["status"], fmt_gib(measured) if ok else "-",
            fmt_gib(e.peak_allocated), error, ("fits" if e.fits else "OOM") + (" ✓" if right else " ✗"),
            fmt_gib(host) if ok and e.offload != "none" else "-",
            fmt_gib(e.host_per_rank) if e.offload != "none" else "-",
            fmt_num(tokens_per_s(r), 0) if ok else "-", fmt_num(e.tokens_per_s, 0),
            fmt_gib(deepspeed_estimator_gpu_bytes(r, e)), calibration_role(r)])
    table.legend = [
        "peak alloc: torch's peak allocated on the busiest rank; error: (predicted - measured) / measured; fit "
        "predicted: peak allocated + CUDA context + allocator headroom <= the GPU's memory (✓ when the row's status "
        "agrees); DeepSpeed estimator: its model-states-only formula (no activations) for the row's stage and "
        "offload; role: calibration rows set dsx.estimate's constants, fit calibration rows set the allocator "
        "headroom (their memory is judged), judged rows set nothing."]
    return table


def deepspeed_estimator_gpu_bytes(row: dict, e) -> int | None:
    """DeepSpeed 0.19's estimate_zero{2,3}_model_states_mem_needs GPU figure for the row (its formulas: params and
    optimizer states only), additional_buffer_factor 1. None where it has no estimator (ZeRO-0)."""
    n, w = e.params, e.world_size
    if e.zero in (1, 2):
        return 2 * n if e.offload != "none" else 2 * n + int(18 * n / w)
    if e.zero == 3:
        from dsx.estimate import setup_of_row
        from dsx.models import largest_module_params

        largest = 4 * largest_module_params(setup_of_row(row).resolved)  # its _all_live term
        if e.offload != "none":
            return largest if e.offload_params != "none" else largest + int(2 * n / w)
        return largest + int(18 * n / w)
    return None

