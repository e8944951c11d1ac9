"""The Setup a result row ran: how `dsx report --vs-estimate` and the calibration scripts judge the estimator."""

from __future__ import annotations

from dsx.calibration import GPUS, GpuKind
from dsx.estimate.states import EstimateError, Setup


def gpu_kind_of(gpu_name: str | None) -> GpuKind | None:
    """The calibrated kind a row's GPU is (exact device name), or None."""
    for kind in GPUS.values():
        if gpu_name == kind.name:
            return kind
    return None


SAME_CHIP = {"NVIDIA H200": "h100-80gb"}
"""GPUs without a calibration of their own that share a calibrated kind's chip: the H200 SXM is the H100 SXM's GH100
compute with 141 GB of HBM3e (dsx.gpus). Their rows are judged with that kind's constants and their own memory."""


def stand_in_kind(row: dict) -> GpuKind | None:
    """For a row on a SAME_CHIP GPU: the calibrated kind of its chip with the row's own memory capacity; else None."""
    from dataclasses import replace

    key = SAME_CHIP.get(row.get("gpu_name") or "")
    capacity = (row.get("memory") or {}).get("capacity")
    if key is None or key not in GPUS or not capacity:
        return None
    return replace(GPUS[key], name=row["gpu_name"], total_bytes=capacity,
                   source=f"{GPUS[key].name}'s constants (the same chip) with the {row['gpu_name']}'s memory")


def setup_of_row(row: dict, kind: GpuKind | None = None) -> Setup:
    """The Setup a result row ran (EstimateError when the row's GPU has no calibration or the model is unknown); a
    GPU of a calibrated kind's chip (SAME_CHIP) is judged with that kind's constants."""
    from dsx.models import ModelError, resolve_model

    kind = kind or gpu_kind_of(row.get("gpu_name")) or stand_in_kind(row)
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
    return Setup(resolved=resolved, ds_config=row["ds_config"], world_size=row["world_size"],
                 micro_batch=row["micro_batch"], grad_accum=row.get("grad_accum", 1),
                 attn=toggles.get("attn", "sdpa"), act_ckpt=bool(toggles.get("act_ckpt")), gpu=kind,
                 memory_limit=row.get("memory_cap"), pipeline_stages=pipeline.get("stages"),
                 pipeline_partition=pipeline.get("partition") or "parameters", compile=bool(toggles.get("compile")),
                 loss_tile_tokens=_loss_tile(row, resolved),
                 act_ckpt_offload=bool(toggles.get("act_ckpt_offload")), tiled_mlp=bool(toggles.get("tiled_mlp")))


def _loss_tile(row: dict, resolved) -> int | None:
    """The tile the row's loss ran in: --loss tiled's, Liger's fused loss's chunk, or None (whole logits)."""
    toggles = row.get("toggles") or {}
    if toggles.get("liger_fused_loss"):
        from dsx.run.kernels import liger_chunk_tokens

        return liger_chunk_tokens(resolved.vocab_size, resolved.hidden_size, row["micro_batch"] * resolved.seq_len)
    return toggles.get("loss_tile_tokens") if toggles.get("loss") == "tiled" else None
