"""A DeepSpeed 0.18.9 interpreter for the `--python` tests, made from what the test session already has.

The README's lane is a full venv (pip install torch deepspeed==0.18.9 ...). Tests cannot download torch again, so
they build a light one: `python -m venv --without-pip` (a real interpreter of its own, sys.prefix = the folder)
whose site-packages holds one .pth file putting the side-installed DeepSpeed 0.18.9 (tests/conftest.py installs it
with --no-deps into .cache/deepspeed-0.18.9) ahead of this environment's site-packages, which brings torch,
transformers and pydantic. So `import deepspeed` there is 0.18.9, with the very torch the main tests use, on a
fresh clone and in CI alike.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path


def make_lane(folder: Path, deepspeed_dir: Path) -> Path:
    """Create the lane in `folder`; returns its interpreter (folder/bin/python)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    Path(purelib, "dsx-lane.pth").write_text(f"{deepspeed_dir}\nimport site; site.addsitedir({ours!r})\n")
    return python
