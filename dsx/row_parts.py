"""The parts of a result row (dsx.results.RunRow) that a capability adds: communication per step (dsx.comm),
sparse attention (dsx.sparse), pipeline stages (dsx.pipeline), a user's own script under `dsx launch`
(dsx.userjob); with the two pieces every part shares (the base model, MemoryMax). Rows are read and written by
dsx.results, which holds the rest of the row."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MemoryMax(_Row):
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    nvml_used: int | None = None
    host_rss_peak: int | None = None
    pinned_host: int | None = None


class CollectiveComm(_Row):
    """One collective's traffic per timed optimizer step (mean over the timed steps)."""

    calls_per_step: float
    logged_bytes_per_step: float
    """DeepSpeed's comms logger's message sizes: the bytes of the op's input tensor (this rank's shard for an
    all-gather), summed over the calls."""
    bytes_per_step: float
    """The ZeRO paper's data volume (dsx.comm.volume): all-reduce 2x its tensor, all-gather the gathered output
    (logged x world size), reduce-scatter / all-to-all / broadcast / send / recv their input."""


class CommPhase(_Row):
    """The timed steps of one phase of a 1-bit optimizer (warm-up: uncompressed, or compressed)."""

    steps: list[int]
    """Indices of the timed steps in this phase."""
    bytes_per_step: float | None = None
    step_time_s_median: float | None = None


class CommPredicted(_Row):
    """dsx.comm.predict for this run's config and model (what `dsx estimate` prints)."""

    bytes_per_step: float
    paper_bytes_per_step: float
    """2N or 3N elements of the communication dtype: the ZeRO paper's figure."""
    parts: dict[str, float] = Field(default_factory=dict)
    compressed_bytes_per_step: float | None = None
    notes: list[str] = Field(default_factory=list)


class HostCpu(_Row):
    """The CPU of the host dsx ran on (dsx.host): what eager and ZeRO-3 steps wait on besides the GPU."""

    model: str | None = None
    """/proc/cpuinfo's model name."""
    cpus: int
    """CPUs dsx's process may run on (its affinity)."""
    python_loop_ns: float | None = None
    """The host's Python speed, which ZeRO-3's hooks scale with (dsx.estimate prices them by it): the median of
    python_loop_probes (older rows: one probe just before the launch; rows of 2026-11-29 22:52-23:05 UTC: the faster
    of two); null where not measured (a `dsx launch` row)."""
    python_loop_probes: list[float] = []
    """dsx.host.python_loop_ns in time order: just before dsx launched the ranks, every 2 s while they ran, and just
    after they exited (dsx.host.HostSpeedSampler); empty in older rows."""


class Comm(_Row):
    """Communication per optimizer step, counted by DeepSpeed's comms logger on every rank (dsx.comm)."""

    steps: int
    """Steps counted (rank 0)."""
    counted: str | None = None
    """'warm-up': the warm-up steps after the first, the logger off in the timed steps (dsx.rank.comms); 'timed' (or
    None, rows before it was recorded): the timed steps, the logger on in them."""
    bytes_per_step: float | None = None
    """Rank 0: the sum of collectives[*].bytes_per_step."""
    bytes_per_step_max: float | None = None
    """The largest per-rank sum."""
    bytes_per_param: float | None = None
    """bytes_per_step / the model's parameters."""
    collectives: dict[str, CollectiveComm] = Field(default_factory=dict)
    """Rank 0, by DeepSpeed's log name (all_reduce, all_gather_into_tensor, reduce_scatter_tensor, broadcast, ...)."""
    collectives_max: dict[str, CollectiveComm] = Field(default_factory=dict)
    """Each figure's max over ranks, by log name."""
    predicted: CommPredicted | None = None
    phases: dict[str, CommPhase] | None = None
    """1-bit optimizers: 'warmup' (uncompressed) and 'compressed' timed steps, each with its bytes and step time."""
    method: str = ""
    notes: list[str] = Field(default_factory=list)


class SparseAttentionInfo(_Row):
    """Block-sparse attention of the run (dsx.sparse): asked for with --sparse-attention or a config's
    sparse_attention block, applied by dsx (DeepSpeed 0.19 has no sparse attention; 0.18 only parsed the block)."""

    requested: str
    """The --sparse-attention word (a mode, auto, auto:MODE), or 'config' when the config's block asked."""
    mode: str
    """The layout's mode (dense, fixed, variable, bigbird, bslongformer, local)."""
    applied: bool
    """False when `auto` ran dense attention (then kernel is null)."""
    params: dict[str, Any]
    """The layout block, every key (defaults written out)."""
    block: int
    seed: int
    """Seed of the random blocks (random.Random, the same on every rank)."""
    causal: bool
    """Causal inside the allowed blocks (a causal model, or a unidirectional layout)."""
    layout_density: float
    """Share of the layout's blocks that are 1 (DeepSpeed's layout, over all heads)."""
    attended_fraction: float
    """Token pairs attended / a dense attention's of the same causality."""
    tile_fraction: float
    """128 x 128 tiles FlexAttention computes / a dense kernel's of the same causality."""
    kernel: str | None = None
    """flex_attention (CUDA, compiled, BlockMask) | sdpa_mask (CPU: boolean mask through SDPA) | null (dense)."""
    applied_by: str = "dsx"
    handed_to_deepspeed: bool = False
    """Whether the block stayed in the DeepSpeed config (0.18 targets parse it and never apply it; 0.19 rejects it,
    so dsx removes it)."""
    predicted_attention_speedup: float | None = None
    """dsx.sparse.predict: dense SDPA time / FlexAttention time of one attention call (CUDA only)."""
    decision: str | None = None
    """Sparse or dense, and why, in one line."""


class PipelineStage(_Row):
    """One pipeline stage of a run: its layers, parameters and memory (the max over its data-parallel ranks)."""

    stage: int
    ranks: list[int]
    layers: list[str]
    """Layer classes in order (dsx.pipeline: TokenEmbeddingPipe, GPT2BlockPipe..., 'tied head')."""
    layer_range: list[int]
    """[first, last + 1) in the PipelineModule's layer list."""
    params: int | None = None
    """Parameters one of its ranks holds (a tied embedding counts on the first and the last stage)."""
    memory: MemoryMax = Field(default_factory=MemoryMax)
    """Bytes: each figure's max over the stage's ranks (per-rank figures: RunRow.memory.per_rank)."""


class PipelineInfo(_Row):
    """A run with --pipeline-stages: the model as a deepspeed.pipe.PipelineModule (dsx.pipeline)."""

    stages: int
    data_parallel: int
    """Replicas of the whole pipeline: world_size / stages."""
    micro_batches: int
    """Pipeline micro-batches per optimizer step (= grad_accum)."""
    partition: str
    """DeepSpeed's partition_method: parameters | uniform | type:REGEX."""
    activation_checkpoint_interval: int = 0
    bubble_fraction: float
    """The 1F1B schedule's ideal idle share of a step: (stages - 1) / (micro_batches + stages - 1)."""
    per_stage: list[PipelineStage] = Field(default_factory=list)
    largest_stage: int | None = None
    """The stage with the most peak memory (by largest_by)."""
    largest_by: str | None = None
    """The figure largest_stage is judged by: peak_reserved (GPU), host_rss_peak (CPU ranks) or params."""
    params_total: int | None = None
    """The stages' parameters together, a tied embedding once: equals model.params when the split lost nothing."""
    tied_weights_equal: bool | None = None
    """After the timed steps, every copy of a tied weight (first and last stage) is bit-for-bit the same; null for
    an untied model or a failed run."""


class TrainerFigures(_Row):
    """What a transformers Trainer script reported about its own training (the metrics of `Trainer.train()`), read
    by `dsx launch` after the job: dsx does not time the script's steps itself."""

    samples_per_s: float | None = None
    """train_samples_per_second: the samples of all ranks / train_runtime."""
    steps_per_s: float | None = None
    """train_steps_per_second: optimizer steps / train_runtime."""
    runtime_s: float | None = None
    """train_runtime: Trainer.train()'s training loop, first steps included, DeepSpeed's initialisation not."""
    train_loss: float | None = None
    """The mean training loss the Trainer reports (null: not reported)."""
    global_step: int | None = None
    tokens_per_s: float | None = None
    """samples_per_s x seq_len (`dsx launch --seq-len`); null without it."""
    seq_len: int | None = None
    micro_batch: int | None = None
    """--per_device_train_batch_size as the command line gave it (the Trainer's default 8 when absent)."""
    grad_accum: int | None = None
    """--gradient_accumulation_steps as the command line gave it (default 1)."""
    source: str
    """Where the figures were read: a trainer_state.json / train_results.json written during the launch, or 'log'
    (the metrics line the Trainer printed)."""


class LaunchInfo(_Row):
    """What `dsx launch` knows of a user's own script: how it was run and how it ended."""

    user_command: list[str]
    """The command every rank ran, with the config's argument appended (before the runner's --local_rank=N)."""
    script: str
    """The script's file name, or the module of `python -m MODULE`."""
    exit_code: int | None = None
    """The job's exit status (null: killed at --timeout or interrupted)."""
    wall_s: float
    """Start of DeepSpeed's runner to its exit."""
    hf: bool = False
    """The config was checked as one the transformers Trainer / accelerate fill ("auto" allowed where they fill it)."""
    config_arg: str | None = None
    """How the config reached the script (--deepspeed_config, --deepspeed), null for --config-arg none."""
    trainer: TrainerFigures | None = None
    """The Trainer's own figures when the script is a transformers Trainer that reported them; else null."""
    log: str | None = None
    """The job's output (all ranks), kept beside the results file."""


class DataInfo(_Row):
    """What the run trained on (dsx.data) and how long its ranks waited for it."""

    source: str
    """synthetic (the learnable default), random, tokens (a binary token file) or dataset (save_to_disk)."""
    label: str
    path: str | None = None
    dtype: str | None = None
    seed: int | None = None
    tokens: int | None = None
    """Token ids the file or dataset holds."""
    global_batch: int | None = None
    """Samples per optimizer step over every replica: step s trained samples [s x global_batch, (s+1) x ...)."""
    wait_s_median: float | None = None
    """Per timed step, the slowest rank's seconds to make its batches and move them to the device (not in the step
    time), then the median."""
    wait_share: float | None = None
    """wait_s_median / (wait_s_median + the median step time): the share of the wall a loader this slow costs."""


class ParityVerdict(_Row):
    """What a parity check found (dsx.parity.judge)."""

    verdict: Literal["same", "differs", "by design", "unknown"] | None = None
    """same: every step's loss within the tolerance of the reference's; differs: a step outside it; by design: the
    configuration changes the arithmetic on purpose (by_design says how), the difference is reported, not judged;
    unknown: a run of the check failed (reason)."""
    steps: int | None = None
    """Steps compared (warm-up steps included: every step from the first)."""
    max_abs_diff: float | None = None
    """The largest |loss(candidate) - loss(reference)| over the steps."""
    at_step: int | None = None
    reference_spread: float | None = None
    """The largest |loss(reference A) - loss(reference B)| over the steps: B is the same training as A in fp32 (a
    bf16/fp16 run) or with its global batch split the other way (fp32; dsx.parity.alternate_split)."""
    tolerance: float | None = None
    rule: str | None = None
    """How the tolerance was made from the spread."""
    by_design: str | None = None
    reason: str | None = None
    notes: list[str] = Field(default_factory=list)


class ParityInfo(ParityVerdict):
    """The row's part in a parity check (dsx.parity): does this configuration train the same model as plain data
    parallel on the same data? The verdict is on the row written last in the check (the candidate's, or the last
    reference's when the candidate row existed before), with `candidate_run_id` naming the row it judges; the other
    rows of the check carry its id and their role only."""

    check_id: str
    role: Literal["candidate", "reference"]
    candidate_run_id: str | None = None
    reference_run_ids: list[str] = Field(default_factory=list)
