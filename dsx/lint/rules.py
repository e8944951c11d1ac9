"""Cross-section rules: mistakes DeepSpeed accepts (or rejects only deep inside deepspeed.initialize) that no
single section model can see. Each rule reads the config after the earlier passes removed what they reported,
so values may still have the wrong type: every rule checks types before using a value."""

from __future__ import annotations

from typing import Iterator

from dsx.buckets import DEEPSPEED_DEFAULT, MEASURED_LARGE, MEASURED_SMALL, SMALL
from dsx.config_facts import ONEBIT
from dsx.lint.context import LintContext
from dsx.lint.context import as_dict as _dict
from dsx.lint.context import is_true as _is_true
from dsx.lint.context import offload_device as _offload_device
from dsx.lint.context import zero_stage
from dsx.lint.findings import Finding
from dsx.lint.inert_rules import (activation_checkpointing, aio_unused, comms_logger_off, datastates, dead_keys,
                                  deprecated_keys, zero_off_keys)
from dsx.lint.run_rules import autotuning_exits, hf_fixed_train_batch

STAGE3_ONLY = {
    # canonical field name -> True when setting it at stage < 3 loses something the user clearly wanted
    "offload_param": True, "zero_hpz_partition_size": True, "zero_quantized_weights": True,
    "zero_quantized_nontrainable_weights": True, "zero_quantized_gradients": True,
    "sub_group_size": False, "prefetch_bucket_size": False, "param_persistence_threshold": False,
    "model_persistence_threshold": False, "max_live_parameters": False, "max_reuse_distance": False,
    "gather_16bit_weights_on_model_save": False, "stage3_gather_fp16_weights_on_model_save": False,
    "module_granularity_threshold": False, "use_all_reduce_for_fetch_params": False,
    "allgather_sequential": False, "memory_efficient_linear": False, "pipeline_loading_checkpoint": False,
    "override_module_apply": False, "log_trace_cache_warnings": False, "enable_sanity_checks": False,
    "save_muon_momentum_buffer_in_memory": False, "leaf_module": False,
}


def _canonical_zero_key(key: str) -> str:
    from dsx.schema.zero import ZeroConfig

    for name, info in ZeroConfig.model_fields.items():
        if key in (name, info.alias):
            return name
    return key


def _optimizer_kind(data: dict) -> str | None:
    from dsx.schema.optimizer import optimizer_kind

    optimizer = _dict(data.get("optimizer"))
    return optimizer_kind(optimizer["type"]) if isinstance(optimizer.get("type"), str) else None


# ---------------------------------------------------------------- ZeRO


def stage3_only_keys(data: dict, ctx: LintContext) -> Iterator[Finding]:
    stage = zero_stage(data, ctx)
    zero = _dict(data.get("zero_optimization"))
    if stage is None or stage == 3 or not zero:
        return
    for key, value in zero.items():
        name = _canonical_zero_key(key)
        if name not in STAGE3_ONLY:
            continue
        path = f"zero_optimization.{key}"
        if name == "offload_param":
            # the severity follows what is lost: a device that offloads (error), or nothing asked for (warning)
            if "zero_optimization.offload_param.device" in ctx.filled_by_hf:
                yield Finding(path, "warning", "stage3-only",
                              f"offload_param only applies to ZeRO stage 3: if accelerate fills its \"auto\" device "
                              f"with cpu or nvme, DeepSpeed does NOT offload parameters at stage {stage}",
                              "set stage 3 for parameter offload, or remove offload_param")
            elif _offload_device(data, "offload_param") == "none":
                yield Finding(path, "warning", "stage3-only",
                              f"offload_param with device none offloads nothing; it only applies to ZeRO stage 3 and "
                              f"is ignored at stage {stage}",
                              "remove it")
            else:
                yield Finding(path, "error", "stage3-only",
                              f"offload_param only applies to ZeRO stage 3: at stage {stage} DeepSpeed accepts it "
                              "and does NOT offload parameters",
                              "set stage 3 for parameter offload; at stage 1/2 use offload_optimizer only")
            continue
        lost = STAGE3_ONLY[name] and (value is True or (type(value) is int and value > 1) or isinstance(value, dict))
        yield Finding(path, "error" if lost else "warning", "stage3-only",
                      f"'{key}' only applies to ZeRO stage 3; at stage {stage} DeepSpeed accepts it and ignores it",
                      "set stage 3, or remove it")
    optimizer_offload = _dict(zero.get("offload_optimizer"))
    if _is_true(optimizer_offload.get("super_offload")):
        yield Finding("zero_optimization.offload_optimizer.super_offload", "error", "stage3-only",
                      f"super_offload only works at ZeRO stage 3 (on CUDA); at stage {stage} it is ignored",
                      "set stage 3, or remove it")


def offload_needs_zero(data: dict, ctx: LintContext) -> Iterator[Finding]:
    if zero_stage(data, ctx) == 0 and _offload_device(data, "offload_optimizer") != "none":
        yield Finding("zero_optimization.offload_optimizer", "error", "offload-without-zero",
                      "optimizer offload needs ZeRO stage 1, 2 or 3; at stage 0 nothing is offloaded",
                      "set zero_optimization.stage (2 is the usual choice with optimizer offload)")


def nvme_offload(data: dict, ctx: LintContext) -> Iterator[Finding]:
    stage = zero_stage(data, ctx)
    zero = _dict(data.get("zero_optimization"))
    for which in ("offload_param", "offload_optimizer"):
        block = _dict(zero.get(which))
        if _offload_device(data, which) != "nvme":
            continue
        path = f"zero_optimization.{which}"
        if which == "offload_optimizer" and stage in (1, 2):
            yield Finding(f"{path}.device", "error", "nvme-below-stage3",
                          f"NVMe optimizer offload at stage {stage} silently runs as CPU offload "
                          "(nvme_path is ignored)",
                          "use stage 3 for NVMe offload, or device \"cpu\"")
        elif not block.get("nvme_path") and f"{path}.nvme_path" not in ctx.filled_by_hf:
            yield Finding(f"{path}.nvme_path", "error", "nvme-without-path",
                          "NVMe offload without nvme_path: DeepSpeed accepts the config and fails inside "
                          "deepspeed.initialize()",
                          "set nvme_path to a directory on a local NVMe drive")


def zero3_reduce_scatter(data: dict, ctx: LintContext) -> Iterator[Finding]:
    if zero_stage(data, ctx) != 3 or _dict(data.get("zero_optimization")).get("reduce_scatter") is False:
        return
    if _is_true(data.get("prescale_gradients")):
        yield Finding("prescale_gradients", "error", "zero3-conflict",
                      "ZeRO-3 with reduce_scatter does not support prescale_gradients (deepspeed.initialize asserts)",
                      "remove prescale_gradients")
    factor = data.get("gradient_predivide_factor", 1.0)
    if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor != 1.0:
        yield Finding("gradient_predivide_factor", "error", "zero3-conflict",
                      "ZeRO-3 with reduce_scatter needs gradient_predivide_factor 1.0 (deepspeed.initialize asserts)",
                      "remove gradient_predivide_factor")
    op = data.get("gradient_allreduce_op")
    if isinstance(op, str) and op.lower() == "sum":
        yield Finding("gradient_allreduce_op", "error", "zero3-conflict",
                      "gradient_allreduce_op \"sum\" is not supported with ZeRO-3", "use \"mean\"")


def compute_grad_norm_off(data: dict, ctx: LintContext) -> Iterator[Finding]:
    zero = _dict(data.get("zero_optimization"))
    if zero.get("compute_grad_norm") is not False:
        return
    clip = data.get("gradient_clipping", 0.0 if ctx.target.is_legacy else 1.0)
    if isinstance(clip, (int, float)) and clip > 0:
        yield Finding("zero_optimization.compute_grad_norm", "error", "grad-norm-needed",
                      f"compute_grad_norm false needs gradient_clipping 0 (it is {clip}"
                      f"{'' if 'gradient_clipping' in data else ', the default'}); deepspeed.initialize raises",
                      "set gradient_clipping to 0")
    if _offload_device(data, "offload_optimizer") != "none" or _is_true(zero.get("cpu_offload")):
        yield Finding("zero_optimization.compute_grad_norm", "error", "grad-norm-needed",
                      "compute_grad_norm false does not work with optimizer offload (deepspeed.initialize raises)",
                      "remove one of them")
    if "zenflow" in zero:
        yield Finding("zero_optimization.compute_grad_norm", "error", "grad-norm-needed",
                      "compute_grad_norm false does not work with zenflow (deepspeed.initialize raises)",
                      "remove one of them")


def zenflow_needs_offload(data: dict, ctx: LintContext) -> Iterator[Finding]:
    zero = _dict(data.get("zero_optimization"))
    if "zenflow" in zero and zero_stage(data, ctx) in (1, 2) and _offload_device(data, "offload_optimizer") != "cpu":
        yield Finding("zero_optimization.zenflow", "error", "zenflow-needs-offload",
                      "ZenFlow at stage 1/2 needs offload_optimizer.device \"cpu\" (deepspeed.initialize raises)",
                      "add offload_optimizer {\"device\": \"cpu\"}")


def hpz_world_size(data: dict, ctx: LintContext) -> Iterator[Finding]:
    hpz = _dict(data.get("zero_optimization")).get("zero_hpz_partition_size")
    if not isinstance(hpz, int) or isinstance(hpz, bool) or hpz <= 1 or ctx.world_size is None:
        return
    if hpz > ctx.world_size or ctx.world_size % hpz:
        yield Finding("zero_optimization.zero_hpz_partition_size", "error", "hpz-world-size",
                      f"zero_hpz_partition_size {hpz} must divide the world size {ctx.world_size} "
                      "(DeepSpeed does not check)",
                      "use the number of GPUs per node")


# ---------------------------------------------------------------- optimizer and schedule


def onebit_with_zero(data: dict, ctx: LintContext) -> Iterator[Finding]:
    kind = _optimizer_kind(data)
    if kind not in ONEBIT:
        return
    stage = zero_stage(data, ctx)
    if stage:
        yield Finding("optimizer.type", "error", "onebit-with-zero",
                      f"{ONEBIT[kind]} is not compatible with ZeRO (stage {stage}): deepspeed.initialize raises",
                      "set zero_optimization.stage to 0 (1-bit optimizers compress plain data-parallel traffic)")
    if not _is_true(_dict(data.get("fp16")).get("enabled")):
        yield Finding("optimizer.type", "warning", "onebit-precision",
                      f"{ONEBIT[kind]} is only verified with fp16; DeepSpeed warns for other precisions",
                      "enable fp16")


def optimizer_needs_whitelist(data: dict, ctx: LintContext) -> Iterator[Finding]:
    from dsx.schema.optimizer import ZERO_SUPPORTED_OPTIMIZERS

    kind = _optimizer_kind(data)
    stage = zero_stage(data, ctx)
    if kind is None or kind in ONEBIT or not stage:
        return
    if kind not in ZERO_SUPPORTED_OPTIMIZERS and not _is_true(data.get("zero_allow_untested_optimizer")):
        yield Finding("optimizer.type", "error", "untested-optimizer",
                      f"ZeRO refuses optimizer '{data['optimizer']['type']}' unless zero_allow_untested_optimizer "
                      "is true (deepspeed.initialize asserts)",
                      "set zero_allow_untested_optimizer: true, or use Adam/AdamW")
    if kind == "lamb" and _offload_device(data, "offload_optimizer") != "none":
        yield Finding("optimizer.type", "error", "no-cpu-optimizer",
                      "Lamb has no CPU implementation: it cannot run with optimizer offload",
                      "use AdamW with offload, or drop the offload")


def lamb_needs_dynamic_loss_scale(data: dict, ctx: LintContext) -> Iterator[Finding]:
    fp16 = _dict(data.get("fp16"))
    scale = fp16.get("loss_scale", 0)
    if (_optimizer_kind(data) in ("lamb", "onebitlamb") and _is_true(fp16.get("enabled"))
            and isinstance(scale, (int, float)) and scale != 0):
        yield Finding("fp16.loss_scale", "error", "lamb-static-loss-scale",
                      f"Lamb needs dynamic loss scaling, but fp16.loss_scale is {scale} (static): "
                      "deepspeed.initialize asserts",
                      "set fp16.loss_scale to 0 (dynamic)")


def adam_means_adamw(data: dict, ctx: LintContext) -> Iterator[Finding]:
    optimizer = _dict(data.get("optimizer"))
    params = _dict(optimizer.get("params"))
    if (_optimizer_kind(data) == "adam" and "adam_w_mode" not in params
            and isinstance(params.get("weight_decay"), (int, float)) and params["weight_decay"] > 0):
        yield Finding("optimizer.type", "warning", "adam-is-adamw",
                      "DeepSpeed's \"Adam\" applies decoupled weight decay (AdamW) unless adam_w_mode is false",
                      "write \"AdamW\" if that is what you want, or set params.adam_w_mode: false for L2 Adam")


def scheduler_without_optimizer(data: dict, ctx: LintContext) -> Iterator[Finding]:
    if "scheduler" in data and "type" not in _dict(data.get("optimizer")) and not ctx.hf:
        yield Finding("scheduler", "warning", "scheduler-without-optimizer",
                      "a scheduler without an optimizer (no optimizer block, or one without a type) is silently "
                      "dropped unless the training script passes its own optimizer to deepspeed.initialize()",
                      "add an optimizer block, or make sure the script passes an optimizer")


def hf_zero_warmup(data: dict, ctx: LintContext) -> Iterator[Finding]:
    scheduler = _dict(data.get("scheduler"))
    if ("scheduler.params.warmup_num_steps" in ctx.filled_by_hf and not ctx.target.is_legacy
            and str(scheduler.get("type", "")).startswith("Warmup")):
        yield Finding("scheduler.params.warmup_num_steps", "warning", "hf-zero-warmup",
                      "the Trainer of transformers before 5.18 fills 0 here when warmup_steps and warmup_ratio are 0, "
                      "and DeepSpeed 0.19 rejects warmup_num_steps 0 (5.18 and later fill at least 1; dsx launch "
                      "checks the script's arguments)",
                      "give the Trainer warmup_steps > 0, or write a positive number here")


# ---------------------------------------------------------------- precision


def precision(data: dict, ctx: LintContext) -> Iterator[Finding]:
    fp16, bf16 = _dict(data.get("fp16")), _dict(data.get("bf16") or data.get("bfloat16"))
    if _is_true(fp16.get("enabled")) and _is_true(bf16.get("enabled")):
        yield Finding("fp16.enabled", "error", "fp16-and-bf16",
                      "fp16 and bf16 are both enabled (DeepSpeedConfig asserts)", "enable one of them")
    if "bf16" in data and "bfloat16" in data:
        yield Finding("bfloat16", "warning", "bf16-spelling",
                      "both bf16 and bfloat16 are present: DeepSpeed uses bf16 and ignores bfloat16",
                      "remove bfloat16")
    elif "bfloat16" in data:
        yield Finding("bfloat16", "warning", "deprecated-key", "bfloat16 is the old spelling", "rename it to bf16")
    autocast = _dict(data.get("torch_autocast"))
    if _is_true(autocast.get("enabled")) and (_is_true(fp16.get("enabled")) or _is_true(bf16.get("enabled"))):
        yield Finding("torch_autocast.enabled", "warning", "autocast-and-mixed-precision",
                      "torch_autocast together with fp16/bf16: DeepSpeed runs both", "use one of them")
    master = [k for k in ("bf16_master_weights_and_grads", "bf16_optimizer_states") if _is_true(bf16.get(k))]
    if master and not _is_true(bf16.get("enabled")):
        yield Finding(f"bf16.{master[0]}", "warning", "master-without-bf16",
                      f"{master[0]} is set but bf16 is not enabled: it has no effect", "enable bf16, or remove it")
    for section, key in (("bf16", "bf16_master_weights_and_grads"), ("fp16", "fp16_master_weights_and_grads")):
        if _is_true(_dict(data.get(section)).get(key)) and zero_stage(data, ctx) == 0:
            yield Finding(f"{section}.{key}", "error", "master-needs-zero",
                          f"{key} needs ZeRO stage 1-3 (DeepSpeedConfig asserts)", "enable ZeRO")


def version_dependent_defaults(data: dict, ctx: LintContext) -> Iterator[Finding]:
    if "gradient_clipping" not in data and "gradient_clipping" not in ctx.autos:
        yield Finding("gradient_clipping", "warning", "version-default",
                      "not set: DeepSpeed 0.19 clips gradients at norm 1.0 by default, 0.18 did not clip at all",
                      "write it explicitly: 1.0 to clip, 0 for no clipping")
    bf16 = _dict(data.get("bf16"))
    if _is_true(bf16.get("enabled")) and "check_grad_overflow" not in bf16:
        yield Finding("bf16.check_grad_overflow", "warning", "version-default",
                      "not set: DeepSpeed 0.19 checks bf16 gradients for overflow by default, 0.18 did not",
                      "write it explicitly (false keeps the 0.18 behaviour: no step skipped on overflow, and at "
                      "ZeRO-1/2 about 0.1 ms less per gradient tensor a step, a fifth of GPT-2 124M's)")
    for which in ("offload_param", "offload_optimizer"):
        block = _dict(_dict(data.get("zero_optimization")).get(which))
        if _offload_device(data, which) != "none" and "pin_memory" not in block:
            yield Finding(f"zero_optimization.{which}.pin_memory", "warning", "version-default",
                          "not set: DeepSpeed 0.19 pins offload buffers by default, 0.18 did not",
                          "write it explicitly (true is faster; false needs less locked host memory)")


# ---------------------------------------------------------------- batch sizes


def batch_arithmetic(data: dict, ctx: LintContext) -> Iterator[Finding]:
    names = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
    values = {}
    for name in names:
        value = data.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            values[name] = value
    filled = {n for n in names if n in ctx.autos}
    if not values and not filled and not any(n in data for n in names):
        yield Finding("train_batch_size", "error", "batch-missing",
                      "neither train_batch_size nor train_micro_batch_size_per_gpu is set (DeepSpeedConfig asserts)",
                      "set train_micro_batch_size_per_gpu (and gradient_accumulation_steps)")
        return
    # "auto" values are filled by the Trainer / accelerate from the script's arguments; what is concrete must still
    # divide (a train_batch_size of 3 at world size 2 holds for no micro-batch they could fill)
    train, micro, accum = (values.get(n) for n in names)
    world = ctx.world_size
    if train and micro and accum:
        if world is not None and train != micro * accum * world:
            yield Finding("train_batch_size", "error", "batch-arithmetic",
                          f"train_batch_size {train} != micro-batch {micro} x gradient accumulation {accum} x world "
                          f"size {world} = {micro * accum * world} (deepspeed.initialize asserts)",
                          f"set train_batch_size to {micro * accum * world}, or leave it out")
        elif world is None and train % (micro * accum):
            yield Finding("train_batch_size", "error", "batch-arithmetic",
                          f"train_batch_size {train} is not a multiple of micro-batch {micro} x gradient "
                          f"accumulation {accum} = {micro * accum}: no world size makes it hold",
                          "leave train_batch_size out and let DeepSpeed derive it")
    elif train and (micro or accum) and world is not None:
        given, name = (micro, "train_micro_batch_size_per_gpu") if micro else (accum, "gradient_accumulation_steps")
        if train % (given * world):
            yield Finding("train_batch_size", "error", "batch-arithmetic",
                          f"train_batch_size {train} is not divisible by {name} {given} x world size {world}",
                          "choose sizes with train = micro x accumulation x world size")
    elif train and world is not None and train % world:
        yield Finding("train_batch_size", "error", "batch-arithmetic",
                      f"train_batch_size {train} is not divisible by the world size {world}",
                      "choose sizes with train = micro x accumulation x world size")


def sequence_parallel(data: dict, ctx: LintContext) -> Iterator[Finding]:
    sp = data.get("sequence_parallel_size")
    if isinstance(sp, int) and ctx.world_size and ctx.world_size % sp:
        yield Finding("sequence_parallel_size", "error", "sp-world-size",
                      f"sequence_parallel_size {sp} does not divide the world size {ctx.world_size}",
                      "use a divisor of the world size")


def zero_bucket_size(data: dict, ctx: LintContext) -> Iterator[Finding]:
    if _dict(data.get("zero_optimization")).get("reduce_bucket_size") == 0 and not ctx.target.is_legacy:
        yield Finding("zero_optimization.reduce_bucket_size", "error", "invalid-value",
                      "reduce_bucket_size 0 was accepted by DeepSpeed 0.18; 0.19 requires it to be > 0",
                      "remove it (default 5e8) or give a positive size")


def bucket_sizes(data: dict, ctx: LintContext) -> Iterator[Finding]:
    """ZeRO-1/2 buckets far from what measured best (dsx.buckets): larger than DeepSpeed's default, or so small that
    a model's gradients go in many small pieces (a model no larger than the bucket is fine: one bucket holds it)."""
    zero = _dict(data.get("zero_optimization"))
    if zero_stage(data, ctx) not in (1, 2):
        return
    for key in ("reduce_bucket_size", "allgather_bucket_size"):
        size = zero.get(key)
        if isinstance(size, bool) or not isinstance(size, (int, float)) or size <= 0:
            continue
        if size > DEEPSPEED_DEFAULT:
            yield Finding(f"zero_optimization.{key}", "warning", "bucket-size",
                          f"{size:,.0f} elements, above DeepSpeed's default {DEEPSPEED_DEFAULT:,}: measured no faster "
                          f"and with more memory reserved ({MEASURED_LARGE})",
                          f"remove it or use {DEEPSPEED_DEFAULT:,}")
        elif size < SMALL and (ctx.model_params is None or size < ctx.model_params):
            yield Finding(f"zero_optimization.{key}", "warning", "bucket-size",
                          f"{size:,.0f} elements: below {SMALL:,} a model's gradients are reduced in many small "
                          f"pieces, measured slower ({MEASURED_SMALL})",
                          f"use min({DEEPSPEED_DEFAULT:,}, the model's parameters), as dsx writes")


def negative_clipping(data: dict, ctx: LintContext) -> Iterator[Finding]:
    clip = data.get("gradient_clipping")
    if isinstance(clip, (int, float)) and not isinstance(clip, bool) and clip < 0:
        yield Finding("gradient_clipping", "error", "negative-clipping",
                      f"gradient_clipping {clip} is accepted and means no clipping",
                      "use 0 to disable clipping, or a positive norm")


# ---------------------------------------------------------------- pipeline, elasticity


def pipeline_rules(data: dict, ctx: LintContext) -> Iterator[Finding]:
    pipeline = data.get("pipeline")
    if not isinstance(pipeline, dict):
        return
    stage = zero_stage(data, ctx)
    if stage and stage >= 2:
        yield Finding("pipeline", "error", "pipeline-with-zero",
                      f"pipeline parallelism does not work with ZeRO stage {stage} "
                      "(deepspeed.initialize raises for a PipelineModule)",
                      "use ZeRO stage 0 or 1 with pipeline parallelism")
    for key in ("stages", "partition", "seed_layers"):
        if key in pipeline:
            yield Finding(f"pipeline.{key}", "warning", "dead-key",
                          f"pipeline.{key} is never read: deepspeed.pipe.PipelineModule's arguments decide it",
                          "pass it to PipelineModule(...) and remove it here")
    if data.get("managed_gradient_accumulation") is False:
        yield Finding("managed_gradient_accumulation", "error", "pipeline-unmanaged-accumulation",
                      "pipeline parallelism needs managed_gradient_accumulation (deepspeed.initialize asserts)",
                      "remove managed_gradient_accumulation")


def elasticity_batch(data: dict, ctx: LintContext) -> Iterator[Finding]:
    elastic = _dict(data.get("elasticity"))
    if _is_true(elastic.get("enabled")) and not _is_true(elastic.get("ignore_non_elastic_batch_info")):
        present = [k for k in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
                   if k in data]
        if present:
            yield Finding("elasticity", "error", "elastic-batch-conflict",
                          f"elasticity computes the batch sizes; {', '.join(present)} conflict with it "
                          "(DeepSpeed 0.18 raises ElasticityConfigError)",
                          "remove the batch keys or set elasticity.ignore_non_elastic_batch_info")


RULES = [
    stage3_only_keys, offload_needs_zero, nvme_offload, zero3_reduce_scatter, compute_grad_norm_off,
    zenflow_needs_offload, hpz_world_size, onebit_with_zero, optimizer_needs_whitelist, lamb_needs_dynamic_loss_scale,
    adam_means_adamw, scheduler_without_optimizer, hf_zero_warmup, precision, version_dependent_defaults,
    batch_arithmetic, sequence_parallel, zero_bucket_size, bucket_sizes, negative_clipping, pipeline_rules,
    activation_checkpointing, deprecated_keys, dead_keys, datastates, elasticity_batch, comms_logger_off,
    autotuning_exits, hf_fixed_train_batch, zero_off_keys, aio_unused,
]
