"""The default search of `dsx sweep --model M` (no axis given): how to train M fastest here, not what to train.

ZeRO stage (1, 2, 3) x optimizer offload (none; full CPU offload; at ZeRO-3 the partial ratios DeepSpeed can tell
apart for this model) x activation checkpointing (off, on) x compile (off, on), each at the gradient accumulation
and micro-batch the estimate picks. The precision, the optimizer, dropout, clipping and every --set/--ds-set the
user gave stay as given in every configuration: a sweep changes how the model is trained, never what.

dsx.sweep.planning then estimates every configuration (GPU, host memory, NVMe), skips those predicted not to fit
and those predicted more than --keep-within slower than the fastest, and orders the rest fastest first, so only a
few run; each runs the micro-batch search from its predicted largest micro-batch.
"""

from __future__ import annotations

from dsx.sweep.grid import Configuration, SweepSpec

ZERO_STAGES = (1, 2, 3)
"""ZeRO-0 is left out: with bf16 DeepSpeed wraps the optimizer in its BF16_Optimizer there, 0.70x of ZeRO-1 on an
H100 (bench/mfu/README.md), and it never fits more than ZeRO-1."""

GRAD_ACCUM_CHOICES = (1, 2, 4, 8, 16)
"""Gradient accumulation steps the default search considers for each configuration."""

GRAD_ACCUM_WITHIN = 0.02
"""A configuration runs at the smallest grad-accum predicted within this fraction of the tokens/s of the best
candidate: accumulating spreads the once-per-step work (the optimizer step, offloaded or not) over more tokens at
a falling rate, and every extra micro-batch makes each trial longer."""

TRIAL_STEP_SECONDS = 30.0
"""Grad-accum candidates predicted to make a step longer than this are left out (1 always stays): a trial runs
--warmup + --steps steps (7 by default), so its steps take at most a few minutes beside DeepSpeed's start-up."""

RATIO_STEPS = tuple(tenth / 10 for tenth in range(9, 0, -1))
"""The partial offload ratios considered, 0.9 down to 0.1; of those that split the model's optimizer sub-groups
the same way (DeepSpeed offloads whole sub-groups, dsx.offload), the largest is kept."""


def partial_ratios(sub_groups: int) -> list[float]:
    """The offload ratios below 1 that put a different number of a model's `sub_groups` on the CPU, one per split
    (the largest ratio of each), none of them full offload: int((1 - r) x sub_groups) sub-groups stay on the GPU.
    llama-7b on one GPU (7 sub-groups): 0.8, 0.7, 0.5, 0.4, 0.2, 0.1; a model of one sub-group has none."""
    chosen: dict[int, float] = {}
    for ratio in RATIO_STEPS:
        on_gpu = int((1 - ratio) * sub_groups)  # DeepSpeed's expression (runtime/zero/stage3.py)
        if 0 < on_gpu < sub_groups and on_gpu not in chosen:
            chosen[on_gpu] = ratio
    return sorted(chosen.values(), reverse=True)


def _sub_groups(spec: SweepSpec, gpus: int | None) -> int:
    """The model's ZeRO-3 optimizer sub-groups per rank, from the config a ZeRO-3 CPU-offload trial would get
    (its world size, its sub_group_size); 1 when dsx would refuse that trial (preflight says why)."""
    from dsx.offload import sub_group_size, sub_group_sizes
    from dsx.run import RunRefused, resolve_trial
    from dsx.sweep.trials import run_request

    probe = Configuration(3, "cpu", "none", spec.precision[0], False, False, gpus)
    try:
        trial = resolve_trial(run_request(spec, probe, 1, "fixed"))
    except RunRefused:
        return 1
    return len(sub_group_sizes(trial.resolved, trial.world_size, sub_group_size(trial.ds_config)))


def sweep_configurations(spec: SweepSpec) -> list[Configuration]:
    """What a sweep runs: the default search's configurations, or the product of the axes the user gave."""
    return default_configurations(spec) if spec.search == "default" else spec.grid_configurations()


def default_configurations(spec: SweepSpec) -> list[Configuration]:
    """Every configuration of the default search for the spec's model, precision and GPU counts, times the --kernels
    and --fp8 axes when given (Liger only eager, float8 only below ZeRO-3: dsx.run.kernels refuses the others);
    grad_accum is left to the plan (SweepSpec.grad_accum_choices)."""
    points: list[Configuration] = []
    for gpus in spec.gpus:
        offloads: list[tuple[int, str, float | None]] = []
        for zero in ZERO_STAGES:
            offloads += [(zero, "none", None), (zero, "cpu", None)]
        offloads += [(3, "cpu", ratio) for ratio in partial_ratios(_sub_groups(spec, gpus))]
        for zero, offload, ratio in sorted(offloads, key=lambda o: (o[0], o[1] != "none", -(o[2] or 1.0))):
            for act_ckpt in (False, True):
                for compile_ in spec.default_compile:
                    for kernels in spec.kernels if not compile_ else [k for k in spec.kernels if k != "liger"]:
                        for fp8 in spec.fp8 if zero != 3 else [None]:  # dsx.run.kernels refuses float8 at ZeRO-3
                            points.append(Configuration(zero, offload, "none", spec.precision[0], act_ckpt, compile_,
                                                        gpus, offload_ratio=ratio, kernels=kernels, fp8=fp8))
    return points


def choose_grad_accum(predicted: dict[int, tuple[float, float]]) -> int:
    """From {grad-accum: (predicted tokens/s, predicted step seconds)}: the smallest grad-accum whose tokens/s is
    within GRAD_ACCUM_WITHIN of the best, among those whose step is at most TRIAL_STEP_SECONDS (and 1)."""
    allowed = {ga: tokens for ga, (tokens, step) in predicted.items() if ga == 1 or step <= TRIAL_STEP_SECONDS}
    if not allowed:
        allowed = {min(predicted): predicted[min(predicted)][0]}
    best = max(allowed.values())
    return min(ga for ga, tokens in allowed.items() if tokens >= (1 - GRAD_ACCUM_WITHIN) * best)
