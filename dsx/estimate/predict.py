"""The estimate itself: the peak GPU memory at the two moments, the largest micro-batch that fits, the step time,
and the Estimate that `dsx estimate`, the sweep and `dsx estimate --largest` read (the arithmetic: dsx.estimate)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from dsx.calibration import (ACT_OFFLOAD_BYTES_PER_S, AUTOCAST_S_PER_PARAM, BF16_OPTIMIZER_S_PER_TENSOR,
                             COMM_LOGGER_S_PER_BYTE, COMM_LOGGER_S_PER_FETCH,
                             OVERFLOW_CHECK_S_PER_TENSOR, ULYSSES_BYTES_PER_S, ZERO3_FETCH_S, ZERO3_HOST_SENSITIVITY,
                             ZERO3_LINK_EXPOSED, GpuKind)
from dsx.config_facts import AUTOCAST, AUTOCAST_AT_ZERO0, precision_of
from dsx.estimate.host import host_bytes, host_notes
from dsx.estimate.pipeline import pipeline_step_time, pipeline_summary, stage_peaks
from dsx.estimate.states import (KEPT_SUB_GROUPS, LATE_GRADIENTS, Setup, activation_bytes, checkpointed_input_bytes,
                                 compute_seconds, data_parallel, late_backward_states, model_states,
                                 micro_batch_seconds, offloaded_fraction, optimizer_state_bytes,
                                 overflow_check_seconds, partial_offload_states, step_tensor_seconds,
                                 zero3_gathered_params, zero_layout)
from dsx.fit import binding, fit_resources


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


def _peak_allocated(setup: Setup, micro_batch: int) -> tuple[int, str, dict[str, int]]:
    if setup.pipeline_stages:
        return max(stage_peaks(setup, micro_batch), key=lambda s: s[0])[:3]
    config = setup.ds_config
    stage, offload, offload_params, bucket = zero_layout(config)
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
    # with the checkpointed inputs on the GPU (no --act-ckpt-offload) the inputs consumed by the late backward make
    # room for its extra states (not modelled: those rows are within 8% without the term)
    late = late_backward_states(params=n, world=data_parallel(setup), stage=stage, precision=precision,
                                offload=offload, bucket=bucket, grad_accum=setup.grad_accum) \
        if setup.act_ckpt_offload else 0
    forward = {**states["forward"], **_activations(setup, micro_batch, late)}
    if setup.first_step_only:  # the master weights only, not yet the moments
        _without_moments(forward, setup, n, stage)
    step = states["step"]
    if sum(forward.values()) >= sum(step.values()):
        return sum(forward.values()), "forward/backward", forward
    return sum(step.values()), "optimizer step", step


def _activations(setup: Setup, micro_batch: int, late: int) -> dict[str, int]:
    return activation_bytes(setup, precision_of(setup.ds_config), micro_batch, late)


def activation_margin_bytes(setup: Setup, micro_batch: int) -> int:
    """What setup.activation_margin keeps free: that share of the activations at a forward/backward peak (the late
    gradients are model states, left out); 0 when the optimizer step's moment is the peak, or with pipeline stages."""
    _, moment, breakdown = _peak_allocated(setup, micro_batch)
    return _kept_free(setup, micro_batch, moment, breakdown)


def _kept_free(setup: Setup, micro_batch: int, moment: str, breakdown: dict[str, int]) -> int:
    if not setup.activation_margin or setup.pipeline_stages or moment != "forward/backward":
        return 0
    parts = _activations(setup, micro_batch, 0)
    return int(setup.activation_margin * sum(breakdown[part] for part in parts if part in breakdown
                                             and part != LATE_GRADIENTS))


def _without_moments(forward: dict[str, int], setup: Setup, params: int, stage: int) -> None:
    """Take Adam's moments out of the forward/backward states of a row that ran one step: on the GPU they are in
    "optimizer states" (none offloaded) or in the sub-groups a partial offload keeps there."""
    moments = optimizer_state_bytes(setup.ds_config) * params // (data_parallel(setup) if stage else 1)
    if KEPT_SUB_GROUPS in forward:
        moments = int(moments * (1 - offloaded_fraction(setup)))
        part = KEPT_SUB_GROUPS
    elif "optimizer states" in forward:
        part = "optimizer states"
    else:
        return
    forward[part] -= min(moments, forward[part])


def _params(setup: Setup) -> int:
    from dsx.models import count_params

    return count_params(setup.resolved)  # cached per preset + overrides + vocab pad (dsx.models.meta_model)


def _capacity(setup: Setup) -> int:
    return min(setup.gpu.total_bytes, setup.memory_limit or setup.gpu.total_bytes)


def gpu_needed(setup: Setup, micro_batch: int) -> int:
    """What must fit: peak allocated + the CUDA context + the allocator headroom. (The allocator's cached slack -
    reserved minus allocated - is mostly given back and reused before an allocation fails; the headroom is the part
    that is not.)"""
    allocated, moment, breakdown = _peak_allocated(setup, micro_batch)
    return allocated + _beside_allocated(setup.gpu) + _kept_free(setup, micro_batch, moment, breakdown)


def _beside_allocated(gpu: GpuKind) -> int:
    return gpu.context_bytes + gpu.allocator_headroom_bytes


def max_micro_batch(setup: Setup, limit: int = 1 << 16) -> int | None:
    """The largest micro-batch predicted to fit (memory grows with it); None when even 1 does not fit the GPU.
    Above 1 the host must also hold what grows with the micro-batch: --act-ckpt-offload's inputs."""
    capacity = _capacity(setup)
    if gpu_needed(setup, 1) > capacity:
        return None

    def fits(micro_batch: int) -> bool:
        return gpu_needed(setup, micro_batch) <= capacity and _host_fits(setup, micro_batch)

    low, high = 1, 2
    while high <= limit and fits(high):
        low, high = high, high * 2
    high = min(high, limit + 1)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def _host_fits(setup: Setup, micro_batch: int) -> bool:
    """Whether the host's RAM and NVMe hold the ranks' shares at `micro_batch` (only --act-ckpt-offload's inputs
    depend on it)."""
    if not (setup.act_ckpt and setup.act_ckpt_offload):
        return True
    at = replace(setup, micro_batch=micro_batch)
    host, nvme = _host_shares(at, pipeline_summary(at) if at.pipeline_stages else None)
    resources = fit_resources(setup.ranks_per_host or setup.world_size, 0, 1, host, setup.host_memory, nvme,
                              setup.nvme_free)
    return all(r.fits for r in resources[1:])


def _host_shares(setup: Setup, pipeline: dict | None) -> tuple[int, int]:
    """(host RAM, NVMe bytes) of one rank (dsx.estimate.host.host_bytes): a pipeline rank holds its stage's share
    (`pipeline`: the setup's pipeline_summary, None without stages)."""
    n_rank = max(s["params"] for s in pipeline["per_stage"]) if pipeline else _params(setup)
    return host_bytes(setup, n_rank, data_parallel(setup), offloaded_fraction(setup))


def step_time(setup: Setup, micro_batch: int) -> float:
    """Seconds per optimizer step: fixed per-parameter work + ZeRO-1/2's overflow check per tensor + the host's
    per-tensor work (step_tensor_seconds) + each micro-batch's own cost (micro_batch_seconds) + the compute term
    (compute_seconds: FLOPs at the achieved rate, attention's kernels) + offload + ZeRO-3."""
    stage, offload, _, _ = zero_layout(setup.ds_config)
    gpu = setup.gpu
    n = _params(setup)
    if setup.pipeline_stages:
        return pipeline_step_time(setup, micro_batch)
    # the optimizer step, clipping and bucket copies: over a rank's partition with ZeRO, over every parameter without
    seconds = gpu.fixed_s_per_param * n / (setup.world_size if stage else 1) + overflow_check_seconds(setup)
    seconds += step_tensor_seconds(setup) + micro_batch_seconds(setup)
    seconds += compute_seconds(setup, micro_batch, setup.grad_accum)  # a Ulysses rank: its shard's tokens
    if offload != "none":
        seconds += gpu.cpu_step_s_per_param[stage] * offloaded_fraction(setup) * n / setup.world_size
    return (seconds + zero3_hook_seconds(setup, micro_batch) + zero3_fetch_seconds(setup) + ulysses_seconds(setup)
            + act_offload_seconds(setup) + comm_logger_seconds(setup) + autocast_seconds(setup)
            + bf16_optimizer_seconds(setup) + collective_seconds(setup))


def link_busbw(setup: Setup) -> float:
    """The bus bandwidth the ranks' collectives run at (bytes/s): --link-bandwidth, else the GPU kind's NVLink."""
    return setup.link_busbw or setup.gpu.link_busbw


def collective_seconds(setup: Setup) -> float:
    """What ZeRO-0/1/2's collectives add to a step: the bytes a rank sends (sent_bytes, the ZeRO paper's volume) x
    (n-1)/n over the link's bus bandwidth, which is a ring all-reduce's or all-gather's time on n ranks in nccl-tests'
    terms. DeepSpeed runs them on the compute stream at these stages (overlap_comm is off unless a config turns it
    on), so none is hidden: over sockets on 2 H200s gpt2-xl's ZeRO-1 and ZeRO-2 steps grew by 1.30 and 1.18 s where
    this prices 1.26 (bench/estimator/terms.md, "The collectives' time"). At ZeRO-3 the fetches overlap the
    compute and ZERO3_FETCH_S prices their waits over NVLink: a slower link adds ZERO3_LINK_EXPOSED of the bytes'
    extra time. 0 on one rank, with pipeline stages or Ulysses, and for a 1-bit optimizer (its compressed phase: not
    priced)."""
    ranks = data_parallel(setup)
    if ranks < 2 or setup.pipeline_stages or setup.sequence_parallel or not link_busbw(setup):
        return 0.0
    from dsx.onebit import kind_of

    if kind_of(setup.ds_config):
        return 0.0
    wire = sent_bytes(setup) * (ranks - 1) / ranks
    if zero_layout(setup.ds_config)[0] == 3:
        if not setup.gpu.link_busbw or link_busbw(setup) >= setup.gpu.link_busbw:
            return 0.0
        return ZERO3_LINK_EXPOSED * wire * (1 / link_busbw(setup) - 1 / setup.gpu.link_busbw)
    return wire / link_busbw(setup)


def bf16_optimizer_seconds(setup: Setup) -> float:
    """What DeepSpeed's BF16_Optimizer (bf16 without ZeRO) adds to a step: BF16_OPTIMIZER_S_PER_TENSOR per parameter
    tensor and micro-batch (dsx.calibration: its fp32 accumulation, tensor by tensor); 0 at ZeRO-1/2/3, in other
    precisions and with pipeline stages (not measured there, not priced)."""
    if zero_layout(setup.ds_config)[0] != 0 or precision_of(setup.ds_config) != "bf16" or setup.pipeline_stages:
        return 0.0
    from dsx.models import count_tensors

    return BF16_OPTIMIZER_S_PER_TENSOR * count_tensors(setup.resolved) * setup.grad_accum


def autocast_seconds(setup: Setup) -> float:
    """What bf16-autocast's fp32 gradients add to a ZeRO-1/2 step: AUTOCAST_S_PER_PARAM per parameter and micro-batch
    (dsx.calibration); 0 in other precisions and stages (ZeRO-3: not seen, ZeRO-0: not measured)."""
    if precision_of(setup.ds_config) != AUTOCAST or zero_layout(setup.ds_config)[0] not in (1, 2):
        return 0.0
    return AUTOCAST_S_PER_PARAM * _params(setup) * setup.grad_accum


def zero3_hook_seconds(setup: Setup, micro_batch: int | None = None) -> float:
    """What ZeRO-3's hooks add to a step. The host runs them (zero3_pass_hooks) while the GPU runs the pass's kernels,
    so a pass shows only the hooks' time beyond its compute (exposed_hooks). On one H200, llama-1b's micro-batch of
    8 took 15 ms more at ZeRO-3 than at ZeRO-1 where its hooks take ~100 ms, and gpt2-xl's forward took 282 ms at
    ZeRO-3 against 80 at ZeRO-1 (bench/estimator/terms.md, "ZeRO-3's hooks behind the compute"). `micro_batch`: the
    setup's unless given. 0 below ZeRO-3."""
    if zero_layout(setup.ds_config)[0] != 3:
        return 0.0
    return setup.grad_accum * exposed_hooks(zero3_pass_hooks(setup),
                                            compute_seconds(setup, micro_batch or setup.micro_batch, 1), setup.act_ckpt)


def zero3_pass_hooks(setup: Setup) -> float:
    """The host's time for ZeRO-3's hooks in one pass over the model: zero3_s_per_module_pass x every module (DeepSpeed
    hooks parameterless ones too) x host_factor."""
    from dsx.models import count_modules

    return setup.gpu.zero3_s_per_module_pass * count_modules(setup.resolved) * host_factor(setup)


def exposed_hooks(hooks: float, compute: float, act_ckpt: bool) -> float:
    """The part of one micro-batch's ZeRO-3 hooks (`hooks` seconds a pass) that its `compute` seconds do not hide:
    the forward holds a third of the compute, the backward the rest (a quarter and three quarters with
    checkpointing, whose backward runs the hooks twice: the recompute's and its own)."""
    forward, backward, backward_passes = (compute / 4, compute * 3 / 4, 2) if act_ckpt else (compute / 3,
                                                                                           compute * 2 / 3, 1)
    return max(0.0, hooks - forward) + max(0.0, backward_passes * hooks - backward)


def host_factor(setup: Setup) -> float:
    """What ZeRO-3's Python hooks take on the run's host against the calibration's: 1 + ZERO3_HOST_SENSITIVITY x
    (host_loop_ns over GpuKind.host_loop_ns, less 1); 1 where either speed is unknown."""
    if not (setup.host_loop_ns and setup.gpu.host_loop_ns):
        return 1.0
    return 1 + ZERO3_HOST_SENSITIVITY * (setup.host_loop_ns / setup.gpu.host_loop_ns - 1)


def act_offload_bytes(setup: Setup) -> float:
    """Checkpointed-input bytes --act-ckpt-offload keeps on the host per optimizer step (each micro-batch's); 0
    without it."""
    if not (setup.act_ckpt and setup.act_ckpt_offload):
        return 0.0
    return float(checkpointed_input_bytes(setup, setup.micro_batch) * setup.grad_accum)


def act_offload_seconds(setup: Setup) -> float:
    """What --act-ckpt-offload adds to a step: its bytes at ACT_OFFLOAD_BYTES_PER_S (dsx.calibration)."""
    return act_offload_bytes(setup) / ACT_OFFLOAD_BYTES_PER_S


def zero3_fetches_per_step(setup: Setup) -> float:
    """The parameter all-gathers a ZeRO-3 rank waits for per optimizer step (dsx.comm.predict's count); 0 on one
    rank, where DeepSpeed skips them, and below ZeRO-3."""
    if zero_layout(setup.ds_config)[0] != 3 or setup.world_size < 2:
        return 0.0
    from dsx.comm.predict import param_facts, zero3_fetches_per_micro_batch

    return zero3_fetches_per_micro_batch(setup.ds_config, param_facts(setup.resolved),
                                         setup.act_ckpt) * setup.grad_accum


def zero3_fetch_seconds(setup: Setup) -> float:
    """What ZeRO-3's fetches across GPUs add to a step: ZERO3_FETCH_S each (dsx.calibration)."""
    return ZERO3_FETCH_S * zero3_fetches_per_step(setup)


def sent_bytes(setup: Setup) -> float:
    """Bytes a rank sends per optimizer step (dsx.comm.predict's volume, Ulysses' all-to-alls included)."""
    from dsx.comm.predict import param_facts, predict

    return predict(setup.ds_config, param_facts(setup.resolved), setup.world_size, setup.grad_accum,
                   all_to_all_bytes=ulysses_bytes(setup), checkpointed=setup.act_ckpt).bytes_per_step


def comm_logger_seconds(setup: Setup) -> float:
    """What DeepSpeed's comms logger adds to a step on several ranks: COMM_LOGGER_S_PER_BYTE per byte a rank sends
    (sent_bytes) and COMM_LOGGER_S_PER_FETCH per ZeRO-3 fetch (dsx.calibration); 0 with it off."""
    if not setup.comm_log or setup.world_size < 2:
        return 0.0
    return COMM_LOGGER_S_PER_BYTE * sent_bytes(setup) + COMM_LOGGER_S_PER_FETCH * zero3_fetches_per_step(setup)


def ulysses_bytes(setup: Setup) -> float:
    """Bytes a rank hands Ulysses' all-to-alls per optimizer step (dsx.comm.predict's count); 0 without Ulysses."""
    if not setup.sequence_parallel:
        return 0.0
    from dsx.comm.predict import ulysses_bytes_of

    return ulysses_bytes_of(setup.ds_config, setup.resolved, setup.micro_batch, setup.grad_accum, setup.act_ckpt)


def ulysses_seconds(setup: Setup) -> float:
    """What Ulysses' all-to-alls add to a step: their bytes at ULYSSES_BYTES_PER_S (dsx.calibration)."""
    return ulysses_bytes(setup) / ULYSSES_BYTES_PER_S


HOST_BOUND_NOTE = 0.3
"""The share of a predicted step spent on host-bound work from which the estimate says that its speed moves with the
machine."""


def estimate(setup: Setup, *, search_max: bool = True) -> Estimate:
    config = setup.ds_config
    stage, offload, offload_params, _ = zero_layout(config)
    precision = precision_of(config)
    n = _params(setup)
    allocated, moment, breakdown = _peak_allocated(setup, setup.micro_batch)
    pipeline = pipeline_summary(setup) if setup.pipeline_stages else None
    world = data_parallel(setup)
    reserved = int(allocated * setup.gpu.fragmentation)
    used = reserved + setup.gpu.context_bytes
    kept_free = _kept_free(setup, setup.micro_batch, moment, breakdown)
    needed = allocated + _beside_allocated(setup.gpu) + kept_free
    capacity = _capacity(setup)
    fraction = offloaded_fraction(setup)
    host, nvme = _host_shares(setup, pipeline)
    seconds = step_time(setup, setup.micro_batch)
    tokens = setup.micro_batch * setup.resolved.seq_len * setup.grad_accum * world // (setup.sequence_parallel or 1)
    notes = []
    if setup.world_size > 1 and stage == 3:
        notes.append(f"ZeRO-3 across GPUs: {zero3_fetches_per_step(setup):,.0f} parameter fetches a step at "
                     f"{ZERO3_FETCH_S * 1e3:.3g} ms each ({zero3_fetch_seconds(setup):.2f} s, dsx.calibration."
                     "ZERO3_FETCH_S; over NVLink their bandwidth is in that price)")
        if extra := collective_seconds(setup):
            notes.append(f"ZeRO-3 over --link-bandwidth {setup.link_busbw / 1e9:g} GB/s: {extra * 1e3:,.1f} ms a step, "
                         f"{ZERO3_LINK_EXPOSED:.1%} of its {sent_bytes(setup) / 2**30:,.2f} GiB's extra time over "
                         f"NVLink (dsx.calibration.ZERO3_LINK_EXPOSED: the rest overlaps the compute; three pairs over "
                         "sockets on 2 H200s paid 55-101%)")
    elif collectives := collective_seconds(setup):
        zero = setup.ds_config.get("zero_optimization") or {}
        overlap = (" (the config turns overlap_comm on: not measured, priced as if nothing overlapped)"
                   if zero.get("overlap_comm") is True else "")
        source = (f"--link-bandwidth {setup.link_busbw / 1e9:g} GB/s" if setup.link_busbw else
                  f"the {setup.gpu.key}'s NVLink, {setup.gpu.link_busbw / 1e9:.0f} GB/s, measured between two GPUs of "
                  "one host (between nodes: --link-bandwidth)")
        notes.append(f"ZeRO-{stage}'s collectives: {collectives * 1e3:,.1f} ms a step ({sent_bytes(setup) / 2**30:,.2f} "
                     f"GiB a rank sends, at {source}); DeepSpeed runs them on the compute stream, none hidden"
                     + overlap)
    elif setup.world_size > 1 and not setup.sequence_parallel:
        notes.append("communication between GPUs is not modelled here: the speed is an upper bound")
    if (hooks := zero3_hook_seconds(setup)) and setup.gpu.host_loop_ns:
        on_host = (f"a host of {setup.host_loop_ns:.1f} ns a Python loop iteration" if setup.host_loop_ns else
                   f"a host of {setup.gpu.host_loop_ns:.3g} ns a Python loop iteration, the calibration's "
                   "(--host-speed: another)")
        notes.append(f"ZeRO-3's hooks: {hooks:.2f} s a step on {on_host}, beyond the compute that hides the rest "
                     "(they run in Python beside the GPU's kernels and slow with the host, dsx.host.python_loop_ns; "
                     "dsx.calibration.GpuKind.host_loop_ns, ZERO3_HOST_SENSITIVITY)")
    check = overflow_check_seconds(setup)
    host_bound = (hooks + check + zero3_fetch_seconds(setup)) / seconds if seconds else 0.0
    if host_bound >= HOST_BOUND_NOTE:
        notes.append(f"{host_bound:.0%} of this step waits on the host (ZeRO-3's hooks and fetches, the per-tensor "
                     "overflow check): such steps move with the machine; one gpt2-xl ZeRO-3 configuration ran 0.95-1.67 "
                     "s a step on nine machines of one GPU kind (bench/estimator/terms.md)")
    if check:
        why = ("bf16.check_grad_overflow false drops it, and with it the skipping of a step whose gradients "
               "overflowed; --precision bf16-autocast at ZeRO 1-3 skips such a step without it (the gradient norm "
               "catches the overflow)") if precision == "bf16" else "fp16's loss scaling needs it"
        notes.append(f"DeepSpeed's overflow check: {check * 1e3:,.1f} ms a step "
                     f"({OVERFLOW_CHECK_S_PER_TENSOR * 1e3:.3g} ms per gradient tensor a rank checks, "
                     f"dsx.calibration.OVERFLOW_CHECK_S_PER_TENSOR); {why}")
    if precision == AUTOCAST:
        notes.append("bf16-autocast: fp32 weights and gradients, bf16 matrix products, no per-tensor overflow check; "
                     "activations as dsx.activations emulates CUDA's autocast")
        if cast := autocast_seconds(setup):
            notes.append(f"bf16-autocast at ZeRO-{stage}: {cast * 1e3:,.1f} ms a step for its fp32 gradients "
                         f"({AUTOCAST_S_PER_PARAM * 1e12:.3g} ps per parameter and micro-batch, dsx.calibration."
                         "AUTOCAST_S_PER_PARAM: copy kernels in the backward, measured on H200s); llama-1b ran 0.86x "
                         "bf16 at ZeRO-2, GPT-2 124M 1.13x (its overflow check saved more)")
        if stage == 0:
            notes.append(AUTOCAST_AT_ZERO0)
    if own := micro_batch_seconds(setup):
        notes.append(f"each micro-batch's own cost: {own * 1e3:,.1f} ms a step ({own / setup.grad_accum * 1e3:,.1f} ms "
                     f"a micro-batch besides its samples, {setup.gpu.micro_batch_s_per_param * 1e12:.3g} ps per "
                     "parameter, dsx.calibration.GpuKind.micro_batch_s_per_param, measured at ZeRO 0-2): fewer, "
                     "larger micro-batches pay it fewer times")
    if accumulate := bf16_optimizer_seconds(setup):
        notes.append(f"DeepSpeed's BF16_Optimizer (bf16 at ZeRO-0): {accumulate * 1e3:,.1f} ms a step adding each "
                     f"gradient into its fp32 copy tensor by tensor ({BF16_OPTIMIZER_S_PER_TENSOR * 1e3:.3g} ms per "
                     "tensor and micro-batch, dsx.calibration.BF16_OPTIMIZER_S_PER_TENSOR; ZeRO-1/2's gradient path "
                     "is in the calibration rows' own terms)")
    if logger := comm_logger_seconds(setup):
        notes.append(f"DeepSpeed's comms logger: {logger * 1e3:,.1f} ms a step (it synchronises the device after "
                     "every collective, dsx.calibration.COMM_LOGGER_S_PER_BYTE and _PER_FETCH): on in the timed "
                     "steps of a 1-bit run or one with fewer than 2 warm-up steps; dsx run counts a warm-up step "
                     "otherwise")
    if kept_free:
        notes.append(f"{kept_free / 2**30:,.2f} GiB ({setup.activation_margin:.0%} of the activations) kept free on "
                     "the GPU besides: the estimate's worst under-prediction of them on the long-context rows "
                     "(dsx.fit.ACTIVATION_ERROR)")
    if offloaded_inputs := act_offload_bytes(setup):
        notes.append(f"--act-ckpt-offload: {offloaded_inputs / 2**30:,.1f} GiB of checkpointed inputs a step "
                     f"at {ACT_OFFLOAD_BYTES_PER_S / 1e9:.3g} GB/s ({act_offload_seconds(setup):.2f} s, "
                     "dsx.calibration.ACT_OFFLOAD_BYTES_PER_S: the copy to the host and the recompute's copy back, "
                     "on the compute stream)")
    if setup.sequence_parallel:
        notes.append(f"Ulysses' all-to-alls: {ulysses_bytes(setup) / 2**30:,.1f} GiB a step and rank at "
                     f"{ULYSSES_BYTES_PER_S / 1e9:.3g} GB/s ({ulysses_seconds(setup):.2f} s, dsx.calibration."
                     "ULYSSES_BYTES_PER_S, fitted on a ZeRO-2 run: it folds that run's gradient collectives in; other "
                     "stages' are not modelled)")
    notes += host_notes(setup, fraction)
    if pipeline:
        notes.append(f"pipeline: the largest stage's memory (stage {pipeline['largest_stage']}); speed = (micro-batches"
                     " + stages - 1) x the slowest stage's micro-batch time: the 1F1B bubble, no transfer time")
    resources = fit_resources(setup.ranks_per_host or setup.world_size, needed, capacity, host, setup.host_memory,
                              nvme, setup.nvme_free, activation_margin=setup.activation_margin)
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
