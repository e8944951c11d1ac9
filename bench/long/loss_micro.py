"""The LM head + loss alone, forward and backward, on one GPU: the plain head, dsx's tiled loss (autograd per tile,
as dsx runs it) and an in-place variant of it, Liger's fused linear cross-entropy. Which costs what, before an
end-to-end pair.

    python3 bench/long/loss_micro.py [--tokens 8192] [--hidden 2048] [--vocab 128256] [--out rows.jsonl]

Each variant: 5 warm-up calls, then 20 timed between CUDA synchronisations (median, ms); peak allocated above the
inputs; the loss and both gradients against the plain head's (max relative difference). bf16 weights and hidden
states, fp32 loss, as dsx's ranks run them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from dsx.rank.tiled_loss import IGNORE_INDEX, default_tile_tokens, tiled_head_loss


def plain(hidden, weight, labels):
    logits = torch.nn.functional.linear(hidden, weight).float()
    return torch.nn.functional.cross_entropy(logits, labels, ignore_index=-100)


def in_place_tiles(tile: int):
    """A variant tried on 2026-11-28 and measured slower than dsx's autograd tiles (bench/long/README.md): each tile's
    cross-entropy gradient computed in place on its fp32 logits (softmax - one-hot) without autograd, the weight
    gradient accumulated in fp32 inside the GEMM (addmm out_dtype, CUDA)."""
    def one_tile(hidden, weight, labels, grad_hidden, grad_weight):
        logits = torch.nn.functional.linear(hidden, weight).float()
        valid = labels != IGNORE_INDEX
        safe = labels.clamp(min=0).unsqueeze(1)
        lse = torch.logsumexp(logits, dim=1, keepdim=True)
        loss = ((lse - logits.gather(1, safe)).squeeze(1) * valid).sum()
        grad = logits.sub_(lse).exp_()
        grad.scatter_add_(1, safe, -valid.to(grad.dtype).unsqueeze(1))
        grad.mul_(valid.unsqueeze(1))
        grad = grad.to(weight.dtype)
        torch.mm(grad, weight, out=grad_hidden)
        torch.addmm(grad_weight, grad.t(), hidden, out_dtype=grad_weight.dtype, out=grad_weight)
        return loss

    class Tiles(torch.autograd.Function):
        @staticmethod
        def forward(ctx, hidden, weight, labels):
            total = torch.zeros((), dtype=torch.float32, device=hidden.device)
            grad_hidden = torch.empty_like(hidden)
            grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
            for start in range(0, hidden.shape[0], tile):
                end = start + tile
                total += one_tile(hidden[start:end], weight, labels[start:end], grad_hidden[start:end], grad_weight)
            count = (labels != IGNORE_INDEX).sum()
            ctx.save_for_backward(grad_hidden, grad_weight, count)
            ctx.dtype = weight.dtype
            return total / count

        @staticmethod
        def backward(ctx, grad):
            gh, gw, count = ctx.saved_tensors
            scale = grad.float() / count
            return gh * scale.to(gh.dtype), (gw * scale).to(ctx.dtype), None

    return lambda hidden, weight, labels: Tiles.apply(hidden, weight, labels)


def liger():
    from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

    loss = LigerFusedLinearCrossEntropyLoss()
    return lambda hidden, weight, labels: loss(weight, hidden, labels)


def measure(name, fn, hidden, weight, labels, reference=None):
    def call():
        h = hidden.detach().requires_grad_(True)
        w = weight.detach().requires_grad_(True)
        loss = fn(h, w, labels)
        loss.backward()
        return loss.detach(), h.grad, w.grad

    for _ in range(5):
        call()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    times = []
    for _ in range(20):
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = call()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() - base
    row = {"variant": name, "ms": round(statistics.median(times) * 1e3, 3), "min_ms": round(min(times) * 1e3, 3),
           "peak_extra_gib": round(peak / 2**30, 3)}
    if reference is not None:
        for key, got, want in zip(("loss", "grad_hidden", "grad_weight"), result, reference):
            row[f"{key}_max_rel_diff"] = float(((got.float() - want.float()).abs().max()
                                                 / want.float().abs().max()).item())
    print(json.dumps(row), flush=True)
    return row, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device("cuda")
    hidden = torch.randn(args.tokens, args.hidden, device=device, dtype=torch.bfloat16)
    weight = torch.randn(args.vocab, args.hidden, device=device, dtype=torch.bfloat16) * args.hidden ** -0.5
    labels = torch.randint(0, args.vocab, (args.tokens,), device=device)
    default = default_tile_tokens(args.vocab)
    rows = []
    row, reference = measure("plain", plain, hidden, weight, labels)
    rows.append(row)
    for tile in sorted({default, 2048, 4096}):
        rows.append(measure(f"tiled (autograd tiles, tile {tile})",
                            lambda h, w, y, t=tile: tiled_head_loss(h, w, y, t), hidden, weight, labels,
                            reference)[0])
        rows.append(measure(f"tiled (fused tiles, tile {tile})", in_place_tiles(tile), hidden, weight, labels,
                            reference)[0])
    try:
        rows.append(measure("liger fused linear cross-entropy", liger(), hidden, weight, labels, reference)[0])
    except ImportError as exc:
        print(f"liger: not installed ({exc})")
    rows.append(measure("plain (again)", plain, hidden, weight, labels, reference)[0])
    meta = {"tokens": args.tokens, "hidden": args.hidden, "vocab": args.vocab, "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__}
    if args.out:
        with open(args.out, "a") as out:
            for row in rows:
                out.write(json.dumps({**meta, **row}) + "\n")


if __name__ == "__main__":
    main()
