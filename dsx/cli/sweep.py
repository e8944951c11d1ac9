"""`dsx sweep`: every configuration of the grid, each trial its own launched `dsx run`; resumable."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from dsx.cli.lane_options import comm_log_option, python_option
from dsx.cli.options import (FINITE_FLOAT, SIZE, data_options, gpu_kind_options, host_options, long_context_options,
                             node_options, pick_gpu_kind)
from dsx.cli.sweep_axes import (_act_ckpt, _booleans, _buckets, _choices, _ints, _one_or_list, _ratios, _sparse_words,
                                _stages, _vary, _words)

SEARCH_AXES = ("zero_", "offload", "offload_params", "offload_ratio", "act_ckpt", "compile_", "grad_accum",
               "pipeline_stages", "sparse_attention", "vary", "bucket_size")
"""The options whose absence makes `dsx sweep` run the default search (dsx.sweep.space) instead of their grid."""


LOGGER_NOTE = ("note: with fewer than 2 warm-up steps DeepSpeed's comms logger counts each trial's timed steps and "
               "synchronises the device after every collective inside them: on several GPUs it slows ZeRO-3 trials "
               "most (on 2 H200s gpt2-xl's ZeRO-3 step 4.1x, GPT-2 124M's 2.1x, its ZeRO-1 step 1.05x) and skews "
               "the ranking; --warmup 2 counts a warm-up step instead, --no-comm-log counts nothing")
"""Why a multi-GPU sweep with fewer than two warm-up steps ranks trials slowed by the logger (dsx.rank.comms;
bench/multigpu/measured.md, comm2; dsx.calibration's COMM_LOGGER_*)."""


def _spans_ranks(spec, device: str, visible: int) -> bool:
    """Whether some trial runs on several ranks: on several GPUs (every visible one when --gpus is not given) or
    nodes."""
    ranks = [g if g is not None else (visible if device == "cuda" else 1) for g in spec.gpus]
    return bool(spec.nodes) or any(r > 1 for r in ranks)


@click.command("sweep")
@click.option("--model", metavar="PRESET", help="Model preset (dsx models); default gpt2-tiny on CPU, gpt2 on GPUs.")
@click.option("--zero", "zero_", default="1,2,3", show_default=True, metavar="LIST", help="ZeRO stages, e.g. 1,2,3.")
@click.option("--offload", default="none", show_default=True, metavar="LIST",
              help="Optimizer offload: none,cpu,nvme (ZeRO 1-3).")
@click.option("--offload-params", default="none", show_default=True, metavar="LIST",
              help="Parameter offload: none,cpu,nvme (ZeRO-3 only).")
@click.option("--offload-ratio", "offload_ratio", metavar="LIST",
              help="Share of the optimizer offloaded with --offload cpu (zero_optimization.offload_optimizer.ratio), "
                   "e.g. 0.5,0.7,1: below 1 at ZeRO-3 only; --offload defaults to cpu when this is given.")
@click.option("--bucket-size", "bucket_size", metavar="LIST",
              help="ZeRO bucket sizes in elements (reduce_bucket_size; allgather_bucket_size too at ZeRO 1-2), e.g. "
                   "auto,1e7,5e8: auto is min(5e8, the model's parameters), what dsx writes (bench/buckets).")
@click.option("--precision", default="bf16", show_default=True, metavar="LIST", help="bf16,fp16,fp32,bf16-autocast.")
@click.option("--act-ckpt", is_flag=False, flag_value="on", default="off", show_default=True, metavar="LIST",
              help="Activation checkpointing, as dsx run --act-ckpt: off,on (bare: on).")
@click.option("--compile", "compile_", default="off", show_default=True, metavar="LIST",
              help="DeepSpeed's engine.compile(): off,on.")
@click.option("--gpus", default=None, metavar="LIST", help="GPU counts, e.g. 1,2 (default all visible; CPU: 1 rank).")
@click.option("--micro-batch", default="auto", show_default=True, metavar="auto|LIST",
              help="auto: the largest micro-batch that fits (grow x2, then bisect the OOM boundary); or e.g. 4,8,16.")
@click.option("--mb-start", type=click.IntRange(min=1), default=1, show_default=True,
              help="auto: first micro-batch tried.")
@click.option("--mb-max", type=click.IntRange(min=1), help="auto: largest micro-batch tried (default 1024 on GPUs, "
                                                            "8 on CPU ranks).")
@click.option("--mb-tolerance", type=click.FloatRange(min=0, max=1), default=0.0, show_default=True,
              help="auto: stop bisecting when the gap to the first OOM is within this fraction of the fit (0: exact).")
@click.option("--mb-flat", type=click.FloatRange(min=0, max=1), default=0.01, show_default=True,
              help="auto: stop once the micro-batches left below the first OOM could add less than this fraction of "
                   "tokens/s, judged from the last two that fit (0: search to the exact boundary).")
@click.option("--vary", multiple=True, metavar="KEY=V1,V2",
              help="Model shape to vary, e.g. --vary n_layer=12,24 --vary seq_len=256,512 (every combination).")
@click.option("--one-at-a-time", is_flag=True,
              help="--vary one key at a time from the preset's shape (for a parameter-effects table).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Model override for every trial.")
@click.option("--seq-len", type=click.IntRange(min=1), help="Sequence length (default: the preset's).")
@click.option("--vocab-pad", type=click.IntRange(min=1), help="Pad the vocabulary to a multiple of N.")
@click.option("--grad-accum", default="1", show_default=True, metavar="LIST",
              help="Gradient accumulation steps; several (e.g. 1,4,16) are an axis: with --pipeline-stages, the "
                   "pipeline's micro-batches per step.")
@click.option("--max-global-batch", type=click.IntRange(min=1), metavar="N",
              help="Sequences per optimizer step over all replicas that no trial exceeds (train_batch_size; the "
                   "autotuner's max_train_batch_size): each trial accumulates N // (micro-batch x replicas) "
                   "micro-batches; the auto search tries only the micro-batches that fill N best "
                   "(N / replicas // grad-accum).")
@click.option("--pipeline-stages", "pipeline_stages", metavar="LIST",
              help="Pipeline stages axis, e.g. 1,2 or none,2 (none: no pipeline; as dsx run --pipeline-stages).")
@click.option("--pipeline-partition", metavar="parameters|uniform|type:REGEX",
              help="How DeepSpeed splits the layers of the pipelined trials (default parameters).")
@click.option("--nvme-path", help="Directory on a local NVMe drive (NVMe offload).")
@click.option("--optimizer", help="Optimizer type (default AdamW).")
@click.option("--lr", type=FINITE_FLOAT, help="Learning rate (default 1e-4).")
@click.option("--ds-set", "ds_sets", multiple=True, metavar="KEY=VALUE", help="DeepSpeed key for every trial.")
@click.option("--attn", type=click.Choice(["eager", "sdpa", "flash"]), default="sdpa", show_default=True,
              help="Attention implementation of every trial (flash: flash_attn on CUDA).")
@click.option("--tf32", is_flag=True, help="Allow TF32 matmuls.")
@long_context_options
@click.option("--kernels", "kernels_axis", metavar="LIST",
              help="Kernel axis, as dsx run --kernels: none,liger (with no other axis, the default search runs each "
                   "point with each); a best row with liger or fp8 is checked with dsx check first, --check or not.")
@click.option("--fp8", "fp8_axis", metavar="LIST",
              help="Float8 axis, as dsx run --fp8: none,tensorwise,rowwise (ZeRO 0-2 points only in the default "
                   "search).")
@click.option("--sparse-attention", "sparse_attention", metavar="LIST",
              help="Block-sparse attention axis, as dsx run --sparse-attention: e.g. none,bigbird,fixed (none: dense "
                   "attention); with --vary seq_len=... for sequence length against speed and memory.")
@click.option("--sparse-set", "sparse_sets", multiple=True, metavar="KEY=VALUE",
              help="A sparse_attention block key for every sparse trial (dsx run --sparse-set).")
@node_options
@data_options
@click.option("--check", "check", is_flag=True,
              help="Before calling a configuration best, check that it trains the same model as plain data "
                   "parallel (dsx check, on its row's losses: two reference runs); one that differs is passed over "
                   "for the next.")
@click.option("--steps", type=click.IntRange(min=1), default=5, show_default=True, help="Timed steps per trial.")
@click.option("--warmup", type=click.IntRange(min=0), default=2, show_default=True, help="Untimed steps first.")
@click.option("--memory-cap", type=SIZE, metavar="SIZE", help="Memory one rank may use (dsx run --memory-cap).")
@click.option("--trial-timeout", type=click.FloatRange(min=0), default=1800, show_default=True,
              help="Seconds before a trial is killed (its row says timeout); 0: never.")
@click.option("--results", default="results/runs.jsonl", show_default=True, type=click.Path(dir_okay=False),
              help="JSON-lines results file: rows are appended; it is also the sweep's state (re-run to resume).")
@click.option("--retry-failed", is_flag=True, help="Re-run trials whose row is error or timeout (ok/oom stay done).")
@click.option("--no-prune", is_flag=True,
              help="Run every configuration and micro-batch, in order, even those dsx estimate predicts not to fit "
                   "(by default, on a calibrated GPU, they are skipped and the search starts at the predicted largest "
                   "micro-batch, likely fastest configurations first).")
@click.option("--top", type=click.IntRange(min=1), metavar="N",
              help="With pruning: run only the N configurations predicted fastest (of those kept), e.g. --top 1 for "
                   "the predicted best.")
@click.option("--keep-within", type=click.FloatRange(min=0, max=1), default=0.1, show_default=True,
              metavar="FRACTION", help="With pruning: skip configurations predicted slower than the predicted "
                                       "fastest by more than this fraction (1 keeps all that fit).")
@gpu_kind_options("--estimate-gpu", "Calibrated GPU kind the estimates are for (default: the visible GPU's, when "
                                    "calibrated; as dsx estimate --gpu-kind).")
@host_options
@click.option("--dry-run", is_flag=True, help="List the configurations in the order they would run (with dsx "
                                             "estimate's plan on a calibrated GPU) and exit.")
@click.option("--inject", multiple=True, hidden=True, metavar="N=SPEC", help="Tests: --inject-failure for trial N.")
@python_option
@comm_log_option
def command(model, zero_, offload, offload_params, offload_ratio, bucket_size, precision, act_ckpt, compile_, gpus, micro_batch,
            mb_start, mb_max, mb_tolerance, mb_flat, vary, one_at_a_time, sets, seq_len, vocab_pad, grad_accum,
            max_global_batch, pipeline_stages, pipeline_partition, nvme_path, optimizer, lr, ds_sets, attn, tf32,
            loss, loss_tile_tokens, sequence_parallel, act_ckpt_offload, tiled_mlp, kernels_axis, fp8_axis,
            sparse_attention,
            sparse_sets,
            data, data_dtype, data_seed, check, steps, warmup, memory_cap, trial_timeout, results, retry_failed,
            no_prune, top, keep_within, gpu_kind, gpu_kind_old, host_memory, nvme_free, link_bandwidth, dry_run, inject,
            python,
            comm_log, **nodes):
    """Run a grid of configurations, one launched `dsx run` per trial, and find the largest micro-batch that fits.

    With no axis given (--zero, --offload, --offload-ratio, --act-ckpt, --compile, --grad-accum, ...) and a
    calibrated GPU (visible, or --gpu-kind), it searches ZeRO stage x offload (none, partial ratios, full) x
    checkpointing x compile at the grad-accum and micro-batch dsx estimate picks, skipping what is predicted not to
    fit the GPU, the host's memory or the NVMe path and what is predicted much slower; the model, precision,
    optimizer and every --set/--ds-set stay as given. It ends with the best configuration's DeepSpeed JSON and
    its `dsx run` command.

    An OOM, a crash or a hung rank ends only its trial (its row says what happened). The results file is the
    state: run the same command again to resume - trials that already have a row are not run again. Ctrl-C
    stops the running trial's processes and exits; `dsx report RESULTS` shows what was found.

    \b
    dsx sweep --model llama-7b
    dsx sweep --zero 3 --offload cpu
    dsx sweep --model gpt2-xl --zero 1,2,3 --offload none,cpu --act-ckpt off,on --micro-batch auto
    dsx sweep --model bert-base --zero 2 --micro-batch 32 --one-at-a-time --vary num_hidden_layers=6 \\
        --vary hidden_size=384
    dsx sweep --model gpt2-xl --zero 1 --gpus 2 --pipeline-stages none,2 --grad-accum 1,4,16 --micro-batch auto
    dsx sweep --model llama-7b --zero 3 --offload-ratio 0.5,0.7,1 --act-ckpt on --grad-accum 4
    """
    from dsx.models import MODELS, ModelError, parse_overrides, resolve_model
    from dsx.sweep import AUTO, OFFLOAD_CHOICES, PRECISION_CHOICES, SweepError, SweepSpec, default_model, sweep_configurations

    try:
        overrides = parse_overrides(sets)
        if model is not None and model not in MODELS:  # refused before the banner, which names the model
            resolve_model(model)
    except ModelError as exc:
        raise click.UsageError(str(exc)) from None
    injections = {}
    for item in inject:
        number, _, spec_text = item.partition("=")
        injections[int(number)] = spec_text
    if micro_batch.strip().lower() == AUTO:
        micro_batches = AUTO
    else:
        micro_batches = _ints(micro_batch, "--micro-batch", 1)

    estimate_gpu = pick_gpu_kind(gpu_kind, gpu_kind_old, "--estimate-gpu")
    from dsx.host import detect_device

    device, visible = detect_device()
    ratios = _ratios(offload_ratio)
    ctx = click.get_current_context()
    if offload_ratio is not None:
        if ctx.get_parameter_source("offload") is click.core.ParameterSource.DEFAULT:
            offload = "cpu"
        elif "cpu" not in _choices(offload, "--offload", OFFLOAD_CHOICES):
            raise click.UsageError(f"--offload-ratio applies to CPU optimizer offload: add cpu to --offload {offload}")
    spec = SweepSpec(
        model=model or default_model(device), zero=_ints(zero_, "--zero", 0, 3),
        offload=_choices(offload, "--offload", OFFLOAD_CHOICES),
        offload_params=_choices(offload_params, "--offload-params", OFFLOAD_CHOICES),
        precision=_choices(precision, "--precision", PRECISION_CHOICES), act_ckpt=_act_ckpt(act_ckpt),
        compile=_booleans(compile_, "--compile"), gpus=_ints(gpus, "--gpus", 1) if gpus else [None],
        vary=_vary(vary), one_at_a_time=one_at_a_time, micro_batch=micro_batches, mb_start=mb_start,
        mb_max=mb_max or (1024 if device == "cuda" else 8), mb_tolerance=mb_tolerance,
        mb_flat=mb_flat, grad_accum=_one_or_list(_ints(grad_accum, "--grad-accum", 1)),
        pipeline_stages=_stages(pipeline_stages), pipeline_partition=pipeline_partition,
        steps=steps, warmup=warmup, overrides=overrides, seq_len=seq_len, vocab_pad=vocab_pad, nvme_path=nvme_path,
        optimizer=optimizer, lr=lr, ds_sets=tuple(ds_sets), attn=attn, tf32=tf32, memory_cap=memory_cap,
        trial_timeout_s=trial_timeout or None, results=results, retry_failed=retry_failed, inject=injections,
        prune=not no_prune, top=top, keep_within=keep_within, estimate_gpu=estimate_gpu, python=python,
        nodes={key: value for key, value in nodes.items()
               if value is not None and not (key == "launcher" and value == "pdsh")},
        sparse_attention=_sparse_words(sparse_attention) if sparse_attention else [None],
        sparse_sets=tuple(sparse_sets), offload_ratio=ratios, host_memory=host_memory, nvme_free=nvme_free,
        link_busbw=link_bandwidth * 1e9 if link_bandwidth else None,
        bucket_size=_buckets(bucket_size), data=data, data_dtype=data_dtype, data_seed=data_seed,
        max_global_batch=max_global_batch, loss=loss, loss_tile_tokens=loss_tile_tokens,
        sequence_parallel=sequence_parallel, comm_log=comm_log, act_ckpt_offload=act_ckpt_offload,
        tiled_mlp=tiled_mlp, kernels=_words(kernels_axis, "--kernels", ("liger",)),
        fp8=_words(fp8_axis, "--fp8", ("tensorwise", "rowwise")),
    )
    if act_ckpt_offload and True not in spec.act_ckpt and spec.search == "grid" and \
            ctx.get_parameter_source("act_ckpt") is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("--act-ckpt-offload keeps the inputs activation checkpointing saves in host memory: "
                               "add on to --act-ckpt")
    grad_accum_given = ctx.get_parameter_source("grad_accum") is not click.core.ParameterSource.DEFAULT
    if max_global_batch is not None and grad_accum_given:
        raise click.UsageError(f"--max-global-batch {max_global_batch} derives each trial's grad-accum from its "
                               f"micro-batch: drop --grad-accum {grad_accum}")
    if python:  # a bad interpreter is refused before the sweep announces anything
        from dsx.run.refused import RunRefused
        from dsx.run.request import resolve_lane

        try:
            resolve_lane(python)
        except RunRefused as exc:
            raise click.UsageError(str(exc)) from None
    spans_ranks = _spans_ranks(spec, device, visible)
    search_note = _default_search(spec, ctx)
    if one_at_a_time and not spec.vary:
        raise click.UsageError("--one-at-a-time needs at least one --vary KEY=V1,V2")
    if device == "cuda" and any(g is not None and g > visible for g in spec.gpus):
        raise click.UsageError(f"--gpus {gpus}: only {visible} GPU(s) are visible")
    _refuse_prune_options(spec, ctx)
    from dsx.results import read_rows
    from dsx.safe_io import UnreadableFile, check_appendable

    try:  # the sweep's state: a FIFO or a device would hang it, a damaged file fail it later
        check_appendable(results)
        read_rows(results)
    except UnreadableFile as exc:
        raise click.UsageError(f"--results {exc}") from None
    configurations = sweep_configurations(spec)
    where = f"{visible} GPU(s)" if device == "cuda" else "CPU ranks (no GPU)"
    mb_text = (f"auto ({spec.mb_start}..{spec.mb_max}, x2 then bisect)" if micro_batches == AUTO
               else ",".join(map(str, micro_batches)))
    if max_global_batch is not None:
        mb_text += f", grad-accum up to a global batch of {max_global_batch}"
    click.echo(f"dsx sweep {spec.sweep_id()}: {spec.model} on {where}, {len(configurations)} configuration(s), "
               f"micro-batch {mb_text}, {steps} timed + {warmup} warm-up steps per trial -> {results}", err=True)
    if search_note:
        click.echo(search_note, err=True)
    if spans_ranks and spec.comm_log and warmup < 2:
        click.echo(LOGGER_NOTE, err=True)
    if dry_run:
        from dsx.sweep import preflight

        try:
            refused = preflight(spec)
        except SweepError as exc:
            raise click.UsageError(str(exc)) from None
        _print_plan(spec, configurations, refused)
        return
    try:  # Ctrl-C or SIGTERM (dsx.cli.main) stops the running trial and the sweep
        outcome = _run_with_progress(spec, len(configurations))
    except SweepError as exc:
        raise click.UsageError(str(exc)) from None
    _print_summary(outcome)
    passed_over: set[str] = set()
    kernels_only = not check and (spec.kernels != [None] or spec.fp8 != [None])
    if (check or kernels_only) and not outcome.interrupted:
        try:
            passed_over = _check_best(spec, outcome, kernels_only=kernels_only)
        except KeyboardInterrupt:
            outcome.interrupted = True
    if not outcome.interrupted:
        _print_best(spec, passed_over)
    if outcome.interrupted:
        if outcome.left_running:
            click.echo(f"dsx sweep: interrupted; the running trial was killed, but {outcome.left_running}. Run the "
                       "same command to stop them and resume.", err=True)
        else:
            click.echo("dsx sweep: interrupted; the running trial's processes were stopped. Run the same command to "
                       "resume.", err=True)
        sys.exit(130)
    if not any(r.best for r in outcome.results) and any(not r.skipped for r in outcome.results):
        click.echo("dsx sweep: no trial ran successfully", err=True)
        sys.exit(1)


def _default_search(spec, ctx) -> str | None:
    """With no axis given, make `spec` the default search (dsx.sweep.space) when dsx estimate can plan it here; the
    line that says which search runs (None when axes were given)."""
    from dsx.sweep import visible_gpu_kind
    from dsx.sweep.space import GRAD_ACCUM_CHOICES

    if any(ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT for name in SEARCH_AXES) \
            or len(spec.precision) > 1:  # several precisions are an axis too
        return None
    gpu = visible_gpu_kind(spec) if spec.prune else None
    if gpu is None:
        return ("no axis given, but the default search needs dsx estimate (a calibrated GPU, or --gpu-kind, and no "
                "--no-prune): running the grid --zero 1,2,3 instead")
    spec.search, spec.grad_accum_choices = "default", GRAD_ACCUM_CHOICES
    grad_accum = (f"grad-accum up to the global batch of {spec.max_global_batch}" if spec.max_global_batch
                  else f"the grad-accum ({'/'.join(map(str, GRAD_ACCUM_CHOICES))})")
    note = (f"no axis given: the default search (dsx estimate on {gpu}: ZeRO 1-3 x offload none/partial/full x "
            f"checkpointing x compile at {grad_accum} and the micro-batch it predicts fastest; the model, precision, "
            "optimizer and --set/--ds-set as given)")
    if ctx.get_parameter_source("loss") is click.core.ParameterSource.DEFAULT:
        note += _tiled_loss_if_needed(spec, gpu)
    return note


def _tiled_loss_if_needed(spec, gpu: str) -> str:
    """The default search of a sequence whose plain loss fits in no configuration, where the tiled loss does (the
    same loss, without the whole logits): its trials use --loss tiled, and the note says why ("" otherwise)."""
    from dataclasses import replace

    from dsx.largest import configuration_fits

    fits, reason = configuration_fits(spec, gpu)
    if fits or not configuration_fits(replace(spec, loss="tiled"), gpu)[0]:
        return ""
    spec.loss = "tiled"
    return (f"; --loss tiled: with the plain loss no configuration is predicted to fit at micro-batch 1 (closest, "
            f"{reason}), with the tiled loss one is")


def _refuse_prune_options(spec, ctx) -> None:
    """--top and --keep-within choose among dsx estimate's predictions: refused (not ignored) with --no-prune, and
    --top where no calibrated GPU is visible or named (every configuration would run)."""
    from dsx.sweep import visible_gpu_kind

    given = [f"--top {spec.top}"] if spec.top is not None else []
    if ctx.get_parameter_source("keep_within") is not click.core.ParameterSource.DEFAULT:
        given.append(f"--keep-within {spec.keep_within:g}")
    if given and not spec.prune:
        raise click.UsageError(f"{' and '.join(given)} cannot apply with --no-prune, which runs every "
                               "configuration dsx estimate would skip: drop one of them")
    if spec.top is not None and visible_gpu_kind(spec) is None:
        from dsx.estimate import GPUS

        raise click.UsageError(f"--top {spec.top} cannot apply: it keeps the configurations dsx estimate predicts "
                               f"fastest, and no GPU of a known kind is visible here; name one with --gpu-kind "
                               f"({', '.join(sorted(GPUS))}) or drop --top")


def _print_best(spec, passed_over: set[str] = frozenset()) -> None:
    """The fastest ok row of this sweep as `dsx report --best` gives it (less the configurations --check passed
    over), its config as JSON on stdout to paste."""
    from dsx.sweep.best import best_lines

    lines = best_lines(Path(spec.results), spec.sweep_id(), passed_over)
    if lines:
        click.echo("\n".join(lines))


def _check_best(spec, outcome, tries: int = 3, kernels_only: bool = False) -> set[str]:
    """--check: the parity check on the best row, then (if it differs) on the next configuration's best, up to
    `tries` configurations; the labels of those that differ (passed over). kernels_only (a --kernels or --fp8 axis
    without --check): only a best row with Liger's kernels or float8 is checked before it is called best."""
    from dsx.parity import plan_check, run_check, table
    from dsx.report.best import pick_best
    from dsx.report.load import ReportError
    from dsx.run import RunRefused
    from dsx.sweep.best import sweep_rows
    from dsx.sweep.trials import run_request

    passed_over: set[str] = set()
    by_run = {t.row["run_id"]: t for t in outcome.trials if t.row}
    for _ in range(tries):
        rows = [r for r in sweep_rows(Path(spec.results), spec.sweep_id()) if r["sweep"]["label"] not in passed_over]
        try:
            row = pick_best(rows).row
        except ReportError:
            return passed_over
        trial = by_run.get(row["run_id"])
        if trial is None:
            click.echo(f"dsx sweep --check: the best row {row['run_id'][:8]} is not one of this sweep's trials",
                       err=True)
            return passed_over
        label = row["sweep"]["label"]
        if kernels_only and not (trial.configuration.kernels or trial.configuration.fp8):
            return passed_over
        click.echo(f"\ndsx sweep --check: does {label} mb{row['micro_batch']} train the same model as plain data "
                   "parallel?", err=True)
        try:
            plan = plan_check(run_request(spec, trial.configuration, trial.micro_batch, trial.search))
        except RunRefused as exc:
            click.echo(f"  not checked: {exc}", err=True)
            return passed_over
        judgement, checked = run_check(plan, say=lambda text: click.echo(text, err=True), existing=row)
        click.echo(table(judgement, checked), err=True)
        if judgement.verdict != "differs":
            return passed_over
        passed_over.add(label)
        click.echo(f"dsx sweep --check: {label} trains a different model: passed over", err=True)
    return passed_over


def _print_plan(spec, configurations, refused: dict) -> None:
    """--dry-run: the configurations in the order the sweep would run them, with what dsx estimate predicts for each
    when a calibrated GPU is visible or named (--gpu-kind) and pruning is on; `refused` (dsx.sweep.preflight) and
    impossible ones are listed as skipped, as the sweep would skip them."""
    from dsx.sweep import AUTO, plan, visible_gpu_kind

    gpu = visible_gpu_kind(spec) if spec.prune else None
    runnable = [c for c in configurations if not (c.problem(spec.nvme_path) or refused.get(c))]
    plans = {p.configuration: p for p in plan(spec, runnable, gpu)} if gpu and runnable else {}
    if plans:
        click.echo(f"dsx estimate ({gpu}): likely fastest first; the search starts at the predicted largest "
                   "micro-batch", err=True)
        configurations = list(plans) + [c for c in configurations if c not in runnable]
    for i, configuration in enumerate(configurations, start=1):
        item = plans.get(configuration)
        problem = configuration.problem(spec.nvme_path) or refused.get(configuration) or (item.skip if item else None)
        if problem:
            detail = f"  (skipped: {problem})"
        elif item and item.tokens_per_s and spec.micro_batch == AUTO:
            detail = f"  (start at micro-batch {item.start}, predicted {item.tokens_per_s:,.0f} tokens/s)"
        elif item and item.tokens_per_s:
            runs = ",".join(str(mb) for mb in spec.micro_batch if mb not in item.skip_micro_batches)
            skipped = (f"; {','.join(map(str, item.skip_micro_batches))} predicted not to fit"
                       if item.skip_micro_batches else "")
            detail = f"  (micro-batch {runs}{skipped}; predicted up to {item.tokens_per_s:,.0f} tokens/s)"
        else:
            detail = ""
        click.echo(f"{i:3d}. {configuration.label}{detail}")


def _describe_row(row: dict | None) -> str:
    if not row:
        return ""
    figures, memory = row.get("figures") or {}, (row.get("memory") or {}).get("max") or {}
    from dsx.units import format_bytes

    peak = memory.get("peak_reserved") if row.get("device") == "cuda" else memory.get("host_rss_peak")
    if row.get("status") != "ok":
        return (row.get("error") or "")[:160]
    step = (figures.get("step_time_s") or {}).get("median")
    mfu = figures.get("mfu")
    return (f"{step * 1e3:.0f} ms/step, {figures.get('tokens_per_s') or 0:,.0f} tok/s"
            + (f", MFU {mfu:.1%}" if mfu is not None else "") + f", peak {format_bytes(peak)}")


def _run_with_progress(spec, total_configurations: int):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    from dsx.sweep import AUTO, sweep
    from dsx.sweep.eta import Eta

    console = Console(stderr=True)
    best: dict = {}
    started = time.time()
    eta = Eta(per_configuration=3.0 if spec.micro_batch == AUTO else float(len(spec.micro_batch)))
    skipped: set = set()
    clock = {"last": time.monotonic()}

    def on_plan(planned):
        eta.runnable = sum(1 for _, skip in planned if skip is None)
        skipped.update(c for c, skip in planned if skip is not None)
    with Progress(TextColumn("[bold]configurations"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.description}"), console=console,
                  transient=False, disable=not console.is_terminal) as progress:
        task = progress.add_task("", total=total_configurations)
        current = {"index": 0}

        def on_configuration(index, configuration):
            if current["index"]:
                progress.advance(task)
            current["index"] = index
            if configuration not in skipped:
                eta.configuration_started()
            clock["last"] = time.monotonic()
            progress.update(task, description=f"{configuration.label}" + _best_text(best))

        def on_trial(trial):
            if trial.status == "ok" and trial.row:
                tokens = (trial.row.get("figures") or {}).get("tokens_per_s") or 0
                if tokens > best.get("tokens", -1):
                    best.update(tokens=tokens, label=f"{trial.configuration.label} mb{trial.micro_batch}")
            shown = {"done": "already done (row in the results file)"}.get(trial.status, trial.status)
            detail = _describe_row(trial.row) if trial.status != "refused" else trial.message
            if trial.status == "done" and trial.row:
                detail = f"{trial.row.get('status')}: {_describe_row(trial.row)}"
            now = time.monotonic()
            eta.trial_done(now - clock["last"], ran=trial.status not in ("done", "refused"), last=trial.last,
                           row=trial.row)
            clock["last"] = now
            progress.console.print(f"[{trial.number:3d}] {trial.configuration.label} mb{trial.micro_batch} "
                                   f"({trial.search}): {shown}" + (f" - {detail}" if detail else "")
                                   + f" | {eta.text()}", highlight=False, markup=False, soft_wrap=True)
            progress.update(task, description=f"{trial.configuration.label}" + _best_text(best))

        outcome = sweep(spec, on_trial=on_trial, on_configuration=on_configuration, on_plan=on_plan)
        if not outcome.interrupted:
            progress.update(task, completed=total_configurations)
    outcome.notes.append(f"wall time {time.time() - started:.0f} s")
    return outcome


def _best_text(best: dict) -> str:
    return f"  best so far: {best['label']} {best['tokens']:,.0f} tok/s" if best else ""


def _print_summary(outcome) -> None:
    from dsx.sweep import sweep_device_seconds

    spec = outcome.spec
    lines = []
    for result in outcome.results:
        c = result.configuration
        if result.skipped:
            lines.append(f"  {c.label:<40} skipped: {result.skipped}")
            continue
        if result.search is None:  # the interrupt came while this configuration's trials ran
            done = sum(1 for t in outcome.trials if t.configuration == c)
            lines.append(f"  {c.label:<40} interrupted after {done} finished trial(s); the same command resumes it")
            continue
        s = result.search
        fit = s.largest_fit if s.largest_fit is not None else "none"
        oom = f", first OOM at {s.first_oom}" if s.first_oom is not None else ""
        best = f"; best {_describe_row(result.best)} (mb {result.best['micro_batch']})" if result.best else ""
        stop = f" [{s.stopped}]" if s.stopped else ""
        stop += (f" (micro-batch {', '.join(map(str, result.pruned))} predicted not to fit: not run)"
                 if result.pruned else "")
        lines.append(f"  {c.label:<40} fits up to micro-batch {fit}{oom}{best}{stop}")
    ran = [t for t in outcome.trials if t.status not in ("done", "refused")]
    reused = [t for t in outcome.trials if t.status == "done"]
    refused = [t for t in outcome.trials if t.status == "refused"]
    total, rows = sweep_device_seconds(Path(spec.results), spec.sweep_id())
    unit = "GPU-seconds" if any((t.row or {}).get("device") == "cuda" for t in outcome.trials) else "CPU-rank-seconds"
    click.echo("\n".join([f"sweep {spec.sweep_id()}: {len(ran)} trial(s) run, {len(reused)} already done, "
                          f"{len(refused)} refused"] + lines + [
        f"  {outcome.device_seconds:.0f} {unit} in this invocation; {total:.0f} over the sweep's {rows} row(s)",
        *[f"  note: {n}" for n in outcome.notes],
        *[f"  refused: {t.configuration.label} mb{t.micro_batch}: {t.message}" for t in refused],
        f"  rows in {spec.results}; tables and plots: dsx report {spec.results}" if rows or reused or ran
        else f"  no row was written to {spec.results} (nothing ran)",
    ]))
