"""`--kernels liger` and `--fp8 tensorwise|rowwise` (dsx.rank.kernels): what applies to this run, refused before any
launch where they cannot apply."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from dsx.config_facts import AUTOCAST
from dsx.run.refused import RunRefused

LIGER_FAMILIES = {"llama": "apply_liger_kernel_to_llama"}
"""Model families Liger Kernel 0.8.5 patches, by dsx family: its function for each. GPT-2 and BERT have none."""

FP8_RECIPES = ("tensorwise", "rowwise")
"""torchao's float8 training recipes (Float8LinearConfig.from_recipe_name)."""


@dataclass(frozen=True)
class KernelPlan:
    """What the ranks apply: Liger's kernels (rope, RMSNorm, SwiGLU, and its fused linear cross-entropy unless
    something else owns the loss) and torchao's float8 training recipe."""

    liger: bool = False
    fused_loss: bool = False
    fp8: str | None = None

    def describe(self) -> str:
        parts = []
        if self.liger:
            parts.append("Liger: RoPE, RMSNorm, SwiGLU" + (", fused linear cross-entropy" if self.fused_loss else ""))
        elif self.fused_loss:
            parts.append("Liger's fused linear cross-entropy as the loss (--loss fused)")
        if self.fp8:
            parts.append(f"float8 training ({self.fp8}, torchao) of the decoder's linear layers")
        return "; ".join(parts)


def liger_chunk_tokens(vocab: int, hidden: int, tokens: int) -> int:
    """Tokens per chunk of Liger's fused linear cross-entropy (liger_kernel.ops.fused_linear_cross_entropy: the
    next power of two of tokens / ceil(vocab / hidden)): its logits exist one chunk at a time, as --loss tiled's."""
    chunk = -(-tokens // -(-vocab // hidden))
    return 1 << max(0, chunk - 1).bit_length()


def loss_tile_of(trial) -> int | None:
    """The tile dsx.estimate prices the loss at: --loss tiled's, or Liger's chunk when its fused loss runs."""
    if trial.kernels is not None and trial.kernels.fused_loss:
        resolved = trial.resolved
        return liger_chunk_tokens(resolved.vocab_size, resolved.hidden_size, trial.micro_batch * resolved.seq_len)
    return trial.loss_tile_tokens


def kernel_toggles(plan: KernelPlan | None) -> dict:
    """The rank plan's and the row's toggles of a KernelPlan (none: the defaults)."""
    if plan is None:
        return {}
    return {"kernels": "liger" if plan.liger else None, "liger_fused_loss": plan.fused_loss, "fp8": plan.fp8}


def _check_fused_loss(request, device: str, zero: int, sequence: int | None, check_installed: bool) -> None:
    """RunRefused where --loss fused (Liger's fused linear cross-entropy as dsx's loss) cannot apply."""
    if device != "cuda":
        raise RunRefused("--loss fused needs a CUDA GPU: Liger's fused linear cross-entropy is a Triton kernel "
                         "(--loss tiled computes the same loss without the whole logits on any device)")
    if zero == 3:
        raise RunRefused("--loss fused at ZeRO-3: the head's weight is partitioned and Liger reads it outside the "
                         "head's forward; use --loss tiled (it calls the head tile by tile)")
    if sequence:
        raise RunRefused("--loss fused with --sequence-parallel: Ulysses computes the loss from its shard's logits; "
                         "use --loss tiled")
    if check_installed and importlib.util.find_spec("liger_kernel") is None:
        raise RunRefused("--loss fused needs liger-kernel: pip install 'dsx[kernels]'")


def kernel_plan(request, resolved, device: str, zero: int, pipeline, sequence: int | None, notes: list[str],
                check_installed: bool = True, precision: str = "bf16") -> KernelPlan | None:
    """The KernelPlan of --kernels / --fp8 / --loss fused (None when none is asked for); RunRefused where one cannot
    apply (check_installed=False: dsx estimate, which plans for a GPU kind and runs nothing)."""
    kernels, fp8 = request.kernels or "none", request.fp8 or "none"
    if kernels not in ("none", "liger"):
        raise RunRefused(f"unknown --kernels '{kernels}' (known: none, liger)")
    if fp8 not in ("none", *FP8_RECIPES):
        raise RunRefused(f"unknown --fp8 '{fp8}' (known: none, {', '.join(FP8_RECIPES)})")
    loss_fused, loss_tiled = request.loss == "fused", request.loss == "tiled"
    if kernels == "none" and fp8 == "none" and not loss_fused:
        return None
    if loss_fused:
        _check_fused_loss(request, device, zero, sequence, check_installed)
    liger = kernels == "liger"
    if precision == AUTOCAST and (liger or fp8 != "none"):
        raise RunRefused(f"{'--kernels liger' if liger else f'--fp8 {fp8}'} with --precision bf16-autocast: not "
                         "measured by dsx (its kernels were tried on bf16 weights only); use bf16")
    given = " and ".join(flag for flag, on in (("--kernels liger", liger), (f"--fp8 {fp8}", fp8 != "none")) if on)
    if pipeline is not None and given:
        raise RunRefused(f"{given} with pipeline stages: not supported by dsx; drop one")
    if liger and resolved.family not in LIGER_FAMILIES:
        raise RunRefused(f"--kernels liger: Liger Kernel patches Llama-family models here; {resolved.name} is a "
                         f"{resolved.family} model (Liger 0.8.5 has no {resolved.family} support)")
    if liger and request.compile:
        raise RunRefused("--kernels liger with --compile: not supported by dsx (Liger 0.8.5's RMSNorm inside torch "
                         "2.11's compiled step stops it with a CUDA illegal memory access, on an H100 and an H200; its "
                         "RoPE and SwiGLU were no faster compiled: bench/kernels/README.md); for Liger's fused loss "
                         "with --compile use --loss fused, or run Liger eager")
    if liger and request.tiled_mlp:
        raise RunRefused("--kernels liger replaces the Llama MLP with its own SwiGLU, which --tiled-mlp would bypass: "
                         "drop one")
    if fp8 != "none" and zero == 3:
        raise RunRefused(f"--fp8 {fp8} with ZeRO-3: not supported by dsx (torchao's float8 all-gather is FSDP2's; "
                         "ZeRO-3 partitions the weights Float8Linear casts); use ZeRO 0-2")
    if liger and device != "cuda":
        raise RunRefused("--kernels liger needs a CUDA GPU: Liger's kernels are Triton kernels")
    if fp8 != "none" and device != "cuda":
        raise RunRefused(f"--fp8 {fp8} needs an FP8 GPU (compute capability 8.9 or more: H100, H200, L4, L40)")
    for flag, on, package, extra in (("--kernels liger", liger, "liger_kernel", "kernels"),
                                     (f"--fp8 {fp8}", fp8 != "none", "torchao", "fp8")):
        if on and check_installed and importlib.util.find_spec(package) is None:
            raise RunRefused(f"{flag} needs {package.replace('_', '-')}: pip install 'dsx[{extra}]'")
    fused_loss = loss_fused or (liger and resolved.task == "causal-lm" and zero != 3 and not loss_tiled and
                                not sequence)
    if liger and not fused_loss and resolved.task == "causal-lm":
        why = ("ZeRO-3 partitions the head weight it reads outside the head's forward" if zero == 3 else
               "--loss tiled owns the loss" if loss_tiled else "Ulysses computes the loss from its shard's logits")
        notes.append(f"--kernels liger: without its fused linear cross-entropy ({why})")
    plan = KernelPlan(liger=liger, fused_loss=fused_loss, fp8=None if fp8 == "none" else fp8)
    notes.append(f"kernels: {plan.describe()}")
    return plan
