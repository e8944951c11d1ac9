"""A DeepSpeed-version lane: the ranks of a run, sweep or launch started with another Python (`--python PATH`),
e.g. a venv holding DeepSpeed 0.18.9 (the last release with the 1-bit optimizers) next to dsx's own 0.19.

dsx asks the interpreter once what it holds (DeepSpeed, torch, transformers and pydantic versions, cupy and
mpi4py, whether it can import this dsx) with one subprocess that imports none of them (package metadata and
importlib.util.find_spec only: well under a second), and caches the answer in ~/.cache/dsx/lanes/ keyed by the
interpreter's path and the PYTHONPATH the ranks get; a cached answer is used while the interpreter file and
every folder on its sys.path keep their modification times (installing or removing a package changes its
site-packages folder's). The config is then linted for the lane's DeepSpeed (dsx.versions.resolve_target).

DeepSpeed's runner stays on dsx's own interpreter (its host and slot resolution is the 0.19 one dsx checks
hostfiles against); its launch.py starts every rank as `sys.executable -u SCRIPT`, so dsx hands it a tiny
trampoline, dsx/rank/lane_exec.py, that re-executes the rank with the lane's interpreter (dsx.launcher).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from dsx.cache import read_json, write_json

PROBE = r"""
import importlib.util, json, os, sys
from importlib import metadata
def version(name):
    try:
        return metadata.version(name)
    except Exception:
        return None
def where(name):
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        return None
    return None if spec is None else (spec.origin or (list(spec.submodule_search_locations or []) or [None])[0])
print(json.dumps({
    "executable": sys.executable, "prefix": sys.prefix, "python_version": "%d.%d.%d" % sys.version_info[:3],
    "deepspeed": version("deepspeed"), "deepspeed_path": where("deepspeed"), "torch": version("torch"),
    "transformers": version("transformers"), "pydantic": version("pydantic"), "cupy": where("cupy"),
    "mpi4py": where("mpi4py"), "dsx_path": where("dsx"), "dsx": version("dsx"),
    "sys_path": [p for p in sys.path if p and os.path.isdir(p)],
}))
"""

VENV_HINT = "python3 -m venv .venv18 && .venv18/bin/pip install torch==2.13.0 deepspeed==0.18.9 transformers"
"""How to make a DeepSpeed 0.18.9 venv next to dsx's own (the README says more)."""


class LaneError(ValueError):
    """`--python` names no usable interpreter: the message is one line, naming the flag."""


@dataclass(frozen=True)
class Lane:
    python: str
    """The path as given, made absolute (a venv's bin/python is a symlink: resolving it would leave the venv)."""
    executable: str
    prefix: str
    python_version: str
    deepspeed: str
    deepspeed_path: str | None = None
    torch: str | None = None
    transformers: str | None = None
    pydantic: str | None = None
    cupy: str | None = None
    mpi4py: str | None = None
    dsx_path: str | None = None
    dsx: str | None = None

    def versions(self) -> dict[str, str | None]:
        return {"deepspeed": self.deepspeed, "torch": self.torch, "transformers": self.transformers,
                "python": self.python_version}

    def describe(self) -> str:
        return (f"{self.python} (Python {self.python_version}, DeepSpeed {self.deepspeed}, torch {self.torch}, "
                f"transformers {self.transformers})")


def cache_dir(env: Mapping[str, str]) -> Path:
    from dsx.cache import dsx_cache

    return dsx_cache(env) / "lanes"


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _run_probe(python: str, env: Mapping[str, str], timeout_s: float) -> dict:
    from dsx.processes import capture  # the module that starts processes

    code, output = capture([python, "-c", PROBE], timeout_s, env)
    if code is None:
        why = f"did not answer within {timeout_s:g} s" if "timed out" in output else \
            f"not an interpreter dsx can start ({output})"
        raise LaneError(f"--python {python}: {why}")
    lines = output.splitlines()
    try:
        facts = json.loads(next(line for line in reversed(lines) if line.startswith("{"))) if code == 0 else None
    except (StopIteration, json.JSONDecodeError):
        facts = None
    if not isinstance(facts, dict):
        said = [line for line in lines if line.strip()]
        said = (said[-1] if said else "it printed no answer" if code == 0 else f"exit status {code}")[:200]
        raise LaneError(f"--python {python}: not a Python interpreter dsx can use ({said})")
    return facts


def probe(python: str, env: Mapping[str, str], timeout_s: float = 60.0) -> Lane:
    """The lane for `python` with the environment the ranks get (its PYTHONPATH); LaneError when it is not an
    interpreter, or holds no DeepSpeed. Cached (see the module's docstring)."""
    path = os.path.abspath(os.path.expanduser(python))
    if not os.path.exists(path):
        raise LaneError(f"--python {python}: no such file")
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        raise LaneError(f"--python {python}: not an executable file (give the interpreter, e.g. .venv18/bin/python)")
    pythonpath = env.get("PYTHONPATH", "")
    key = hashlib.sha256(f"{path}\0{pythonpath}".encode()).hexdigest()[:24]
    cached = cache_dir(env) / f"{key}.json"
    facts = None
    entry = read_json(cached)
    try:
        stamps = dict(entry["stamps"])
        if stamps.pop(path, None) == _mtime(path) and all(_mtime(p) == m for p, m in stamps.items()):
            facts = entry["facts"]
    except (KeyError, TypeError, ValueError, AttributeError):
        facts = None
    if facts is None:
        facts = _run_probe(path, env, timeout_s)
        stamps = {p: _mtime(p) for p in facts.get("sys_path", [])}
        stamps[path] = _mtime(path)
        write_json(cached, {"python": path, "pythonpath": pythonpath, "stamps": stamps, "facts": facts})
    if not facts.get("deepspeed") or not facts.get("deepspeed_path"):
        raise LaneError(f"--python {python}: has no DeepSpeed (install it there, e.g. {python} -m pip install "
                        "deepspeed==0.18.9)")
    known = {k: facts.get(k) for k in Lane.__dataclass_fields__ if k != "python"}
    return Lane(python=path, **known)


def problems(lane: Lane, dsx_root: Path, dsx_version: str | None, runs_dsx: bool = True) -> list[str]:
    """What the ranks would trip over that the probe can see, one line each (the run is refused): a missing torch,
    transformers or pydantic, or a dsx that is not this one (the ranks must read the plan this dsx writes: the
    checkout dsx.launcher puts on PYTHONPATH, or an installed dsx of the same version). runs_dsx=False (dsx launch:
    the ranks run the user's script, started by a trampoline on dsx's interpreter): only torch."""
    problems = []
    if not lane.torch:
        problems.append(f"--python {lane.python}: has no torch")
    if not runs_dsx:
        return problems
    if not lane.transformers:
        problems.append(f"--python {lane.python}: has no transformers (dsx's ranks build transformers models)")
    if not lane.pydantic:
        problems.append(f"--python {lane.python}: has no pydantic (dsx's ranks read their plan with it)")
    ours = lane.dsx_path and Path(lane.dsx_path).resolve().is_relative_to(dsx_root.resolve())
    if lane.dsx_path and not ours and lane.dsx != dsx_version:
        problems.append(f"--python {lane.python}: imports dsx {lane.dsx} from {lane.dsx_path}, not this dsx "
                        f"{dsx_version} ({dsx_root}): install the same dsx there")
    elif not lane.dsx_path:
        problems.append(f"--python {lane.python}: cannot import dsx (install dsx into it too: {lane.python} -m pip "
                        "install --no-deps dsx)")
    return problems


