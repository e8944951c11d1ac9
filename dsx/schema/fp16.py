"""The `fp16` section: float16 mixed precision with loss scaling.

DeepSpeed models it with pydantic (DeepSpeedFP16Config, REJECT regime: unknown keys are errors), but coerces lax
types ("true" strings, 1 for true) and silently drops keys whose value is "auto"; dsx is strict on both.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import model_validator

from dsx.schema.base import Bool, Field, Float, Int, Section

__all__ = ["FP16Config"]


class FP16Config(Section):
    """float16 mixed-precision training: fp16 weights and activations, fp32 master weights, loss scaling."""

    enabled: Bool = False
    """Train in float16 mixed precision (not together with bf16.enabled)."""
    auto_cast: Bool = False
    """Cast floating-point inputs of the engine's forward to fp16."""
    loss_scale: Annotated[Float, Field(ge=0, allow_inf_nan=False)] = 0.0
    """Static loss scale; 0 (default) selects dynamic loss scaling. Finite and >= 0."""
    initial_scale_power: Int = 16
    """Dynamic scaling starts at a loss scale of 2**initial_scale_power."""
    loss_scale_window: Int = 1000
    """Overflow-free steps before the dynamic loss scale is raised (> 0 with dynamic scaling)."""
    hysteresis: Int = 2
    """Overflows tolerated before the dynamic loss scale is lowered."""
    consecutive_hysteresis: Bool = False
    """Refill the hysteresis count after every overflow-free step."""
    min_loss_scale: Int = 1
    """Floor of the dynamic loss scale (> 0 with dynamic scaling)."""
    fp16_master_weights_and_grads: Bool = False
    """Keep master weights and gradients in fp16 (needs ZeRO 1-3 with optimizer offload and DeepSpeedCPUAdam)."""

    @model_validator(mode="after")
    def _check_dynamic_loss_scale(self):
        # DeepSpeed 0.19.8 DeepSpeedFP16Config._validate_dynamic_loss_scale_params (same messages).
        if self.enabled and self.loss_scale == 0:
            if self.loss_scale_window <= 0:
                raise ValueError(
                    "fp16.loss_scale_window must be > 0 when dynamic loss scaling is enabled (loss_scale=0)"
                )
            if self.min_loss_scale <= 0:
                raise ValueError("fp16.min_loss_scale must be > 0 when dynamic loss scaling is enabled (loss_scale=0)")
        return self
