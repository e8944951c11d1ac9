"""Liger Kernel inside a compiled DeepSpeed step: which of its kernels crash, and whether keeping them out of the
compiled graph runs (issue 33; dsx refuses `--kernels liger --compile` after an H100's CUDA illegal memory access,
bench/kernels/README.md part 3).

Each variant runs in its own process (an illegal memory access poisons the CUDA context): dsx's llama preset built
as a rank builds it, the chosen Liger kernels patched in as dsx.rank.kernels patches them, deepspeed.initialize with
ZeRO-1, bf16 and torch's fused AdamW, engine.compile() (dsx's --compile), then warm-up and timed steps on one fixed
batch, a device synchronisation around each. A variant is a comma-separated list of rope, rms, swiglu, flce
(none: no Liger), with ':eager' to wrap each Liger autograd Function's apply in torch.compiler.disable (a graph
break around each Liger kernel: the kernel runs as it does uncompiled, the rest is compiled). One JSON line per
variant: status ok / crash / timeout, step ms (median of the timed steps), per-step losses, peak allocated GiB.

    python bench/kernels/liger_compile.py OUT.jsonl VARIANT [VARIANT ...]     # on one GPU, from the repo root
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

KERNELS = ("rope", "rms", "swiglu", "flce")
LIGER_FUNCTIONS = {"rope": ("liger_kernel.ops.rope", "LigerRopeFunction"),
                   "rms": ("liger_kernel.ops.rms_norm", "LigerRMSNormFunction"),
                   "swiglu": ("liger_kernel.ops.swiglu", "LigerSiLUMulFunction"),
                   "flce": ("liger_kernel.ops.fused_linear_cross_entropy", "LigerFusedLinearCrossEntropyFunction")}


def parse(variant: str) -> tuple[list[str], bool]:
    names, _, mode = variant.partition(":")
    kernels = [] if names == "none" else names.split(",")
    if any(k not in KERNELS for k in kernels) or mode not in ("", "eager"):
        raise SystemExit(f"bad variant {variant!r}: kernels from {KERNELS} or none, then optionally ':eager'")
    return kernels, mode == "eager"


def where_it_failed(output: str) -> str:
    """The frames of a failed child's last traceback that name Liger's or the compiled code's files, and its error
    line: what the row keeps of a crash."""
    lines = [line.strip() for line in output.splitlines()]
    frames = [line for line in lines if line.startswith("[rank0]:   File") or line.startswith("File")]
    errors = [line for line in lines if "Error" in line and "File" not in line]
    keep = [f for f in frames if "liger_kernel" in f or "torchinductor" in f or "/tmp/" in f][-12:]
    return "\n".join(keep + errors[-3:])[-4000:]


def run_variant(variant: str, model_name: str, seq: int, micro_batch: int, warmup: int, steps: int) -> dict:
    """One variant, in this process (the child)."""
    import importlib

    import deepspeed
    import torch

    from dsx.host import as_one_rank
    from dsx.models import assume_unpacked_batches, build_model, resolve_model, synthetic_batch

    kernels, eager = parse(variant)
    as_one_rank()
    assume_unpacked_batches()
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    resolved = resolve_model(model_name, {}, seq_len=seq, vocab_pad=None)
    batch = {k: v.to(device) for k, v in
             synthetic_batch(resolved, micro_batch, "cpu", torch.Generator().manual_seed(0)).items()}
    torch.manual_seed(0)
    model = build_model(resolved, attn="sdpa", device=device)
    if kernels:
        import liger_kernel.transformers as liger_transformers

        liger_transformers.apply_liger_kernel_to_llama(
            rope="rope" in kernels, rms_norm="rms" in kernels, swiglu="swiglu" in kernels, cross_entropy=False,
            fused_linear_cross_entropy="flce" in kernels, model=model)
        if eager:
            for kernel in kernels:
                module, name = LIGER_FUNCTIONS[kernel]
                function = getattr(importlib.import_module(module), name)
                function.apply = staticmethod(torch.compiler.disable(function.apply))
    config = {"train_micro_batch_size_per_gpu": micro_batch, "gradient_accumulation_steps": 1,
              "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}, "gradient_clipping": 1.0,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True, "fused": True}}}
    deepspeed.init_distributed()
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=list(model.parameters()), config=config)
    engine.compile()
    engine.train()
    times, losses = [], []
    for step in range(warmup + steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = engine(**batch).loss
        engine.backward(loss)
        engine.step()
        torch.cuda.synchronize()
        losses.append(float(loss))
        if step >= warmup:
            times.append(time.perf_counter() - start)
    return {"step_ms": statistics.median(times) * 1e3, "step_ms_all": [t * 1e3 for t in times], "loss": losses,
            "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        variant, model, seq, mb, warmup, steps = sys.argv[2], sys.argv[3], *map(int, sys.argv[4:8])
        print("RESULT " + json.dumps(run_variant(variant, model, seq, mb, warmup, steps)), flush=True)
        return 0
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, variants = sys.argv[1], sys.argv[2:]
    for variant in variants:
        parse(variant)
    model, seq, mb = os.environ.get("MODEL", "llama-1b"), os.environ.get("SEQ", "2048"), os.environ.get("MB", "8")
    warmup, steps, timeout = os.environ.get("WARMUP", "2"), os.environ.get("STEPS", "5"), float(
        os.environ.get("RUN_S", "150"))
    import torch
    import deepspeed
    versions = {"torch": torch.__version__, "deepspeed": deepspeed.__version__,
                "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    try:
        import liger_kernel  # noqa: F401
        from importlib.metadata import version
        versions["liger_kernel"] = version("liger-kernel")
        versions["triton"] = version("triton")
    except ImportError:
        pass
    for variant in variants:
        command = [sys.executable, __file__, "--child", variant, model, seq, mb, warmup, steps]
        started = time.time()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
            result = next((json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("RESULT ")),
                          None)
            status = "ok" if result else "crash"
            if not result:  # the whole output of a crash beside the rows, for the frames where_it_failed drops
                with open(f"{out}.{variant.replace(',', '+').replace(':', '-')}.err", "w") as f:
                    f.write(done.stdout + done.stderr)
            tail = "" if result else where_it_failed(done.stderr or done.stdout)
        except subprocess.TimeoutExpired:
            result, status, tail = None, "timeout", f"over {timeout:g} s"
        row = {"variant": variant, "status": status, "model": model, "seq": int(seq), "micro_batch": int(mb),
               "wall_s": round(time.time() - started, 1), **(result or {}), "error_tail": tail or None,
               "versions": versions, "command": " ".join(sys.argv)}
        print(json.dumps({k: v for k, v in row.items() if k not in ("error_tail", "versions")}), flush=True)
        if tail:
            print(tail, flush=True)
        with open(out, "a") as f:
            f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
