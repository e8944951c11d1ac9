"""The Setup a result row ran (how `dsx report --vs-estimate` and the calibration scripts judge the estimator), and
the Setup a run trial is about to run (how `dsx sweep` plans and `dsx run` checks the host's memory first)."""

from __future__ import annotations

from dsx.calibration import GPUS, GpuKind
from dsx.config_facts import ulysses_group
from dsx.estimate.states import EstimateError, Setup
from dsx.host import speed_of


def gpu_kind_of(gpu_name: str | None) -> GpuKind | None:
    """The calibrated kind a row's GPU is (exact device name), or None."""
    for kind in GPUS.values():
        if gpu_name == kind.name:
            return kind
    return None


def setup_of_row(row: dict, kind: GpuKind | None = None) -> Setup:
    """The Setup a result row ran (EstimateError when the row's GPU has no kind or the model is unknown)."""
    from dsx.models import ModelError, resolve_model
    from dsx.sparse.planning import kept_tiles_per_head

    kind = kind or gpu_kind_of(row.get("gpu_name"))
    if kind is None:
        raise EstimateError(f"no calibration for {row.get('gpu_name') or row.get('device')}")
    model = row["model"]
    try:
        resolved = resolve_model(model["preset"], model.get("overrides") or {}, seq_len=model["seq_len"],
                                 vocab_pad=model.get("vocab_pad"))
    except ModelError as exc:
        raise EstimateError(str(exc)) from None
    toggles = row.get("toggles") or {}
    pipeline = row.get("pipeline") or {}
    group = ulysses_group(row["ds_config"])  # a Ulysses rank holds 1/group of the sequence
    return Setup(resolved=resolved, ds_config=row["ds_config"], world_size=row["world_size"],
                 micro_batch=row["micro_batch"], grad_accum=row.get("grad_accum", 1),
                 attn=toggles.get("attn", "sdpa"), act_ckpt=bool(toggles.get("act_ckpt")), gpu=kind,
                 memory_limit=row.get("memory_cap"), pipeline_stages=pipeline.get("stages"),
                 pipeline_partition=pipeline.get("partition") or "parameters", compile=bool(toggles.get("compile")),
                 loss_tile_tokens=_loss_tile(row, resolved),
                 act_ckpt_offload=bool(toggles.get("act_ckpt_offload")), tiled_mlp=bool(toggles.get("tiled_mlp")),
                 liger=toggles.get("kernels") == "liger", fp8=toggles.get("fp8"),
                 sequence_parallel=group if group > 1 else None,
                 sparse_kept_tiles=kept_tiles_per_head(row.get("sparse_attention"), resolved.seq_len),
                 comm_log=logger_timed(row), host_loop_ns=_host_loop_ns(row),
                 first_step_only=row.get("steps", 0) + row.get("warmup", 0) == 1)


def _host_loop_ns(row: dict) -> float | None:
    """The host's Python speed the row ran at: the median of its probes (before, during and after the run), or its
    one probe before the launch (older rows); None unmeasured. Rows of 2026-11-29 22:52-23:05 UTC hold two probes and
    the faster as python_loop_ns: the median of every row is the one rule."""
    host = row.get("host_cpu") or {}
    probes = host.get("python_loop_probes")
    return speed_of(probes) if probes else host.get("python_loop_ns")


def logger_timed(row: dict) -> bool:
    """Whether DeepSpeed's comms logger was on in the row's timed steps: it counted them (comm.counted 'timed', or
    unrecorded in rows before the warm-up steps were counted), not the warm-up steps (dsx.rank.comms)."""
    comm = row.get("comm") or {}
    return bool(comm.get("steps")) and comm.get("counted") != "warm-up"


def _loss_tile(row: dict, resolved) -> int | None:
    """The tile the row's loss ran in: --loss tiled's, Liger's fused loss's chunk, or None (whole logits)."""
    toggles = row.get("toggles") or {}
    if toggles.get("liger_fused_loss"):
        from dsx.run.kernels import liger_chunk_tokens

        return liger_chunk_tokens(resolved.vocab_size, resolved.hidden_size, row["micro_batch"] * resolved.seq_len)
    return toggles.get("loss_tile_tokens") if toggles.get("loss") == "tiled" else None


def setup_of_trial(trial, kind: GpuKind, micro_batch: int | None = None, grad_accum: int | None = None,
                   **chosen) -> Setup:
    """The Setup of a resolved run trial (dsx.run.request.Trial) on a GPU of `kind`, at its own micro-batch and
    grad-accum unless given; `chosen` sets Setup fields the request does not carry (host_memory, nvme_free,
    activation_margin...)."""
    from dsx.comm.logger import logger_in_timed_steps
    from dsx.run.kernels import loss_tile_of
    from dsx.sparse.planning import kept_tiles_per_head

    request, kernels = trial.request, trial.kernels
    return Setup(resolved=trial.resolved, ds_config=trial.ds_config, world_size=trial.world_size,
                 micro_batch=trial.micro_batch if micro_batch is None else micro_batch,
                 grad_accum=trial.grad_accum if grad_accum is None else grad_accum, attn=request.attn,
                 act_ckpt=request.act_ckpt, gpu=kind, memory_limit=request.memory_cap,
                 pipeline_stages=trial.pipeline.stages if trial.pipeline else None,
                 pipeline_partition=trial.pipeline.partition if trial.pipeline else "parameters",
                 compile=request.compile, loss_tile_tokens=loss_tile_of(trial),
                 sequence_parallel=trial.sequence_parallel, act_ckpt_offload=request.act_ckpt_offload,
                 tiled_mlp=request.tiled_mlp, liger=bool(kernels and kernels.liger),
                 fp8=kernels.fp8 if kernels else None,
                 sparse_kept_tiles=kept_tiles_per_head(trial.sparse and trial.sparse.info, trial.resolved.seq_len),
                 comm_log=logger_in_timed_steps(request.comm_log, trial.ds_config, request.warmup),
                 ranks_per_host=max(map(len, trial.layout.selection.values())) if trial.layout else None, **chosen)
