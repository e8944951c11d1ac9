"""One attention call, forward + backward, of dsx's sparse attention (dsx.sparse.attention: a DeepSpeed layout,
bigbird unless --mode names another, as a FlexAttention BlockMask, compiled) against dense causal SDPA, at the
shape of one gpt2-medium layer (batch 1, 16 heads, head dim 64, bf16): the kernel alone, without the model around
it, to tell the kernel's speed-up from the end-to-end one (bench/sparse/README.md). CUDA only.

    PYTHONPATH=. python3 bench/sparse/kernel.py [--mode MODE] [SEQ ...]   (default 4096 8192 16384 32768 65536)
    PYTHONPATH=. python3 bench/sparse/kernel.py --variants [--mode MODE] SEQ ...
    PYTHONPATH=. python3 bench/sparse/kernel.py --tiles [--mode MODE] SEQ ...

Per sequence length: warm-up (compilation) then 20 timed calls between device synchronisations, median; one JSON
line each, then a table. --variants times FlexAttention's own settings at one length instead (VARIANTS: its
kernel_options, and inductor's max-autotune over its tile configurations), each against the default settings' output
and gradients (largest absolute difference), to tell whether dsx leaves kernel speed on the table; --tiles only
inductor's default tiles against dsx's (dsx.sparse.attention.TUNED_TILES, what a run uses on this GPU)."""

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


VARIANTS = (  # (label, FlexAttention kernel_options, torch.compile mode)
    ("default", {}, None),
    ("ROWS_GUARANTEED_SAFE", {"ROWS_GUARANTEED_SAFE": True}, None),
    ("USE_TMA", {"USE_TMA": True}, None),
    ("fwd 128x64", {"fwd_BLOCK_M": 128, "fwd_BLOCK_N": 64}, None),
    ("fwd 128x128 w8", {"fwd_BLOCK_M": 128, "fwd_BLOCK_N": 128, "fwd_num_warps": 8}, None),
    ("bwd 64/128/128/64 w8", {"bwd_BLOCK_M1": 64, "bwd_BLOCK_N1": 128, "bwd_BLOCK_M2": 128, "bwd_BLOCK_N2": 64,
                              "bwd_num_warps": 8}, None),
    ("bwd 32/64/64/32", {"bwd_BLOCK_M1": 32, "bwd_BLOCK_N1": 64, "bwd_BLOCK_M2": 64, "bwd_BLOCK_N2": 32}, None),
    ("max-autotune", {}, "max-autotune-no-cudagraphs"),
    ("dsx tiles", "dsx", None),
)
TILE_VARIANTS = ("default", "dsx tiles")


def variants(seq: int, mode: str, labels: tuple[str, ...]) -> None:
    """FlexAttention's settings named in `labels` at one length, each against the default settings (time, output,
    gradients; "default" first)."""
    import random

    from torch.nn.attention.flex_attention import flex_attention

    from dsx.sparse.attention import tuned_tiles

    device = torch.device("cuda")
    layout = make_layout(block_model({"mode": mode, "block": BLOCK}), HEADS, seq, rng=random.Random(1234),
                         compact=True)
    sparse = SparseAttention(layout=layout, block=BLOCK, unidirectional=False, kernel="flex")
    block_mask = sparse.block_mask(seq, device, True)
    q, k, v = (torch.randn(1, HEADS, seq, HEAD_DIM, device=device, dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    grad = torch.randn(1, HEADS, seq, HEAD_DIM, device=device, dtype=torch.bfloat16)
    reference, base_ms = None, None
    for label, options, compile_mode in VARIANTS:
        if label not in labels:
            continue
        if options == "dsx":
            options = tuned_tiles(torch.cuda.get_device_capability(device), "bfloat16", HEAD_DIM) or {}
        torch._dynamo.reset()
        attend = torch.compile(flex_attention, dynamic=False, mode=compile_mode)
        result = {"seq": seq, "mode": mode, "variant": label, "kernel_options": options, "compile_mode": compile_mode,
                  "torch": torch.__version__, "gpu": torch.cuda.get_device_name(device)}

        def call():
            for t in (q, k, v):
                t.grad = None
            out = attend(q, k, v, block_mask=block_mask, scale=HEAD_DIM ** -0.5, kernel_options=options or None)
            out.backward(grad)
            return out

        try:
            result["flex_ms"] = timed(call) * 1e3
            out = call().detach()
            grads = [t.grad.detach().clone() for t in (q, k, v)]
            if reference is None:
                reference, base_ms = (out, grads), result["flex_ms"]
            result["max_abs_diff"] = max(float((a.float() - b.float()).abs().max())
                                         for a, b in zip([out, *grads], [reference[0], *reference[1]]))
            result["vs_default"] = base_ms / result["flex_ms"]
        except Exception as error:  # noqa: BLE001 - an invalid setting is a row, not the end of the sweep
            result["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
        print(json.dumps(result), flush=True)


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
    chosen, labels = "bigbird", None
    if argv[:1] == ["--variants"]:
        labels, argv = tuple(label for label, _, _ in VARIANTS), argv[1:]
    elif argv[:1] == ["--tiles"]:
        labels, argv = TILE_VARIANTS, argv[1:]
    if argv[:1] == ["--mode"]:
        chosen, argv = argv[1], argv[2:]
    if labels:
        for length in [int(x) for x in argv] or [32768]:
            variants(length, chosen, labels)
        sys.exit(0)
    main([int(x) for x in argv] or [4096, 8192, 16384, 32768, 65536], chosen)
