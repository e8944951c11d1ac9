"""The one row a `dsx launch` appends: the same results format as `dsx run` (dsx.results.RunRow), kind "launch".

What a launch row holds: status and exit code, wall time, each rank's GPU memory (NVML) and peak host RSS sampled
by dsx, the config as given and its hash, the command; where the script is a transformers Trainer, the throughput
it reported about itself (`launch.trainer`). The model, step times and FLOPs of a run row are unknown to dsx here:
null, never guessed.
"""

from __future__ import annotations

import platform
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from dsx.results import LaunchInfo, NodesInfo, Overhead, RunRow, TrainerFigures, Versions, config_hash
from dsx.row_parts import HostCpu

OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError", "CUBLAS_STATUS_ALLOC_FAILED")
"""What a rank prints when the GPU ran out of memory (torch's CUDA allocator and cuBLAS)."""


@dataclass
class LaunchRecord:
    """Everything about a finished (or killed) launch that goes into its row."""

    run_id: str
    started_utc: str
    device: str
    world_size: int
    gpu_names: list[str]
    config: dict
    config_path: str
    hf: bool
    config_arg: str | None
    user_command: list[str]
    script: str
    command: list[str]
    precision: str | None = None
    micro_batch: int | None = None
    grad_accum: int | None = None
    notes: list[str] = field(default_factory=list)
    nodes: NodesInfo | None = None
    log: str | None = None
    run_dir: str | None = None
    lane: object | None = None
    """dsx.lane.Lane when the ranks ran another interpreter (`dsx launch --python`): its versions go in the row."""


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def batch_sizes(config: dict, trainer_args: bool, args: list[str]) -> tuple[int | None, int | None]:
    """(micro-batch, grad accumulation) of a launch: the config's when it sets them, else the Trainer's command line
    (its defaults 8 and 1) for a Trainer launch, else unknown."""
    from dsx.userjob.trainer import _number, _spellings, arg_value

    micro = _int(config.get("train_micro_batch_size_per_gpu"))
    accum = _int(config.get("gradient_accumulation_steps"))
    if trainer_args:
        given_micro = _number(arg_value(args, *_spellings("per_device_train_batch_size")))
        given_accum = _number(arg_value(args, *_spellings("gradient_accumulation_steps")))
        micro = micro or (int(given_micro) if given_micro else 8)
        accum = accum or (int(given_accum) if given_accum else 1)
    return micro, accum


def status_of(completed, interrupted: bool, stopped: str = "every rank was stopped") -> tuple[str, str | None]:
    """(status, one-line error) from how the job ended (`stopped`: what became of an interrupted job's processes)."""
    if interrupted:
        return "error", f"interrupted (Ctrl-C): {stopped}"
    if completed.timed_out:
        from dsx.processes import left_running_text

        return "timeout", "killed at --timeout" + (
            f"; {left_running_text(completed.pgid, completed.left_running)}" if completed.left_running else "")
    if completed.returncode == 0:
        return "ok", None
    lines = [line.strip() for line in completed.tail.splitlines() if line.strip()]
    oom = any(marker in completed.tail for marker in OOM_MARKERS)
    cause = next((line for line in reversed(lines) if re.search(r"\w+(Error|Exception)\b", line)), None)
    cause = cause or (lines[-1] if lines else "no output")
    return ("oom" if oom else "error"), f"the job exited with {completed.returncode}: {cause[:300]}"


def launch_row(record: LaunchRecord, completed, memory, trainer: TrainerFigures | None,
               interrupted: bool = False, stopped: str = "every rank was stopped") -> RunRow:
    from dsx.host import cpu_count, cpu_model, package_versions, process_start_time

    status, error = status_of(completed, interrupted, stopped)
    wall = completed.ended - completed.started
    started = process_start_time()
    versions = package_versions()
    python_version = platform.python_version()
    if record.lane is not None:  # the ranks' libraries, not dsx's
        lane_versions = record.lane.versions()
        python_version = lane_versions.pop("python")
        versions.update(lane_versions)
    return RunRow(
        kind="launch", run_id=record.run_id, time=record.started_utc, host=socket.gethostname(),
        host_cpu=HostCpu(model=cpu_model(), cpus=cpu_count()), device=record.device, gpu_name=record.gpu_names[0] if record.gpu_names else None,
        gpu_count=record.world_size if record.device == "cuda" else 0,
        versions=Versions(python=python_version, **versions),
        python=record.lane.python if record.lane is not None else None,
        ds_config=record.config, ds_config_hash=config_hash(record.config), ds_config_source=record.config_path,
        world_size=record.world_size, precision=record.precision, micro_batch=record.micro_batch,
        grad_accum=record.grad_accum, memory=memory, status=status, error=error,
        notes=list(dict.fromkeys(record.notes + list(getattr(completed, "cleaned", [])))),
        overhead=Overhead(total_s=(time.time() - started) if started else None,
                          device_seconds=wall * record.world_size),
        nodes=record.nodes, command=record.command, run_dir=record.run_dir,
        launch=LaunchInfo(user_command=record.user_command, script=record.script,
                          exit_code=None if completed.timed_out or interrupted else completed.returncode,
                          wall_s=wall, hf=record.hf, config_arg=record.config_arg, trainer=trainer,
                          log=record.log),
    )


def summary_lines(row: RunRow, results: str | Path) -> list[str]:
    """What `dsx launch` prints after the job: the row in a few lines."""
    from dsx.units import format_bytes

    launch, m = row.launch, row.memory.max
    where = f"{row.world_size} x {row.gpu_name or 'GPU'}" if row.device == "cuda" else f"{row.world_size} CPU rank(s)"
    lines = [f"dsx launch: {row.status.upper()}  {launch.script} on {where}, exit {launch.exit_code}, "
             f"{launch.wall_s:.1f} s"]
    t = launch.trainer
    if t is not None:
        tokens = f", {t.tokens_per_s:,.0f} tokens/s at seq {t.seq_len}" if t.tokens_per_s is not None else ""
        samples = "-" if t.samples_per_s is None else f"{t.samples_per_s:,.3g}"
        steps = "-" if t.steps_per_s is None else f"{t.steps_per_s:,.3g}"
        loss = "" if t.train_loss is None else f", train loss {t.train_loss:.4g}"
        lines.append(f"  Trainer's own figures ({t.source}): {samples} samples/s, {steps} steps/s{tokens}{loss}")
    lines.append(f"  memory max  GPU (NVML) {format_bytes(m.nvml_used)}, host RSS of a rank {format_bytes(m.host_rss_peak)}")
    lines.append(f"  row {row.run_id} appended to {results}")
    return lines
