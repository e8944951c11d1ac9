"""The sparse-attention table of bench/sparse/README.md, from the rows bench/sparse/h100.sh wrote: per model and
sequence length, dense SDPA first, then each sparse layout with its speed and memory against that dense row, the
predicted attention speed-up, what `--sparse-attention auto` runs there and whether that was right. The prediction is
today's dsx.sparse.predict, recomputed from the row's layout facts (its tiles, length, heads, micro-batch): a row
keeps the prediction it ran with (`sparse_attention.predicted_attention_speedup`), made by the predictor of its day.

    PYTHONPATH=. python3 bench/sparse/summary.py bench/sparse/h100/runs.jsonl [MORE.jsonl ...]
"""

from __future__ import annotations

import sys

from dsx.config_facts import precision_of
from dsx.report.long_context import attention_text
from dsx.results import read_rows
from dsx.sparse import predict
from dsx.sparse.predict import AUTO_MARGIN

TARGET_SEQ, TARGET_SPEEDUP = 32768, 3.0


def _key(row: dict) -> tuple:
    """A sparse row is compared with the dense row of its model, length, compilation, checkpointing and precision."""
    return row["model"]["preset"], row["model"]["seq_len"], _compiled(row), _ckpt(row), _precision(row)


def _precision(row: dict) -> str:
    """The precision the row trained in, read off its DeepSpeed config (rows run with `--precision fp32 --ds-set
    torch_autocast...` before `--precision bf16-autocast` existed record "fp32")."""
    return precision_of(row["ds_config"]) if row.get("ds_config") else row.get("precision") or "bf16"


def _compiled(row: dict) -> str:
    """"no", "yes", or "yes, full mask": compiled before dsx kept the plain causal mask under compile
    (dsx.models.assume_unpacked_batches; the row has no note of it), with transformers' full [B, 1, S, S] mask."""
    if not row["toggles"].get("compile"):
        return "no"
    notes = row.get("notes", [])
    plain = any(note.startswith("compiled with the plain causal mask") for note in notes) or (
        # h100_compiled/ ran between the two halves of that change: its sparse rows already had the plain mask
        (row.get("sparse_attention") or {}).get("applied") and any("packed-sequence mask is off" in n for n in notes))
    return "yes" if plain else "yes, full mask"


def _ckpt(row: dict) -> bool:
    return bool(row["toggles"].get("act_ckpt"))


def _how(compiled: str, ckpt: bool, precision: str) -> str:
    """How a row ran, in words, for the target lines."""
    compiled_text = {"no": "uncompiled", "yes": "compiled"}.get(compiled, "compiled with the full mask")
    return compiled_text + (", checkpointed" if ckpt else ", no checkpointing") + f", {precision}"


def predicted_now(row: dict) -> float | None:
    """Today's predicted attention speed-up for the row's layout (None for dense rows and CPU rows)."""
    sparse = row.get("sparse_attention") or {}
    if sparse.get("predicted_attention_speedup") is None or sparse.get("tile_fraction") is None:
        return None
    seq, heads, causal = row["model"]["seq_len"], row["model"]["dims"]["heads"], bool(sparse.get("causal", True))
    kept = round(sparse["tile_fraction"] * predict.dense_tiles(seq, causal) * heads)
    return predict.speedup(seq, heads, row["micro_batch"], causal, kept)


def _auto(row: dict, ratio: float | None) -> str:
    """What auto runs for this row's layout (from its predicted attention speed-up) and whether it lost speed."""
    sparse = row.get("sparse_attention") or {}
    predicted = predicted_now(row)
    if predicted is None:
        return "-"
    if not sparse.get("applied", True):  # auto chose dense here: this row ran dense attention, like its base row
        return "dense (this row: two dense runs, the ratio is their noise)"
    if _compiled(row) == "yes, full mask":
        return "-"
    if predicted < AUTO_MARGIN:
        return "dense" + (f" (sparse measured {ratio:.2f}x)" if ratio is not None else "")
    if ratio is None:
        return "sparse"
    return "sparse: ok" if ratio >= 1 else f"sparse: SLOWER ({ratio:.2f}x)"


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def cells(row: dict, base: dict | None) -> list[str]:
    """One table line: the row's figures, and its ratios to the dense row of its model and length (`base`)."""
    sparse, figures, peak = row.get("sparse_attention") or {}, row["figures"], row["memory"]["max"]
    tokens = figures.get("tokens_per_s")
    reserved = peak.get("peak_reserved") or peak.get("host_rss_peak")
    if row is base:
        ratio = memory = 1.0
    else:
        ratio = tokens / base["figures"]["tokens_per_s"] if tokens and base else None
        base_memory = base and (base["memory"]["max"].get("peak_reserved") or base["memory"]["max"].get("host_rss_peak"))
        memory = reserved / base_memory if reserved and base_memory else None
    step = (figures.get("step_time_s") or {}).get("median")
    return [row["model"]["preset"], f"{row['model']['seq_len']:,}", attention_text(row),
            _compiled(row), "yes" if _ckpt(row) else "no", _precision(row), str(sparse.get("block", "-")),
            _fmt(sparse.get("tile_fraction"), ".1%"), row["status"],
            _fmt(step and step * 1e3, ",.0f"), _fmt(tokens, ",.0f"), _fmt(reserved and reserved / 2**30, ".1f"),
            _fmt(ratio, ".2f"), _fmt(memory, ".2f"), _fmt(predicted_now(row), ".2f"),
            _auto(row, None if row is base else ratio)]


def main(*paths: str) -> int:
    rows = [row for path in paths for row in read_rows(path)]
    dense = {_key(r): r for r in rows if not r.get("sparse_attention") and r["status"] == "ok"}
    print("| model | seq | attention | compiled | checkpointing | precision | block | tiles | status | step ms | tokens/s "
          "| reserved GiB | speed× dense | mem× dense | predicted attn× | auto runs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    targets = {}
    best_dense = {}  # (model, seq) -> the fastest dense row, compiled or not, checkpointed or not
    for row in dense.values():
        key = row["model"]["preset"], row["model"]["seq_len"]
        if key not in best_dense or row["figures"]["tokens_per_s"] > best_dense[key]["figures"]["tokens_per_s"]:
            best_dense[key] = row
    for row in sorted(rows, key=lambda r: (r["model"]["preset"] != "gpt2-medium", r["model"]["preset"],
                                           r["model"]["seq_len"], _compiled(r) != "no", _compiled(r), -_ckpt(r),
                                           attention_text(r) != "dense", attention_text(r))):
        line = cells(row, dense.get(_key(row)))
        print("| " + " | ".join(line) + " |")
        best = best_dense.get((row["model"]["preset"], TARGET_SEQ))
        if (row["model"]["seq_len"] == TARGET_SEQ and attention_text(row) == "bigbird" and row["status"] == "ok"
                and best is not None and _compiled(row) != "yes, full mask"):
            targets.setdefault((row["model"]["preset"], _compiled(row), _ckpt(row), _precision(row)), []).append(
                row["figures"]["tokens_per_s"] / best["figures"]["tokens_per_s"])
    print()
    for (model, compiled, ckpt, precision), ratios in targets.items():
        best = best_dense[model, TARGET_SEQ]
        met = sum(ratio >= TARGET_SPEEDUP for ratio in ratios)
        verdict = "met" if met == len(ratios) else "NOT met" if not met else f"met in {met} of {len(ratios)} runs"
        spread = f"{min(ratios):.2f}x" + (f"-{max(ratios):.2f}x" if len(ratios) > 1 else "")
        print(f"Target (bigbird >= {TARGET_SPEEDUP:g}x dense tokens/s at {TARGET_SEQ:,} tokens), {model}, bigbird "
              f"{_how(compiled, ckpt, precision)} against the fastest dense "
              f"({_how(_compiled(best), _ckpt(best), _precision(best))}): {spread} ({len(ratios)} run(s)), {verdict}.")
    if not targets:
        print(f"Target (bigbird >= {TARGET_SPEEDUP:g}x dense tokens/s at {TARGET_SEQ:,} tokens): no pair of ok rows.")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
