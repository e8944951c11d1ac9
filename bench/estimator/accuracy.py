"""dsx estimate against every committed H100 row: the accuracy figures of issue 5 and its plot, computed, not typed.

Run from the repo root:  python bench/estimator/accuracy.py [--plot bench/estimator/predicted_vs_measured.png]

Roles (dsx.calibration_roles.calibration_role): 'calibration' rows set the constants and are left out of every figure;
'fit calibration' rows (the pruned sweep's boundary trials) set the allocator headroom, so they are left out of
the fit/OOM figure but judged for memory; every other row is judged. --compile rows are judged apart (compiled):
two of them set the compile factors ('compile calibration'), the others are judged with them.
"""
from __future__ import annotations

import argparse
import statistics
from collections import Counter
from pathlib import Path

from dsx.calibration_roles import calibration_role
from dsx.estimate import estimate, setup_of_row
from dsx.report import deepspeed_estimator_gpu_bytes
from dsx.results import read_rows

GIB = 1024**3
FILES = [
    "bench/sweep/h100/gpt2xl.jsonl",
    "bench/sweep/h100/bert_effects.jsonl",
    "bench/mfu/h100/runs.jsonl",
    "bench/estimator/h100/llama1b.jsonl",
    "bench/estimator/h100/gpt2xl_pruned.jsonl",
]
EXHAUSTIVE, PRUNED = FILES[0], FILES[4]
COMPILED_FILES = ["bench/mfu/h100/runs.jsonl", *(f"bench/mfu/h100_tuned/runs_part{n}.jsonl" for n in (4, 5, 6, 7))]


def judged_trials(files: list[str]) -> list[dict]:
    """One record per ok/oom row: the row, its prediction and its role."""
    trials = []
    for path in files:
        for row in read_rows(path):
            if row["toggles"].get("compile") or row["status"] not in ("ok", "oom"):
                continue
            trials.append({"row": row, "file": path, "role": calibration_role(row),
                           "estimate": estimate(setup_of_row(row), search_max=False)})
    return trials


def relative(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured


def label(row: dict) -> str:
    return f"{row['model']['preset']} {(row.get('sweep') or {}).get('label') or '(dsx run)'} mb {row['micro_batch']}"


def summary(trials: list[dict]) -> list[str]:
    fitting = [t for t in trials if t["row"]["status"] == "ok" and t["role"] != "calibration"]
    memory = {id(t): relative(t["estimate"].peak_allocated, t["row"]["memory"]["max"]["peak_allocated"])
              for t in fitting}
    lines = [f"rows read: {len(trials)} ok/oom trials ({Counter(t['role'] for t in trials)})", ""]
    lines.append(f"peak GPU memory (torch peak allocated), {len(fitting)} judged fitting rows: "
                 f"within ±10%: {sum(abs(e) <= 0.10 for e in memory.values())} "
                 f"({sum(abs(e) <= 0.10 for e in memory.values()) / len(fitting):.0%}), within ±5%: "
                 f"{sum(abs(e) <= 0.05 for e in memory.values())}, max |error| {max(map(abs, memory.values())):.1%}")
    for family in sorted({t["row"]["model"]["preset"] for t in fitting}):
        errors = [memory[id(t)] for t in fitting if t["row"]["model"]["preset"] == family]
        lines.append(f"  {family}: {len(errors)} rows, max |error| {max(map(abs, errors)):.1%}")
    stages = sorted({t["estimate"].zero for t in fitting})
    lines.append(f"  covered: ZeRO {', '.join(map(str, stages))}; CPU offload "
                 f"{sum(t['estimate'].offload != 'none' for t in fitting)} rows; checkpointing "
                 f"{sum(bool(t['row']['toggles'].get('act_ckpt')) for t in fitting)} rows")
    deepspeed = [relative(b, t["row"]["memory"]["max"]["peak_allocated"]) for t in fitting
                 if (b := deepspeed_estimator_gpu_bytes(t["row"], t["estimate"]))]
    lines.append(f"  DeepSpeed's own estimators (model states only) on the {len(deepspeed)} rows they apply to: "
                 f"median error {statistics.median(deepspeed):+.0%}, within ±10%: "
                 f"{sum(abs(e) <= 0.10 for e in deepspeed)}")
    for_fit = [t for t in trials if t["role"] == "judged"]
    wrong = [t for t in for_fit if t["estimate"].fits != (t["row"]["status"] == "ok")]
    lines.append(f"fit/OOM, {len(for_fit)} judged trials ({sum(t['row']['status'] == 'oom' for t in for_fit)} "
                 f"OOM): right {len(for_fit) - len(wrong)} ({(len(for_fit) - len(wrong)) / len(for_fit):.1%})")
    lines += [f"  wrong: {label(t['row'])} ({t['row']['status']}, predicted "
              f"{'fit' if t['estimate'].fits else 'OOM'}: needs {needed_fraction(t):.3f} of the GPU)" for t in wrong]
    calibration = [t for t in trials if t["role"] == "fit calibration"]
    lines.append(f"  the {len(calibration)} fit-calibration trials: right "
                 f"{sum(t['estimate'].fits == (t['row']['status'] == 'ok') for t in calibration)}")
    host = [relative(t["estimate"].host_per_rank, t["row"]["memory"]["max"]["host_rss_peak"]) for t in fitting
            if t["estimate"].offload != "none"]
    lines.append(f"host memory of CPU-offload rows: {len(host)} rows, within ±15%: "
                 f"{sum(abs(e) <= 0.15 for e in host)}, max |error| {max(map(abs, host)):.1%}")
    speed = [abs(relative(t["estimate"].tokens_per_s, t["row"]["figures"]["tokens_per_s"])) for t in fitting]
    lines.append(f"tokens/s: median |error| {statistics.median(speed):.1%}, max {max(speed):.1%}")
    return lines


def compiled(files: list[str]) -> list[str]:
    """Peak GPU memory and tokens/s of every ok --compile row, predicted with the compile factors."""
    lines = []
    for path in files:
        for row in read_rows(path):
            if not row["toggles"].get("compile") or row["status"] != "ok":
                continue
            e = estimate(setup_of_row(row), search_max=False)
            measured = row["memory"]["max"]["peak_allocated"]
            tokens = row["figures"]["tokens_per_s"]
            dropout = " dropout 0" if (row["model"].get("overrides") or {}).get("resid_pdrop") == 0 else ""
            lines.append(f"  {row['model']['preset']} z{e.zero} mb {row['micro_batch']} ga {row.get('grad_accum', 1)}"
                         f"{dropout} ({calibration_role(row)}): peak allocated {measured / GIB:.1f} GiB measured, "
                         f"{e.peak_allocated / GIB:.1f} predicted ({relative(e.peak_allocated, measured):+.1%}); "
                         f"tokens/s {relative(e.tokens_per_s, tokens):+.1%}")
    return [f"compiled rows (bench/mfu): {len(lines)}"] + lines


def needed_fraction(trial: dict) -> float:
    """(predicted allocated + context + headroom) / capacity: above 1 is a predicted OOM."""
    return trial["estimate"].needed / trial["estimate"].capacity


def sweep_cost(path: str) -> tuple[float, int, dict]:
    rows = list(read_rows(path))
    seconds = sum((r.get("overhead") or {}).get("device_seconds") or 0.0 for r in rows)
    best = max((r for r in rows if r["status"] == "ok"), key=lambda r: r["figures"]["tokens_per_s"])
    return seconds, len(rows), best


def pruned_vs_exhaustive() -> list[str]:
    full_s, full_n, full_best = sweep_cost(EXHAUSTIVE)
    pruned_s, pruned_n, pruned_best = sweep_cost(PRUNED)
    t_full, t_pruned = full_best["figures"]["tokens_per_s"], pruned_best["figures"]["tokens_per_s"]
    return [f"exhaustive gpt2-xl sweep ({EXHAUSTIVE}): {full_n} trials, {full_s:,.0f} GPU-seconds, best "
            f"{label(full_best)} {t_full:,.0f} tokens/s",
            f"pruned gpt2-xl sweep ({PRUNED}): {pruned_n} trials, {pruned_s:,.0f} GPU-seconds "
            f"({pruned_s / full_s:.1%} of the exhaustive), best {label(pruned_best)} {t_pruned:,.0f} tokens/s "
            f"({t_pruned / t_full - 1:+.1%} against the exhaustive best)"]


def plot(trials: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 5.5))
    families = sorted({t["row"]["model"]["preset"] for t in trials})
    colors = dict(zip(families, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for family in families:
        ok = [t for t in trials if t["row"]["model"]["preset"] == family and t["row"]["status"] == "ok"
              and t["role"] != "calibration"]
        left.scatter([t["row"]["memory"]["max"]["peak_allocated"] / GIB for t in ok],
                     [t["estimate"].peak_allocated / GIB for t in ok], s=22, color=colors[family], label=family,
                     marker="o")
    calibration = [t for t in trials if t["role"] == "calibration"]
    left.scatter([t["row"]["memory"]["max"]["peak_allocated"] / GIB for t in calibration],
                 [t["estimate"].peak_allocated / GIB for t in calibration], s=40, color="black", marker="+",
                 label="calibration rows")
    top = 85
    left.plot([0, top], [0, top], color="black", linewidth=0.8)
    left.plot([0, top], [0, 1.1 * top], "--", color="grey", linewidth=0.7, label="±10%")
    left.plot([0, top], [0, 0.9 * top], "--", color="grey", linewidth=0.7)
    left.set(xlabel="measured peak allocated (GiB)", ylabel="predicted (GiB)", xlim=(0, top), ylim=(0, top),
             title="dsx estimate: peak GPU memory of the rows that fitted (H100 80GB)")
    left.legend(fontsize=8)
    placed = [t for t in trials if t["role"] != "calibration"]
    placed.sort(key=needed_fraction)
    for index, t in enumerate(placed):
        oom = t["row"]["status"] == "oom"
        right.scatter(needed_fraction(t), index, s=18, color="tab:red" if oom else "tab:green",
                      marker="x" if oom else "o")
    right.axvline(1.0, color="black", linewidth=0.8)
    right.set(xlabel="predicted need / GPU memory (allocated + context + headroom)", ylabel="trials, sorted",
              title="fit/OOM: green fitted, red ran out of memory (right of 1: predicted OOM)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", type=Path, help="write the predicted-vs-measured PNG here")
    args = parser.parse_args()
    trials = judged_trials(FILES)
    print("\n".join(summary(trials) + [""] + pruned_vs_exhaustive() + [""] + compiled(COMPILED_FILES)))
    if args.plot:
        plot(trials, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
