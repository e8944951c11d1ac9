"""`dsx config`: turn a few choices (ZeRO stage, offload, precision, batch, optimizer...) into a DeepSpeed
config that validates clean for the target version and means the same under DeepSpeed 0.18 and 0.19.

Flow: request -> raw dict -> `--set` overrides -> section models -> emitted JSON (only what matters) -> lint.
A config dsx would warn about is never emitted.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from dsx.config_facts import AUTOCAST, AUTOCAST_WITH_PIPELINE

from dsx.schema.batch import BatchError, solve_batch
from dsx.versions import Version


class ConfigRequestError(ValueError):
    """The requested combination cannot make a working config; the message says why and what to do."""


@dataclass(frozen=True)
class ConfigRequest:
    zero: int = 2
    offload: str = "none"
    offload_params: str = "none"
    nvme_path: str | None = None
    precision: str = "bf16"
    micro_batch: int | None = None
    grad_accum: int | None = None
    world_size: int = 1
    train_batch: int | None = None
    optimizer: str = "AdamW"
    lr: float = 1e-4
    weight_decay: float = 0.0
    scheduler: str = "none"
    warmup_steps: int = 100
    total_steps: int | None = None
    act_ckpt: str = "off"
    pipeline_stages: int | None = None
    sparse_attention: str | None = None
    onebit: str | None = None
    hf_auto: bool = False
    gradient_clipping: float = 1.0
    sets: tuple[tuple[str, Any], ...] = field(default_factory=tuple)


ONEBIT_TYPES = {"adam": "OneBitAdam", "zero-one-adam": "ZeroOneAdam", "lamb": "OneBitLamb"}
ONEBIT_PARAMS = {
    # freeze_step: warm-up steps of uncompressed Adam before 1-bit compression starts (the papers use ~15-25%
    # of training; 1000 is a small-run value). 0/1 Adam has no freeze_step: it freezes the variance instead.
    "OneBitAdam": {"freeze_step": 1000, "comm_backend_name": "nccl"},
    "ZeroOneAdam": {"var_freeze_step": 1000, "var_update_scaler": 16, "local_step_scaler": 1000,
                    "local_step_clipper": 16, "comm_backend_name": "nccl"},
    "OneBitLamb": {"freeze_step": 1000, "comm_backend_name": "nccl"},
}
SCHEDULERS = ("none", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest")


def parse_set(text: str) -> tuple[str, Any]:
    """`KEY=VALUE` with a dotted key; VALUE is JSON when it parses as JSON, else a plain string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigRequestError(f"--set expects KEY=VALUE with a dotted key, got '{text}'")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


def apply_sets(config: dict, texts: tuple[str, ...] | list[str]) -> None:
    """Apply `KEY=VALUE` texts (dotted keys) to a config dict in place; ConfigRequestError names a bad one."""
    for text in texts:
        _set_path(config, *parse_set(text))


def _set_path(config: dict, dotted: str, value: Any) -> None:
    node = config
    parts = dotted.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigRequestError(f"--set {dotted}: '{part}' holds {child!r}, not a section")
        node = child
    node[parts[-1]] = value


def _check(request: ConfigRequest, target: Version) -> None:
    if request.zero not in (0, 1, 2, 3):
        raise ConfigRequestError(f"--zero must be 0, 1, 2 or 3, got {request.zero}")
    if request.offload_params != "none" and request.zero != 3:
        raise ConfigRequestError(f"--offload-params needs --zero 3 (stage {request.zero} ignores parameter offload)")
    if request.offload != "none" and request.zero == 0:
        raise ConfigRequestError("--offload needs ZeRO: use --zero 1, 2 or 3")
    if request.offload == "nvme" and request.zero != 3:
        raise ConfigRequestError(f"--offload nvme needs --zero 3 (at stage {request.zero} DeepSpeed silently "
                                 "offloads to CPU instead)")
    if "nvme" in (request.offload, request.offload_params) and not request.nvme_path:
        raise ConfigRequestError("NVMe offload needs --nvme-path DIR (a directory on a local NVMe drive)")
    if request.onebit or request.sparse_attention:
        feature = "1-bit optimizers" if request.onebit else "sparse_attention"
        if not target.is_legacy:
            raise ConfigRequestError(
                f"{feature} were removed in DeepSpeed 0.19 (target {target}): pass --target-deepspeed 0.18.9"
                + ("; for communication compression on 0.19 use ZeRO++ (--set zero_optimization."
                   "zero_quantized_gradients=true with --zero 3)" if request.onebit else
                   "; or train with it on 0.19: dsx run --sparse-attention MODE applies the layout itself "
                   "(FlexAttention), without the block in DeepSpeed's config")
            )
    if request.onebit and request.zero != 0:
        raise ConfigRequestError("1-bit optimizers do not work with ZeRO: use --zero 0")
    if request.onebit and request.precision != "fp16":
        raise ConfigRequestError("1-bit optimizers are only verified with fp16: use --precision fp16")
    if request.precision == AUTOCAST:
        if request.pipeline_stages is not None:
            raise ConfigRequestError(AUTOCAST_WITH_PIPELINE)
        if request.hf_auto:
            raise ConfigRequestError("--precision bf16-autocast with --hf-auto: the Trainer's --bf16 decides the "
                                     "precision there; drop one")
    if request.pipeline_stages is not None:
        if request.pipeline_stages < 1:
            raise ConfigRequestError("--pipeline-stages must be at least 1")
        if request.zero > 1:
            raise ConfigRequestError(f"pipeline parallelism works with ZeRO 0 or 1, not {request.zero}")
        if request.world_size % request.pipeline_stages:
            raise ConfigRequestError(f"--world-size {request.world_size} is not divisible by --pipeline-stages "
                                     f"{request.pipeline_stages}")
    if request.hf_auto and request.act_ckpt not in ("off", "none"):
        raise ConfigRequestError("--act-ckpt writes DeepSpeed's activation_checkpointing block, which the "
                                 "transformers Trainer never applies: use TrainingArguments(gradient_checkpointing="
                                 "True) with --hf-auto")
    if request.scheduler not in SCHEDULERS:
        raise ConfigRequestError(f"--scheduler must be one of {', '.join(SCHEDULERS)}, got '{request.scheduler}'")
    if request.scheduler in ("WarmupDecayLR", "WarmupCosineLR") and not request.total_steps:
        raise ConfigRequestError(f"--scheduler {request.scheduler} needs --total-steps N")


def build_raw(request: ConfigRequest, target: Version) -> dict:
    """The config as a plain dict, before `--set` and emission."""
    _check(request, target)
    data_parallel = request.world_size // (request.pipeline_stages or 1)
    try:
        batch = solve_batch(data_parallel, request.train_batch, request.micro_batch, request.grad_accum)
    except BatchError as exc:
        raise ConfigRequestError(str(exc)) from None
    config: dict[str, Any] = {
        "train_batch_size": batch.train_batch_size,
        "train_micro_batch_size_per_gpu": batch.train_micro_batch_size_per_gpu,
        "gradient_accumulation_steps": batch.gradient_accumulation_steps,
    }
    if request.precision == "bf16":
        config["bf16"] = {"enabled": True, "check_grad_overflow": True}
    elif request.precision == "fp16":
        config["fp16"] = {"enabled": True}
    elif request.precision in ("fp32", AUTOCAST):
        config["bf16"] = {"enabled": False}
        config["fp16"] = {"enabled": False}
        if request.precision == AUTOCAST:
            config["torch_autocast"] = {"enabled": True, "dtype": "bfloat16"}
    else:
        raise ConfigRequestError(f"--precision must be bf16, fp16, fp32 or bf16-autocast, got '{request.precision}'")

    zero: dict[str, Any] = {"stage": request.zero}
    for key, device in (("offload_optimizer", request.offload), ("offload_param", request.offload_params)):
        if device != "none":
            zero[key] = {"device": device, "pin_memory": True}
            if device == "nvme":
                zero[key]["nvme_path"] = request.nvme_path
    config["zero_optimization"] = zero

    if request.onebit:
        kind = ONEBIT_TYPES.get(request.onebit)
        if kind is None:
            raise ConfigRequestError(f"--onebit must be one of {', '.join(ONEBIT_TYPES)}, got '{request.onebit}'")
        config["optimizer"] = {"type": kind, "params": {"lr": request.lr, **ONEBIT_PARAMS[kind]}}
    else:
        params: dict[str, Any] = {"lr": request.lr}
        if request.weight_decay:
            params["weight_decay"] = request.weight_decay
        config["optimizer"] = {"type": request.optimizer, "params": params}

    if request.scheduler != "none":
        config["scheduler"] = {"type": request.scheduler, "params": _scheduler_params(request)}
    config["gradient_clipping"] = request.gradient_clipping

    if request.act_ckpt == "on":
        config["activation_checkpointing"] = {"partition_activations": True}
    elif request.act_ckpt == "cpu":
        config["activation_checkpointing"] = {"partition_activations": True, "cpu_checkpointing": True}
    elif request.act_ckpt not in ("off", "none"):
        raise ConfigRequestError(f"--act-ckpt must be off, on or cpu, got '{request.act_ckpt}'")
    if request.pipeline_stages is not None:
        config["pipeline"] = {"pipe_partitioned": True, "grad_partitioned": True,
                              "activation_checkpoint_interval": 0}
    if request.sparse_attention:
        config["sparse_attention"] = {"mode": request.sparse_attention}
    for key, value in request.sets:
        _set_path(config, key, value)
    return config


def _scheduler_params(request: ConfigRequest) -> dict[str, Any]:
    if request.scheduler == "WarmupLR":
        return {"warmup_min_lr": 0.0, "warmup_max_lr": request.lr, "warmup_num_steps": request.warmup_steps,
                "warmup_type": "linear"}
    if request.scheduler == "WarmupDecayLR":
        return {"warmup_min_lr": 0.0, "warmup_max_lr": request.lr, "warmup_num_steps": request.warmup_steps,
                "total_num_steps": request.total_steps, "warmup_type": "linear"}
    if request.scheduler == "WarmupCosineLR":
        return {"warmup_num_steps": request.warmup_steps, "total_num_steps": request.total_steps,
                "warmup_type": "linear"}
    if request.scheduler == "OneCycle":
        return {"cycle_min_lr": request.lr / 10, "cycle_max_lr": request.lr,
                "cycle_first_step_size": request.warmup_steps}
    return {"lr_range_test_min_lr": request.lr / 100, "lr_range_test_step_size": request.warmup_steps}


def _apply_hf_auto(config: dict, target: Version) -> dict:
    """Write "auto" exactly where the Trainer fills values, keeping the choices it cannot make (stage, offload).

    One exception: for DeepSpeed 0.19 the warm-up length stays explicit, because the Trainer fills 0 when it has
    no warm-up and 0.19 rejects warmup_num_steps 0; TrainingArguments(warmup_steps=...) must then match it.
    """
    from dsx.lint.autos import TRAINER_FILLED

    out = copy.deepcopy(config)
    stage3 = out.get("zero_optimization", {}).get("stage") == 3
    for path in TRAINER_FILLED:
        if path.startswith("zero_optimization.stage3_") and not stage3:
            continue
        section, _, rest = path.partition(".")
        if not rest:
            out[section] = "auto"
        elif section in ("optimizer", "scheduler"):
            if section in out:
                params = out[section].setdefault("params", {})
                key = rest.partition(".")[2]
                if section == "scheduler" and out[section]["type"] not in ("WarmupLR", "WarmupDecayLR"):
                    continue  # the Trainer only fills WarmupLR/WarmupDecayLR params
                if section == "scheduler" and key == "total_num_steps" and out[section]["type"] != "WarmupDecayLR":
                    continue
                if key == "warmup_num_steps" and not target.is_legacy:
                    continue
                params[key] = "auto"
        else:
            out.setdefault(section, {})[rest] = "auto"
    # let the Trainer's --bf16/--fp16 decide: both blocks present, both "auto"
    for key in ("fp16", "bf16"):
        out[key] = {"enabled": "auto"} | {k: v for k, v in out.get(key, {}).items() if k != "enabled"}
        if key == "bf16":
            out[key].setdefault("check_grad_overflow", True)
    return _order_like(out, ORDER)


ORDER = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "bf16", "fp16",
         "zero_optimization", "optimizer", "scheduler", "gradient_clipping")


def _order_like(config: dict, order: tuple[str, ...]) -> dict:
    ranked = {k: config[k] for k in order if k in config}
    return ranked | {k: v for k, v in config.items() if k not in ranked}


def emit(config: dict) -> dict:
    """The emitted form of a validated raw config: non-default keys plus what a reader must always see."""
    from dsx.schema.config import SECTIONS, TopLevelConfig, section_adapter

    dump = {"mode": "json", "by_alias": True, "exclude_defaults": True, "exclude_none": True}
    top = TopLevelConfig.model_validate({k: v for k, v in config.items() if k not in SECTIONS})
    out = top.model_dump(**dump)
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        if key in config:
            out[key] = config[key]
    for key in SECTIONS:
        if key not in config:
            continue
        adapter = section_adapter(key, config[key])
        section = adapter.validate_python(config[key])
        block = adapter.dump_python(section, **dump) if section is not None else None
        if key == "zero_optimization":
            block = {"stage": section.stage} | {k: v for k, v in block.items() if k != "stage"}
        elif key in ("bf16", "fp16"):
            block = {"enabled": section.enabled} | {k: v for k, v in block.items() if k != "enabled"}
        elif key == "optimizer" and "lr" in config[key].get("params", {}):
            params = block.get("params", {})
            block["params"] = {"lr": config[key]["params"]["lr"]} | {k: v for k, v in params.items() if k != "lr"}
        elif key == "pipeline":  # small block: written whole, less the keys DeepSpeed never reads
            block = adapter.dump_python(section, mode="json", by_alias=True, exclude_none=True,
                                        exclude={"stages", "partition", "seed_layers"})
        elif key == "sparse_attention":
            block = {"mode": section.mode} | block
        out[key] = block
    return _order_like(out, ORDER)


def generate(request: ConfigRequest, target: Version) -> dict:
    """The emitted config for `request`; raises ConfigRequestError with every finding if it does not lint clean.
    A warning about a key the request sets explicitly (`--set KEY=VALUE`) is the user's choice, not dsx's: it does
    not stop the config (those who lint the result see it: `dsx run` prints it as a note)."""
    from dsx.lint.engine import lint

    raw = build_raw(request, target)
    try:
        emitted = emit(raw)
    except ValidationError:
        emitted = None
    chosen = {key for key, _ in request.sets}
    findings = [f for f in lint(emitted if emitted is not None else raw, target=target,
                                world_size=request.world_size // (request.pipeline_stages or 1))
                if not (f.severity == "warning" and f.path in chosen)]
    if findings:
        lines = "\n".join("  " + f.render() for f in findings)
        raise ConfigRequestError(f"the requested config would not be clean for DeepSpeed {target}:\n{lines}")
    if request.hf_auto:
        emitted = _apply_hf_auto(emitted, target)
        findings = lint(emitted, target=target, hf=True)
        if findings:
            lines = "\n".join("  " + f.render() for f in findings)
            raise ConfigRequestError(f"the --hf-auto config would not be clean:\n{lines}")
    return emitted
