"""Training FLOPs per token: the analytic "model FLOPs" behind TFLOP/s and MFU, and a torch flop-counter check.

Convention (what `model_flops_per_token` returns), per token of a training step (forward + backward):

    flops_per_token = 6 * N  +  12 * L * H * Q * T

- 6N: each parameter that multiplies an activation costs 2 FLOPs (one multiply-add) in the forward pass and 4 in
  the backward pass (gradient w.r.t. the input and w.r.t. the weight). Kaplan et al. 2020 (arXiv:2001.08361) §2.1:
  C ≈ 6N per training token (Kaplan's N leaves out every embedding matrix, and with it the LM-head matmul; dsx
  keeps the LM head, like nanoGPT); PaLM (Chowdhery et al. 2022, arXiv:2204.02311) Appendix B: 6N + 12LHQT.
- 12·L·H·Q·T: self-attention's two activation-by-activation matmuls (Q·Kᵀ and P·V), 2·T·Q FLOPs each per token
  per head in the forward pass, ×3 for forward + backward: 6·L·H·(2·Q·T). L = layers applied, H = query heads,
  Q = head dim, T = sequence length. As in PaLM and nanoGPT the full T×T score matrix counts, also for causal
  models (a causal kernel may skip the masked half; the convention does not). Grouped-query attention changes N
  (smaller K/V projections), not this term.
- No recomputation: activation checkpointing adds real work (a second forward) but no model FLOPs, by design
  of MFU (PaLM Appendix B: "model FLOPs", not "hardware FLOPs").

Which parameters make N (counted from the model built on the meta device, `param_stats`):
- Counted: every weight matrix used in a matmul (attention projections, MLP, ALBERT's 128->768 embedding
  projection, BERT/ALBERT's MLM transform, the LM head / MLM decoder), AND every 1-D parameter (biases,
  LayerNorm/RMSNorm weights), as nanoGPT and PaLM count "all parameters": these add 6 FLOPs per parameter per
  token that no matmul does (about 0.1% of GPT-2 124M; 1.1% of the 64-wide tiny models).
- Tied input embedding = LM head (GPT-2, BERT, ALBERT, Llama-3.2): counted ONCE, as the LM-head matmul
  (hidden x vocab per token, real compute); the lookup that reads it is free.
- Not counted (lookups, no matmul): learned position embeddings (GPT-2 wpe, BERT/ALBERT position_embeddings),
  token-type embeddings, and an UNTIED input embedding (Llama-2-7B embed_tokens; its separate lm_head counts).
- For GPT-2 this is exactly nanoGPT's `estimate_mfu` (model.py: `N = self.get_num_params()`, which subtracts
  only the position embedding `wpe`, keeping the tied `wte` "because ... these params are actually used as
  weights in the final layer"; `flops_per_token = 6*N + 12*L*H*Q*T`, "see PaLM paper Appendix B").
  /work/shared/gpu/README.md's baseline table used N = all parameters (wpe included): 0.55% higher for GPT-2 124M.
- Shared weights count once per application: ALBERT runs its one layer group num_hidden_layers times, so each
  group parameter counts num_hidden_layers / num_hidden_groups times (ALBERT-base does BERT-base work with a
  ninth of the parameters).
- Masked LM: transformers' BertForMaskedLM / AlbertForMaskedLM run the MLM head (transform + vocab decoder) on
  every position, masked or not, and the loss then ignores the -100 labels, so the head counts for every token.
  Causal LM: the LM head runs on every position (logits_to_keep=0 in training).

Cross-check (`flop_counter_flops_per_step`): torch.utils.flop_counter.FlopCounterMode counts matmuls (mm, addmm,
bmm, SDPA kernels) at 2 FLOPs per multiply-add, forward and backward; it counts no elementwise op. So per token
    counter = analytic − 6·(1-D parameters)            exactly, for GPT-2, BERT and ALBERT;
Llama's counter adds its RoPE frequency matmul where transformers computes it with one (5.17: head_dim FLOPs per
position for the whole batch, forward only, ~1e-5 of the total; 5.23 does not).
The counter runs eager attention (counter_attn says why, and when not). Measured, transformers 5.23, CPU:
gpt2-tiny at seq 64: analytic 1,082,880 vs counter 1,072,128 FLOPs/token, ratio 1.0100 (1.0108 at seq 16, 1.0092
at seq 128: only the attention term's share moves it); gpt2 124M (vocab 50304, seq 1024): 1.0009. On an H100
(torch 2.11, transformers 5.17), eager: gpt2 1.0009, gpt2-xl 1.0006, bert-base 1.0013, albert-base 1.0015,
llama-1b and llama-7b 1.0000 (each check 0.1-1.3 s, under 8 GiB); counting CUDA SDPA instead of eager gives 0.979
for gpt2: the +1/6 attention recomputation counter_attn describes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsx.models import FAMILIES, ResolvedModel, build_model, meta_model, resolve_model, synthetic_batch


@dataclass(frozen=True)
class ParamStats:
    """Parameters of one resolved model, split the way the FLOP convention needs (see the module docstring)."""

    total: int
    """Distinct parameters (tied counted once): transformers' num_parameters()."""
    matmul: int
    """Weight matrices that multiply activations, times the number of times each is applied per token."""
    vector: int
    """1-D parameters (biases, norm weights), times applications."""
    lookup: int
    """Embedding tables only read by index (positions, token types, an untied input embedding): not in N."""

    @property
    def flop_params(self) -> int:
        """N of 6N: matmul + vector."""
        return self.matmul + self.vector


def _applications(resolved: ResolvedModel, name: str) -> int:
    """How many times the parameter runs per token: ALBERT's shared groups run num_hidden_layers/groups times."""
    if resolved.family == "albert" and ".albert_layer_groups." in name:
        config = resolved.hf_config
        return config.num_hidden_layers // config.num_hidden_groups
    return 1


_STATS: dict[str, ParamStats] = {}


def param_stats(resolved: ResolvedModel) -> ParamStats:
    """ParamStats of the model built on the meta device; kept in this process and in dsx's disk cache
    (dsx.cache.derived_path), so a later command (`dsx estimate`) does not build the model again."""
    import dataclasses
    from pathlib import Path

    from dsx.cache import derived
    from dsx.models import _cache_key, disk_key

    key = _cache_key(resolved)
    if key not in _STATS:
        sources = [Path(__file__), Path(__file__).with_name("models.py")]
        _STATS[key] = derived("param-stats", disk_key(resolved), sources, lambda: _measure_param_stats(resolved),
                              lambda cached: ParamStats(**cached), dataclasses.asdict)
    return _STATS[key]


def _measure_param_stats(resolved: ResolvedModel) -> ParamStats:
    import torch

    model = meta_model(resolved)
    embedding_weights = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    matmul_weights = {id(m.weight) for m in model.modules()
                      if isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D"}  # GPT-2's Conv1D
    total = matmul = vector = lookup = 0
    for name, p in model.named_parameters():  # tied parameters come once
        n = p.numel()
        total += n
        if id(p) in embedding_weights and id(p) not in matmul_weights:
            lookup += n
        elif p.dim() >= 2:
            matmul += n * _applications(resolved, name)
        else:
            vector += n * _applications(resolved, name)
    return ParamStats(total, matmul, vector, lookup)


def attention_layers(resolved: ResolvedModel) -> int:
    """Attention layers run per forward (ALBERT: num_hidden_layers x inner_group_num)."""
    config = resolved.hf_config
    if resolved.family == "albert":
        return config.num_hidden_layers * config.inner_group_num
    return config.num_hidden_layers


def attention_flops_per_token(resolved: ResolvedModel) -> float:
    """12·L·H·Q·T (PaLM Appendix B), forward + backward."""
    return 12.0 * attention_layers(resolved) * resolved.num_heads * resolved.head_dim * resolved.seq_len


def model_flops_per_token(resolved: ResolvedModel, attended_fraction: float = 1.0) -> float:
    """Training (forward + backward) FLOPs per token: 6·N + 12·L·H·Q·T, N as in the module docstring.
    Multiply by tokens per step (micro_batch x seq_len x grad_accum x data-parallel ranks) for a step.
    `attended_fraction`: block-sparse attention computes that share of a dense attention's token pairs (dsx.sparse:
    the row's sparse_attention.attended_fraction), so the attention term is scaled by it: an MFU from the dense
    count would credit a sparse run with work it skipped (gpt2-medium at 64k tokens: 165% "MFU")."""
    return 6.0 * param_stats(resolved).flop_params + attended_fraction * attention_flops_per_token(resolved)


def flop_counter_flops_per_step(model: Any, batch: dict) -> float:
    """FLOPs torch.utils.flop_counter counts for one forward + backward of `model(**batch).loss`.

    Use a plain transformers model (not a DeepSpeed engine). Gradients it creates are dropped afterwards, so the
    model is left as it was found (parameters with a gradient before keep it, with this step's added)."""
    from torch.utils.flop_counter import FlopCounterMode

    had_grad = {id(p) for p in model.parameters() if p.grad is not None}
    with FlopCounterMode(display=False) as counter:
        out = model(**batch)
        loss = out.get("loss") if hasattr(out, "get") else out[0]  # transformers ModelOutput is a dict
        if loss is None:
            raise ValueError("the model returned no loss: the batch needs labels")
        loss.backward()
    for p in model.parameters():
        if id(p) not in had_grad:
            p.grad = None
    return float(counter.get_total_flops())


EAGER_SCORES_LIMIT_BYTES = 1 << 30
"""Largest fp32 heads x seq x seq score matrix (micro-batch 1) for which the counter runs eager attention."""


def counter_attn(resolved: ResolvedModel, attn: str, device: Any) -> str:
    """The attention implementation flop_counter_flops_per_token uses for a run with `attn` on `device`.

    Eager (plain matmuls) whenever it fits: it counts exactly the 12·L·H·Q·T of the convention. The kernels are
    counted differently by torch's flop registry: it has no formula for the CPU SDPA kernel
    (aten._scaled_dot_product_flash_attention_for_cpu, torch 2.11-2.13: ALBERT's and Llama's attention would
    count 0), its CUDA SDPA backward formulas include the flash-style recomputation of Q·Kᵀ (14·L·H·Q·T: +1/6
    of the attention term, hardware FLOPs rather than model FLOPs), and flash_attn is not in it. Only on CUDA
    with a score matrix over EAGER_SCORES_LIMIT_BYTES (long sequences) is sdpa kept, to bound memory."""
    import torch

    scores = 4 * resolved.num_heads * resolved.seq_len ** 2
    if attn == "sdpa" and torch.device(device).type == "cuda" and scores > EAGER_SCORES_LIMIT_BYTES:
        return "sdpa"
    return "eager"


def flop_counter_flops_per_token(resolved: ResolvedModel, *, device: Any = "cpu", attn: str = "eager",
                                 micro_batch: int = 1) -> float:
    """flop_counter_flops_per_step / tokens, for the whole resolved model, cheaply.

    Every layer of these models is identical, so the counted FLOPs are exactly linear in depth:
    C(L) = C(1) + (L-1)·(C(2) - C(1)). This builds the model with 1 and 2 layers (same width, vocab, seq_len),
    counts one step of each on `device`, and extrapolates: gpt2-xl or llama-7b are checked with ~1/20 of their
    memory and time. Models of 2 layers or fewer (and ALBERT with several layer groups) are counted directly.
    Attention runs as counter_attn(resolved, attn, device) says. The caller's torch RNG state is left untouched."""
    import torch

    attn = counter_attn(resolved, attn, device)
    dev = torch.device(device)
    rng_devices = [dev.index if dev.index is not None else torch.cuda.current_device()] if dev.type == "cuda" else []
    layers_key = FAMILIES[resolved.family].layers_key
    depth = resolved.num_layers
    direct = depth <= 2 or (resolved.family == "albert" and resolved.hf_config.num_hidden_groups != 1)
    depths = [depth] if direct else [1, 2]
    counts = []
    with torch.random.fork_rng(devices=rng_devices):
        torch.manual_seed(0)
        for d in depths:
            r = resolved if d == depth else resolve_model(resolved.name, {**resolved.overrides, layers_key: d},
                                                          resolved.seq_len, resolved.vocab_pad)
            model = build_model(r, attn, device=device)
            batch = synthetic_batch(r, micro_batch, device, torch.Generator().manual_seed(0))
            counts.append(flop_counter_flops_per_step(model, batch))
            del model
    total = counts[0] if direct else counts[0] + (depth - 1) * (counts[1] - counts[0])
    return total / (micro_batch * resolved.seq_len)
