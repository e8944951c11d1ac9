"""Weight quantization (`weight_quantization`): quantize weights while ZeRO-3 builds the model
(`quantized_initialization`) or after it (`post_init_quant`).

DeepSpeed parses it with a pydantic model (WeightQuantConfig, extra="forbid") only when the key is present: a
misspelled key is REJECTED by DeepSpeed too. The two inner dicts are passed on unchecked.
"""

from __future__ import annotations

from typing import Any, Literal

from dsx.schema.base import Bool, Int, Section

__all__ = ["WeightQuantizationConfig"]


class WeightQuantizationConfig(Section):
    """Weight quantization settings; only the two dicts are read by DeepSpeed's quantization code."""

    enabled: Bool = True
    """Parsed but not read by DeepSpeed 0.18/0.19 (what runs is decided by the two dicts below)."""
    num_bits: Int = 8
    """Parsed but not read (the dicts carry their own num_bits)."""
    q_type: Literal["symmetric", "asymmetric"] = "symmetric"
    """Parsed but not read (the dicts carry their own `symmetric` flag)."""
    q_groups: Int = 1
    """Parsed but not read."""
    quantized_initialization: dict[str, Any] = {}
    """ZeRO-3 zero.Init quantizes Linear weights with this ({num_bits, group_size, group_dim, symmetric}); {}: off."""
    post_init_quant: dict[str, Any] = {}
    """{module-name fragment: quantizer settings} for DeepSpeed's post-init group-wise weight quantization."""
