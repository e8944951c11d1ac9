"""`dsx doctor`: what `dsx run` and DeepSpeed's JIT-built ops need, checked on this machine, each with a fix.

Every check is a `Check(level, name, detail, fix)`; level OK, WARN (something will be missing or slow: NVMe
offload without libaio, multi-node without pdsh, the transformers Trainer without accelerate) or FAIL (dsx run cannot work:
no torch, no DeepSpeed). Probes run through dsx.processes.capture (the only module that starts processes).
"""

from __future__ import annotations

import contextlib
import ctypes.util
import io
import os
import re
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from dsx import op_cache
from dsx.launcher import clean_arch_list
from dsx.processes import capture


@dataclass
class Check:
    level: str
    """OK, WARN, FAIL (INFO for facts that need no action)."""
    name: str
    detail: str
    fix: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    def render(self) -> str:
        text = f"{self.level:<4}  {self.name}: {self.detail}"
        return f"{text}\n      fix: {self.fix}" if self.fix else text


def _torch_checks(out: list[Check]) -> dict:
    info: dict = {"torch": None, "cuda": False, "capabilities": [], "cuda_build": None}
    try:
        import torch
    except ImportError as exc:
        out.append(Check("FAIL", "torch", f"not importable ({exc})",
                         "pip install torch (the CUDA build on GPU machines: https://pytorch.org/get-started)"))
        return info
    info["torch"] = torch
    info["cuda_build"] = torch.version.cuda
    out.append(Check("OK", "torch", f"{torch.__version__} (CUDA build: {torch.version.cuda or 'none, CPU only'})"))
    if torch.cuda.is_available():
        info["cuda"] = True
        names = []
        for i in range(torch.cuda.device_count()):
            cc = torch.cuda.get_device_capability(i)
            info["capabilities"].append(cc)
            names.append(f"{i}: {torch.cuda.get_device_name(i)} (sm {cc[0]}.{cc[1]})")
        out.append(Check("OK", "CUDA", f"available, {len(names)} GPU(s): " + "; ".join(names)))
    elif torch.version.cuda:
        out.append(Check("WARN", "CUDA", "torch is a CUDA build but no GPU is usable (driver missing, or "
                                         "CUDA_VISIBLE_DEVICES hides them)",
                         "check nvidia-smi and CUDA_VISIBLE_DEVICES; dsx run falls back to CPU ranks"))
    else:
        out.append(Check("INFO", "CUDA", "no GPU (CPU-only torch): dsx run uses CPU ranks with gloo"))
    return info


def _nvcc_checks(out: list[Check], info: dict, env: dict) -> None:
    cuda_home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    if not cuda_home and info["torch"] is not None:
        try:
            from torch.utils.cpp_extension import CUDA_HOME

            cuda_home = CUDA_HOME
        except Exception:
            cuda_home = None
    nvcc = shutil.which("nvcc", path=env.get("PATH")) or (
        str(Path(cuda_home) / "bin" / "nvcc") if cuda_home and (Path(cuda_home) / "bin" / "nvcc").exists() else None)
    needed = bool(info["cuda_build"])
    if not nvcc:
        level = "WARN" if needed else "INFO"
        out.append(Check(level, "nvcc", "not found" + ("" if needed else " (not needed with CPU-only torch)"),
                         "install the CUDA toolkit matching torch's CUDA and set CUDA_HOME (DeepSpeed JIT-builds "
                         "FusedAdam, CPUAdam, ... with it)" if needed else None))
    else:
        rc, text = capture([nvcc, "--version"])
        m = re.search(r"release (\d+)\.(\d+)", text or "")
        version = f"{m.group(1)}.{m.group(2)}" if m else "unknown version"
        if needed and m and info["cuda_build"] and m.group(1) != info["cuda_build"].split(".")[0]:
            out.append(Check("WARN", "nvcc", f"{nvcc}: CUDA {version}, but torch was built with CUDA "
                                             f"{info['cuda_build']}: DeepSpeed refuses to JIT-build ops across "
                                             "major CUDA versions",
                             f"install CUDA {info['cuda_build'].split('.')[0]}.x and point CUDA_HOME at it"))
        else:
            out.append(Check("OK", "nvcc", f"{nvcc}: CUDA {version}"))
    if cuda_home:
        out.append(Check("OK" if Path(cuda_home).is_dir() else "WARN", "CUDA_HOME",
                         cuda_home + ("" if Path(cuda_home).is_dir() else " (does not exist)"),
                         None if Path(cuda_home).is_dir() else "point CUDA_HOME at the CUDA toolkit"))
    else:
        out.append(Check("WARN" if needed else "INFO", "CUDA_HOME", "not set and not found",
                         "export CUDA_HOME=/usr/local/cuda" if needed else None))


def _arch_check(out: list[Check], info: dict, env: dict) -> None:
    value = env.get("TORCH_CUDA_ARCH_LIST")
    if value is None:
        out.append(Check("OK", "TORCH_CUDA_ARCH_LIST", "not set (DeepSpeed's JIT builder targets the visible GPUs)"))
        return
    clean, note = clean_arch_list(value, info["capabilities"] or None)
    if note is None:
        out.append(Check("OK", "TORCH_CUDA_ARCH_LIST", f"{value!r} (DeepSpeed's op builder can parse it)"))
        return
    fix_value = f"export TORCH_CUDA_ARCH_LIST={clean!r}" if clean else "unset TORCH_CUDA_ARCH_LIST"
    if not info["cuda"]:
        out.append(Check("INFO", "TORCH_CUDA_ARCH_LIST",
                         f"{value!r} cannot be parsed by DeepSpeed's CUDA op builder (it calls int() on each part of "
                         "every entry); harmless here (no GPU: the CPU op builders do not read it)",
                         f"on a GPU machine: {fix_value} (dsx run does that for its ranks)"))
        return
    out.append(Check("WARN", "TORCH_CUDA_ARCH_LIST",
                     f"{value!r}: DeepSpeed's op builder calls int() on each part of every entry and fails on "
                     "suffixes such as '9.0a' whenever it JIT-builds an op (FusedAdam, CPUAdam) at deepspeed.initialize",
                     f"dsx run already gives its ranks {('TORCH_CUDA_ARCH_LIST=' + repr(clean)) if clean else 'no TORCH_CUDA_ARCH_LIST'}"
                     f"; for your own launches: {fix_value}"))


def _tool_checks(out: list[Check], env: dict) -> None:
    path = env.get("PATH")
    ninja = shutil.which("ninja", path=path)
    if ninja:
        rc, text = capture([ninja, "--version"])
        out.append(Check("OK", "ninja", f"{ninja} {text.strip() if rc == 0 else ''}".strip()))
    else:
        out.append(Check("WARN", "ninja", "not found: torch cannot JIT-build DeepSpeed's ops",
                         "pip install ninja"))
    cxx = shutil.which("c++", path=path) or shutil.which("g++", path=path)
    out.append(Check("OK", "C++ compiler", cxx) if cxx else
               Check("WARN", "C++ compiler", "no c++/g++ on PATH: JIT-built ops cannot compile",
                     "apt-get install g++ (or build-essential)"))
    lib = ctypes.util.find_library("aio")
    if lib is None:
        rc, text = capture(["ldconfig", "-p"])
        lib = next((line.split("=>")[-1].strip() for line in text.splitlines() if "libaio.so" in line), None) \
            if rc == 0 else None
    header = any(Path(d, "libaio.h").exists() for d in ("/usr/include", "/usr/local/include"))
    if lib and header:
        out.append(Check("OK", "libaio", f"{lib} and libaio.h (NVMe offload / async_io can build)"))
    else:
        missing = ", ".join(x for x, ok in (("the library", lib), ("libaio.h", header)) if not ok)
        out.append(Check("WARN", "libaio", f"missing {missing}: DeepSpeed's async_io op (NVMe offload, "
                                           "ZeRO-Infinity) cannot build; CPU offload is unaffected",
                         "apt-get install libaio-dev (or yum install libaio-devel)"))
    pdsh = shutil.which("pdsh", path=path)
    out.append(Check("OK", "pdsh", pdsh) if pdsh else
               Check("WARN", "pdsh", "not found: multi-node runs with a hostfile use pdsh (DeepSpeed's default "
                                     "launcher); single-node runs do not need it",
                     "apt-get install pdsh (or launch with --launcher openmpi / --no_ssh per node)"))
    ssh = shutil.which("ssh", path=path)
    out.append(Check("OK", "ssh", ssh) if ssh else
               Check("WARN", "ssh", "not found: multi-node launches need passwordless ssh between the nodes",
                     "apt-get install openssh-client"))


def _deepspeed_checks(out: list[Check], info: dict, env: dict) -> None:
    try:
        import deepspeed
        from deepspeed.accelerator import get_accelerator
    except Exception as exc:
        out.append(Check("FAIL", "DeepSpeed", f"not importable ({type(exc).__name__}: {exc})",
                         "pip install deepspeed"))
        return
    accelerator = get_accelerator()
    out.append(Check("OK", "DeepSpeed", f"{deepspeed.__version__}, accelerator {accelerator._name}, communication "
                                        f"backend {accelerator.communication_backend_name()}"))
    try:
        from deepspeed.git_version_info import installed_ops
    except Exception:
        installed_ops = {}
    ext_dir, _ = op_cache.effective_dir(env)
    for builder_name, what in (("CPUAdamBuilder", "cpu_adam (optimizer on CPU: ZeRO-Offload)"),
                               ("FusedAdamBuilder", "fused_adam (the default Adam/AdamW on the device)"),
                               ("AsyncIOBuilder", "async_io (NVMe offload)")):
        cls = accelerator.get_op_builder(builder_name)
        if cls is None:
            out.append(Check("INFO", f"op {what.split()[0]}", f"no {builder_name} for the {accelerator._name} "
                                                                  "accelerator"))
            continue
        try:
            builder = cls()
            ok = builder.is_compatible(verbose=False)
        except Exception as exc:
            out.append(Check("WARN", f"op {builder_name}", f"compatibility check failed: {exc}"))
            continue
        name = builder.name
        prebuilt = bool(installed_ops.get(name))
        cached = name in op_cache.built_ops(ext_dir)
        state = "pre-built" if prebuilt else ("JIT-built and cached" if cached else
                                             "JIT-built on first use (about a minute), then cached")
        if ok:
            out.append(Check("OK", f"op {name}", f"{what}: compatible; {state} ({ext_dir})"))
        else:
            fix = {"async_io": "apt-get install libaio-dev, then reinstall/rebuild (or DS_BUILD_AIO=1 pip install "
                               "deepspeed)"}.get(name, "see `ds_report` for the reason")
            out.append(Check("WARN", f"op {name}", f"{what}: not compatible here", fix))


TRAINER_USE = ("the transformers Trainer needs it (a script launched with dsx launch --config-arg --deepspeed, "
               "configs from dsx config --hf-auto); dsx run and sweep do not")


def accelerate_check(installed: str | None, needed: str | None) -> Check:
    """accelerate found, missing or too old for the installed transformers (whose Trainer raises ImportError then)."""
    fix = f"pip install 'accelerate>={needed or '0.26'}' (or pip install 'dsx[trainer]')"
    if installed is None:
        return Check("WARN", "accelerate", f"not installed: {TRAINER_USE}", fix)
    if needed:
        from packaging.version import InvalidVersion, Version

        try:
            too_old = Version(installed) < Version(needed)
        except InvalidVersion:
            too_old = False
        if too_old:
            return Check("WARN", "accelerate", f"{installed}, older than the {needed} the installed transformers "
                                               f"wants: {TRAINER_USE}", fix)
    return Check("OK", "accelerate", f"{installed}: {TRAINER_USE}")


def _accelerate_check(out: list[Check]) -> None:
    from importlib import metadata

    try:
        installed = metadata.version("accelerate")
    except metadata.PackageNotFoundError:
        installed = None
    try:
        from transformers.utils.import_utils import ACCELERATE_MIN_VERSION as needed
    except Exception:
        needed = None
    out.append(accelerate_check(installed, needed))


def _misc_checks(out: list[Check], info: dict, env: dict) -> None:
    if info["cuda"]:
        try:
            import pynvml  # noqa: F401

            out.append(Check("OK", "pynvml", "importable: dsx run records NVML device memory"))
        except ImportError:
            out.append(Check("WARN", "pynvml", "not importable: rows will have nvml_used null",
                             "pip install nvidia-ml-py"))
    out.append(op_cache_check(env))
    _leftover_checks(out, env)


def op_cache_check(env: dict) -> Check:
    """Where dsx run/sweep/launch cache JIT-built ops (dsx.op_cache) and which are built there: this environment's
    own folder, so another venv's builds (in torch's shared default folder) are never counted."""
    folder, chosen = op_cache.effective_dir(env)
    whose = "set by you" if chosen else "this Python environment's own; dsx run, sweep and launch set it"
    built = op_cache.built_ops(folder)
    what = (f"built there: {', '.join(built)}" if built else
            "nothing built there yet: the first run JIT-builds the ops it needs (a minute or two each on CPU)")
    return Check("OK", "TORCH_EXTENSIONS_DIR", f"{folder} ({whose}); {what}")


def _leftover_checks(out: list[Check], env: dict) -> None:
    """What killed DeepSpeed jobs left behind (dsx.leftovers); dsx run removes both itself, other launches do not."""
    from dsx import leftovers

    locks = leftovers.stale_jit_locks(op_cache.effective_dir(env)[0])
    out.append(Check("WARN", "JIT-build locks", f"{len(locks)} stale: " + ", ".join(map(str, locks[:3])) +
                     " (a process killed while loading the op left them; any load of the op waits forever)",
                     "rm " + " ".join(map(str, locks))) if locks else
               Check("OK", "JIT-build locks", "none stale"))
    buffers = leftovers.stale_shm_buffers()
    size = sum(p.stat().st_size for p in buffers if p.exists()) / 2**20
    out.append(Check("WARN", "/dev/shm", f"{len(buffers)} DeepSpeed allreduce buffer(s) of finished or killed "
                     f"CPU jobs hold {size:.0f} MiB of RAM", f"rm {leftovers.SHM_DIR}/{leftovers.SHM_PREFIX}_"
                     f"{os.getuid()}_*  (only when no DeepSpeed CPU job is running)") if buffers else
               Check("OK", "/dev/shm", "no DeepSpeed allreduce buffers left behind"))


def run_checks(env: dict | None = None) -> list[Check]:
    env = dict(os.environ if env is None else env)
    out: list[Check] = [Check("OK", "python", f"{sys.version.split()[0]} ({sys.executable})")]
    info = _torch_checks(out)
    _nvcc_checks(out, info, env)
    _arch_check(out, info, env)
    _tool_checks(out, env)
    # DeepSpeed logs and prints to stdout while importing and probing ops; keep the report (and --json) clean.
    with contextlib.redirect_stdout(io.StringIO()):
        _deepspeed_checks(out, info, env)
    _accelerate_check(out)
    _misc_checks(out, info, env)
    return out
