"""`--loss tiled`: the causal-LM loss computed a tile of tokens at a time, so that the [tokens, vocab] logits never
exist whole (transformers' loss upcasts them to fp32: 31.3 GiB for llama-1b at 64k tokens, before their gradient).

The loss is transformers' ForCausalLMLoss exactly: labels shifted left with -100 appended, logits = head(hidden)
in the model's dtype, upcast to fp32, cross-entropy summed over the labels that are not -100, divided by their
count. Two ways, both exact:

- ZeRO 0-2 (TiledHeadLoss): the head's weight is a whole tensor on every rank, so each tile's loss and its
  gradients (hidden, weight; the weight's accumulated in fp32) are computed together in the forward pass, and
  the backward pass only scales them by the gradient it receives. No second head matmul. DeepSpeed's own
  TiledFusedLogitsLoss (0.19.8) also computes the gradients in the forward pass, but it puts the weight's into
  .grad unscaled there: engine.backward divides the loss by grad-accum (and fp16 multiplies it by the loss scale),
  so its head gradient is grad-accum times too large (tests/test_tiled_loss.py shows it).
- ZeRO-3 (checkpointed tiles): the weight is partitioned, gathered only inside the head module's own forward, so
  each tile calls the module under non-reentrant activation checkpointing: its logits are freed after the forward
  and recomputed in the backward pass (one more head forward), and ZeRO-3's hooks see an ordinary module call.
"""

from __future__ import annotations

import math

IGNORE_INDEX = -100
TILE_LOGITS_BYTES = 512 * 2**20
"""Default tile: the tokens whose fp32 logits take 512 MiB (4,194 tokens at Llama's 32,000 words, 2,670 at GPT-2's
50,257): the tile's logits, their fp32 copy and gradient stay near 1.5 GiB, small beside a long sequence's
activations, and each tile's matmul is still thousands of rows."""


def default_tile_tokens(vocab_size: int) -> int:
    return max(1, TILE_LOGITS_BYTES // (4 * vocab_size))


def tiles(tokens: int, tile_tokens: int) -> int:
    return math.ceil(tokens / tile_tokens)


def shifted_labels(labels):
    """transformers' shift: the label of position i is the token at i + 1; the last position has none (-100)."""
    import torch

    return torch.nn.functional.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:]


def _tile_loss_and_grads(hidden, weight, labels):
    """Summed cross-entropy of one tile and its gradients with respect to hidden and weight (not scaled)."""
    import torch

    with torch.enable_grad():
        hidden = hidden.detach().requires_grad_(True)
        weight = weight.detach().requires_grad_(True)
        logits = torch.nn.functional.linear(hidden, weight).float()
        loss = torch.nn.functional.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction="sum")
        grad_hidden, grad_weight = torch.autograd.grad(loss, (hidden, weight))
    return loss.detach(), grad_hidden, grad_weight


def _tiled_head_loss_class():
    import torch

    class TiledHeadLoss(torch.autograd.Function):
        """loss = mean cross-entropy of linear(hidden, weight) over the labels that are not -100, tile by tile.
        hidden [N, d], weight [V, d], labels [N] (already shifted)."""

        @staticmethod
        def forward(ctx, hidden, weight, labels, tile_tokens: int):
            count = (labels != IGNORE_INDEX).sum()
            total = torch.zeros((), dtype=torch.float32, device=hidden.device)
            grad_hidden = torch.empty_like(hidden)
            grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
            for start in range(0, hidden.shape[0], tile_tokens):
                end = start + tile_tokens
                loss, tile_grad_hidden, tile_grad_weight = _tile_loss_and_grads(hidden[start:end], weight,
                                                                                labels[start:end])
                total += loss
                grad_hidden[start:end] = tile_grad_hidden
                grad_weight += tile_grad_weight
            ctx.save_for_backward(grad_hidden, grad_weight, count)
            ctx.weight_dtype = weight.dtype
            return total / count.clamp(min=1)

        @staticmethod
        def backward(ctx, grad):
            grad_hidden, grad_weight, count = ctx.saved_tensors
            scale = grad.float() / count.clamp(min=1)
            return (grad_hidden * scale.to(grad_hidden.dtype), (grad_weight * scale).to(ctx.weight_dtype), None,
                    None)

    return TiledHeadLoss


_FUNCTION = None


def tiled_head_loss(hidden, weight, labels, tile_tokens: int):
    """TiledHeadLoss.apply (the class is made on first use: importing this module does not import torch)."""
    global _FUNCTION
    if _FUNCTION is None:
        _FUNCTION = _tiled_head_loss_class()
    return _FUNCTION.apply(hidden, weight, labels, tile_tokens)


def checkpointed_tiles_loss(head, hidden, labels, tile_tokens: int):
    """The same loss through the head module, each tile under non-reentrant checkpointing (ZeRO-3)."""
    import torch
    from torch.utils.checkpoint import checkpoint

    def tile_sum(tile_hidden, tile_labels):
        logits = head(tile_hidden).float()
        return torch.nn.functional.cross_entropy(logits, tile_labels, ignore_index=IGNORE_INDEX, reduction="sum")

    count = (labels != IGNORE_INDEX).sum()
    total = sum(checkpoint(tile_sum, hidden[start:start + tile_tokens], labels[start:start + tile_tokens],
                           use_reentrant=False) for start in range(0, hidden.shape[0], tile_tokens))
    return total / count.clamp(min=1)


def liger_fused_loss():
    """Liger Kernel's fused linear cross-entropy (--loss fused): loss(weight, hidden, labels), the mean over the labels
    that are not -100, as transformers' loss; the logits exist a chunk at a time inside its Triton kernel. It always
    runs eagerly, outside a compiled graph (outside_compiled_graph)."""
    from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

    loss = LigerFusedLinearCrossEntropyLoss(ignore_index=IGNORE_INDEX, reduction="mean")
    return outside_compiled_graph(lambda weight, hidden, labels: loss(weight, hidden, labels))


def outside_compiled_graph(function):
    """`function`, kept out of torch.compile's graph (a graph break around it; --compile compiles the rest). Traced
    into the compiled step, Liger 0.8.5's fused linear cross-entropy returned a wrong loss with no error (llama-1b on
    an H200, torch 2.11: 2,056.5 at the second step where the eager loss is 10.0; every batch here has -100 labels,
    the case of linkedin/Liger-Kernel#1338); run as it runs uncompiled, its loss is the plain loss's
    (bench/kernels/README.md, part 7)."""
    import torch

    return torch.compiler.disable(function)


def wrap(model, tile_tokens: int | None, zero3: bool, fused: bool = False):
    """The causal LM `model` with its loss computed by tiles (or, fused, by Liger's fused linear cross-entropy): a
    module whose forward(input_ids, labels, ...) returns an output with .loss, as the HF model's does, for
    deepspeed.initialize."""
    import torch
    from transformers.modeling_outputs import CausalLMOutput

    fused_loss = liger_fused_loss() if fused else None

    class TiledLossLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, labels=None, attention_mask=None, position_ids=None, shift_labels=None):
            """shift_labels: labels already shifted (a sequence-parallel shard's, cut from the whole sequence's)."""
            hidden = self.model.base_model(input_ids=input_ids, attention_mask=attention_mask,
                                           position_ids=position_ids).last_hidden_state
            hidden = hidden.reshape(-1, hidden.shape[-1])
            flat_labels = (shift_labels if shift_labels is not None else shifted_labels(labels)).reshape(-1)
            head = self.model.get_output_embeddings()
            if fused_loss is not None:
                loss = fused_loss(head.weight, hidden, flat_labels)
            elif zero3:
                loss = checkpointed_tiles_loss(head, hidden, flat_labels, tile_tokens)
            else:
                loss = tiled_head_loss(hidden, head.weight, flat_labels, tile_tokens)
            return CausalLMOutput(loss=loss)

    head = model.get_output_embeddings()
    if head is None or not isinstance(head, torch.nn.Linear) or head.bias is not None:
        raise ValueError(f"--loss tiled needs a bias-free linear LM head; {type(model).__name__} has {head!r}")
    return TiledLossLM()
