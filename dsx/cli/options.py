"""Options shared by several commands."""

from __future__ import annotations

import click

from dsx.versions import Version, VersionError, resolve_target


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
