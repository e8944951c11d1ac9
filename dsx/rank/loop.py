"""A rank's work, phase by phase: imports, the process group, the model, deepspeed.initialize, then warm-up and
timed optimizer steps on the run's data (dsx.data).

A step is grad_accum micro-batches of forward + engine.backward + engine.step (a pipeline: engine.train_batch over
them, dsx.rank.pipeline). The clock (time.perf_counter) is read after a device synchronisation
(torch.cuda.synchronize) on both sides of each step; batches are made (and their time recorded as the data wait)
before the clock starts. Each data-parallel replica trains its own shard of the step's global batch
(dsx.data.batches), and the loss a rank records is the step's mean over every replica (an all-reduce of one number
after the clock stops), so every rank records the same loss and it does not depend on the split (dsx.rank.trainer).
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from pathlib import Path

from dsx import leftovers

from dsx.rank import memory_history
from dsx.rank.comms import CommCounter
from dsx.rank.faults import install_gradient_fault, maybe_inject
from dsx.rank.measure import NvmlSampler, apply_memory_cap, collect_memory, reset_peaks
from dsx.rank.model import build, flop_check
from dsx.rank.progress import Progress
from dsx.rank.protocol import RankPlan, parse_injection
from dsx.rank.trainer import Trainer


def run(plan: RankPlan, progress: Progress, rank: int, local_rank: int, state: dict) -> None:
    """The rank's work; `state` keeps what the failure path needs to still measure memory."""
    import torch
    import transformers

    import deepspeed

    report = progress.report
    report.versions = {"torch": torch.__version__, "deepspeed": deepspeed.__version__,
                       "transformers": transformers.__version__, "python": platform.python_version()}
    progress.phase("imported")
    injection = parse_injection(plan.inject_failure)
    on_cuda = plan.device == "cuda"
    toggles = plan.toggles
    if on_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        state.update(torch=torch, device=device, on_cuda=True)
        report.device = f"cuda:{local_rank}"
        report.gpu_name = torch.cuda.get_device_name(device)
        report.gpu_capability = "%d.%d" % torch.cuda.get_device_capability(device)
        torch.backends.cuda.matmul.allow_tf32 = toggles.tf32
        torch.backends.cudnn.allow_tf32 = toggles.tf32
    else:
        device = torch.device("cpu")
        state.update(torch=torch, device=device, on_cuda=False)
        report.device = "cpu"
        if toggles.tf32:
            report.notes.append("--tf32 has no effect on CPU ranks")
    deepspeed.init_distributed()
    apply_memory_cap(torch, device, on_cuda, plan.memory_cap, report)
    state["memory_history"] = memory_history.start(torch, on_cuda, report, Path(plan.output_dir).name)
    progress.phase("distributed")

    from dsx.models import resolve_model

    resolved = resolve_model(plan.model, plan.overrides, seq_len=plan.seq_len, vocab_pad=plan.vocab_pad)
    ds_config = json.loads(Path(plan.ds_config_path).read_text())
    if plan.flop_check and rank == 0:
        started = time.time()
        flop_check(plan, resolved, device, report)
        report.flop_check.seconds = time.time() - started
        report.times["flop_check_done"] = time.time()
        reset_peaks(torch, device, on_cuda, report)
    torch.manual_seed(plan.seed)  # the same initial weights on every rank
    if plan.pipeline is None:
        trainer = initialize(plan, resolved, ds_config, report, device, progress)
    else:  # the model as a deepspeed.pipe.PipelineModule, stepped with train_batch
        from dsx.rank import pipeline

        trainer = pipeline.initialize(plan, resolved, ds_config, report, device, progress)
    maybe_inject(injection, rank, None)
    if install_gradient_fault(injection, rank, trainer.engine.module):
        report.notes.append("injected: the first block's gradients are zeroed (--inject-failure grad)")
    comm = CommCounter(trainer.engine, ds_config, plan.warmup)

    from dsx.data.batches import Batches

    replica, replicas = trainer.data_parallel()
    data = Batches(plan.data, resolved, plan.micro_batch, plan.grad_accum, replica, replicas)
    # Re-seed the global RNG (dropout masks): building the model used it differently per rank (under ZeRO-3 only
    # rank 0 initialises the weights), and every rank must compute the same loss.
    torch.manual_seed(plan.seed + 1)
    if on_cuda:
        torch.cuda.manual_seed_all(plan.seed + 1)
    nvml = NvmlSampler(torch, device) if on_cuda else None
    state["nvml"] = nvml

    def sync():
        if on_cuda:
            torch.cuda.synchronize(device)

    for i in range(plan.warmup + plan.steps):
        timed_index = i - plan.warmup
        if timed_index == 0:
            # the memory so far goes into the report written now: a run later cut by its timeout still has it
            collect_memory(torch, device, on_cuda, nvml, report)
            progress.phase("warmup_done")
        if timed_index >= 0:
            maybe_inject(injection, rank, timed_index)
        comm.before(i)
        made = time.perf_counter()
        batches = [{k: v.to(device, non_blocking=True) for k, v in batch.items()} for batch in data.step(i)]
        sync()
        start = time.perf_counter()
        report.data_wait_s.append(start - made)
        losses = trainer.step(batches)
        sync()
        elapsed = time.perf_counter() - start
        value = trainer.step_loss(losses)
        if timed_index >= 0:
            report.step_time_s.append(elapsed)
            report.loss.append(value)
        else:
            report.warmup_step_time_s.append(elapsed)
            report.warmup_loss.append(value)
        comm.after(i)
        if nvml is not None:
            nvml.sample()
    report.comm = comm.log()
    progress.phase("timed_done")
    trainer.finish()
    collect_memory(torch, device, on_cuda, nvml, report)
    if state["memory_history"] is not None:
        memory_history.dump(torch, state["memory_history"], rank, report)
    if not all(math.isfinite(x) for x in report.loss):
        report.notes.append("non-finite loss in the timed steps")
    import deepspeed.comm as dist

    leave_process_group(dist, os.environ)


def initialize(plan: RankPlan, resolved, ds_config: dict, report, device, progress: Progress) -> Trainer:
    """Build the model (transformers' gradient checkpointing with --act-ckpt) and deepspeed.initialize it (with
    DeepSpeed's sequence-parallel groups under --sequence-parallel)."""
    import deepspeed

    mpu = None
    if plan.sequence_parallel:
        from dsx.rank import ulysses

        core = plan.toggles.attn
        if plan.sparse_attention is not None:  # Ulysses wraps the function registered under the model's name
            from dsx.sparse.attention import register_functions

            core = register_functions()
        mpu = ulysses.register(plan.sequence_parallel, resolved, plan.micro_batch, core)
    model = build(plan, resolved, ds_config, report, device)
    if plan.toggles.act_ckpt:
        from dsx.rank.memory_savers import enable_checkpointing

        enable_checkpointing(model)
        if hasattr(model.config, "use_cache"):
            model.config.use_cache = False
    if plan.toggles.act_ckpt_offload or plan.toggles.tiled_mlp:
        from dsx.rank.memory_savers import offload_checkpointed_inputs, tile_mlps

        if plan.toggles.act_ckpt_offload:
            report.notes.append(f"--act-ckpt-offload: {offload_checkpointed_inputs(model)} checkpointed layer(s) keep "
                                "their input in host memory")
        if plan.toggles.tiled_mlp:
            report.notes.append(f"--tiled-mlp: {tile_mlps(model, resolved.family)} MLP(s) run through TiledMLP")
    if plan.toggles.kernels or plan.toggles.fp8:
        from dsx.rank.kernels import apply_kernels

        report.notes += apply_kernels(model, resolved.family, plan.toggles.kernels == "liger",
                                      plan.toggles.liger_fused_loss, plan.toggles.fp8)
    report.params_seen = int(sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters()))
    fused_here = plan.toggles.loss == "fused" and plan.toggles.kernels != "liger"  # else Liger's patch owns it
    if plan.toggles.loss == "tiled" or fused_here:
        from dsx.config_facts import zero_stage
        from dsx.rank.tiled_loss import wrap

        model = wrap(model, plan.toggles.loss_tile_tokens, zero3=zero_stage(ds_config) == 3, fused=fused_here)
    progress.phase("model_built")

    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=[p for p in model.parameters()
                                                                          if p.requires_grad], config=ds_config,
                                           mpu=mpu)
    if plan.toggles.compile:
        engine.compile()
    progress.phase("initialized")
    if mpu is not None:
        from dsx.config_facts import zero_stage

        return ulysses.SequenceParallelTrainer(engine, mpu, plan.sequence_parallel, plan.toggles.loss == "tiled",
                                               zero3=zero_stage(ds_config) == 3)
    return Trainer(engine)


def leave_process_group(dist, env, shm_dir: Path = leftovers.SHM_DIR) -> None:
    """Barrier, unlink this rank's shared-memory allreduce buffer, destroy the process group.

    DeepSpeed never unlinks the buffer. Every rank opened every other rank's buffer in init_distributed, so after
    the barrier nobody needs the name (the mappings stay valid). dsx removes a finished job's buffers itself too,
    but a rank whose dsx was killed (kill -9 of a sweep) finishes on its own: this way it leaves nothing behind."""
    try:
        dist.barrier()
        if (buffer := leftovers.rank_shm_buffer(env, shm_dir)) is not None:
            leftovers.remove([buffer])
        dist.destroy_process_group()
    except Exception:
        pass
