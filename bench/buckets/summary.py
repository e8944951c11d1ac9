"""The bucket-size table of bench/buckets/README.md, from the committed rows (bench/buckets/h100/runs.jsonl):
one line per run in the order it ran, the step time against the first run of the same model and ZeRO stage at
DeepSpeed's default (5e8 elements). With --zero3, the ZeRO-3 table (bench/buckets/h100_z3*, cpu_z3): the prefetch
bucket and the persistence threshold of each run, against the first run of its model at DeepSpeed's defaults.

    PYTHONPATH=. python3 bench/buckets/summary.py bench/buckets/h100/runs.jsonl
    PYTHONPATH=. python3 bench/buckets/summary.py --zero3 bench/buckets/h100_z3/z3.jsonl bench/buckets/h100_z3b/z3.jsonl
"""

from __future__ import annotations

import sys

from dsx.results import read_rows


def main(path: str) -> None:
    rows = read_rows(path)
    print("| model | micro-batch | ZeRO | bucket (elements) | median step ms | min-max ms | tokens/s | reserved GiB "
          "| step vs default |")
    print("|---|---|---|---|---|---|---|---|---|")
    default: dict[tuple, float] = {}
    for row in rows:
        zero = row["ds_config"]["zero_optimization"]
        key = (row["model"]["preset"], zero["stage"])
        bucket = zero.get("reduce_bucket_size", 500_000_000)
        step = row["figures"]["step_time_s"]
        if bucket == 500_000_000:
            default.setdefault(key, step["median"])
        base = default.get(key)
        versus = f"{step['median'] / base:.2f}x" if base else "-"
        reserved = row["memory"]["max"]["peak_reserved"]
        print(f"| {key[0]} | {row['micro_batch']} | {key[1]} | {bucket:,} | {step['median'] * 1e3:.1f} | "
              f"{step['min'] * 1e3:.1f}-{step['max'] * 1e3:.1f} | {row['figures']['tokens_per_s']:,.0f} | "
              f"{reserved / 2**30:.1f} | {versus} |")


def zero3(paths: list[str]) -> None:
    print("| model | ranks | micro-batch | prefetch bucket | persistence threshold | median step ms | min-max ms | "
          "tokens/s | reserved GiB | step vs defaults |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    default: dict[str, float] = {}
    for path in paths:
        for row in read_rows(path):
            zero = row["ds_config"]["zero_optimization"]
            prefetch = zero.get("stage3_prefetch_bucket_size", 50_000_000)
            persistence = zero.get("stage3_param_persistence_threshold", 100_000)
            model = row["model"]["preset"]
            step = row["figures"]["step_time_s"]
            if (prefetch, persistence) == (50_000_000, 100_000):
                default.setdefault(model, step["median"])
            base = default.get(model)
            versus = f"{step['median'] / base:.2f}x" if base else "-"
            memory = row["memory"]["max"]
            reserved = f"{memory['peak_reserved'] / 2**30:.1f}" if memory.get("peak_reserved") else "-"
            print(f"| {model} | {row['world_size']} | {row['micro_batch']} | {prefetch:,} | {persistence:,} | "
                  f"{step['median'] * 1e3:.1f} | {step['min'] * 1e3:.1f}-{step['max'] * 1e3:.1f} | "
                  f"{row['figures']['tokens_per_s']:,.0f} | {reserved} | {versus} |")


if __name__ == "__main__":
    if sys.argv[1] == "--zero3":
        zero3(sys.argv[2:])
    else:
        main(sys.argv[1])
