"""ZeRO-3's parameter gathers, replayed: which partitioned parameters DeepSpeed 0.19.8 gathers how often in one
micro-batch on several ranks, from the order the model's modules run in.

DeepSpeed's coordinator (runtime/zero/partitioned_param_coordinator.py) walks a trace of the step's modules, the
forward then the backward in reverse. Before a module runs it gathers the module's own parameters that are not
available, then prefetches: it pops the parameter trace onward, marking each parameter it passes with the step of
that later use and gathering those not available, until the prefetched elements reach min(stage3_max_live_parameters
- elements available, stage3_prefetch_bucket_size). After the module runs it releases its parameters but those the
prefetcher marked for a later step and those used again within stage3_max_reuse_distance elements of modules
ahead (a module whose traversal starts below the distance counts whole). Persistent parameters are never gathered
in the passes. simulate_gathers replays exactly that over module_trace's order (the backward taken as the reverse
of the forward; activation checkpointing's recompute not replayed).

Measured against DeepSpeed's comms logger: exact (to the element) on every committed 2-GPU ZeRO-3 row without
checkpointing (gpt2, gpt2-xl and llama-1b on H200s, bench/multigpu/rows), -0.7% on the checkpointed 16.9B row of
4 H200s; on gloo ranks with llama-tiny at thresholds scaled down 5,600x (a few elements per module), within 11%.
"""

from __future__ import annotations

import collections
from typing import Any


def module_trace(model: Any) -> tuple[tuple[int, ...], ...]:
    """The forward's module calls that own parameters, in call order, each as the indices (model.parameters() order)
    of its own parameters: one meta-device forward of a short batch, with a pre-hook on every module. () when the
    model does not run on the meta device (the caller falls back to a formula)."""
    import torch

    index = {id(p): i for i, p in enumerate(model.parameters())}
    calls: list[tuple[int, ...]] = []

    def before(module, args):
        own = tuple(sorted({index[id(p)] for p in module.parameters(recurse=False)}))
        if own:
            calls.append(own)

    handles = [module.register_forward_pre_hook(before) for module in model.modules()]
    ids = torch.zeros((1, 8), dtype=torch.long, device="meta")
    try:
        from transformers import masking_utils
    except ImportError:  # an older transformers: no packed-sequence check to step around
        masking_utils = None
    packed = getattr(masking_utils, "find_packed_sequence_indices", None)
    if packed is not None:  # it reads a value off the device, which meta tensors have not
        masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        with torch.no_grad():
            model(input_ids=ids, labels=ids)
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        return ()
    finally:
        for handle in handles:
            handle.remove()
        if packed is not None:
            masking_utils.find_packed_sequence_indices = packed
    return tuple(calls)


def simulate_gathers(trace: tuple[tuple[int, ...], ...], numels: tuple[int, ...], persistent: list[bool],
                     reuse_distance: float, max_live: float, prefetch_bucket: float) -> tuple[int, ...]:
    """How many times each parameter is gathered in one micro-batch (forward and backward) on several ranks, as the
    module docstring says DeepSpeed decides it; persistent parameters: 0."""
    steps = list(trace) + list(reversed(trace))
    queue = collections.deque((param, step) for step, params in enumerate(steps) for param in params)
    available = {i for i, kept in enumerate(persistent) if kept}
    live = 0  # gathered elements available (DeepSpeed's __n_available_params: persistent ones not counted)
    marked: dict[int, int] = collections.defaultdict(lambda: -1)  # the latest step the queue was popped for
    gathered = [0] * len(numels)

    def gather(param: int) -> None:
        nonlocal live
        available.add(param)
        live += numels[param]
        gathered[param] += 1

    for step, params in enumerate(steps):
        for param in params:
            if param not in available:
                gather(param)
        due = {param for param in params if marked[param] < step}
        popped: set[int] = set()
        while queue and len(popped) < len(due):  # this module's own entries leave the queue
            param, at = queue.popleft()
            marked[param] = at
            popped.add(param)
        if prefetch_bucket > 0:
            limit, prefetching, chosen = min(max_live - live, prefetch_bucket), 0, set()
            while queue and prefetching < limit:
                param, at = queue.popleft()
                marked[param] = max(marked[param], at)
                if param not in available and param not in chosen:
                    chosen.add(param)
                    prefetching += numels[param]
            for param in chosen:
                gather(param)
        after = step + 1
        release = {param for param in params if not persistent[param] and not marked[param] > after}
        traversed = 0
        for ahead in steps[after:]:
            if traversed >= reuse_distance:
                break
            for param in ahead:
                release.discard(param)
                traversed += numels[param]
        for param in release:
            if param in available:
                available.remove(param)
                live -= numels[param]
    return tuple(gathered)
