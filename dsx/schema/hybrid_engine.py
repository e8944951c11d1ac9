"""Hybrid engine (`hybrid_engine`): one DeepSpeed engine that switches between ZeRO training and fast inference
generation (RLHF actor models, DeepSpeed-Chat).

DeepSpeed parses it with a pydantic model (HybridEngineConfig, extra="forbid"): a misspelled key is REJECTED by
DeepSpeed too.
"""

from __future__ import annotations

from typing_extensions import Annotated

from dsx.schema.base import Bool, Field, Int, Section, version_gate

__all__ = ["HybridEngineConfig"]


class HybridEngineConfig(Section):
    """Hybrid engine settings; only used when `enabled` is true."""

    enabled: Bool = False
    """Wrap the model in DeepSpeedHybridEngine (training plus kernel-injected generation)."""
    max_out_tokens: Annotated[Int, Field(gt=0)] = 512
    """Tokens the inference KV-cache is sized for (covers the longest generation with CUDA graphs); 0.19: > 0."""
    inference_tp_size: Int = 1
    """Tensor-parallel degree used for generation (the training side keeps its own layout)."""
    release_inference_cache: Bool = False
    """Release the inference workspace (KV-cache) after each generate() and retake it before the next."""
    pin_parameters: Bool = True
    """ZeRO-3: gather all layers' parameters once per generate() instead of layer by layer (faster, more memory)."""
    tp_gather_partition_size: Int = 8
    """ZeRO-3 with inference_tp_size > 1 and pin_parameters: layers gathered per group."""
    enable_cuda_graph: Bool = Field(False, json_schema_extra=version_gate(added_in="0.19.0"))
    """Capture the decode steps of generate() in CUDA graphs."""
