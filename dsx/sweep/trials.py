"""One trial of a sweep: the dsx.run request for a configuration at a micro-batch, the `dsx run` command line
that repeats it, and which trials the results file already holds (the rows that make re-running a resume).
"""

from __future__ import annotations

import math
from pathlib import Path

from dsx.config_facts import config_flags
from dsx.run.command_line import run_command
from dsx.results import read_rows
from dsx.sweep.grid import Configuration, SweepSpec

DONE_STATUSES = ("ok", "oom", "error", "timeout")
"""Outcomes a re-run would most likely repeat: they count as done (errors and timeouts too, unless --retry-failed)."""


def done_rows(results: Path, retry_failed: bool, gpu_name: str | None = None,
              elsewhere: list[str] | None = None) -> dict[str, dict]:
    """trial_key -> the latest row for it that counts as done. When this machine has a GPU (`gpu_name`, its first
    visible one), a row measured on another GPU does not count: its speed and memory are that GPU's, and the trial
    key does not name the GPU. Its GPU's name goes into `elsewhere`. (Without a GPU here - a head node launching
    onto a hostfile's nodes - the key decides, as before.)"""
    done: dict[str, dict] = {}
    for row in read_rows(results):
        key, status = row.get("trial_key"), row.get("status")
        if gpu_name and row.get("gpu_name") and row["gpu_name"] != gpu_name:
            if elsewhere is not None:
                elsewhere.append(row["gpu_name"])
            continue
        if key and status in DONE_STATUSES and not (retry_failed and status in ("error", "timeout")):
            done[key] = row
    return done


def run_request(spec: SweepSpec, configuration: Configuration, micro_batch: int, search: str,
                grad_accum: int | None = None):
    """The dsx.run request of one trial. Its grad-accum: `grad_accum` when given, else the one --max-global-batch
    derives from the micro-batch, else the configuration's (or the spec's one value)."""
    from dsx.run import RunRequest

    if grad_accum is None:
        grad_accum = global_batch_grad_accum(spec, configuration, micro_batch) or configuration.grad_accum or \
            spec.grad_accum

    overrides = dict(spec.overrides)
    seq_len, vocab_pad = spec.seq_len, spec.vocab_pad
    for key, value in configuration.vary:
        if key == "seq_len":
            seq_len = value
        elif key == "vocab_pad":
            vocab_pad = value
        else:
            overrides[key] = value
    flags = config_flags(dict(zero=configuration.zero, offload=configuration.offload,
                              offload_params=configuration.offload_params, nvme_path=spec.nvme_path,
                              precision=configuration.precision, micro_batch=micro_batch,
                              grad_accum=grad_accum, optimizer=spec.optimizer,
                              lr=spec.lr))
    request = RunRequest(
        model=spec.model, overrides=overrides, seq_len=seq_len, vocab_pad=vocab_pad, config_flags=flags,
        ds_sets=tuple(spec.ds_sets) + axis_sets(configuration), gpus=configuration.gpus, steps=spec.steps,
        warmup=spec.warmup, tf32=spec.tf32,
        compile=configuration.compile, attn=spec.attn, act_ckpt=configuration.act_ckpt, loss=spec.loss,
        loss_tile_tokens=spec.loss_tile_tokens, sequence_parallel=spec.sequence_parallel, results=spec.results,
        timeout_s=spec.trial_timeout_s, memory_cap=spec.memory_cap, sparse_attention=configuration.sparse,
        sparse_sets=tuple(spec.sparse_sets) if configuration.sparse not in (None, "none") else (), python=spec.python,
        sweep={"sweep_id": spec.sweep_id(), "configuration": configuration.as_dict(), "label": configuration.label,
               "search": search},
        pipeline_stages=configuration.pipeline_stages,
        pipeline_partition=spec.pipeline_partition if configuration.pipeline_stages else None,
        data=spec.data, data_dtype=spec.data_dtype, data_seed=spec.data_seed, comm_log=spec.comm_log,
        act_ckpt_offload=spec.act_ckpt_offload and configuration.act_ckpt, tiled_mlp=spec.tiled_mlp,
        kernels=configuration.kernels, fp8=configuration.fp8,
        host_check=spec.prune,  # --no-prune: run what the plan would skip, host memory included
        **spec.nodes,
    )
    request.command = run_command(request)
    return request


def trial_replicas(spec: SweepSpec, configuration: Configuration) -> int:
    """Data-parallel replicas of the configuration's trials (ranks over pipeline stages), from the trial dsx.run
    resolves at micro-batch 1; 1 when dsx refuses it (preflight says why)."""
    if configuration not in spec.replicas_seen:
        from dsx.run import RunRefused, resolve_trial

        try:
            trial = resolve_trial(run_request(spec, configuration, 1, "fixed", grad_accum=1))
            stages = trial.pipeline.stages if trial.pipeline else 1
            spec.replicas_seen[configuration] = max(1, trial.world_size // stages)
        except RunRefused:
            spec.replicas_seen[configuration] = 1
    return spec.replicas_seen[configuration]


def micro_batch_ceiling(spec: SweepSpec, configuration: Configuration) -> int:
    """The largest micro-batch the configuration's search may try: --mb-max, and under --max-global-batch one
    replica's share of it (0 when the cap is below one sequence per replica)."""
    if spec.max_global_batch is None:
        return spec.mb_max
    return min(spec.mb_max, spec.max_global_batch // trial_replicas(spec, configuration))


def cap_filling_micro_batches(spec: SweepSpec, configuration: Configuration) -> list[int] | None:
    """Under --max-global-batch: the micro-batches the auto search tries, those that fill one replica's share of
    the cap best (share // grad-accum for each grad-accum); None without the cap. A micro-batch between two of them
    needs the grad-accum of the larger and trains a smaller global batch (gpt2-xl under a cap of 64: 17 x 3 = 51
    against 16 x 4 = 64), for at most a few percent of tokens/s: on an H100 each such probe cost a compiled OOM."""
    if spec.max_global_batch is None:
        return None
    share, ceiling = spec.max_global_batch // trial_replicas(spec, configuration), \
        micro_batch_ceiling(spec, configuration)
    root = math.isqrt(share)
    # share // g for g up to the root, then every size below (beyond the root consecutive quotients differ by <= 1)
    filling = {share // g for g in range(1, root + 1)} | set(range(1, share // (root + 1) + 1))
    return sorted(mb for mb in filling if 1 <= mb <= ceiling) or None


def global_batch_grad_accum(spec: SweepSpec, configuration: Configuration, micro_batch: int) -> int | None:
    """Under --max-global-batch N: the most micro-batches per step that keep micro-batch x grad-accum x replicas
    within N (at least 1), as the autotuner derives it from max_train_batch_size; None without the cap."""
    if spec.max_global_batch is None:
        return None
    return max(1, spec.max_global_batch // (micro_batch * trial_replicas(spec, configuration)))


def axis_sets(configuration: Configuration) -> tuple[str, ...]:
    """The --ds-set keys of a point's DeepSpeed-config axes: the offload ratio, the ZeRO buckets (the allgather
    bucket at ZeRO 1-2 only: ZeRO-3 gathers through its prefetch bucket)."""
    sets: list[str] = []
    if configuration.offload_ratio is not None:
        sets.append(f"zero_optimization.offload_optimizer.ratio={configuration.offload_ratio}")
    if configuration.bucket_size is not None:
        sets.append(f"zero_optimization.reduce_bucket_size={configuration.bucket_size}")
        if configuration.zero in (1, 2):
            sets.append(f"zero_optimization.allgather_bucket_size={configuration.bucket_size}")
    return tuple(sets)
