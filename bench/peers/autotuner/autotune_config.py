"""The DeepSpeed config the autotuner is given (issue 31), the way its documentation and DeepSpeedExamples write it
for a transformers Trainer script: the batch keys "auto" for the Trainer, every ZeRO stage listed, fast mode,
throughput as the metric, and arg_mappings so each trial's micro-batch and grad-accum reach the script's arguments
(without them the Trainer's mismatch check fails every trial: transformers#27830).

    python bench/peers/autotuner/autotune_config.py --max-train-batch-size 64 [--stages 0,1,2,3] > ds_autotune.json
"""

from __future__ import annotations

import argparse
import json


def autotune_config(max_train_batch_size: int, stages: list[int], precision: str = "bf16") -> dict:
    return {
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "train_batch_size": "auto",
        precision: {"enabled": "auto"},
        "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                  "weight_decay": "auto"}},
        "gradient_clipping": "auto",  # the Trainer's max_grad_norm (1.0), as dsx clips
        "zero_optimization": {"stage": stages},
        "autotuning": {
            "enabled": True,
            "fast": True,
            "metric": "throughput",
            "max_train_batch_size": max_train_batch_size,
            "arg_mappings": {
                "train_micro_batch_size_per_gpu": "--per_device_train_batch_size",
                "gradient_accumulation_steps": "--gradient_accumulation_steps",
            },
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-train-batch-size", type=int, required=True,
                        help="the global-batch cap both tools get (sequences per optimizer step)")
    parser.add_argument("--stages", default="0,1,2,3")
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp16"])
    args = parser.parse_args()
    stages = [int(s) for s in args.stages.split(",")]
    print(json.dumps(autotune_config(args.max_train_batch_size, stages, args.precision), indent=2))


if __name__ == "__main__":
    main()
