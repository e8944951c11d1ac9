"""Where DeepSpeed's JIT-built ops are cached for this Python environment, and noticing when one is being built.

torch builds an op in TORCH_EXTENSIONS_DIR/<op>/ (unset: ~/.cache/torch_extensions/py311_cpu/<op>/) and, in every
new process, rewrites that folder's build.ninja and runs ninja there. The build flags name the environment's own
torch headers and libraries, so two virtual environments sharing the default folder rebuild each other's ops on
every alternate run (issue 21: 16 s, 82 s, 89 s, 78 s for the same `dsx run` from two venvs). dsx's launches (run,
sweep, launch) therefore get a folder per environment unless the user set TORCH_EXTENSIONS_DIR:

    ~/.cache/dsx/torch_extensions/py<X.Y>-torch<version>-deepspeed<version>-<hash of sys.prefix>

($XDG_CACHE_HOME is respected). Not a folder inside sys.prefix: a system Python, a shared conda environment or a
container image can have a read-only prefix, and an op that cannot be written fails deepspeed.initialize; the
user's cache is always writable. The versions are in the name so that a folder holds builds for exactly what its
name says (what `dsx doctor` lists as built), and switching a version back and forth does not rebuild each time.
A deleted environment's folder is safe to delete: ops are rebuilt on first use.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from importlib import metadata
from pathlib import Path
from typing import Callable, Mapping

from dsx.cache import dsx_cache

ENV_VAR = "TORCH_EXTENSIONS_DIR"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"


def environment_dir(env: Mapping[str, str], prefix: str | None = None, *, python: str | None = None,
                    torch: str | None = None, deepspeed: str | None = None) -> Path:
    """A Python environment's op folder (see the module's docstring): this one's by default; another's (a
    `--python` lane, dsx.lane) from its prefix and its Python, torch and DeepSpeed versions."""
    prefix = str(Path(prefix or sys.prefix).resolve())
    tag = hashlib.sha256(prefix.encode()).hexdigest()[:10]
    python = python or f"{sys.version_info.major}.{sys.version_info.minor}"
    name = (f"py{'.'.join(python.split('.')[:2])}-torch{torch or _version('torch')}-"
            f"deepspeed{deepspeed or _version('deepspeed')}-{tag}")
    return dsx_cache(env) / "torch_extensions" / name


def lane_dir(env: Mapping[str, str], lane) -> Path:
    """The op folder of a lane's ranks (dsx.lane.Lane): its environment's own, or, under a TORCH_EXTENSIONS_DIR the
    user set, a deepspeed-<version> folder inside it when the lane's DeepSpeed is not this one's (0.18.9 and 0.19.8
    build ops of the same names from different sources, so one folder would rebuild them at every switch)."""
    if env.get(ENV_VAR):
        chosen = Path(env[ENV_VAR])
        return chosen if lane.deepspeed == _version("deepspeed") else chosen / f"deepspeed-{lane.deepspeed}"
    return environment_dir(env, lane.prefix, python=lane.python_version, torch=lane.torch, deepspeed=lane.deepspeed)


def effective_dir(env: Mapping[str, str]) -> tuple[Path, bool]:
    """(the folder dsx's launches build ops in, whether the user chose it with TORCH_EXTENSIONS_DIR)."""
    if env.get(ENV_VAR):
        return Path(env[ENV_VAR]), True
    return environment_dir(env), False


def built_ops(root: Path) -> list[str]:
    """Names of the ops with a shared library in root (torch's layout when TORCH_EXTENSIONS_DIR is set:
    root/<op>/<op>.so)."""
    if not root.is_dir():
        return []
    return sorted({so.parent.name for so in root.glob("*/*.so")})


def built_since(root: Path, since: float) -> list[str]:
    """Names of the ops whose shared library under root was written after `since` (JIT builds during a job)."""
    if not root.is_dir():
        return []
    names = set()
    for so in root.rglob("*.so"):
        try:
            if so.stat().st_mtime >= since:
                names.add(so.parent.name)
        except OSError:
            continue
    return sorted(names)


def build_notice(op: str) -> str:
    return (f"dsx: DeepSpeed is building its {op} op (first use in this Python environment: a minute or two on CPU, "
            "less on a GPU host); the job goes on when it is built")


class BuildWatcher:
    """Watches a job's processes for DeepSpeed JIT builds and reports each op once, as its build starts.

    torch runs `ninja` in the op's build folder in every process that loads the op; ninja starts a compiler only
    when something must be built. So a `ninja` among the job's processes with a child other than ninja (older pip
    wheels install ninja as a Python wrapper that starts the real one) is a build under way, and the name of its
    working folder is the op. Only processes on this machine are seen: ranks that
    pdsh starts on other nodes build unseen (their output still says so when it fails).
    """

    def __init__(self, root_pids: list[int], on_build: Callable[[str], None], interval_s: float = 1.0):
        self.root_pids = root_pids
        self.on_build = on_build
        self.interval_s = interval_s
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> BuildWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def building(self) -> list[str]:
        """The ops whose build is under way now."""
        import psutil

        ops = []
        for pid in self.root_pids:
            try:
                processes = psutil.Process(pid).children(recursive=True)
            except psutil.Error:
                continue
            for proc in processes:
                try:
                    if proc.name() == "ninja" and any(c.name() != "ninja" for c in proc.children()):
                        ops.append(Path(proc.cwd()).name)
                except psutil.Error:
                    continue
        return ops

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            for op in self.building():
                if op not in self.seen:
                    self.seen.add(op)
                    self.on_build(op)
