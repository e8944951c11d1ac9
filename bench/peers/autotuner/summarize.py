"""What one race (race.sh's WORK folder) found, per tool: wall time to its answer, trials, OOMs, failures (the
autotuner's with their error line), GPU-seconds, the answer, and the answer re-measured in the one harness.

    python bench/peers/autotuner/summarize.py bench/peers/autotuner/gpt2-xl     # writes summary.json, prints a table

Re-measured tokens/s is the median over the repeats of train.py's own clock (ran.json: the median step between
device synchronisations after the first --skip_steps, x the step's tokens); memory is the launch row's NVML peak.
GPU-seconds: the wall time of each tool's command on its one GPU (the GPU is held throughout: trials run one after
another); dsx's rows also say how much of it its trials' launches took (trial_gpu_s). The autotuner's trial count
is its own (summary.txt: an experiment it repeats overwrites its folder), plus its model-info profile run.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[3])]
from harness_config import best_dsx_row  # noqa: E402 (this folder's)

TOOLS = ("autotuner", "dsx_restricted", "dsx")
OOM = re.compile(r"out of memory|OutOfMemoryError", re.IGNORECASE)


def walls(work: Path) -> dict[str, dict]:
    found: dict[str, dict] = {}
    for line in (work / "walls.jsonl").read_text().splitlines():
        entry = json.loads(line)
        found[entry["part"]] = entry
    return found


def autotuner_trials(work: Path) -> list[dict]:
    """Every experiment folder the autotuner left (by name; a repeated experiment keeps its last run's)."""
    trials = []
    for exp in sorted((work / "autotuning_results").glob("*/exp.json")):
        folder = exp.parent
        stderr = (folder / "stderr.log").read_text(errors="replace") if (folder / "stderr.log").exists() else ""
        metrics = folder / "metrics.json"
        errors = [line.strip() for line in stderr.splitlines() if "Error" in line or "error:" in line]
        answered = metrics.exists() or (folder / "model_info.json").exists()  # a trial's, the profile run's answer
        status = "ok" if answered else ("oom" if OOM.search(stderr) else "failed")
        config = json.loads(exp.read_text()).get("ds_config", {})
        trials.append({"name": folder.name, "status": status,
                       "micro_batch": config.get("train_micro_batch_size_per_gpu"),
                       "grad_accum": config.get("gradient_accumulation_steps"),
                       "stage": (config.get("zero_optimization") or {}).get("stage"),
                       "throughput": json.loads(metrics.read_text()).get("throughput") if metrics.exists() else None,
                       "error": errors[-1][:300] if status != "ok" and errors else None})
    return trials


def autotuner_answer(work: Path) -> dict | None:
    optimal = work / "autotuning_results" / "ds_config_optimal.json"
    if not optimal.exists():
        return None
    config = json.loads(optimal.read_text())
    return {"stage": config["zero_optimization"]["stage"], "micro_batch": config["train_micro_batch_size_per_gpu"],
            "grad_accum": config["gradient_accumulation_steps"]}


def sweep_summary(results: Path) -> dict:
    """The sweep's trials and its best row (the one harness_config.from_dsx re-measures)."""
    from dsx.report.load import ReportError
    from dsx.results import read_rows

    rows = read_rows(results)
    statuses = [r["status"] for r in rows if r.get("sweep")]
    summary = {"trials": len(statuses), "ooms": statuses.count("oom"),
               "failures": len([s for s in statuses if s not in ("ok", "oom")]),
               "trial_gpu_s": round(sum((r.get("overhead") or {}).get("device_seconds") or 0.0 for r in rows), 1)}
    try:
        best = best_dsx_row(results)
    except (StopIteration, ReportError) as exc:  # no sweep row, no ok row: the tool found nothing
        summary["answer"] = None
        summary["answer_error"] = str(exc)
        return summary
    zero = best["ds_config"]["zero_optimization"]
    summary["answer"] = {"label": best["sweep"]["label"], "stage": zero["stage"], "micro_batch": best["micro_batch"],
                         "grad_accum": best["grad_accum"], "compile": bool(best["toggles"].get("compile")),
                         "act_ckpt": bool(best["toggles"].get("act_ckpt")),
                         "offload": (zero.get("offload_optimizer") or {}).get("device"),
                         "tokens_per_s_in_sweep": round(best["figures"]["tokens_per_s"])}
    return summary


def remeasured(work: Path, tool: str) -> dict:
    ran = [json.loads(p.read_text()) for p in sorted((work / "remeasure").glob(f"{tool}-*/ran.json"))]
    launches = [json.loads(line) for line in (work / "launches.jsonl").read_text().splitlines() if line.strip()] \
        if (work / "launches.jsonl").exists() else []
    mine = [r for r in launches if f"remeasure/{tool}-" in " ".join(map(str, r.get("command") or []))]
    memory = [((r.get("memory") or {}).get("max") or {}).get("nvml_used") for r in mine]
    speeds = [r["tokens_per_s"] for r in ran if r.get("tokens_per_s")]
    return {"repeats": len(ran), "tokens_per_s_each": [round(s) for s in speeds],
            "tokens_per_s": round(statistics.median(speeds)) if speeds else None,
            "peak_allocated_gib": round(max(r["peak_allocated"] for r in ran) / 2**30, 1)
            if ran and all(r.get("peak_allocated") for r in ran) else None,
            "nvml_used_gib": round(max(m for m in memory if m) / 2**30, 1) if any(memory) else None,
            "launch_status": [r.get("status") for r in mine],
            "losses": ran[0]["losses"] if ran else None,
            "global_batch": ran[0]["micro_batch"] * ran[0]["grad_accum"] * ran[0]["world_size"] if ran else None}


def loss_gap(a: dict, b: dict) -> str | None:
    """The largest step difference of two re-measured loss curves, when they trained on the same global batch."""
    if not (a.get("losses") and b.get("losses")):
        return None
    if a["global_batch"] != b["global_batch"]:
        return f"global batch {a['global_batch']} vs {b['global_batch']}: the curves are not step-comparable"
    gap = max(abs(x - y) / abs(y) for x, y in zip(a["losses"], b["losses"]))
    return f"largest step difference {gap:.2%} of the loss over {min(len(a['losses']), len(b['losses']))} steps"


def summarize(work: Path) -> dict:
    spent = walls(work)
    trials = autotuner_trials(work)
    counted = re.search(r"Total number of experiments: (\d+)", (work / "autotuning_results" / "summary.txt")
                        .read_text()) if (work / "autotuning_results" / "summary.txt").exists() else None
    out: dict = {"autotuner": {
        "wall_s": spent.get("autotuner", {}).get("wall_s"), "exit": spent.get("autotuner", {}).get("exit"),
        "trials": int(counted.group(1)) + 1 if counted else len(trials),
        "ooms": sum(t["status"] == "oom" for t in trials), "failures": sum(t["status"] == "failed" for t in trials),
        "gpu_s": spent.get("autotuner", {}).get("wall_s"), "answer": autotuner_answer(work),
        "failed": [t for t in trials if t["status"] != "ok"], "each": trials}}
    for tool, results in (("dsx_restricted", "sweep_restricted.jsonl"), ("dsx", "sweep.jsonl")):
        out[tool] = {"wall_s": spent.get(tool, {}).get("wall_s"), "exit": spent.get(tool, {}).get("exit"),
                     "gpu_s": spent.get(tool, {}).get("wall_s"),
                     **(sweep_summary(work / results) if (work / results).exists() else {"answer": None})}
    for tool in TOOLS:
        same = tool == "dsx_restricted" and (work / "dsx_restricted.same").exists()  # race.sh measured it once
        out[tool]["remeasured"] = remeasured(work, "autotuner" if same else tool)
        out[tool]["same_answer_as_autotuner"] = same or None
        out[tool]["tokens_per_s"] = out[tool]["remeasured"]["tokens_per_s"] if out[tool]["answer"] else None
    out["parity_in_harness"] = {f"{tool} vs autotuner": loss_gap(out[tool]["remeasured"],
                                                               out["autotuner"]["remeasured"])
                                for tool in ("dsx_restricted", "dsx")}
    return out


def table(summary: dict) -> str:
    lines = ["| tool | answer | wall s | trials (OOM, failed) | GPU-s | tokens/s re-measured | x autotuner |",
             "|---|---|---|---|---|---|---|"]
    base = summary["autotuner"]["tokens_per_s"]
    for tool in TOOLS:
        entry = summary[tool]
        answer = entry["answer"]
        text = "none" if not answer else (answer.get("label") or f"z{answer['stage']}") + \
            f" mb{answer['micro_batch']} x ga{answer['grad_accum']}"
        speed = entry["tokens_per_s"]
        shown = (f"{speed:,} | {speed / base:.2f}x" if base else f"{speed:,} | -") if speed else "- | -"
        lines.append(f"| {tool} | {text} | {entry['wall_s']} | {entry.get('trials')} ({entry.get('ooms')}, "
                     f"{entry.get('failures')}) | {entry.get('gpu_s')} | {shown} |")
    return "\n".join(lines)


def main() -> None:
    folder = Path(sys.argv[1])
    summary = summarize(folder)
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(table(summary))
    for pair, gap in summary["parity_in_harness"].items():
        print(f"{pair}: {gap}")


if __name__ == "__main__":
    main()
