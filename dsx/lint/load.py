"""Read a config file the way DeepSpeed does (hjson: comments and unquoted keys allowed), but say where a
syntax error is, and find duplicate keys (DeepSpeed's loader rejects them; plain json keeps the last)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


class UnreadableConfig(Exception):
    """The file cannot be parsed at all; the message names file:line:col where known."""


class _Object(dict):
    """A parsed JSON object that remembers which of its keys appeared more than once."""

    duplicates: tuple = ()


def _collect(pairs) -> _Object:
    obj = _Object()
    dups = []
    for key, value in pairs:
        if key in obj:
            dups.append(key)
        obj[key] = value
    obj.duplicates = tuple(dups)
    return obj


def _plain(value, path: str, duplicates: list[str]):
    """Turn parsed objects into plain dicts, listing 'path.key' for every duplicate key."""
    if isinstance(value, dict):
        for key in getattr(value, "duplicates", ()):
            duplicates.append(f"{path}.{key}" if path else key)
        return {k: _plain(v, f"{path}.{k}" if path else k, duplicates) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, f"{path}[{i}]", duplicates) for i, v in enumerate(value)]
    return value


@dataclass
class LoadedConfig:
    data: dict
    duplicate_keys: list[str] = field(default_factory=list)
    is_hjson: bool = False


def parse_text(text: str, source: str) -> LoadedConfig:
    """Parse JSON, falling back to hjson as DeepSpeed's file loader does."""
    is_hjson = False
    try:
        parsed = json.loads(text, object_pairs_hook=_collect)
    except json.JSONDecodeError as json_error:
        import hjson

        try:
            parsed = hjson.loads(text, object_pairs_hook=_collect)
        except Exception:
            raise UnreadableConfig(
                f"{source}:{json_error.lineno}:{json_error.colno}: not valid JSON (nor hjson): {json_error.msg}"
            ) from None
        is_hjson = True
    if not isinstance(parsed, dict):
        raise UnreadableConfig(f"{source}: the top level must be a JSON object, not {type(parsed).__name__}")
    duplicates: list[str] = []
    data = _plain(parsed, "", duplicates)
    return LoadedConfig(data=data, duplicate_keys=duplicates, is_hjson=is_hjson)


def read_config(path: str | Path) -> LoadedConfig:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UnreadableConfig(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UnreadableConfig(f"{path}: is a directory, not a config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UnreadableConfig(f"{path}: cannot read: {exc}") from None
    return parse_text(text, str(path))
