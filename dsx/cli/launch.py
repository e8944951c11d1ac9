"""`dsx launch`: a user's own training script under a dsx-checked DeepSpeed config, through DeepSpeed's runner."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import click

from dsx.cli.lane_options import python_option
from dsx.cli.options import data_options, node_options


@click.command("launch", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="The DeepSpeed JSON the script gets; linted for the launch's world size first.")
@click.option("--config-arg", default="--deepspeed_config", show_default=True, metavar="FLAG",
              help="How the config's path reaches the script: appended as FLAG PATH (e.g. --deepspeed for the "
                   "transformers Trainer); 'accelerate': in every rank's environment as `accelerate launch` gives it "
                   "to an Accelerator (ACCELERATE_USE_DEEPSPEED, ACCELERATE_DEEPSPEED_CONFIG_FILE; no --local_rank "
                   "either, as under accelerate launch); 'none': not at all.")
@click.option("--gpus", type=click.IntRange(min=1),
              help="Ranks per node (default: all visible GPUs; without a GPU, 1 CPU rank).")
@node_options
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0), default=0,
              help="Kill the whole job after this many seconds (0: never).")
@click.option("--no-local-rank", is_flag=True,
              help="Do not append --local_rank=N to the command's arguments (DeepSpeed's runner does by default); "
                   "each rank still finds LOCAL_RANK in its environment.")
@click.option("--hf", is_flag=True,
              help='The config is one the transformers Trainer / accelerate fill: "auto" is allowed where they fill '
                   "it (implied by --config-arg --deepspeed or accelerate).")
@click.option("--seq-len", type=click.IntRange(min=1),
              help="The script's sequence length: a Trainer's samples/s becomes tokens/s in the row.")
@click.option("--results", default="results/runs.jsonl", show_default=True, type=click.Path(dir_okay=False),
              help="JSON-lines file the launch's row is appended to (the job's output is kept beside it).")
@click.option("--dry-run", is_flag=True, help="Print the checked launch (commands, environment, layout); run nothing.")
@data_options
@python_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def command(config_path, config_arg, gpus, timeout_s, no_local_rank, hf, seq_len, results, dry_run, data, data_dtype,
            data_seed, python, command,
            **nodes):
    """Launch COMMAND (after --) on every rank, under a DeepSpeed config dsx has checked.

    COMMAND is `python SCRIPT.py ARGS`, `python -m MODULE ARGS` or a program. The config is linted for the world
    size of the launch (errors refuse it), the launch is built as data (hostfile, --include/--exclude,
    .deepspeed_env for remote ranks), every node is checked over ssh, and DeepSpeed's runner starts it.

    A config the transformers Trainer or accelerate fills ("auto" values) needs --hf, implied by --config-arg
    --deepspeed (the Trainer's flag) and --config-arg accelerate (an accelerate script, which finds the config where
    `accelerate launch` would put it). Before a Trainer launch, a warmup scheduler whose "auto" warmup the Trainer
    would fill with 0 (DeepSpeed 0.19 rejects it) is refused with the fix.

    Each launch appends one row to --results: status, exit code, wall time, each GPU's peak memory (NVML) and each
    rank's peak host RSS, sampled by dsx while the job runs, the config and its hash, the command; for a Trainer
    script, the throughput it reports (train_samples_per_second, and tokens/s with --seq-len). `dsx report` shows
    launch rows in a table of their own.

    As with DeepSpeed's own launcher, each rank's arguments end in --local_rank=N, so the script must accept it
    (argparse: parser.add_argument("--local_rank", type=int, default=-1)), unless --no-local-rank; LOCAL_RANK,
    RANK and WORLD_SIZE are in every rank's environment either way.

    Exit status: the job's own, so 2 may be your script's (an argparse error, say): dsx's last line then says
    "the job exited with 2". 2 with "Error: ..." is dsx refusing the launch before starting anything; 124: --timeout
    killed the job; 130: interrupted.

    \b
    dsx launch --config ds.json -- python train.py --epochs 1
    dsx launch --config ds.json -- python -m mypackage.train --epochs 1
    dsx launch --config ds_zero2.json --config-arg --deepspeed --seq-len 1024 \\
        -- python train_hf.py --output_dir out --max_steps 50 --warmup_steps 5
    dsx launch --config ds.json --config-arg accelerate -- python train_accelerate.py
    dsx launch --hostfile hostfiles/two-nodes-8gpu --master-addr node1 --config ds.json --config-arg --deepspeed \\
        -- python train.py --output_dir out
    """
    from dsx.host import cpu_count, detect_device, free_port
    from dsx.launcher import LaunchError, build_launch
    from dsx.processes import run_plan
    from dsx.lint.load import UnreadableConfig, read_config
    from dsx.run.nodes import NodeRequest, gpu_capabilities, launch_nodes, master_addr, place
    from dsx.run.prepare import lane_launch
    from dsx.run.refused import RunRefused
    from dsx.safe_io import UnreadableFile, check_appendable
    from dsx.userjob import preflight
    from dsx.userjob.record import Recorder
    from dsx.run.request import resolve_lane
    from dsx.versions import VersionError, resolve_target
    from dsx.data.spec import data_env

    command = list(command)
    if command and command[0] == "--":
        command = command[1:]
    script, args = preflight.script_and_args(command)
    trainer = preflight.is_trainer_launch(config_arg, args)
    hf = hf or preflight.filled_by_hf(config_arg)
    node_request = NodeRequest(**nodes)
    work = None  # a temporary folder for the .deepspeed_env of a multi-node launch, removed whatever happens
    try:
        try:
            try:
                check_appendable(results)  # a FIFO would block the row's write after the whole job
            except UnreadableFile as exc:
                raise RunRefused(f"--results {exc}") from None
            device, visible = detect_device()
            placement = place(node_request, gpus, device, visible)
            world = placement.world_size
            lane = resolve_lane(python, runs_dsx=False)  # the ranks run the user's script, not dsx's
            try:
                loaded = read_config(config_path)
                target = resolve_target(lane.deepspeed if lane else None)
            except (UnreadableConfig, VersionError) as exc:
                raise RunRefused(str(exc)) from None
            checked = preflight.check(loaded.data, duplicate_keys=loaded.duplicate_keys, target=target,
                                      world_size=world, hf=hf, trainer=trainer, args=args, device=device,
                                      accelerate=preflight.is_accelerate(config_arg),
                                      transformers_version=lane.transformers if lane else None)
            if checked.errors:
                lines = "\n".join(checked.error_lines())
                raise RunRefused(f"{config_path} has errors for DeepSpeed {target} at world size {world}"
                                 f"{', with the Trainer / accelerate filling its auto values (--hf)' if hf else ''}:\n"
                                 f"{lines}")
            for finding in checked.warnings:
                click.echo(f"dsx launch: {finding.render()}", err=True)

            config_args, config_env = preflight.config_delivery(config_arg, config_path)
            data_spec = None
            if data is not None or data_dtype is not None or data_seed is not None:
                data_spec = launch_data(data, data_dtype, data_seed, seq_len)
                config_env = {**config_env, **data_env(data_spec)}
            command = [*command, *config_args]
            env = dict(os.environ)
            if placement.layout is not None and node_request.launcher != "no-ssh":
                work = tempfile.mkdtemp(prefix="dsx-launch-")
            node_spec = launch_nodes(node_request, placement, gpus, env,
                                     env_file=os.path.join(work, "deepspeed_env") if work else "", check=not dry_run)
            gpu_names, capabilities = gpu_capabilities(device, env)
            try:
                plan = build_launch(world_size=world, device=device,
                                    master_port=node_request.master_port or free_port(), base_env=env,
                                    cwd=os.getcwd(), gpu_capabilities=capabilities, cpu_count=cpu_count(),
                                    master_addr=master_addr(node_request, placement), nodes=node_spec,
                                    user_command=command, job_env=config_env,
                                    local_rank_arg=not no_local_rank and not preflight.is_accelerate(config_arg),
                                    **lane_launch(lane, env))
            except LaunchError as exc:
                raise RunRefused(str(exc)) from None
        except RunRefused as exc:
            raise click.UsageError(str(exc)) from None

        if dry_run:
            click.echo(plan.describe())
            if placement.layout is not None:
                click.echo("\n" + placement.layout.describe())
            return
        try:  # after every other refusal; before the runner spends seconds failing and a row records it
            preflight.check_script(command, local=node_request.hostfile is None)
        except RunRefused as exc:
            raise click.UsageError(str(exc)) from None
        for path, text in plan.files.items():
            with open(path, "w") as f:
                f.write(text)
        recorder = Recorder(results, device=device, world=world, placement=placement, env=env, plan=plan,
                            config=loaded.data, config_path=config_path, hf=hf, config_arg=config_arg,
                            user_command=command, script=script, args=args, trainer=trainer, seq_len=seq_len,
                            nodes=node_request, gpu_names=gpu_names, lane=lane, data=data_spec)
        click.echo(f"dsx launch: world size {world} ({device}); {plan.command_line()}", err=True)
        try:
            done = run_plan(plan, timeout_s or None, log_path=recorder.log_path, echo=True, on_start=recorder.start)
        except KeyboardInterrupt as exc:
            from dsx.processes import stopped_text

            recorder.record(None, stopped=stopped_text(exc))
            click.echo(f"dsx launch: interrupted; {stopped_text(exc)}", err=True)
            sys.exit(130)
        for line in recorder.record(done):
            click.echo(line, err=True)
    finally:
        if work:
            shutil.rmtree(work, ignore_errors=True)
    if done.timed_out:
        from dsx.processes import left_running_text

        killed = left_running_text(done.pgid, done.left_running) if done.left_running else "the whole job was killed"
        click.echo(f"dsx launch: timed out after {timeout_s:g} s; {killed}", err=True)
        sys.exit(124)
    if done.returncode:
        for line in job_failure_lines(done.returncode, done.tail):
            click.echo(line, err=True)
    sys.exit(done.returncode or 0)


def launch_data(data, dtype, seed, seq_len):
    """--data of a launch: checked as far as dsx can without the script's model (a file's dtype and size; with
    --seq-len, at least one window), handed to the ranks in DSX_DATA* (dsx.data.spec.spec_from_env)."""
    from dsx.data import DataError
    from dsx.data.files import inspect
    from dsx.data.spec import parse_data
    from dsx.run.refused import RunRefused

    try:
        spec, _ = inspect(parse_data(data, dtype, seed), None, seq_len)
    except DataError as exc:
        raise RunRefused(str(exc)) from None
    return spec


def job_failure_lines(code: int, tail: str) -> list[str]:
    """What dsx says when the job failed: its status is the command's, not a refusal of dsx's (which exit 2 too,
    before anything starts), and the fix when the script choked on the runner's --local_rank."""
    lines = []
    if "unrecognized arguments:" in tail and "--local_rank" in tail:
        lines.append("dsx launch: the script does not accept --local_rank=N, which DeepSpeed's runner appends to every "
                     "rank's arguments: accept it (argparse: parser.add_argument(\"--local_rank\", type=int, "
                     "default=-1)) or launch with --no-local-rank")
    lines.append(f"dsx launch: the job exited with {code}: the exit status of your command on a rank, not a refusal "
                 "by dsx (dsx refuses before starting anything, with \"Error: ...\")")
    return lines
