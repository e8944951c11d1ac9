"""What a `dsx run` of a 1-bit optimizer (1-bit Adam, 0/1 Adam, 1-bit LAMB) needs, set or checked before launch.

The three live only in DeepSpeed 0.18 (0.19 removed them, PRs #8490 and #8547), so they run through a DeepSpeed
0.18.9 lane (`--python`, dsx.lane). What DeepSpeed 0.18.9 demands (runtime/fp16/onebit/{adam,zoadam,lamb}.py,
runtime/engine.py, runtime/comm/{nccl,mpi,compressed}.py):
- no ZeRO (stage 0: the engine asserts), fp16 (the only precision verified; others log a warning; 1-bit LAMB
  asserts dynamic loss scaling): `dsx run --onebit` defaults to `--zero 0 --precision fp16`, the linter checks
  a --config file (rules onebit-with-zero, onebit-precision, lamb-static-loss-scale);
- a compressed-allreduce backend, `comm_backend_name`: nccl (the default) imports cupy at module level; mpi needs
  mpi4py and cupy and an MPI launch (dsx launches with DeepSpeed's runner); compressed needs the packbits op, built
  only for XPU; hccl is Ascend's. None runs on CPU ranks: tried for real on 2 gloo ranks with DeepSpeed 0.18.9
  (bench/onebit/cpu_attempt.md), every backend fails in deepspeed.initialize, so dsx refuses CPU runs up front;
- freeze_step (1-bit Adam / LAMB) or var_freeze_step (0/1 Adam): uncompressed warm-up steps before the
  compressed phase, 100000 by default. `dsx run --onebit` sets it to the warm-up steps plus half the timed steps
  (unless --ds-set gives one), so a short run measures both phases; the row's comm.phases holds each phase's
  bytes and step time (the rank reads the phase from the engine: its own gradient all-reduce is off once the
  optimizer compresses).
"""

from __future__ import annotations

from dsx.config_facts import ONEBIT as KINDS
from dsx.versions import Version

FLAG_KINDS = {"adam": "onebitadam", "zero-one-adam": "zerooneadam", "lamb": "onebitlamb"}
FREEZE_KEY = {"onebitadam": "freeze_step", "zerooneadam": "var_freeze_step", "onebitlamb": "freeze_step"}
BACKENDS = ("nccl", "mpi", "compressed", "hccl")


def kind_of(config: dict) -> str | None:
    """'onebitadam' | 'zerooneadam' | 'onebitlamb' for a config whose optimizer is one of them, else None."""
    optimizer = config.get("optimizer") if isinstance(config.get("optimizer"), dict) else {}
    kind = str(optimizer.get("type", "")).lower().replace("_", "")
    return kind if kind in KINDS else None


def refusal_on(target: Version, kind: str, flag: str) -> str:
    """Why a 1-bit optimizer cannot run on a 0.19 DeepSpeed, and what to do instead (one line)."""
    from dsx.lane import VENV_HINT

    return (f"{flag}: {KINDS[kind]} was removed in DeepSpeed 0.19 (the ranks' DeepSpeed is {target}): run it with a "
            f"DeepSpeed 0.18.9 interpreter ({VENV_HINT}; then dsx run --python .venv18/bin/python ...), or cut "
            "gradient traffic between nodes on 0.19 with ZeRO++ quantized gradients (qgZ, multi-node runs only): "
            "--zero 3 --ds-set zero_optimization.zero_quantized_gradients=true")


def run_defaults(changes: dict, ds_sets: tuple[str, ...], warmup: int, steps: int) -> list[str]:
    """For `dsx run --onebit`: ZeRO 0 and fp16 unless given, and the freeze step inside the run unless a --ds-set
    gives it. Changes `changes` (dsx.generate.ConfigRequest fields) in place; returns the --ds-set texts to add."""
    kind = FLAG_KINDS.get(changes.get("onebit") or "")
    if kind is None:
        return []
    changes.setdefault("zero", 0)
    changes.setdefault("precision", "fp16")
    key = FREEZE_KEY[kind]
    if any(text.split("=", 1)[0].strip() == f"optimizer.params.{key}" for text in ds_sets):
        return []
    return [f"optimizer.params.{key}={max(1, warmup + steps // 2)}"]


def run_problems(config: dict, device: str, lane) -> list[str]:
    """Why the ranks could not run this 1-bit config (one line each), or []: CPU ranks, a backend dsx cannot
    launch, cupy or mpi4py missing from the lane (dsx.lane.Lane, None: dsx's own interpreter)."""
    kind = kind_of(config)
    if kind is None:
        return []
    name = KINDS[kind]
    params = (config.get("optimizer") or {}).get("params") or {}
    backend = params.get("comm_backend_name", "nccl")
    if device == "cpu":
        return [f"{name} cannot run on CPU ranks: DeepSpeed 0.18.9's compressed allreduce needs cupy and NCCL "
                "(comm_backend_name nccl), cupy and mpi4py under an MPI launch (mpi) or the XPU-only packbits op "
                "(compressed), and gloo offers none (tried: bench/onebit/cpu_attempt.md); run it on GPUs"]
    if backend not in BACKENDS:
        return [f"optimizer.params.comm_backend_name {backend!r}: {name} takes one of {', '.join(BACKENDS)}"]
    if backend == "mpi":
        return [f"{name} with comm_backend_name mpi needs an MPI launch (mpirun) and mpi4py; dsx launches with "
                "DeepSpeed's runner: use comm_backend_name nccl"]
    if backend in ("compressed", "hccl"):
        where = "XPU (the packbits op)" if backend == "compressed" else "Ascend NPUs"
        return [f"{name} with comm_backend_name {backend} runs only on {where}: use comm_backend_name nccl"]
    if lane is not None and not lane.cupy:
        return [f"{name} with comm_backend_name nccl imports cupy, which {lane.python} does not have: install the "
                "one for its CUDA (e.g. pip install cupy-cuda12x)"]
    return []
