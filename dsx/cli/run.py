"""`dsx run`: train a model preset for a few steps with DeepSpeed, measure, append one row to a JSON-lines file."""

from __future__ import annotations

import sys
import time

import click

from dsx.cli.lane_options import run_lane_options
from dsx.cli.options import (SIZE, act_ckpt_option, config_source_options, data_options, kernel_options,
                             long_context_options, model_options, node_options, pipeline_options, sparse_options)

ENTERED = time.time()

RUN_OPTIONS = (
    model_options,
    config_source_options,
    click.option("--gpus", type=click.IntRange(min=1),
                 help="Ranks: GPUs to use (default all visible); without a GPU, CPU ranks (default 1)."),
    node_options,
    pipeline_options,
    click.option("--steps", type=click.IntRange(min=1), default=20, show_default=True, help="Timed optimizer steps."),
    click.option("--warmup", type=click.IntRange(min=0), default=5, show_default=True,
                 help="Untimed optimizer steps first."),
    click.option("--tf32", is_flag=True, help="Allow TF32 matmuls (CUDA, fp32 math)."),
    click.option("--compile", "compile_", is_flag=True, help="engine.compile() (DeepSpeed's torch.compile)."),
    click.option("--attn", type=click.Choice(["eager", "sdpa", "flash"]), default="sdpa", show_default=True,
                 help="Attention implementation (flash: flash_attn on CUDA)."),
    act_ckpt_option("Activation checkpointing (transformers gradient_checkpointing_enable); bare --act-ckpt is on."),
    long_context_options,
    kernel_options,
    sparse_options,
    data_options,
    click.option("--flop-check", is_flag=True,
                 help="Also count one micro-batch with torch.utils.flop_counter (rank 0) and record both FLOP "
                      "numbers."),
    click.option("--memory-cap", type=SIZE, metavar="SIZE",
                 help="Memory one rank may use, e.g. 40GiB: a smaller GPU on a big one (torch's allocator limit); on "
                      "CPU ranks RLIMIT_DATA. Past it the run is an oom row."),
    click.option("--host-check/--no-host-check", "host_check", default=True, show_default=True,
                 help="Refuse a GPU run on one machine whose ranks dsx estimate predicts to need more of its RAM than "
                      "it has (optimizer or parameter offload to the CPU, --act-ckpt-offload): the kernel would kill "
                      "them once they fill it."),
    click.option("--results", default="results/runs.jsonl", show_default=True, type=click.Path(dir_okay=False),
                 help="JSON-lines file the row is appended to."),
    click.option("--timeout", "timeout_s", type=click.FloatRange(min=0), default=3600, show_default=True,
                 help="Kill the run after this many seconds (0: never)."),
    click.option("-v", "--verbose", is_flag=True,
                 help="Stream DeepSpeed's and the ranks' output (always in launcher.log)."),
    click.option("--inject-failure", hidden=True, help="Tests: KIND[:STEP][@RANK], KIND error|oom|exit|hang."),
    run_lane_options,
)
"""Every flag of `dsx run` that says what to train and how, top to bottom as --help lists them."""


def run_options(f):
    """RUN_OPTIONS on a command (`dsx run`, `dsx check`)."""
    for decorator in reversed(RUN_OPTIONS):
        f = decorator(f)
    return f


def request_of(options: dict, command: list[str]):
    """The RunRequest of `dsx run`'s flags (run_options' parameters, by name); click.UsageError for bad --set."""
    from dsx.models import ModelError, parse_overrides
    from dsx.run import NODE_KEYS, RunRequest, config_flags

    o = dict(options)
    try:
        overrides = parse_overrides(o["sets"])
    except ModelError as exc:
        raise click.UsageError(str(exc)) from None
    return RunRequest(
        model=o["model"], overrides=overrides, seq_len=o["seq_len"], vocab_pad=o["vocab_pad"],
        config_path=o["config_path"], preset=o["ds_preset"], config_flags=config_flags(o), ds_sets=tuple(o["ds_sets"]),
        gpus=o["gpus"], steps=o["steps"], warmup=o["warmup"], tf32=o["tf32"], compile=o["compile_"], attn=o["attn"],
        act_ckpt=o["act_ckpt"] == "on", loss=o["loss"], loss_tile_tokens=o["loss_tile_tokens"], results=o["results"],
        timeout_s=o["timeout_s"] or None,
        flop_check=o["flop_check"], echo=o["verbose"], command=command, inject_failure=o["inject_failure"],
        entered_at=ENTERED, memory_cap=o["memory_cap"], sparse_attention=o["sparse_attention"],
        sparse_sets=tuple(o["sparse_sets"]), comm_log=o["comm_log"], python=o["python"], data=o["data"],
        data_dtype=o["data_dtype"], data_seed=o["data_seed"], **{key: o[key] for key in NODE_KEYS},
        pipeline_stages=o["pipeline_stages"], pipeline_partition=o["pipeline_partition"],
        sequence_parallel=o["sequence_parallel"], act_ckpt_offload=o["act_ckpt_offload"], tiled_mlp=o["tiled_mlp"],
        kernels=o["kernels"], fp8=o["fp8"], host_check=o["host_check"],
    )


@click.command("run")
@run_options
@click.option("--dry-run", is_flag=True,
              help="Print the launcher command, environment changes and config; run and write nothing.")
def command(dry_run, **options):
    """Train a model preset for a few steps with DeepSpeed and measure it.

    One process per GPU through DeepSpeed's launcher (CPU ranks with gloo when there is no GPU). Appends one row
    (figures, memory, config, versions, status) to --results; exits 1 when the run ran out of memory, failed or
    timed out, 2 when it was refused before starting.

    \b
    dsx run --model gpt2-tiny --zero 2 --steps 10
    dsx run --model gpt2-xl --zero 3 --offload cpu --offload-params cpu --micro-batch 8 --gpus 1
    dsx run --model bert-base --config my_ds.json --results results/bert.jsonl
    dsx run --model gpt2 --zero 2 --hostfile hostfiles/two-nodes-8gpu --master-addr node1
    dsx run --model gpt2-xl --pipeline-stages 2 --gpus 2 --micro-batch 4 --grad-accum 16
    """
    from dsx.run import RunRefused, describe_dry_run, execute, prepare, summary

    from dsx.safe_io import UnreadableFile, check_appendable

    request = request_of(options, ["dsx", *sys.argv[1:]])
    results = request.results
    try:
        check_appendable(results)  # a FIFO would block the row's write after the whole run
    except UnreadableFile as exc:
        raise click.UsageError(f"--results {exc}") from None
    try:
        prepared = prepare(request, check_nodes=not dry_run, write=not dry_run)
    except RunRefused as exc:
        raise click.UsageError(str(exc)) from None
    if dry_run:
        click.echo(describe_dry_run(prepared))
        return
    click.echo(f"dsx run {prepared.run_id[:8]}: {prepared.resolved.name} on {prepared.world_size} "
               f"{'GPU' if prepared.device == 'cuda' else 'CPU rank'}(s); output in {prepared.run_dir}/launcher.log",
               err=True)
    try:
        row = execute(prepared)
    except KeyboardInterrupt as exc:
        from dsx.processes import stopped_text

        click.echo(f"dsx run: interrupted; {stopped_text(exc)} (output in {prepared.run_dir})", err=True)
        sys.exit(130)
    click.echo(summary(row, results))
    if row.status != "ok":
        click.echo(f"dsx run: {row.status}: {row.error}", err=True)
        from dsx.run.gather import fragmentation_note

        if row.status == "oom" and (note := fragmentation_note(row.error)):
            click.echo(f"dsx run: {note}", err=True)
        sys.exit(1)
