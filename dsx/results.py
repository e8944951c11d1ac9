"""Results of `dsx run`: one JSON line per run, appended, never rewritten.

A row holds everything needed to compare runs later without the machine that made them: the full resolved
DeepSpeed config and its hash, the model and its overrides, host, GPU, library versions, every figure with
per-rank values and their max, the status, and the wall time dsx and DeepSpeed add around the timed steps.
Reports and plots are made from these rows only.

Rows are written with `append_row` (one `write` of one line under an exclusive lock, then flush + fsync) and
read with `read_rows`, which skips - and counts - a torn last line left by a crash mid-write.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

# the parts a capability adds, re-exported: every module reads the row from here
from dsx.row_parts import (CollectiveComm, Comm, CommPhase, CommPredicted, DataInfo, HostCpu, LaunchInfo, MemoryMax,
                           ParityInfo, ParityVerdict, PipelineInfo, PipelineStage, SparseAttentionInfo, TrainerFigures,
                           _Row)
from dsx.safe_io import MAX_NESTING, UnreadableFile, not_a_regular_file, read_bounded
from dsx.units import MIB

SCHEMA_VERSION = 1
"""Bump when a field changes meaning or is removed; adding an optional field does not need a bump."""

NCCL_ENV_NOTE = "NCCL settings from the environment: "
"""How a multi-GPU row's notes start the NCCL_* variables its ranks ran with (dsx.launcher), e.g. the ones that make
them talk over sockets instead of NVLink: they change the collectives' speed, which the estimate prices for the GPUs'
own links (dsx.report.facts.nccl_link_changed)."""

NCCL_LINK_VARIABLES = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NET": None, "NCCL_P2P_LEVEL": None}
"""The NCCL variables (and the values, None: any) that move a host's collectives off its GPUs' own links."""

MAX_RESULTS_BYTES = 256 * MIB
"""About 60,000 rows of a few KiB: more is read whole into memory by every report, so it is refused instead."""

Status = Literal["ok", "oom", "error", "timeout"]
MEMORY_FIELDS = ("peak_allocated", "peak_reserved", "nvml_used", "host_rss_peak", "pinned_host")


class Versions(_Row):
    torch: str | None = None
    deepspeed: str | None = None
    transformers: str | None = None
    dsx: str | None = None
    python: str


class ModelInfo(_Row):
    preset: str
    family: str | None = None
    task: str | None = None
    overrides: dict[str, Any] = Field(default_factory=dict)
    """`--set` model overrides as given (after JSON parsing of the values)."""
    params: int | None = None
    """Parameter count of the built model (all parameters, embeddings included), counted on the meta device."""
    seq_len: int
    vocab_pad: int | None = None
    dims: dict[str, Any] = Field(default_factory=dict)
    """The built shape (dsx.models.ResolvedModel.describe(): vocab_size, layers, hidden, heads, ffn, embedding...),
    so reports need not rebuild the model."""


class Toggles(_Row):
    tf32: bool = False
    compile: bool = False
    attn: str = "sdpa"
    act_ckpt: bool = False
    loss: str = "plain"
    """plain: transformers\' head and loss; tiled: dsx.rank.tiled_loss; fused: Liger's fused linear cross-entropy."""
    loss_tile_tokens: int | None = None
    act_ckpt_offload: bool = False
    """--act-ckpt-offload: each checkpointed layer's input kept in host memory (dsx.rank.memory_savers)."""
    tiled_mlp: bool = False
    """--tiled-mlp: Llama MLPs a slice of tokens at a time (DeepSpeed's TiledMLP; dsx.rank.memory_savers)."""
    kernels: str | None = None
    """--kernels liger: Liger Kernel's Triton kernels (dsx.rank.kernels); None: the stock kernels."""
    liger_fused_loss: bool = False
    """With --kernels liger: Liger's fused linear cross-entropy owns the loss (no logits)."""
    fp8: str | None = None
    """--fp8 tensorwise|rowwise: torchao's float8 training of the decoder's linear layers."""


class StepTime(_Row):
    median: float
    min: float
    max: float
    all: list[float]
    """One value per timed optimizer step: the slowest rank's time for that step (seconds)."""
    spread: float | None = None
    """(max - min) / median: how much the timed steps disagree. Two runs whose speeds differ by less than this are
    within the noise of the measurement (rows before this field: dsx.report computes it from min, max, median)."""


class Figures(_Row):
    """Throughput figures from the timed steps; null where the run produced no timed step."""

    step_time_s: StepTime | None = None
    tokens_per_s: float | None = None
    """Global: micro_batch x grad_accum x data-parallel replicas (world_size; a pipeline: world_size / stages) x
    seq_len / median step time."""
    samples_per_s: float | None = None
    model_tflops_per_s: float | None = None
    """Per GPU (rank): flops_per_token x tokens_per_s / world_size / 1e12."""
    flops_per_token: float | None = None
    """Analytic training FLOPs per token (dsx.flops.model_flops_per_token; its docstring states the formula); with
    sparse attention the attention term counts only the attended token pairs (sparse_attention.attended_fraction)."""
    flops_dtype: str | None = None
    """The dtype whose peak MFU is measured against (bf16, fp16, tf32, fp32)."""
    peak_tflops: float | None = None
    """Per-GPU dense peak for flops_dtype from dsx.gpus.PEAK_TFLOPS; null when the GPU is not in the table."""
    mfu: float | None = None
    """model_tflops_per_s / peak_tflops; null when the peak is unknown (never a guess)."""
    analytic_flops_per_step: float | None = None
    """flops_per_token x tokens per rank per optimizer step (set with --flop-check, for comparison)."""
    flop_counter_flops_per_step: float | None = None
    """torch.utils.flop_counter count of forward+backward per rank per optimizer step (--flop-check only)."""
    flop_check_note: str | None = None


class RankMemory(_Row):
    rank: int
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    nvml_used: int | None = None
    host_rss_peak: int | None = None
    pinned_host: int | None = None
    unavailable: dict[str, str] = Field(default_factory=dict)
    """Why a figure is null, by field name."""


class Memory(_Row):
    """Bytes. Per rank, and the max over ranks (null when no rank measured it)."""

    per_rank: list[RankMemory] = Field(default_factory=list)
    max: MemoryMax = Field(default_factory=MemoryMax)
    methods: dict[str, str] = Field(default_factory=dict)
    """How each figure was measured, by field name (from the ranks)."""
    capacity: int | None = None
    """What one rank may use: the GPU's total memory, or --memory-cap when set (CPU ranks: the cap, else the
    host's total memory). Reports draw it as the capacity line."""
    capacity_source: str | None = None


class RankResult(_Row):
    rank: int
    status: str
    """ok | oom | error | running (the rank was stopped before it finished) | missing (it wrote nothing)."""
    phase: str | None = None
    """The last phase the rank reached: started, imported, distributed, model_built, initialized, warmup, timed,
    done."""
    error: str | None = None
    host: str | None = None
    node_rank: int | None = None
    """The node the rank ran on (DeepSpeed's CROSS_RANK: 0 on one node; None in rows of older dsx)."""
    device: str | None = None
    step_time_s: list[float] = Field(default_factory=list)
    loss: list[float] = Field(default_factory=list)
    """Each timed step's mean loss over the micro-batches of every data-parallel replica (dsx.rank.loop), so every
    rank records the same value."""
    warmup_loss: list[float] = Field(default_factory=list)
    """The same for the warm-up steps (rows before this field: empty). warmup_loss + loss is the whole curve, step
    0 first, that dsx.parity compares."""
    timings_s: dict[str, float] = Field(default_factory=dict)
    """Seconds to reach each phase from the one before: imported_s (from process start), distributed_s,
    model_built_s (rank 0: includes --flop-check), initialized_s (deepspeed.initialize), warmup_done_s,
    timed_done_s, end_s."""


class Overhead(_Row):
    """Wall time (seconds) around the timed steps; null where not known (a rank died before reporting)."""

    dsx_startup_s: float | None = None
    """Process start of `dsx` to the start of the run code (Python, imports, CLI parsing)."""
    prepare_s: float | None = None
    """Model resolution and parameter count, config generation + lint, writing the plan."""
    launch_to_rank_start_s: float | None = None
    """Start of DeepSpeed's runner until the last rank process started (runner and launch.py imports)."""
    rank_import_s: float | None = None
    """Rank process start until torch, deepspeed and transformers are imported (slowest rank)."""
    dist_init_s: float | None = None
    """deepspeed.init_distributed (slowest rank)."""
    model_build_s: float | None = None
    """Building the model (under deepspeed.zero.Init at ZeRO-3) (slowest rank), without the flop check."""
    flop_check_s: float | None = None
    """The --flop-check count on rank 0 (runs between init_distributed and the model build)."""
    ds_initialize_s: float | None = None
    """deepspeed.initialize, including loading or JIT-building DeepSpeed ops (slowest rank)."""
    jit_built: list[str] = Field(default_factory=list)
    """DeepSpeed/torch extension ops (re)built during this run (a .so written in TORCH_EXTENSIONS_DIR)."""
    warmup_s: float | None = None
    timed_s: float | None = None
    teardown_s: float | None = None
    """Last rank finished writing its result until the launcher exited (process-group teardown, launcher poll)."""
    total_s: float | None = None
    """Process start of `dsx` until the row was assembled."""
    added_s: float | None = None
    """total_s - warmup_s - timed_s: the wall time dsx and DeepSpeed add around the training steps."""
    device_seconds: float | None = None
    """Launch start to launcher exit, times the ranks: GPU-seconds on GPUs (CPU-rank-seconds on CPU). What a
    sweep spends is the sum of its rows' device_seconds."""


class SweepInfo(_Row):
    """Where a row sits in a `dsx sweep`."""

    sweep_id: str
    """Hash of the sweep's specification (model, axes, steps, caps): re-running the same sweep gives the same id."""
    configuration: dict[str, Any]
    """The axis values of this trial's configuration (zero, offload, offload_params, precision, act_ckpt, gpus,
    compile, vary...), without the micro-batch."""
    label: str
    """The configuration in a few words, e.g. 'z3 off=cpu bf16 ckpt' (report groups by it)."""
    search: Literal["fixed", "grow", "shrink", "bisect"]
    """How the micro-batch was chosen: given (fixed), or a step of the --micro-batch auto search."""


class NodesInfo(_Row):
    """A run over the nodes of a hostfile."""

    hostfile: str
    launcher: str
    hosts: list[str]
    """The selected hosts, in node-rank order."""
    ranks_per_node: list[int]
    master_addr: str
    host_rss_peak: dict[str, int | None] = Field(default_factory=dict)
    """Bytes: the sum over each node's ranks of their peak RSS, by host (what the node's RAM had to hold)."""


RUN_ONLY_FIELDS = ("model", "micro_batch", "grad_accum", "precision", "steps", "warmup", "toggles")
"""Fields every `dsx run` row has and a `dsx launch` row may not (dsx does not build the user's model)."""


class RunRow(_Row):
    schema_version: int = SCHEMA_VERSION
    kind: Literal["run", "launch"] = "run"
    """'run': `dsx run` / `dsx sweep` trained a preset and measured its steps (rows written before this field are
    runs). 'launch': `dsx launch` ran a user's own script; what dsx measured of it is in `launch`, and the fields
    only a run knows (RUN_ONLY_FIELDS) are null where the command line does not say them."""
    run_id: str
    time: str
    """UTC, ISO 8601, when the run started."""
    host: str
    host_cpu: HostCpu | None = None
    """The CPU of the host dsx ran on; null in rows before it was recorded."""
    device: Literal["cuda", "cpu"]
    gpu_name: str | None = None
    gpu_count: int = 0
    """GPUs the run used (0 for CPU ranks)."""
    versions: Versions
    ds_config: dict[str, Any]
    """The full resolved DeepSpeed config of the run. The ranks' own copy (ds_config.json in run_dir) adds only the
    comms_logger block dsx counts communication with (dsx.comm.logger)."""
    ds_config_hash: str
    ds_config_source: str
    """'flags' (generated by dsx from the command line) or the path of the --config file."""
    model: ModelInfo | None = None
    micro_batch: int | None = None
    grad_accum: int | None = None
    world_size: int
    precision: str | None = None
    steps: int | None = None
    warmup: int | None = None
    toggles: Toggles | None = None
    figures: Figures = Field(default_factory=Figures)
    memory: Memory = Field(default_factory=Memory)
    ranks: list[RankResult] = Field(default_factory=list)
    status: Status
    error: str | None = None
    notes: list[str] = Field(default_factory=list)
    overhead: Overhead = Field(default_factory=Overhead)
    memory_cap: int | None = None
    """--memory-cap in bytes (CUDA: the caching allocator's limit; CPU ranks: RLIMIT_DATA), null when not set."""
    trial_key: str | None = None
    """sha256 of what makes two runs the same trial: the DeepSpeed config, the model (preset, overrides, seq len,
    vocab pad), toggles, device, world size, steps, warm-up and memory cap. `dsx sweep` skips trials whose key
    already has a row."""
    sweep: SweepInfo | None = None
    nodes: NodesInfo | None = None
    """Set for runs over a hostfile (`--hostfile`)."""
    sparse_attention: SparseAttentionInfo | None = None
    """Set when the run asked for block-sparse attention (dsx.sparse)."""
    pipeline: PipelineInfo | None = None
    """Set for runs with --pipeline-stages."""
    command: list[str]
    """The dsx argv as run."""
    run_dir: str | None = None
    """Where the config, plan, launcher log and per-rank JSON files of this run are."""
    comm: Comm | None = None
    """Bytes and calls per step by collective (DeepSpeed's comms logger); null for runs without it."""
    python: str | None = None
    """The interpreter the ranks ran (`--python`); null: dsx's own."""
    launch: LaunchInfo | None = None
    """Set on `dsx launch` rows (kind 'launch')."""
    data: DataInfo | None = None
    """What the run trained on (dsx.data); null in rows before it: uniform random tokens."""
    parity: ParityInfo | None = None
    """Set on the rows of a parity check (`dsx check`, `dsx sweep --check`; dsx.parity)."""

    @model_validator(mode="after")
    def _kind_has_its_fields(self):
        if self.kind == "run":
            missing = [name for name in RUN_ONLY_FIELDS if getattr(self, name) is None]
            if missing:
                raise ValueError(f"a run row needs {', '.join(missing)}")
        elif self.launch is None:
            raise ValueError("a launch row needs `launch`")
        return self


# ---------------------------------------------------------------------------------------------------------------


def canonical_json(config: dict) -> str:
    return json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def trial_key(*, ds_config: dict, model: dict, toggles: dict, device: str, world_size: int, steps: int, warmup: int,
              memory_cap: int | None, nodes: dict | None = None, pipeline: dict | None = None,
              lane: dict | None = None, data: dict | None = None) -> str:
    """What makes two runs the same trial (RunRow.trial_key): the resolved config (the micro-batch is inside it), the
    model and its overrides, the toggles, device, world size, steps and the memory cap, for a hostfile run the
    selected nodes and the launcher, for a pipeline its stages and partition, for a `--python` run the
    interpreter and its DeepSpeed, and data other than the default synthetic source (keys of runs without them stay
    as they were)."""
    return config_hash({**(nodes or {}), **({"pipeline": pipeline} if pipeline else {}),
                        **({"lane": lane} if lane else {}), **({"data": data} if data else {}), "ds_config": ds_config,
                        **model, "toggles": toggles, "device": device, "world_size": world_size, "steps": steps,
                        "warmup": warmup, "memory_cap": memory_cap})


def config_hash(config: dict) -> str:
    """sha256 of the canonical JSON (sorted keys, no whitespace): equal configs hash equal whatever their key order."""
    return hashlib.sha256(canonical_json(config).encode("utf-8")).hexdigest()


def append_row(path: str | os.PathLike, row: RunRow | dict) -> None:
    """Append one row as one line: exclusive lock, one write, flush, fsync. The file is never rewritten.

    If the file ends in a torn line (a crash mid-write), a newline is written first so the new row stays whole;
    `read_rows` skips the torn line. A path that is not a regular file is refused (UnreadableFile), never waited on.
    """
    data = row.model_dump(mode="json") if isinstance(row, RunRow) else row
    line = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # O_NONBLOCK: opening a FIFO for writing must fail (ENXIO) rather than wait for a reader
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0), 0o644)
    try:
        kind = not_a_regular_file(os.fstat(fd).st_mode)
        if kind:
            raise UnreadableFile(f"{path}: is {kind}, not a results file", "special")
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        prefix = b""
        if size:
            with open(path, "rb") as existing:
                existing.seek(size - 1)
                if existing.read(1) != b"\n":
                    prefix = b"\n"
        payload = prefix + line.encode("utf-8")
        written = 0
        while written < len(payload):
            written += os.write(fd, payload[written:])
        os.fsync(fd)
    finally:
        os.close(fd)  # closing releases the lock


class Rows(list):
    """The rows of a results file (plain dicts, any schema version), plus what had to be skipped."""

    def __init__(self, rows=(), skipped=()):
        super().__init__(rows)
        self.skipped: list[tuple[int, str]] = list(skipped)
        """(line number, reason) for every line that is not a JSON object: a torn last line, or damage."""


def read_rows(path: str | os.PathLike) -> Rows:
    """Every row of a JSON-lines results file, oldest first. Lines that do not parse are skipped and counted
    in `.skipped` (a torn last line from a crash is expected; anything else is reported the same way)."""
    rows: list[dict] = []
    skipped: list[tuple[int, str]] = []
    path = Path(path)
    if not os.path.lexists(path):
        return Rows()
    lines = read_bounded(path, limit=MAX_RESULTS_BYTES, what="a results file",
                         why="split it (rows are JSON lines)").split(b"\n")
    last_index = len(lines) - 1
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw.decode("utf-8"))
        except RecursionError:
            raise UnreadableFile(f"{path}:{number}: nested more than {MAX_NESTING} levels deep; not a dsx row",
                                 "too-deep") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            torn = number - 1 == last_index
            skipped.append((number, "torn last line (no newline)" if torn else f"not JSON: {exc}"))
            continue
        if not isinstance(value, dict):
            skipped.append((number, f"not a JSON object but {type(value).__name__}"))
            continue
        rows.append(value)
    return Rows(rows, skipped)


def parse_row(data: dict) -> RunRow:
    """A row of the current schema version as a RunRow (pydantic validation; raises on other versions)."""
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ValueError(f"row schema_version {version!r}, this dsx reads {SCHEMA_VERSION}")
    # Unknown fields are ignored when reading: a newer dsx adds optional fields without a version bump.
    return RunRow.model_validate(data, extra="ignore")
