"""One trial of a sweep: the dsx.run request for a configuration at a micro-batch, the `dsx run` command line
that repeats it, and which trials the results file already holds (the rows that make re-running a resume).
"""

from __future__ import annotations

import json
from pathlib import Path

from dsx.config_facts import config_flags
from dsx.run.command_line import run_command
from dsx.results import read_rows
from dsx.sweep.grid import Configuration, SweepSpec

DONE_STATUSES = ("ok", "oom", "error", "timeout")
"""Outcomes a re-run would most likely repeat: they count as done (errors and timeouts too, unless --retry-failed)."""


def done_rows(results: Path, retry_failed: bool) -> dict[str, dict]:
    """trial_key -> the latest row for it that counts as done."""
    done: dict[str, dict] = {}
    for row in read_rows(results):
        key, status = row.get("trial_key"), row.get("status")
        if key and status in DONE_STATUSES and not (retry_failed and status in ("error", "timeout")):
            done[key] = row
    return done


def run_request(spec: SweepSpec, configuration: Configuration, micro_batch: int, search: str):
    from dsx.run import RunRequest

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
                              grad_accum=configuration.grad_accum or spec.grad_accum, optimizer=spec.optimizer,
                              lr=spec.lr))
    request = RunRequest(
        model=spec.model, overrides=overrides, seq_len=seq_len, vocab_pad=vocab_pad, config_flags=flags,
        ds_sets=tuple(spec.ds_sets) + axis_sets(configuration), gpus=configuration.gpus, steps=spec.steps,
        warmup=spec.warmup, tf32=spec.tf32,
        compile=configuration.compile, attn=spec.attn, act_ckpt=configuration.act_ckpt, results=spec.results,
        timeout_s=spec.trial_timeout_s, memory_cap=spec.memory_cap, sparse_attention=configuration.sparse,
        sparse_sets=tuple(spec.sparse_sets) if configuration.sparse not in (None, "none") else (), python=spec.python,
        sweep={"sweep_id": spec.sweep_id(), "configuration": configuration.as_dict(), "label": configuration.label,
               "search": search},
        pipeline_stages=configuration.pipeline_stages,
        pipeline_partition=spec.pipeline_partition if configuration.pipeline_stages else None,
        data=spec.data, data_dtype=spec.data_dtype, data_seed=spec.data_seed,
        **spec.nodes,
    )
    request.command = run_command(request)
    return request


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
