"""`zero_optimization`: ZeRO partitioning of optimizer states (stage 1), gradients (2) and parameters (3).

DeepSpeed parses it with a pydantic model (DeepSpeedZeroConfig, extra="forbid"): misspelled keys are REJECTED, but
lax coercion accepts `true` for stage 1 and "yes" for bools, and any key whose value is "auto" is silently dropped.
"""

from __future__ import annotations

import json
import sys
from typing import Any, List, Literal, Optional

from pydantic import BeforeValidator, model_validator
from typing_extensions import Annotated

from dsx.schema.base import Bool, Field, Float, Int, Section, version_gate
from dsx.schema.offload import OffloadOptimizerConfig, OffloadParamConfig
from dsx.schema.zenflow import ZenFlowConfig

__all__ = ["ZeroConfig", "LeafModuleConfig", "LocoParamConfig", "ZeroStage", "DEFAULT_LEAF_MODULE_CLASSES"]

REMOVED = "0.19.0"


def _stage_int_only(value: Any) -> Any:
    """DeepSpeed's stage enum also takes true (-> 1) and 2.0; dsx accepts only the integers."""
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            shown = json.dumps(value)
        except TypeError:
            shown = repr(value)
        if value == "all" or (isinstance(value, list) and value and all(v in (0, 1, 2, 3) for v in value)):
            # what DeepSpeed's autotuner reads as its search space (autotuner.py: "all" or a list); the engine
            # refuses it at deepspeed.initialize
            raise ValueError(f"stage {shown} is DeepSpeed's autotuner's search space (`deepspeed --autotuning "
                             "tune` tries each stage); deepspeed.initialize refuses it: a training config takes "
                             "one of the integers 0, 1, 2, 3")
        raise ValueError(f"stage must be one of the integers 0, 1, 2, 3, not {shown}")
    return value


ZeroStage = Annotated[Literal[0, 1, 2, 3], BeforeValidator(_stage_int_only)]
"""ZeRO stage as a plain integer 0-3."""


def _str_to_list(value: Any) -> Any:
    """DeepSpeed wraps a single string into a one-element list."""
    return [value] if isinstance(value, str) else value


StrList = Annotated[List[str], BeforeValidator(_str_to_list)]

DEFAULT_LEAF_MODULE_CLASSES = [
    "transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock",
    "transformers.models.qwen2_moe.modeling_qwen2_moe.Qwen2MoeSparseMoeBlock",
    "transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock",
]


class LeafModuleConfig(Section):
    """Modules ZeRO-3 treats as leaves: their parameters are fetched as a whole, without per-submodule hooks."""

    classes: StrList = DEFAULT_LEAF_MODULE_CLASSES
    """Fully qualified class names of leaf modules (default: the Mixtral, Qwen2-MoE and Qwen3-MoE sparse MoE blocks)."""
    names: StrList = []
    """Module names (as in named_modules()) to treat as leaves."""
    name_suffixes: StrList = []
    """Module-name suffixes to treat as leaves."""


class LocoParamConfig(Section):
    """LoCo-ZeRO++ error-feedback settings (DeepSpeed 0.18 only)."""

    err_beta: Float
    """Moving-average coefficient of the quantization error (0-1, 0.8 suggested); required, DeepSpeed reads it."""
    reset_T: Int
    """Steps after which the error buffer is cleared (1024 suggested); required, DeepSpeed reads it."""


class ZeroConfig(Section):
    """ZeRO optimizer settings, as DeepSpeed 0.19.8's DeepSpeedZeroConfig (with the 0.18.9-only keys gated)."""

    stage: ZeroStage = 0
    """0 off, 1 partitions optimizer states, 2 also gradients, 3 also parameters."""
    contiguous_gradients: Bool = True
    """Copy gradients into one contiguous buffer as they are produced (less fragmentation)."""
    reduce_scatter: Bool = True
    """Average gradients with reduce/reduce-scatter instead of all-reduce."""
    reduce_bucket_size: Int = Field(500000000, ge=0)
    """Elements reduced at a time (memory vs. message size); > 0 (0.18: >= 0). 0 is accepted by 0.18 only (linted for 0.19 targets)."""
    use_multi_rank_bucket_allreduce: Bool = True
    """Stages 1/2: combine the reduce buckets of all ranks into one all-reduce (helps small models on many GPUs)."""
    allgather_partitions: Bool = True
    """All-gather instead of broadcasts after the step; dead key: DeepSpeed parses it and never uses it."""
    allgather_bucket_size: Int = Field(500000000, ge=0)
    """Elements all-gathered at a time after the optimizer step (stages 1/2)."""
    overlap_comm: Optional[Bool] = None
    """Overlap gradient reduction with the backward pass; unset means true at stage 3, false otherwise."""
    compute_grad_norm: Bool = Field(True, json_schema_extra=version_gate(added_in="0.19.0"))
    """Stages 1/2: compute the global gradient norm; false only with gradient_clipping 0, no offload, no zenflow."""
    load_from_fp32_weights: Bool = True
    """Initialise fp32 master weights from the checkpoint's fp32 copy instead of the 16-bit weights."""
    elastic_checkpoint: Bool = False
    """Legacy elastic checkpoints (stages 1/2; DeepSpeed only warns at stage 3); use Universal Checkpointing."""
    offload_param: Optional[OffloadParamConfig] = None
    """Offload parameters to CPU/NVMe; used only at stage 3 (silently ignored at stages 0-2)."""
    offload_optimizer: Optional[OffloadOptimizerConfig] = None
    """Offload optimizer states to CPU/NVMe and step on the CPU (stages 1-3)."""
    zenflow: Optional[ZenFlowConfig] = None
    """ZenFlow stall-free offload; at stages 1/2 it needs offload_optimizer on the CPU."""
    sub_group_size: Int = Field(1000000000, ge=0)
    """Stage 3: parameter elements per optimizer-step tile (ZeRO-Offload/Infinity); ignored at stages 1/2."""
    cpu_offload_param: Optional[Bool] = None
    """Deprecated: use offload_param {"device": "cpu"} (DeepSpeed converts true to it)."""
    cpu_offload_use_pin_memory: Optional[Bool] = None
    """Deprecated and ignored: use pin_memory in offload_param / offload_optimizer."""
    cpu_offload: Optional[Bool] = None
    """Deprecated: use offload_optimizer {"device": "cpu"} (DeepSpeed converts true to it)."""
    prefetch_bucket_size: Int = Field(50000000, ge=0, alias="stage3_prefetch_bucket_size")
    """Stage 3: parameter elements fetched ahead of use (the docs' 5e8 is wrong: the default is 5e7)."""
    param_persistence_threshold: Int = Field(100000, ge=0, alias="stage3_param_persistence_threshold")
    """Stage 3: parameters smaller than this (elements) stay unpartitioned on every GPU."""
    model_persistence_threshold: Int = Field(sys.maxsize, ge=0, alias="stage3_model_persistence_threshold")
    """Stage 3: cap on the total elements kept unpartitioned by param_persistence_threshold."""
    max_live_parameters: Int = Field(1000000000, ge=0, alias="stage3_max_live_parameters")
    """Stage 3: parameter elements resident per GPU before releasing (less memory, more communication)."""
    max_reuse_distance: Int = Field(1000000000, ge=0, alias="stage3_max_reuse_distance")
    """Stage 3: keep a parameter gathered if it is reused within this many parameter elements."""
    gather_16bit_weights_on_model_save: Bool = Field(False, alias="stage3_gather_16bit_weights_on_model_save")
    """Stage 3: gather the partitioned 16-bit weights when saving with save_16bit_model()."""
    module_granularity_threshold: Int = Field(0, alias="stage3_module_granularity_threshold")
    """Stage 3: modules with parameters/(1+descendants) below this are fetched as one unit (0 disables)."""
    use_all_reduce_for_fetch_params: Bool = Field(False, alias="stage3_use_all_reduce_for_fetch_params")
    """Stage 3: fetch module parameters with all-reduce instead of all-gather (less host-side concat/slice)."""
    allgather_sequential: Bool = Field(False, alias="stage3_allgather_sequential")
    """Stage 3: all-gather parameters one by one without bucketing (lower peak memory; forces prefetch 1)."""
    stage3_gather_fp16_weights_on_model_save: Bool = False
    """Deprecated: use stage3_gather_16bit_weights_on_model_save (DeepSpeed copies the value over)."""
    ignore_unused_parameters: Bool = True
    """Stage 2: tolerate parameters that get no gradient instead of raising."""
    legacy_stage1: Bool = False
    """Pre-0.5.9 ZeRO stage 1; true makes deepspeed.initialize() raise at stages 1-3."""
    round_robin_gradients: Bool = False
    """Stages 1/2 with CPU offload: spread gradient copies to CPU across ranks."""
    parameter_alignment: Bool = Field(False, json_schema_extra=version_gate(added_in="0.19.0"))
    """Stages 1/2: pad flat buffers so each parameter starts 16-byte aligned (costs memory)."""
    zero_hpz_partition_size: Int = Field(1, ge=0)
    """ZeRO++ hpZ: ranks in the secondary parameter partition (usually GPUs per node; 1 is off); stage 3."""
    zero_quantized_weights: Bool = False
    """ZeRO++ qwZ: quantize weights for the stage-3 all-gather (not with torch_autocast)."""
    zero_quantized_nontrainable_weights: Bool = False
    """Stage 3: store frozen weights quantized (e.g. LoRA base weights) to save memory and communication."""
    zero_quantized_gradients: Bool = False
    """ZeRO++ qgZ: quantized all-to-all gradient reduction; only stage 3 uses it."""
    memory_efficient_linear: Bool = True
    """Stage 3 (zero.Init): use DeepSpeed's memory-efficient linear implementation."""
    pipeline_loading_checkpoint: Bool = False
    """Stage 3: force loading the checkpoint in pipeline mode."""
    override_module_apply: Bool = True
    """Stage 3 (zero.Init): override nn.Module.apply so it sees gathered parameters."""
    log_trace_cache_warnings: Bool = False
    """Stage 3: log trace-cache warnings such as invalidations."""
    enable_sanity_checks: Bool = False
    """Run DeepSpeed's internal ZeRO sanity checks (debugging, slow)."""
    save_muon_momentum_buffer_in_memory: Bool = False
    """Stage 3 with NVMe offload and Muon: keep the momentum buffer in memory instead of swapping it."""
    leaf_module: Optional[LeafModuleConfig] = None
    """Stage 3 leaf modules (unset: DeepSpeed's defaults, the Mixtral/Qwen MoE blocks)."""

    # --- removed in DeepSpeed 0.19 (valid for 0.18 targets only)
    mics_shard_size: Optional[Int] = Field(
        None,
        json_schema_extra=version_gate(
            removed_in=REMOVED, instead="zero_hpz_partition_size (ZeRO++ hpZ) for hierarchical partitioning"
        ),
    )
    """MiCS: ranks per parameter shard group; > 0 enables MiCS (0.18 default -1, off)."""
    mics_hierarchical_params_gather: Optional[Bool] = Field(
        None,
        json_schema_extra=version_gate(
            removed_in=REMOVED, instead="zero_hpz_partition_size (ZeRO++ hpZ) for hierarchical partitioning"
        ),
    )
    """MiCS: hierarchical all-gather of parameters across nodes (0.18 default false)."""
    zeropp_loco_param: Optional[LocoParamConfig] = Field(
        None,
        json_schema_extra=version_gate(
            removed_in=REMOVED, instead="drop the key: plain ZeRO++ zero_quantized_gradients needs no LoCo settings"
        ),
    )
    """LoCo-ZeRO++: error feedback for quantized gradients (0.18, stage 3 with zero_quantized_gradients)."""

    # Rules that relate zero keys to each other but that DeepSpeed only enforces inside deepspeed.initialize()
    # (NVMe without nvme_path, zenflow without offload, compute_grad_norm with offload/zenflow) live in
    # dsx/lint/rules.py, so `dsx validate` reports all of them at once instead of the first.

    @model_validator(mode="after")
    def _deprecated_key_not_with_replacement(self) -> "ZeroConfig":
        pairs = (
            ("cpu_offload", "offload_optimizer", "offload_optimizer"),
            ("cpu_offload_param", "offload_param", "offload_param"),
            (
                "stage3_gather_fp16_weights_on_model_save",
                "gather_16bit_weights_on_model_save",
                "stage3_gather_16bit_weights_on_model_save",
            ),
        )
        for deprecated, replacement, replacement_key in pairs:
            if deprecated in self.model_fields_set and replacement in self.model_fields_set:
                raise ValueError(
                    f"zero_optimization: the deprecated {deprecated} and its replacement {replacement_key} are both "
                    f"set (DeepSpeed rejects the pair); keep only {replacement_key}"
                )
        return self

    @model_validator(mode="after")
    def _compute_grad_norm_only_stage_1_2(self) -> "ZeroConfig":
        if not self.compute_grad_norm and self.stage not in (1, 2):
            raise ValueError(
                f"zero_optimization.compute_grad_norm=false is supported only with stage 1 or 2, not stage {self.stage}"
            )
        return self

    @model_validator(mode="after")
    def _partial_offload_only_stage_3(self) -> "ZeroConfig":
        if self.offload_optimizer is not None and self.offload_optimizer.ratio < 1.0 and self.stage != 3:
            raise ValueError(
                f"zero_optimization.offload_optimizer.ratio={self.offload_optimizer.ratio} (partial offload) is "
                f"supported only with stage 3, not stage {self.stage}"
            )
        return self

    @model_validator(mode="after")
    def _no_legacy_stage1(self) -> "ZeroConfig":
        if self.legacy_stage1 and self.stage != 0:
            raise ValueError(
                "zero_optimization.legacy_stage1=true is not supported since DeepSpeed 0.5.9 "
                "(deepspeed.initialize() raises); remove it"
            )
        return self
