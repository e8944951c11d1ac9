"""Pipeline stages in the estimate (`dsx estimate --pipeline-stages N`): each stage's memory and the step's
bubble-aware speed.

A stage s of p holds its layers' parameters (DeepSpeed's partition, dsx.pipeline.stage_layouts; a tied embedding on
the first and the last stage) with the ZeRO layout of dsx.estimate.states.model_states over the data-parallel
replicas, and the activations of the micro-batches in flight in the 1F1B schedule (p - s, at most the step's m): its
share of the layers' activations (its decoder layers / all), the embedding/head/loss part on the last stage.
Send/receive buffers (one hidden state per micro-batch) are left out. Speed: the slowest stage sets the pace,
(m + p - 1) of its micro-batch times per step (the bubble), its share of the model's FLOPs being its decoder layers'
(+ the LM head on the last stage); the fixed per-parameter time is the largest stage's. Transfers between stages are
not counted.
"""

from __future__ import annotations

from typing import Any

from dsx.config_facts import precision_of
from dsx.estimate.states import (Setup, activation_bytes, compute_seconds, data_parallel, model_states,
                                 optimizer_state_bytes, overflow_check_seconds, step_tensor_seconds,
                                 zero_layout)


def _layouts(setup: Setup) -> list:
    from dsx.pipeline import stage_layouts

    return stage_layouts(setup.resolved, setup.pipeline_stages, setup.pipeline_partition)


def stage_peaks(setup: Setup, micro_batch: int) -> list[tuple[int, str, dict[str, int], Any]]:
    """(peak allocated, moment, breakdown, layout) of every stage."""
    from dsx.pipeline import in_flight

    config = setup.ds_config
    stage, offload, offload_params, bucket = zero_layout(config)
    precision = precision_of(config)
    acts = activation_bytes(setup, precision, micro_batch)
    out = []
    for layout in _layouts(setup):
        states = model_states(params=layout.params, world=data_parallel(setup), stage=stage, precision=precision,
                              optimizer_bytes=optimizer_state_bytes(config), offload=offload,
                              offload_params=offload_params, bucket=bucket, grad_accum=setup.grad_accum)
        held = in_flight(layout.stage, setup.pipeline_stages, setup.grad_accum)
        share = layout.blocks / setup.resolved.num_layers
        forward = dict(states["forward"])
        for part, size in acts.items():
            if part in ("layer activations", "checkpointed layer inputs"):
                forward[part] = int(size * share) * held
            elif part == "embeddings, head, loss" and layout.last:
                forward[part] = size * held
            elif (part == "loss gradients" and layout.last) or (part == "recomputed layer" and layout.blocks):
                forward[part] = size
        step = states["step"]
        if sum(forward.values()) >= sum(step.values()):
            out.append((sum(forward.values()), "forward/backward", forward, layout))
        else:
            out.append((sum(step.values()), "optimizer step", step, layout))
    return out


def _stage_flop_shares(setup: Setup) -> list[float]:
    """Each stage's share of a micro-batch's model FLOPs: its decoder layers (+ the LM head on the last stage)."""
    from dsx.flops import model_flops_per_token

    total = model_flops_per_token(setup.resolved)
    head = 6.0 * setup.resolved.vocab_size * setup.resolved.embedding_size
    per_layer = (total - head) / setup.resolved.num_layers
    return [(layout.blocks * per_layer + (head if layout.last else 0.0)) / total for layout in _layouts(setup)]


def pipeline_step_time(setup: Setup, micro_batch: int) -> float:
    stage, offload, _, _ = zero_layout(setup.ds_config)
    gpu, m, p = setup.gpu, setup.grad_accum, setup.pipeline_stages
    largest = max(layout.params for layout in _layouts(setup))
    one_micro = compute_seconds(setup, micro_batch, 1)
    seconds = (m + p - 1) * max(_stage_flop_shares(setup)) * one_micro
    seconds += gpu.fixed_s_per_param * largest / data_parallel(setup)
    seconds += overflow_check_seconds(setup) + step_tensor_seconds(setup)
    if offload != "none":
        seconds += gpu.cpu_step_s_per_param[stage] * largest / data_parallel(setup)
    return seconds


def pipeline_summary(setup: Setup) -> dict[str, Any]:
    from dsx.pipeline import bubble_fraction

    stages = stage_peaks(setup, setup.micro_batch)
    largest = max(stages, key=lambda s: s[0])[3].stage
    return {"stages": setup.pipeline_stages, "data_parallel": data_parallel(setup), "micro_batches": setup.grad_accum,
            "partition": setup.pipeline_partition,
            "bubble_fraction": bubble_fraction(setup.pipeline_stages, setup.grad_accum), "largest_stage": largest,
            "per_stage": [{"stage": layout.stage, "layers": list(layout.layers), "params": layout.params,
                           "peak_allocated": peak} for peak, _, _, layout in stages]}
