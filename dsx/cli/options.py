"""Options shared by several commands."""

from __future__ import annotations

import click

from dsx.versions import Version, VersionError, resolve_target


CHOICE_DEVICES = click.Choice(["none", "cpu", "nvme"])

# The DeepSpeed-config choices `dsx config` and `dsx run` share (keys of dsx.generate.ConfigRequest).
_DS_CONFIG_OPTIONS = (
    click.option("--zero", type=click.IntRange(0, 3), help="ZeRO stage 0-3 (default 2)."),
    click.option("--offload", type=CHOICE_DEVICES, help="Where the optimizer states and step live (default none)."),
    click.option("--offload-params", type=CHOICE_DEVICES, help="Where ZeRO-3 keeps parameters (default none)."),
    click.option("--nvme-path", help="Directory on a local NVMe drive for NVMe offload."),
    click.option("--precision", type=click.Choice(["bf16", "fp16", "fp32"]), help="Training precision (default bf16)."),
    click.option("--micro-batch", type=click.IntRange(min=1), help="Samples per GPU per forward/backward (default 1)."),
    click.option("--grad-accum", type=click.IntRange(min=1), help="Gradient accumulation steps (default 1)."),
    click.option("--optimizer", help="Optimizer type: AdamW (default; DeepSpeed's FusedAdam), Adam, Lamb, Lion, "
                                     "Adagrad, Muon, ..."),
    click.option("--lr", type=float, help="Learning rate (default 1e-4)."),
)


def ds_config_options(f):
    for option in reversed(_DS_CONFIG_OPTIONS):
        f = option(f)
    return f


def target_option(f):
    return click.option(
        "--target-deepspeed", "target", metavar="VERSION", default=None,
        help="DeepSpeed version the config is for (default: the installed one, else the newest dsx knows).",
    )(f)


def resolve_target_or_fail(text: str | None) -> Version:
    try:
        return resolve_target(text)
    except VersionError as exc:
        raise click.UsageError(str(exc)) from None
