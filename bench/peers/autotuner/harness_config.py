"""A race winner as the one harness runs it (issue 31): the DeepSpeed config the Trainer script gets, and the
Trainer flags that go with it, from either tool's answer.

    python bench/peers/autotuner/harness_config.py autotuner autotuning_results/ds_config_optimal.json OUT.json
    python bench/peers/autotuner/harness_config.py dsx RESULTS.jsonl OUT.json
    python bench/peers/autotuner/harness_config.py same A.json B.json      # exit 0: the same ZeRO section and split

The winner is what each tool decided about *how* to train: the ZeRO section, the micro-batch and grad-accum, and
(dsx only) compile and activation checkpointing, which the Trainer applies itself (--torch_compile: accelerate
calls DeepSpeed's engine.compile(), as `dsx run --compile` does; --gradient_checkpointing, non-reentrant, as dsx's
--act-ckpt). *What* is trained comes from the Trainer's own arguments for both: the optimizer's hyperparameters,
clipping and precision are "auto" in both configs, so neither winner trains differently. The flags are printed one
per line (the race script reads them with mapfile), the config written to OUT.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

AUTO_OPTIMIZER = {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}}
DROPPED = ("autotuning", "comms_logger", "wall_clock_breakdown", "steps_per_print", "flops_profiler")
"""Keys that say how a tool measures, not how the model trains."""


def trainer_ready(config: dict) -> dict:
    """The config with what is trained left to the Trainer ("auto") and the tools' measuring keys dropped."""
    ready = {key: value for key, value in config.items() if key not in DROPPED}
    ready["optimizer"] = AUTO_OPTIMIZER
    ready["gradient_clipping"] = "auto"
    for precision in ("bf16", "fp16"):
        if precision in ready:
            ready[precision] = {**ready[precision], "enabled": "auto"}
    return ready


def batch_flags(config: dict) -> list[str]:
    return ["--per_device_train_batch_size", str(config["train_micro_batch_size_per_gpu"]),
            "--gradient_accumulation_steps", str(config["gradient_accumulation_steps"])]


def from_autotuner(path: Path) -> tuple[dict, list[str]]:
    config = json.loads(path.read_text())
    return trainer_ready(config), batch_flags(config)


def best_dsx_row(results: Path) -> dict:
    """The fastest ok row of the file's last sweep, as `dsx report --best` picks it (a configuration `dsx sweep
    --check` found to differ is left out)."""
    from dsx.report.best import pick_best
    from dsx.results import read_rows

    rows = read_rows(results)
    sweep_id = next(r["sweep"]["sweep_id"] for r in reversed(rows) if r.get("sweep"))
    differs = {r["sweep"]["label"] for r in rows if r.get("sweep") and (r.get("parity") or {}).get("verdict") and
               r["parity"]["verdict"].get("verdict") == "differs"}
    sweep = [r for r in rows if (r.get("sweep") or {}).get("sweep_id") == sweep_id and
             r["sweep"]["label"] not in differs]
    return pick_best(sweep).row


def from_dsx(results: Path) -> tuple[dict, list[str]]:
    row = best_dsx_row(results)
    if (row.get("model") or {}).get("vocab_pad"):
        sys.exit(f"{results}: the best row pads the vocabulary; train.py builds the preset as it is")
    flags = batch_flags(row["ds_config"])
    toggles = row.get("toggles") or {}
    if toggles.get("compile"):
        flags.append("--torch_compile")
    if toggles.get("act_ckpt"):
        flags += ["--gradient_checkpointing", "--gradient_checkpointing_kwargs", '{"use_reentrant":false}']
    return trainer_ready(row["ds_config"]), flags


def same_answer(a: dict, b: dict) -> bool:
    """Two Trainer-ready configs that train the same way: ZeRO section and batch split (precision and optimizer
    are the Trainer's in both)."""
    keys = ("zero_optimization", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
    return all(a.get(key) == b.get(key) for key in keys)


def main() -> None:
    if sys.argv[1:2] == ["same"]:  # harness_config.py same A.json B.json: exit 0 when they are the same answer
        first, second = (json.loads(Path(p).read_text()) for p in sys.argv[2:4])
        sys.exit(0 if same_answer(first, second) else 1)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tool", choices=["autotuner", "dsx"])
    parser.add_argument("answer", type=Path, help="ds_config_optimal.json (autotuner) or the sweep's results file")
    parser.add_argument("out", type=Path, help="the Trainer-ready DeepSpeed config to write")
    args = parser.parse_args()
    config, flags = (from_autotuner if args.tool == "autotuner" else from_dsx)(args.answer)
    args.out.write_text(json.dumps(config, indent=2) + "\n")
    print("\n".join(flags))


if __name__ == "__main__":
    main()
