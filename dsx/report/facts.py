"""What a result row means: its configuration, model, GPU, memory and speed figures, and the selectors that pick rows.

Every table, plot and `--best` of a report reads rows through these, so a row means the same thing in each. The
configuration facts (ZeRO stage, offload, the label) come from dsx.config_facts, read off the row's `ds_config`, so
they agree with what run and sweep wrote.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from dsx import config_facts
from dsx.config_facts import ONEBIT
from dsx.report.load import ReportError
from dsx.units import fmt_gib

STATUSES = ("ok", "oom", "error", "timeout")

GROUP_KEYS = ("label", "zero", "offload", "precision", "act_ckpt", "model", "gpu", "micro_batch", "world_size",
              "sweep", "pipeline_stages")
"""What --group-by accepts."""

SELECTOR_KEYS = ("label", "zero", "offload", "offload_params", "precision", "act_ckpt", "compile", "model", "gpu",
                 "micro_batch", "grad_accum", "world_size", "seq_len", "sweep", "search", "status", "sparse",
                 "pipeline_stages")
"""What --where and --baseline selectors accept (KEY=VALUE,...)."""

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


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
    return config_facts.zero_stage(row["ds_config"])


def offload_devices(row: dict) -> tuple[str, str]:
    """(optimizer device, parameter device), each none | cpu | nvme, from the resolved DeepSpeed config."""
    return config_facts.offload_devices(row["ds_config"])


def offload_text(row: dict) -> str:
    return config_facts.offload_text(*offload_devices(row), ratio=config_facts.offload_ratio(row["ds_config"]))


def derived_label(row: dict) -> str:
    """A configuration label for a plain `dsx run` row, in the style of `dsx sweep` labels ('z3 off=cpu bf16 ckpt')."""
    opt, param = offload_devices(row)
    extra = []
    if row["world_size"] > 1:
        extra.append(f"{row['world_size']}{'gpu' if row['device'] == 'cuda' else 'cpu'}")
    if row["memory_cap"]:
        extra.append(f"cap={fmt_gib(row['memory_cap'])}GiB")
    if row.get("sparse_attention"):
        extra.append(f"sparse={row['sparse_attention']['requested']}")
    if row.get("pipeline"):
        extra.append(f"pp{row['pipeline']['stages']}")
    if row["toggles"].get("loss") in ("tiled", "fused"):
        extra.append(f"{row['toggles']['loss']}-loss")
    extra += [name for key, name in (("act_ckpt_offload", "ckpt-offload"), ("tiled_mlp", "tiled-mlp"))
              if row["toggles"].get(key)]
    if row["toggles"].get("kernels"):
        extra.append(row["toggles"]["kernels"])
    if row["toggles"].get("fp8"):
        extra.append(f"fp8={row['toggles']['fp8']}")
    optimizer = str(((row.get("ds_config") or {}).get("optimizer") or {}).get("type", ""))
    if optimizer.lower() in ONEBIT:  # the 1-bit optimizers run at ZeRO-0 fp16 alike: the optimizer tells them apart
        extra.append(optimizer)
    return config_facts.configuration_label(zero=zero_stage(row), offload=opt, offload_params=param,
                                            precision=row["precision"], act_ckpt=row["toggles"]["act_ckpt"],
                                            compile=row["toggles"]["compile"], extra=extra,
                                            offload_ratio=config_facts.offload_ratio(row["ds_config"]))


def label(row: dict) -> str:
    """The sweep's label when the row comes from `dsx sweep`, else one derived from the row's config (and for a
    launch row, its script)."""
    if is_launch(row):
        return launch_label(row)
    return row["sweep"]["label"] if row.get("sweep") else derived_label(row)


def configuration(row: dict) -> dict:
    """The axis values of the row's configuration, whether or not it came from a sweep (sweep rows carry theirs;
    plain rows get the same keys from the DeepSpeed config, precision, toggles and world size)."""
    if row.get("sweep"):
        return dict(row["sweep"]["configuration"])
    opt, param = offload_devices(row)
    pipeline = {"pipeline_stages": row["pipeline"]["stages"]} if row.get("pipeline") else {}
    return {"zero": zero_stage(row), "offload": opt, "offload_params": param, "precision": row["precision"],
            "act_ckpt": row["toggles"]["act_ckpt"], "gpus": row["world_size"], "compile": row["toggles"]["compile"],
            "vary": dict(row["model"]["overrides"]), **pipeline}


def model_text(row: dict) -> str:
    """Preset plus its --set overrides and a changed vocab pad: what distinguishes the model of a row."""
    m = row["model"]
    extra = [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in sorted(m["overrides"].items())]
    return " ".join([m["preset"], *extra])


def is_launch(row: dict) -> bool:
    """A `dsx launch` row (a user's own script): no model, step times or FLOPs of dsx's; see dsx.report.launches."""
    return row.get("kind") == "launch"


def launch_zero(row: dict) -> str:
    """The ZeRO stage of a launch row's config as given: a number, or 'auto' (accelerate fills it)."""
    stage = (row["ds_config"].get("zero_optimization") or {}).get("stage", 0)
    return str(stage) if isinstance(stage, int) else "auto"


def launch_label(row: dict) -> str:
    """'z2 off=cpu fp32 · train_hf.py': the config's facts as given, and the script."""
    opt, param = offload_devices(row)
    parts = [f"z{launch_zero(row)}"] + ([f"off={opt}"] if opt != "none" else []) + (
        [f"params={param}"] if param != "none" else []) + ([row["precision"]] if row["precision"] else [])
    return " ".join(parts) + f" · {row['launch']['script']}"


def _launch_attributes(row: dict) -> dict:
    opt, param = offload_devices(row)
    return {"label": launch_label(row), "zero": launch_zero(row), "offload": opt, "offload_params": param,
            "precision": row["precision"] or "-", "act_ckpt": "-", "compile": "-", "model": row["launch"]["script"],
            "gpu": gpu_label(row), "micro_batch": row["micro_batch"] or "-", "grad_accum": row["grad_accum"] or "-",
            "world_size": row["world_size"], "seq_len": ((row["launch"]["trainer"] or {}).get("seq_len") or "-"),
            "sweep": "-", "search": "-", "status": row["status"]}


def attributes(row: dict) -> dict[str, str]:
    """Every selector / group-by key of a row, as the lower-case text a selector value is compared with (a launch
    row has what its config and command line say, '-' for the rest)."""
    values = _launch_attributes(row) if is_launch(row) else _run_attributes(row)
    return {k: (str(v).lower() if not isinstance(v, bool) else ("true" if v else "false")) for k, v in values.items()}


def _run_attributes(row: dict) -> dict:
    opt, param = offload_devices(row)
    return {
        "label": label(row), "zero": zero_stage(row), "offload": opt, "offload_params": param,
        "precision": row["precision"], "act_ckpt": row["toggles"]["act_ckpt"], "compile": row["toggles"]["compile"],
        "model": row["model"]["preset"], "gpu": gpu_label(row), "micro_batch": row["micro_batch"],
        "grad_accum": row["grad_accum"], "world_size": row["world_size"], "seq_len": row["model"]["seq_len"],
        "sweep": row["sweep"]["sweep_id"] if row.get("sweep") else "-",
        "search": row["sweep"]["search"] if row.get("sweep") else "-", "status": row["status"],
        "sparse": (row.get("sparse_attention") or {}).get("requested", "none"),
        "pipeline_stages": row["pipeline"]["stages"] if row.get("pipeline") else "-",
    }


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


def speed_not_steady(row: dict) -> str | None:
    """Why a row's tokens/s is not a steady-state step's (None when it is): a row with no warm-up step times its
    first step, CUDA's and cuBLAS's set-up and the first pinning of host memory with it (llama-8b at 131,072 tokens on
    one H200: 17.3 s for a first step, 11.9 s for a second, bench/tools/h200_memory_peak). Its memory is still a
    measurement; its speed judges no estimate."""
    return "no warm-up step" if row.get("warmup") == 0 else None


def spread(row: dict) -> float | None:
    """(slowest - fastest timed step) / median step of the row: its measurement noise (None without timed steps)."""
    step = row["figures"]["step_time_s"]
    if not step or not step["median"]:
        return None
    if step.get("spread") is not None:
        return step["spread"]
    return (step["max"] - step["min"]) / step["median"]


def within_noise(a: dict, b: dict) -> bool:
    """Whether two ok rows' tokens/s differ by less than the larger of their spreads: which is faster is not
    measured, only guessed."""
    ta, tb, noise = tokens_per_s(a), tokens_per_s(b), max(spread(a) or 0.0, spread(b) or 0.0)
    if not ta or not tb:
        return False
    return abs(ta - tb) / max(ta, tb) < noise


def device_seconds(rows: list[dict]) -> tuple[float, int]:
    """(sum of overhead.device_seconds, rows that lack it): what the rows cost in GPU-seconds (CPU-rank-seconds)."""
    known = [r["overhead"]["device_seconds"] for r in rows if r["overhead"]["device_seconds"] is not None]
    return sum(known), len(rows) - len(known)


def short_error(row: dict, limit: int = 60) -> str:
    """The row's error cut to one short line. An allocation failure keeps its size, which is what tells one OOM from
    another: 'rank 0: RuntimeError: … tried to allocate 204800000 bytes' rather than the allocator's preamble."""
    text = (row.get("error") or "").splitlines()[0] if row.get("error") else ""
    size = re.search(r"tried to allocate (\d+(?:\.\d+)? ?(?:[KMGT]i?B|bytes))", text, re.IGNORECASE)
    if size and len(text) > limit:
        head = ":".join(text.split(":")[:2])
        text = f"{head}: … tried to allocate {size.group(1)}"
    return text if len(text) <= limit else text[:limit - 1] + "…"


def describe(row: dict) -> str:
    """A row in a few words: 'run 2695a46b (albert-base, z1 bf16, micro-batch 128, H100)'."""
    return (f"run {row['run_id'][:8]} ({model_text(row)}, {label(row)}, micro-batch {row['micro_batch']}, "
            f"{gpu_label(row)})")


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


# ------------------------------------------------------------------------------------------------ boundaries


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
    """The Boundary of every search_key among the rows."""
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


def curve(row) -> list[float]:
    """A row's loss at every step, warm-up first (rank 0's; every rank records the step's mean over replicas)."""
    data = row.model_dump() if hasattr(row, "model_dump") else row
    ranks = data.get("ranks") or []
    if not ranks:
        return []
    return list(ranks[0].get("warmup_loss") or []) + list(ranks[0].get("loss") or [])


def nccl_link_changed(row: dict) -> str | None:
    """The NCCL variables of a multi-GPU row that moved its collectives off the GPUs' own links (sockets, no P2P or
    shared memory), as one string; None when it ran on them (dsx.results.NCCL_ENV_NOTE)."""
    from dsx.results import NCCL_ENV_NOTE, NCCL_LINK_VARIABLES

    for note in row.get("notes") or []:
        if isinstance(note, str) and note.startswith(NCCL_ENV_NOTE):
            pairs = [p.split("=", 1) for p in note[len(NCCL_ENV_NOTE):].split(", ") if "=" in p]
            changed = [f"{k}={v}" for k, v in pairs
                       if k in NCCL_LINK_VARIABLES and NCCL_LINK_VARIABLES[k] in (None, v)]
            return ", ".join(changed) or None
    return None
