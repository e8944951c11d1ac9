"""Before the first trial: the configurations dsx refuses (preflight), and what dsx estimate predicts of the
others on a calibrated GPU (plan: the order, likely fastest first, the skips, the micro-batch to start from).

Both resolve trials through dsx.run and dsx.estimate, imported when called: `dsx sweep --help` stays light.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field, replace

from dsx.sweep.grid import AUTO, Configuration, SweepError, SweepSpec
from dsx.sweep.space import sweep_configurations
from dsx.sweep.trials import cap_filling_micro_batches, global_batch_grad_accum, micro_batch_ceiling, run_request
from dsx.units import fmt_gib


def preflight(spec: SweepSpec) -> dict[Configuration, str]:
    """Resolve every configuration at its first micro-batch before anything runs (--dry-run too): a configuration
    dsx refuses (a combination of --vary values the model rejects, a config with lint errors...) is skipped with
    the reason. The sweep stops here (SweepError) when a --vary value cannot be built in any configuration (an
    unknown key, a value the model rejects whatever the other axes are), or when dsx refuses every configuration."""
    from dsx.run import RunRefused, resolve_trial

    first = spec.mb_start if spec.micro_batch == AUTO else min(spec.micro_batch)
    runnable = [c for c in sweep_configurations(spec) if not c.problem(spec.nvme_path)]
    refused: dict[Configuration, str] = {}
    for configuration in runnable:
        try:
            resolve_trial(run_request(spec, configuration, first, "fixed"))
        except RunRefused as exc:
            refused[configuration] = f"refused: {exc}"
    unbuildable: dict[str, list[str]] = {}  # reason -> the KEY=VALUE of --vary that no configuration can build
    for key, values in spec.vary.items():
        for value in values:
            points = [c for c in runnable if (key, value) in c.vary]
            if not points or not all(c in refused for c in points):
                continue
            try:  # refused everywhere: its own fault only if it is refused alone too (not just by its partners)
                resolve_trial(run_request(spec, replace(points[0], vary=((key, value),)), first, "fixed"))
            except RunRefused as exc:
                unbuildable.setdefault(str(exc), []).append(f"{key}={json.dumps(value)}")
    if unbuildable:
        raise SweepError("; ".join(f"--vary {', '.join(axes)} cannot be built: {reason}"
                                   for reason, axes in unbuildable.items()) + " (nothing was run)")
    if runnable and len(refused) == len(runnable):
        raise SweepError(next(iter(refused.values())).removeprefix("refused: "))
    if not runnable:
        raise SweepError("no configuration can run: " + "; ".join(
            f"{c.label}: {c.problem(spec.nvme_path)}" for c in sweep_configurations(spec)))
    return refused


PREDICTED_STEP = 1.25
"""Growth (and shrink) factor of the micro-batch search from a predicted start: the estimate's memory error is
within a few percent on the H100 rows, so the boundary is one or two steps away."""


@dataclass
class Plan:
    """What the estimate says of one configuration before it runs."""

    configuration: Configuration
    start: int
    """First micro-batch of the auto search: the predicted largest that fits, within --mb-start..--mb-max."""
    predicted_max: int | None = None
    tokens_per_s: float | None = None
    """Predicted at the start micro-batch (the order of the configurations)."""
    skip: str | None = None
    """Why the configuration is skipped: predicted not to fit even at the smallest micro-batch, or more than
    --keep-within slower than the predicted fastest."""
    skip_micro_batches: list[int] = field(default_factory=list)
    """Fixed micro-batches predicted not to fit (skipped)."""


def visible_gpu_kind(spec: SweepSpec) -> str | None:
    """The calibrated GPU kind the estimates use: --gpu-kind, else the first visible GPU when it is one."""
    if spec.estimate_gpu:
        return spec.estimate_gpu
    from dsx.estimate import gpu_kind_of
    from dsx.estimate.assumed import visible_gpus

    gpus = visible_gpus()
    kind = gpu_kind_of(gpus[0]) if gpus else None
    return kind.key if kind else None


def plan(spec: SweepSpec, configurations: list[Configuration], gpu: str) -> list[Plan]:
    """Estimate every configuration on `gpu` and order them, likely fastest first; those predicted not to fit (GPU
    memory at the smallest micro-batch, the host's memory, the NVMe path's space), or slower than the fastest by more
    than --keep-within, are skipped and go last. In the default search (SweepSpec.grad_accum_choices) each
    configuration gets the grad-accum the estimate picks (dsx.sweep.space.choose_grad_accum)."""
    from dsx.estimate import GPUS, EstimateError, Setup, estimate
    from dsx.estimate.rows import setup_of_trial
    from dsx.fit import host_capacity, nvme_capacity
    from dsx.run import RunRefused, resolve_trial

    kind = GPUS[gpu]
    host, nvme = host_capacity(spec.host_memory), nvme_capacity(spec.nvme_free, spec.nvme_path)
    plans: list[Plan] = []
    fixed = spec.micro_batch != AUTO
    for configuration in configurations:
        first = min(spec.micro_batch) if fixed else spec.mb_start
        try:
            trial = resolve_trial(run_request(spec, configuration, first, "fixed"))
        except RunRefused:
            plans.append(Plan(configuration, spec.mb_start))
            continue

        def setup(micro_batch: int, grad_accum: int | None = None, trial=trial, configuration=configuration) -> Setup:
            if grad_accum is None:  # --max-global-batch derives it from the micro-batch
                grad_accum = global_batch_grad_accum(spec, configuration, micro_batch) or trial.grad_accum
            return setup_of_trial(trial, kind, micro_batch, grad_accum, host_memory=host, nvme_free=nvme,
                                  activation_margin=spec.activation_margin, link_busbw=spec.link_busbw)

        try:
            if spec.grad_accum_choices and configuration.grad_accum is None and spec.max_global_batch is None:
                grad_accum = _grad_accum(spec, setup, first)
                configuration = replace(configuration, grad_accum=grad_accum)
                setup = functools.partial(setup, grad_accum=grad_accum)
            predicted = estimate(setup(first))
        except EstimateError:
            plans.append(Plan(configuration, spec.mb_start))
            continue
        item = Plan(configuration, spec.mb_start, predicted.max_micro_batch)
        beside_gpu = [r for r in predicted.resources[1:] if not r["fits"]]
        if beside_gpu:
            item.skip = "predicted not to fit: " + "; ".join(
                f"{r['name']} needs {fmt_gib(r['needed'])} GiB ({r['detail']}), has {fmt_gib(r['capacity'])} GiB"
                for r in beside_gpu) + " (--no-prune runs it)"
        elif predicted.max_micro_batch is None:
            item.skip = (f"predicted not to fit: {fmt_gib(predicted.needed)} GiB at micro-batch {first}, "
                         f"{fmt_gib(predicted.capacity)} GiB available (--no-prune runs it)")
        elif fixed:
            item.skip_micro_batches = [mb for mb in spec.micro_batch if mb > predicted.max_micro_batch]
            runnable = [mb for mb in spec.micro_batch if mb <= predicted.max_micro_batch]
            if not runnable:
                item.skip = (f"predicted not to fit at micro-batch {', '.join(map(str, spec.micro_batch))} (the "
                             f"largest predicted to fit is {predicted.max_micro_batch}; --no-prune runs them)")
            else:
                item.tokens_per_s = max(estimate(setup(mb), search_max=False).tokens_per_s for mb in runnable)
        else:
            item.start = max(spec.mb_start, min(micro_batch_ceiling(spec, configuration), predicted.max_micro_batch))
            filling = cap_filling_micro_batches(spec, configuration)
            if filling:  # the search starts from the largest cap-filling micro-batch at or below the prediction
                item.start = max([mb for mb in filling if mb <= item.start] or filling[:1])
            item.tokens_per_s = estimate(setup(item.start), search_max=False).tokens_per_s
        plans.append(item)
    if spec.search == "default":
        _skip_twins(plans)
    for item in plans:
        # against the fastest that trains the same model: each sparse layout is a model of its own, and dense
        # attention is not pruned for a sparse layout predicted faster (a sweep changes how, not what, it trains)
        fastest = max((p for p in plans if p.skip is None and p.tokens_per_s
                       and _attention(p.configuration) == _attention(item.configuration)),
                      key=lambda p: p.tokens_per_s, default=None)
        if item.skip is None and item.tokens_per_s and fastest and \
                item.tokens_per_s < (1 - spec.keep_within) * fastest.tokens_per_s:
            slower = 1 - item.tokens_per_s / fastest.tokens_per_s
            item.skip = (f"predicted {item.tokens_per_s:,.0f} tokens/s, {slower:.0%} below the predicted fastest "
                         f"({fastest.configuration.label}, {fastest.tokens_per_s:,.0f}; --keep-within "
                         f"{math.ceil(slower * 100) / 100:g} or --no-prune runs it)")
    ordered = sorted(plans, key=lambda p: (p.skip is not None, -(p.tokens_per_s or 0.0)))
    if spec.top is not None:
        for item in [p for p in ordered if p.skip is None][spec.top:]:
            item.skip = f"beyond --top {spec.top} (predicted {item.tokens_per_s or 0:,.0f} tokens/s)"
    return ordered


def _attention(configuration: Configuration) -> str:
    """The attention a configuration trains with: 'dense', or its --sparse-attention word."""
    return "dense" if configuration.sparse in (None, "none", "dense") else configuration.sparse


def _grad_accum(spec: SweepSpec, setup, first: int) -> int:
    """The default search's grad-accum for one configuration: each candidate estimated at its own largest
    micro-batch (accumulation keeps ZeRO-1/2's gradients through the forward passes), the smallest within
    GRAD_ACCUM_WITHIN of the fastest; the first candidate when none fits."""
    from dsx.estimate import estimate
    from dsx.sweep.space import choose_grad_accum

    predicted = {}
    for grad_accum in spec.grad_accum_choices:
        largest = estimate(setup(first, grad_accum)).max_micro_batch
        if largest is not None:
            micro_batch = max(spec.mb_start, min(spec.mb_max, largest))
            at = estimate(setup(micro_batch, grad_accum), search_max=False)
            predicted[grad_accum] = (at.tokens_per_s, at.step_time_s)
    return choose_grad_accum(predicted) if predicted else spec.grad_accum_choices[0]


def _skip_twins(plans: list[Plan]) -> None:
    """The default search runs one of the configurations the estimate cannot tell apart (ZeRO-1 and ZeRO-2 on one
    GPU, compile at ZeRO-3): the first of them in the search's order; the others are skipped."""
    seen: dict[tuple, Plan] = {}
    for item in plans:
        if item.skip is not None or not item.tokens_per_s:
            continue
        # a point with kernels or float8 is nobody's twin: their factors were measured on one Llama shape only
        twin = seen.setdefault((item.start, item.predicted_max, round(item.tokens_per_s, 3),
                                item.configuration.kernels, item.configuration.fp8), item)
        if twin is not item:
            item.skip = (f"predicted the same as {twin.configuration.label} (same largest micro-batch and tokens/s): "
                         "the default search runs one of them (--no-prune runs both)")
