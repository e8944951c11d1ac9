"""The string "auto": a placeholder that only the transformers Trainer and accelerate fill.

Passed to DeepSpeed directly, "auto" is dropped from its pydantic sections before validation (so
`"stage": "auto"` means ZeRO off, and a misspelled key set to "auto" is not even noticed), and breaks the
dict-read keys later. dsx treats it as an error unless --hf says a Trainer/accelerate will fill it.
"""

from __future__ import annotations

from typing import Any

# Key path -> what DeepSpeed does with an unfilled "auto" there (deepspeed-facts §10.3).
HF_FILLED: dict[str, str] = {
    "train_micro_batch_size_per_gpu": "fails at DeepSpeedConfig() with a TypeError",
    "train_batch_size": "fails at DeepSpeedConfig() with a TypeError",
    "gradient_accumulation_steps": "fails at DeepSpeedConfig() with a TypeError",
    "gradient_clipping": "is accepted and then fails at the first optimizer step",
    "optimizer.params.lr": "fails at deepspeed.initialize()",
    "optimizer.params.betas": "fails at deepspeed.initialize()",
    "optimizer.params.eps": "fails at deepspeed.initialize()",
    "optimizer.params.weight_decay": "fails at deepspeed.initialize()",
    "scheduler.params.warmup_min_lr": "fails at deepspeed.initialize()",
    "scheduler.params.warmup_max_lr": "fails at deepspeed.initialize()",
    "scheduler.params.warmup_num_steps": "fails at deepspeed.initialize()",
    "scheduler.params.total_num_steps": "fails at deepspeed.initialize()",
    "fp16.enabled": "is silently dropped: fp16 stays off",
    "bf16.enabled": "is silently dropped: bf16 stays off",
    "zero_optimization.stage": "is silently dropped: stage 0, ZeRO is off",
    "zero_optimization.offload_optimizer.device": "is silently dropped: no optimizer offload",
    "zero_optimization.offload_param.device": "is silently dropped: no parameter offload",
    "zero_optimization.reduce_bucket_size": "is silently dropped: the default (5e8) is used",
    "zero_optimization.stage3_prefetch_bucket_size": "is silently dropped: the default (5e7) is used",
    "zero_optimization.stage3_param_persistence_threshold": "is silently dropped: the default (1e5) is used",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save": "is silently dropped: weights are not gathered "
    "on save",
}

# Filled by accelerate only; the transformers Trainer leaves these to accelerate as well (Trainer runs on it),
# so --hf accepts them, but a plain `deepspeed` launch of a Trainer-less script never fills them.
ACCELERATE_ONLY = {
    "zero_optimization.stage",
    "zero_optimization.offload_optimizer.device",
    "zero_optimization.offload_param.device",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save",
}

# What the transformers Trainer itself writes over "auto" (`dsx config --hf-auto` puts "auto" exactly here);
# the stage3_* ones only at ZeRO stage 3.
TRAINER_FILLED = tuple(path for path in HF_FILLED if path not in ACCELERATE_ONLY)


def auto_paths(node: Any, path: str = "") -> list[str]:
    """Dotted paths of every "auto" value in a config (what only the Trainer / accelerate fill)."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in auto_paths(v, f"{path}.{k}" if path else str(k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in auto_paths(v, f"{path}[{i}]")]
    return [path] if node == "auto" else []


# What DeepSpeed does with an unfilled "auto" (HF_FILLED's words), as one clause of a folded finding.
_EFFECTS = (("fails at DeepSpeedConfig()", "fail at DeepSpeedConfig() (TypeError)"),
            ("fails at deepspeed.initialize()", "fail at deepspeed.initialize()"),
            ("is accepted and then fails at the first optimizer step", "fail at the first optimizer step"),
            ("is silently dropped", "are silently dropped (DeepSpeed's defaults apply)"))


def fold_unfilled(findings: list) -> list:
    """The "auto" values only the Trainer / accelerate fill, as one finding: they share one fix (--hf, or values),
    as `dsx launch` says in one line (dsx.userjob.preflight.Checked.error_lines); one finding each is 2 lines each."""
    from dsx.lint.findings import Finding

    unfilled = [f for f in findings if f.code == "auto-unfilled" and f.path in HF_FILLED]
    if len(unfilled) < 2:
        return findings
    groups: dict[str, list[str]] = {words: [] for _, words in _EFFECTS}
    for f in unfilled:
        effect = next((words for start, words in _EFFECTS if HF_FILLED[f.path].startswith(start)), "fail")
        groups.setdefault(effect, []).append(f.path)
    clauses = "; ".join(f"{effect}: {', '.join(paths)}" for effect, paths in groups.items() if paths)
    folded = Finding("", "error", "auto-unfilled",
                     f'{len(unfilled)} "auto" values only the transformers Trainer / accelerate fill; passed to '
                     f"DeepSpeed directly they {clauses}",
                     "lint with --hf if this config goes through the Trainer/accelerate, or set values")
    first = findings.index(unfilled[0])
    rest = [f for f in findings if f not in unfilled]
    return rest[:first] + [folded] + rest[first:]
