"""ZeRO-3's parameter gathers, replayed: which partitioned parameters DeepSpeed 0.19.8 gathers how often in one
micro-batch on several ranks, from the fetches its module hooks make.

DeepSpeed's coordinator (runtime/zero/partitioned_param_coordinator.py) walks a trace of one step's fetches: every
module's pre-forward hook, then a pre-backward fetch as each module output's gradient arrives (parameter_offload.py;
under activation checkpointing the recompute's pre-forward hooks in between). At each fetch it gathers the module's
own parameters that are not available, then prefetches: it pops the parameter trace onward, marking each parameter
it passes with the step of that later use and gathering those not available, until the prefetched elements reach
min(stage3_max_live_parameters - elements available, stage3_prefetch_bucket_size). After the module runs it releases
its parameters but those the prefetcher marked for a later step and those used again within
stage3_max_reuse_distance elements of the fetches ahead (one whose traversal starts below the distance counts
whole). Persistent parameters are never gathered in the passes. module_trace records those fetches from a
meta-device forward and backward; simulate_gathers replays the rules over them.

Measured against DeepSpeed's comms logger: exact, to the element, on all 23 committed ZeRO-3 rows with the logger on
several GPUs (bench/multigpu/rows: GPT-2 124M, gpt2-xl and llama-1b on 2 H200s at DeepSpeed's defaults and at other
reuse distances, live parameters and prefetch buckets, with and without checkpointing, two of them predicted before
they ran; the checkpointed 16.9B llama of 4 H200s). bench/estimator/terms.md has the table.
"""

from __future__ import annotations

import collections
from typing import Any


def module_trace(resolved: Any, checkpointed: bool = False) -> tuple[tuple[int, ...], ...]:
    """The fetches DeepSpeed's hooks make in one micro-batch, in order, each as the indices (model.parameters()
    order) of the fetching module's own parameters, () for a module without any: every module's pre-forward hook
    as the forward calls it, then a pre-backward fetch for each module output a gradient reaches, in the order
    autograd reaches them (DeepSpeed wraps every output tensor in a function whose backward fetches: so does this).
    From a forward and backward of a fresh model on the meta device (a short batch); `checkpointed`: with transformers'
    activation checkpointing on, whose recompute fires the pre-forward hooks again inside the backward. () when the
    model does not run on the meta device (the caller falls back to a formula)."""
    import copy

    import torch

    from dsx.models import config_of, from_config, packed_sequences_unchecked

    try:
        with torch.device("meta"):
            model = from_config(resolved.task, copy.deepcopy(config_of(resolved)), "eager")
        model.train()
        if checkpointed:  # ALBERT's transformers class refuses it (a run with --act-ckpt refuses it too)
            from dsx.rank.memory_savers import enable_checkpointing

            enable_checkpointing(model)
    except Exception:  # as below: the caller's formula stands in
        return ()
    index = {id(p): i for i, p in enumerate(model.parameters())}
    own = {id(m): tuple(sorted({index[id(p)] for p in m.parameters(recurse=False)})) for m in model.modules()}
    fetches: list[tuple[int, ...]] = []

    class BeforeBackward(torch.autograd.Function):
        """DeepSpeed's PreBackwardFunctionForModule: the module fetches when its output's gradient arrives."""

        @staticmethod
        def forward(ctx, tensor, key):
            ctx.key = key
            return tensor.view_as(tensor)

        @staticmethod
        def backward(ctx, grad):
            fetches.append(own[ctx.key])
            return grad, None

    def wrap(value, key):
        if torch.is_tensor(value):
            return BeforeBackward.apply(value, key) if value.requires_grad else value
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            return tuple(wrap(item, key) for item in value)
        if isinstance(value, list):
            return [wrap(item, key) for item in value]
        if isinstance(value, dict):  # transformers' ModelOutput too
            for name in list(value.keys()):
                value[name] = wrap(value[name], key)
        return value

    handles = [module.register_forward_pre_hook(lambda module, args: fetches.append(own[id(module)]))
               for module in model.modules()]
    handles += [module.register_forward_hook(lambda module, args, output: wrap(output, id(module)))
                for module in model.modules()]
    ids = torch.zeros((1, 8), dtype=torch.long, device="meta")
    try:
        with packed_sequences_unchecked():  # the check reads a value off the device, which meta tensors have not
            model(input_ids=ids, labels=ids).loss.backward()
    except Exception:  # any model the meta device cannot run: the caller's formula stands in, never a failed command
        return ()
    finally:
        for handle in handles:
            handle.remove()
    return tuple(fetches)


def simulate_gathers(trace: tuple[tuple[int, ...], ...], numels: tuple[int, ...], persistent: list[bool],
                     reuse_distance: float, max_live: float, prefetch_bucket: float) -> tuple[int, ...]:
    """How many times each parameter is gathered in one micro-batch on several ranks over module_trace's fetches,
    as the module docstring says DeepSpeed decides it; persistent parameters: 0."""
    steps = list(trace)
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
