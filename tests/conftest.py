"""Test-session setup shared by every test.

- One TORCH_EXTENSIONS_DIR under .cache/ so DeepSpeed's JIT ops build once, not once per test.
- DeepSpeed 0.18.9 (the last release with the 1-bit optimizers and sparse attention) installed with
  --no-deps into .cache/deepspeed-0.18.9, loaded only in subprocesses through PYTHONPATH, so legacy configs are
  checked against the real 0.18.9 parser. Set DSX_DEEPSPEED_0189 to use another directory.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache"
LEGACY_VERSION = "0.18.9"


def _ensure_legacy_deepspeed() -> Path:
    target = Path(os.environ.get("DSX_DEEPSPEED_0189") or CACHE / f"deepspeed-{LEGACY_VERSION}")
    marker = target / "deepspeed" / "__init__.py"
    if marker.exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "deepspeed-legacy.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent pytest sessions must not install into one directory at once
        if not marker.exists():
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                 f"deepspeed=={LEGACY_VERSION}"],
                check=True,
            )
    return target


def pytest_configure(config):
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(CACHE / "torch_extensions"))
    os.environ["DSX_DEEPSPEED_0189"] = str(_ensure_legacy_deepspeed())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def single_process_group():
    """A one-rank gloo process group, as the `deepspeed` launcher would set up for one CPU process."""
    import deepspeed
    import torch.distributed as dist

    from dsx import leftovers

    # init_distributed loads the JIT-built shm op; a lock left by a killed subprocess would make it wait forever
    leftovers.remove(leftovers.stale_jit_locks(leftovers.extensions_dir(os.environ)))
    with pytest.MonkeyPatch.context() as env:
        for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "RANK": "0",
                           "LOCAL_RANK": "0", "WORLD_SIZE": "1"}.items():
            env.setenv(key, value)
        if not dist.is_initialized():
            deepspeed.init_distributed(dist_backend="gloo")
        logging.getLogger("DeepSpeed").setLevel(logging.ERROR)
        yield
    # The group stays up for the session: DeepSpeed caches its groups, so a destroyed and re-created default group
    # breaks later engines ("Group ... is not registered").
