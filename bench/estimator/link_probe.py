"""NCCL's bandwidth between the ranks of one host, the way nccl-tests reports it (bus bandwidth), for the sizes of
DeepSpeed's ZeRO buckets. Run under torchrun on the GPU host (bench/estimator/link.sh):

    python3 -m torch.distributed.run --standalone --nproc_per_node 2 bench/estimator/link_probe.py OUT.jsonl LABEL

For each collective (all_reduce, all_gather_into_tensor) and size (bf16), 3 untimed calls, then ITERS calls between
device synchronisations; rank 0 appends one JSON line per (collective, size): the median seconds of 3 such rounds,
algorithm bandwidth (the size over the time) and bus bandwidth (x 2(n-1)/n for an all-reduce, x (n-1)/n for an
all-gather: nccl-tests' factors), with LABEL, the NCCL variables set, the GPU and the versions.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

SIZES_MIB = (16, 64, 256, 1024)
ITERS = 10


def timed(fn) -> float:
    """Median over 3 rounds of ITERS calls' mean seconds, between device synchronisations."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(3):
        dist.barrier()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(ITERS):
            fn()
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - start) / ITERS)
    return statistics.median(rounds)


def main() -> None:
    out, label = sys.argv[1], sys.argv[2]
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    rows = []
    for mib in SIZES_MIB:
        elements = mib * 2**20 // 2
        buffer = torch.ones(elements, dtype=torch.bfloat16, device="cuda")
        shard = torch.ones(elements // world, dtype=torch.bfloat16, device="cuda")
        seconds = timed(lambda: dist.all_reduce(buffer))
        rows.append(("all_reduce", mib, seconds, 2 * (world - 1) / world))
        seconds = timed(lambda: dist.all_gather_into_tensor(buffer, shard))
        rows.append(("all_gather", mib, seconds, (world - 1) / world))
        del buffer, shard
    if rank == 0:
        nccl = {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")}
        with open(out, "a") as f:
            for op, mib, seconds, factor in rows:
                algbw = mib * 2**20 / seconds
                f.write(json.dumps({
                    "label": label, "op": op, "size_mib": mib, "world_size": world, "seconds": seconds,
                    "algbw_gbps": algbw / 1e9, "busbw_gbps": algbw * factor / 1e9, "nccl_env": nccl,
                    "gpu_name": torch.cuda.get_device_name(), "torch": torch.__version__,
                    "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")
                print(f"[link] {label} {op} {mib} MiB: {seconds * 1e3:.2f} ms, bus {algbw * factor / 1e9:.1f} GB/s",
                      flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
