"""`optimizer.params`: one model per optimizer type, the union of the keys its backends take.

DeepSpeed passes params to the constructor as **kwargs, so a wrong key fails only inside deepspeed.initialize
(or, for Muon, is silently ignored); each model rejects keys its type's backends do not take, and the combinations
a backend refuses (torch-only keys without torch_adam, amsgrad where it raises...).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Optional

from pydantic import model_validator

from dsx.schema.base import Bool, Field, Float, Int, Section, version_gate
from dsx.schema.optimizer.kinds import _TORCH_ADAM_ONLY


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
