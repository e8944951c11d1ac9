"""Test-session setup shared by every test.

- One TORCH_EXTENSIONS_DIR under .cache/ so DeepSpeed's JIT ops build once, not once per test.
- DeepSpeed 0.18.9 (the last release with the 1-bit optimizers and sparse attention) installed with
  --no-deps into .cache/deepspeed-0.18.9, loaded only in subprocesses through PYTHONPATH, so legacy configs are
  checked against the real 0.18.9 parser. Set DSX_DEEPSPEED_0189 to use another directory.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

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
