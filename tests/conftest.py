"""Test-session setup shared by every test.

- DeepSpeed's JIT ops in the folder `dsx run` uses in this Python environment (dsx.op_cache.environment_dir), so
  they build once, not once per test, and the README's quick start, run first in the same venv, has built them.
- DeepSpeed 0.18.9 (the last release with the 1-bit optimizers and sparse attention) installed with --no-deps into
  .cache/deepspeed-0.18.9 the first time a test needs it (deepspeed_parser.ds0189_dir), loaded only in subprocesses
  through PYTHONPATH, so legacy configs are checked against the real 0.18.9 parser; the `legacy_deepspeed` fixture
  gives its directory. Set DSX_DEEPSPEED_0189 to use another directory. When it cannot be installed the tests that
  need it skip, except under CI, where they fail.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import socket
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache"
LEGACY_VERSION = "0.18.9"


def load_bench_script(path: str) -> ModuleType:
    """A bench/ script (`path` from the repository root) imported as a module: the scripts are not a package, and
    the code that derives a shipped figure is tested where it lives."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


USER_SET_OP_FOLDER = "TORCH_EXTENSIONS_DIR" in os.environ
"""Whether TORCH_EXTENSIONS_DIR came from the user's environment (then the tests use it, as dsx run does)."""


def pytest_configure(config):
    from dsx.op_cache import environment_dir

    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(environment_dir(os.environ)))
    # where DeepSpeed 0.18.9 is (installed there on first use by deepspeed_parser.ds0189_dir, not for every session)
    os.environ.setdefault("DSX_DEEPSPEED_0189", str(CACHE / f"deepspeed-{LEGACY_VERSION}"))


@pytest.fixture(scope="session")
def legacy_deepspeed() -> Path:
    """The directory holding DeepSpeed 0.18.9 (DSX_DEEPSPEED_0189). Missing: the test skips, or fails under CI."""
    from deepspeed_parser import require

    require(LEGACY_VERSION)
    return Path(os.environ["DSX_DEEPSPEED_0189"])


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


@pytest.fixture
def transformers_masks(monkeypatch):
    """transformers' mask functions as they were, after the test (dsx.models.assume_unpacked_batches replaces two)."""
    from transformers import masking_utils

    monkeypatch.setattr(masking_utils, "find_packed_sequence_indices", masking_utils.find_packed_sequence_indices)
    monkeypatch.setitem(masking_utils.AttentionMaskInterface._global_mapping, "sdpa",
                        masking_utils.AttentionMaskInterface._global_mapping["sdpa"])
    return masking_utils
