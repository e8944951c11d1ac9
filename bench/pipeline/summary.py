"""The comparison tables of bench/pipeline/README.md, from rows of `dsx run` / `dsx sweep` with and without
--pipeline-stages (bench/pipeline/h100.sh, cpu.sh; the multi-GPU rows: bench/multigpu/summary.py, which also
measures the bubble):

    PYTHONPATH=. python3 bench/pipeline/summary.py bench/pipeline/h100/runs.jsonl

One line per ok row in the order it ran (pipeline stages x replicas, micro-batches per step, median step, spread,
tokens/s, TFLOP/s, MFU, peak reserved of the largest stage), then per setup and micro-batches per step the median
tokens/s over its runs, and each pipeline setup's tokens/s against the plain engine's at the same micro-batches
per step and GPUs: the wrapper's cost on one GPU (1 stage), the bubble and the split on several.
"""

from __future__ import annotations

import statistics
import sys

from dsx.results import read_rows


def setup(row: dict) -> str:
    p = row.get("pipeline")
    gpus = row["world_size"]
    return f"{p['stages']} stage(s) x {p['data_parallel']}" if p else f"plain engine, {gpus} data-parallel"


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main(path: str) -> None:
    rows = [r for r in read_rows(path) if r["status"] == "ok"]
    print("| setup | GPUs | micro-batch | μ-batches/step | median step ms | spread | tokens/s | TFLOP/s per GPU "
          "| MFU | peak GiB (GPU reserved, CPU RSS) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    speeds: dict[tuple, list[float]] = {}
    for r in rows:
        f = r["figures"]
        step = f["step_time_s"]
        reserved = r["memory"]["max"]["peak_reserved"] or r["memory"]["max"]["host_rss_peak"]
        print(f"| {setup(r)} | {r['world_size']} | {r['micro_batch']} | {r['grad_accum']} | "
              f"{step['median'] * 1e3:.1f} | {fmt(step.get('spread'), '.1%')} | {f['tokens_per_s']:,.0f} | "
              f"{fmt(f['model_tflops_per_s'], '.3g')} | {fmt(f['mfu'], '.1%')} | {reserved / 2**30:.2f} |")
        speeds.setdefault((setup(r), r["world_size"], r["grad_accum"]), []).append(f["tokens_per_s"])
    print()
    for (name, gpus, accum), values in speeds.items():
        median = statistics.median(values)
        line = f"{name}, {gpus} GPU(s), {accum} micro-batch(es)/step: median {median:,.0f} tokens/s over {len(values)} run(s)"
        plain = speeds.get((f"plain engine, {gpus} data-parallel", gpus, accum))
        if not name.startswith("plain") and plain:
            ratio = median / statistics.median(plain)
            line += f"; {ratio:.3f}x the plain engine's"
            if name.startswith("1 stage") and gpus == 1:
                line += " (the wrapper costs nothing: within 3%)" if ratio >= 0.97 else " (MORE than 3% slower)"
        print(f"speed: {line}")


if __name__ == "__main__":
    main(sys.argv[1])
