"""ZeRO's gradient buckets, sized to the model (issue 19; the measurements are in bench/buckets/README.md).

DeepSpeed 0.19 allocates a reduce bucket of reduce_bucket_size elements at every micro-step of ZeRO-1/2 (two with
overlap_comm) and ZeRO-3 allocates one at initialisation, whatever the model: a bucket larger than the model's
gradients is never filled, only allocated. dsx writes min(DeepSpeed's default, the model's parameters) into the
configs it makes for a model, so a small model on CPU ranks does not allocate 1-2 GB per micro-step, and a large one
keeps the default, which measured as fast as any size from 1e7 to 1e9 elements on an H100 and reserved the least
memory for gpt2-xl. The Trainer's "auto" rule (hidden^2) measured slower there.

ZeRO-3's prefetch bucket and parameter persistence threshold are written too, from the ZeRO-3 study of the same
README: on an H100 (gpt2-xl, gpt2) no prefetch size or threshold measured faster than DeepSpeed's defaults beyond the
19% spread of one setting between runs, and all reserved the same memory, so GPU ranks get the defaults, explicitly;
on CPU ranks (gloo) persistence 0, every tensor partitioned, ran gpt2-tiny's steps ~1.4x faster than the default
1e5, which keeps each of its tensors whole on every rank.
"""

from __future__ import annotations

from collections.abc import Iterable

DEEPSPEED_DEFAULT = 500_000_000
"""DeepSpeed's reduce_bucket_size and allgather_bucket_size default (elements)."""

SMALL = 1_000_000
"""Below this many elements a bucket measured slower (lint warns): gpt2 ZeRO-2 on an H100 at hidden^2 = 589,824."""

PREFETCH_DEFAULT = 50_000_000
"""DeepSpeed's stage3_prefetch_bucket_size default (elements)."""

PERSISTENCE = {"cuda": 100_000, "cpu": 0}
"""stage3_param_persistence_threshold by device: DeepSpeed's default on GPUs, 0 on CPU ranks (measured above)."""

MEASURED_SMALL = ("one H100, gpt2 ZeRO-2 micro-batch 16: 100.1 ms a step at 589,824 elements, 83.9-92.2 ms from 1e7 to "
                  "1e9: bench/buckets/README.md")
MEASURED_LARGE = ("one H100, gpt2-xl ZeRO-2 micro-batch 8: 401 ms a step and 63.5 GiB reserved at 5e8, 407 ms and "
                  "71.2 GiB at 1e9: bench/buckets/README.md")
"""What the lint warnings cite."""


def sized_buckets(params: int, stage: int, device: str = "cuda") -> dict[str, int]:
    """The bucket keys dsx writes for a model of `params` parameters at ZeRO `stage` (none at stage 0) on ranks of
    `device` (cuda or cpu): reduce_bucket_size at stages 1-3, allgather_bucket_size at 1-2; at 3 the prefetch bucket
    (ZeRO-3 gathers through it) and the parameter persistence threshold."""
    if stage not in (1, 2, 3) or params < 1:
        return {}
    size = min(DEEPSPEED_DEFAULT, params)
    keys = {"reduce_bucket_size": size}
    if stage in (1, 2):
        keys["allgather_bucket_size"] = size
    else:
        keys["stage3_prefetch_bucket_size"] = min(PREFETCH_DEFAULT, params)
        keys["stage3_param_persistence_threshold"] = PERSISTENCE["cpu" if device == "cpu" else "cuda"]
    return keys


def fill_buckets(config: dict, params: int, ds_sets: Iterable[str] = (), device: str = "cuda") -> None:
    """Write the sized buckets into a config dsx made for a model of `params` parameters, leaving a bucket key that
    is already there (a preset's) or that a --ds-set KEY=VALUE in `ds_sets` names (the emitted config drops a value
    equal to DeepSpeed's default, so a user's explicit 5e8 is not in it) as it is."""
    zero = config.get("zero_optimization")
    if not isinstance(zero, dict) or not isinstance(zero.get("stage"), int):
        return
    given = {text.partition("=")[0].strip() for text in ds_sets}
    for key, size in sized_buckets(params, zero["stage"], device).items():
        if f"zero_optimization.{key}" not in given:
            zero.setdefault(key, size)
