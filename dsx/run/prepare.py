"""Stage 2 of `dsx run`: the launch prepared as data. The run's folder gets the DeepSpeed config and the rank
plan (dsx.rank.protocol.RankPlan); dsx.launcher.build_launch turns the trial into the launcher's command line and
environment, which --dry-run prints and dsx.run.execute starts.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dsx import leftovers
from dsx.config_facts import precision_of
from dsx.host import cpu_count, free_port
from dsx.launcher import LaunchError, LaunchPlan, build_launch
from dsx.rank.protocol import PLAN_FILE, RankPlan, Toggles
from dsx.run.kernels import kernel_toggles
from dsx.run.nodes import Placement, gpu_capabilities, launch_nodes, master_addr
from dsx.run.refused import RunRefused
from dsx.run.request import RunRequest, Trial, resolve_trial


@dataclass
class Prepared:
    request: RunRequest
    run_id: str
    run_dir: Path
    started_utc: str
    device: str
    world_size: int
    ds_config: dict
    ds_config_source: str
    config_path: Path
    plan_path: Path
    launch: LaunchPlan
    resolved: Any
    params: int | None
    micro_batch: int
    grad_accum: int
    precision: str
    gpu_names: list[str]
    notes: list[str]
    entered_at: float
    trial_key: str = ""
    prepared_at: float = 0.0
    layout: Any = None
    rank_plan: RankPlan | None = None
    rank_config: dict | None = None
    """The config written for the ranks: ds_config plus DeepSpeed's comms logger (dsx.comm.logger)."""
    lane: Any = None
    """dsx.lane.Lane of a `--python` run."""
    sparse: Any = None
    """dsx.sparse.planning.SparseDecision (the row's sparse_attention), or None."""
    data: Any = None
    """dsx.data.DataSpec the ranks train on."""


def prepare(request: RunRequest, env: dict[str, str] | None = None, cwd: str | None = None,
            trial: Trial | None = None, check_nodes: bool = True, write: bool = True) -> Prepared:
    """Everything up to the launch. RunRefused on bad input. The run's folder (config, rank plan, .deepspeed_env) is
    written last, once nothing can refuse the run, and only with write: a refused run or a dry run leaves nothing
    behind. --dry-run passes write=False and check_nodes=False (no ssh check of a hostfile's nodes)."""
    entered = request.entered_at or time.time()
    env = dict(os.environ if env is None else env)
    cwd = cwd or os.getcwd()
    trial = trial or resolve_trial(request)
    resolved, device, world, config = trial.resolved, trial.device, trial.world_size, trial.ds_config
    notes = list(trial.notes)
    from dsx.models import count_params

    gpu_names, capabilities = gpu_capabilities(device, env)
    if device == "cuda" and trial.layout is None and request.host_check:
        from dsx.run.host_check import host_memory_refusal

        if refusal := host_memory_refusal(trial, gpu_names[0] if gpu_names else None):
            raise RunRefused(refusal)
    from dsx.comm.logger import rank_config

    ranks_config, comm_notes = rank_config(config, request.comm_log)
    notes += comm_notes
    if device == "cpu" and trial.layout is None:  # DeepSpeed's shm allreduce only when every rank is on one node
        if shortfall := leftovers.shm_shortfall(world):
            raise RunRefused(shortfall)
    run_id = uuid.uuid4().hex
    results = Path(request.results)
    run_dir = (results.parent / results.stem / run_id).resolve()
    config_path = run_dir / "ds_config.json"
    plan = RankPlan(
        run_id=run_id, model=resolved.name, overrides=resolved.overrides, seq_len=resolved.seq_len,
        vocab_pad=resolved.vocab_pad, micro_batch=trial.micro_batch, grad_accum=trial.grad_accum,
        steps=request.steps, warmup=request.warmup,
        toggles=Toggles(tf32=request.tf32, compile=request.compile, attn=request.attn, act_ckpt=request.act_ckpt,
                        loss="tiled" if trial.loss_tile_tokens else "fused" if request.loss == "fused" else "plain",
                        loss_tile_tokens=trial.loss_tile_tokens,
                        act_ckpt_offload=request.act_ckpt_offload, tiled_mlp=request.tiled_mlp,
                        **kernel_toggles(trial.kernels)),
        ds_config_path=str(config_path), output_dir=str(run_dir), device=device, flop_check=request.flop_check,
        inject_failure=request.inject_failure, memory_cap=request.memory_cap,
        sparse_attention=trial.sparse.plan if trial.sparse is not None else None, pipeline=trial.pipeline,
        sequence_parallel=trial.sequence_parallel,
        data=trial.data,
    )
    plan_path = run_dir / PLAN_FILE
    placement = Placement(world_size=world, layout=trial.layout)
    nodes = launch_nodes(request.nodes, placement, request.gpus, env, env_file=str(run_dir / "deepspeed_env"),
                         check=check_nodes)
    try:
        launch = build_launch(plan_json=str(plan_path), world_size=world, device=device,
                              master_port=request.master_port or free_port(), base_env=env, cwd=cwd,
                              gpu_capabilities=capabilities, cpu_count=cpu_count(),
                              master_addr=master_addr(request.nodes, placement), nodes=nodes,
                              **lane_launch(trial.lane, env))
    except LaunchError as exc:
        raise RunRefused(str(exc)) from None
    if write:
        run_dir.mkdir(parents=True, exist_ok=True)
        config_path.write_text(json.dumps(ranks_config, indent=2) + "\n")
        plan.write(plan_path)
        for path, text in launch.files.items():
            Path(path).write_text(text)
    try:
        params = count_params(resolved)
    except Exception:  # counting is informative only; never block a run on it
        params = None
    return Prepared(
        request=request, run_id=run_id, run_dir=run_dir,
        started_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"), device=device, world_size=world,
        ds_config=config, ds_config_source=trial.ds_config_source, config_path=config_path, plan_path=plan_path,
        launch=launch, resolved=resolved, params=params, micro_batch=trial.micro_batch, grad_accum=trial.grad_accum,
        precision=precision_of(config), gpu_names=gpu_names[:world], notes=notes + launch.notes,
        entered_at=entered, trial_key=trial.key, prepared_at=time.time(), layout=trial.layout, rank_plan=plan,
        sparse=trial.sparse, rank_config=ranks_config, lane=trial.lane, data=trial.data,
    )


def lane_launch(lane, env: dict[str, str]) -> dict:
    """build_launch's arguments for a `--python` lane (dsx.lane): the ranks' interpreter and its op folder."""
    if lane is None:
        return {}
    from dsx.op_cache import lane_dir

    return {"rank_python": lane.python, "extensions_dir": str(lane_dir(env, lane))}


def describe_dry_run(prepared: Prepared) -> str:
    lines = [prepared.launch.describe(),
             f"DeepSpeed config (a run writes it to {prepared.config_path}; --dry-run writes nothing):",
             json.dumps(prepared.rank_config or prepared.ds_config, indent=2),
             f"rank plan (a run writes it to {prepared.plan_path}): "
             f"{json.dumps(prepared.rank_plan.model_dump()) if prepared.rank_plan else '-'}",
             f"world size {prepared.world_size} ({prepared.device}){_stages_text(prepared)}, micro-batch "
             f"{prepared.micro_batch}, "
             f"grad-accum {prepared.grad_accum}, {prepared.precision}, model {prepared.resolved.name} "
             f"({prepared.params:,} parameters)" if prepared.params else ""]
    lines += [f"note: {n}" for n in prepared.notes if n not in prepared.launch.notes]
    lines = [line for line in lines if line]
    if prepared.layout is not None:
        lines += ["", prepared.layout.describe(), "", *node_commands(prepared)]
    return "\n".join(lines)


def _stages_text(prepared: Prepared) -> str:
    pipe = prepared.rank_plan.pipeline if prepared.rank_plan else None
    return f" = {pipe.stages} pipeline stage(s) x {prepared.world_size // pipe.stages} data-parallel" if pipe else ""


def node_commands(prepared: Prepared) -> list[str]:
    """What DeepSpeed's runner starts on each node (launch.py with the node's rank), for --dry-run."""
    import shlex

    from dsx.hostfile import encode_world_info

    launch = prepared.launch
    if launch.node_argvs:
        return ["each node's runner, started here together:"] + [shlex.join(a) for a in launch.node_argvs]
    script = launch.argv[launch.argv.index("--no_local_rank") + 1:]
    lines = [f"what the runner ({prepared.request.launcher}) runs on each node:"]
    for node_rank, host in enumerate(prepared.layout.selection):
        command = [launch.argv[0], "-u", "-m", "deepspeed.launcher.launch",
                   f"--world_info={encode_world_info(prepared.layout.selection)}", f"--node_rank={node_rank}",
                   f"--master_addr={launch.master_addr}", f"--master_port={launch.master_port}", "--no_local_rank",
                   *script]
        lines.append(f"  {host}: cd {shlex.quote(launch.cwd)}; {shlex.join(command)}")
    return lines


