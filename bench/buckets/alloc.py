"""What DeepSpeed's ZeRO-1/2 setup_buckets costs a CPU rank per micro-step at the default bucket: two
torch.empty(5e8) buffers in the gradient dtype, the first 172,288 elements (gpt2-tiny's gradients) written, freed.
Median and max of 20 repetitions.

    python bench/buckets/alloc.py
"""

import statistics
import time

import torch

BUCKET, USED = 500_000_000, 172_288

for dtype in (torch.bfloat16, torch.float32):
    times = []
    for _ in range(20):
        start = time.perf_counter()
        buffers = [torch.empty(BUCKET, dtype=dtype) for _ in range(2)]
        for buffer in buffers:
            buffer[:USED].zero_()
        del buffers
        times.append(time.perf_counter() - start)
    print(f"{dtype}: two 5e8 buckets allocated, first {USED:,} elements written, freed: median "
          f"{statistics.median(times) * 1e3:.3f} ms, max {max(times) * 1e3:.3f} ms")
