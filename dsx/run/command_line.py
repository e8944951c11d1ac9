"""The `dsx run` command line that repeats a request on its own: what a sweep's trial, a parity check's reference
and `dsx report --best` print as `reproduce:`."""

from __future__ import annotations

import json

from dsx.units import size_arg


def run_command(request) -> list[str]:
    """The `dsx run` argv that repeats `request` (a dsx.run.RunRequest)."""
    from dsx.run.nodes import NODE_KEYS

    argv = ["dsx", "run", "--model", request.model]
    if request.config_path is not None:
        argv += ["--config", request.config_path]
    if request.preset is not None:
        argv += ["--preset", request.preset]
    for key, value in request.overrides.items():
        argv += ["--set", f"{key}={json.dumps(value)}"]
    if request.seq_len is not None:
        argv += ["--seq-len", str(request.seq_len)]
    if request.vocab_pad is not None:
        argv += ["--vocab-pad", str(request.vocab_pad)]
    for key, value in request.config_flags.items():
        if value is not None:
            argv += ["--" + key.replace("_", "-"), str(value)]
    for item in request.ds_sets:
        argv += ["--ds-set", item]
    if request.gpus is not None:
        argv += ["--gpus", str(request.gpus)]
    if request.pipeline_stages is not None:
        argv += ["--pipeline-stages", str(request.pipeline_stages)]
    if request.sequence_parallel is not None:
        argv += ["--sequence-parallel", str(request.sequence_parallel)]
    if request.pipeline_partition is not None:
        argv += ["--pipeline-partition", request.pipeline_partition]
    argv += ["--steps", str(request.steps), "--warmup", str(request.warmup)]
    for flag, on in (("--tf32", request.tf32), ("--compile", request.compile), ("--act-ckpt", request.act_ckpt)):
        if on:
            argv.append(flag)
    if request.attn != "sdpa":
        argv += ["--attn", request.attn]
    if request.loss != "plain":
        argv += ["--loss", request.loss]
    if request.loss_tile_tokens is not None:
        argv += ["--loss-tile-tokens", str(request.loss_tile_tokens)]
    for flag, on in (("--act-ckpt-offload", request.act_ckpt_offload), ("--tiled-mlp", request.tiled_mlp)):
        if on:
            argv.append(flag)
    if request.kernels not in (None, "none"):
        argv += ["--kernels", request.kernels]
    if request.fp8 not in (None, "none"):
        argv += ["--fp8", request.fp8]
    if request.sparse_attention is not None:
        argv += ["--sparse-attention", request.sparse_attention]
    for item in request.sparse_sets:
        argv += ["--sparse-set", item]
    if request.data is not None:
        argv += ["--data", request.data]
    if request.data_dtype is not None:
        argv += ["--data-dtype", request.data_dtype]
    if request.data_seed is not None:
        argv += ["--data-seed", str(request.data_seed)]
    if request.memory_cap is not None:
        argv += ["--memory-cap", size_arg(request.memory_cap)]
    if request.hostfile:
        for key in NODE_KEYS:
            value = getattr(request, key)
            if value is not None and not (key == "launcher" and value == "pdsh"):
                argv += ["--" + key.replace("_", "-"), str(value)]
    if request.python:
        argv += ["--python", request.python]
    if not request.comm_log:
        argv.append("--no-comm-log")
    if not request.host_check:
        argv.append("--no-host-check")
    argv += ["--results", request.results]
    return argv
