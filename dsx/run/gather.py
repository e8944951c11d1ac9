"""Stage 3 of `dsx run`: the ranks' reports (dsx.rank.protocol.RankReport) gathered into one RunRow.

One function per part of the row: the status and its one-line cause, the figures (step time, tokens/s, TFLOP/s,
MFU, the flop check), memory (per rank and the max), each rank's result, and the overhead (the wall time dsx adds
around the timed steps). A step's time is the slowest rank's: the step ends when every rank has finished it.
"""

from __future__ import annotations

import platform
import re
import socket
import statistics
import time

from dsx.config_facts import compute_precision
from dsx.host import cpu_count, cpu_model, package_versions, process_start_time, speed_of
from dsx.rank.protocol import TIMELINE, RankReport, rank_report_path, read_rank_report
from dsx.results import (
    MEMORY_FIELDS, DataInfo, Figures, Memory, MemoryMax, ModelInfo, NodesInfo, Overhead, RankMemory, RankResult, RunRow,
    SparseAttentionInfo, StepTime, SweepInfo, Toggles, Versions, config_hash,
)
from dsx.row_parts import HostCpu
from dsx.run.pipeline import data_parallel, pipeline_row
from dsx.run.prepare import Prepared

# Messages of a rank that lost a peer (the peer died or failed first): gloo, NCCL and torch.distributed wording.
PEER_LOST = ("connection closed by peer", "connection reset by peer", "broken pipe", "remote process exited",
             "communicator was aborted", "nccl error", "socket timeout", "connection refused")


def _max_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _is_peer_loss(message: str | None) -> bool:
    text = (message or "").lower()
    return any(p in text for p in PEER_LOST)


def status_of(prepared: Prepared, ranks: list[RankReport | None], completed) -> tuple[str, str | None]:
    """(status, one-line message). The cause is named first: the earliest real failure of a rank; a rank that
    died without a result when the others only lost their peer; else what the launcher said."""
    log = prepared.run_dir / "launcher.log"
    if completed.timed_out:
        reached = ", ".join(f"rank {i}: {r.phase}" if r else f"rank {i}: not started" for i, r in enumerate(ranks))
        if completed.left_running:
            from dsx.processes import left_running_text

            reached += f"; {left_running_text(completed.pgid, completed.left_running)}"
        return "timeout", (f"timed out after {prepared.request.timeout_s:g} s and was killed ({reached}); "
                           f"output in {log}")
    failed = sorted(((r.times.get("failed", float("inf")), i, r) for i, r in enumerate(ranks)
                     if r and r.status in ("oom", "error")), key=lambda item: (item[0], item[1]))
    lost = [(i, r) for i, r in enumerate(ranks) if not r or r.status not in ("ok", "oom", "error")]
    genuine = [item for item in failed if not _is_peer_loss(item[2].error)]
    if genuine or (failed and not lost):
        _, i, r = (genuine or failed)[0]
        after = f"; {len(failed) - 1} other rank(s) failed after it" if len(failed) > 1 else ""
        return r.status, f"rank {i}: {r.error} (traceback in {rank_report_path(prepared.run_dir, i)}){after}"
    if lost:
        parts = [f"rank {i} " + (f"stopped during '{r.phase}' without a result" if r else "never reported")
                 for i, r in lost]
        message = (f"{'; '.join(parts)} (launcher exit code {completed.returncode}: the rank was killed, e.g. by "
                   "the kernel's OOM killer, or exited)")
        if failed:
            _, i, r = failed[0]
            message += f"; rank {i} then lost its peer: {(r.error or '')[:200]}"
        elif not any(ranks):
            tail = [line for line in completed.tail.splitlines() if line.strip()]
            message += f"; last output: {tail[-1].strip()[:300]}" if tail else ""
        return "error", f"{message}; output in {log}"
    if completed.returncode != 0:
        return "error", f"the launcher exited with {completed.returncode} after every rank finished; output in {log}"
    return "ok", None


def figures_of(prepared: Prepared, ranks: list[RankReport | None], status: str, gpu_name: str | None) -> Figures:
    """Step time (the slowest rank's per step, then the median), tokens/s, TFLOP/s, MFU and the flop check."""
    request, resolved, world = prepared.request, prepared.resolved, prepared.world_size
    figures = Figures()
    from dsx.flops import model_flops_per_token

    sparse = prepared.sparse.info if prepared.sparse is not None and prepared.sparse.info.get("applied") else None
    try:
        figures.flops_per_token = float(model_flops_per_token(
            resolved, attended_fraction=sparse["attended_fraction"] if sparse else 1.0))
    except Exception as exc:
        prepared.notes.append(f"analytic FLOPs unavailable: {exc}")
    dtype = compute_precision(prepared.precision)  # autocast's matrix products run in bf16
    if dtype == "fp32" and request.tf32 and prepared.device == "cuda":
        dtype = "tf32"
    figures.flops_dtype = dtype
    if prepared.device == "cuda":
        from dsx.gpus import peak_tflops

        figures.peak_tflops = peak_tflops(gpu_name, dtype)
    steps_by_rank = [r.step_time_s for r in ranks if r]
    if status == "ok" and len(steps_by_rank) == world and all(len(s) == request.steps for s in steps_by_rank):
        per_step = [max(s[i] for s in steps_by_rank) for i in range(request.steps)]
        median = statistics.median(per_step)
        figures.step_time_s = StepTime(median=median, min=min(per_step), max=max(per_step), all=per_step,
                                       spread=(max(per_step) - min(per_step)) / median)
        samples = prepared.micro_batch * prepared.grad_accum * data_parallel(prepared)  # a pipeline: world / stages
        figures.samples_per_s = samples / median
        figures.tokens_per_s = samples * resolved.seq_len / median
        if figures.flops_per_token is not None:
            figures.model_tflops_per_s = figures.flops_per_token * figures.tokens_per_s / world / 1e12
            if figures.peak_tflops:
                figures.mfu = figures.model_tflops_per_s / figures.peak_tflops
    check = ranks[0].flop_check if ranks and ranks[0] else None
    if check:
        per_token = check.counter_flops_per_token
        tokens_per_rank_step = prepared.micro_batch * resolved.seq_len * prepared.grad_accum * data_parallel(
            prepared) / world  # a pipeline's ranks share each replica's tokens
        if figures.flops_per_token is not None:
            figures.analytic_flops_per_step = figures.flops_per_token * tokens_per_rank_step
        if per_token is not None:
            figures.flop_counter_flops_per_step = per_token * tokens_per_rank_step
            if figures.analytic_flops_per_step:
                ratio = figures.analytic_flops_per_step / figures.flop_counter_flops_per_step
                figures.flop_check_note = (f"analytic / torch.utils.flop_counter = {ratio:.4f} (counter: attn "
                                           f"{check.attn}, micro-batch {check.micro_batch}, on "
                                           f"{check.device}; the analytic count adds 6 FLOPs per 1-D "
                                           "parameter, which the counter does not see)")
        else:
            figures.flop_check_note = f"flop counter failed: {check.error}"
    return figures


def memory_of(present: list[RankReport]) -> Memory:
    """Every rank's figures, the max over ranks, the method behind each figure, and the smallest capacity."""
    per_rank = []
    methods: dict[str, str] = {}
    for r in present:
        per_rank.append(RankMemory(rank=r.rank, **{k: r.memory.get(k) for k in MEMORY_FIELDS},
                                   unavailable=r.memory_unavailable))
        for k, v in r.memory_methods.items():
            methods.setdefault(k, v)
    mem_max = MemoryMax(**{k: _max_or_none([getattr(m, k) for m in per_rank]) for k in MEMORY_FIELDS})
    capacities = [(r.capacity, r.capacity_source) for r in present if r.capacity]
    capacity, capacity_source = min(capacities) if capacities else (None, None)
    return Memory(per_rank=per_rank, max=mem_max, methods=methods, capacity=capacity,
                  capacity_source=capacity_source)


def ranks_of(ranks: list[RankReport | None]) -> list[RankResult]:
    """Each rank's status, phase, steps and losses, and the seconds between its time marks."""
    results = []
    for i, r in enumerate(ranks):
        if not r:
            results.append(RankResult(rank=i, status="missing"))
            continue
        spans = {f"{b}_s": r.times[b] - r.times[a] for a, b in zip(TIMELINE, TIMELINE[1:])
                 if a in r.times and b in r.times}
        results.append(RankResult(rank=i, status=r.status, phase=r.phase, error=r.error, host=r.host,
                                  node_rank=r.node_rank, device=r.device, step_time_s=r.step_time_s, loss=r.loss,
                                  warmup_loss=r.warmup_loss, timings_s=spans))
    return results


def overhead_of(prepared: Prepared, present: list[RankReport], completed, jit_built: list[str]) -> Overhead:
    """Where the wall time went around the timed steps (the slowest rank of each span)."""
    def span(start: str, end: str) -> float | None:
        return _max_or_none([r.span(start, end) for r in present])

    check = next((r.flop_check for r in present if r.rank == 0), None)
    now = time.time()
    # A sweep runs many trials in one dsx process: its trials count from their own start, not the process's.
    proc_start = process_start_time() if prepared.request.sweep is None else None
    warm = [sum(r.warmup_step_time_s) for r in present]
    timed = [sum(r.step_time_s) for r in present]
    ends = [r.times.get("end") for r in present]
    overhead = Overhead(
        dsx_startup_s=(prepared.entered_at - proc_start) if proc_start else None,
        prepare_s=completed.started - prepared.entered_at,
        launch_to_rank_start_s=(_max_or_none([r.times.get("process_start") for r in present]) - completed.started)
        if present else None,
        rank_import_s=span("process_start", "imported"),
        dist_init_s=span("imported", "distributed"),
        model_build_s=_max_or_none([r.times["model_built"] - r.times.get("flop_check_done", r.times["distributed"])
                                    for r in present if "model_built" in r.times and "distributed" in r.times]),
        flop_check_s=check.seconds if check else None,
        ds_initialize_s=span("model_built", "initialized"),
        jit_built=jit_built,
        warmup_s=max(warm) if warm else None,
        timed_s=max(timed) if timed else None,
        teardown_s=(completed.ended - _max_or_none(ends))
        if present and all(ends) and not completed.timed_out else None,
        total_s=(now - proc_start) if proc_start else now - prepared.entered_at,
        device_seconds=(completed.ended - completed.started) * prepared.world_size,
    )
    overhead.added_s = overhead.total_s - (overhead.warmup_s or 0.0) - (overhead.timed_s or 0.0)
    return overhead


_TORCH_OOM = re.compile(r"Tried to allocate ([\d.]+) ([KMG]iB).*?([\d.]+) ([KMG]iB) is reserved by PyTorch but "
                        r"unallocated", re.S)
_UNIT = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def fragmentation_note(error: str | None) -> str | None:
    """A note when torch's out-of-memory message shows more memory reserved but unallocated than the allocation
    that failed: the caching allocator's blocks were too fragmented to place it, the GPU was not full (llama-3b with
    Liger at ZeRO-1: 11.97 GiB asked for, 17.93 GiB reserved and free: bench/kernels/README.md)."""
    match = _TORCH_OOM.search(error or "")
    if not match:
        return None
    asked, spare = (float(match[i]) * _UNIT[match[i + 1]] for i in (1, 3))
    if spare < asked:
        return None
    return (f"out of memory with {match[3]} {match[4]} reserved by torch's caching allocator but unallocated, more "
            f"than the {match[1]} {match[2]} it failed to allocate: fragmentation, not a full GPU; "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in dsx's environment (the ranks inherit it) may fit "
            "this configuration")


def notes_of(prepared: Prepared, present: list[RankReport], completed, jit_built: list[str], status: str) -> list[str]:
    """dsx's notes, the ranks' notes and what dsx cleaned up, plus what the ranks' reports disagree on."""
    notes = list(dict.fromkeys(prepared.notes + [n for r in present for n in r.notes]
                               + getattr(completed, "cleaned", [])))
    seen = {r.params_seen for r in present if r.params_seen is not None}
    if prepared.params is not None and seen and seen != {prepared.params}:
        notes.append(f"the ranks' models hold {sorted(seen)} parameters, the meta-device count says "
                     f"{prepared.params}")
    if jit_built:
        notes.append(f"JIT-built during this run: {', '.join(jit_built)} (see overhead.ds_initialize_s)")
    if status == "oom":
        notes += [n for n in dict.fromkeys(fragmentation_note(r.error) for r in present if r.status == "oom") if n]
    if status == "ok" and (note := one_step_note(prepared.request, prepared.ds_config)):
        notes.append(note)
    if status == "ok":
        losses = [r.loss for r in present]
        if any(abs(a - b) > 1e-3 * max(1.0, abs(a)) for other in losses[1:] for a, b in zip(losses[0], other)):
            notes.append("ranks report different losses for the same step although each records the mean over "
                         "every replica")
    return notes


def one_step_note(request, ds_config: dict) -> str | None:
    """A run of one step never ran a forward/backward beside its optimizer's states: Adam (torch's, DeepSpeed's
    fused and CPU ones) makes them in its first step (bench/tools/memory_peak.sh: llama-8b's 4 layers, 34.9 GiB
    after one step, 49.2 after two)."""
    if request.steps + request.warmup != 1 or not ds_config.get("optimizer"):
        return None
    return ("only one step ran: the optimizer makes its states (Adam: 8 bytes a parameter of the rank's partition) "
            "in its first step, after that step's forward and backward, so memory.max is below what every later "
            "step holds (--warmup 1 measures it)")


def data_of(prepared: Prepared, present: list[RankReport], figures: Figures) -> DataInfo | None:
    """The row's `data`: the source and the slowest rank's wait for its batches in the timed steps."""
    spec = prepared.data
    if spec is None:
        return None
    warmup = prepared.request.warmup
    waits = [r.data_wait_s[warmup:] for r in present if len(r.data_wait_s) > warmup]
    median = None
    if waits and all(len(w) == len(waits[0]) for w in waits):
        median = statistics.median(max(w[i] for w in waits) for i in range(len(waits[0])))
    step = figures.step_time_s.median if figures.step_time_s else None
    return DataInfo(**spec.model_dump(include={"source", "path", "dtype", "seed", "tokens"}), label=spec.label,
                    global_batch=prepared.micro_batch * prepared.grad_accum * data_parallel(prepared),
                    wait_s_median=median,
                    wait_share=median / (median + step) if median is not None and step else None)


def nodes_of(prepared: Prepared, ranks: list[RankReport | None]) -> NodesInfo | None:
    """The hosts of a hostfile run, ranks per node and each host's summed peak RSS; None on one machine."""
    layout = prepared.layout
    if layout is None:
        return None
    hosts = list(layout.selection)
    rss: dict[str, int | None] = {}
    for placement in layout.ranks:
        r = ranks[placement.global_rank] if placement.global_rank < len(ranks) else None
        value = r.memory.get("host_rss_peak") if r else None
        if value is None:
            rss.setdefault(placement.host, None)
        else:
            rss[placement.host] = (rss.get(placement.host) or 0) + value
    return NodesInfo(hostfile=prepared.launch.argv[prepared.launch.argv.index("--hostfile") + 1],
                     launcher=prepared.request.launcher, hosts=hosts,
                     ranks_per_node=[len(slots) for slots in layout.selection.values()],
                     master_addr=prepared.launch.master_addr, host_rss_peak=rss)


def comm_of_run(prepared: Prepared, ranks: list[RankReport | None], figures: Figures):
    """The row's `comm` (dsx.comm): the ranks' counts, with dsx.comm.predict's figure for this config and model (not
    for a pipeline, whose stages also send activations; its all-gathers span a data-parallel group)."""
    from dsx.comm import comm_of, param_facts, predict
    from dsx.comm.predict import ulysses_bytes_of
    from dsx.results import CommPredicted

    replicas = data_parallel(prepared)
    per_node = max(len(s) for s in prepared.layout.selection.values()) if prepared.layout is not None else None
    expected = ulysses_bytes_of(prepared.ds_config, prepared.resolved, prepared.micro_batch, prepared.grad_accum,
                                _act_ckpt(prepared))
    predicted = None
    try:
        if replicas == prepared.world_size or expected:  # Ulysses: ZeRO spans every rank, and the all-to-alls
            predicted = CommPredicted(**predict(prepared.ds_config, param_facts(prepared.resolved),
                                                prepared.world_size, prepared.grad_accum, per_node,
                                                all_to_all_bytes=expected,
                                                checkpointed=_act_ckpt(prepared)).as_dict())
    except Exception as exc:  # the prediction is informative only; never lose the row over it
        prepared.notes.append(f"communication prediction unavailable: {exc}")
    times = figures.step_time_s.all if figures.step_time_s else None
    comm = comm_of(ranks, replicas, prepared.params, times, predicted)
    if expected and comm is not None and comm.collectives.get("all_to_all_single"):  # None: no rank counted
        measured = comm.collectives["all_to_all_single"].bytes_per_step
        comm.notes.append(f"Ulysses all-to-alls: {measured:,.0f} bytes/step measured, {expected:,.0f} predicted "
                          f"(x{measured / expected:.2f}; dsx.comm.predict.ulysses_all_to_all_bytes)")
    return comm


def _act_ckpt(prepared) -> bool:
    return bool(prepared.rank_plan.toggles.act_ckpt) if prepared.rank_plan is not None else False


def gather(prepared: Prepared, completed, python_loop_probes: tuple[float, ...] = ()) -> RunRow:
    """The row of a finished (or failed, or killed) launch (dsx.processes.Completed), from every rank's last
    report; python_loop_probes: the host's Python speed before, during and after the launch (dsx.host)."""
    request, resolved, world = prepared.request, prepared.resolved, prepared.world_size
    probes = [round(ns, 2) for ns in python_loop_probes]
    jit_built = completed.jit_built
    ranks = [read_rank_report(prepared.run_dir, r) for r in range(world)]
    present = [r for r in ranks if r]
    status, error = status_of(prepared, ranks, completed)
    gpu_name = next((r.gpu_name for r in present if r.gpu_name), None) or (
        prepared.gpu_names[0] if prepared.gpu_names else None)
    figures = figures_of(prepared, ranks, status, gpu_name)
    memory = memory_of(present)
    comm = comm_of_run(prepared, ranks, figures)
    versions = {"python": platform.python_version(), **package_versions()}
    ran = next((r.versions for r in present if r.versions), None) or {}
    versions.update({k: v for k, v in ran.items() if v})  # the ranks' own (a --python lane's)
    return RunRow(
        run_id=prepared.run_id, time=prepared.started_utc, host=socket.gethostname(),
        host_cpu=HostCpu(model=cpu_model(), cpus=cpu_count(),
                         python_loop_ns=speed_of(probes) if probes else None,
                         python_loop_probes=probes),
        device=prepared.device,
        gpu_name=gpu_name, gpu_count=world if prepared.device == "cuda" else 0,
        versions=Versions(**versions),
        ds_config=prepared.ds_config, ds_config_hash=config_hash(prepared.ds_config),
        ds_config_source=prepared.ds_config_source,
        model=ModelInfo(preset=resolved.name, family=resolved.family, task=resolved.task,
                        overrides=dict(request.overrides), params=prepared.params, seq_len=resolved.seq_len,
                        vocab_pad=resolved.vocab_pad,
                        dims={k: v for k, v in resolved.describe().items()
                              if k not in ("name", "family", "task", "overrides", "seq_len", "vocab_pad")}),
        micro_batch=prepared.micro_batch, grad_accum=prepared.grad_accum, world_size=world,
        precision=prepared.precision, steps=request.steps, warmup=request.warmup,
        toggles=Toggles(tf32=request.tf32, compile=request.compile, attn=request.attn, act_ckpt=request.act_ckpt,
                        act_ckpt_offload=request.act_ckpt_offload, tiled_mlp=request.tiled_mlp,
                        **(prepared.rank_plan.toggles.model_dump(include={"kernels", "liger_fused_loss", "fp8"})
                           if prepared.rank_plan else {}),
                        **({"loss": prepared.rank_plan.toggles.loss,
                            "loss_tile_tokens": prepared.rank_plan.toggles.loss_tile_tokens}
                           if prepared.rank_plan and prepared.rank_plan.toggles.loss != "plain" else {})),
        figures=figures, memory=memory, ranks=ranks_of(ranks), status=status, error=error,
        notes=notes_of(prepared, present, completed, jit_built, status),
        overhead=overhead_of(prepared, present, completed, jit_built), memory_cap=request.memory_cap,
        trial_key=prepared.trial_key or None, sweep=SweepInfo(**request.sweep) if request.sweep else None,
        nodes=nodes_of(prepared, ranks), command=list(request.command), run_dir=str(prepared.run_dir),
        sparse_attention=SparseAttentionInfo(**prepared.sparse.info) if prepared.sparse is not None else None,
        pipeline=pipeline_row(prepared, ranks, memory),
        comm=comm, python=prepared.lane.python if prepared.lane else None, data=data_of(prepared, present, figures),
    )
