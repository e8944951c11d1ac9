"""How fast this host drives its GPU from Python: one JSON line on stdout (bench/estimator/host_probe.sh).

Eager steps and ZeRO-3's hooks wait on the host (bench/estimator/terms.md: a ZeRO-3 configuration ran 0.94-1.59 s a
step on different hosts of one GPU kind). Three figures, the last two medians of 5 repeats timed between device
synchronisations:
- python_loop_ns: dsx.host.python_loop_ns, what every dsx run row records (the fastest of 25 short runs of a loop
  calling a small function; until 2026-11-29 20:05 UTC this probe took the median of 5 runs of 1,000,000);
- cpu_op_us: one in-place add on a 1-element CPU tensor (torch's dispatcher on the host);
- cuda_launch_us: one in-place add on a 1-element CUDA tensor, 20,000 in a row (kernel launch cost; the GPU idles).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())  # run from the repository root: dsx.host
from dsx.host import cpu_count, cpu_model, python_loop_ns  # noqa: E402


def _median_of(repeats: int, once) -> float:
    return statistics.median(once() for _ in range(repeats))


def op_us(device: str, n: int) -> float:
    import torch

    x = torch.zeros(1, device=device)

    def once():
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            x.add_(1)
        if device == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - start) / n * 1e6

    once()  # warm: the first call loads the kernel
    return _median_of(5, once)


def main() -> None:
    import torch

    out = {"cpu_model": cpu_model(), "cpus": cpu_count(), "python_loop_ns": round(python_loop_ns(), 2),
           "cpu_op_us": round(op_us("cpu", 20_000), 3)}
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
        out["cuda_launch_us"] = round(op_us("cuda", 20_000), 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
