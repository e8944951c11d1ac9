"""The bucket-size table of bench/buckets/README.md, from the committed rows (bench/buckets/h100/runs.jsonl):
one line per run in the order it ran, the step time against the first run of the same model and ZeRO stage at
DeepSpeed's default (5e8 elements).

    PYTHONPATH=. python3 bench/buckets/summary.py bench/buckets/h100/runs.jsonl
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


if __name__ == "__main__":
    main(sys.argv[1])
