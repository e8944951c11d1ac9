"""`dsx config`: flags or a preset -> a DeepSpeed JSON that validates clean for the target version."""

from __future__ import annotations

import json
import sys
from dataclasses import fields
from pathlib import Path

import click

from dsx.cli.options import (FINITE_FLOAT, act_ckpt_option, ds_config_options, resolve_target_or_fail,
                             target_option)
from dsx.generate import SCHEDULERS, ConfigRequest, ConfigRequestError, generate, parse_set
from dsx.presets import PRESETS
from dsx.versions import NEWEST_KNOWN



def dump(config: dict) -> str:
    """Strict JSON: a non-finite number (Infinity) is refused by the flags; allow_nan=False is the last guard."""
    return json.dumps(config, indent=2, allow_nan=False) + "\n"


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
@click.option("--weight-decay", type=FINITE_FLOAT, help="Weight decay (default 0).")
@click.option("--scheduler", type=click.Choice(SCHEDULERS), help="Learning-rate schedule (default none).")
@click.option("--warmup-steps", type=click.IntRange(min=1), help="Warm-up steps for the schedule (default 100).")
@click.option("--total-steps", type=click.IntRange(min=1), help="Total steps (WarmupDecayLR, WarmupCosineLR).")
@act_ckpt_option("DeepSpeed's activation_checkpointing block, for models that call deepspeed.checkpointing (cpu: "
                 "checkpoints in CPU memory); bare --act-ckpt is on.", cpu=True, default=None)
@click.option("--pipeline-stages", type=click.IntRange(min=1), help="Pipeline stages (ZeRO 0/1 only).")
@click.option("--sparse-attention", type=click.Choice(["fixed", "variable", "bigbird", "bslongformer", "dense"]),
              help="DeepSpeed sparse attention layout (DeepSpeed 0.18 only).")
@click.option("--onebit", type=click.Choice(["adam", "zero-one-adam", "lamb"]),
              help="1-bit optimizer family (DeepSpeed 0.18 only; no ZeRO, fp16).")
@click.option("--hf-auto", is_flag=True, default=None,
              help='Write "auto" exactly where the transformers Trainer / accelerate fill values.')
@click.option("--gradient-clipping", type=FINITE_FLOAT, help="Gradient norm clip, written explicitly (default 1.0).")
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
        for name, entry in PRESETS.items():
            config = _generate_or_fail(name, {}, entry.target or NEWEST_KNOWN)
            path = write_presets / entry.file
            path.parent.mkdir(exist_ok=True)
            path.write_text(dump(config))
            click.echo(f"wrote {path}", err=True)
        return
    config = _generate_or_fail(preset, flags, target)
    note = pinned_preset_note(preset, target)
    if note:
        click.echo(note, err=True)
    text = dump(config)
    if output:
        from dsx.safe_io import OutputError, write_text

        try:
            write_text(output, text)
        except OutputError as exc:
            raise click.UsageError(str(exc)) from None
        click.echo(f"wrote {output}", err=True)
    else:
        sys.stdout.write(text)


PINNED_NOTES = {
    "onebit-adam": "its 1-bit optimizers were removed in DeepSpeed 0.19: run it through a DeepSpeed 0.18.9 lane, "
                   "`dsx run --python PATH/TO/venv18/bin/python --config FILE` (README: \"A DeepSpeed 0.18.9 lane\"); "
                   "on 0.19, ZeRO++ quantized gradients (zero_quantized_gradients) cut gradient traffic instead",
    "sparse-long-context": "DeepSpeed 0.19 rejects the sparse_attention block: `dsx run --config FILE` applies it itself "
                           "(FlexAttention) and hands DeepSpeed the rest; your own script on 0.19 must drop the block",
}
"""What to do with a preset pinned to another DeepSpeed than the installed one."""


def pinned_preset_note(preset: str | None, target_text: str | None) -> str | None:
    """One stderr line when the preset is for another DeepSpeed than the one installed (and no --target-deepspeed
    says the user knows): which, and how dsx runs it anyway."""
    from dsx.versions import installed_deepspeed

    pinned = PRESETS[preset].target if preset in PRESETS else None
    installed = installed_deepspeed()
    if not pinned or target_text or installed is None or installed.split("+")[0] == pinned:
        return None
    return (f"dsx config: note: the {preset} preset is written for DeepSpeed {pinned} (installed here: {installed}); "
            f"{PINNED_NOTES[preset]}")


def _generate_or_fail(preset: str | None, flags: dict, target_text: str | None) -> dict:
    try:
        request, preset_target = request_from(preset, flags)
        target = resolve_target_or_fail(target_text or preset_target)
        config = generate(request, target)
    except ConfigRequestError as exc:
        raise click.UsageError(str(exc)) from None
    from dsx.lint.engine import lint

    for finding in lint(config, target=target, world_size=request.world_size // (request.pipeline_stages or 1),
                        hf=request.hf_auto):
        click.echo(f"dsx config: {finding.render()}", err=True)  # what --set chose against dsx's advice
    overwritten = hf_auto_overwrites(flags, config) if request.hf_auto else []
    if overwritten:
        names = " and ".join(overwritten)
        raise click.UsageError(f'--hf-auto conflicts with {names}: --hf-auto writes "auto" there, for the transformers '
                               f"Trainer to fill from TrainingArguments. Drop --hf-auto to write the values, or drop "
                               f"{names} and set them in TrainingArguments")
    return config


# The keys each flag writes. --hf-auto writes "auto" over some of them (which, depends on the target and the
# scheduler), so the flag's value would be lost: a conflict.
FLAG_KEYS = {
    "micro_batch": ("train_micro_batch_size_per_gpu",),
    "grad_accum": ("gradient_accumulation_steps",),
    "train_batch": ("train_batch_size",),
    "lr": ("optimizer.params.lr",),
    "weight_decay": ("optimizer.params.weight_decay",),
    "gradient_clipping": ("gradient_clipping",),
    "precision": ("bf16.enabled", "fp16.enabled"),
    "warmup_steps": ("scheduler.params.warmup_num_steps",),
    "total_steps": ("scheduler.params.total_num_steps",),
}


def hf_auto_overwrites(flags: dict, config: dict) -> list[str]:
    """The flags the user gave whose keys all hold "auto" in the --hf-auto config (their values were dropped)."""
    def value_at(dotted: str):
        node = config
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return node

    return ["--" + flag.replace("_", "-") for flag, keys in FLAG_KEYS.items()
            if flags.get(flag) is not None and all(value_at(key) == "auto" for key in keys)]
