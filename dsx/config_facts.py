"""What a resolved DeepSpeed config means, in the words dsx prints: precision, ZeRO stage, offload, the label.

The ground floor for run, sweep, estimate and report: they all read these facts off a config dict (or a row's
`ds_config`), so they must agree on them. Nothing here imports torch or deepspeed.
"""

from __future__ import annotations

from typing import Any

ONEBIT = {"onebitadam": "1-bit Adam", "zerooneadam": "0/1 Adam", "onebitlamb": "1-bit LAMB"}
"""DeepSpeed's 1-bit optimizers (optimizer.type, lower case) and their names: 0.18 only, ZeRO-0, compressed steps."""

CONFIG_FLAGS = ("zero", "offload", "offload_params", "nvme_path", "precision", "micro_batch", "grad_accum",
                "optimizer", "lr", "onebit")
"""The dsx.generate.ConfigRequest fields that `dsx run`, `dsx estimate` and `dsx sweep` take as flags."""


def config_flags(values: dict[str, Any]) -> dict[str, Any]:
    """The config flags out of a command's keyword arguments or a sweep trial's values (None where not given)."""
    return {key: values.get(key) for key in CONFIG_FLAGS}


PRECISIONS = ("bf16", "fp16", "fp32", "bf16-autocast")
"""The training precisions dsx writes and runs (`--precision`)."""

AUTOCAST = "bf16-autocast"
"""fp32 weights, gradients and optimizer, the engine's forward under torch.autocast(bfloat16) (DeepSpeed's
`torch_autocast` section): bf16 matrix products as `bf16`'s, but no per-tensor overflow check (at ZeRO 1-3 the
gradient norm catches an overflow) and fp32 layer norms and residual sums, as a plain PyTorch AMP script trains."""

AUTOCAST_WITH_PIPELINE = ("--precision bf16-autocast with pipeline stages: not tried by dsx (its stages would pass the "
                          "fp32 residual stream between GPUs); use bf16")

AUTOCAST_AT_ZERO0 = ("bf16-autocast at ZeRO-0: DeepSpeed steps even when a gradient overflowed (ZeRO 1-3 skip such a "
                     "step: their gradient norm catches it)")
"""The note of a run or estimate in bf16-autocast without ZeRO (DeepSpeed 0.19.8's engine, stage_1_and_2.py, stage3.py)."""

_BF16_NAMES = ("torch.bfloat16", "bf16", "bfloat16")  # DeepSpeed's DtypeEnum spellings of bfloat16


def precision_of(config: dict) -> str:
    """'bf16', 'fp16', 'fp32' or 'bf16-autocast' (the legacy `bfloat16` section counts as bf16, as DeepSpeed reads
    it; fp32 weights with `torch_autocast` enabled in bfloat16 are AUTOCAST)."""
    if (config.get("bf16") or {}).get("enabled") is True or (config.get("bfloat16") or {}).get("enabled") is True:
        return "bf16"
    if (config.get("fp16") or {}).get("enabled") is True:
        return "fp16"
    autocast = config.get("torch_autocast") or {}
    if autocast.get("enabled") is True and autocast.get("dtype") in _BF16_NAMES:
        return AUTOCAST
    return "fp32"


def weights_precision(precision: str) -> str:
    """The precision the weights, gradients and optimizer states are held in: fp32 under AUTOCAST."""
    return "fp32" if precision == AUTOCAST else precision


def compute_precision(precision: str) -> str:
    """The precision the matrix products run in (peak FLOP/s, activations' dtype): bf16 under AUTOCAST."""
    return "bf16" if precision == AUTOCAST else precision


def checks_overflow(config: dict) -> bool:
    """Whether DeepSpeed checks the gradients for overflow before each optimizer step: always with fp16 (its loss
    scaler), with bf16 unless `bf16.check_grad_overflow` is false (DeepSpeed 0.19's default is true)."""
    precision = precision_of(config)
    if precision == "fp16":
        return True
    return precision == "bf16" and (config.get("bf16") or config.get("bfloat16") or {}).get(
        "check_grad_overflow", True) is not False


def ulysses_group(config: dict) -> int:
    """The Ulysses sequence-parallel group size a config runs with (sequence_parallel_size; 1 without): each rank of
    a group holds 1/N of the sequence."""
    size = config.get("sequence_parallel_size")
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 1 else 1


def zero_stage(config: dict) -> int:
    return int((config.get("zero_optimization") or {}).get("stage", 0) or 0)


def offload_devices(config: dict) -> tuple[str, str]:
    """(optimizer device, parameter device), each none | cpu | nvme."""
    zero = config.get("zero_optimization") or {}
    opt, param = ((zero.get(key) or {}).get("device") or "none" for key in ("offload_optimizer", "offload_param"))
    return opt, param


def offload_ratio(config: dict) -> float:
    """zero_optimization.offload_optimizer.ratio: the share of the optimizer to offload (DeepSpeed's default 1;
    below 1 at ZeRO-3 only: dsx.offload)."""
    value = ((config.get("zero_optimization") or {}).get("offload_optimizer") or {}).get("ratio")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 1.0


def offload_text(opt: str, param: str, ratio: float = 1.0) -> str:
    """'none', 'cpu', 'cpu:0.7' (partial offload), 'cpu+params', 'cpu, params nvme': the report's offload column."""
    if opt != "none" and ratio < 1.0:
        opt = f"{opt}:{ratio:g}"
    if opt == "none" and param == "none":
        return "none"
    if param == "none":
        return opt
    return f"{opt}+params" if opt == param else f"{opt}, params {param}"


def configuration_label(*, zero: int, offload: str, offload_params: str, precision: str, act_ckpt: bool,
                        compile: bool, extra: list[str] | tuple[str, ...] = (), offload_ratio: float = 1.0) -> str:
    """The label sweep and report print for a configuration: 'z3 off=cpu params=cpu bf16 ckpt compile' + extra
    ('off=cpu:0.7' with a partial offload ratio)."""
    parts = [f"z{zero}"]
    if offload != "none":
        parts.append(f"off={offload}" + (f":{offload_ratio:g}" if offload_ratio < 1.0 else ""))
    if offload_params != "none":
        parts.append(f"params={offload_params}")
    parts.append(precision)
    if act_ckpt:
        parts.append("ckpt")
    if compile:
        parts.append("compile")
    return " ".join([*parts, *extra])
