"""transformers 5.17.0 beside the installed one, for the one test that crashes DeepSpeed 0.19.8 the way the GPU host's
Trainer does (it fills warmup_num_steps 0; 5.18 and later fill at least 1).

Installed with `pip install --no-deps --target .cache/transformers-5.17` on the first call of a session that needs it
(with the huggingface_hub < 2 and httpx it imports), like tests/deepspeed_parser.py does for DeepSpeed 0.18.9; a
subprocess puts the folder first on PYTHONPATH to use it.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / ".cache" / "transformers-5.17"
PACKAGES = ["transformers==5.17.0", "huggingface-hub>=1.5,<2", "httpx", "httpcore", "certifi"]


@lru_cache(maxsize=None)
def transformers_517() -> Path | None:
    """The folder holding transformers 5.17.0 (installed once under a file lock), or None when pip could not."""
    marker = TARGET / "transformers-5.17.0.dist-info"
    if marker.is_dir() and (TARGET / "httpx").is_dir():
        return TARGET
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    with open(TARGET.parent / "transformers-5.17.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (marker.is_dir() and (TARGET / "httpx").is_dir()):
            done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade",
                                   "--target", str(TARGET), *PACKAGES], capture_output=True, text=True)
            if done.returncode:
                print(f"transformers 5.17.0 could not be installed into {TARGET}: {done.stderr.strip()[-500:]}",
                      file=sys.stderr)
                return None
    return TARGET
