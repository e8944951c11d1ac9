"""`data_types`: dtypes of gradient accumulation, parameters and buffers, and buffers kept in fp32.

DeepSpeed reads this section with dict.get (deepspeed/runtime/config.py): misspelled keys such as `grad_accum_type`
are silently IGNORED; the dtype strings are only resolved (through DtypeEnum) in `deepspeed.initialize`, and only
keep_in_fp32_modules is checked when the config is parsed.
"""

from __future__ import annotations

from typing import List, Literal, Optional, Union

from dsx.schema.base import Field, Section, version_gate

__all__ = ["DataTypesConfig", "DtypeName"]

DtypeName = Literal[
    "fp16", "float16", "half", "torch.float16",
    "bf16", "bfloat16", "torch.bfloat16",
    "fp32", "float32", "float", "torch.float32",
]
"""The floating-point spellings DeepSpeed's DtypeEnum resolves (case-sensitive); its int8 entries are left out:
int8 is never a valid training dtype here and fails or corrupts at initialize."""


class DataTypesConfig(Section):
    """Dtypes DeepSpeed uses besides the fp16/bf16 training precision."""

    grad_accum_dtype: Optional[DtypeName] = None
    """Dtype gradients accumulate in; None: the model dtype (without ZeRO it must equal the model dtype)."""
    param_dtype: Optional[DtypeName] = Field(None, json_schema_extra=version_gate(added_in="0.19.0"))
    """Dtype parameters are cast to; None: follow fp16/bf16 (if set it must match them, asserted at initialize)."""
    buffer_dtype: Optional[DtypeName] = Field(None, json_schema_extra=version_gate(added_in="0.19.0"))
    """Dtype buffers are cast to; None keeps each buffer's loaded dtype (e.g. fp32 rotary inv_freq)."""
    keep_in_fp32_modules: Union[Literal["auto"], List[str]] = Field(
        "auto", json_schema_extra=version_gate(added_in="0.19.0")
    )
    """Buffers kept in fp32 under fp16/bf16: "auto" (the model's transformers lists), name patterns, or [] (none)."""
