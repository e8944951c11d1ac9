"""The long-context table of `dsx report`: sequence length against tokens/s and peak memory, each sparse-attention
row beside the dense row of the same model, configuration and sequence length (rows of dsx.sparse runs)."""

from __future__ import annotations

import json

from dsx.report.facts import gpu_label, memory, model_text, offload_text, tokens_per_s, zero_stage
from dsx.report.tables import Table, _ratio, memory_legend
from dsx.units import fmt_gib, fmt_num, fmt_pct, fmt_ratio


def attention_text(row: dict) -> str:
    """What attended in the row: 'dense', the layout's mode, with '(auto)' when auto chose."""
    sparse = row.get("sparse_attention")
    if not sparse:
        return "dense"
    chose = sparse["mode"] if sparse["applied"] else "dense"
    return f"{chose} (auto)" if sparse["requested"].startswith("auto") else chose


def _family(row: dict) -> str:
    """Rows compared with each other: the model, GPU and everything of the configuration but the attention."""
    extra = ["ckpt"] if row["toggles"]["act_ckpt"] else []
    extra += ["compile"] if row["toggles"]["compile"] else []
    return json.dumps([model_text(row), gpu_label(row), f"z{zero_stage(row)}", offload_text(row), row["precision"],
                       *extra, f"mb{row['micro_batch']}", row["grad_accum"], row["world_size"]])


def long_context_table(rows: list[dict]) -> Table | None:
    """One line per (sequence length, attention) of each family that holds a sparse-attention row, dense first;
    speed× and mem× against the dense row of the same length. None when no row used sparse attention."""
    if not any(r.get("sparse_attention") for r in rows):
        return None
    table = Table("Long context: sparse beside dense attention",
                  ["seq", "attention", "block", "tiles", "tokens/s", "memory GiB", "speed× dense", "mem× dense",
                   "predicted attn×", "status"])
    families: dict[str, list[dict]] = {}
    for r in rows:
        families.setdefault(_family(r), []).append(r)
    for key, members in families.items():
        if not any(r.get("sparse_attention") for r in members):
            continue
        model, gpu, *config = json.loads(key)
        table.rows.append(f"{model} · {gpu} · {' '.join(str(c) for c in config[:-2])}")
        ordered = sorted(members, key=lambda r: (r["model"]["seq_len"], attention_text(r) != "dense",
                                                 attention_text(r)))
        for r in ordered:
            seq = r["model"]["seq_len"]
            dense = next((d for d in members if d["model"]["seq_len"] == seq and not d.get("sparse_attention")
                          and d["status"] == "ok"), None)
            sparse = r.get("sparse_attention") or {}
            predicted = sparse.get("predicted_attention_speedup")
            table.rows.append([
                f"{seq:,}", attention_text(r), str(sparse.get("block", "-")),
                fmt_pct(sparse["tile_fraction"]) if sparse else "-", fmt_num(tokens_per_s(r), 0),
                fmt_gib(memory(r)), fmt_ratio(_ratio(tokens_per_s(r), tokens_per_s(dense) if dense else None))
                if r is not dense else "1.00", fmt_ratio(_ratio(memory(r), memory(dense) if dense else None))
                if r is not dense else "1.00", fmt_ratio(predicted) if predicted else "-", r["status"],
            ])
    table.legend = memory_legend(rows) + [
        "attention: dense (SDPA, no sparse request) or the sparse layout's mode, '(auto)' when --sparse-attention "
        "auto chose; tiles: the 128 x 128 tiles FlexAttention computes, as a share of a dense kernel's (causal: "
        "those on and below the diagonal); speed× and mem× dense: tokens/s and memory against the dense row of the "
        "same model, configuration and sequence length; predicted attn×: dsx.sparse.predict's dense / FlexAttention "
        "time of one attention call (CUDA rows)."]
    return table
