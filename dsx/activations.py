"""Activation memory of a model, measured on the meta device: what autograd saves for the backward pass.

The model is built on the meta device (shapes only: no memory, no compute) and one forward + loss runs under
`torch.autograd.graph.saved_tensors_hooks`. Every tensor autograd keeps is recorded once per storage (views such
as GPT-2's q/k/v split of one projection share a storage), parameters excluded. That is the Korthikanti et al.
accounting done by the model's own code, so it follows each family's real layers (GPT-2's python tanh-GELU keeps
four 4h tensors, Llama's SwiGLU three, BERT's head a dense + LayerNorm) without a hand-written table per family.

Two things run differently on a GPU than on the meta device, and the probe makes them run as on a GPU:
- attention: `sdpa` and `flash` on CUDA run a fused kernel that keeps q, k, v, its output and one fp32 logsumexp
  per head and position (no s x s matrix); the probe registers an attention function that saves exactly those.
  `eager` runs the family's own eager attention function (its s x s tensors are recorded as they are), without
  the causal-mask tensor (shared by all layers, saved by nothing).
- dropout: CUDA's fused dropout keeps a 1-byte mask; the meta/CPU path keeps a mask in the input's dtype. The
  probe's dropout keeps a bool mask.
- autocast (`bf16-autocast`): torch.autocast has no meta-device path, so the probe casts as CUDA's autocast does
  (its op lists: matrix products' inputs to bf16, norms, softmax, losses, pow and exp to fp32, the rest by type
  promotion) over the fp32 model: the fp32 residual stream, GPT-2's fp32 GELU and the bf16 weight copies are kept.

Everything is recorded per micro-batch sample (runs at batch 1 and 2: the difference is per sample, the rest -
causal masks, rotary tables - does not grow with the batch), split into the layers' part (per layer call) and the
rest (embeddings, final norm, LM head, loss), plus the bytes of each layer's input: what activation checkpointing
keeps per layer instead of the layer's saved tensors.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dsx.config_facts import AUTOCAST

if TYPE_CHECKING:  # pragma: no cover
    from dsx.models import ResolvedModel

LAYER_CLASSES = {"gpt2": "GPT2Block", "bert": "BertLayer", "albert": "AlbertLayer", "llama": "LlamaDecoderLayer"}
"""The transformer block of each family: the unit `gradient_checkpointing_enable` checkpoints."""

MLP_CLASSES = {"llama": "LlamaMLP"}
"""The MLP of each family --tiled-mlp covers (dsx.rank.memory_savers): its saved bytes are recorded apart."""

PROBE_ATTENTION = {"eager": "dsx_eager_attention", "sdpa": "dsx_fused_attention", "flash": "dsx_fused_attention"}


@dataclass(frozen=True)
class Saved:
    """Bytes autograd keeps for one forward, split like the model runs: a + b x micro_batch each."""

    layer_calls: int
    """How many times a transformer block ran (ALBERT: 12 calls of one shared layer)."""
    layers_per_sample: int
    """All layer calls together, per sample."""
    layers_fixed: int
    """All layer calls together, independent of the batch (e.g. a mask or rotary table saved by a layer)."""
    largest_layer_per_sample: int
    """The largest single layer call, per sample (what one recomputed layer holds under checkpointing)."""
    layer_input_per_sample: int
    """One layer's input hidden states, per sample (what checkpointing keeps per layer)."""
    rest_per_sample: int
    """Embeddings, final norm, LM head and loss, per sample."""
    rest_fixed: int
    mlp_per_sample: int = 0
    """What one layer's MLP saves (its input included), per sample; 0 for a family without MLP_CLASSES."""
    logits_per_sample: int = 0
    """Bytes of the logits given to cross_entropy (GPT-2/Llama upcast them to fp32, BERT/ALBERT do not), per sample:
    the size of each of the two logits gradients alive together in the loss backward."""

    def forward_bytes(self, micro_batch: int, act_ckpt: bool) -> int:
        """What is held at the end of the forward pass (the start of the backward pass)."""
        if act_ckpt:
            layers = self.layer_calls * self.layer_input_per_sample * micro_batch
        else:
            layers = self.layers_fixed + self.layers_per_sample * micro_batch
        return layers + self.rest_fixed + self.rest_per_sample * micro_batch

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", AUTOCAST: "float32"}
"""The probe model's dtype per precision (dsx.config_facts.PRECISIONS): autocast's weights are fp32."""


def _dtype(precision: str):
    import torch

    return getattr(torch, _DTYPES[precision])


AUTOCAST_TO_BF16 = frozenset({"addmm", "addbmm", "baddbmm", "bmm", "mm", "matmul", "__matmul__", "linear", "conv1d",
                              "scaled_dot_product_attention"})
"""CUDA autocast's lower-precision ops the models here call (torch.amp's op reference): inputs cast to bf16."""
AUTOCAST_TO_FP32 = frozenset({"layer_norm", "group_norm", "softmax", "softmin", "log_softmax", "cross_entropy",
                              "nll_loss", "mse_loss", "pow", "__pow__", "__rpow__", "exp", "expm1", "log", "log1p",
                              "log2", "log10", "rsqrt", "reciprocal", "norm", "normalize", "sum", "cumsum", "cumprod",
                              "prod", "softplus"})
"""CUDA autocast's fp32 ops the models here call: inputs cast to fp32."""


def _meta_autocast():
    """A torch function mode casting as torch.autocast(cuda, bfloat16) does, for the meta device (which has no
    autocast): floating inputs of AUTOCAST_TO_BF16 ops to bf16, of AUTOCAST_TO_FP32 ops to fp32."""
    import torch
    from torch.overrides import TorchFunctionMode

    def cast(value, dtype):
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != dtype:
            return value.to(dtype)
        if isinstance(value, (list, tuple)):
            return type(value)(cast(v, dtype) for v in value)
        return value

    class MetaAutocast(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            dtype = torch.bfloat16 if name in AUTOCAST_TO_BF16 else torch.float32 if name in AUTOCAST_TO_FP32 else None
            if dtype is not None:
                args, kwargs = cast(args, dtype), {k: cast(v, dtype) for k, v in kwargs.items()}
            return func(*args, **kwargs)

    return MetaAutocast()


class _FusedAttention:
    """An autograd function keeping what PyTorch's flash / memory-efficient SDPA kernels keep: q, k, v, the output
    and a float32 logsumexp per (batch, head, position). Its output is empty (meta device: nothing is computed)."""

    @staticmethod
    @functools.cache
    def function():
        import torch

        class Fused(torch.autograd.Function):
            @staticmethod
            def forward(ctx, query, key, value):
                batch, heads, length, _ = query.shape
                out = query.new_empty(query.shape[:-1] + (value.shape[-1],))
                logsumexp = query.new_empty((batch, heads, length), dtype=torch.float32)
                ctx.save_for_backward(query, key, value, out, logsumexp)
                return out

            @staticmethod
            def backward(ctx, grad):  # pragma: no cover
                raise RuntimeError("the activation probe only runs forward, on the meta device")

        return Fused

    @staticmethod
    def forward(module, query, key, value, attention_mask, **kwargs):
        """transformers' attention-function signature; returns (output [b, s, heads, d], no weights) as
        transformers' sdpa_attention_forward does (the transpose + contiguous copy included)."""
        out = _FusedAttention.function().apply(query, key, value)
        return out.transpose(1, 2).contiguous(), None


def _bool_mask_dropout():
    import torch

    class BoolMaskDropout(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            mask = torch.empty(x.shape, dtype=torch.bool, device=x.device)
            ctx.save_for_backward(mask)
            return x.new_empty(x.shape)

        @staticmethod
        def backward(ctx, grad):  # pragma: no cover
            raise RuntimeError("the activation probe only runs forward, on the meta device")

    def dropout(input, p=0.5, training=True, inplace=False):
        if not training or p == 0:
            return input
        return BoolMaskDropout.apply(input)

    return dropout


def _family_eager_attention(module, query, key, value, attention_mask, **kwargs):
    """The family's own `eager_attention_forward` (its matmul, softmax, dropout, matmul), without the causal mask
    tensor: adding a mask keeps nothing for backward, and building one on the meta device fails."""
    import sys

    return sys.modules[type(module).__module__].eager_attention_forward(module, query, key, value, None, **kwargs)


def _register_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register("dsx_fused_attention", _FusedAttention.forward)
    AttentionInterface.register("dsx_eager_attention", _family_eager_attention)


def _record(resolved: "ResolvedModel", attn: str, precision: str, micro_batch: int) -> dict[str, Any]:
    """One meta-device forward + loss; bytes saved per layer call, per layer input, and outside the layers."""
    import torch
    import torch.nn.functional as F

    from dsx.models import config_of, from_config

    _register_attention()
    config = copy.deepcopy(config_of(resolved))
    with torch.device("meta"):
        model = from_config(resolved.task, config, PROBE_ATTENTION[attn])
    model.to(_dtype(precision))
    model.train()
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    seen: set[int] = set()
    regions: list[int] = [0]  # [0] = outside any layer; then one entry per layer call
    inputs: list[int] = []
    mlps: list[int] = []  # one entry per MLP call (MLP_CLASSES), inside its layer's region too
    current = [0]
    in_mlp = [False]

    def pack(tensor):
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key not in params and key not in seen:
            seen.add(key)
            regions[current[0]] += storage.nbytes()
            if in_mlp[0]:
                mlps[-1] += storage.nbytes()
        return tensor

    def enter_mlp(module, args):
        mlps.append(0)
        in_mlp[0] = True

    def leave_mlp(module, args, output):
        in_mlp[0] = False

    def enter(module, args, kwargs):
        hidden = args[0] if args else kwargs.get("hidden_states")
        inputs.append(hidden.untyped_storage().nbytes())
        regions.append(0)
        current[0] = len(regions) - 1

    def leave(module, args, output):
        current[0] = 0

    layer_class = LAYER_CLASSES[resolved.family]
    handles = []
    for module in model.modules():
        if type(module).__name__ == layer_class:
            handles.append(module.register_forward_pre_hook(enter, with_kwargs=True))
            handles.append(module.register_forward_hook(leave))
        elif type(module).__name__ == MLP_CLASSES.get(resolved.family):
            handles.append(module.register_forward_pre_hook(enter_mlp))
            handles.append(module.register_forward_hook(leave_mlp))
    shape = (micro_batch, resolved.seq_len)
    ids = torch.zeros(shape, dtype=torch.long, device="meta")
    batch: dict[str, Any] = {"input_ids": ids, "labels": ids}
    if resolved.task == "masked-lm":
        batch["attention_mask"] = torch.ones(shape, dtype=torch.long, device="meta")
    saved_dropout, saved_cross_entropy = F.dropout, F.cross_entropy
    logits: list[int] = []

    inside = [0]

    def cross_entropy(input, *args, **kwargs):
        # under _meta_autocast the real function calls this one again with its fp32 input: that one counts
        if inside[0]:
            logits[-1] = input.untyped_storage().nbytes()
        else:
            logits.append(input.untyped_storage().nbytes())
        inside[0] += 1
        try:
            return saved_cross_entropy(input, *args, **kwargs)
        finally:
            inside[0] -= 1

    F.dropout, F.cross_entropy = _bool_mask_dropout(), cross_entropy
    autocast = _meta_autocast() if precision == AUTOCAST else contextlib.nullcontext()
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast:
            model(**batch)
    finally:
        F.dropout, F.cross_entropy = saved_dropout, saved_cross_entropy
        for handle in handles:
            handle.remove()
    return {"rest": regions[0], "layers": regions[1:], "inputs": inputs, "logits": sum(logits), "mlps": mlps}


_CACHE: dict[str, Saved] = {}


def _measure(resolved: "ResolvedModel", attn: str, precision: str) -> Saved:
    one, two = (_record(resolved, attn, precision, b) for b in (1, 2))
    if not one["layers"]:
        raise RuntimeError(f"no {LAYER_CLASSES[resolved.family]} ran in {resolved.name}'s forward")
    per_layer = [b - a for a, b in zip(one["layers"], two["layers"])]
    layers_per_sample = sum(per_layer)
    rest_per_sample = two["rest"] - one["rest"]
    return Saved(
        layer_calls=len(one["layers"]),
        layers_per_sample=layers_per_sample,
        layers_fixed=sum(one["layers"]) - layers_per_sample,
        largest_layer_per_sample=max(per_layer),
        layer_input_per_sample=two["inputs"][0] - one["inputs"][0],
        rest_per_sample=rest_per_sample,
        rest_fixed=one["rest"] - rest_per_sample,
        logits_per_sample=two["logits"] - one["logits"],
        mlp_per_sample=two["mlps"][0] - one["mlps"][0] if one["mlps"] else 0,
    )


def saved_bytes(resolved: "ResolvedModel", attn: str = "sdpa", precision: str = "bf16") -> Saved:
    """What autograd keeps for `resolved` at its seq_len, per sample and fixed (see the module docstring)."""
    from dsx.models import _cache_key, disk_key

    if attn not in PROBE_ATTENTION:
        raise ValueError(f"unknown attention '{attn}'")
    if precision not in _DTYPES:
        raise ValueError(f"unknown precision '{precision}'")
    key = f"{_cache_key(resolved)}|{resolved.seq_len}|{attn}|{precision}"
    if key not in _CACHE:
        from pathlib import Path

        from dsx.cache import derived

        _CACHE[key] = derived("saved", [disk_key(resolved), resolved.seq_len, attn, precision], [Path(__file__)],
                              lambda: _measure(resolved, attn, precision), lambda cached: Saved(**cached),
                              Saved.as_dict)
    return _CACHE[key]


COMPILED_LAYER_PARTS = ("layer activations", "recomputed layer")
COMPILED_HEAD_PARTS = ("embeddings, head, loss", "loss gradients")


def compiled(parts: dict[str, int], family: str) -> dict[str, int]:
    """The activation parts of dsx.estimate for the compiled model (engine.compile(), inductor): what the layers
    save and the embeddings/head/loss part with the loss gradients, each x its factor for the model's family
    (dsx.calibration.compile_memory_factors); the checkpointed layer inputs are inputs, kept as they are. The factors
    are measured, not counted: the meta-device probe runs eager autograd (dsx.calibration says which rows set them)."""
    from dsx.calibration import compile_memory_factors

    layers, head = compile_memory_factors(family)
    factor = {**dict.fromkeys(COMPILED_LAYER_PARTS, layers), **dict.fromkeys(COMPILED_HEAD_PARTS, head)}
    return {part: int(size * factor.get(part, 1.0)) for part, size in parts.items()}
