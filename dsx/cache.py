"""dsx's folder in the user's cache (~/.cache/dsx; XDG_CACHE_HOME and HOME honoured): what is slow to work out and
never changes for the same inputs (the `dsx models` table; a model's parameter counts and saved activations, which
take building it on the meta device). Everything in it can be deleted at any time; it is made again on demand."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TypeVar

T = TypeVar("T")


def user_cache(env: Mapping[str, str] | None = None) -> Path:
    """~/.cache, or XDG_CACHE_HOME when set (`env` defaults to os.environ)."""
    env = os.environ if env is None else env
    return Path(env.get("XDG_CACHE_HOME") or Path(env.get("HOME") or Path.home()) / ".cache")


def dsx_cache(env: Mapping[str, str] | None = None) -> Path:
    return user_cache(env) / "dsx"


def derived_path(kind: str, inputs: Any, sources: Iterable[Path]) -> Path:
    """Where a figure derived from a model is cached: one file per `inputs` (JSON-able), the installed torch and
    transformers and the text of the dsx `sources` that compute it, so a new version of any of them is a new file."""
    import hashlib
    from importlib import metadata

    def version(package: str) -> str | None:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return None

    key = hashlib.sha256(json.dumps([inputs, version("torch"), version("transformers"),
                                     [path.read_text() for path in sources]], sort_keys=True, default=str).encode())
    return dsx_cache() / "models" / f"{kind}-{key.hexdigest()[:24]}.json"


def derived(kind: str, inputs: Any, sources: Iterable[Path], measure: Callable[[], T], load: Callable[[Any], T],
            dump: Callable[[T], Any]) -> T:
    """The figure cached at derived_path(kind, inputs, sources), else measure() it and cache dump(figure); load()
    turns the JSON back into the figure and raises TypeError, KeyError or ValueError on a file of other fields."""
    path = derived_path(kind, inputs, sources)
    try:
        return load(read_json(path))
    except (TypeError, KeyError, ValueError):  # none, unreadable, or another version's fields
        figure = measure()
        write_json(path, dump(figure))
        return figure


def read_json(path: Path) -> Any | None:
    """The cached value, or None when missing or unreadable (a cache never fails a command)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_json(path: Path, value: Any) -> None:
    """Atomically (temp file + rename); silently skipped when the cache cannot be written (read-only home)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(value))
        os.replace(tmp, path)
    except OSError:
        pass
