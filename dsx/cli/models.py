"""`dsx models`: the model presets with their shapes and parameter counts (counted on the meta device)."""

from __future__ import annotations

import json
import sys

import click

from dsx.models import MODELS, ModelError, parse_overrides, resolve_model

COLUMNS = ("name", "family", "task", "layers", "hidden", "heads", "seq", "vocab", "params", "GFLOP/token")


def rows(names, overrides: dict, seq_len: int | None, vocab_pad: int | None) -> list[dict]:
    from dsx.flops import model_flops_per_token, param_stats

    out = []
    for name in names:
        resolved = resolve_model(name, overrides, seq_len, vocab_pad)
        stats = param_stats(resolved)
        out.append({**resolved.describe(), "params": stats.total, "flop_params": stats.flop_params,
                    "train_flops_per_token": model_flops_per_token(resolved), "source": resolved.preset.source})
    return out


def preset_rows() -> list[dict]:
    """rows() of every preset as it is, from dsx's cache when the presets, the code that counts them and
    transformers are unchanged: counting builds 15 models on the meta device (seconds of torch + transformers
    imports) for a table that only changes when one of those does."""
    import dataclasses
    import hashlib
    import json
    from importlib import metadata
    from pathlib import Path

    from dsx.cache import dsx_cache, read_json, write_json

    package = Path(__file__).resolve().parent.parent
    key = hashlib.sha256(json.dumps([
        [dataclasses.asdict(p) for p in MODELS.values()],
        metadata.version("transformers"),
        [(package / f).read_text() for f in ("models.py", "model_presets.py", "flops.py", "cli/models.py")],
    ], sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = dsx_cache() / "models" / f"presets-{key}.json"
    cached = read_json(path)
    if isinstance(cached, list) and [r.get("name") for r in cached] == list(MODELS):
        return cached
    fresh = rows(list(MODELS), {}, None, None)
    write_json(path, fresh)
    return fresh


def _human(n: int) -> str:
    for unit, scale, digits in (("B", 1e9, 2), ("M", 1e6, 1), ("K", 1e3, 1)):
        if n >= scale:
            return f"{n / scale:.{digits}f}{unit}"
    return str(n)


def table(data: list[dict]) -> str:
    cells = [[r["name"], r["family"], r["task"], str(r["layers"]), str(r["hidden"]), str(r["heads"]),
              str(r["seq_len"]), f"{r['vocab_size']:,}", f"{r['params']:,} ({_human(r['params'])})",
              f"{r['train_flops_per_token'] / 1e9:.3g}"] for r in data]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(COLUMNS)]
    right = {3, 4, 5, 6, 7, 8, 9}
    lines = []
    for line in [list(COLUMNS), *cells]:
        lines.append("  ".join(v.rjust(w) if i in right else v.ljust(w)
                               for i, (v, w) in enumerate(zip(line, widths))).rstrip())
    return "\n".join(lines) + "\n"


@click.command("models")
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a transformers config attribute of the named models, e.g. --set n_layer=8 "
                   "(VALUE is JSON).")
@click.option("--seq-len", type=int, help="Sequence length (default: the preset's).")
@click.option("--vocab-pad", type=int, help="Round the vocab up to a multiple of this (64: GPT-2's 50257 -> 50304).")
@click.option("--sources", is_flag=True, help="Also print where each shape comes from.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable: one JSON list.")
def command(names, sets, seq_len, vocab_pad, sources, as_json):
    """List the model presets with parameter counts.

    Parameters count like transformers' num_parameters() (a tied embedding / LM head once). GFLOP/token is the
    training (forward + backward) model FLOPs per token at the sequence length shown: 6N + 12·L·H·Q·T
    (dsx/flops.py says which parameters make N).

    \b
    dsx models
    dsx models gpt2 --vocab-pad 64
    dsx models gpt2-medium --set n_layer=40 --set n_embd=1536 --vocab-pad 64
    """
    try:
        overrides = parse_overrides(sets)
        if (overrides or seq_len is not None or vocab_pad is not None) and not names:
            raise ModelError("--set, --seq-len and --vocab-pad apply to named models: dsx models NAME --set ...")
        data = rows(names, overrides, seq_len, vocab_pad) if names else preset_rows()
    except ModelError as exc:
        raise click.UsageError(str(exc)) from None
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    sys.stdout.write(table(data))
    if sources:
        width = max(len(r["name"]) for r in data)
        for r in data:
            click.echo(f"{r['name']:<{width}}  {r['source']}")
