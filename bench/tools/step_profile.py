"""Where one training step's time goes, for the plain-PyTorch baseline (bench/tools/torch_baseline.py's step) and for a
DeepSpeed engine step (dsx/rank/loop.py's step), on the same model, batch and GPU, in one process.

`dsx run` measures how fast a configuration is; this says why it is not faster. For each setup, after warm-up:
- step ms: the median wall time of a whole step, synchronised on both sides only (as `dsx run` times it);
- phase ms: forward, backward and optimizer step timed separately, synchronised between phases (medians);
- GPU kernel ms by kind and GPU idle ms, per step, from torch.profiler over a few more steps: idle time is
  the part of the step in which no kernel ran (host-side work the GPU waited for).

    python bench/tools/step_profile.py --model gpt2 --vocab-pad 64 --micro-batch 32 --compile \\
        --ds-config ds.json --out profile.jsonl

Under torchrun (WORLD_SIZE > 1, --only deepspeed) every rank runs the engine step on GPU LOCAL_RANK, data-parallel as
the config says (its train_batch_size: micro-batch x ranks x grad-accum), and rank 0 writes one row per rank: where a
ZeRO stage's step goes on several GPUs against one (collectives, the per-tensor work each rank does).

Causal masks stay plain under compile (dsx.models.assume_unpacked_batches, as in a rank; --transformers-masks: not).
--set KEY=VALUE changes the model's config as `dsx run --set` does, --act-ckpt checkpoints activations as a rank does,
and --sparse MODE builds the model with dsx's block-sparse attention (that DeepSpeed layout in 128-token blocks, the
config parser's other defaults, compiled FlexAttention: CUDA) as `dsx run --sparse-attention MODE` does.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time

import torch
from torch_baseline import make_step  # bench/tools/ is on the path when this script runs

from dsx.models import assume_unpacked_batches, build_model, parse_overrides, resolve_model, synthetic_batch
from dsx.host import as_one_rank

# Kernel kinds, matched in order on the kernel's name (cuBLAS/CUTLASS names vary by version, hence the list).
KINDS = (
    ("attention", r"flex_attention|flex_decoding"),  # FlexAttention's Triton templates, before other Triton kernels
    ("compiled (triton)", r"^triton"),  # first: inductor names fused kernels after their ops (to_copy, cat, ...)
    ("attention", r"flash|fmha|attention|mem_eff|sdpa"),  # before matmul: cuDNN's attention kernels say wgmma
    ("matmul", r"gemm|cutlass|nvjet|xmma|cublas|wgmma"),
    ("optimizer", r"adam|multi_tensor|foreach"),
    ("collective", r"nccl"),
    ("copy/fill", r"copy|memcpy|memset|fill|cat|CatArray"),
    ("norm/reduce", r"norm|reduce"),
)

HOST_WAITS = re.compile(r"^(cuda(Stream|Device|Event)Synchronize|cudaStreamWaitEvent|cudaMemcpy(Async)?|"
                        r"aten::_local_scalar_dense|aten::item)$")
"""CPU-side events where the host may wait for the GPU (counted and timed per step by kernel_summary)."""


def kind_of(kernel: str) -> str:
    """The first kind whose pattern the kernel's name matches."""
    for kind, pattern in KINDS:
        if re.search(pattern, kernel, re.IGNORECASE):
            return kind
    return "other elementwise"


def kernel_summary(prof, steps: int, wall_s: float) -> dict:
    """GPU kernel time per step by kind, and the idle part of the profiled wall time (merged kernel intervals)."""
    # Device-side user annotations (e.g. "Optimizer.step#AdamW.step") are ranges over kernels, not kernels.
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and not getattr(e, "is_user_annotation", False)]
    by_kind: dict[str, float] = {}
    by_name: dict[str, float] = {}
    intervals = []
    for e in kernels:
        start, end = e.time_range.start, e.time_range.end
        kind, name = kind_of(e.name), e.name[:100]
        by_kind[kind] = by_kind.get(kind, 0.0) + (end - start) / 1e3
        by_name[name] = by_name.get(name, 0.0) + (end - start) / 1e3
        intervals.append((start, end))
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:15]
    # the host waiting on the GPU: where it cannot run ahead of the kernels (ZeRO-3's hooks hide behind them only if
    # it can); .item() and copies to the host wait too, through these calls
    waits: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CPU and HOST_WAITS.search(e.name):
            count_ms = waits.setdefault(e.name, [0, 0.0])
            count_ms[0] += 1
            count_ms[1] += e.cpu_time_total / 1e3
    busy_us, last_end = 0.0, None
    for start, end in sorted(intervals):
        if last_end is None or start > last_end:
            busy_us += end - start
            last_end = end
        elif end > last_end:
            busy_us += end - last_end
            last_end = end
    busy_ms = busy_us / 1e3 / steps
    return {"user_annotations": "excluded", "kernels_per_step": len(kernels) / steps,
            "kernel_ms_per_step": {k: round(v / steps, 3) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
            "gpu_busy_ms_per_step": round(busy_ms, 3),
            "gpu_idle_ms_per_step": round(wall_s * 1e3 / steps - busy_ms, 3),
            "top_kernels_ms_per_step": [[name, kind_of(name), round(ms / steps, 3)] for name, ms in top],
            "host_waits_per_step": {name: [count / steps, round(ms / steps, 3)]
                                    for name, (count, ms) in sorted(waits.items(), key=lambda kv: -kv[1][1])}}


def measure(name: str, forward, backward, optimizer_step, device, warmup: int, steps: int,
            profile_steps: int) -> dict:
    """Time `steps` whole steps, `steps` phase-split steps, then profile `profile_steps` steps."""
    on_cuda = device.type == "cuda"

    def sync():
        if on_cuda:
            torch.cuda.synchronize(device)

    def whole_step():
        loss = forward()
        backward(loss)
        optimizer_step()
        return loss

    for _ in range(warmup):
        whole_step()
    sync()
    step_ms, phases = [], {"forward": [], "backward": [], "step": []}
    for _ in range(steps):
        sync()
        start = time.perf_counter()
        whole_step()
        sync()
        step_ms.append((time.perf_counter() - start) * 1e3)
    for _ in range(steps):
        sync()
        t0 = time.perf_counter()
        loss = forward()
        sync()
        t1 = time.perf_counter()
        backward(loss)
        sync()
        t2 = time.perf_counter()
        optimizer_step()
        sync()
        t3 = time.perf_counter()
        for phase, ms in zip(phases, ((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3)):
            phases[phase].append(ms)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if on_cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    sync()
    with torch.profiler.profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(profile_steps):
            whole_step()
        sync()
        profiled_wall = time.perf_counter() - start
    row = {"setup": name, "step_ms": round(statistics.median(step_ms), 3),
           "phase_ms": {k: round(statistics.median(v), 3) for k, v in phases.items()},
           "profiled_steps": profile_steps, "profiled_step_ms": round(profiled_wall * 1e3 / profile_steps, 3)}
    if on_cuda:
        row.update(kernel_summary(prof, profile_steps, profiled_wall))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--seq-len", type=int, default=None)
    parser.add_argument("--vocab-pad", type=int, default=None)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--compile", action="store_true", help="torch.compile (baseline), engine.compile() (DeepSpeed)")
    parser.add_argument("--ds-config", required=True, help="DeepSpeed config JSON for the engine step")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--profile-steps", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--only", choices=("both", "baseline", "deepspeed"), default="both",
                        help="profile one setup only (a model too large for both in one process)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="sets",
                        help="model config override, as dsx run --set (JSON values)")
    parser.add_argument("--act-ckpt", action="store_true", help="activation checkpointing, as dsx run --act-ckpt")
    parser.add_argument("--sparse", default=None, metavar="MODE",
                        help="dsx's block-sparse attention with this DeepSpeed layout (128-token blocks)")
    parser.add_argument("--transformers-masks", action="store_true",
                        help="keep transformers' own mask functions, which dsx's ranks replace (the A/B of "
                             "dsx.models.assume_unpacked_batches)")
    parser.add_argument("--out", default=None, help="append one JSON line per setup")
    args = parser.parse_args()
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1 and args.only != "deepspeed":
        parser.error("several ranks (WORLD_SIZE > 1) profile the DeepSpeed step only: add --only deepspeed")
    if not args.transformers_masks:
        assume_unpacked_batches()  # as a rank does: synthetic_batch is one whole sequence per row

    on_cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if on_cuda else torch.device("cpu")
    if on_cuda:
        torch.cuda.set_device(device)
    overrides = parse_overrides(args.sets)
    resolved = resolve_model(args.model, overrides, seq_len=args.seq_len, vocab_pad=args.vocab_pad)
    batch = {k: v.to(device) for k, v in
             synthetic_batch(resolved, args.micro_batch, "cpu", torch.Generator().manual_seed(0)).items()}
    common = {"model": args.model, "micro_batch": args.micro_batch, "seq_len": resolved.seq_len,
              "compile": args.compile, "act_ckpt": args.act_ckpt, "sparse": args.sparse, "overrides": overrides,
              "transformers_masks": args.transformers_masks,
              "device": torch.cuda.get_device_name(device) if on_cuda else "cpu", "world_size": world,
              "torch": torch.__version__}
    rows = []

    if args.only != "deepspeed" and (args.sparse or args.act_ckpt):
        parser.error("--sparse and --act-ckpt apply to the DeepSpeed step: add --only deepspeed")
    if args.only != "deepspeed":
        rows.append(profile_baseline(args, resolved, batch, device) | common)
    if args.only != "baseline":
        rows.append(profile_deepspeed(args, resolved, batch, device) | common)
    if world > 1:  # rank 0 writes every rank's row
        import torch.distributed as dist

        gathered = [None] * world
        dist.all_gather_object(gathered, rows[0] | {"rank": rank})
        if rank:
            return
        rows = gathered
    for row in rows:
        text = json.dumps(row)
        print(text)
        if args.out:
            with open(args.out, "a") as f:
                f.write(text + "\n")


def profile_baseline(args, resolved, batch, device) -> dict:
    """The baseline's step, as bench/tools/torch_baseline.py runs it."""
    forward, backward, optimizer_step = make_step(resolved, batch, compile=args.compile, attn="sdpa", lr=args.lr,
                                                  device=device)
    label = ("plain PyTorch (autocast bf16, " + ("fused AdamW" if device.type == "cuda" else "AdamW")
             + (", torch.compile)" if args.compile else ")"))
    row = measure(label, forward, backward, optimizer_step, device, args.warmup, args.steps, args.profile_steps)
    del forward, backward, optimizer_step  # the model and optimizer live in these closures
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def profile_deepspeed(args, resolved, batch, device) -> dict:
    """The DeepSpeed engine step, as dsx/rank/loop.py runs it: one rank without a launcher, or torchrun's ranks."""
    as_one_rank()
    import deepspeed

    deepspeed.init_distributed()
    ds_config = json.loads(open(args.ds_config).read())
    torch.manual_seed(0)
    model = build_model(resolved, attn=attention(args, resolved), device=device)
    if args.act_ckpt:  # as dsx/rank/loop.py enables it
        from dsx.rank.memory_savers import enable_checkpointing

        enable_checkpointing(model)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=list(model.parameters()), config=ds_config)
    if args.compile:
        engine.compile()
    engine.train()
    label = ("DeepSpeed " + deepspeed.__version__ + (", engine.compile()" if args.compile else "")
             + (", checkpointing" if args.act_ckpt else "")
             + (f", {args.sparse} sparse attention" if args.sparse else ""))
    return measure(label,
                   lambda: engine(**batch).loss, engine.backward, engine.step, device, args.warmup, args.steps,
                   args.profile_steps) | {"ds_config": ds_config}


def attention(args, resolved) -> str:
    """The attn_implementation to build with: SDPA, or dsx's sparse attention registered as a rank registers it
    (compiled: its masks built first, so FlexAttention joins the model's graph, as dsx.rank.model does)."""
    if not args.sparse:
        return "sdpa"
    from dsx.sparse.attention import activate, from_plan
    from dsx.sparse.spec import SparsePlan, block_dict, block_model

    block = block_dict(block_model({"mode": args.sparse, "block": 128}))
    sparse = from_plan(SparsePlan(block=block, seed=1234, kernel="flex"), resolved.num_heads, resolved.seq_len)
    if args.compile:
        sparse.prepare(resolved.seq_len, torch.device("cuda", 0))  # the device main() puts the batch on
    return activate(sparse)


if __name__ == "__main__":
    main()
