"""Cross-section rules about blocks and keys that do nothing, or not what they say: a checkpointing block nothing
applies, deprecated and never-read keys, switches that turn on whatever their value (dsx.lint.rules runs them with
the others)."""

from __future__ import annotations

from typing import Iterator

from dsx.lint.context import LintContext
from dsx.lint.context import as_dict as _dict
from dsx.lint.context import is_true as _is_true
from dsx.lint.findings import Finding


def activation_checkpointing(data: dict, ctx: LintContext) -> Iterator[Finding]:
    if "activation_checkpointing" not in data:
        return
    block = _dict(data["activation_checkpointing"])
    effective = [k for k in ("partition_activations", "cpu_checkpointing", "contiguous_memory_optimization",
                             "synchronize_checkpoint_boundary", "profile") if _is_true(block.get(k))]
    if ctx.hf:
        yield Finding("activation_checkpointing", "warning", "no-op-block",
                      "the transformers Trainer never applies this block (it does not call "
                      "deepspeed.checkpointing.configure)",
                      "use TrainingArguments(gradient_checkpointing=True) instead")
    elif not effective:
        yield Finding("activation_checkpointing", "warning", "no-op-block",
                      "this block turns nothing on; it is also only used when the model calls "
                      "deepspeed.checkpointing.configure()/checkpoint()",
                      "remove it, or enable partition_activations / cpu_checkpointing")


def deprecated_keys(data: dict, ctx: LintContext) -> Iterator[Finding]:
    zero = data.get("zero_optimization")
    if isinstance(zero, bool):
        yield Finding("zero_optimization", "warning", "deprecated-key",
                      f"a boolean zero_optimization is the legacy form (means stage {1 if zero else 0})",
                      f"write {{\"stage\": {1 if zero else 0}}}")
        return
    replacements = {
        "cpu_offload": "offload_optimizer: {\"device\": \"cpu\"}",
        "cpu_offload_param": "offload_param: {\"device\": \"cpu\"}",
        "cpu_offload_use_pin_memory": "pin_memory inside offload_optimizer / offload_param (this value is "
                                      "not forwarded)",
        "stage3_gather_fp16_weights_on_model_save": "stage3_gather_16bit_weights_on_model_save",
    }
    for key, new in replacements.items():
        if key in _dict(zero):
            yield Finding(f"zero_optimization.{key}", "warning", "deprecated-key",
                          f"'{key}' is deprecated", f"use {new}")


def dead_keys(data: dict, ctx: LintContext) -> Iterator[Finding]:
    if "disable_allgather" in data:
        yield Finding("disable_allgather", "warning", "dead-key", "disable_allgather is parsed and never used",
                      "remove it")
    if "allgather_partitions" in _dict(data.get("zero_optimization")):
        yield Finding("zero_optimization.allgather_partitions", "warning", "dead-key",
                      "allgather_partitions is parsed and never used", "remove it")


def datastates(data: dict, ctx: LintContext) -> Iterator[Finding]:
    if "datastates_ckpt" in data and data["datastates_ckpt"] is not False:
        yield Finding("datastates_ckpt", "warning", "datastates-enabled",
                      "any value other than false enables DataStates checkpointing, even {\"enabled\": false}; "
                      "deepspeed.initialize then needs the datastates package",
                      "remove the key to keep it off")


def comms_logger_off(data: dict, ctx: LintContext) -> Iterator[Finding]:
    logger = data.get("comms_logger")
    if isinstance(logger, dict) and logger.get("enabled") is False:
        yield Finding("comms_logger.enabled", "warning", "comms-logger-on",
                      "comms_logger.enabled false does not turn the logger off: DeepSpeed (0.18.9, 0.19.8) turns it on "
                      "whenever the block is present, and it then synchronises the device after every collective",
                      "remove the comms_logger block")
