"""Run DeepSpeed's own config parser on configs, in a subprocess, for a chosen DeepSpeed version.

`deepspeed.runtime.config.DeepSpeedConfig(path_or_dict)` is what `deepspeed.initialize` runs first on a config; a
config it rejects never trains, one it accepts may still be silently wrong (that is what dsx is for). Tests use
this module to pin what DeepSpeed itself does with a config, and to check that configs dsx generates are accepted.

Versions:
  "0.19.8"  the project venv's deepspeed (the interpreter running the tests, with PYTHONPATH cleared).
  "0.18.9"  the same interpreter with PYTHONPATH set to the directory in env var DSX_DEEPSPEED_0189, falling back to
            .cache/deepspeed-0.18.9 (DeepSpeed 0.18.9 installed there with `pip install --no-deps --target`). A test
            that needs it takes the `legacy_deepspeed` fixture (tests/conftest.py), which installs it on first use;
            `require(version)` skips a test whose version cannot run here (fails it under CI for 0.18.9).

Importing deepspeed takes seconds, so one subprocess checks a whole list: use `deepspeed_check_many` (or
`deepspeed_probe_many`) for batches; `deepspeed_accepts` is the one-config convenience.

World size: outside a process group DeepSpeedConfig checks the batch arithmetic with world size 1 (facts C01). With
`world_size=N` the subprocess makes DeepSpeedConfig see a data-parallel world of N ranks (it passes a stub mpu whose
get_data_parallel_world_size() is N and lets deepspeed.comm.get_rank() answer 0), so
train_batch_size == micro * GAS * N is checked as `deepspeed.initialize` would on N GPUs.

Outcome strings: accepted configs give (True, ""); rejected ones give (False, "ExceptionClass: first line of the
message"). `exception_class(detail)` extracts the class name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence, Union

VERSIONS = ("0.19.8", "0.18.9")
DEFAULT_DS0189_DIR = Path(__file__).resolve().parent.parent / ".cache" / "deepspeed-0.18.9"  # where conftest installs it
ENV_DS0189 = "DSX_DEEPSPEED_0189"

ConfigLike = Union[dict, str, os.PathLike]


class DeepSpeedUnavailable(RuntimeError):
    """The requested DeepSpeed version cannot be run here (the reason is the message)."""


# The script run in the subprocess. argv: input json path, output json path, expected version.
# Input: list of {"dict": {...}} or {"path": "..."}, each with "world_size". Output: list of result dicts, same order.
_CHILD = r'''
import json, sys, os, logging, warnings, traceback
in_path, out_path, want_version = sys.argv[1], sys.argv[2], sys.argv[3]
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
import deepspeed
from deepspeed.runtime.config import DeepSpeedConfig
import deepspeed.runtime.config as ds_config_module
logging.disable(logging.CRITICAL)

result_header = {"version": deepspeed.__version__, "file": deepspeed.__file__}
if deepspeed.__version__.split("+")[0] != want_version:
    with open(out_path, "w") as f:
        json.dump({"header": result_header, "error": f"expected deepspeed {want_version}, imported "
                   f"{deepspeed.__version__} from {deepspeed.__file__}"}, f)
    sys.exit(0)


class _StubMpu:
    def __init__(self, world_size):
        self.world_size = world_size
    def get_data_parallel_world_size(self):
        return self.world_size
    def get_data_parallel_rank(self):
        return 0
    def get_model_parallel_world_size(self):
        return 1
    def get_model_parallel_rank(self):
        return 0


def _jsonable(v):
    try:
        json.dumps(v)
        return v
    except TypeError:
        if hasattr(v, "value"):
            return _jsonable(v.value)
        return str(v)


def _probe(c):
    out = {}
    def put(name, fn):
        try:
            out[name] = _jsonable(fn())
        except Exception as e:  # attribute missing in this version
            out[name] = None
    z = lambda: c.zero_config
    dev = lambda block: None if block is None else str(getattr(block.device, "value", block.device))
    put("train_batch_size", lambda: c.train_batch_size)
    put("train_micro_batch_size_per_gpu", lambda: c.train_micro_batch_size_per_gpu)
    put("gradient_accumulation_steps", lambda: c.gradient_accumulation_steps)
    put("zero_stage", lambda: int(c.zero_optimization_stage))
    put("fp16_enabled", lambda: bool(c.float16_config.enabled))
    put("bf16_enabled", lambda: bool(c.bfloat16_config.enabled))
    put("bf16_check_grad_overflow", lambda: bool(c.bfloat16_config.check_grad_overflow))
    put("gradient_clipping", lambda: c.gradient_clipping)
    put("optimizer_name", lambda: c.optimizer_name)
    put("optimizer_params", lambda: c.optimizer_params)
    put("scheduler_name", lambda: c.scheduler_name)
    put("scheduler_params", lambda: c.scheduler_params)
    put("prescale_gradients", lambda: c.prescale_gradients)
    put("zero_allow_untested_optimizer", lambda: c.zero_allow_untested_optimizer)
    put("offload_param_device", lambda: dev(z().offload_param))
    put("offload_param_pin_memory", lambda: None if z().offload_param is None else bool(z().offload_param.pin_memory))
    put("offload_optimizer_device", lambda: dev(z().offload_optimizer))
    put("offload_optimizer_pin_memory",
        lambda: None if z().offload_optimizer is None else bool(z().offload_optimizer.pin_memory))
    put("offload_param_nvme_path", lambda: None if z().offload_param is None or z().offload_param.nvme_path is None
        else str(z().offload_param.nvme_path))
    put("offload_optimizer_nvme_path",
        lambda: None if z().offload_optimizer is None or z().offload_optimizer.nvme_path is None
        else str(z().offload_optimizer.nvme_path))
    put("steps_per_print", lambda: c.steps_per_print)
    put("dataloader_drop_last", lambda: c.dataloader_drop_last)
    put("wall_clock_breakdown", lambda: c.wall_clock_breakdown)
    put("flops_profiler_enabled", lambda: bool(c.flops_profiler_config.enabled))
    put("checkpoint_tag_validation_fail", lambda: bool(c.checkpoint_tag_validation_fail))
    put("gather_16bit_weights_on_model_save", lambda: bool(z().gather_16bit_weights_on_model_save))
    put("prefetch_bucket_size", lambda: int(z().prefetch_bucket_size))
    put("param_persistence_threshold", lambda: int(z().param_persistence_threshold))
    put("reduce_bucket_size", lambda: int(z().reduce_bucket_size))
    put("partition_activations", lambda: bool(c.activation_checkpointing_config.partition_activations))
    put("aio_intra_op_parallelism", lambda: c.aio_config.get("intra_op_parallelism"))
    put("pipeline", lambda: c.pipeline)
    put("sparse_attention", lambda: c.sparse_attention)  # 0.18.9 only
    put("elasticity_enabled", lambda: bool(c.elasticity_enabled))  # 0.18.9 only
    put("amp_enabled", lambda: bool(c.amp_enabled))  # 0.18.9 only
    return out


items = json.load(open(in_path))
results = []
orig_get_rank = ds_config_module.dist.get_rank
for item in items:
    cfg = item["dict"] if "dict" in item else item["path"]
    world_size = int(item.get("world_size", 1))
    mpu = None
    if world_size != 1:
        ds_config_module.dist.get_rank = lambda *a, **k: 0
        mpu = _StubMpu(world_size)
    try:
        c = DeepSpeedConfig(cfg, mpu=mpu)
        results.append({"accepted": True, "exception": "", "message": "", "probe": _probe(c)})
    except BaseException as e:  # SystemExit / KeyboardInterrupt included: record, never die
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        results.append({"accepted": False, "exception": type(e).__name__, "message": msg[:500], "probe": None})
    finally:
        ds_config_module.dist.get_rank = orig_get_rank
with open(out_path, "w") as f:
    json.dump({"header": result_header, "results": results}, f)
'''


def ds0189_dir() -> Path:
    """Where DeepSpeed 0.18.9 lives (env DSX_DEEPSPEED_0189, else .cache/deepspeed-0.18.9), installed there on the
    first call of a test session that needs it (not by every session: the fast tier never pays for it)."""
    target = Path(os.environ.get(ENV_DS0189) or DEFAULT_DS0189_DIR)
    _ensure_installed(target)
    return target


@lru_cache(maxsize=None)
def _ensure_installed(target: Path) -> None:
    """pip install --no-deps --target TARGET deepspeed==0.18.9, once, under a file lock (concurrent pytest sessions
    must not install into one directory at once). Offline: nothing installed; the tests that need it skip (CI: fail)."""
    import fcntl

    marker = target / "deepspeed" / "__init__.py"
    if marker.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / "deepspeed-legacy.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                               "deepspeed==0.18.9"], capture_output=True, text=True)
        if done.returncode:
            print(f"DeepSpeed 0.18.9 could not be installed into {target}: {done.stderr.strip()[-500:]}",
                  file=sys.stderr)


def unavailable_reason(version: str) -> str | None:
    """None if `version` can be run here, else a sentence saying why not (for pytest.skip)."""
    if version not in VERSIONS:
        return f"unknown DeepSpeed version {version!r}; known: {', '.join(VERSIONS)}"
    if version == "0.18.9":
        d = ds0189_dir()
        if not (d / "deepspeed" / "__init__.py").is_file():
            return (f"DeepSpeed 0.18.9 not found under {d} (set {ENV_DS0189} to a directory made with "
                    f"`pip install --no-deps --target DIR deepspeed==0.18.9`)")
        return None
    try:
        from importlib import metadata

        installed = metadata.version("deepspeed")
    except Exception:  # PackageNotFoundError
        return "DeepSpeed is not installed in this interpreter's environment"
    if installed.split("+")[0] != version:
        return f"the environment has DeepSpeed {installed}, not {version}"
    return None


def require(version: str) -> None:
    """Skip the calling test (pytest.skip) when `version` cannot run here. Under CI (env CI set) a missing 0.18.9
    fails it instead: CI installs it (the `legacy_deepspeed` fixture) and must run those tests."""
    import pytest

    reason = unavailable_reason(version)
    if reason is None:
        return
    if version == "0.18.9" and os.environ.get("CI"):
        pytest.fail(f"CI must run the DeepSpeed 0.18.9 tests: {reason}")
    pytest.skip(reason)


def _child_env(version: str) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if version == "0.18.9":
        env["PYTHONPATH"] = str(ds0189_dir())
    return env


def _encode(config: ConfigLike) -> dict:
    if isinstance(config, dict):
        return {"dict": config}
    if isinstance(config, (str, os.PathLike)):
        # absolute: the subprocess runs in a temporary directory (and DeepSpeed would misread a missing relative
        # path as base64, facts J04)
        return {"path": os.path.abspath(os.fspath(config))}
    raise TypeError(f"expected a config dict or a path, got {type(config).__name__}")


WorldSize = Union[int, Sequence[int]]


def _world_sizes(world_size: WorldSize, n: int) -> list[int]:
    sizes = [int(world_size)] * n if isinstance(world_size, int) else [int(w) for w in world_size]
    if len(sizes) != n:
        raise ValueError(f"{len(sizes)} world sizes for {n} configs")
    if any(w < 1 for w in sizes):
        raise ValueError("world sizes must be >= 1")
    return sizes


def _run(configs: Sequence[ConfigLike], version: str, world_size: WorldSize = 1, timeout: float = 600) -> list[dict]:
    reason = unavailable_reason(version)
    if reason:
        raise DeepSpeedUnavailable(reason)
    if not configs:
        return []
    sizes = _world_sizes(world_size, len(configs))
    with tempfile.TemporaryDirectory(prefix="dsx_dsparse_") as tmp:
        in_path = Path(tmp) / "in.json"
        out_path = Path(tmp) / "out.json"
        in_path.write_text(json.dumps([{**_encode(c), "world_size": w} for c, w in zip(configs, sizes)]))
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, str(in_path), str(out_path), version],
            env=_child_env(version),
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if not out_path.exists():
            tail = (proc.stderr or proc.stdout or "")[-3000:]
            raise DeepSpeedUnavailable(f"DeepSpeed {version} subprocess failed (rc {proc.returncode}):\n{tail}")
        data = json.loads(out_path.read_text())
    if "error" in data:
        raise DeepSpeedUnavailable(data["error"])
    return data["results"]


def deepspeed_probe_many(configs: Sequence[ConfigLike], version: str, world_size: WorldSize = 1) -> list[dict]:
    """Like deepspeed_check_many, but each result is a dict: accepted (bool), exception (class name or ""),
    message (first line or ""), probe (for accepted configs: a few values DeepSpeed derived, e.g. zero_stage,
    fp16_enabled, gradient_clipping, optimizer_name, offload_param_device; None for rejected ones)."""
    return _run(list(configs), version, world_size)


def deepspeed_check_many(
    configs: Sequence[ConfigLike], version: str, world_size: WorldSize = 1
) -> list[tuple[bool, str]]:
    """Run DeepSpeedConfig(c) for every config (dict, or path to a JSON/hjson file) in ONE subprocess.

    world_size: one int for all configs, or one per config (the data-parallel world DeepSpeedConfig is told about).

    Returns [(True, "")] for accepted configs and [(False, "ExceptionClass: message")] for rejected ones, in order.
    Raises DeepSpeedUnavailable if that DeepSpeed version cannot be run here.
    """
    return [
        (True, "") if r["accepted"] else (False, f"{r['exception']}: {r['message']}".rstrip(": ").rstrip())
        for r in _run(list(configs), version, world_size)
    ]


def deepspeed_accepts(config: ConfigLike, version: str, world_size: int = 1) -> tuple[bool, str]:
    """(accepted, detail) for one config; prefer deepspeed_check_many for more than one (one import each call)."""
    return deepspeed_check_many([config], version, world_size)[0]


def exception_class(detail: str) -> str:
    """'AssertionError: Check batch ...' -> 'AssertionError'."""
    return detail.split(":", 1)[0].strip()


def outcome(accepted: bool, detail: str) -> str:
    """The compact form the fixture test pins: 'accepted' or 'rejected:ExceptionClass'."""
    return "accepted" if accepted else f"rejected:{exception_class(detail)}"


@lru_cache(maxsize=None)
def available_versions() -> tuple[str, ...]:
    """The versions in VERSIONS that can be run here."""
    return tuple(v for v in VERSIONS if unavailable_reason(v) is None)


def check_all_versions(configs: Iterable[ConfigLike], world_size: int = 1) -> dict[str, list[tuple[bool, str]]]:
    """{version: results} for every available version (one subprocess per version)."""
    configs = list(configs)
    return {v: deepspeed_check_many(configs, v, world_size) for v in available_versions()}


if __name__ == "__main__":  # python tests/deepspeed_parser.py VERSION [WORLD_SIZE] FILE...
    ver, rest = sys.argv[1], sys.argv[2:]
    ws = 1
    if rest and rest[0].isdigit():
        ws, rest = int(rest[0]), rest[1:]
    for path, res in zip(rest, deepspeed_probe_many(rest, ver, ws)):
        print(path, "accepted" if res["accepted"] else f"rejected {res['exception']}: {res['message']}")
        if res["probe"]:
            print("   ", json.dumps(res["probe"], default=str)[:600])
