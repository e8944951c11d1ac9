"""The `bf16` section (older spelling `bfloat16`): bfloat16 mixed precision.

DeepSpeed models it with pydantic (DeepSpeedBF16Config, REJECT regime: unknown keys are errors), but coerces lax
types and silently drops keys whose value is "auto"; dsx is strict on both.
"""

from __future__ import annotations

from typing import Optional

from pydantic import model_validator

from dsx.schema.base import Bool, Section

__all__ = ["BF16Config"]


class BF16Config(Section):
    """bfloat16 mixed-precision training: bf16 weights and activations, fp32 master weights by default."""

    enabled: Bool = False
    """Train in bfloat16 mixed precision (not together with fp16.enabled)."""
    immediate_grad_update: Bool = False
    """Apply each gradient to the fp32 master gradient as soon as it is produced instead of at the boundary."""
    check_grad_overflow: Optional[Bool] = None
    """Skip the optimizer step when gradients overflow. DeepSpeed's default changed false -> true in 0.19, so dsx
    always writes it explicitly."""
    bf16_master_weights_and_grads: Bool = False
    """Keep master weights and gradients in bf16 (needs ZeRO 1-3; also optimizer offload with DeepSpeedCPUAdam
    unless bf16_optimizer_states)."""
    bf16_optimizer_states: Bool = False
    """Keep optimizer states in bf16 too (needs bf16_master_weights_and_grads and ZeRO 1-3)."""

    @model_validator(mode="after")
    def _check_optimizer_states(self):
        if self.bf16_optimizer_states and not self.bf16_master_weights_and_grads:
            raise ValueError(
                "bf16.bf16_optimizer_states requires bf16.bf16_master_weights_and_grads: true "
                "(DeepSpeed asserts this when it parses the config)"
            )
        return self
