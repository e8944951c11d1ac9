"""Predict peak GPU memory, host memory and speed of a `dsx run` before it runs: `dsx estimate`, sweep pruning.

Per rank, in bytes; N = parameters, W = data-parallel ranks, P = bytes of a working-precision parameter (2 for
bf16/fp16, 4 for fp32), S = fp32 master copy (4, none at ZeRO-0 fp32) + optimizer state (AdamW/Adam/LAMB 8,
Lion/Adagrad/SGD-momentum/Muon 4) per parameter.

GPU, two moments; the peak is the larger:
- forward/backward (the start of the backward pass): the states resident then + activations (`dsx.activations`:
  what autograd keeps, measured on the meta device) + the loss backward's two logits-sized gradients.
    ZeRO-0   P·N + S·N (+ 4·N bf16: DeepSpeed's BF16_Optimizer keeps fp32 gradient accumulators)
    ZeRO-1/2 P·N + S·N/W                      (gradients do not exist yet at the start of the backward pass)
    ZeRO-3   (P + S + P)·N/W + bucket + P·G   (its gradient partitions are allocated up front; G: parameters
             gathered at once = the largest module + stage3_prefetch_bucket_size, capped by max_live_parameters)
    offload  P·N (ZeRO-1/2), P·N/W + bucket (ZeRO-3), bucket only with the parameters offloaded too
- optimizer step: ZeRO-1/2 P·N + gradients (P·N at ZeRO-1, P·N/W at ZeRO-2) + P·N/W staging + (S + 4)·N/W
  (the fp32 gradient copy); ZeRO-3 (P + S + P + 4)·N/W + bucket; ZeRO-0 its resident states + gradients.
  bucket = reduce_bucket_size gradients in P bytes (ZeRO-3 allocates it at initialisation).
  With gradient accumulation > 1 the gradients of ZeRO-1/2 live through the forward passes too.

Fits: peak allocated + CUDA context + allocator headroom <= the GPU's memory. The headroom is what the caching
allocator could not use when a multi-GiB block (the fp32 logits) had to be placed near the boundary
(dsx.calibration.HEADROOM_FILE).

Host, per rank (CPU offload): the process itself (calibrated) + HOST_BYTES_PER_PARAM·f·N/W (+ P·N/W with the
parameters offloaded); NVMe offload puts S·f·N/W on the drive instead. The ranks of one host share its RAM.

Partial optimizer offload (ZeRO-3 `offload_optimizer.ratio` r < 1): DeepSpeed cuts the parameters into sub-groups
of `sub_group_size` (1e9) elements, in parameter order, and keeps the first int((1 - r) x sub-groups) of them on the
GPU, the rest on the CPU; f is the offloaded sub-groups' share of the parameters (1 for full offload, which is
r = 1). The GPU sub-groups keep their fp32 master, optimizer state and fp32 gradients on the GPU: (S + 4)·(1-f)·N/W
more GPU bytes, f of the host bytes, f of the CPU optimizer step.

Compiled (`--compile`, DeepSpeed's engine.compile()) at ZeRO 0-2: the layers' saved activations x
COMPILE_LAYER_FACTOR, the embeddings/head/loss part and the loss gradients x COMPILE_HEAD_FACTOR, the compute
COMPILE_SPEEDUP x faster (dsx.calibration: GPT-2 ZeRO-1/2 rows of bench/mfu); at ZeRO-3, not measured, as eager.

Speed, per optimizer step of G = grad-accum micro-batches: model FLOPs of the G micro-batches (dsx.flops) x (1 +
recomputed forward with checkpointing) over the GPU's dense peak times an achieved fraction, + ZeRO-3's
per-parameter gather cost (every micro-batch's passes), + once per step: the per-parameter fixed work and the CPU
optimizer step (x f with partial offload). Accumulating G micro-batches spreads the once-per-step part over G times
the tokens: with offload, tokens/s rises with G. Communication between GPUs is not modelled (assumed overlapped):
multi-GPU speed is an upper bound.

Fits: every resource fits (dsx.fit): the GPU as above, the host's RAM (the per-rank host bytes x the ranks on the
host, against Setup.host_memory) and the NVMe path's free space (Setup.nvme_free); a capacity that is None is not
checked. The estimate names the resource that binds.

Every constant that is not DeepSpeed's layout is calibrated on named rows of the repository's bench/ results and
ships inside dsx as literal numbers (dsx.calibration: GPUS, the rows each came from); this module reads no file.
`dsx report --vs-estimate` judges the other rows. Activations are never fitted: they come from the model's code.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from dsx.calibration import COMPILE_SPEEDUP, GPUS, GpuKind
from dsx.config_facts import offload_devices, precision_of, zero_stage
from dsx.fit import binding, fit_resources


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


@dataclass
class Estimate:
    gpu: str
    params: int
    world_size: int
    micro_batch: int
    precision: str
    zero: int
    offload: str
    offload_params: str
    breakdown: dict[str, int]
    """GPU bytes by part at the peak moment."""
    peak_moment: str
    """'forward/backward' or 'optimizer step'."""
    peak_allocated: int
    peak_reserved: int
    gpu_used: int
    """What nvidia-smi would show: reserved + CUDA context."""
    capacity: int
    needed: int
    """What must fit: peak allocated + CUDA context + allocator headroom."""
    fits: bool
    """needed <= capacity."""
    margin: float
    """(capacity - needed) / capacity: negative when it does not fit."""
    host_per_rank: int
    nvme_bytes: int
    step_time_s: float
    tokens_per_s: float
    max_micro_batch: int | None = None
    notes: list[str] = field(default_factory=list)
    pipeline: dict[str, Any] | None = None
    """--pipeline-stages: stages, data_parallel, micro_batches, bubble_fraction, largest_stage and per_stage
    (layers, params, peak_allocated); the memory figures above are the largest stage's."""
    offloaded_fraction: float = 0.0
    """Share of the optimizer states on the CPU/NVMe: 1 with full offload, the sub-groups' share with a ratio."""
    resources: list[dict[str, Any]] = field(default_factory=list)
    """GPU memory, host memory, NVMe (dsx.fit.Resource.as_dict): needed, capacity (None: not checked), fits."""
    binding: str | None = None
    """The resource that binds: the first that does not fit, else the one with the least margin."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _zero(config: dict) -> tuple[int, str, str, int]:
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


def activation_bytes(setup: Setup, precision: str, micro_batch: int) -> dict[str, int]:
    """GPU bytes of activations at the start of the backward pass, by part (dsx.activations, meta device)."""
    from dsx.activations import saved_bytes

    saved = saved_bytes(setup.resolved, setup.attn, precision)
    b = micro_batch
    parts: dict[str, int] = {}
    if setup.act_ckpt:
        parts["checkpointed layer inputs"] = saved.layer_calls * saved.layer_input_per_sample * b
    else:
        parts["layer activations"] = saved.layers_fixed + saved.layers_per_sample * b
    parts["embeddings, head, loss"] = saved.rest_fixed + saved.rest_per_sample * b
    parts["loss gradients"] = 2 * saved.logits_per_sample * b
    if setup.act_ckpt:
        # later in the backward pass: the loss part is freed and one layer is recomputed
        recompute = saved.largest_layer_per_sample * b - parts["embeddings, head, loss"] - parts["loss gradients"]
        if recompute > 0:
            parts["recomputed layer"] = recompute
    if compiled_counted(setup):
        from dsx.activations import compiled

        return compiled(parts)
    return parts


def _peak_allocated(setup: Setup, micro_batch: int) -> tuple[int, str, dict[str, int]]:
    if setup.pipeline_stages:
        return max(_pipeline_stages(setup, micro_batch), key=lambda s: s[0])[:3]
    config = setup.ds_config
    stage, offload, offload_params, bucket = _zero(config)
    precision = precision_of(config)
    n = _params(setup)
    gathered = 0
    if stage == 3:
        from dsx.models import largest_module_params

        gathered = zero3_gathered_params(config, n, largest_module_params(setup.resolved))
    states = model_states(params=n, world=setup.world_size, stage=stage, precision=precision,
                          optimizer_bytes=optimizer_state_bytes(config), offload=offload,
                          offload_params=offload_params, bucket=bucket, grad_accum=setup.grad_accum,
                          gathered=gathered)
    states = partial_offload_states(states, setup, n, precision)
    forward = {**states["forward"], **activation_bytes(setup, precision, micro_batch)}
    step = states["step"]
    if sum(forward.values()) >= sum(step.values()):
        return sum(forward.values()), "forward/backward", forward
    return sum(step.values()), "optimizer step", step


def _params(setup: Setup) -> int:
    from dsx.models import count_params

    return count_params(setup.resolved)  # cached per preset + overrides + vocab pad (dsx.models.meta_model)


def _capacity(setup: Setup) -> int:
    return min(setup.gpu.total_bytes, setup.memory_limit or setup.gpu.total_bytes)


def gpu_needed(setup: Setup, micro_batch: int) -> int:
    """What must fit: peak allocated + the CUDA context + the allocator headroom. (The allocator's cached slack -
    reserved minus allocated - is mostly given back and reused before an allocation fails; the headroom is the part
    that is not.)"""
    allocated, _, _ = _peak_allocated(setup, micro_batch)
    return allocated + _beside_allocated(setup.gpu)


def _beside_allocated(gpu: GpuKind) -> int:
    return gpu.context_bytes + gpu.allocator_headroom_bytes


def max_micro_batch(setup: Setup, limit: int = 1 << 16) -> int | None:
    """The largest micro-batch predicted to fit (memory grows with it); None when even 1 does not."""
    capacity = _capacity(setup)
    if gpu_needed(setup, 1) > capacity:
        return None
    low, high = 1, 2
    while high <= limit and gpu_needed(setup, high) <= capacity:
        low, high = high, high * 2
    high = min(high, limit + 1)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if gpu_needed(setup, mid) <= capacity else (low, mid)
    return low


def compute_flops(resolved: Any, micro_batch: int, grad_accum: int, act_ckpt: bool) -> float:
    """Model FLOPs of one rank's optimizer step, plus the recomputed forward of the layers with checkpointing
    (a third of their training FLOPs; the LM head is not recomputed)."""
    from dsx.flops import model_flops_per_token

    per_token = model_flops_per_token(resolved)
    tokens = micro_batch * resolved.seq_len * grad_accum
    flops = per_token * tokens
    if act_ckpt:
        head = 6.0 * resolved.vocab_size * resolved.embedding_size
        flops += (per_token - head) / 3.0 * tokens
    return flops


def _peak_flops(gpu: GpuKind, precision: str) -> float:
    from dsx.gpus import peak_tflops

    peak = peak_tflops(gpu.name, precision)
    if not peak:
        raise EstimateError(f"no {precision} peak FLOP/s known for {gpu.name}")
    return peak * 1e12


def step_time(setup: Setup, micro_batch: int) -> float:
    """Seconds per optimizer step: fixed per-parameter work + FLOPs at the achieved rate + offload + ZeRO-3."""
    stage, offload, _, _ = _zero(setup.ds_config)
    gpu = setup.gpu
    n = _params(setup)
    flops = compute_flops(setup.resolved, micro_batch, setup.grad_accum, setup.act_ckpt)
    if setup.pipeline_stages:
        return _pipeline_step_time(setup, micro_batch)
    seconds = gpu.fixed_s_per_param * n / setup.world_size
    seconds += flops / (_peak_flops(gpu, precision_of(setup.ds_config)) * gpu.achieved_fraction
                        * (COMPILE_SPEEDUP if compiled_counted(setup) else 1.0))
    if offload != "none":
        seconds += gpu.cpu_step_s_per_param[stage] * offloaded_fraction(setup) * n / setup.world_size
    if stage == 3:
        seconds += gpu.zero3_s_per_param_pass * n * (3 if setup.act_ckpt else 2) * setup.grad_accum
    return seconds


def estimate(setup: Setup, *, search_max: bool = True) -> Estimate:
    config = setup.ds_config
    stage, offload, offload_params, _ = _zero(config)
    precision = precision_of(config)
    n = _params(setup)
    allocated, moment, breakdown = _peak_allocated(setup, setup.micro_batch)
    pipeline = _pipeline_summary(setup) if setup.pipeline_stages else None
    n_rank = max(s["params"] for s in pipeline["per_stage"]) if pipeline else n  # a rank's share of the model
    world = _data_parallel(setup)
    reserved = int(allocated * setup.gpu.fragmentation)
    used = reserved + setup.gpu.context_bytes
    needed = allocated + _beside_allocated(setup.gpu)
    capacity = _capacity(setup)
    fraction = offloaded_fraction(setup)
    host, nvme = host_bytes(setup, n_rank, world, fraction)
    seconds = step_time(setup, setup.micro_batch)
    tokens = setup.micro_batch * setup.resolved.seq_len * setup.grad_accum * world
    notes = []
    if setup.world_size > 1:
        notes.append("communication between GPUs is not modelled: the speed is an upper bound")
    notes += _host_notes(setup, fraction)
    if pipeline:
        notes.append(f"pipeline: the largest stage's memory (stage {pipeline['largest_stage']}); speed = (micro-batches"
                     " + stages - 1) x the slowest stage's micro-batch time: the 1F1B bubble, no transfer time")
    resources = fit_resources(setup.ranks_per_host or setup.world_size, needed, capacity, host, setup.host_memory,
                              nvme, setup.nvme_free)
    bound = binding(resources)
    return Estimate(
        gpu=setup.gpu.key, params=n, world_size=setup.world_size, micro_batch=setup.micro_batch,
        precision=precision, zero=stage, offload=offload, offload_params=offload_params, breakdown=breakdown,
        peak_moment=moment, peak_allocated=allocated, peak_reserved=reserved, gpu_used=used, capacity=capacity,
        needed=needed, fits=all(r.fits for r in resources), margin=(capacity - needed) / capacity,
        host_per_rank=host, nvme_bytes=nvme, step_time_s=seconds, tokens_per_s=tokens / seconds,
        max_micro_batch=max_micro_batch(setup) if search_max else None, notes=notes, pipeline=pipeline,
        offloaded_fraction=fraction, resources=[r.as_dict() for r in resources],
        binding=bound.name if bound else None,
    )


# ------------------------------------------------------------------------ host, NVMe, partial offload, compile
#
# What the ranks need of the host (RAM, NVMe space, dsx.fit) and how much of the optimizer DeepSpeed offloads with
# a ratio < 1 (dsx.offload); they only add to the GPU arithmetic above.


def host_bytes(setup: Setup, n_rank: int, world: int, fraction: float) -> tuple[int, int]:
    """(host RAM, NVMe bytes) of one rank: the process, the offloaded share `fraction` of the optimizer's
    calibrated host bytes (on NVMe: its states on the drive, the rest in RAM), offloaded parameters."""
    config = setup.ds_config
    stage, offload, offload_params, _ = _zero(config)
    precision = precision_of(config)
    host = setup.gpu.host_process_bytes[stage]
    per_param = setup.gpu.host_bytes_per_param
    nvme = 0
    states = (0 if (stage == 0 and precision == "fp32") else 4) + optimizer_state_bytes(config)
    if offload == "cpu":
        host += int(per_param[stage] * fraction * n_rank) // world
    elif offload == "nvme":
        nvme += int(states * fraction * n_rank) // world
        host += int((per_param[stage] - states) * fraction * n_rank) // world
    p = 4 if precision == "fp32" else 2
    if offload_params == "cpu":
        host += p * n_rank // world
    elif offload_params == "nvme":
        nvme += p * n_rank // world
    return host, nvme


def _host_notes(setup: Setup, fraction: float) -> list[str]:
    """What the estimate assumed of partial offload and compilation, in words."""
    from dsx.calibration import COMPILE_HEAD_FACTOR, COMPILE_LAYER_FACTOR
    from dsx.offload import describe

    notes = []
    if 0.0 < fraction < 1.0:
        notes.append("partial optimizer offload: " + describe(setup.ds_config, setup.resolved, _data_parallel(setup)))
    if compiled_counted(setup):
        notes.append(f"compiled: activations x{COMPILE_LAYER_FACTOR} (layers) and x{COMPILE_HEAD_FACTOR} (embeddings, "
                     f"head, loss), compute x{COMPILE_SPEEDUP} faster (measured on GPT-2 rows: dsx.calibration)")
    elif setup.compile:
        notes.append("compiled at ZeRO-3: counted as eager (compile was measured at ZeRO-1/2 only; ZeRO-3 gathers "
                     "parameters in hooks around every module)")
    return notes


def compiled_counted(setup: Setup) -> bool:
    """Whether the compile factors apply: --compile at ZeRO 0-2, where they were measured (ZeRO-3 counts as eager)."""
    return setup.compile and zero_stage(setup.ds_config) < 3


def offloaded_fraction(setup: Setup) -> float:
    """Share of the parameters whose optimizer states are off the GPU (dsx.offload.offloaded_fraction)."""
    from dsx.offload import PartialOffloadError
    from dsx.offload import offloaded_fraction as fraction

    stage, offload, _, _ = _zero(setup.ds_config)
    try:
        return fraction(setup.ds_config, stage, offload, setup.resolved, _data_parallel(setup))
    except PartialOffloadError as exc:
        raise EstimateError(str(exc)) from None


def partial_offload_states(states: dict[str, dict[str, int]], setup: Setup, params: int,
                           precision: str) -> dict[str, dict[str, int]]:
    """With a ratio < 1 the sub-groups left on the GPU keep their fp32 master weights, optimizer state and fp32
    gradients there, at both moments (the states of model_states with full offload, plus these)."""
    fraction = offloaded_fraction(setup)
    if fraction in (0.0, 1.0):
        return states
    master = 0 if precision == "fp32" else 4
    kept = int((master + optimizer_state_bytes(setup.ds_config) + 4) * (1 - fraction) * params) // _data_parallel(setup)
    part = "optimizer sub-groups kept on the GPU"
    return {moment: {**parts, part: kept} for moment, parts in states.items()}


# ------------------------------------------------------------------------------------------------ pipeline stages
#
# A stage s of p holds its layers' parameters (DeepSpeed's partition, dsx.pipeline.stage_layouts; a tied embedding on
# the first and the last stage) with the ZeRO layout above over the data-parallel replicas, and the activations of
# the micro-batches in flight in the 1F1B schedule (p - s, at most the step's m): its share of the layers'
# activations (its decoder layers / all), the embedding/head/loss part on the last stage. Send/receive buffers (one
# hidden state per micro-batch) are left out. Speed: the slowest stage sets the pace, (m + p - 1) of its
# micro-batch times per step (the bubble), its share of the model's FLOPs being its decoder layers' (+ the LM head
# on the last stage); the fixed per-parameter time is the largest stage's. Transfers between stages are not counted.


def _data_parallel(setup: Setup) -> int:
    return setup.world_size // (setup.pipeline_stages or 1)


def _layouts(setup: Setup) -> list:
    from dsx.pipeline import stage_layouts

    return stage_layouts(setup.resolved, setup.pipeline_stages, setup.pipeline_partition)


def _pipeline_stages(setup: Setup, micro_batch: int) -> list[tuple[int, str, dict[str, int], Any]]:
    """(peak allocated, moment, breakdown, layout) of every stage."""
    from dsx.pipeline import in_flight

    config = setup.ds_config
    stage, offload, offload_params, bucket = _zero(config)
    precision = precision_of(config)
    acts = activation_bytes(setup, precision, micro_batch)
    out = []
    for layout in _layouts(setup):
        states = model_states(params=layout.params, world=_data_parallel(setup), stage=stage, precision=precision,
                              optimizer_bytes=optimizer_state_bytes(config), offload=offload,
                              offload_params=offload_params, bucket=bucket, grad_accum=setup.grad_accum)
        held = in_flight(layout.stage, setup.pipeline_stages, setup.grad_accum)
        share = layout.blocks / setup.resolved.num_layers
        forward = dict(states["forward"])
        for part, size in acts.items():
            if part in ("layer activations", "checkpointed layer inputs"):
                forward[part] = int(size * share) * held
            elif part == "embeddings, head, loss" and layout.last:
                forward[part] = size * held
            elif (part == "loss gradients" and layout.last) or (part == "recomputed layer" and layout.blocks):
                forward[part] = size
        step = states["step"]
        if sum(forward.values()) >= sum(step.values()):
            out.append((sum(forward.values()), "forward/backward", forward, layout))
        else:
            out.append((sum(step.values()), "optimizer step", step, layout))
    return out


def _stage_flop_shares(setup: Setup) -> list[float]:
    """Each stage's share of a micro-batch's model FLOPs: its decoder layers (+ the LM head on the last stage)."""
    from dsx.flops import model_flops_per_token

    total = model_flops_per_token(setup.resolved)
    head = 6.0 * setup.resolved.vocab_size * setup.resolved.embedding_size
    per_layer = (total - head) / setup.resolved.num_layers
    return [(layout.blocks * per_layer + (head if layout.last else 0.0)) / total for layout in _layouts(setup)]


def _pipeline_step_time(setup: Setup, micro_batch: int) -> float:
    stage, offload, _, _ = _zero(setup.ds_config)
    gpu, m, p = setup.gpu, setup.grad_accum, setup.pipeline_stages
    largest = max(layout.params for layout in _layouts(setup))
    one_micro = compute_flops(setup.resolved, micro_batch, 1, setup.act_ckpt) / (
        _peak_flops(gpu, precision_of(setup.ds_config)) * gpu.achieved_fraction)
    seconds = (m + p - 1) * max(_stage_flop_shares(setup)) * one_micro
    seconds += gpu.fixed_s_per_param * largest / _data_parallel(setup)
    if offload != "none":
        seconds += gpu.cpu_step_s_per_param[stage] * largest / _data_parallel(setup)
    return seconds


def _pipeline_summary(setup: Setup) -> dict[str, Any]:
    from dsx.pipeline import bubble_fraction

    stages = _pipeline_stages(setup, setup.micro_batch)
    largest = max(stages, key=lambda s: s[0])[3].stage
    return {"stages": setup.pipeline_stages, "data_parallel": _data_parallel(setup), "micro_batches": setup.grad_accum,
            "partition": setup.pipeline_partition,
            "bubble_fraction": bubble_fraction(setup.pipeline_stages, setup.grad_accum), "largest_stage": largest,
            "per_stage": [{"stage": layout.stage, "layers": list(layout.layers), "params": layout.params,
                           "peak_allocated": peak} for peak, _, _, layout in stages]}


def gpu_kind_of(gpu_name: str | None) -> GpuKind | None:
    """The calibrated kind a row's GPU is (exact device name), or None."""
    for kind in GPUS.values():
        if gpu_name == kind.name:
            return kind
    return None


def setup_of_row(row: dict, kind: GpuKind | None = None) -> Setup:
    """The Setup a result row ran (EstimateError when the row's GPU has no calibration or the model is unknown)."""
    from dsx.models import ModelError, resolve_model

    kind = kind or gpu_kind_of(row.get("gpu_name"))
    if kind is None:
        raise EstimateError(f"no calibration for {row.get('gpu_name') or row.get('device')}")
    model = row["model"]
    try:
        resolved = resolve_model(model["preset"], model.get("overrides") or {}, seq_len=model["seq_len"],
                                 vocab_pad=model.get("vocab_pad"))
    except ModelError as exc:
        raise EstimateError(str(exc)) from None
    toggles = row.get("toggles") or {}
    pipeline = row.get("pipeline") or {}
    return Setup(resolved=resolved, ds_config=row["ds_config"], world_size=row["world_size"],
                 micro_batch=row["micro_batch"], grad_accum=row.get("grad_accum", 1),
                 attn=toggles.get("attn", "sdpa"), act_ckpt=bool(toggles.get("act_ckpt")), gpu=kind,
                 memory_limit=row.get("memory_cap"), pipeline_stages=pipeline.get("stages"),
                 pipeline_partition=pipeline.get("partition") or "parameters", compile=bool(toggles.get("compile")))
