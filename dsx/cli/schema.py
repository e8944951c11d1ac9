"""`dsx schema`: the JSON Schema of ds_config.json for a target DeepSpeed version."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from dsx.cli.options import resolve_target_or_fail, target_option
from dsx.json_schema import config_schema


@click.command("schema")
@target_option
@click.option("--hf", is_flag=True, help='Allow "auto" where the transformers Trainer / accelerate fill values.')
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here, not stdout.")
def command(target, hf, output):
    """Write the JSON Schema of the DeepSpeed config (for editors).

    Point VS Code at it with "json.schemas": [{"fileMatch": ["ds_config*.json"], "url": "./ds_config.schema.json"}].
    """
    text = json.dumps(config_schema(resolve_target_or_fail(target), hf=hf), indent=2) + "\n"
    if output:
        from dsx.safe_io import OutputError, write_text

        try:
            write_text(output, text)
        except OutputError as exc:
            raise click.UsageError(str(exc)) from None
        click.echo(f"wrote {output}", err=True)
    else:
        sys.stdout.write(text)
