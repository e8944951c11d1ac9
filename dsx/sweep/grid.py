"""The grid of a sweep: SweepSpec (the axes and the trial settings) and its Configurations, one per point.

A point is everything but the micro-batch; the micro-batches of each point are dsx.sweep.search's business. The
spec's sweep_id hashes what decides the trials, so re-running the same command resumes the same sweep.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Any

from dsx.config_facts import PRECISIONS, configuration_label
from dsx.results import config_hash
from dsx.sweep.search import MB_FLAT

AUTO = "auto"
OFFLOAD_CHOICES = ("none", "cpu", "nvme")
PRECISION_CHOICES = PRECISIONS


class SweepError(ValueError):
    """The sweep cannot start as asked; the message says what to change."""


@dataclass(frozen=True)
class Configuration:
    """One point of the grid, without the micro-batch."""

    zero: int
    offload: str
    offload_params: str
    precision: str
    act_ckpt: bool
    compile: bool
    gpus: int | None
    vary: tuple[tuple[str, Any], ...] = ()
    """Model overrides of this point (`--vary`), in the order given; seq_len and vocab_pad included."""
    sparse: str | None = None
    """--sparse-attention word of this point (dsx.sparse); None: dense attention, no sparse request."""
    pipeline_stages: int | None = None
    """--pipeline-stages: the model as a DeepSpeed pipeline of this many stages; None: no pipeline."""
    grad_accum: int | None = None
    """This point's gradient accumulation (a pipeline's micro-batches per step) when --grad-accum lists several,
    or the one the default search chose; None: the spec's one value."""
    offload_ratio: float | None = None
    """zero_optimization.offload_optimizer.ratio below 1 (--offload-ratio: part of the optimizer offloaded, ZeRO-3);
    None: all of it (or no offload)."""
    bucket_size: int | None = None
    """--bucket-size: ZeRO's reduce bucket (and allgather bucket at ZeRO 1-2) in elements; None: the size dsx writes
    for the model (dsx.buckets)."""
    kernels: str | None = None
    """--kernels of this point (liger); None: the stock kernels."""
    fp8: str | None = None
    """--fp8 recipe of this point (tensorwise, rowwise); None: bf16/fp16 matmuls."""

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["vary"] = dict(self.vary)
        for key in ("sparse", "pipeline_stages", "grad_accum", "offload_ratio", "bucket_size", "kernels",
                    "fp8"):  # older rows: as they were
            if data[key] is None:
                del data[key]
        return data

    @property
    def label(self) -> str:
        extra = ([] if self.gpus is None else [f"{self.gpus}gpu"]) + [f"{k}={v}" for k, v in self.vary]
        extra += [f"sparse={self.sparse}"] if self.sparse is not None else []
        extra += ([] if self.pipeline_stages is None else [f"pp{self.pipeline_stages}"]) + (
            [] if self.grad_accum is None else [f"ga{self.grad_accum}"])
        extra += [] if self.bucket_size is None else [f"bucket={bucket_text(self.bucket_size)}"]
        extra += ([] if self.kernels is None else [self.kernels]) + ([] if self.fp8 is None else [f"fp8={self.fp8}"])
        return configuration_label(zero=self.zero, offload=self.offload, offload_params=self.offload_params,
                                   precision=self.precision, act_ckpt=self.act_ckpt, compile=self.compile,
                                   extra=extra, offload_ratio=self.offload_ratio or 1.0)

    def problem(self, nvme_path: str | None) -> str | None:
        """Why this point cannot run (skipped, no launch), or None."""
        if self.offload != "none" and self.zero == 0:
            return "optimizer offload needs ZeRO 1-3"
        if self.offload_params != "none" and self.zero != 3:
            return "parameter offload needs ZeRO-3"
        if "nvme" in (self.offload, self.offload_params) and not nvme_path:
            return "NVMe offload needs --nvme-path"
        if self.pipeline_stages is not None and self.zero >= 2:
            return "pipeline stages need ZeRO 0 or 1 (DeepSpeed refuses ZeRO-2/3 with a pipeline)"
        if self.bucket_size is not None and self.zero == 0:
            return "a ZeRO bucket size needs ZeRO 1-3 (ZeRO-0 has no buckets)"
        if self.offload_ratio is not None and self.zero != 3:
            return ("partial optimizer offload (--offload-ratio below 1) needs ZeRO-3 (DeepSpeed: 'Partial offloading "
                    "only supported for ZeRO Stage 3.')")
        return None


@dataclass
class SweepSpec:
    model: str
    zero: list[int]
    offload: list[str]
    offload_params: list[str] = field(default_factory=lambda: ["none"])
    precision: list[str] = field(default_factory=lambda: ["bf16"])
    act_ckpt: list[bool] = field(default_factory=lambda: [False])
    compile: list[bool] = field(default_factory=lambda: [False])
    gpus: list[int | None] = field(default_factory=lambda: [None])
    offload_ratio: list[float | None] = field(default_factory=lambda: [None])
    """--offload-ratio axis: offload_optimizer.ratio of the points with --offload cpu (None or 1: all of it)."""
    bucket_size: list[int | None] = field(default_factory=lambda: [None])
    """--bucket-size axis: ZeRO bucket sizes in elements (None: dsx's size for the model, dsx.buckets)."""
    vary: dict[str, list[Any]] = field(default_factory=dict)
    one_at_a_time: bool = False
    """--vary points: the base model plus one key changed at a time (for a parameter-effects table), instead of
    every combination."""
    micro_batch: list[int] | str = AUTO
    mb_start: int = 1
    mb_max: int = 1024
    mb_tolerance: float = 0.0
    """Stop bisecting when (first OOM - largest fit) <= max(1, tolerance x largest fit): 0 finds the exact boundary,
    0.25 saves trials on big models."""
    mb_flat: float = MB_FLAT
    """Stop the auto search when the sizes left below the first OOM could add less than this fraction of tokens/s
    (dsx.sweep.search.flat_stop; 0: never). Not part of the sweep id: it decides when to stop, not what a trial is."""
    grad_accum: int | list[int] = 1
    """One value for every trial, or a list: an axis (with --pipeline-stages, the pipeline's micro-batches)."""
    pipeline_stages: list[int | None] = field(default_factory=lambda: [None])
    """--pipeline-stages axis: stage counts, None for no pipeline."""
    pipeline_partition: str | None = None
    steps: int = 5
    warmup: int = 2
    overrides: dict[str, Any] = field(default_factory=dict)
    seq_len: int | None = None
    vocab_pad: int | None = None
    nvme_path: str | None = None
    optimizer: str | None = None
    lr: float | None = None
    ds_sets: tuple[str, ...] = ()
    attn: str = "sdpa"
    tf32: bool = False
    memory_cap: int | None = None
    trial_timeout_s: float | None = 1800.0
    results: str = "results/runs.jsonl"
    retry_failed: bool = False
    inject: dict[int, str] = field(default_factory=dict)
    """Tests: trial number (1-based, in the order trials are launched) -> --inject-failure spec."""
    prune: bool = True
    """Use dsx estimate on a calibrated GPU: skip configurations predicted not to fit, start the micro-batch search
    at the predicted largest, run the likely fastest configurations first (--no-prune turns it off)."""
    top: int | None = None
    """With pruning: run only the first N configurations of the plan (the N predicted fastest that are kept); the
    others are skipped and say so. Not part of the sweep id: it decides how far to go, not what a trial is."""
    keep_within: float = 0.1
    """With pruning: skip configurations predicted slower than the predicted fastest by more than this fraction
    (1 keeps every one that fits). dsx estimate's tokens/s is rough alone but errs alike across one model's
    configurations, so the ranking holds better than the figures."""
    estimate_gpu: str | None = None
    """The calibrated GPU kind (dsx.estimate.GPUS) the estimates are for; None: the visible GPU's, if calibrated."""
    nodes: dict[str, Any] = field(default_factory=dict)
    """dsx run's multi-node options for every trial (hostfile, launcher, include, exclude, num_nodes, master_addr,
    master_port, ssh_port), those given only."""
    sparse_attention: list[str | None] = field(default_factory=lambda: [None])
    """The --sparse-attention axis (words of dsx.sparse.spec; None: dense, no sparse request)."""
    sparse_sets: tuple[str, ...] = ()
    """--sparse-set KEY=VALUE for every trial with sparse attention."""
    python: str | None = None
    """The ranks' interpreter of every trial (`--python`, dsx.lane)."""
    search: str = "grid"
    """'grid': the product of the axes given; 'default': no axis was given, so dsx.sweep.space's search of ZeRO
    stage x offload (none, partial ratios, full) x checkpointing x compile, each at the grad-accum the estimate picks
    (grad_accum_choices)."""
    grad_accum_choices: tuple[int, ...] = ()
    """The default search's grad-accum candidates: the plan gives each configuration the smallest predicted within
    GRAD_ACCUM_WITHIN of the best of them (dsx.sweep.space)."""
    host_memory: int | None = None
    """--host-memory: the RAM the estimate judges host fit against (None: this machine's)."""
    nvme_free: int | None = None
    """--nvme-free: the NVMe space the estimate judges fit against (None: measured under --nvme-path)."""
    link_busbw: float | None = None
    """--link-bandwidth in bytes/s: the ranks' link the plan prices the collectives at (None: the GPU kind's NVLink).
    Planning only, not part of the sweep id."""
    data: str | None = None
    """--data of every trial (dsx.data: None is the learnable synthetic source)."""
    data_dtype: str | None = None
    data_seed: int | None = None
    max_global_batch: int | None = None
    """--max-global-batch: sequences per optimizer step over all replicas that no trial exceeds (DeepSpeed's
    train_batch_size; the autotuner's max_train_batch_size): each trial's grad-accum is derived from its
    micro-batch (dsx.sweep.trials.global_batch_grad_accum). None: --grad-accum as given."""
    loss: str = "plain"
    loss_tile_tokens: int | None = None
    """--loss / --loss-tile-tokens of every trial (dsx run's: the tiled loss keeps no whole logits)."""
    sequence_parallel: int | None = None
    """--sequence-parallel N of every trial (Ulysses; dsx run's)."""
    act_ckpt_offload: bool = False
    tiled_mlp: bool = False
    """--act-ckpt-offload / --tiled-mlp of every trial (dsx run's, dsx.rank.memory_savers)."""
    kernels: list[str | None] = field(default_factory=lambda: [None])
    fp8: list[str | None] = field(default_factory=lambda: [None])
    """The --kernels and --fp8 axes (dsx run's words; None: stock kernels, no float8)."""
    default_compile: tuple[bool, ...] = (False, True)
    """The default search's compile choices (`dsx estimate --longest`: eager only, dsx.longest.EAGER says why).
    Planning only, not part of the sweep id: no sweep runs with another."""
    activation_margin: float = 0.0
    """Share of the predicted activations the plan keeps free on the GPU (dsx.estimate.Setup.activation_margin;
    `dsx estimate --longest`: dsx.fit.ACTIVATION_ERROR). Planning only, not part of the sweep id."""
    comm_log: bool = True
    """--comm-log/--no-comm-log of every trial (dsx run's: the logger synchronises after every collective)."""
    replicas_seen: dict = field(default_factory=dict, repr=False, compare=False)
    """Cache of dsx.sweep.trials.trial_replicas: configuration -> data-parallel replicas."""

    def sweep_id(self) -> str:
        """Hash of what decides the trials; the same command gives the same id (results path, timeout excluded)."""
        keys = ("model", "zero", "offload", "offload_params", "precision", "act_ckpt", "compile", "gpus", "vary",
                "one_at_a_time", "micro_batch", "mb_start", "mb_max", "mb_tolerance", "grad_accum", "steps",
                "warmup", "overrides", "seq_len", "vocab_pad", "nvme_path", "optimizer", "lr", "ds_sets", "attn",
                "tf32", "memory_cap")
        nodes = {"nodes": self.nodes} if self.nodes else {}  # ids of single-node sweeps stay as they were
        sparse = ({"sparse_attention": self.sparse_attention, "sparse_sets": self.sparse_sets}
                  if self.sparse_attention != [None] or self.sparse_sets else {})
        if self.pipeline_stages != [None]:  # and of sweeps without a pipeline
            nodes.update(pipeline_stages=self.pipeline_stages, pipeline_partition=self.pipeline_partition)
        if self.offload_ratio != [None]:  # and of sweeps without partial offload
            nodes.update(offload_ratio=self.offload_ratio)
        if self.bucket_size != [None]:  # and of sweeps without a bucket axis
            nodes.update(bucket_size=self.bucket_size)
        if self.max_global_batch is not None:  # and of sweeps without a global-batch cap
            nodes.update(max_global_batch=self.max_global_batch)
        if self.loss != "plain" or self.loss_tile_tokens is not None:  # and of sweeps with the plain loss
            nodes.update(loss=self.loss, loss_tile_tokens=self.loss_tile_tokens)
        if self.sequence_parallel is not None:  # and of sweeps without Ulysses
            nodes.update(sequence_parallel=self.sequence_parallel)
        if self.search != "grid":  # and of grid sweeps
            nodes.update(search=self.search, grad_accum_choices=self.grad_accum_choices)
        if not self.comm_log:  # and of sweeps that count communication
            nodes.update(comm_log=False)
        if self.act_ckpt_offload or self.tiled_mlp:  # and of sweeps without the memory savers
            nodes.update(act_ckpt_offload=self.act_ckpt_offload, tiled_mlp=self.tiled_mlp)
        if self.kernels != [None] or self.fp8 != [None]:  # and of sweeps on stock kernels
            nodes.update(kernels=self.kernels, fp8=self.fp8)
        lane = {"python": self.python} if self.python else {}  # and of sweeps without --python
        if self.data is not None or self.data_dtype is not None or self.data_seed is not None:  # and of default data
            lane.update(data=self.data, data_dtype=self.data_dtype, data_seed=self.data_seed)
        return config_hash({**{k: getattr(self, k) for k in keys}, **nodes, **sparse, **lane})[:16]

    def vary_points(self) -> list[tuple[tuple[str, Any], ...]]:
        if not self.vary:
            return [()]
        keys = list(self.vary)
        if self.one_at_a_time:
            return [()] + [((k, v),) for k in keys for v in self.vary[k]]
        return [tuple(zip(keys, values)) for values in itertools.product(*(self.vary[k] for k in keys))]

    def grid_configurations(self) -> list[Configuration]:
        """The product of the axes (dsx.sweep.space.configurations adds the default search)."""
        accums = self.grad_accum if isinstance(self.grad_accum, list) else [None]
        points = [Configuration(z, o, op, p, a, c, g, v, sp, pp, ga, r if o == "cpu" else None, b, k, f)
                  for z, o, op, p, a, c, g, v, sp, pp, ga, r, b, k, f in itertools.product(
                      self.zero, self.offload, self.offload_params, self.precision, self.act_ckpt, self.compile,
                      self.gpus, self.vary_points(), self.sparse_attention, self.pipeline_stages, accums,
                      [None if r is None or r >= 1 else r for r in self.offload_ratio], self.bucket_size,
                      self.kernels, self.fp8)]
        return list(dict.fromkeys(points))  # a ratio applies to CPU offload only: the other points once



def bucket_text(size: int) -> str:
    """A bucket size as a label shows it: 10000000 -> '1e7', 124475904 -> '1.24e8'."""
    return f"{size:.3g}".replace("e+0", "e").replace("e+", "e")


def default_model(device: str) -> str:
    """The model when --model is not given: a tiny one on CPU ranks (seconds per trial), GPT-2 124M on GPUs."""
    return "gpt2" if device == "cuda" else "gpt2-tiny"
