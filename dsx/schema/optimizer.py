"""The `optimizer` block: which optimizer DeepSpeed builds, and the keyword arguments it is built with.

DeepSpeed reads this block with dict.get (IGNORED regime): a misspelled `type`/`params` key silently means no
optimizer or constructor defaults, and `params` goes to the constructor as **kwargs, so a wrong param fails only
inside deepspeed.initialize (or, for Muon, is silently ignored). dsx checks each type's params against its own model.

Validate a block on its own with `pydantic.TypeAdapter(OptimizerConfig).validate_python(block)`.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Optional, Union, get_args

from pydantic import BeforeValidator, Discriminator, Tag, model_validator

from dsx.schema.base import Bool, Field, Float, Int, Section, version_gate

__all__ = [
    "OptimizerConfig",
    "AdamOptimizer",
    "AdamWOptimizer",
    "LambOptimizer",
    "LionOptimizer",
    "AdagradOptimizer",
    "MuonOptimizer",
    "OneBitAdamOptimizer",
    "ZeroOneAdamOptimizer",
    "OneBitLambOptimizer",
    "MupOptimizer",
    "TorchOptimizer",
    "AdamParams",
    "AdamWParams",
    "LambParams",
    "LionParams",
    "AdagradParams",
    "MuonParams",
    "OneBitAdamParams",
    "ZeroOneAdamParams",
    "OneBitLambParams",
    "optimizer_kind",
    "optimizer_backend",
    "DEEPSPEED_OPTIMIZER_NAMES",
    "TORCH_OPTIMIZER_NAMES",
    "ZERO_SUPPORTED_OPTIMIZERS",
    "REMOVED_OPTIMIZERS",
    "KNOWN_WRONG_PARAMS",
    "BACKEND_PARAMS",
]

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


def _any_case(*names: str) -> str:
    """A JSON-Schema-portable pattern matching the names in any letter case ("adam" -> "^([Aa][Dd][Aa][Mm])$")."""
    spelled = ("".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in name) for name in names)
    return f"^({'|'.join(spelled)})$"


def _tag(kind: Optional[str]) -> Optional[str]:
    """Which OptimizerConfig variant validates a kind."""
    if kind is None:
        return None
    if kind.startswith("torch:"):
        return "torch"
    if kind in ("muadam", "muadamw", "musgd"):
        return "mup"
    return kind


# --------------------------------------------------------------------------------------------------------------
# Shared value types

LR = Annotated[Float, Field(ge=0)]
Beta = Annotated[Float, Field(ge=0, lt=1)]
Betas = tuple[Beta, Beta]
NonNegative = Annotated[Float, Field(ge=0)]


def _present(model: Section, keys) -> list[str]:
    """The given keys the user actually wrote (defaults do not count), in field order."""
    return [name for name in type(model).model_fields if name in keys and name in model.model_fields_set]


_DIFFERENTIABLE_MESSAGE = (
    "optimizer.params.differentiable: true cannot train under DeepSpeed: the engine's step updates leaf "
    "parameters in place, which a differentiable torch optimizer refuses (RuntimeError at the first step)"
)


# --------------------------------------------------------------------------------------------------------------
# Params models


class _AdamParamsBase(Section):
    """Params shared by `Adam` and `AdamW`. Backends: FusedAdam (GPU, no offload), DeepSpeedCPUAdam
    (offload_optimizer cpu/nvme), torch.optim.Adam/AdamW (`torch_adam: true`, with or without offload)."""

    lr: LR = 1e-3
    """Learning rate (all backends)."""
    betas: Betas = (0.9, 0.999)
    """Coefficients [beta1, beta2] of the running averages of the gradient and its square (all backends)."""
    eps: NonNegative = 1e-8
    """Term added to the denominator for numerical stability (all backends)."""
    weight_decay: Optional[NonNegative] = None
    """Weight decay. Unset: the backend's default, 0 for FusedAdam/DeepSpeedCPUAdam but 0.01 for torch AdamW."""
    bias_correction: Bool = True
    """Adam bias correction. FusedAdam and DeepSpeedCPUAdam only: torch Adam/AdamW reject it (no torch_adam)."""
    amsgrad: Bool = False
    """AMSGrad variant. true needs torch_adam: FusedAdam and DeepSpeedCPUAdam raise RuntimeError."""
    torch_adam: Bool = False
    """Build torch.optim.AdamW (or Adam) instead of FusedAdam/DeepSpeedCPUAdam, also under offload (then on the
    CPU); popped by DeepSpeed."""
    adam_w_mode: Bool = True
    """Decoupled (AdamW) weight decay; popped by DeepSpeed and passed to the backend as its AdamW switch."""
    fp32_optimizer_states: Optional[Bool] = None
    """DeepSpeedCPUAdam only (offload): keep moments in fp32; unset means true (false with bf16_optimizer_states).
    DeepSpeed 0.19 pops it for every backend; 0.18 passes it on, so FusedAdam and torch Adam reject it there."""
    set_grad_none: Bool = True
    """FusedAdam only (GPU, no offload, no torch_adam): zero_grad() sets gradients to None."""
    foreach: Optional[Bool] = None
    """torch_adam only: torch's foreach implementation (unset: torch chooses)."""
    maximize: Bool = False
    """torch_adam only: maximize the objective instead of minimizing it."""
    capturable: Bool = False
    """torch_adam only: CUDA-graph-safe torch Adam(W); needs GPU parameters (fails at the first step on offload)."""
    differentiable: Bool = False
    """torch_adam only, and must stay false: a differentiable step fails on DeepSpeed's in-place update."""
    fused: Optional[Bool] = None
    """torch_adam only: torch's fused Adam(W) kernel (unset: torch chooses)."""

    _torch_only: ClassVar[frozenset[str]] = _TORCH_ADAM_ONLY
    _not_with_torch_adam: ClassVar[frozenset[str]] = frozenset(
        {"bias_correction", "set_grad_none", "fp32_optimizer_states"}
    )

    @model_validator(mode="after")
    def _check_backend_keys(self):
        if self.torch_adam:
            wrong = _present(self, self._not_with_torch_adam)
            if wrong:
                raise ValueError(
                    f"optimizer.params {', '.join(wrong)}: not with torch_adam: true (torch.optim.Adam/AdamW "
                    "rejects bias_correction and set_grad_none with TypeError; fp32_optimizer_states only affects "
                    "DeepSpeedCPUAdam): remove them or set torch_adam: false"
                )
        else:
            wrong = _present(self, self._torch_only)
            if wrong:
                raise ValueError(
                    f"optimizer.params {', '.join(wrong)}: torch.optim.Adam/AdamW arguments, set torch_adam: true "
                    "or remove them (FusedAdam and DeepSpeedCPUAdam reject them with TypeError at initialize)"
                )
            if self.amsgrad:
                raise ValueError(
                    "optimizer.params.amsgrad: true needs torch_adam: true "
                    "(FusedAdam and DeepSpeedCPUAdam raise RuntimeError: they have no AMSGrad variant)"
                )
        if self.differentiable:
            raise ValueError(_DIFFERENTIABLE_MESSAGE)
        return self


class AdamParams(_AdamParamsBase):
    """Params of `type: Adam`. Note DeepSpeed's Adam is AdamW (decoupled weight decay) unless adam_w_mode is false."""

    adam_w_mode: Bool = True
    """true (default): DeepSpeed's "Adam" runs AdamW; false: classic Adam with L2 weight decay. Popped by DeepSpeed."""
    decoupled_weight_decay: Bool = False
    """torch.optim.Adam only (torch_adam: true with adam_w_mode: false; newer torch releases only)."""

    _torch_only: ClassVar[frozenset[str]] = _TORCH_ADAM_ONLY | {"decoupled_weight_decay"}

    @model_validator(mode="after")
    def _check_decoupled_weight_decay(self):
        if "decoupled_weight_decay" in self.model_fields_set and self.adam_w_mode:
            raise ValueError(
                "optimizer.params.decoupled_weight_decay is a torch.optim.Adam argument, but with adam_w_mode true "
                "DeepSpeed builds torch.optim.AdamW, which rejects it: set adam_w_mode: false or remove it"
            )
        return self


class AdamWParams(_AdamParamsBase):
    """Params of `type: AdamW` (always decoupled weight decay)."""

    adam_w_mode: Bool = True
    """Popped and ignored for AdamW (AdamW is always decoupled); false is an error here: use type Adam for that."""

    @model_validator(mode="after")
    def _check_adam_w_mode(self):
        if not self.adam_w_mode:
            raise ValueError(
                "optimizer.params.adam_w_mode: false is ignored for type AdamW (DeepSpeed always uses decoupled "
                "weight decay for AdamW): use type Adam with adam_w_mode: false for L2 weight decay"
            )
        return self


class LambParams(Section):
    """Params of `type: Lamb`: DeepSpeed's FusedLamb (CUDA only, also under offload)."""

    lr: LR = 1e-3
    """Learning rate."""
    bias_correction: Bool = True
    """Adam-style bias correction of the moments."""
    betas: Betas = (0.9, 0.999)
    """Coefficients [beta1, beta2] of the running averages of the gradient and its square."""
    eps: NonNegative = 1e-8
    """Term added to the denominator for numerical stability."""
    eps_inside_sqrt: Bool = False
    """Add eps inside the square root instead of after it."""
    weight_decay: NonNegative = 0.0
    """Weight decay."""
    max_coeff: Float = 10.0
    """Upper bound of the LAMB trust ratio."""
    min_coeff: Float = 0.01
    """Lower bound of the LAMB trust ratio."""
    amsgrad: Bool = False
    """Must stay false: FusedLamb raises RuntimeError for the AMSGrad variant."""

    @model_validator(mode="after")
    def _check_amsgrad(self):
        if self.amsgrad:
            raise ValueError("optimizer.params.amsgrad: true is not supported by Lamb (FusedLamb raises RuntimeError)")
        return self


class LionParams(Section):
    """Params of `type: Lion`: FusedLion (GPU, no offload) or DeepSpeedCPULion (offload_optimizer cpu/nvme)."""

    lr: LR = 1e-3
    """Learning rate (both backends)."""
    betas: Betas = (0.9, 0.999)
    """Coefficients [beta1, beta2] of the update interpolation and the momentum (both backends)."""
    weight_decay: NonNegative = 0.0
    """Decoupled weight decay (both backends)."""
    set_grad_none: Bool = True
    """FusedLion only (no offload): zero_grad() sets gradients to None; DeepSpeedCPULion rejects it (TypeError)."""
    fp32_optimizer_states: Bool = True
    """DeepSpeedCPULion only (offload): keep the momentum in fp32; FusedLion rejects it (TypeError)."""


class AdagradParams(Section):
    """Params of `type: Adagrad`: torch.optim.Adagrad (no offload) or DeepSpeedCPUAdagrad (offload cpu/nvme)."""

    lr: LR = 1e-2
    """Learning rate (both backends)."""
    eps: NonNegative = 1e-10
    """Term added to the denominator for numerical stability (both backends)."""
    weight_decay: NonNegative = 0.0
    """L2 weight decay (both backends)."""
    lr_decay: NonNegative = 0.0
    """torch Adagrad only (no offload): learning-rate decay; DeepSpeedCPUAdagrad rejects it (TypeError)."""
    initial_accumulator_value: NonNegative = 0.0
    """torch Adagrad only (no offload): initial value of the squared-gradient sum."""
    foreach: Optional[Bool] = None
    """torch Adagrad only (no offload): torch's foreach implementation (unset: torch chooses)."""
    maximize: Bool = False
    """torch Adagrad only (no offload): maximize the objective instead of minimizing it."""
    differentiable: Bool = False
    """torch Adagrad only (no offload), and must stay false: a differentiable step fails on DeepSpeed's update."""
    fused: Optional[Bool] = None
    """torch Adagrad only (no offload): torch's fused kernel (unset: torch chooses)."""
    amsgrad: Bool = False
    """DeepSpeedCPUAdagrad only (offload): accepted but never used, so true is an error here."""
    fp32_optimizer_states: Bool = True
    """DeepSpeedCPUAdagrad only (offload): keep the squared-gradient sum in fp32."""

    @model_validator(mode="after")
    def _check_flags(self):
        if self.amsgrad:
            raise ValueError(
                "optimizer.params.amsgrad: true has no effect for Adagrad (DeepSpeedCPUAdagrad ignores it, "
                "torch.optim.Adagrad rejects it): remove it"
            )
        if self.differentiable:
            raise ValueError(_DIFFERENTIABLE_MESSAGE)
        return self


_MUON_019 = version_gate(added_in="0.19.0")


class MuonParams(Section):
    """Params of `type: Muon` (MuonWithAuxAdam: Muon on 2-D weights, an auxiliary Adam on embeddings, lm_head,
    biases and norms). DeepSpeed reads only these keys and silently ignores any other, so dsx rejects others."""

    lr: Optional[LR] = None
    """Learning rate of both halves unless muon_lr/adam_lr are given (unset: 0.02 for Muon, 3e-4 for Adam)."""
    muon_lr: Optional[LR] = None
    """Learning rate of the Muon half; overrides lr."""
    adam_lr: Optional[LR] = None
    """Learning rate of the auxiliary Adam half; overrides lr."""
    momentum: Beta = 0.95
    """Muon momentum."""
    weight_decay: NonNegative = 0.0
    """Weight decay of both halves."""
    betas: Betas = (0.9, 0.95)
    """Auxiliary Adam coefficients [beta1, beta2]."""
    eps: NonNegative = 1e-10
    """Auxiliary Adam epsilon."""
    ns_method: Literal["gram", "standard"] = Field("gram", json_schema_extra=_MUON_019)
    """Newton-Schulz iteration: "gram" (about 2x faster) or "standard" (DeepSpeed asserts on other values)."""
    per_head_muon: Bool = Field(False, json_schema_extra=_MUON_019)
    """Orthogonalize attention projections per head; initialize raises if no projection could be tagged
    (the model needs a config with its head count)."""
    torch_adam: Bool = Field(False, json_schema_extra=_MUON_019)
    """Run the auxiliary Adam half as torch.optim.AdamW/Adam instead of FusedAdam/DeepSpeedCPUAdam."""
    adam_w_mode: Bool = Field(True, json_schema_extra=_MUON_019)
    """Decoupled weight decay in the auxiliary Adam half."""
    fp32_optimizer_states: Optional[Bool] = Field(None, json_schema_extra=_MUON_019)
    """DeepSpeedCPUAdam half only (offload): keep Adam moments in fp32 (unset: true, false with
    bf16_optimizer_states)."""
    foreach: Optional[Bool] = Field(None, json_schema_extra=_MUON_019)
    """torch_adam only: torch's foreach implementation for the auxiliary Adam half."""

    @model_validator(mode="after")
    def _check_adam_half_keys(self):
        if "foreach" in self.model_fields_set and not self.torch_adam:
            raise ValueError(
                "optimizer.params.foreach only applies with torch_adam: true (DeepSpeed ignores it otherwise)"
            )
        if "fp32_optimizer_states" in self.model_fields_set and self.torch_adam:
            raise ValueError(
                "optimizer.params.fp32_optimizer_states only affects the DeepSpeedCPUAdam half (optimizer offload), "
                "not with torch_adam: true (DeepSpeed ignores it then)"
            )
        return self


_ONEBIT_COMM_BACKENDS = Literal["nccl", "mpi", "hccl", "compressed"]


class _OneBitParamsBase(Section):
    """Params shared by the 1-bit optimizers (DeepSpeed <= 0.18; GPU only, no ZeRO, fp16 the verified mode)."""

    lr: LR = 1e-3
    """Learning rate."""
    bias_correction: Bool = True
    """Adam-style bias correction of the moments."""
    betas: Betas = (0.9, 0.999)
    """Coefficients [beta1, beta2] of the running averages of the gradient and its square."""
    eps: NonNegative = 1e-8
    """Term added to the denominator for numerical stability."""
    eps_inside_sqrt: Bool = False
    """Add eps inside the square root instead of after it."""
    weight_decay: NonNegative = 0.0
    """Weight decay."""
    amsgrad: Bool = False
    """Must stay false: the 1-bit optimizers raise RuntimeError for the AMSGrad variant."""
    cuda_aware: Bool = False
    """CUDA-aware MPI (only used with comm_backend_name "mpi")."""
    comm_backend_name: _ONEBIT_COMM_BACKENDS = "nccl"
    """Compressed all-reduce backend: nccl (needs cupy), mpi (mpi4py + cupy), hccl (Ascend), compressed (GPU op)."""

    @model_validator(mode="after")
    def _check_amsgrad(self):
        if self.amsgrad:
            raise ValueError("optimizer.params.amsgrad: true is not supported by the 1-bit optimizers (RuntimeError)")
        return self


class OneBitAdamParams(_OneBitParamsBase):
    """Params of `type: OneBitAdam` (DeepSpeed 0.18.9 runtime/fp16/onebit/adam.py OnebitAdam)."""

    freeze_step: Annotated[Int, Field(ge=0)] = 100000
    """Warm-up steps of uncompressed Adam before the variance is frozen and 1-bit compression starts."""


class ZeroOneAdamParams(_OneBitParamsBase):
    """Params of `type: ZeroOneAdam` (DeepSpeed 0.18.9 runtime/fp16/onebit/zoadam.py). No freeze_step here."""

    var_freeze_step: Annotated[Int, Field(ge=0)] = 100000
    """Step after which the variance is frozen for good."""
    var_update_scaler: Annotated[Int, Field(gt=0)] = 16
    """Growth factor of the interval between variance updates."""
    local_step_scaler: Annotated[Int, Field(gt=0)] = 32678
    """Growth interval of the number of local steps between synchronizations."""
    local_step_clipper: Annotated[Int, Field(gt=0)] = 16
    """Maximum interval between synchronizations (local steps)."""


class OneBitLambParams(_OneBitParamsBase):
    """Params of `type: OneBitLamb` (DeepSpeed 0.18.9 runtime/fp16/onebit/lamb.py OnebitLamb)."""

    freeze_step: Annotated[Int, Field(ge=0)] = 100000
    """Warm-up steps of uncompressed Lamb before 1-bit compression starts."""
    max_coeff: Float = 10.0
    """Upper bound of the trust ratio during warm-up."""
    min_coeff: Float = 0.01
    """Lower bound of the trust ratio during warm-up."""
    coeff_beta: Float = 0.9
    """Running-average coefficient of the trust ratio used after warm-up."""
    factor_max: Float = 4.0
    """Upper bound of the scaling factor of the frozen trust ratio."""
    factor_min: Float = 0.5
    """Lower bound of the scaling factor of the frozen trust ratio."""
    factor_threshold: Float = 0.1
    """Largest change of the scaling factor per step."""


# --------------------------------------------------------------------------------------------------------------
# Optimizer blocks, one per type


class _OptimizerBlock(Section):
    """Fields common to every optimizer block; each type narrows `type` to its own names."""

    type: str
    """Optimizer name; DeepSpeed names are case-insensitive, torch.optim names exact."""
    legacy_fusion: Bool = False
    """Legacy fused-Adam step of DeepSpeed's fp16 optimizer (FusedAdam with fp16, no ZeRO); no effect otherwise."""


class AdamOptimizer(_OptimizerBlock):
    """`type: Adam` (any case): FusedAdam, DeepSpeedCPUAdam under offload, or torch Adam/AdamW with torch_adam."""

    type: str = Field(pattern=_any_case("adam"))
    """Adam, in any letter case (DeepSpeed lower-cases it)."""
    params: Optional[AdamParams] = None
    """Constructor arguments (unset: the backend's defaults)."""


class AdamWOptimizer(_OptimizerBlock):
    """`type: AdamW` (any case): as Adam, always with decoupled weight decay."""

    type: str = Field(pattern=_any_case("adamw"))
    """AdamW, in any letter case (DeepSpeed lower-cases it)."""
    params: Optional[AdamWParams] = None
    """Constructor arguments (unset: the backend's defaults)."""


class LambOptimizer(_OptimizerBlock):
    """`type: Lamb` (any case): FusedLamb, CUDA only; not ZeRO-tested and needs dynamic fp16 loss scaling."""

    type: str = Field(pattern=_any_case("lamb"))
    """Lamb, in any letter case (DeepSpeed lower-cases it)."""
    params: Optional[LambParams] = None
    """Constructor arguments (unset: FusedLamb's defaults)."""


class LionOptimizer(_OptimizerBlock):
    """`type: Lion` (any case): FusedLion (GPU), DeepSpeedCPULion under offload."""

    type: str = Field(pattern=_any_case("lion"))
    """Lion, in any letter case (DeepSpeed lower-cases it)."""
    params: Optional[LionParams] = None
    """Constructor arguments (unset: the backend's defaults)."""


class AdagradOptimizer(_OptimizerBlock):
    """`type: Adagrad` (any case): torch.optim.Adagrad, DeepSpeedCPUAdagrad under offload."""

    type: str = Field(pattern=_any_case("adagrad"))
    """Adagrad, in any letter case (DeepSpeed lower-cases it)."""
    params: Optional[AdagradParams] = None
    """Constructor arguments (unset: the backend's defaults)."""


class MuonOptimizer(_OptimizerBlock):
    """`type: Muon` (any case): DeepSpeed's MuonWithAuxAdam."""

    type: str = Field(pattern=_any_case("muon"))
    """Muon, in any letter case (DeepSpeed lower-cases it)."""
    params: Optional[MuonParams] = None
    """Muon and auxiliary Adam settings (unset: MuonWithAuxAdam's defaults)."""


class OneBitAdamOptimizer(_OptimizerBlock):
    """`type: OneBitAdam` (any case): 1-bit Adam, DeepSpeed 0.18 and older."""

    type: str = Field(pattern=_any_case("onebitadam"), json_schema_extra=REMOVED_OPTIMIZERS["onebitadam"])
    """OneBitAdam (any case); removed in DeepSpeed 0.19."""
    params: Optional[OneBitAdamParams] = None
    """Constructor arguments (unset: OnebitAdam's defaults)."""


class ZeroOneAdamOptimizer(_OptimizerBlock):
    """`type: ZeroOneAdam` (any case): 0/1 Adam, DeepSpeed 0.18 and older."""

    type: str = Field(pattern=_any_case("zerooneadam"), json_schema_extra=REMOVED_OPTIMIZERS["zerooneadam"])
    """ZeroOneAdam (any case); removed in DeepSpeed 0.19."""
    params: Optional[ZeroOneAdamParams] = None
    """Constructor arguments (unset: ZeroOneAdam's defaults)."""


class OneBitLambOptimizer(_OptimizerBlock):
    """`type: OneBitLamb` (any case): 1-bit Lamb, DeepSpeed 0.18 and older."""

    type: str = Field(pattern=_any_case("onebitlamb"), json_schema_extra=REMOVED_OPTIMIZERS["onebitlamb"])
    """OneBitLamb (any case); removed in DeepSpeed 0.19."""
    params: Optional[OneBitLambParams] = None
    """Constructor arguments (unset: OnebitLamb's defaults)."""


class MupOptimizer(_OptimizerBlock):
    """`type: MuAdam`, `MuAdamW` or `MuSGD` (any case): the `mup` package's optimizers (not ZeRO-tested)."""

    type: str = Field(pattern=_any_case("muadam", "muadamw", "musgd"))
    """MuAdam, MuAdamW or MuSGD, in any letter case (DeepSpeed lower-cases it)."""
    params: Optional[dict[str, Any]] = None
    """Passed to mup's constructor as is: dsx cannot check these (without `mup` installed, initialize fails)."""


class TorchOptimizer(_OptimizerBlock):
    """An exact torch.optim class name, built as torch.optim.<type>(params) (not ZeRO-tested)."""

    type: TorchOptimizerName
    """Exact torch.optim class name. LBFGS needs a closure and SparseAdam sparse gradients, which DeepSpeed's
    step does not give; Adafactor needs torch >= 2.5."""
    params: Optional[dict[str, Any]] = None
    """Passed to the torch.optim constructor as is: dsx cannot check these (a wrong key fails at initialize)."""


def _optimizer_tag(value: Any) -> Optional[str]:
    name = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return _tag(optimizer_kind(name))


def _unknown_type_message(name: Any) -> str:
    message = (
        f"unknown optimizer type {name!r}. DeepSpeed names (any case): Adam, AdamW, Lamb, Lion, Adagrad, Muon, "
        "MuAdam, MuAdamW, MuSGD; DeepSpeed 0.18 only: OneBitAdam, ZeroOneAdam, OneBitLamb; "
        f"exact torch.optim names: {', '.join(TORCH_OPTIMIZER_NAMES)}"
    )
    if isinstance(name, str):
        for torch_name in TORCH_OPTIMIZER_NAMES:
            if torch_name.lower() == name.lower():
                message += f" (torch.optim names are case-sensitive: did you mean {torch_name!r}?)"
    return message


def _check_type(value: Any) -> Any:
    """One clear error for a missing or unknown type, before the per-type models run."""
    if isinstance(value, dict):
        if "type" not in value:
            typo = [key for key in value if key not in ("params", "legacy_fusion")]
            raise ValueError(
                "optimizer.type is missing: without it DeepSpeed builds no optimizer and ignores params"
                + (f" ('{typo[0]}' is not a key: did you mean 'type'?)" if typo else "")
            )
        if optimizer_kind(value["type"]) is None:
            raise ValueError(_unknown_type_message(value["type"]))
    return value


OptimizerConfig = Annotated[
    Union[
        Annotated[AdamOptimizer, Tag("adam")],
        Annotated[AdamWOptimizer, Tag("adamw")],
        Annotated[LambOptimizer, Tag("lamb")],
        Annotated[LionOptimizer, Tag("lion")],
        Annotated[AdagradOptimizer, Tag("adagrad")],
        Annotated[MuonOptimizer, Tag("muon")],
        Annotated[OneBitAdamOptimizer, Tag("onebitadam")],
        Annotated[ZeroOneAdamOptimizer, Tag("zerooneadam")],
        Annotated[OneBitLambOptimizer, Tag("onebitlamb")],
        Annotated[MupOptimizer, Tag("mup")],
        Annotated[TorchOptimizer, Tag("torch")],
    ],
    Discriminator(
        _optimizer_tag,
        custom_error_type="optimizer_block",
        custom_error_message="optimizer must be an object with a known `type`",
    ),
    BeforeValidator(_check_type),
]
"""The `optimizer` block: one model per type, picked by the (case-insensitive) `type`."""
