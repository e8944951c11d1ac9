"""`dsx estimate --largest --json`'s answer as `dsx sweep` arguments, one per line (bench/largest/h100.sh,
bench/multigpu/run.sh largest4):

    mapfile -t axes < <(python3 bench/largest/axes.py largest.json)
    python3 -m dsx sweep "${axes[@]}" --steps 3 --warmup 1 ...

One configuration: the proposed model (its --set overrides), ZeRO stage, offload (and ratio), checkpointing,
compile, GPUs and grad-accum, with --micro-batch auto capped at the proposed micro-batch (--mb-max): the search
starts there and shrinks only if it runs out of memory.
"""

from __future__ import annotations

import json
import sys


def sweep_args(answer: dict) -> list[str]:
    c = answer["configuration"]
    args = ["--model", answer["model"]]
    for key, value in answer["overrides"].items():
        args += ["--set", f"{key}={json.dumps(value)}"]
    args += ["--zero", str(c["zero"]), "--offload", c["offload"], "--act-ckpt", "on" if c["act_ckpt"] else "off",
             "--compile", "on" if c["compile"] else "off", "--grad-accum", str(c["grad_accum"]),
             "--micro-batch", "auto", "--mb-max", str(answer["micro_batch"])]
    if c.get("gpus"):
        args += ["--gpus", str(c["gpus"])]
    if c.get("offload_ratio"):
        args += ["--offload-ratio", str(c["offload_ratio"])]
    return args


if __name__ == "__main__":
    print("\n".join(sweep_args(json.load(open(sys.argv[1])))))
