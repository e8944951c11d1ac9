"""Cross-section rules about blocks and keys that do nothing, or not what they say: a checkpointing block nothing
applies, deprecated and never-read keys, switches that turn on whatever their value (dsx.lint.rules runs them with
the others)."""

from __future__ import annotations

from typing import Iterator

from dsx.lint.context import LintContext, offload_device, zero_stage
from dsx.lint.context import as_dict as _dict
from dsx.lint.context import is_true as _is_true
from dsx.lint.findings import Finding


def activation_checkpointing(data: dict, ctx: LintContext) -> Iterator[Finding]:
    """Only deepspeed.checkpointing.configure() reads this block (never deepspeed.initialize, never the Trainer), and
    configure()'s own arguments override it: its constraints are warnings, and moot under the Trainer."""
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
        return
    if not effective:
        yield Finding("activation_checkpointing", "warning", "no-op-block",
                      "this block turns nothing on; it is also only used when the model calls "
                      "deepspeed.checkpointing.configure()/checkpoint()",
                      "remove it, or enable partition_activations / cpu_checkpointing")
    if not _is_true(block.get("contiguous_memory_optimization")):
        return
    path = "activation_checkpointing.contiguous_memory_optimization"
    if not _is_true(block.get("partition_activations")):
        yield Finding(path, "warning", "checkpointing-configure",
                      "without partition_activations, deepspeed.checkpointing.configure() asserts \"Contiguous "
                      "Checkpointing is only available with partitioned activations\" unless the script passes "
                      "partition_activations=True to it",
                      "set partition_activations: true")
    if block.get("number_checkpoints") is None:
        yield Finding(path, "warning", "checkpointing-configure",
                      "without number_checkpoints, deepspeed.checkpointing.configure() asserts \"Must specify the "
                      "number of layers with contiguous memory checkpointing\" unless the script passes "
                      "num_checkpoints= to it (Megatron-DeepSpeed passes its layer count)",
                      "set number_checkpoints to the number of checkpointed layers")


def makes_inside_moot(finding: Finding, ctx: LintContext) -> bool:
    """A block nothing reads in this context: what is wrong inside it changes nothing (the engine folds it in)."""
    return finding.code == "aio-unused" or (ctx.hf and finding.code == "no-op-block")


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


# ZeRO options only a ZeRO optimizer reads (stages 1-3): at stage 0 DeepSpeed accepts them and nothing reads them.
# Stage-3-only keys, offload, deprecated and dead keys have rules of their own; the exceptions below are read at
# stage 0 too (engine.py: BF16_Optimizer(allgather_bucket_size=...) for a bf16 pipeline; dc.init(...,
# zero_reduce_bucket_size()) for DeepCompile; the managed_gradient_accumulation=False assert on overlap_comm).
STAGE0_IGNORED = ("contiguous_gradients", "reduce_scatter", "reduce_bucket_size", "use_multi_rank_bucket_allreduce",
                  "allgather_bucket_size", "overlap_comm", "load_from_fp32_weights", "elastic_checkpoint",
                  "ignore_unused_parameters", "round_robin_gradients", "parameter_alignment")


def zero_off_keys(data: dict, ctx: LintContext) -> Iterator[Finding]:
    """ZeRO tuning options at stage 0, all in one finding: each changes nothing that was asked for (a warning)."""
    zero = data.get("zero_optimization")
    if not isinstance(zero, dict) or zero_stage(data, ctx) != 0 or "zero_optimization.stage" in ctx.autos:
        return  # a stage "auto" that nothing fills was reported with what it does: ZeRO off
    read = set()
    if "pipeline" in data and _is_true(_dict(data.get("bf16")).get("enabled")):
        read.add("allgather_bucket_size")
    if _is_true(_dict(data.get("compile")).get("deepcompile")):
        read.add("reduce_bucket_size")
    if data.get("managed_gradient_accumulation") is False:
        read.add("overlap_comm")
    keys = [k for k in zero if k in STAGE0_IGNORED and k not in read]
    if "offload_optimizer" in zero and offload_device(data, "offload_optimizer") == "none" \
            and "zero_optimization.offload_optimizer.device" not in ctx.autos:
        keys.append("offload_optimizer")
    if keys:
        stage = "stage 0" if "stage" in zero else "no stage given, so stage 0"
        yield Finding("zero_optimization", "warning", "zero-off",
                      f"ZeRO is off ({stage}): DeepSpeed accepts and ignores {', '.join(keys)}",
                      "set zero_optimization.stage (1-3) if you meant ZeRO, or remove them")


def aio_unused(data: dict, ctx: LintContext) -> Iterator[Finding]:
    """DeepSpeed reads `aio` only for NVMe swapping (stage 3) and the checkpoint writer (FastCheckpointEngine): any
    other aio block changes nothing, whatever keys it holds (a warning; the engine folds what is inside it)."""
    if "aio" not in data or _dict(data.get("checkpoint")).get("writer") is not None:
        return
    for which in ("offload_param", "offload_optimizer"):
        if offload_device(data, which) == "nvme" or f"zero_optimization.{which}.device" in ctx.autos:
            return
    yield Finding("aio", "warning", "aio-unused",
                  "nothing reads this block: DeepSpeed uses aio only for offload device \"nvme\" (ZeRO stage 3) "
                  "and for checkpoint.writer, and this config has neither",
                  "remove it (keep it in NVMe-offload configs)")
