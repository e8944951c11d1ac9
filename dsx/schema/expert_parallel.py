"""Automatic expert parallelism (`expert_parallel`, AutoEP, new in DeepSpeed 0.19): replaces the MoE layers of known
model families with expert-parallel ones.

DeepSpeed reads the section with dict.get (parse_autoep_config): misspelled keys are silently IGNORED, and values are
checked only inside deepspeed.initialize() and only when `enabled` is true (except load_balance_coeff).
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import Discriminator, Tag, model_serializer, model_validator
from typing_extensions import Annotated

from dsx.schema.base import Bool, Field, Float, Int, Section

__all__ = ["ExpertParallelConfig", "EP_PRESET_MODELS", "EXPERT_ACTIVATIONS"]

EPPresetModel = Literal["mixtral", "qwen3_moe", "qwen3_5_moe", "deepseek_v2", "deepseek_v3", "minimax_m3"]
"""AutoEP's PRESET_MODELS names in 0.19.8 (exact spelling; an unknown name raises at initialize)."""

ExpertActivation = Literal["swiglu", "geglu_tanh", "swiglu_clamped", "swiglu_oai"]
"""deepspeed.moe.ep_experts.EXPERT_ACTIVATIONS in 0.19.8."""

EP_PRESET_MODELS = EPPresetModel.__args__
EXPERT_ACTIVATIONS = ExpertActivation.__args__

AttrName = Annotated[str, Field(min_length=1, pattern=r"^[^.]+$")]
"""A direct attribute/child name: non-empty, no dots (DeepSpeed raises at initialize otherwise)."""

FiniteFloat = Annotated[Float, Field(allow_inf_nan=False)]


def _auto_or_number(value: Any) -> str:
    """Pick the union branch, so an error names one branch ("auto" for strings, the number otherwise)."""
    return "auto" if isinstance(value, str) else "number"


TopK = Annotated[
    Union[Annotated[Literal["auto"], Tag("auto")], Annotated[Int, Field(ge=1), Tag("number")]],
    Discriminator(_auto_or_number),
]
"""The string "auto" (take it from the model config) or an integer >= 1."""

ScalingFactor = Annotated[
    Union[Annotated[Literal["auto"], Tag("auto")], Annotated[FiniteFloat, Tag("number")]],
    Discriminator(_auto_or_number),
]
"""The string "auto" (take it from the model config) or a finite number."""


class ExpertParallelConfig(Section):
    """AutoEP settings; everything but load_balance_coeff is ignored unless `enabled` is true."""

    enabled: Bool = False
    """Replace the model's MoE layers with AutoEP expert-parallel layers at initialize."""
    autoep_size: Annotated[Int, Field(ge=1)] = 1
    """Expert-parallel degree: ranks the experts of one layer are spread over (must divide num_experts)."""
    expert_tensor_parallel_size: Annotated[Int, Field(ge=1, le=1)] = 1
    """Expert-internal tensor parallelism; reserved: 0.19.8 raises at initialize for anything but 1."""
    validate_folding_routing: Bool = False
    """Check the AutoEP+AutoTP folded process-group routing at initialize (debug aid)."""
    async_split_plan: Bool = False
    """Compute the all-to-all split plan asynchronously (not with AutoEP+AutoTP folding)."""
    preset_model: Optional[EPPresetModel] = None
    """Model-family preset; null: detect it from the Hugging Face model_type, else try every preset."""
    moe_layer_pattern: Optional[str] = None
    """Regex of MoE block module names (overrides the preset; alone it defines a custom preset)."""
    expert_pattern: Optional[AttrName] = None
    """Child name of the experts container inside an MoE block."""
    router_pattern: Optional[AttrName] = None
    """Child name of the router (gate) inside an MoE block."""
    use_grouped_mm: Bool = True
    """Run the experts with torch._grouped_mm instead of a sequential loop."""
    disable_triton_grouped_mm: Bool = False
    """Do not use the Triton grouped-GEMM kernel."""
    route_norm: Optional[Bool] = None
    """Renormalise the top-k routing weights; null: the preset's choice."""
    route_scale: FiniteFloat = 1.0
    """Scale applied to routing weights (routed_scaling_factor, when not "auto", overrides it)."""
    score_apply: Literal["auto", "pre", "post"] = "auto"
    """Apply routing scores before or after the experts; "auto": the preset's choice."""
    combine_impl: Literal["auto", "weighted_sum", "fused_weighted_sum", "legacy_bmm"] = "auto"
    """How expert outputs are combined."""
    row_weighting_impl: Literal["auto", "eager", "fused"] = "auto"
    """How routing weights are applied to rows; "fused" runs only inside the DeepEP route."""
    gate_up_impl: Literal["separate", "fused"] = "separate"
    """Run gate and up projections as two grouped GEMMs or one ("fused" needs use_grouped_mm)."""
    comm_backend: Literal["comm", "deepep"] = "comm"
    """All-to-all implementation: deepspeed.comm or DeepEP kernels."""
    comm_num_sm: Annotated[Int, Field(ge=1)] = 12
    """Streaming multiprocessors DeepEP may use for communication."""
    comm_qp_margin: Annotated[Int, Field(ge=0)] = 4
    """Extra RDMA queue pairs DeepEP reserves."""
    comm_max_tokens_per_rank: Annotated[Int, Field(ge=0)] = 0
    """Largest token count one rank routes (DeepEP buffer size); required > 0 with comm_backend "deepep"."""
    num_expert_groups: Optional[Annotated[Int, Field(ge=1)]] = None
    """Expert groups for group-limited routing (DeepSeek n_group); null: from the model config."""
    num_limited_groups: Optional[Annotated[Int, Field(ge=1)]] = None
    """Groups each token may route to (DeepSeek topk_group); at most num_expert_groups."""
    score_func: Literal["auto", "softmax", "sigmoid"] = "auto"
    """Router score function; "auto": the preset's choice."""
    top_k: TopK = "auto"
    """Experts per token; "auto": read from the model config attribute top_k_attr."""
    load_balance_coeff: Optional[FiniteFloat] = None
    """Auxiliary-loss-free load balancing: unsupported in 0.19.8, any value but null raises at DeepSpeedConfig()."""
    routed_scaling_factor: ScalingFactor = "auto"
    """Routing-weight scale; "auto": the model config's routed_scaling_factor, else route_scale."""
    expert_w1: Optional[AttrName] = None
    """Name of the experts' first (gate/up) weight; null: the preset's."""
    expert_w2: Optional[AttrName] = None
    """Name of the experts' down-projection weight; null: the preset's."""
    expert_w3: Optional[AttrName] = None
    """Name of the experts' up weight; absent: the preset's, an explicit null: gate and up are fused in expert_w1."""
    num_experts_attr: Optional[AttrName] = None
    """Model-config attribute holding the number of experts."""
    top_k_attr: Optional[AttrName] = None
    """Model-config attribute holding top-k (ignored when top_k is an integer)."""
    has_shared_experts: Optional[Bool] = None
    """Whether MoE blocks have shared (always-on) experts; null: the preset's."""
    shared_experts_pattern: Optional[AttrName] = None
    """Child name of the shared experts (used only with has_shared_experts true)."""
    shared_experts_gate_pattern: Optional[AttrName] = None
    """Child name of the shared-experts gate (used only with has_shared_experts true)."""
    expert_activation: Optional[ExpertActivation] = None
    """Expert MLP activation; null: the preset's (swiglu for most)."""

    @model_validator(mode="after")
    def _check_combinations(self) -> "ExpertParallelConfig":
        if self.load_balance_coeff is not None:
            raise ValueError(
                f"expert_parallel.load_balance_coeff={self.load_balance_coeff!r} is not supported by DeepSpeed 0.19.8 "
                "(auxiliary-loss-free load balancing is not implemented); set it to null or omit the key"
            )
        if not self.enabled:
            return self
        if self.gate_up_impl == "fused" and not self.use_grouped_mm:
            raise ValueError(
                'expert_parallel.gate_up_impl "fused" needs use_grouped_mm true (false selects the sequential '
                "expert loop); set use_grouped_mm to true or leave gate_up_impl unset"
            )
        if self.row_weighting_impl == "fused" and (self.comm_backend != "deepep" or self.autoep_size == 1):
            raise ValueError(
                'expert_parallel.row_weighting_impl "fused" only runs inside the DeepEP route: it needs '
                'comm_backend "deepep" and autoep_size > 1; or leave row_weighting_impl unset'
            )
        if self.combine_impl == "fused_weighted_sum":
            if self.comm_backend == "deepep" and self.autoep_size > 1:
                raise ValueError(
                    'expert_parallel.combine_impl "fused_weighted_sum" cannot be used with comm_backend "deepep" '
                    '(DeepEP already reduces the routed rows); use comm_backend "comm" or leave combine_impl unset'
                )
            if self.score_apply == "pre":
                raise ValueError(
                    'expert_parallel.combine_impl "fused_weighted_sum" requires score_apply "post" (or "auto" with '
                    'a post-scoring preset), not "pre"'
                )
        if self.comm_backend == "deepep" and self.comm_max_tokens_per_rank == 0:
            raise ValueError(
                'expert_parallel.comm_max_tokens_per_rank must be > 0 with comm_backend "deepep": set it to the most '
                "tokens one rank can route, normally train_micro_batch_size_per_gpu * the padded sequence length"
            )
        if (
            self.num_expert_groups is not None
            and self.num_limited_groups is not None
            and self.num_limited_groups > self.num_expert_groups
        ):
            raise ValueError(
                f"expert_parallel.num_limited_groups ({self.num_limited_groups}) must be <= num_expert_groups "
                f"({self.num_expert_groups})"
            )
        return self

    @model_serializer(mode="wrap")
    def _keep_explicit_null_expert_w3(self, handler):
        """An explicit `expert_w3: null` (fused gate/up) differs from an absent key (preset default): keep it."""
        data = handler(self)
        if self.expert_w3 is None and "expert_w3" in self.model_fields_set and "expert_w3" not in data:
            data["expert_w3"] = None
        return data
