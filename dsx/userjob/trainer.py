"""The transformers Trainer seen from outside: its command line before a launch, its --output_dir and log after.

Before: a DeepSpeed config whose scheduler warms up (WarmupLR, WarmupDecayLR, WarmupCosineLR) with
`warmup_num_steps: "auto"` gets the Trainer's warmup steps there. transformers before 5.18 writes 0 when the command
line asks for no warmup, and DeepSpeed 0.19 rejects it at deepspeed.initialize ("warmup_num_steps must be a
positive integer, got 0"; checked with transformers 5.17.0 and DeepSpeed 0.19.8 on CPU). transformers 5.18 writes
max(1, warmup) instead (its PR #48640; checked in the 5.17.0, 5.18.0 and 5.24.0 wheels).

After: the Trainer reports its own throughput (train_samples_per_second, train_steps_per_second over
train_runtime, which starts after DeepSpeed's initialisation) in trainer_state.json and train_results.json when
the script calls save_state / save_metrics (as the transformers examples do), and in the metrics line it prints.
"""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path

from dsx.lint.findings import Finding
from dsx.results import TrainerFigures

TRAINER_CONFIG_ARG = "--deepspeed"
"""The Trainer's own flag for the DeepSpeed config: `--config-arg --deepspeed` means a Trainer script."""

WARMUP_SCHEDULERS = ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR")
"""DeepSpeed schedulers whose warmup_num_steps must be a positive integer (0.19)."""

POSITIVE_WARMUP_FILL = (5, 18)
"""The first transformers that fills warmup_num_steps with at least 1."""

DEFAULT_OUTPUT_DIR = "trainer_output"
"""TrainingArguments.output_dir when the command line gives none (transformers 5)."""

METRICS = {"train_samples_per_second": "samples_per_s", "train_steps_per_second": "steps_per_s",
           "train_runtime": "runtime_s", "train_loss": "train_loss"}


def arg_value(args: list[str], *names: str) -> str | None:
    """The value of the last `--name VALUE` or `--name=VALUE` among args (argparse keeps the last), else None."""
    value = None
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(name + "="):
                value = arg[len(name) + 1:]
    return value


def _spellings(name: str) -> tuple[str, str]:
    """HfArgumentParser takes --per_device_train_batch_size and --per-device-train-batch-size alike."""
    return f"--{name}", f"--{name.replace('_', '-')}"


def _number(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def asks_for_warmup(args: list[str]) -> bool:
    """Whether the script's arguments ask the Trainer for warmup: --warmup_steps N > 0 (below 1 it is a ratio in
    transformers 5) or --warmup_ratio R > 0."""
    steps = _number(arg_value(args, *_spellings("warmup_steps")))
    ratio = _number(arg_value(args, *_spellings("warmup_ratio")))
    return bool((steps and steps > 0) or (ratio and ratio > 0))


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2])


def warmup_finding(config: dict, args: list[str], transformers_version: str | None, target) -> Finding | None:
    """What a Trainer launch of this config with these script arguments does with the scheduler's "auto" warmup:
    an error when it will crash at deepspeed.initialize, a warning when transformers fills 1 step of warmup the
    command line did not ask for, None when the command line asks for warmup or nothing warms up."""
    scheduler = config.get("scheduler") if isinstance(config.get("scheduler"), dict) else {}
    params = scheduler.get("params") if isinstance(scheduler.get("params"), dict) else {}
    kind = scheduler.get("type")
    if kind not in WARMUP_SCHEDULERS or params.get("warmup_num_steps") != "auto" or target.is_legacy:
        return None
    if asks_for_warmup(args):
        return None
    path = "scheduler.params.warmup_num_steps"
    if transformers_version is not None and _version_tuple(transformers_version) >= POSITIVE_WARMUP_FILL:
        return Finding(path, "warning", "hf-zero-warmup",
                       f"the command line asks for no warmup, so the Trainer of transformers {transformers_version} "
                       f"fills 1 here: {kind} runs the first step at warmup_min_lr",
                       "give the script --warmup_steps N if you want warmup, or use a scheduler without warmup")
    which = f"transformers {transformers_version}" if transformers_version else "transformers before 5.18"
    return Finding(path, "error", "hf-zero-warmup",
                   f"the Trainer of {which} fills \"auto\" here with its warmup steps, 0 when the command line asks "
                   f"for none (no --warmup_steps N > 0 or --warmup_ratio R > 0 among the script's arguments), and "
                   f"DeepSpeed {target}'s {kind} rejects 0 at deepspeed.initialize (\"warmup_num_steps must be a "
                   f"positive integer, got 0\")",
                   "add --warmup_steps N (N > 0) to the script's arguments, or use a scheduler without warmup (drop "
                   "the scheduler block and the Trainer schedules with --lr_scheduler_type)")


def installed_transformers() -> str | None:
    """The version of the transformers the ranks will import (this environment's; no import)."""
    from importlib import metadata

    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return None


def flag_on(args: list[str], name: str) -> bool:
    """A TrainingArguments boolean as HfArgumentParser reads it: `--bf16` alone, `--bf16 true`, `--bf16=False`
    (the last one given wins)."""
    on = False
    for i, arg in enumerate(args):
        key, eq, value = arg.partition("=")
        if key not in _spellings(name):
            continue
        if not eq:
            value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else "true"
        on = value.lower() in ("true", "1", "yes", "y")
    return on


def precision(config: dict, args: list[str]) -> str:
    """What the ranks train in: the config's bf16/fp16 when set, else what the Trainer fills "auto" with from
    --bf16 / --fp16 (fp32 without either, as DeepSpeed without either section)."""
    from dsx.config_facts import precision_of

    known = precision_of(config)
    if known != "fp32":
        return known
    for name in ("bf16", "fp16"):
        section = config.get(name) if isinstance(config.get(name), dict) else {}
        if section.get("enabled") == "auto" and flag_on(args, name):
            return name
    return "fp32"


def output_dir(args: list[str], cwd: str) -> Path:
    """The Trainer's --output_dir (relative to the launch's folder), or transformers 5's default."""
    value = arg_value(args, *_spellings("output_dir")) or DEFAULT_OUTPUT_DIR
    return Path(cwd, value)


def _from_files(folder: Path, since: float) -> tuple[dict, str] | None:
    """The final train metrics from trainer_state.json (its log_history's last entry with train_runtime), else
    train_results.json / all_results.json: only files written during this launch (mtime >= since)."""
    def fresh(path: Path) -> bool:
        try:
            return path.is_file() and path.stat().st_mtime >= since
        except OSError:
            return False

    state = folder / "trainer_state.json"
    if fresh(state):
        try:
            data = json.loads(state.read_text())
            entries = [e for e in data.get("log_history", []) if isinstance(e, dict) and "train_runtime" in e]
            if entries:
                return {**entries[-1], "global_step": data.get("global_step")}, str(state)
        except (OSError, ValueError, AttributeError):
            pass
    for name in ("train_results.json", "all_results.json"):
        path = folder / name
        if fresh(path):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and "train_runtime" in data:
                return data, str(path)
    return None


_LOG_DICT = re.compile(r"\{[^{}]*'train_runtime'[^{}]*\}")


def _from_log(text: str) -> dict | None:
    """The last metrics dict the Trainer printed ({'train_runtime': '12.3', 'train_samples_per_second': ...}; its
    callbacks print floats to 4 significant digits)."""
    for match in reversed(_LOG_DICT.findall(text)):
        try:
            data = ast.literal_eval(match)
        except (ValueError, SyntaxError):
            continue
        if isinstance(data, dict):
            return data
    return None


def trainer_figures(args: list[str], cwd: str, log_text: str, since: float,
                    seq_len: int | None) -> TrainerFigures | None:
    """The Trainer's own figures of this launch, from its --output_dir or its printed log; None when the script
    reported none (not a Trainer, or it failed before the end of train())."""
    found = _from_files(output_dir(args, cwd), since)
    data, source = found if found else (_from_log(log_text), "log")
    if not data:
        return None
    values = {field: _number(str(data.get(key))) for key, field in METRICS.items()}
    step = _number(str(data.get("global_step")))
    micro = _number(arg_value(args, *_spellings("per_device_train_batch_size")))
    accum = _number(arg_value(args, *_spellings("gradient_accumulation_steps")))
    samples = values["samples_per_s"]
    return TrainerFigures(**values, global_step=int(step) if step is not None else None,
                          tokens_per_s=samples * seq_len if samples is not None and seq_len else None,
                          seq_len=seq_len, micro_batch=int(micro) if micro is not None else 8,
                          grad_accum=int(accum) if accum is not None else 1, source=source)
