"""Optimizer types as DeepSpeed resolves them, for the models and the linter.

Which `type` names DeepSpeed builds (its own, case-insensitive, or an exact torch.optim class), the kind and the
backend class each resolves to, the params each backend takes, the types 0.19 removed, the ZeRO-tested kinds, and
the param keys people get wrong. Plain data and two functions: no pydantic model here.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, get_args

from dsx.schema.base import version_gate

# Names DeepSpeed lower-cases and handles itself (runtime/config.py DEEPSPEED_OPTIMIZERS; the 1-bit three are
# 0.18.9 only). Everything else must be an exact torch.optim attribute name.
DEEPSPEED_OPTIMIZER_NAMES = (
    "adam",
    "adamw",
    "lamb",
    "lion",
    "adagrad",
    "muon",
    "muadam",
    "muadamw",
    "musgd",
    "onebitadam",
    "zerooneadam",
    "onebitlamb",
)

# torch.optim classes reachable through `type` (exact case). Adam, AdamW, Adagrad and Muon are not here: their
# lower-cased names are DeepSpeed names, so DeepSpeed builds its own optimizer for them.
TorchOptimizerName = Literal[
    "SGD", "RMSprop", "Adamax", "NAdam", "RAdam", "ASGD", "Adadelta", "Rprop", "SparseAdam", "LBFGS", "Adafactor"
]
TORCH_OPTIMIZER_NAMES = get_args(TorchOptimizerName)

# Kinds (optimizer_kind values) whose optimizer class is in DeepSpeed 0.19.8's ZERO_SUPPORTED_OPTIMIZERS, whatever
# the backend (fused, CPU offload or torch_adam). Any other kind under ZeRO needs zero_allow_untested_optimizer.
ZERO_SUPPORTED_OPTIMIZERS = ("adam", "adamw", "adagrad", "lion", "muon")

# Optimizer types removed in DeepSpeed 0.19 (0.19.8 accepts the config, then initialize fails with
# "OneBitAdam is not a supported DeepSpeed Optimizer"). Keyed by optimizer_kind; the linter reads this.
_ONEBIT_INSTEAD = "ZeRO++ quantized gradients (zero_quantized_gradients) for communication compression, with Adam/AdamW"
REMOVED_OPTIMIZERS = {
    "onebitadam": version_gate(removed_in="0.19.0", instead=_ONEBIT_INSTEAD),
    "zerooneadam": version_gate(removed_in="0.19.0", instead=_ONEBIT_INSTEAD),
    "onebitlamb": version_gate(removed_in="0.19.0", instead=_ONEBIT_INSTEAD),
}

# Param keys people put in `optimizer.params` that no DeepSpeed optimizer takes, with the fix (for the linter).
KNOWN_WRONG_PARAMS = {
    "max_grad_norm": "remove it and set the top-level `gradient_clipping` instead "
    "(DeepSpeed raises ValueError at initialize when max_grad_norm is in optimizer.params)",
    "adamw_mode": "use `adam_w_mode` (DeepSpeed passes DeepSpeedCPUAdam's adamw_mode itself)",
    "beta1": "use `betas: [beta1, beta2]`",
    "beta2": "use `betas: [beta1, beta2]`",
    "epsilon": "use `eps`",
    "learning_rate": "use `lr`",
    "freeze_step": "only OneBitAdam and OneBitLamb take freeze_step; ZeroOneAdam takes var_freeze_step",
}

# The params each optimizer class that DeepSpeed 0.19.8 builds takes effect with (popped keys included). A params
# model accepts the union over its type's backends; the linter picks the backend with optimizer_backend().
_ADAM_COMMON = frozenset({"lr", "betas", "eps", "weight_decay", "amsgrad", "torch_adam", "adam_w_mode"})
_TORCH_ADAM_ONLY = frozenset({"foreach", "maximize", "capturable", "differentiable", "fused"})
BACKEND_PARAMS = {
    "FusedAdam": _ADAM_COMMON | {"bias_correction", "set_grad_none"},
    "DeepSpeedCPUAdam": _ADAM_COMMON | {"bias_correction", "fp32_optimizer_states"},
    "torch.optim.AdamW": _ADAM_COMMON | _TORCH_ADAM_ONLY,
    "torch.optim.Adam": _ADAM_COMMON | _TORCH_ADAM_ONLY | {"decoupled_weight_decay"},
    "FusedLamb": frozenset(
        {
            "lr",
            "bias_correction",
            "betas",
            "eps",
            "eps_inside_sqrt",
            "weight_decay",
            "max_coeff",
            "min_coeff",
            "amsgrad",
        }
    ),
    "FusedLion": frozenset({"lr", "betas", "weight_decay", "set_grad_none"}),
    "DeepSpeedCPULion": frozenset({"lr", "betas", "weight_decay", "fp32_optimizer_states"}),
    "torch.optim.Adagrad": frozenset(
        {
            "lr",
            "lr_decay",
            "weight_decay",
            "initial_accumulator_value",
            "eps",
            "foreach",
            "maximize",
            "differentiable",
            "fused",
        }
    ),
    "DeepSpeedCPUAdagrad": frozenset({"lr", "eps", "weight_decay", "amsgrad", "fp32_optimizer_states"}),
    "MuonWithAuxAdam": frozenset(
        {
            "lr",
            "muon_lr",
            "adam_lr",
            "momentum",
            "weight_decay",
            "betas",
            "eps",
            "ns_method",
            "per_head_muon",
            "torch_adam",
            "adam_w_mode",
            "fp32_optimizer_states",
            "foreach",
        }
    ),
}


def optimizer_kind(type_name: Any) -> Optional[str]:
    """Canonical name of an `optimizer.type` as DeepSpeed resolves it, or None if DeepSpeed cannot build it.

    DeepSpeed names are case-insensitive ("Adam", "ADAM" -> "adam"); torch.optim names are exact ("SGD" ->
    "torch:SGD", "sgd" -> None).
    """
    if not isinstance(type_name, str):
        return None
    if type_name.lower() in DEEPSPEED_OPTIMIZER_NAMES:
        return type_name.lower()
    if type_name in TORCH_OPTIMIZER_NAMES:
        return f"torch:{type_name}"
    return None


def optimizer_backend(kind: str, *, offload: bool, torch_adam: bool = False, adam_w_mode: bool = True) -> str:
    """The class DeepSpeed 0.19.8 builds for a kind (a BACKEND_PARAMS key where dsx models the params).

    `offload`: zero_optimization.offload_optimizer.device is cpu or nvme (ZeRO 1-3). With ZenFlow DeepSpeed builds
    ZenFlowCPUAdam instead of DeepSpeedCPUAdam; it takes the same params.
    """
    if kind in ("adam", "adamw"):
        if torch_adam:
            return "torch.optim.AdamW" if (kind == "adamw" or adam_w_mode) else "torch.optim.Adam"
        return "DeepSpeedCPUAdam" if offload else "FusedAdam"
    if kind == "lion":
        return "DeepSpeedCPULion" if offload else "FusedLion"
    if kind == "adagrad":
        return "DeepSpeedCPUAdagrad" if offload else "torch.optim.Adagrad"
    if kind == "lamb":
        return "FusedLamb"
    if kind == "muon":
        return "MuonWithAuxAdam"
    if kind.startswith("torch:"):
        return "torch.optim." + kind[len("torch:") :]
    return kind
