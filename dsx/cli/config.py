"""`dsx config`: flags or a preset -> a DeepSpeed JSON that validates clean for the target version."""

from __future__ import annotations

import json
import sys
from dataclasses import fields
from pathlib import Path

import click

from dsx.cli.options import ds_config_options, resolve_target_or_fail, target_option
from dsx.generate import SCHEDULERS, ConfigRequest, ConfigRequestError, generate, parse_set
from dsx.presets import PRESETS
from dsx.versions import NEWEST_KNOWN



def dump(config: dict) -> str:
    return json.dumps(config, indent=2) + "\n"


def request_from(preset: str | None, flags: dict) -> tuple[ConfigRequest, str | None]:
    """Preset values first, then every flag the user actually gave."""
    changes: dict = {}
    preset_target = None
    if preset:
        entry = PRESETS[preset]
        changes.update(entry.changes)
        preset_target = entry.target
    given = {k: v for k, v in flags.items() if v is not None}
    sets = tuple(changes.pop("sets", ())) + tuple(parse_set(s) for s in given.pop("sets", ()))
    changes.update(given)
    allowed = {f.name for f in fields(ConfigRequest)}
    return ConfigRequest(**{k: v for k, v in changes.items() if k in allowed}, sets=sets), preset_target


@click.command("config")
@click.option("--preset", type=click.Choice(sorted(PRESETS)), help="Start from a named preset (see --list).")
@click.option("--list", "list_presets", is_flag=True, help="List the presets and exit.")
@ds_config_options
@click.option("--world-size", type=click.IntRange(min=1), help="Number of GPUs (ranks) the batch is solved for.")
@click.option("--train-batch", type=click.IntRange(min=1), help="Global batch per optimizer step.")
@click.option("--weight-decay", type=float, help="Weight decay (default 0).")
@click.option("--scheduler", type=click.Choice(SCHEDULERS), help="Learning-rate schedule (default none).")
@click.option("--warmup-steps", type=click.IntRange(min=1), help="Warm-up steps for the schedule (default 100).")
@click.option("--total-steps", type=click.IntRange(min=1), help="Total steps (WarmupDecayLR, WarmupCosineLR).")
@click.option("--act-ckpt", type=click.Choice(["none", "on", "cpu"]),
              help="DeepSpeed activation checkpointing block (for models that call deepspeed.checkpointing).")
@click.option("--pipeline-stages", type=click.IntRange(min=1), help="Pipeline stages (ZeRO 0/1 only).")
@click.option("--sparse-attention", type=click.Choice(["fixed", "variable", "bigbird", "bslongformer", "dense"]),
              help="DeepSpeed sparse attention layout (DeepSpeed 0.18 only).")
@click.option("--onebit", type=click.Choice(["adam", "zero-one-adam", "lamb"]),
              help="1-bit optimizer family (DeepSpeed 0.18 only; no ZeRO, fp16).")
@click.option("--hf-auto", is_flag=True, default=None,
              help='Write "auto" exactly where the transformers Trainer / accelerate fill values.')
@click.option("--gradient-clipping", type=float, help="Gradient norm clip, written explicitly (default 1.0).")
@target_option
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Set any dotted key, e.g. --set zero_optimization.overlap_comm=true (VALUE is JSON).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here, not stdout.")
@click.option("--write-presets", type=click.Path(file_okay=False, path_type=Path), hidden=True,
              help="Regenerate every preset into this directory (used for ds_configs/).")
def command(preset, list_presets, target, output, write_presets, **flags):
    """Write a DeepSpeed config from a few choices or a preset.

    \b
    dsx config --zero 3 --offload cpu --offload-params cpu --micro-batch 4 --world-size 8
    dsx config --preset zero2-offload --hf-auto -o ds_config.json
    """
    if list_presets:
        width = max(len(n) for n in PRESETS)
        for name, entry in PRESETS.items():
            pinned = f" [DeepSpeed {entry.target}]" if entry.target else ""
            click.echo(f"{name:<{width}}  {entry.summary}{pinned}")
        return
    if write_presets:
        write_presets.mkdir(parents=True, exist_ok=True)
        for name in PRESETS:
            config = _generate_or_fail(name, {}, PRESETS[name].target or NEWEST_KNOWN)
            (write_presets / f"{name}.json").write_text(dump(config))
            click.echo(f"wrote {write_presets / f'{name}.json'}", err=True)
        return
    config = _generate_or_fail(preset, flags, target)
    text = dump(config)
    if output:
        output.write_text(text)
        click.echo(f"wrote {output}", err=True)
    else:
        sys.stdout.write(text)


def _generate_or_fail(preset: str | None, flags: dict, target_text: str | None) -> dict:
    try:
        request, preset_target = request_from(preset, flags)
        target = resolve_target_or_fail(target_text or preset_target)
        return generate(request, target)
    except ConfigRequestError as exc:
        raise click.UsageError(str(exc)) from None
