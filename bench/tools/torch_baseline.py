"""Plain-PyTorch training baseline for a dsx model preset: the number `dsx run` is compared against.

Same model definition as `dsx run` (dsx.models: a transformers model from config, random init, synthetic
tokens), trained the way a careful single-GPU PyTorch script would: bf16 autocast with fp32 master weights,
fused AdamW, optional torch.compile. Warm-up steps, then timed steps between CUDA synchronisations; median.

    python bench/tools/torch_baseline.py --model gpt2 --vocab-pad 64 --micro-batch 16 --compile --out row.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from dsx.flops import model_flops_per_token
from dsx.gpus import peak_tflops
from dsx.models import assume_unpacked_batches, build_model, count_params, resolve_model, synthetic_batch


def make_step(resolved, batch: dict, *, compile: bool, attn: str, lr: float, device: torch.device):
    """The baseline's model and step: fp32 weights, bf16 autocast, fused AdamW (on CUDA), optional torch.compile.
    Returns (forward, backward, optimizer_step), called in that order for one step (bench/tools/step_profile.py times
    them apart)."""
    torch.manual_seed(0)
    model = build_model(resolved, attn=attn, device=device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=device.type == "cuda")
    step_model = torch.compile(model) if compile else model

    def forward():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            return step_model(**batch).loss

    def backward(loss):
        loss.backward()

    def optimizer_step():
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return forward, backward, optimizer_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--seq-len", type=int, default=None)
    parser.add_argument("--vocab-pad", type=int, default=None)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--attn", default="sdpa")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    assume_unpacked_batches()  # as dsx's ranks: synthetic_batch is one whole sequence per row
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    device = torch.device("cuda")
    resolved = resolve_model(args.model, seq_len=args.seq_len, vocab_pad=args.vocab_pad)
    generator = torch.Generator().manual_seed(0)
    batch = {k: v.to(device) for k, v in synthetic_batch(resolved, args.micro_batch, "cpu", generator).items()}
    forward, backward, optimizer_step = make_step(resolved, batch, compile=args.compile, attn=args.attn, lr=args.lr,
                                                  device=device)

    def step() -> float:
        loss = forward()
        backward(loss)
        optimizer_step()
        return loss

    times, losses = [], []
    for i in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
            losses.append(float(loss))
    median = statistics.median(times)
    tokens = args.micro_batch * resolved.seq_len
    flops_per_token = model_flops_per_token(resolved)
    tflops = tokens / median * flops_per_token / 1e12
    gpu = torch.cuda.get_device_name()
    peak = peak_tflops(gpu, "bf16")
    row = {
        "setup": "plain PyTorch, bf16 autocast, fused AdamW" + (", torch.compile" if args.compile else ""),
        "model": args.model, "params": count_params(resolved), "seq_len": resolved.seq_len,
        "vocab_size": resolved.vocab_size, "micro_batch": args.micro_batch, "attn": args.attn,
        "gpu": gpu, "torch": torch.__version__, "steps": args.steps, "warmup": args.warmup,
        "step_time_s": {"median": median, "min": min(times), "max": max(times)},
        "tokens_per_s": tokens / median, "flops_per_token": flops_per_token, "model_tflops_per_s": tflops,
        "mfu": tflops / peak if peak else None, "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
        "losses": losses,
    }
    text = json.dumps(row)
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
