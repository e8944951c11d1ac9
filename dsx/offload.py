"""Partial optimizer offload: which share of the optimizer DeepSpeed keeps off the GPU for a ZeRO-3 `ratio`.

`zero_optimization.offload_optimizer.ratio` r < 1 (ZeRO-3 only; DeepSpeed asserts it at the other stages) does not
offload r of every tensor: DeepSpeed cuts the rank's parameter partitions into optimizer sub-groups of
`sub_group_size` elements (default 1e9), in parameter order, and keeps the first int((1 - r) x sub-groups) on the
GPU, the rest on the CPU (runtime/zero/stage3.py: _create_fp16_sub_groups, _create_fp32_partitions). llama-7b on one
GPU makes 7 sub-groups, so r = 0.7 keeps 2 on the GPU and offloads 5 (73.6% of the parameters, not 70%).

Counted on the meta device (dsx.models.meta_model): no memory, nothing trained.
"""

from __future__ import annotations

from typing import Any

from dsx.config_facts import offload_ratio

PARTIAL_OFFLOAD_STAGE = "Partial offloading only supported for ZeRO Stage 3."
"""DeepSpeed's assertion (runtime/zero/config.py, offload_ratio_check) on a ratio < 1 below ZeRO-3."""

SUB_GROUP_SIZE = 1_000_000_000
"""DeepSpeed's default zero_optimization.sub_group_size."""


class PartialOffloadError(ValueError):
    """A ratio DeepSpeed would refuse: the message says why."""


def _number(value: Any, default: float) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def sub_group_size(config: dict) -> int:
    return int(_number((config.get("zero_optimization") or {}).get("sub_group_size"), SUB_GROUP_SIZE))


def sub_group_sizes(resolved: Any, world: int, size: int) -> list[int]:
    """Elements of each ZeRO-3 optimizer sub-group of one rank, cut as DeepSpeed cuts them: the parameters'
    partitions (ceil(numel / world)) in parameter order, a sub-group closed once it holds `size` or more; one group
    when the rank's whole partition is not larger than `size`."""
    from dsx.models import meta_model

    numels = [-(-p.numel() // world) for p in meta_model(resolved).parameters()]
    if size >= sum(numels):
        return [sum(numels)]
    groups, current = [], 0
    for index, numel in enumerate(numels):
        current += numel
        if current >= size or index == len(numels) - 1:
            groups.append(current)
            current = 0
    return groups


def offloaded_fraction(config: dict, stage: int, offload: str, resolved: Any, world: int) -> float:
    """Share of the parameters whose optimizer states are off the GPU: 0 without optimizer offload, 1 with full
    offload (ratio 1), else the offloaded sub-groups' share (PartialOffloadError below ZeRO-3)."""
    if offload == "none":
        return 0.0
    ratio = offload_ratio(config)
    if ratio >= 1.0:
        return 1.0
    if stage != 3:
        raise PartialOffloadError(f"zero_optimization.offload_optimizer.ratio {ratio:g} needs ZeRO-3: DeepSpeed "
                                  f"refuses it at ZeRO-{stage} ('{PARTIAL_OFFLOAD_STAGE}')")
    sizes = sub_group_sizes(resolved, world, sub_group_size(config))
    on_gpu = int((1 - ratio) * len(sizes))  # DeepSpeed's expression, float rounding included
    return sum(sizes[on_gpu:]) / sum(sizes)


def describe(config: dict, resolved: Any, world: int) -> str | None:
    """What a ratio < 1 does, in words: 'ratio 0.7: 5 of the 7 optimizer sub-groups (70.0% of the parameters) on
    the CPU, 2 on the GPU'; None for no or full offload."""
    ratio = offload_ratio(config)
    if ratio >= 1.0:
        return None
    sizes = sub_group_sizes(resolved, world, sub_group_size(config))
    on_gpu = int((1 - ratio) * len(sizes))
    share = sum(sizes[on_gpu:]) / sum(sizes)
    return (f"ratio {ratio:g}: {len(sizes) - on_gpu} of the {len(sizes)} optimizer sub-groups ({share:.1%} of the "
            f"parameters) on the CPU, {on_gpu} on the GPU (DeepSpeed offloads whole sub-groups of "
            f"{sub_group_size(config):,} elements)")
