"""Two memory savers of Arctic Long Sequence Training beside the tiled loss (dsx.rank.tiled_loss), for long sequences:

- `--act-ckpt-offload`: under activation checkpointing a layer keeps only its input hidden states for the backward
  pass ([tokens, hidden] per layer: 1 GiB a layer for Llama-3-8B at 128k tokens in bf16, 32 GiB over its layers).
  Each checkpointed layer's input is copied to host memory (pinned, asynchronously on CUDA) as the layer starts,
  and the checkpoint keeps only that copy; the recompute in the backward pass copies it back. The checkpoint's own
  input is a one-element placeholder of the input's shape, so the hidden states' gradient passes from the layer's
  recompute to the previous layer on the GPU: no gradient crosses to the host (the first version passed the host
  copy itself and paid two synchronous pageable copies of every layer's gradient: 1.04 GB/s in all, 8.2 s a step
  for llama-1b at 131k tokens). The GPU input is freed as soon as the layer has consumed it (nothing else holds it:
  the previous layer is checkpointed too).
  The host copy is held in pieces whose sizes are powers of two (host_pieces): torch's caching host allocator rounds
  each pinned allocation up to the next power of two, so one 1.5 GiB copy would take 2 GiB (llama-8b at 196,608
  tokens: 64 GiB of host memory for 48, and the 128 GiB host killed the rank).
- `--tiled-mlp`: each Llama MLP runs through DeepSpeed's TiledMLP (deepspeed.runtime.sequence_parallel.ulysses_sp),
  which computes the MLP a slice of tokens at a time and recomputes each slice in the backward pass, so the
  [tokens, intermediate_size] tensors of the gate, up and product never exist whole (4 x 14336 x 2 bytes a token for
  Llama-3-8B: 14 GiB at 128k tokens, the largest part of a recomputed layer). Slices: ceil(tokens / hidden), as
  DeepSpeed's own example; every rank's windows have the same length, so every rank slices alike (ZeRO-3 gathers
  the weights once per slice on every rank).
  TiledMLP tells ZeRO (ds_grad_is_ready) to reduce the weights' gradient only after the last slice.
"""

from __future__ import annotations

import functools
import math


def enable_checkpointing(model) -> None:
    """transformers' activation checkpointing of every layer, non-reentrant, by the name the installed transformers
    gives it: activation_checkpointing_enable where it exists (5.24 has it, and warns that
    gradient_checkpointing_enable, now its alias, goes in v6), gradient_checkpointing_enable before."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def offload_checkpointed_inputs(model, host_copies: list | None = None) -> int:
    """Make every checkpointed layer of `model` (after enable_checkpointing) keep its input on the host.
    Returns the number of layers changed. `host_copies`, when given, collects each host copy (tests)."""
    changed = 0
    for module in model.modules():
        original = getattr(module, "_gradient_checkpointing_func", None)
        if original is None or getattr(original, "dsx_offloads", False) or hasattr(module, "base_model_prefix"):
            continue  # the models themselves carry the function too, but only their layers call it
        module._gradient_checkpointing_func = _offloading(original, host_copies)
        changed += 1
    return changed


SMALLEST_PIECE = 64 * 2**20
"""Bytes below which the rest of a host copy is one last piece (rounded up by the allocator: at most this much lost)."""


def host_pieces(size: int) -> list[int]:
    """The byte sizes a host copy of `size` bytes is held in: powers of two, largest first, down to SMALLEST_PIECE,
    then the rest. 1.5 GiB -> 1 GiB + 512 MiB."""
    pieces = []
    while size >= SMALLEST_PIECE:
        pieces.append(1 << (size.bit_length() - 1))
        size -= pieces[-1]
    return pieces + ([size] if size else [])


def pinned_bytes(size: int) -> int:
    """Host memory a copy of `size` bytes takes once torch's caching host allocator has rounded each piece."""
    return sum(1 << (piece - 1).bit_length() for piece in host_pieces(size))


class _HostCopy:
    """One checkpointed layer input: its host copy (pieces of the flattened tensor), its shape, and the device tensor
    until the layer's first forward takes it."""

    __slots__ = ("pieces", "shape", "on_device", "device", "pinned")


def _offloading(checkpoint, host_copies: list | None):
    """checkpoint(function, hidden, *args, **kwargs) with `hidden` parked on the host: the checkpoint holds a
    placeholder and the host copy; inside the checkpointed function the placeholder becomes the hidden states again
    (the device tensor itself in the forward, a copy from the host in the recompute)."""
    import torch

    park, unpark = _park_functions()

    def offloaded(function, *args, **kwargs):
        if not args or not isinstance(args[0], torch.Tensor) or not args[0].requires_grad:
            return checkpoint(function, *args, **kwargs)
        parked = _HostCopy()
        placeholder = park.apply(args[0], parked)
        if host_copies is not None:
            host_copies.append(parked.pieces)

        def on_device(placeholder, parked, *rest, **kw):
            return function(unpark.apply(placeholder, parked), *rest, **kw)

        return checkpoint(on_device, placeholder, parked, *args[1:], **kwargs)

    offloaded.dsx_offloads = True
    return offloaded


@functools.cache
def _park_functions():
    """The two autograd functions of a parked input (built on first use: the estimator imports this module without
    torch). Park: hidden -> placeholder, copying hidden to the host. Unpark: placeholder -> hidden on the device.
    Both pass the gradient through unchanged, on the device."""
    import torch

    class Park(torch.autograd.Function):
        @staticmethod
        def forward(ctx, hidden, parked):
            parked.device, parked.pinned, parked.shape = hidden.device, hidden.device.type == "cuda", hidden.shape
            flat, parked.pieces, start = hidden.reshape(-1), [], 0
            for size in host_pieces(flat.numel() * flat.element_size()):
                count = size // flat.element_size()
                piece = torch.empty(count, dtype=flat.dtype, device="cpu", pin_memory=parked.pinned)
                parked.pieces.append(piece.copy_(flat[start:start + count], non_blocking=parked.pinned))
                start += count
            parked.on_device = hidden
            return hidden.new_zeros(1).expand(hidden.shape)  # one element, whatever the shape

        @staticmethod
        def backward(ctx, grad):
            return grad, None

    class Unpark(torch.autograd.Function):
        @staticmethod
        def forward(ctx, placeholder, parked):
            if parked.on_device is not None:  # the first forward: the input is still on the device
                hidden, parked.on_device = parked.on_device, None
                return hidden.detach()
            hidden = torch.empty(parked.shape.numel(), dtype=parked.pieces[0].dtype, device=parked.device)
            start = 0  # the recompute
            for piece in parked.pieces:
                hidden[start:start + piece.numel()].copy_(piece, non_blocking=parked.pinned)
                start += piece.numel()
            return hidden.view(parked.shape)

        @staticmethod
        def backward(ctx, grad):
            return grad, None

    return Park, Unpark


def tile_mlps(model, family: str) -> int:
    """Run every MLP of a Llama-family `model` through DeepSpeed's TiledMLP; returns the number of MLPs changed."""
    if family != "llama":
        raise ValueError(f"--tiled-mlp covers Llama-family MLPs, not {family}")
    changed = 0
    for module in model.modules():
        if type(module).__name__ == "LlamaMLP" and not getattr(module, "dsx_tiled", False):
            module.forward = functools.partial(_tiled_forward, module)
            module.dsx_tiled = True
            changed += 1
    return changed


def mlp_slices(tokens: int, hidden: int) -> int:
    """Slices of a sequence of `tokens` tokens: ceil(tokens / hidden), DeepSpeed's TiledMLP example's choice."""
    return max(1, math.ceil(tokens / hidden))


def _llama_mlp(module, x):
    return module.down_proj(module.act_fn(module.gate_proj(x)) * module.up_proj(x))


def _tiled_forward(module, x):
    from deepspeed.runtime.sequence_parallel.ulysses_sp import TiledMLP

    slices = mlp_slices(x.shape[-2], x.shape[-1])  # the same on every rank: dsx's batches are fixed-length windows
    weights = [module.gate_proj.weight, module.up_proj.weight, module.down_proj.weight]
    return TiledMLP.apply(_llama_mlp, module, x, slices, weights)
