"""`dsx estimate --model M --longest`: the longest sequence M trains here, with the plain and the tiled loss."""

from __future__ import annotations

import json

import click

from dsx.cli.largest import GIVEN_REFUSED, plan_command
from dsx.units import fmt_gib, gib


def longest_command(*, model, sets, vocab_pad, gpus, gpu_kind, memory_cap, attn, host_memory, nvme_free, as_json,
                    given: dict) -> None:
    from dsx.fit import host_capacity, with_host_margin
    from dsx.longest import longest
    from dsx.models import ModelError, parse_overrides, resolve_model
    from dsx.sweep import SweepSpec

    chosen = [flag for key, flag in {**GIVEN_REFUSED, "seq_len": "--seq-len", "act_ckpt": "--act-ckpt",
                                     "compile": "--compile", "loss": "--loss", "largest": "--largest"}.items()
              if given.get(key)]
    sequence = given.get("sequence_parallel")
    if chosen:
        raise click.UsageError(f"--longest chooses the sequence length and the configuration itself, with either loss: "
                               f"drop {', '.join(chosen)}")
    try:
        overrides = parse_overrides(sets)
        resolved = resolve_model(model, overrides, vocab_pad=vocab_pad)
    except ModelError as exc:
        raise click.UsageError(str(exc)) from None
    spec = SweepSpec(model=model, zero=[1, 2, 3], offload=["none"], overrides=overrides, vocab_pad=vocab_pad,
                     precision=[given.get("precision") or "bf16"], optimizer=given.get("optimizer"), lr=given.get("lr"),
                     ds_sets=tuple(given.get("ds_sets") or ()), attn=attn, gpus=[gpus], memory_cap=memory_cap,
                     host_memory=with_host_margin(host_capacity(host_memory)), nvme_free=nvme_free,
                     nvme_path=given.get("nvme_path"), mb_max=1024, sequence_parallel=given.get("sequence_parallel"))
    losses = ["plain", "tiled"] if resolved.task == "causal-lm" else ["plain"]
    answers = [longest(spec, gpu_kind, loss) for loss in losses]
    if resolved.task == "causal-lm" and resolved.family == "llama":  # ALST's other two savers as well
        from dataclasses import replace

        answers.append(longest(replace(spec, act_ckpt_offload=True, tiled_mlp=True), gpu_kind, "tiled"))
    if as_json:
        click.echo(json.dumps([_as_dict(a) for a in answers], indent=2, default=str))
        return
    where = (f"{gpus} x {gpu_kind}" + (f", Ulysses over {sequence}" if sequence else "")
             + (f" capped at {gib(memory_cap)}" if memory_cap else "")
             + f", host {gib(host_capacity(host_memory))}")
    lines = [f"longest sequence of {model} on {where}, micro-batch 1 (dsx.longest: multiples of 1,024 tokens; "
             "one configuration of the default search must fit):"]
    for answer in answers:
        lines += _lines(answer)
    lines.append("  note: predicted by dsx estimate (its memory model: bench/estimator/README.md); run the command to "
                 "measure")
    click.echo("\n".join(lines))


def _lines(answer) -> list[str]:
    head = f"  --loss {answer.loss}" + (" --act-ckpt-offload --tiled-mlp" if answer.savers else "") + ":"
    if answer.length is None:
        return [f"{head} none: even {answer.next_length:,} tokens do not fit: {answer.next_reason}"]
    lines = [f"{head} {answer.length:,} tokens"]
    if answer.plan is None:
        lines.append("    it fits at micro-batch 1, but no configuration is predicted to run (every one skipped)")
    else:
        e = answer.estimate
        lines += [f"    configuration: {answer.plan.configuration.label}, micro-batch {answer.plan.start}",
                  f"    predicted: {fmt_gib(e.peak_allocated)} GiB allocated on the GPU, host {gib(e.host_per_rank)} "
                  f"per rank, {e.tokens_per_s:,.0f} tokens/s; binds: {e.binding}",
                  f"    run it: {_command(answer)}"]
    if answer.next_length is not None:
        lines.append(f"    {answer.next_length:,} tokens do not fit: {answer.next_reason}")
    if answer.limit:
        lines.append(f"    bounded by {answer.limit}")
    return lines


def _command(answer) -> str:
    from dsx.fit import EXPANDABLE

    return f"{EXPANDABLE} {plan_command(answer.spec, answer.plan)}"


def _as_dict(answer) -> dict:
    data = {"loss": answer.loss, "savers": answer.savers, "longest": answer.length, "next": answer.next_length,
            "next_reason": answer.next_reason, "limit": answer.limit}
    if answer.plan is not None:
        data.update(label=answer.plan.configuration.label, micro_batch=answer.plan.start,
                    command=_command(answer), estimate=answer.estimate.as_dict())
    return data
