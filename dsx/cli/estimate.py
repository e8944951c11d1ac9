"""`dsx estimate`: peak GPU memory, host memory, the largest micro-batch that fits and tokens/s, before any run."""

from __future__ import annotations

import json
import sys

import click

from dsx.cli.options import (SIZE, act_ckpt_option, config_source_options, gpu_kind_options, host_options,
                             kernel_options, long_context_options, model_options, pick_gpu_kind, pipeline_options,
                             sparse_options)
from dsx.fit import nvme_capacity
from dsx.units import GIB, MIB


def nvme_path_of(config: dict) -> str | None:
    """The config's NVMe offload path (optimizer first, then parameters), where its free space is measured."""
    zero = config.get("zero_optimization") or {}
    for key in ("offload_optimizer", "offload_param"):
        block = zero.get(key) or {}
        if block.get("device") == "nvme" and block.get("nvme_path"):
            return str(block["nvme_path"])
    return None


@click.command("estimate")
@model_options
@config_source_options
@click.option("--gpus", type=click.IntRange(min=1), default=1, show_default=True,
              help="GPUs: data-parallel (with --pipeline-stages N: N x data-parallel replicas).")
@pipeline_options
@gpu_kind_options("--gpu", "Calibrated GPU kind the estimate is for (default: the visible GPU's when calibrated, "
                          "else h100-80gb; the error for an unknown one lists them).")
@click.option("--memory-cap", type=SIZE, metavar="SIZE", help="Memory one GPU may use (a smaller GPU).")
@click.option("--attn", type=click.Choice(["eager", "sdpa", "flash"]), default="sdpa", show_default=True,
              help="Attention implementation (what it saves for backward differs: eager keeps the scores).")
@act_ckpt_option("Activation checkpointing (transformers gradient_checkpointing_enable, as dsx run --act-ckpt); "
                 "bare --act-ckpt is on.")
@click.option("--compile", "compile_", is_flag=True, help="DeepSpeed's engine.compile(), as dsx run --compile (its "
                                                          "activation and speed factors: dsx.calibration).")
@long_context_options
@kernel_options
@host_options
@click.option("--largest", is_flag=True,
              help="The largest model of --model's family that fits here (or on --gpu-kind / --host-memory), with the "
                   "configuration dsx would use: the family's published shapes and the steps between them.")
@click.option("--longest", is_flag=True,
              help="The longest sequence --model trains here (multiples of 1,024 tokens), with the plain and the tiled "
                   "loss, and the configuration dsx would use.")
@click.option("--min-tflops", type=click.FloatRange(min=0), metavar="X",
              help="With --largest: the largest model whose best configuration is predicted at least X model TFLOP/s "
                   "per GPU (dsx estimate's speed is rough: bench/estimator/README.md).")
@sparse_options
@click.option("--host-speed", metavar="NS|here",
              help="The host's Python speed in ns a loop iteration (what dsx run records in a row's "
                   "host_cpu.python_loop_ns; 'here': measure this machine): ZeRO-3's hooks scale with it. Default: "
                   "the GPU kind's calibration host.")
@click.option("--json", "as_json", is_flag=True, help="Print the estimate as JSON.")
def command(model, sets, seq_len, vocab_pad, config_path, ds_preset, ds_sets, gpus, pipeline_stages, pipeline_partition,
            gpu_kind, gpu_kind_old, memory_cap, attn, act_ckpt, compile_, loss, loss_tile_tokens, sequence_parallel,
            act_ckpt_offload, tiled_mlp, kernels, fp8, host_memory, nvme_free,
            largest, longest, min_tflops, sparse_attention, sparse_sets, host_speed, link_bandwidth, as_json,
            **config_options):
    """Predict peak GPU memory, host memory, whether it fits, the largest micro-batch and tokens/s.

    Needs no GPU: the model is built on the meta device and its activations are what its own forward saves.
    Constants of the GPU kind are calibrated on measured rows (dsx.calibration.CALIBRATION_ROWS). The host's RAM is
    --host-memory, else this machine's when it has a GPU of the kind planned for, else that kind's calibration host
    (125 GiB for h100-80gb); the output says which.

    \b
    dsx estimate --model gpt2-xl --zero 3 --offload cpu --micro-batch 8
    dsx estimate --model llama-1b --zero 2 --micro-batch 4 --gpus 8 --act-ckpt --json
    dsx estimate --model gpt2-xl --pipeline-stages 2 --gpus 2 --micro-batch 4 --grad-accum 16
    dsx estimate --model llama-7b --zero 3 --offload cpu --act-ckpt --micro-batch 8 --grad-accum 4 \\
        --ds-set zero_optimization.offload_optimizer.ratio=0.7 --host-memory 125GiB
    dsx estimate --model llama-8b --largest --gpu-kind h100-80gb --host-memory 125GiB
    dsx estimate --model llama-1b --seq-len 131072 --set max_position_embeddings=131072 --act-ckpt --loss tiled \\
        --sparse-attention bigbird --sparse-set block=128 --gpus 4 --sequence-parallel 4
    """
    from dsx.estimate import GPUS, EstimateError, Setup, estimate
    from dsx.buckets import fill_buckets
    from dsx.models import ModelError, count_params, parse_overrides, resolve_model_cached
    from dsx.run import RunRefused, RunRequest, config_flags, resolve_config
    from dsx.run.pipeline import pipeline_plan
    from dsx.schema.batch import BatchError, solve_batch

    from dsx.estimate.assumed import assume

    act_ckpt = act_ckpt == "on"  # the word (off|on) as the bool Setup and RunRequest take
    if min_tflops is not None and not largest:
        raise click.UsageError("--min-tflops goes with --largest")
    if link_bandwidth and (largest or longest):
        raise click.UsageError(f"--link-bandwidth goes with one configuration's estimate, not "
                               f"{'--largest' if largest else '--longest'} (which plans one host's GPUs over their "
                               "own links)")
    assumed = assume(pick_gpu_kind(gpu_kind, gpu_kind_old, "--gpu"), host_memory)
    gpu_kind = assumed.gpu_kind
    if longest:
        from dsx.cli.longest import longest_command

        click.echo("\n".join(assumed.lines()), err=True)
        longest_command(model=model, sets=sets, vocab_pad=vocab_pad, gpus=gpus, gpu_kind=gpu_kind,
                        memory_cap=memory_cap, host_memory=assumed.host_memory, nvme_free=nvme_free, attn=attn,
                        as_json=as_json, given={"config": config_path, "preset": ds_preset, "ds_sets": ds_sets,
                                                "pipeline_stages": pipeline_stages, "act_ckpt": act_ckpt,
                                                "compile": compile_, "seq_len": seq_len, "largest": largest,
                                                "loss": loss != "plain" or loss_tile_tokens,
                                                "sequence_parallel": sequence_parallel,
                                                "act_ckpt_offload": act_ckpt_offload, "tiled_mlp": tiled_mlp,
                                                "kernels": kernels != "none", "fp8": fp8 != "none",
                                                "sparse_attention": sparse_attention or sparse_sets,
                                                **config_options})
        return
    if largest:
        from dsx.cli.largest import largest_command

        click.echo("\n".join(assumed.lines()), err=True)  # on stderr: --largest --json stays one JSON document
        largest_command(model=model, sets=sets, seq_len=seq_len, vocab_pad=vocab_pad, gpus=gpus, gpu_kind=gpu_kind,
                        memory_cap=memory_cap, attn=attn, host_memory=assumed.host_memory, nvme_free=nvme_free,
                        min_tflops=min_tflops, as_json=as_json,
                        given={"config": config_path, "preset": ds_preset, "ds_sets": ds_sets,
                               "pipeline_stages": pipeline_stages, "act_ckpt": act_ckpt, "compile": compile_,
                               "act_ckpt_offload": act_ckpt_offload, "tiled_mlp": tiled_mlp,
                               "kernels": kernels != "none", "fp8": fp8 != "none",
                               "sparse_attention": sparse_attention or sparse_sets, **config_options})
        return
    try:
        resolved = resolve_model_cached(model, parse_overrides(sets), seq_len=seq_len, vocab_pad=vocab_pad)
    except ModelError as exc:
        raise click.UsageError(str(exc)) from None
    request = RunRequest(
        model=model, config_path=config_path, preset=ds_preset, ds_sets=tuple(ds_sets), attn=attn, act_ckpt=act_ckpt,
        config_flags=config_flags(config_options), pipeline_stages=pipeline_stages,
        pipeline_partition=pipeline_partition, sequence_parallel=sequence_parallel,
        act_ckpt_offload=act_ckpt_offload, tiled_mlp=tiled_mlp, kernels=kernels, fp8=fp8, loss=loss,
        loss_tile_tokens=loss_tile_tokens)
    try:
        config, source, warnings = resolve_config(request, gpus)
        if source == "flags":  # sized to the model as dsx run writes them
            fill_buckets(config, count_params(resolved), request.ds_sets)
        pipeline = pipeline_plan(request, config, gpus, resolved, warnings)
        if compile_ and pipeline:
            raise RunRefused("--compile is not supported with --pipeline-stages (dsx run refuses it too)")
        from dsx.run.sequence import sequence_parallel_size

        sequence = sequence_parallel_size(request, config, gpus, resolved, pipeline, warnings)
        batch = solve_batch(gpus // (pipeline.stages if pipeline else 1) // (sequence or 1),
                            config.get("train_batch_size"), config.get("train_micro_batch_size_per_gpu"),
                            config.get("gradient_accumulation_steps"))
        from dsx.run.loss import resolve_loss

        loss_tile = resolve_loss(request.loss, request.loss_tile_tokens, resolved, pipeline,
                                 batch.train_micro_batch_size_per_gpu, [])
        from dsx.run.memory_savers import check_memory_savers

        check_memory_savers(request, resolved, pipeline, [])
        from dsx.config_facts import precision_of, zero_stage
        from dsx.run.kernels import kernel_plan, liger_chunk_tokens

        kernel_notes: list[str] = []
        plan = kernel_plan(request, resolved, "cuda", zero_stage(config), pipeline, sequence, kernel_notes,
                           check_installed=False, precision=precision_of(config))
        if plan is not None and plan.fused_loss:  # its logits exist a chunk at a time, as --loss tiled's
            loss_tile = liger_chunk_tokens(resolved.vocab_size, resolved.hidden_size,
                                           batch.train_micro_batch_size_per_gpu * resolved.seq_len)
        warnings += kernel_notes
        sparse_tiles = _sparse_kept_tiles(sparse_attention, sparse_sets, resolved, attn,
                                          batch.train_micro_batch_size_per_gpu, warnings)
    except RunRefused as exc:
        raise click.UsageError(str(exc)) from None
    except (BatchError, TypeError) as exc:
        raise click.UsageError(f"batch sizes: {exc}") from None
    setup = Setup(resolved=resolved, ds_config=config, world_size=gpus,
                  micro_batch=batch.train_micro_batch_size_per_gpu, grad_accum=batch.gradient_accumulation_steps,
                  attn=attn, act_ckpt=act_ckpt, gpu=GPUS[gpu_kind], memory_limit=memory_cap,
                  pipeline_stages=pipeline.stages if pipeline else None,
                  pipeline_partition=pipeline.partition if pipeline else "parameters", compile=compile_,
                  loss_tile_tokens=loss_tile, sequence_parallel=sequence, act_ckpt_offload=act_ckpt_offload,
                  tiled_mlp=tiled_mlp, host_memory=assumed.host_memory, liger=bool(plan and plan.liger),
                  fp8=plan.fp8 if plan else None, sparse_kept_tiles=sparse_tiles,
                  nvme_free=nvme_capacity(nvme_free, nvme_path_of(config)), host_loop_ns=_host_speed(host_speed),
                  link_busbw=link_bandwidth * 1e9 if link_bandwidth else None)
    try:
        result = estimate(setup)
    except EstimateError as exc:
        raise click.UsageError(str(exc)) from None
    result.notes[:0] = warnings
    from dsx.comm import param_facts, predict

    from dsx.estimate.predict import ulysses_bytes

    comm = predict(config, param_facts(resolved), gpus, setup.grad_accum, all_to_all_bytes=ulysses_bytes(setup),
                   checkpointed=setup.act_ckpt)
    if as_json:
        click.echo(json.dumps({"model": resolved.describe(), **result.as_dict(), "assumed": assumed.as_dict(),
                               "comm": comm.as_dict()}, indent=2))
        return
    click.echo(render(result, resolved.name, setup, assumed.lines()))
    click.echo(render_comm(comm, result.params))


def _sparse_kept_tiles(word: str | None, sets: tuple[str, ...], resolved, attn: str, micro_batch: int,
                       notes: list[str]) -> int | None:
    """The tiles a head's --sparse-attention layout keeps on a GPU (dsx run's decision, dsx.sparse.planning.decide),
    or None for dense attention (none, auto predicted slower, no flag)."""
    from dsx.run import RunRefused
    from dsx.sparse.planning import decide, kept_tiles_per_head
    from dsx.sparse.spec import SparseRequestError, refuse_other_attention, resolve_block

    try:
        requested, block = resolve_block(word, sets, None)
        if block is None:
            return None
        refuse_other_attention(attn, requested)
        decision = decide(requested, block, resolved, "cuda", handed_to_deepspeed=False, origin="--sparse-set",
                          micro_batch=micro_batch)
    except SparseRequestError as exc:
        raise RunRefused(str(exc)) from None
    notes += decision.notes
    return kept_tiles_per_head(decision.info, resolved.seq_len)


def _gib(n: float) -> str:
    """A size as the estimate prints it: GiB from 1 GiB, MiB below, KiB below 1 MiB (gpt2-tiny's parts were all
    '0.00 GiB')."""
    if abs(n) >= GIB:
        return f"{n / GIB:.2f} GiB"
    return f"{n / MIB:.2f} MiB" if abs(n) >= MIB else f"{n / 1024:.2f} KiB"


def _seconds(s: float) -> str:
    """Step time: seconds from 1 s, milliseconds below (gpt2-tiny's was '0.000 s')."""
    return f"{s:.3f} s" if s >= 1 else f"{s * 1e3:.3g} ms"


def render(e, model_name: str, setup, assumed: list[str] = ()) -> str:
    from dsx.units import fmt_params

    offload = "" if e.offload == "none" else f", optimizer on {e.offload}"
    offload += "" if e.offload_params == "none" else f", parameters on {e.offload_params}"
    lines = [f"{model_name} ({fmt_params(e.params)} parameters), ZeRO-{e.zero}{offload}, {e.precision}, "
             f"micro-batch {e.micro_batch}{' x ' + str(setup.grad_accum) + ' accumulated' if setup.grad_accum > 1 else ''}"
             f"{', activation checkpointing' if setup.act_ckpt else ''}, {e.world_size} GPU(s) {e.gpu} "
             f"({_gib(e.capacity)} each)",
             *assumed,
             *_pipeline_lines(e),
             f"GPU memory per GPU at the peak ({e.peak_moment}){' of the largest stage' if e.pipeline else ''}:"]
    width = max(len(k) for k in e.breakdown) + 2
    for part, size in e.breakdown.items():
        lines.append(f"  {part:<{width}}{_gib(size):>12}")
    lines += [f"  {'peak allocated':<{width}}{_gib(e.peak_allocated):>12}",
              f"  {'peak reserved':<{width}}{_gib(e.peak_reserved):>12}   (allocator slack x{setup.gpu.fragmentation})",
              f"  {'nvidia-smi':<{width}}{_gib(e.gpu_used):>12}   (+ {_gib(setup.gpu.context_bytes)} CUDA context)"]
    needed = (f"{_gib(e.needed)} (peak allocated + CUDA context + {_gib(setup.gpu.allocator_headroom_bytes)} "
              f"allocator headroom)")
    if e.needed <= e.capacity:
        lines.append(f"GPU memory fits: yes, needs {needed} of {_gib(e.capacity)} (margin {e.margin:.0%})")
    else:
        lines.append(f"GPU memory fits: NO, needs {needed}, has {_gib(e.capacity)}")
    lines.append("largest micro-batch that fits: " + (str(e.max_micro_batch) if e.max_micro_batch else
                                                      "none (even micro-batch 1 does not fit)"))
    lines += resource_lines(e)
    lines.append(f"speed: {_seconds(e.step_time_s)} per step, {e.tokens_per_s:,.0f} tokens/s")
    lines += [f"note: {n}" for n in e.notes]
    return "\n".join(lines)


def resource_lines(e) -> list[str]:
    """Host memory and NVMe (needed, capacity, fit), then the verdict over every resource and the one that binds."""
    from dsx.fit import Resource, shortfall_text

    resources = [Resource(r["name"], r["needed"], r["capacity"], r["detail"]) for r in e.resources]
    lines = []
    for r in resources[1:]:
        if not r.checked:
            lines.append(f"{r.name}: needs {_gib(r.needed)} ({r.detail}); capacity not known, not checked")
        elif r.fits:
            lines.append(f"{r.name} fits: yes, needs {_gib(r.needed)} ({r.detail}) of {_gib(r.capacity)} "
                         f"(margin {r.margin:.0%})")
        else:
            lines.append(f"{r.name} fits: NO, needs {_gib(r.needed)} ({r.detail}), has {_gib(r.capacity)}")
    short = [r for r in resources if not r.fits]
    if short:
        lines.append("fits: NO: " + "; ".join(shortfall_text(r) for r in short))
    else:
        lines.append("fits: yes")
    if e.binding:
        lines.append(f"binds: {e.binding}")
    return lines


def _pipeline_lines(e) -> list[str]:
    """The stages of a --pipeline-stages estimate: layers, parameters, predicted peak allocated each."""
    if not e.pipeline:
        return []
    p = e.pipeline
    lines = [f"pipeline: {p['stages']} stage(s) x {p['data_parallel']} data-parallel, {p['micro_batches']} "
             f"micro-batch(es) per step (ideal bubble {p['bubble_fraction']:.0%}), partition {p['partition']}"]
    for s in p["per_stage"]:
        lines.append(f"  stage {s['stage']}: {len(s['layers'])} layers, {s['params']:,} params, peak allocated "
                     f"{_gib(s['peak_allocated'])}" + ("  <- largest" if s["stage"] == p["largest_stage"] else ""))
    return lines
def render_comm(comm, params: int) -> str:
    """The communication lines: DeepSpeed's volume per optimizer step and rank, its parts, the ZeRO paper's."""
    from dsx.units import format_bytes

    lines = [f"communication per optimizer step and rank: {format_bytes(comm.bytes_per_step)} "
             f"({comm.bytes_per_step / params:.2f} bytes/param; the ZeRO paper's figure: "
             f"{format_bytes(comm.paper_bytes_per_step)}, {comm.paper_bytes_per_step / params:.2f} bytes/param)"]
    width = max((len(k) for k in comm.parts), default=0) + 2
    lines += [f"  {part:<{width}}{format_bytes(size):>12}" for part, size in comm.parts.items()]
    if comm.compressed_bytes_per_step is not None:
        lines.append(f"  {'compressed step':<{width}}{format_bytes(comm.compressed_bytes_per_step):>12}")
    lines += [f"note: {n}" for n in comm.notes]
    lines.append("note: volume as the ZeRO paper counts it (an all-reduce twice its size), as dsx run's comm measures "
                 "it (dsx.comm.predict says what DeepSpeed sends per stage)")
    return "\n".join(lines)


def _host_speed(text: str | None) -> float | None:
    """--host-speed: ns a Python loop iteration, or 'here' (dsx.host.python_loop_ns on this machine); None unset."""
    if text is None:
        return None
    if text == "here":
        from dsx.host import python_loop_ns

        return round(python_loop_ns(), 2)
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value < 1e6):  # also refuses nan and inf
        raise click.UsageError(f"--host-speed: ns a Python loop iteration (e.g. 60) or 'here', got {text!r}")
    return value


if __name__ == "__main__":  # pragma: no cover
    sys.exit(command())

