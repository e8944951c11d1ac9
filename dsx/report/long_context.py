"""The long-context table of `dsx report`: sequence length against tokens/s and peak memory for each long-context
method (sparse attention, the tiled loss, Ulysses sequence parallelism), beside the base row of the same model,
configuration and sequence length (dense attention, the plain loss, no sequence parallelism)."""

from __future__ import annotations

import json

from dsx.config_facts import ulysses_group
from dsx.report.facts import gpu_label, memory, model_text, offload_text, tokens_per_s, zero_stage
from dsx.report.table import Table
from dsx.report.tables import _ratio, memory_legend
from dsx.units import fmt_gib, fmt_num, fmt_pct, fmt_ratio


def attention_text(row: dict) -> str:
    """What attended in the row: 'dense', the layout's mode, with '(auto)' when auto chose."""
    sparse = row.get("sparse_attention")
    if not sparse:
        return "dense"
    chose = sparse["mode"] if sparse["applied"] else "dense"
    return f"{chose} (auto)" if sparse["requested"].startswith("auto") else chose


def sequence_parallel_of(row: dict) -> int:
    """The Ulysses group size the row ran with (its config's sequence_parallel_size; 1 without)."""
    return ulysses_group(row.get("ds_config") or {})


def loss_text(row: dict) -> str:
    return (row.get("toggles") or {}).get("loss") or "plain"


def savers_text(row: dict) -> str:
    """The memory savers of dsx.rank.memory_savers the row ran with ('-': none)."""
    toggles = row.get("toggles") or {}
    names = [name for key, name in (("act_ckpt_offload", "ckpt offload"), ("tiled_mlp", "tiled MLP"))
             if toggles.get(key)]
    return " + ".join(names) or "-"


def _long_context_method(row: dict) -> bool:
    """A row of a long-context method: sparse attention, the tiled loss, Ulysses sequence parallelism or a memory
    saver (--act-ckpt-offload, --tiled-mlp)."""
    return (bool(row.get("sparse_attention")) or loss_text(row) != "plain" or sequence_parallel_of(row) > 1
            or savers_text(row) != "-")


def _is_base(row: dict) -> bool:
    return (not row.get("sparse_attention") and loss_text(row) == "plain" and sequence_parallel_of(row) == 1
            and savers_text(row) == "-")


def _family(row: dict) -> str:
    """Rows compared with each other: the model, GPU and everything of the configuration but the long-context
    method (attention, loss, sequence parallelism) and the ranks it runs on."""
    extra = ["ckpt"] if row["toggles"]["act_ckpt"] else []
    extra += ["compile"] if row["toggles"]["compile"] else []
    return json.dumps([model_text(row), gpu_label({**row, "world_size": 1}), f"z{zero_stage(row)}", offload_text(row),
                       row["precision"], *extra, f"mb{row['micro_batch']}", row["grad_accum"]])


def long_context_table(rows: list[dict]) -> Table | None:
    """One line per (sequence length, method) of each family that holds a row of a long-context method (sparse
    attention, the tiled loss, Ulysses), the base first (dense attention, plain loss, no sequence parallelism);
    speed× and mem× against the base row of the same length. None when no row used such a method."""
    if not any(_long_context_method(r) for r in rows):
        return None
    table = Table("Long context: sequence length, method, speed and memory",
                  ["seq", "attention", "loss", "savers", "GPUs (SP)", "block", "tiles", "tokens/s", "memory GiB",
                   "speed× base", "mem× base", "predicted attn×", "status"])
    families: dict[str, list[dict]] = {}
    for r in rows:
        families.setdefault(_family(r), []).append(r)
    for key, members in families.items():
        if not any(_long_context_method(r) for r in members):
            continue
        model, gpu, *config = json.loads(key)
        table.rows.append(f"{model} · {gpu} · {' '.join(str(c) for c in config[:-1])}")
        ordered = sorted(members, key=lambda r: (r["model"]["seq_len"], not _is_base(r), r["world_size"],
                                                 attention_text(r), loss_text(r), savers_text(r),
                                                 sequence_parallel_of(r)))
        for r in ordered:
            seq = r["model"]["seq_len"]
            base = min((b for b in members if b["model"]["seq_len"] == seq and _is_base(b) and b["status"] == "ok"),
                       key=lambda b: b["world_size"], default=None)
            sparse = r.get("sparse_attention") or {}
            predicted = sparse.get("predicted_attention_speedup")
            size = sequence_parallel_of(r)
            table.rows.append([
                f"{seq:,}", attention_text(r), loss_text(r), savers_text(r),
                f"{r['world_size']}" + (f" ({size})" if size > 1 else ""),
                str(sparse.get("block", "-")), fmt_pct(sparse["tile_fraction"]) if sparse else "-",
                fmt_num(tokens_per_s(r), 0), fmt_gib(memory(r)),
                fmt_ratio(_ratio(tokens_per_s(r), tokens_per_s(base) if base else None)) if r is not base else "1.00",
                fmt_ratio(_ratio(memory(r), memory(base) if base else None)) if r is not base else "1.00",
                fmt_ratio(predicted) if predicted else "-", r["status"],
            ])
    table.legend = memory_legend(rows) + [
        "attention: dense (SDPA, no sparse request) or the sparse layout's mode, '(auto)' when --sparse-attention "
        "auto chose; loss: plain (transformers' head and loss, whole logits), tiled (--loss tiled) or fused (--loss "
        "fused: Liger's fused linear cross-entropy); savers: "
        "--act-ckpt-offload (ckpt offload) and --tiled-mlp (tiled MLP); GPUs (SP): "
        "the ranks, and the Ulysses group size with --sequence-parallel (tokens/s counts every rank's); tiles: the "
        "128 x 128 tiles FlexAttention computes, as a share of a dense kernel's (causal: those on and below the "
        "diagonal); speed× and mem× base: tokens/s and memory against the row of the same model, configuration "
        "and sequence length with dense attention, the plain loss, no saver and no sequence parallelism "
        "(the fewest ranks; memory is per rank); predicted attn×: dsx.sparse.predict's dense / FlexAttention "
        "time of one attention call (CUDA rows)."]
    return table
