"""Read a config file the way DeepSpeed does (hjson: comments and unquoted keys allowed), but say where a
syntax error is, and find duplicate keys (DeepSpeed's loader rejects them; plain json keeps the last).

Every config dsx reads (dsx validate, run --config, launch --config) comes through read_config, which refuses
in bounded time and memory what cannot be a config: anything but a regular file (a FIFO would block, /dev/zero
never ends), a file over MAX_CONFIG_BYTES, nesting deeper than MAX_NESTING."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from dsx.safe_io import MAX_NESTING, UnreadableFile, read_bounded
from dsx.units import KIB, MIB

MAX_CONFIG_BYTES = 16 * MIB
"""A DeepSpeed config is a few KiB; more is not a config, and reading it whole could exhaust memory."""
MAX_HJSON_BYTES = 256 * KIB
"""hjson (the fallback for comments) parses at about 1 MiB/s: above this, junk would take seconds to refuse."""


_COMMENT = re.compile(r"/\*.*?\*/|(?:#|//)[^\n]*", re.DOTALL)
"""hjson's comments: /* block */, # line and // line."""


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


def _too_deep(value) -> bool:
    """Whether containers nest deeper than MAX_NESTING (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def parse_text(text: str, source: str) -> LoadedConfig:
    """Parse JSON, falling back to hjson as DeepSpeed's file loader does."""
    too_deep = UnreadableConfig(f"{source}: nested more than {MAX_NESTING} levels deep; a DeepSpeed config is a few "
                                "levels deep")
    if not text.strip():
        raise UnreadableConfig(f"{source}: empty file" + (" (only whitespace)" if text else ""))
    is_hjson = False
    try:
        parsed = json.loads(text, object_pairs_hook=_collect)
    except RecursionError:
        raise too_deep from None
    except json.JSONDecodeError as json_error:
        where = f"{source}:{json_error.lineno}:{json_error.colno}"
        if len(text) > MAX_HJSON_BYTES:
            raise UnreadableConfig(f"{where}: not valid JSON: {json_error.msg} (hjson is tried only up to "
                                   f"{MAX_HJSON_BYTES // KIB} KiB)") from None
        import hjson

        try:
            parsed = hjson.loads(text, object_pairs_hook=_collect)
        except RecursionError:
            raise too_deep from None
        except Exception:
            raise UnreadableConfig(f"{where}: not valid JSON (nor hjson): {json_error.msg}") from None
        is_hjson = True
        if parsed == {} and not _COMMENT.sub("", text).strip():  # hjson reads a file of comments as {}
            raise UnreadableConfig(f"{source}: empty file (only comments)")
    if not isinstance(parsed, dict):
        raise UnreadableConfig(f"{source}: the top level must be a JSON object, not {type(parsed).__name__}")
    if _too_deep(parsed):
        raise too_deep
    duplicates: list[str] = []
    data = _plain(parsed, "", duplicates)
    return LoadedConfig(data=data, duplicate_keys=duplicates, is_hjson=is_hjson)


def _read_bytes(path: Path) -> bytes:
    """At most MAX_CONFIG_BYTES of a regular file (dsx.safe_io.read_bounded, the reader of every file dsx reads)."""
    try:
        return read_bounded(path, limit=MAX_CONFIG_BYTES, what="a config file", why="a DeepSpeed config is a few KiB")
    except UnreadableFile as exc:
        raise UnreadableConfig(str(exc)) from None


def read_config(path: str | Path) -> LoadedConfig:
    """The one reader of config files for every command: bounded, and each failure an UnreadableConfig."""
    path = Path(path)
    return _parse_bytes(_read_bytes(path), str(path))


def read_config_stream(stream, source: str = "<stdin>") -> LoadedConfig:
    """A config piped in (`dsx validate -`), bounded as a file is: at most MAX_CONFIG_BYTES are read."""
    data = stream.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise UnreadableConfig(f"{source}: larger than {MAX_CONFIG_BYTES // MIB} MiB, the most dsx reads; a DeepSpeed "
                               "config is a few KiB")
    return _parse_bytes(data, source)


def _parse_bytes(data: bytes, source: str) -> LoadedConfig:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableConfig(f"{source}: cannot read: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return parse_text(text, source)
