"""The contract between dsx and a rank: the plan dsx writes, the report each rank writes, the phase names.

Both sides import this module (dsx.run writes RankPlan and reads RankReport; dsx.rank writes RankReport), so a
field renamed on one side is renamed on both. It imports pydantic only: the rank reads it before torch.

Files in a run's folder: `plan.json` (RankPlan), `ds_config.json`, `rank-<N>.json` (RankReport, rewritten
atomically at every phase so a killed rank still says how far it got).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from dsx.data.spec import DataSpec
from dsx.sparse.spec import SparsePlan

PLAN_FILE = "plan.json"

Phase = Literal["started", "imported", "distributed", "model_built", "initialized", "warmup_done", "timed_done", "done"]
PHASES: tuple[str, ...] = get_args(Phase)
"""A rank's phases in order; RankReport.phase is the last one reached and RankReport.times[phase] its time."""

TIMELINE = ("process_start", *PHASES[1:-1], "end")
"""The time marks between which a rank's spans are measured (RankResult.timings_s: imported_s, ...): the process's
start instead of 'started' and the final write ('end') instead of 'done'."""

INJECTION_KINDS = ("error", "oom", "exit", "hang", "grad")
"""grad: not a crash but a wrong training (dsx.rank.faults.install_gradient_fault), for the parity check's test."""


class Toggles(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tf32: bool = False
    compile: bool = False
    attn: str = "sdpa"
    act_ckpt: bool = False
    loss: str = "plain"
    """plain: transformers\' head and loss; tiled: dsx.rank.tiled_loss; fused: Liger's fused linear cross-entropy."""
    loss_tile_tokens: int | None = None
    act_ckpt_offload: bool = False
    tiled_mlp: bool = False
    """dsx.rank.memory_savers."""
    kernels: str | None = None
    liger_fused_loss: bool = False
    fp8: str | None = None
    """dsx.rank.kernels."""


class Injection(BaseModel):
    """A failure asked for with --inject-failure KIND[:STEP][@RANK] (tests of dsx's failure handling):
    no STEP = right after deepspeed.initialize; no RANK = every rank."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["error", "oom", "exit", "hang", "grad"]
    step: int | None = None
    rank: int | None = None


def parse_injection(text: str | None) -> Injection | None:
    """'KIND[:STEP][@RANK]' with KIND error|oom|exit|hang; ValueError for anything else."""
    if not text:
        return None
    spec, _, rank = text.partition("@")
    kind, _, step = spec.partition(":")
    if kind not in INJECTION_KINDS:
        raise ValueError(f"unknown injected failure {text!r}")
    try:
        return Injection(kind=kind, step=int(step) if step else None, rank=int(rank) if rank else None)
    except ValueError:
        raise ValueError(f"unknown injected failure {text!r}") from None


class PipelinePlan(BaseModel):
    """`--pipeline-stages`: the model runs as a deepspeed.pipe.PipelineModule of `stages` stages (dsx.rank.pipeline)."""

    model_config = ConfigDict(extra="forbid")

    stages: int
    partition: str = "parameters"
    """DeepSpeed's partition_method: parameters | uniform | type:REGEX."""
    activation_checkpoint_interval: int = 0
    """The PipelineModule's (1 with --act-ckpt); a config's pipeline.activation_checkpoint_interval > 0 overrides it."""


class RankPlan(BaseModel):
    """What every rank of one run does: written by dsx.run.prepare as plan.json, read by dsx/rank/train_rank.py."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    model: str
    overrides: dict = Field(default_factory=dict)
    seq_len: int | None = None
    vocab_pad: int | None = None
    micro_batch: int
    grad_accum: int
    steps: int
    warmup: int
    toggles: Toggles = Field(default_factory=Toggles)
    ds_config_path: str
    output_dir: str
    device: Literal["cuda", "cpu"]
    flop_check: bool = False
    seed: int = 1234
    inject_failure: str | None = None
    memory_cap: int | None = None
    sparse_attention: SparsePlan | None = None
    """Block-sparse attention (dsx.sparse): the model is built with attn_implementation "dsx_sparse"."""
    pipeline: PipelinePlan | None = None
    sequence_parallel: int | None = None
    """Ulysses: ranks sharing each micro-batch's sequence (dsx.rank.ulysses); None: none."""
    data: DataSpec = Field(default_factory=DataSpec)
    """What the ranks train on (dsx.data): the learnable synthetic source unless --data says otherwise."""

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.model_dump(), indent=2) + "\n")

    @classmethod
    def read(cls, path: str | Path) -> RankPlan:
        return cls.model_validate_json(Path(path).read_text())


class FlopCheck(BaseModel):
    counter_flops_per_token: float | None = None
    device: str | None = None
    attn: str | None = None
    micro_batch: int | None = None
    error: str | None = None
    seconds: float | None = None


GATHERS = ("all_gather", "all_gather_into_tensor", "allgather_fn", "all_gather_base")
"""The log names of deepspeed.comm's all-gathers: the rank counts their group (dsx.rank.comms), dsx.comm.volume
counts their gathered output."""


class CollectiveCount(BaseModel):
    """One collective's calls and bytes as DeepSpeed's comms logger recorded them (dsx.rank.comms says what the
    bytes are: the message size of the op's input tensor, summed over its calls)."""

    calls: int = 0
    logged_bytes: int = 0
    gathered_bytes: int | None = None
    """All-gathers: each call's logged bytes x the ranks of the group it gathered over (the logger records no group;
    dsx.rank.comms reads it from the call), so a gather within hpZ's secondary partition counts its own group."""


class CommLog(BaseModel):
    """What DeepSpeed's comms logger recorded on this rank in each counted step (dsx.rank.comms), by log name."""

    steps: list[dict[str, CollectiveCount]] = Field(default_factory=list)
    compressed: list[bool] | None = None
    """1-bit optimizers: per timed step, whether it ran in the compressed phase (its gradient exchange done by the
    optimizer's compressed allreduce, the engine's own allreduce off); None for other optimizers."""
    counted: Literal["timed", "warm-up"] = "timed"
    """Which steps `steps` are: the warm-up steps after the first, with the logger off in the timed steps (dsx.rank.
    comms: its device synchronisation after every collective stays out of the clock), or the timed steps."""
    note: str | None = None
    """Why nothing was counted, when so."""
class PipelineRankInfo(BaseModel):
    """The pipeline stage a rank ran (dsx.rank.pipeline.stage_info)."""

    stage: int
    stages: int
    data_parallel_rank: int
    data_parallel_size: int
    parts: list[int]
    """The partition every rank computed: stage s runs layers [parts[s], parts[s+1])."""
    layers: list[str]
    """This stage's layer classes in order ('tied head': the tied embedding used as the LM head)."""
    params: int
    """Parameters this rank holds (a tied embedding counts on each stage that holds a copy)."""
    tied_params: int = 0
    tied_fingerprints: dict[str, str] = Field(default_factory=dict)
    """sha256 of each tied weight's bytes after the timed steps: equal on the first and the last stage when they
    stayed tied."""
    fingerprint_s: float | None = None


class RankReport(BaseModel):
    """What one rank reports: status and phase, its step times and losses, memory with the method behind each
    figure (or why it is missing), versions, notes."""

    rank: int
    local_rank: int = 0
    world_size: int = 1
    host: str | None = None
    node_rank: int | None = None
    pid: int | None = None
    status: Literal["running", "ok", "oom", "error"] = "running"
    phase: Phase = "started"
    error: str | None = None
    traceback: str | None = None
    device: str | None = None
    gpu_name: str | None = None
    gpu_capability: str | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    times: dict[str, float] = Field(default_factory=dict)
    step_time_s: list[float] = Field(default_factory=list)
    warmup_step_time_s: list[float] = Field(default_factory=list)
    loss: list[float] = Field(default_factory=list)
    """The step's mean loss over every data-parallel replica (dsx.rank.loop)."""
    warmup_loss: list[float] = Field(default_factory=list)
    data_wait_s: list[float] = Field(default_factory=list)
    """Per step, warm-up included: seconds spent making the step's batches and moving them to the device (before
    the clock starts)."""
    memory: dict[str, int | None] = Field(default_factory=dict)
    memory_methods: dict[str, str] = Field(default_factory=dict)
    memory_unavailable: dict[str, str] = Field(default_factory=dict)
    capacity: int | None = None
    capacity_source: str | None = None
    flop_check: FlopCheck | None = None
    notes: list[str] = Field(default_factory=list)
    params_seen: int | None = None
    comm: CommLog | None = None
    pipeline: PipelineRankInfo | None = None

    def span(self, start: str, end: str) -> float | None:
        """Seconds between two time marks, or None when either is missing."""
        if start in self.times and end in self.times:
            return self.times[end] - self.times[start]
        return None


def rank_report_path(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / f"rank-{rank}.json"


def write_rank_report(report: RankReport, run_dir: str | Path) -> None:
    """Atomically (temp file + rename): dsx may read it at any moment, and a killed rank must leave a whole file."""
    path = rank_report_path(run_dir, report.rank)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(report.model_dump(), indent=1, allow_nan=True))
    os.replace(tmp, path)


def read_rank_report(run_dir: str | Path, rank: int) -> RankReport | None:
    """The rank's last report, or None when it never wrote one (or wrote something unreadable)."""
    try:
        return RankReport.model_validate(json.loads(rank_report_path(run_dir, rank).read_text()))
    except (OSError, ValueError):
        return None
