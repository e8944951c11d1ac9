"""The estimator's ground floor: what a prediction is asked about (Setup), the model states and activations in GPU
bytes, the FLOPs, the offloaded share. dsx.estimate (the package docstring) says the arithmetic; its modules above
this one add the peak and speed (predict), the host (host), pipeline stages (pipeline) and result rows (rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsx.calibration import GPUS, GpuKind
from dsx.config_facts import (checks_overflow, compute_precision, offload_devices, precision_of, weights_precision,
                              zero_stage)


class EstimateError(ValueError):
    """A request the estimator cannot answer: the message says why."""


OPTIMIZER_STATE_BYTES = {"adam": 8, "adamw": 8, "fusedadam": 8, "lamb": 8, "fusedlamb": 8, "onebitadam": 8,
                         "zerooneadam": 8, "onebitlamb": 8, "lion": 4, "fusedlion": 4, "adagrad": 4, "sgd": 4,
                         "muon": 4}


@dataclass(frozen=True)
class Setup:
    """What the estimate depends on (the same things a `dsx run` trial is made of)."""

    resolved: Any
    ds_config: dict
    world_size: int
    micro_batch: int
    grad_accum: int = 1
    attn: str = "sdpa"
    act_ckpt: bool = False
    gpu: GpuKind = GPUS["h100-80gb"]
    memory_limit: int | None = None
    """--memory-cap: what one rank may use instead of the GPU's memory."""
    pipeline_stages: int | None = None
    """--pipeline-stages: world_size = stages x data-parallel replicas; the estimate is the largest stage's."""
    pipeline_partition: str = "parameters"
    compile: bool = False
    """--compile: DeepSpeed's engine.compile() (dsx.calibration's compile factors)."""
    host_memory: int | None = None
    """RAM of the host the ranks share (--host-memory, or this machine's); None: host memory is not checked."""
    nvme_free: int | None = None
    """Free bytes of the NVMe offload path (--nvme-free, or measured under --nvme-path); None: not checked."""
    ranks_per_host: int | None = None
    """Ranks sharing one host's RAM and NVMe; None: all world_size ranks (one host)."""
    loss_tile_tokens: int | None = None
    """--loss tiled's tokens per tile (dsx.rank.tiled_loss); None: the plain loss, whose logits exist whole."""
    sequence_parallel: int | None = None
    """--sequence-parallel N (Ulysses): each rank holds seq_len / N tokens of its group's micro-batch."""
    act_ckpt_offload: bool = False
    """--act-ckpt-offload: the checkpointed layer inputs live in host memory (two in flight on the GPU)."""
    tiled_mlp: bool = False
    """--tiled-mlp: each MLP keeps only its input; one slice of its activations is alive in its backward pass."""
    liger: bool = False
    """--kernels liger: Liger's kernels run (its fused loss is priced through loss_tile_tokens)."""
    fp8: str | None = None
    """--fp8 RECIPE: torchao's float8 training of the decoder's linear layers."""
    sparse_kept_tiles: int | None = None
    """--sparse-attention: the 128-token tiles a head's layout keeps (dsx.sparse.planning.kept_tiles_per_head);
    None: dense attention."""
    link_busbw: float | None = None
    """--link-bandwidth: NCCL's bus bandwidth between the ranks in bytes/s (between nodes: the network's); None: the
    GPU kind's NVLink (GpuKind.link_busbw)."""
    comm_log: bool = False
    """DeepSpeed's comms logger on in the timed steps (dsx.comm.logger.logger_in_timed_steps: a 1-bit run's, or one
    with fewer than two warm-up steps; dsx run counts the warm-up steps otherwise): it synchronises the device after
    every collective, so on several ranks the step waits for each (dsx.estimate.predict.comm_logger_seconds)."""
    host_loop_ns: float | None = None
    """The Python speed of the host the run ran on (a row's host_cpu.python_loop_ns, dsx.host): ZeRO-3's hooks scale
    with it (dsx.calibration.GpuKind.host_loop_ns); None: the calibration host's."""
    first_step_only: bool = False
    """A row that ran one step (no warm-up): Adam makes its moments in that step's optimizer step, so its forward
    and backward ran without them (judging such rows only; training runs more steps)."""
    activation_margin: float = 0.0
    """Share of the predicted activations (at the forward/backward peak) that must stay free on the GPU besides
    what fits: `dsx estimate --longest` plans with dsx.fit.ACTIVATION_ERROR; 0 elsewhere."""


def zero_layout(config: dict) -> tuple[int, str, str, int]:
    """(ZeRO stage, optimizer offload device, parameter offload device, reduce bucket size) as DeepSpeed acts on
    them: no optimizer offload at ZeRO-0, parameter offload at ZeRO-3 only."""
    stage = zero_stage(config)
    optimizer_device, param_device = offload_devices(config)
    bucket = int((config.get("zero_optimization") or {}).get("reduce_bucket_size", 500_000_000))
    return stage, optimizer_device if stage else "none", param_device if stage == 3 else "none", bucket


def optimizer_state_bytes(config: dict) -> int:
    kind = str((config.get("optimizer") or {}).get("type", "adamw")).lower().replace("_", "")
    return OPTIMIZER_STATE_BYTES.get(kind, 8)


def model_states(*, params: int, world: int, stage: int, precision: str, optimizer_bytes: int,
                 offload: str, offload_params: str, bucket: int, grad_accum: int = 1,
                 gathered: int = 0) -> dict[str, dict[str, int]]:
    """GPU bytes of the model states at the two moments, by part: {"forward": {...}, "step": {...}}.
    `gathered`: parameters ZeRO-3 holds gathered at once during the passes (zero3_gathered_params)."""
    n, w = params, world
    precision = weights_precision(precision)
    p = 4 if precision == "fp32" else 2
    master = 0 if (stage == 0 and precision == "fp32") else 4
    states = (master + optimizer_bytes) * n
    fwd: dict[str, int] = {}
    step: dict[str, int] = {}
    if stage == 0:
        fwd["parameters"] = p * n
        fwd["optimizer states"] = states
        if precision == "bf16":
            fwd["fp32 gradient accumulators"] = 4 * n
        step.update(fwd)
        step["gradients"] = p * n
        if precision == "fp16":
            step["fp32 gradients"] = 4 * n
        return {"forward": fwd, "step": step}
    if stage in (1, 2):
        fwd["parameters"] = p * n
        grads = p * n if stage == 1 else p * n // w
        if offload == "none":
            fwd["optimizer states"] = states // w
            if grad_accum > 1:
                fwd["gradients"] = grads
            step.update(fwd)
            step["gradients"] = grads
            step["gradient staging"] = p * n // w
            step["fp32 gradients"] = 4 * n // w
        else:
            if grad_accum > 1:
                fwd["gradients"] = grads
            step.update(fwd)
            step["gradient bucket"] = p * min(bucket, n)
        return {"forward": fwd, "step": step}
    # ZeRO-3
    gathered_bucket = p * min(bucket, n)
    if offload_params == "none":
        fwd["parameters"] = p * n // w
    if offload == "none":
        fwd["optimizer states"] = states // w
        fwd["gradients"] = p * n // w
    fwd["gradient bucket"] = gathered_bucket
    step.update(fwd)
    if offload == "none":
        step["fp32 gradients"] = 4 * n // w
    if gathered:
        fwd["gathered parameters"] = p * gathered  # released after each module: not there at the step
    return {"forward": fwd, "step": step}


def late_backward_states(*, params: int, world: int, stage: int, precision: str, offload: str, bucket: int,
                         grad_accum: int) -> int:
    """Model-state bytes ZeRO-1/2 hold only late in the backward pass, beyond model_states' forward moment: the
    gradients (ZeRO-1's whole, ZeRO-2's partition; already counted with grad-accum > 1) and the reduce bucket, filled
    from the first reduction on (LATE_GRADIENTS). 0 for other stages and under optimizer offload."""
    if stage not in (1, 2) or offload != "none":
        return 0
    p = 4 if weights_precision(precision) == "fp32" else 2
    grads = p * params if stage == 1 else p * params // world
    return p * min(bucket, params) + (grads if grad_accum == 1 else 0)


def _layer_inputs(setup: Setup) -> tuple[int, int]:
    """(layer calls, bytes of one call's input per sample): what checkpointing keeps of each layer."""
    from dsx.activations import saved_bytes

    saved = saved_bytes(rank_sequence(setup), setup.attn, precision_of(setup.ds_config))
    return saved.layer_calls, saved.layer_input_per_sample


def checkpointed_input_bytes(setup: Setup, micro_batch: int) -> int:
    """Bytes of every checkpointed layer's input for one micro-batch of `micro_batch` samples (what
    --act-ckpt-offload keeps in host memory)."""
    calls, per_sample = _layer_inputs(setup)
    return calls * per_sample * micro_batch


def pinned_input_bytes(setup: Setup, micro_batch: int) -> int:
    """Host memory --act-ckpt-offload's pinned copies take: torch's caching host allocator rounds each pinned
    allocation up to a power of two, so dsx holds each copy in power-of-two pieces (dsx.rank.memory_savers.host_pieces)
    and only the last, smallest piece is rounded."""
    from dsx.rank.memory_savers import pinned_bytes

    calls, per_sample = _layer_inputs(setup)
    return calls * pinned_bytes(per_sample * micro_batch)


def zero3_gathered_params(config: dict, params: int, largest_module: int) -> int:
    """Parameters ZeRO-3 keeps gathered at once in the forward/backward passes: the module in use (the largest
    counts) + what is prefetched for the next ones (stage3_prefetch_bucket_size, at most
    stage3_max_live_parameters), never more than the model."""
    zero = config.get("zero_optimization") or {}

    def number(key: str, default: int) -> int:
        value = zero.get(key, default)
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default

    prefetch = min(number("stage3_prefetch_bucket_size", 50_000_000), number("stage3_max_live_parameters",
                                                                             1_000_000_000))
    return min(params, largest_module + prefetch)


def activation_bytes(setup: Setup, precision: str, micro_batch: int, late_backward: int = 0) -> dict[str, int]:
    """GPU bytes of activations at the start of the backward pass, by part (dsx.activations, meta device), and,
    under checkpointing, what a layer recomputed later in the backward pass adds. `late_backward`: model-state bytes
    that exist only by then (ZeRO-1's gradients / ZeRO-2's partition and the reduce bucket, filled in the backward)."""
    from dsx.activations import saved_bytes

    saved = saved_bytes(rank_sequence(setup), setup.attn, precision)
    b = micro_batch
    parts: dict[str, int] = {}
    mlp_saving = tiled_mlp_saving(setup, saved, b)
    if setup.act_ckpt and setup.act_ckpt_offload:
        # the copy being made and the one being consumed; the rest wait in host memory (host_bytes)
        parts["checkpointed inputs in flight"] = min(2, saved.layer_calls) * saved.layer_input_per_sample * b
    elif setup.act_ckpt:
        parts["checkpointed layer inputs"] = saved.layer_calls * saved.layer_input_per_sample * b
    else:
        parts["layer activations"] = saved.layers_fixed + saved.layers_per_sample * b - \
            saved.layer_calls * mlp_saving
    parts["embeddings, head, loss"] = saved.rest_fixed + saved.rest_per_sample * b
    parts["loss gradients"] = 2 * saved.logits_per_sample * b
    if setup.loss_tile_tokens:
        del parts["loss gradients"]
        parts.update(tiled_loss_bytes(setup, saved, b, precision))
    if setup.sequence_parallel:
        # one layer's q, k, v and attention output, sent and received by the all-to-alls (transient)
        resolved = setup.resolved
        width = (resolved.num_heads + 2 * resolved.num_kv_heads + resolved.num_heads) * resolved.head_dim
        parts["all-to-all buffers"] = 2 * b * (resolved.seq_len // setup.sequence_parallel) * width * \
            (4 if precision == "fp32" else 2)
    if setup.act_ckpt:
        # later in the backward pass: the loss part is freed and one layer is recomputed
        layer = saved.largest_layer_per_sample * b - mlp_saving
        loss = parts["embeddings, head, loss"] + parts.get("loss gradients", 0)
        if layer > loss:
            parts["recomputed layer"] = layer - loss
        # the peak is the larger of the two moments: what the late one's extra states add over the early one
        late = max(loss, layer + late_backward) - max(loss, layer)
        if late > 0:
            parts[LATE_GRADIENTS] = late
    if compiled_counted(setup):
        from dsx.activations import compiled

        return compiled(parts, setup.resolved.family)
    return parts


LATE_GRADIENTS = "gradients + reduce bucket (ZeRO-1/2, late in the backward)"
"""bench/tools/memory_peak.sh's llama-1b at 131,072 tokens (checkpointed inputs offloaded): at ZeRO-2 the 2.30 GiB
gradient partition (copy_grads_in_partition) and the 0.93 GiB reduce bucket alive at the peak, while a layer was
recomputed; at ZeRO-1 the bucket and the parameters' own .grad (TiledMLP's backward alone made 1.5 GiB of them)."""


def tiled_mlp_saving(setup: Setup, saved, micro_batch: int) -> int:
    """Bytes --tiled-mlp takes off one layer's saved activations: TiledMLP keeps the MLP's input (one
    layer_input_per_sample) instead of what the MLP saves, and holds one slice's activations at a time in its
    backward pass (dsx.rank.memory_savers.mlp_slices). 0 without --tiled-mlp."""
    if not setup.tiled_mlp or not saved.mlp_per_sample:
        return 0
    from dsx.rank.memory_savers import mlp_slices

    sequence = rank_sequence(setup)
    kept = saved.layer_input_per_sample + saved.mlp_per_sample // mlp_slices(sequence.seq_len, sequence.hidden_size)
    return max(0, saved.mlp_per_sample - kept) * micro_batch


def rank_sequence(setup: Setup):
    """The model as one rank runs it: at seq_len / N tokens under Ulysses (the layers, the head and the loss see the
    rank's shard; attention sees the whole sequence for 1/N of the heads, the same bytes with fused attention)."""
    if not setup.sequence_parallel:
        return setup.resolved
    from dsx.models import resolve_model_cached

    resolved = setup.resolved
    return resolve_model_cached(resolved.name, resolved.overrides, seq_len=resolved.seq_len // setup.sequence_parallel,
                                vocab_pad=resolved.vocab_pad)


def tiled_loss_bytes(setup: Setup, saved, micro_batch: int, precision: str) -> dict[str, int]:
    """The activation parts --loss tiled changes: the loss keeps no logits (its fp32 log-softmax, logits_per_sample,
    leaves the head's part); one tile is alive at a time (its logits in the model's dtype, their fp32 copy,
    log-softmax and gradient); at ZeRO 0-2 the hidden states' gradient and the head weight's fp32 gradient are
    computed in the forward pass and held to the backward (dsx.rank.tiled_loss)."""
    from dsx.config_facts import zero_stage

    resolved = setup.resolved
    tile = min(setup.loss_tile_tokens, micro_batch * rank_sequence(setup).seq_len)
    dtype_bytes = 4 if precision == "fp32" else 2
    parts = {"embeddings, head, loss": saved.rest_fixed + (saved.rest_per_sample - saved.logits_per_sample) *
             micro_batch, "loss tile": tile * resolved.vocab_size * (dtype_bytes + 3 * 4)}
    if zero_stage(setup.ds_config) != 3:
        parts["tiled loss gradients"] = saved.layer_input_per_sample * micro_batch + \
            4 * resolved.vocab_size * resolved.embedding_size
    return parts


def compute_flops(resolved: Any, micro_batch: int, grad_accum: int, act_ckpt: bool) -> float:
    """The FLOPs of one rank's optimizer step that run at compute_rate: the model FLOPs less attention's two
    activation-by-activation products (attention_seconds prices those), plus the recomputed forward of the layers
    with checkpointing (a third of their training FLOPs; the LM head is not recomputed)."""
    from dsx.flops import attention_flops_per_token, model_flops_per_token

    per_token = model_flops_per_token(resolved) - attention_flops_per_token(resolved)
    tokens = micro_batch * resolved.seq_len * grad_accum
    flops = per_token * tokens
    if act_ckpt:
        head = 6.0 * resolved.vocab_size * resolved.embedding_size
        flops += (per_token - head) / 3.0 * tokens
    return flops


PROBE_HEAD_DIM = 64
"""The head dim of dsx.sparse.predict's kernel probes: other head dims scale its times by head_dim / 64 (the FLOPs
of a tile)."""


def attention_seconds(setup: Setup, micro_batch: int, grad_accum: int) -> float:
    """Seconds one rank spends in attention's kernels per optimizer step: dsx.sparse.predict's model of the H100
    kernel probes (dense SDPA per 128-token tile, causal skipping the tiles above the diagonal; block-sparse
    FlexAttention per row and per kept tile), forward + backward, a third more under checkpointing (the recomputed
    forward). Attention is priced apart from the matrix products because it runs at its own rate: near 75% of the
    dense peak at 64k-262k tokens (llama-1b and llama-8b rows, bench/estimator/terms.md), where the other
    products run at the calibrated achieved fraction. A Ulysses rank attends with heads / N heads over the whole
    sequence. Eager attention (--attn eager) materialises the scores: its FLOPs run at compute_rate."""
    from dsx.flops import attention_flops_per_token, attention_layers
    from dsx.sparse.predict import dense_ms, flex_ms

    resolved = setup.resolved
    recompute = 4.0 / 3.0 if setup.act_ckpt else 1.0
    sequence_parallel = setup.sequence_parallel or 1
    if setup.attn == "eager":
        tokens = micro_batch * resolved.seq_len * grad_accum / sequence_parallel
        return attention_flops_per_token(resolved) * tokens * recompute / compute_rate(setup)
    seq, heads = resolved.seq_len, resolved.num_heads // sequence_parallel
    causal = resolved.task == "causal-lm"
    if setup.sparse_kept_tiles is not None:
        per_call_ms = flex_ms(seq, heads, 1, setup.sparse_kept_tiles * heads)
    else:
        per_call_ms = dense_ms(seq, heads, 1, causal)
    calls = attention_layers(resolved) * micro_batch * grad_accum
    return per_call_ms / 1e3 * resolved.head_dim / PROBE_HEAD_DIM * calls * recompute


def compute_seconds(setup: Setup, micro_batch: int, grad_accum: int) -> float:
    """One rank's compute term: compute_flops (and --tiled-mlp's extra MLP forwards) at compute_rate, and
    attention's kernels (attention_seconds)."""
    flops = compute_flops(setup.resolved, micro_batch, grad_accum, setup.act_ckpt)
    if setup.tiled_mlp:
        flops += tiled_mlp_flops(setup.resolved, micro_batch, grad_accum)
    flops /= setup.sequence_parallel or 1
    return flops / compute_rate(setup) + attention_seconds(setup, micro_batch, grad_accum)


def tiled_mlp_flops(resolved: Any, micro_batch: int, grad_accum: int) -> float:
    """What --tiled-mlp adds to a step: DeepSpeed's TiledMLP runs each MLP's forward under no_grad and again in its
    backward (its docstring: twice an iteration, three times with checkpointing), so one more forward of every Llama
    MLP (gate, up and down projections: 2 x 3 x hidden x FFN FLOPs a token)."""
    tokens = micro_batch * resolved.seq_len * grad_accum
    return 2.0 * 3 * resolved.hidden_size * resolved.ffn_size * resolved.num_layers * tokens


def peak_flops(gpu: GpuKind, precision: str) -> float:
    from dsx.gpus import peak_tflops

    peak = peak_tflops(gpu.name, precision)
    if not peak:
        raise EstimateError(f"no {precision} peak FLOP/s known for {gpu.name}")
    return peak * 1e12


def dropout_free(setup: Setup) -> bool:
    """Whether the model trains without dropout: every dropout probability of its config is 0 (GPT-2 with
    `--set resid_pdrop=0 --set embd_pdrop=0 --set attn_pdrop=0`, Llama as published; dropout of heads the model
    does not build aside). The calibration rows kept
    GPT-2's dropout, whose masks cost time that a dropout-free model does not spend."""
    config = setup.resolved.hf_config.to_dict()
    return not any(isinstance(value, (int, float)) and value > 0 for key, value in config.items()
                   if ("pdrop" in key or "dropout" in key) and not key.startswith(_HEADS_NOT_TRAINED))


_HEADS_NOT_TRAINED = ("summary_", "classifier_")
"""Dropout keys of heads a causal or masked LM does not build (GPT-2's sequence summary, a classifier)."""


def compute_rate(setup: Setup) -> float:
    """FLOP/s a micro-batch's model FLOPs run at: the dense peak x the calibrated achieved fraction, x the width
    factor of the model's hidden size, x the GPU kind's compile factor where it applies, x the dropout-free factor for
    a model without dropout, x Liger's and float8's factors (dsx.calibration)."""
    from dsx.calibration import DROPOUT_FREE_SPEEDUP, FP8_SPEEDUP, LIGER_SPEEDUP, compile_speedup

    rate = peak_flops(setup.gpu, compute_precision(precision_of(setup.ds_config))) * setup.gpu.achieved_fraction
    rate *= width_factor(setup.gpu, setup.resolved.hidden_size)
    if compiled_counted(setup):
        rate *= compile_speedup(setup.gpu)
    if dropout_free(setup):
        rate *= DROPOUT_FREE_SPEEDUP
    if setup.liger:
        rate *= LIGER_SPEEDUP
    if setup.fp8:
        rate *= FP8_SPEEDUP["compiled" if setup.compile else "eager"]
    return rate


def width_factor(gpu: GpuKind, hidden: int) -> float:
    """The achieved rate at hidden size `hidden` over the rate at the calibration model's: h / (h + h0), relative,
    held flat past the widest calibrated width (dsx.calibration.GpuKind.width_half_hidden)."""
    h0 = gpu.width_half_hidden
    if not h0:
        return 1.0
    h = min(hidden, gpu.widest_hidden or hidden)
    return (h / (h + h0)) / (gpu.achieved_hidden / (gpu.achieved_hidden + h0))


def compiled_counted(setup: Setup) -> bool:
    """Whether the compile factors apply: --compile at ZeRO 0-2, where they were measured (ZeRO-3 counts as eager)."""
    return setup.compile and zero_stage(setup.ds_config) < 3


def offloaded_fraction(setup: Setup) -> float:
    """Share of the parameters whose optimizer states are off the GPU (dsx.offload.offloaded_fraction)."""
    from dsx.offload import PartialOffloadError
    from dsx.offload import offloaded_fraction as fraction

    stage, offload, _, _ = zero_layout(setup.ds_config)
    try:
        return fraction(setup.ds_config, stage, offload, setup.resolved, data_parallel(setup))
    except PartialOffloadError as exc:
        raise EstimateError(str(exc)) from None


def partial_offload_states(states: dict[str, dict[str, int]], setup: Setup, params: int,
                           precision: str) -> dict[str, dict[str, int]]:
    """With a ratio < 1 the sub-groups left on the GPU keep their fp32 master weights, optimizer state and fp32
    gradients there, at both moments (the states of model_states with full offload, plus these)."""
    fraction = offloaded_fraction(setup)
    if fraction in (0.0, 1.0):
        return states
    master = 0 if weights_precision(precision) == "fp32" else 4
    kept = int((master + optimizer_state_bytes(setup.ds_config) + 4) * (1 - fraction) * params) // data_parallel(setup)
    return {moment: {**parts, KEPT_SUB_GROUPS: kept} for moment, parts in states.items()}


KEPT_SUB_GROUPS = "optimizer sub-groups kept on the GPU"
"""The breakdown part of partial_offload_states (Adam's moments among them: dsx.estimate.predict._without_moments)."""


def data_parallel(setup: Setup) -> int:
    return setup.world_size // (setup.pipeline_stages or 1)


def overflow_check_seconds(setup: Setup) -> float:
    """What DeepSpeed's per-tensor overflow check adds to a step: OVERFLOW_CHECK_S_PER_TENSOR (dsx.calibration) per
    parameter tensor a rank checks (a pipeline rank: the largest stage's share). ZeRO-1/2 check their partition's
    tensors (bf16 unless bf16.check_grad_overflow is false, fp16 always; with the optimizer offloaded, tensor by
    tensor as each gradient is copied out); at ZeRO-0 fp16's loss scaler checks every tensor (bf16's optimizer there
    reads the gradient norm instead); ZeRO-3 checks its flat buffer at once."""
    from dsx.calibration import OVERFLOW_CHECK_S_PER_TENSOR

    stage = zero_layout(setup.ds_config)[0]
    if stage == 0 and precision_of(setup.ds_config) == "fp16":
        ranks = 1
    elif stage in (1, 2) and checks_overflow(setup.ds_config):
        ranks = data_parallel(setup)
    else:
        return 0.0
    from dsx.models import count_tensors

    share = largest_stage_share(setup) if setup.pipeline_stages else 1.0
    return OVERFLOW_CHECK_S_PER_TENSOR * count_tensors(setup.resolved) * share / ranks


def step_tensor_seconds(setup: Setup) -> float:
    """The host's per-tensor share of a step's fixed work (GpuKind.step_s_per_tensor): over the parameter tensors of a
    rank's partition with ZeRO (a pipeline rank: the largest stage's share), every tensor without."""
    if not setup.gpu.step_s_per_tensor:
        return 0.0
    from dsx.models import count_tensors

    share = largest_stage_share(setup) if setup.pipeline_stages else 1.0
    ranks = data_parallel(setup) if zero_layout(setup.ds_config)[0] else 1
    return setup.gpu.step_s_per_tensor * count_tensors(setup.resolved) * share / ranks


def micro_batch_seconds(setup: Setup) -> float:
    """What a rank's micro-batches pay besides their compute (GpuKind.micro_batch_s_per_param): per parameter of the
    model, which every rank's backward runs through, and micro-batch, at ZeRO 0-2 (measured alike there); 0 at
    ZeRO-3, whose hooks' price holds its micro-batches' own, and with pipeline stages (not measured there)."""
    if setup.pipeline_stages or zero_layout(setup.ds_config)[0] == 3:
        return 0.0
    from dsx.models import count_params

    return setup.gpu.micro_batch_s_per_param * count_params(setup.resolved) * setup.grad_accum


def largest_stage_share(setup: Setup) -> float:
    """The largest pipeline stage's share of the model's parameters (what its rank steps, checks and clips)."""
    from dsx.models import count_params
    from dsx.pipeline import stage_layouts

    layouts = stage_layouts(setup.resolved, setup.pipeline_stages, setup.pipeline_partition)
    return max(layout.params for layout in layouts) / count_params(setup.resolved)
