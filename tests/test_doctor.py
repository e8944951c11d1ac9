"""`dsx doctor` runs on this CPU machine, names what is missing, and gives a fix for every warning."""

from __future__ import annotations

import ctypes.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NAMES = ["python", "torch", "CUDA", "nvcc", "CUDA_HOME", "TORCH_CUDA_ARCH_LIST", "ninja", "C++ compiler", "libaio",
         "pdsh", "ssh", "DeepSpeed", "op cpu_adam", "op fused_adam", "op async_io", "accelerate", "TORCH_EXTENSIONS_DIR", "JIT-build locks", "/dev/shm"]


@pytest.mark.deepspeed
def test_doctor_checks_everything_and_exits_0_with_warnings():
    import torch

    env = {**os.environ, "TORCH_CUDA_ARCH_LIST": "9.0a"}
    out = subprocess.run([sys.executable, "-m", "dsx", "doctor", "--json"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    checks = {c["name"]: c for c in json.loads(out.stdout)}
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    # with a GPU, pynvml is checked after the ops
    assert list(checks) == (NAMES[:-3] + ["pynvml"] + NAMES[-3:] if gpus else NAMES)
    assert all(c["level"] in ("OK", "INFO", "WARN") for c in checks.values())
    assert all(c["fix"] for c in checks.values() if c["level"] == "WARN")
    assert checks["DeepSpeed"]["level"] == "OK"
    assert f"accelerator {'cuda' if gpus else 'cpu'}" in checks["DeepSpeed"]["detail"]
    # the CUDA line says what torch.cuda says on this machine
    cuda = checks["CUDA"]
    if gpus:
        assert cuda["level"] == "OK" and cuda["detail"].startswith(f"available, {gpus} GPU(s): 0: ")
    elif torch.version.cuda:
        assert cuda["level"] == "WARN" and cuda["detail"].startswith("torch is a CUDA build but no GPU is usable")
    else:
        assert (cuda["level"], cuda["detail"]) == ("INFO", "no GPU (CPU-only torch): dsx run uses CPU ranks with gloo")
    arch = checks["TORCH_CUDA_ARCH_LIST"]
    if gpus:
        assert arch["level"] == "WARN" and "'9.0a': DeepSpeed's op builder calls int()" in arch["detail"]
        derived = ";".join(f"{ma}.{mi}" for ma, mi in sorted({torch.cuda.get_device_capability(i)
                                                               for i in range(gpus)}))
        assert arch["fix"] == (f"dsx run already gives its ranks TORCH_CUDA_ARCH_LIST={derived!r}; for your own "
                               f"launches: export TORCH_CUDA_ARCH_LIST={derived!r}")
    else:
        assert arch["level"] == "INFO"
        assert "'9.0a' cannot be parsed by DeepSpeed's CUDA op builder" in arch["detail"]
        assert arch["fix"] == "on a GPU machine: export TORCH_CUDA_ARCH_LIST='9.0' (dsx run does that for its ranks)"
    # what this machine has is found, what it lacks is named as such with its fix
    lib = ctypes.util.find_library("aio")
    header = any(Path(d, "libaio.h").exists() for d in ("/usr/include", "/usr/local/include"))
    if lib and header:
        assert checks["libaio"]["level"] == "OK" and checks["libaio"]["fix"] is None
        assert checks["libaio"]["detail"] == f"{lib} and libaio.h (NVMe offload / async_io can build)"
    else:
        assert checks["libaio"]["level"] == "WARN" and "libaio-dev" in checks["libaio"]["fix"]
        assert checks["libaio"]["detail"].startswith("missing ")
        assert ("libaio.h" in checks["libaio"]["detail"]) == (not header)
    if lib is None:
        assert checks["op async_io"]["level"] == "WARN"
    pdsh = shutil.which("pdsh")
    if pdsh:
        assert (checks["pdsh"]["level"], checks["pdsh"]["detail"], checks["pdsh"]["fix"]) == ("OK", pdsh, None)
    else:
        assert checks["pdsh"]["level"] == "WARN" and "apt-get install pdsh" in checks["pdsh"]["fix"]


@pytest.mark.deepspeed
def test_doctor_text_names_missing_tools_with_their_fix():
    from dsx.doctor import run_checks

    checks = {c.name: c for c in run_checks({"PATH": "/nonexistent"})}
    for name, fix in (("ninja", "pip install ninja"), ("pdsh", "apt-get install pdsh"),
                      ("ssh", "apt-get install openssh-client"), ("C++ compiler", "apt-get install g++")):
        assert checks[name].level == "WARN" and fix in checks[name].fix
        assert checks[name].render().startswith(f"WARN  {name}: ")
        assert f"\n      fix: {checks[name].fix}" in checks[name].render()


def test_doctor_names_a_stale_jit_build_lock_and_how_to_remove_it(tmp_path):
    from dsx.doctor import Check, _leftover_checks

    (tmp_path / "fused_adam").mkdir()
    (tmp_path / "fused_adam" / "lock").touch()
    out: list[Check] = []
    _leftover_checks(out, {"TORCH_EXTENSIONS_DIR": str(tmp_path)})
    lock = out[0]
    assert (lock.level, lock.name, lock.fix) == ("WARN", "JIT-build locks", f"rm {tmp_path / 'fused_adam' / 'lock'}")
    assert lock.detail.startswith(f"1 stale: {tmp_path / 'fused_adam' / 'lock'} (a process killed while loading")


def test_doctor_names_this_environments_op_cache_and_only_the_ops_built_there(tmp_path):
    """Another venv's builds in torch's shared default folder are not this environment's (issue 21)."""
    from dsx import op_cache
    from dsx.doctor import op_cache_check

    env = {"HOME": str(tmp_path)}
    folder = op_cache.environment_dir(env)
    shared = tmp_path / ".cache" / "torch_extensions" / "py311_cpu" / "fused_adam"
    shared.mkdir(parents=True)
    (shared / "fused_adam.so").touch()
    whose = "(this Python environment's own; dsx run, sweep and launch set it)"
    assert op_cache_check(env).render() == (
        f"OK    TORCH_EXTENSIONS_DIR: {folder} {whose}; nothing built there yet: the first run JIT-builds the ops "
        "it needs (a minute or two each on CPU)")
    (folder / "cpu_adam").mkdir(parents=True)
    (folder / "cpu_adam" / "cpu_adam.so").touch()
    assert op_cache_check(env).render() == f"OK    TORCH_EXTENSIONS_DIR: {folder} {whose}; built there: cpu_adam"


def test_doctor_names_a_torch_extensions_dir_the_user_set(tmp_path):
    from dsx.doctor import op_cache_check

    assert op_cache_check({"TORCH_EXTENSIONS_DIR": str(tmp_path)}).render() == (
        f"OK    TORCH_EXTENSIONS_DIR: {tmp_path} (set by you); nothing built there yet: the first run JIT-builds the "
        "ops it needs (a minute or two each on CPU)")


def test_doctor_says_whether_accelerate_is_there_for_the_trainer_and_how_to_get_it():
    """transformers' Trainer raises ImportError without accelerate (issue 21); dsx run does not need it."""
    from dsx.doctor import TRAINER_USE, accelerate_check

    assert TRAINER_USE == ("the transformers Trainer needs it (a script launched with dsx launch --config-arg "
                           "--deepspeed, configs from dsx config --hf-auto); dsx run and sweep do not")
    assert accelerate_check("1.2.0", "1.1.0").render() == f"OK    accelerate: 1.2.0: {TRAINER_USE}"
    assert accelerate_check(None, "1.1.0").render() == (
        f"WARN  accelerate: not installed: {TRAINER_USE}\n"
        "      fix: pip install 'accelerate>=1.1.0' (or pip install 'dsx[trainer]')")
    assert accelerate_check("0.30.0", "1.1.0").render().startswith(
        "WARN  accelerate: 0.30.0, older than the 1.1.0 the installed transformers wants: ")


def test_doctor_checks_the_accelerate_installed_here_against_what_transformers_wants():
    from importlib import metadata

    from transformers.utils.import_utils import ACCELERATE_MIN_VERSION

    from dsx.doctor import Check, _accelerate_check, accelerate_check

    out: list[Check] = []
    _accelerate_check(out)
    try:
        installed = metadata.version("accelerate")
    except metadata.PackageNotFoundError:
        installed = None
    assert out == [accelerate_check(installed, ACCELERATE_MIN_VERSION)]


def test_the_trainer_extra_brings_accelerate():
    assert '\ntrainer = ["accelerate>=0.26"]\n' in (ROOT / "pyproject.toml").read_text()
