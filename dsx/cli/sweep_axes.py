"""How `dsx sweep` reads its LIST options (`--zero 1,2,3`, `--offload-ratio 0.5,1`, `--vary KEY=V1,V2`...): each
word checked, one line naming the option when it is wrong (click.UsageError, exit 2)."""

from __future__ import annotations

import json

import click

from dsx.cli.options import act_ckpt_word

BOOLEAN_WORDS = {"on": True, "off": False, "true": True, "false": False, "yes": True, "no": False, "1": True,
                 "0": False}


def _split(text: str, option: str) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise click.UsageError(f"{option} {text!r}: give a comma-separated list, e.g. {option} 1,2,3")
    return items


def _ints(text: str, option: str, low: int, high: int | None = None) -> list[int]:
    values = []
    for item in _split(text, option):
        try:
            value = int(item)
        except ValueError:
            raise click.UsageError(f"{option}: {item!r} is not a whole number") from None
        if value < low or (high is not None and value > high):
            bound = f"{low}-{high}" if high is not None else f"at least {low}"
            raise click.UsageError(f"{option}: {value} is out of range ({bound})")
        values.append(value)
    return list(dict.fromkeys(values))


def _choices(text: str, option: str, allowed) -> list[str]:
    values = [item.lower() for item in _split(text, option)]
    for value in values:
        if value not in allowed:
            raise click.UsageError(f"{option}: {value!r} is not one of {', '.join(allowed)}")
    return list(dict.fromkeys(values))


def _booleans(text: str, option: str) -> list[bool]:
    values = []
    for item in _split(text, option):
        if item.lower() not in BOOLEAN_WORDS:
            raise click.UsageError(f"{option}: {item!r} is not on/off")
        values.append(BOOLEAN_WORDS[item.lower()])
    return list(dict.fromkeys(values))


def _act_ckpt(text: str) -> list[bool]:
    """--act-ckpt off,on: each word as dsx run takes it (dsx.cli.options.act_ckpt_word)."""
    try:
        return list(dict.fromkeys(act_ckpt_word(item) == "on" for item in _split(text, "--act-ckpt")))
    except ValueError as exc:
        raise click.UsageError(f"--act-ckpt: {exc}") from None


def _words(text: str | None, flag: str, known: tuple[str, ...]) -> list[str | None]:
    """An axis of words, 'none' as None (--kernels none,liger -> [None, 'liger']); not given: [None]."""
    if text is None:
        return [None]
    words = [w.strip().lower() for w in text.split(",") if w.strip()]
    unknown = [w for w in words if w not in ("none", *known)]
    if unknown or not words:
        raise click.UsageError(f"{flag}: unknown word '{unknown[0] if unknown else text}' (known: none, "
                               f"{', '.join(known)})")
    return list(dict.fromkeys(None if w == "none" else w for w in words))


def _sparse_words(text: str) -> list[str | None]:
    """--sparse-attention none,bigbird,auto: each word as dsx run takes it; none is dense attention (None)."""
    from dsx.sparse.spec import SparseRequestError, parse_word

    words: list[str | None] = []
    for item in _split(text, "--sparse-attention"):
        try:
            parse_word(item)
        except SparseRequestError as exc:
            raise click.UsageError(str(exc)) from None
        words.append(None if item.lower() == "none" else item.lower())
    return list(dict.fromkeys(words))


def _ratios(text: str | None) -> list[float | None]:
    """--offload-ratio 0.5,0.7,1: shares of the optimizer to offload, each in (0, 1]; 1 is full offload (None)."""
    if text is None:
        return [None]
    values: list[float | None] = []
    for item in _split(text, "--offload-ratio"):
        try:
            value = float(item)
        except ValueError:
            raise click.UsageError(f"--offload-ratio: {item!r} is not a number") from None
        if not 0 < value <= 1:
            raise click.UsageError(f"--offload-ratio: {item} is out of range (above 0, at most 1: the share of the "
                                   "optimizer offloaded to the CPU)")
        values.append(None if value == 1 else value)
    return list(dict.fromkeys(values))


def _buckets(text: str | None) -> list[int | None]:
    """--bucket-size auto,1e7,5e8: ZeRO bucket sizes in elements; auto is the size dsx writes for the model (None)."""
    if text is None:
        return [None]
    values: list[int | None] = []
    for item in _split(text, "--bucket-size"):
        if item.lower() == "auto":
            values.append(None)
            continue
        try:
            value = float(item)
        except ValueError:
            raise click.UsageError(f"--bucket-size: {item!r} is not a number of elements or auto") from None
        if value != int(value) or value < 1:
            raise click.UsageError(f"--bucket-size: {item} is not a whole number of elements (at least 1)")
        values.append(int(value))
    return list(dict.fromkeys(values))


def _one_or_list(values: list[int]) -> int | list[int]:
    """One value stays a number (sweep ids of single-value sweeps are unchanged); several are an axis."""
    return values[0] if len(values) == 1 else values


def _stages(text: str | None) -> list[int | None]:
    """--pipeline-stages 1,2 / none,2: stage counts, None for no pipeline."""
    if text is None:
        return [None]
    values: list[int | None] = []
    for item in _split(text, "--pipeline-stages"):
        if item.lower() in ("none", "off"):
            values.append(None)
            continue
        try:
            value = int(item)
        except ValueError:
            raise click.UsageError(f"--pipeline-stages: {item!r} is not a whole number or none") from None
        if value < 1:
            raise click.UsageError(f"--pipeline-stages: {value} is out of range (at least 1, or none)")
        values.append(value)
    return list(dict.fromkeys(values))


def _vary(items: tuple[str, ...]) -> dict[str, list]:
    vary: dict[str, list] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or not key or not values.strip():
            raise click.UsageError(f"--vary {item!r}: write KEY=V1,V2 (e.g. --vary n_layer=12,24)")
        if key in vary:
            raise click.UsageError(f"--vary {key} is given twice; list all its values in one --vary")
        parsed = []
        for text in _split(values, f"--vary {key}="):
            try:
                parsed.append(json.loads(text))
            except json.JSONDecodeError:
                parsed.append(text)
        vary[key] = list(dict.fromkeys(parsed))
    return vary
