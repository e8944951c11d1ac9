"""One attention call, forward + backward, of dsx's sparse attention (dsx.sparse.attention: a DeepSpeed layout,
bigbird unless --mode names another, as a FlexAttention BlockMask, compiled) against dense causal SDPA, at the
shape of one gpt2-medium layer (batch 1, 16 heads, head dim 64, bf16): the kernel alone, without the model around
it, to tell the kernel's speed-up from the end-to-end one (bench/sparse/README.md). CUDA only.

    PYTHONPATH=. python3 bench/sparse/kernel.py [--mode MODE] [SEQ ...]   (default 4096 8192 16384 32768 65536)

Per sequence length: warm-up (compilation) then 20 timed calls between device synchronisations, median; one JSON
line each, then a table."""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch

from dsx.sparse.attention import SparseAttention
from dsx.sparse.layouts import make_layout
from dsx.sparse.spec import block_model

HEADS, HEAD_DIM, BLOCK = 16, 64, 128


def timed(fn, repeats: int = 20) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(seqs: list[int], mode: str = "bigbird") -> None:
    import random

    device = torch.device("cuda")
    lines = []
    for seq in seqs:
        params = block_model({"mode": mode, "block": BLOCK})  # the parser's other defaults, as h100.sh runs it
        layout = make_layout(params, HEADS, seq, rng=random.Random(1234), compact=True)
        sparse = SparseAttention(layout=layout, block=BLOCK, unidirectional=False, kernel="flex")
        q, k, v = (torch.randn(1, HEADS, seq, HEAD_DIM, device=device, dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        grad = torch.randn(1, HEADS, seq, HEAD_DIM, device=device, dtype=torch.bfloat16)

        def dense():
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            out.backward(grad)

        def flex():
            out = sparse.attend(q, k, v, None, HEAD_DIM ** -0.5, True)
            out.backward(grad)

        result = {"seq": seq, "dense_ms": timed(dense) * 1e3, "flex_ms": timed(flex) * 1e3,
                  "tiles": sparse.kept_tiles(seq, True), "mode": mode, "torch": torch.__version__,
                  "gpu": torch.cuda.get_device_name(device)}
        result["speedup"] = result["dense_ms"] / result["flex_ms"]
        print(json.dumps(result), flush=True)
        lines.append(result)
    print(f"| seq | dense SDPA fwd+bwd ms | {mode} flex fwd+bwd ms | kept 128-tiles | speed-up |")
    print("|---|---|---|---|---|")
    for r in lines:
        print(f"| {r['seq']:,} | {r['dense_ms']:.2f} | {r['flex_ms']:.2f} | {r['tiles']:,} | {r['speedup']:.2f}x |")


if __name__ == "__main__":
    argv = sys.argv[1:]
    chosen = "bigbird"
    if argv[:1] == ["--mode"]:
        chosen, argv = argv[1], argv[2:]
    main([int(x) for x in argv] or [4096, 8192, 16384, 32768, 65536], chosen)
