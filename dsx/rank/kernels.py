"""Apply the kernel plan of dsx.run.kernels to the model before deepspeed.initialize: Liger Kernel's Triton kernels
(liger-kernel, `pip install dsx[kernels]`) and torchao's float8 training (`pip install dsx[fp8]`)."""

from __future__ import annotations

FP8_MULTIPLE = 16
"""torch._scaled_mm needs both dimensions of a float8 matmul's weight to be multiples of 16."""


def apply_kernels(model, family: str, liger: bool, fused_loss: bool, fp8: str | None) -> list[str]:
    """Patch `model` in place; the notes say what was applied (the row keeps them)."""
    notes = []
    if liger:
        import liger_kernel.transformers as liger_transformers

        from dsx.run.kernels import LIGER_FAMILIES

        getattr(liger_transformers, LIGER_FAMILIES[family])(rope=True, rms_norm=True, swiglu=True,
                                                            cross_entropy=False,
                                                            fused_linear_cross_entropy=fused_loss, model=model)
        notes.append("Liger Kernel applied: RoPE, RMSNorm, SwiGLU" + (", fused linear cross-entropy (no logits)"
                                                                     if fused_loss else ""))
    if fp8:
        import torch
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        if torch.cuda.get_device_capability() < (8, 9):
            raise RuntimeError(f"--fp8 {fp8}: this GPU ({torch.cuda.get_device_name()}) has no FP8 matmuls "
                               "(compute capability 8.9 or more)")
        converted: list[str] = []

        def decoder_linear(module, fqn: str) -> bool:
            ok = (isinstance(module, torch.nn.Linear) and "lm_head" not in fqn
                  and module.in_features % FP8_MULTIPLE == 0 and module.out_features % FP8_MULTIPLE == 0)
            if ok:
                converted.append(fqn)
            return ok

        convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(fp8),
                                   module_filter_fn=decoder_linear)
        notes.append(f"float8 training ({fp8}, torchao): {len(converted)} linear layer(s) (the LM head stays bf16)")
    return notes
