"""`dsx estimate --model M --largest`: the largest model of M's family that trains here, with its configuration."""

from __future__ import annotations

import json

import click

from dsx.units import fmt_gib, gib


GIVEN_REFUSED = {"config": "--config", "preset": "--preset", "pipeline_stages": "--pipeline-stages",
                 "zero": "--zero", "offload": "--offload", "offload_params": "--offload-params",
                 "micro_batch": "--micro-batch", "grad_accum": "--grad-accum",
                 "act_ckpt_offload": "--act-ckpt-offload", "tiled_mlp": "--tiled-mlp", "kernels": "--kernels",
                 "fp8": "--fp8", "sparse_attention": "--sparse-attention"}
"""Options --largest chooses itself (the configuration is its answer), refused beside it."""


def largest_command(*, model, sets, seq_len, vocab_pad, gpus, gpu_kind, memory_cap, attn, host_memory, nvme_free,
                    min_tflops, as_json, given: dict) -> None:
    from dsx.fit import host_capacity, with_host_margin
    from dsx.largest import LargestError, largest
    from dsx.models import ModelError, parse_overrides, resolve_model
    from dsx.sweep import SweepSpec

    chosen = [flag for key, flag in GIVEN_REFUSED.items() if given.get(key)]
    if given.get("act_ckpt") or given.get("compile"):
        chosen += ["--act-ckpt"] * bool(given.get("act_ckpt")) + ["--compile"] * bool(given.get("compile"))
    if chosen:
        raise click.UsageError(f"--largest chooses the configuration itself: drop {', '.join(chosen)}")
    try:
        overrides = parse_overrides(sets)
        resolve_model(model, overrides, seq_len=seq_len, vocab_pad=vocab_pad)
    except ModelError as exc:
        raise click.UsageError(str(exc)) from None
    spec = SweepSpec(model=model, zero=[1, 2, 3], offload=["none"], overrides=overrides, seq_len=seq_len,
                     vocab_pad=vocab_pad, precision=[given.get("precision") or "bf16"],
                     optimizer=given.get("optimizer"),
                     lr=given.get("lr"), ds_sets=tuple(given.get("ds_sets") or ()), attn=attn, gpus=[gpus],
                     memory_cap=memory_cap, host_memory=with_host_margin(host_capacity(host_memory)),
                     nvme_free=nvme_free,
                     nvme_path=given.get("nvme_path"), mb_max=1024)
    try:
        answer = largest(spec, gpu_kind, min_tflops)
    except LargestError as exc:
        raise click.UsageError(str(exc)) from None
    if as_json:
        click.echo(json.dumps(_as_dict(answer, spec), indent=2, default=str))
        return
    click.echo("\n".join(_lines(answer, spec, gpu_kind, host_capacity(host_memory), min_tflops)))


def _family(answer) -> str:
    from dsx.largest import LADDERS

    return LADDERS[answer.ladder].family


def plan_command(spec, plan) -> str:
    """The `dsx run` command line of a planned configuration (its results file left to dsx run's default)."""
    import shlex

    from dsx.sweep.trials import run_request

    request = run_request(spec, plan.configuration, plan.start, "fixed")
    return shlex.join([a for a in request.command if a not in ("--results", request.results)])


def _command(answer, spec) -> str:
    """The answer's `dsx run` command, in the environment an answer at the GPU's edge runs in (dsx.fit.EXPANDABLE)."""
    from dsx.fit import EXPANDABLE

    rung_spec = spec.__class__(**{**spec.__dict__, "overrides": {**spec.overrides,
                                                                 **answer.rung.overrides(_family(answer))}})
    return f"{EXPANDABLE} {plan_command(rung_spec, answer.plan)}"


def _lines(answer, spec, gpu_kind: str, host: int, min_tflops: float | None) -> list[str]:
    from dsx.fit import HOST_ERROR
    from dsx.units import fmt_params

    where = (f"{spec.gpus[0]} x {gpu_kind}" + (f" capped at {gib(spec.memory_cap)}" if spec.memory_cap else "")
             + f", host {gib(host)}")
    speed = f" at {min_tflops:g}+ predicted TFLOP/s" if min_tflops is not None else ""
    lines = [f"largest {answer.ladder} model{speed} on {where} (the {answer.ladder} ladder: its published sizes and "
             f"the steps between them; dsx.largest):",
             f"  host memory planned with: {gib(spec.host_memory)} ({gib(host)} less {HOST_ERROR:.1%}, the "
             f"estimator's worst judged host error)"]
    if answer.rung is None:
        lines.append(f"  none: even {fmt_params(answer.next_rung.params)} ({answer.next_rung.describe()}) does not "
                     f"fit: {answer.next_reason}")
        return lines
    rung, e = answer.rung, answer.estimate
    sets = " ".join(f"--set {k}={json.dumps(v)}" for k, v in rung.overrides(_family(answer)).items())
    lines += [f"  {fmt_params(rung.params)} parameters: {rung.describe()}",
              f"  as {answer.preset}: {sets}"]
    if answer.plan is None:
        lines.append("  it fits at micro-batch 1, but no configuration is predicted to run (every one skipped)")
    else:
        tflops = e.tokens_per_s * _flops_per_token(spec, rung, _family(answer)) / e.world_size / 1e12
        lines += [f"  configuration: {answer.plan.configuration.label}, micro-batch {answer.plan.start} "
                  f"(predicted largest {answer.plan.predicted_max})",
                  f"  predicted: {fmt_gib(e.peak_allocated)} GiB allocated on the GPU, host "
                  f"{gib(e.host_per_rank)} per rank, {e.tokens_per_s:,.0f} tokens/s, {tflops:,.0f} model TFLOP/s per "
                  f"GPU; binds: {e.binding}",
                  f"  run it: {_command(answer, spec)}"]
    if answer.next_rung is not None:
        lines.append(f"  next size up, {fmt_params(answer.next_rung.params)} ({answer.next_rung.describe()}), does not "
                     f"fit: {answer.next_reason}")
    lines.append("  note: dsx estimate's tokens/s is rough (bench/estimator/README.md): measure with the command")
    return lines


def _flops_per_token(spec, rung, family: str) -> float:
    from dsx.flops import model_flops_per_token
    from dsx.models import resolve_model

    return model_flops_per_token(resolve_model(spec.model, {**spec.overrides, **rung.overrides(family)},
                                               seq_len=spec.seq_len, vocab_pad=spec.vocab_pad))


def _as_dict(answer, spec) -> dict:
    from dataclasses import asdict

    data = {"model": answer.preset, "ladder": answer.ladder, "largest": asdict(answer.rung) if answer.rung else None,
            "next": asdict(answer.next_rung) if answer.next_rung else None, "next_reason": answer.next_reason}
    if answer.rung is not None:
        data["overrides"] = answer.rung.overrides(_family(answer))
    if answer.plan is not None:
        data.update(configuration=answer.plan.configuration.as_dict(), label=answer.plan.configuration.label,
                    micro_batch=answer.plan.start, command=_command(answer, spec),
                    estimate=answer.estimate.as_dict())
    return data
