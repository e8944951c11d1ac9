"""The pipeline part of a run request (`--pipeline-stages`, `--pipeline-partition`, a --config file's or the
`pipeline` preset's stage count): checked and resolved into the rank plan's PipelinePlan before anything starts.

Where the stage count comes from, first found: --pipeline-stages; the dsx config preset (`--preset pipeline`: 2);
a --config file's `pipeline.stages` (a key DeepSpeed never reads, which dsx uses to build the PipelineModule).
A config with a `pipeline` block and no stage count is refused: DeepSpeed takes the count from the module.
"""

from __future__ import annotations

from typing import Any

from dsx.config_facts import zero_stage
from dsx.pipeline import PipelineError, check_layout, check_model, check_partition, config_interval, config_stages
from dsx.rank.protocol import PipelinePlan
from dsx.run.refused import RunRefused


def _asked(request, stages: int) -> str:
    """How the user asked for `stages` stages, for messages: the flag, the preset or the config file."""
    if request.pipeline_stages:
        return f"--pipeline-stages {stages}"
    if request.preset and not request.config_path:
        return f"--preset {request.preset} ({stages} pipeline stages)"
    return f"--config {request.config_path} (pipeline.stages {stages})"


def _check(request, stages: int, world_size: int, zero: int) -> None:
    """The stages divide the ranks and run with this ZeRO stage (dsx.pipeline.check_layout), else RunRefused."""
    try:
        check_layout(stages, world_size, zero, "--hostfile" if request.hostfile else "--gpus", _asked(request, stages))
    except PipelineError as exc:
        raise RunRefused(str(exc)) from None


def pipeline_flags(request, changes: dict[str, Any], world_size: int) -> tuple[tuple[str, Any], ...]:
    """For a config made from flags (dsx.generate.ConfigRequest `changes`, updated in place): the stage count, ZeRO-1
    when no stage was asked for (dsx's default ZeRO-2 does not run with a pipeline), and with --act-ckpt the
    pipeline's activation_checkpoint_interval 1 (every decoder layer). Returns the `--set`s to add."""
    stages = request.pipeline_stages or changes.get("pipeline_stages")
    if not stages:
        return ()
    changes["pipeline_stages"] = stages
    if changes.get("zero") is None:
        changes["zero"] = 1
    _check(request, stages, world_size, changes["zero"])
    return (("pipeline.activation_checkpoint_interval", 1),) if request.act_ckpt else ()


def pipeline_stages(request, config: dict, world_size: int) -> int | None:
    """The stage count of this run (None: no pipeline), checked against the ranks and the config's ZeRO stage."""
    from dsx.presets import PRESETS

    preset = PRESETS.get(request.preset) if request.preset and not request.config_path else None
    stages = request.pipeline_stages or (preset.changes.get("pipeline_stages") if preset else None) \
        or config_stages(config)
    if not stages:
        if isinstance(config.get("pipeline"), dict):
            raise RunRefused("the DeepSpeed config has a pipeline block but no stage count: pass --pipeline-stages N "
                             "(DeepSpeed takes it from the PipelineModule, which dsx builds)")
        if request.pipeline_partition is not None:
            raise RunRefused("--pipeline-partition needs --pipeline-stages N")
        return None
    _check(request, stages, world_size, zero_stage(config))
    return stages


def pipeline_plan(request, config: dict, world_size: int, resolved, notes: list[str]) -> PipelinePlan | None:
    """The rank plan's pipeline: stages, DeepSpeed's partition method, the activation-checkpoint interval (the
    config's when > 0, which DeepSpeed lets override the module's; else 1 with --act-ckpt). Adds to `notes`."""
    stages = pipeline_stages(request, config, world_size)
    if not stages:
        return None
    if request.compile:
        raise RunRefused("--compile with --pipeline-stages: not supported by dsx yet (DeepSpeed compiles each pipeline "
                         "layer on its own, and dsx's layers share per-stage state torch.compile would guard on); "
                         "drop --compile")
    if not request.pipeline_stages and config_stages(config):
        notes.append(f"dsx builds the PipelineModule with the config's pipeline.stages ({stages}), a key DeepSpeed "
                     "itself never reads")
    try:
        partition = check_partition(request.pipeline_partition)
        check_model(resolved, stages, partition)
    except PipelineError as exc:
        raise RunRefused(str(exc)) from None
    return PipelinePlan(stages=stages, partition=partition,
                        activation_checkpoint_interval=config_interval(config) or (1 if request.act_ckpt else 0))


def data_parallel(prepared) -> int:
    """Replicas of the whole model: the world size, or world / stages for a pipeline, / the ranks of a Ulysses
    group (dsx.rank.ulysses: they share one micro-batch)."""
    plan = prepared.rank_plan
    pipe = plan.pipeline if plan is not None else None
    sequence = plan.sequence_parallel if plan is not None else None
    return prepared.world_size // (pipe.stages if pipe else 1) // (sequence or 1)


def pipeline_row(prepared, ranks: list, memory) -> Any:
    """The row's pipeline part (dsx.results.PipelineInfo) from the plan and the ranks' reports; None without one.

    A stage's memory is the max over its ranks of each figure; the largest stage is judged by peak reserved memory
    on GPUs, by peak RSS on CPU ranks, by parameters when no rank measured memory."""
    from dsx.pipeline import bubble_fraction
    from dsx.results import MEMORY_FIELDS, MemoryMax, PipelineInfo, PipelineStage

    plan = prepared.rank_plan.pipeline if prepared.rank_plan is not None else None
    if plan is None:
        return None
    by_rank = {m.rank: m for m in memory.per_rank}
    stages: dict[int, list] = {}
    for report in ranks:
        if report is not None and report.pipeline is not None:
            stages.setdefault(report.pipeline.stage, []).append(report)
    per_stage = []
    for stage, reports in sorted(stages.items()):
        info = reports[0].pipeline
        figures = {k: [getattr(by_rank[r.rank], k) for r in reports if r.rank in by_rank] for k in MEMORY_FIELDS}
        per_stage.append(PipelineStage(
            stage=stage, ranks=sorted(r.rank for r in reports), layers=info.layers,
            layer_range=[info.parts[stage], info.parts[stage + 1]], params=info.params,
            memory=MemoryMax(**{k: max((v for v in values if v is not None), default=None)
                                for k, values in figures.items()})))
    largest, by = None, None
    for key in ("peak_reserved", "host_rss_peak"):
        if per_stage and all(getattr(s.memory, key) is not None for s in per_stage):
            largest, by = max(per_stage, key=lambda s: getattr(s.memory, key)).stage, key
            break
    else:
        if per_stage:
            largest, by = max(per_stage, key=lambda s: s.params or 0).stage, "params"
    complete = len(per_stage) == plan.stages
    tied = {s: stages[s][0].pipeline.tied_params for s in stages}
    fingerprints = [r.pipeline.tied_fingerprints for reports in stages.values() for r in reports
                    if r.pipeline.tied_fingerprints]
    return PipelineInfo(
        stages=plan.stages, data_parallel=data_parallel(prepared), micro_batches=prepared.grad_accum,
        partition=plan.partition, activation_checkpoint_interval=plan.activation_checkpoint_interval,
        bubble_fraction=bubble_fraction(plan.stages, prepared.grad_accum), per_stage=per_stage,
        largest_stage=largest, largest_by=by,
        params_total=sum(s.params for s in per_stage) - sum(v for k, v in tied.items() if k != min(tied))
        if complete and per_stage else None,
        tied_weights_equal=(all(f == fingerprints[0] for f in fingerprints) if fingerprints else None),
    )


LABELS = {"peak_reserved": "peak reserved", "host_rss_peak": "host RSS"}


def summary_lines(info, device: str) -> list[str]:
    """What `dsx run` prints about the pipeline of a row (dsx.results.PipelineInfo)."""
    from dsx.units import format_bytes

    if info is None:
        return []
    key = "peak_reserved" if device == "cuda" else "host_rss_peak"
    lines = [f"  pipeline    {info.stages} stage(s) x {info.data_parallel} data-parallel, {info.micro_batches} "
             f"micro-batch(es) per step (ideal bubble {info.bubble_fraction:.0%}), partition {info.partition}"
             + (f", activation checkpoint every {info.activation_checkpoint_interval} layer(s)"
                if info.activation_checkpoint_interval else "")
             + ("" if info.tied_weights_equal is None else
                "; tied embedding equal on first and last stage" if info.tied_weights_equal else
                "; TIED EMBEDDING COPIES DIFFER")]
    for s in info.per_stage:
        lines.append(f"    stage {s.stage}: layers {s.layer_range[0]}-{s.layer_range[1] - 1} ({len(s.layers)}), "
                     f"{s.params:,} params, {LABELS[key]} {format_bytes(getattr(s.memory, key))}"
                     + ("  <- largest" if s.stage == info.largest_stage else ""))
    return lines
