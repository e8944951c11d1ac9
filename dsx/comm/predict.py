"""How many bytes a data-parallel optimizer step should move: the ZeRO paper's figure and DeepSpeed's own.

Units are those of dsx.comm.volume (the ZeRO paper's data volume: an all-reduce of T bytes counts 2T, an
all-gather its gathered output, a reduce-scatter or all-to-all its input). N = parameters, g = bytes of a gradient
element in the communication dtype (`communication_data_type`, else the training precision: bf16/fp16 2, fp32 4),
p = bytes of a parameter element (the training precision), A = gradient accumulation steps.

The paper (Rajbhandari et al. 2020, section 7) counts 2N per step for plain data parallelism and ZeRO-1/2 (a
reduce-scatter of the gradients and an all-gather of the updated parameters) and 3N for ZeRO-3 (an all-gather in
the forward and in the backward pass, a reduce-scatter of the gradients). DeepSpeed 0.19.8 (read from
runtime/zero/stage_1_and_2.py, stage3.py, partitioned_param_coordinator.py, and measured on 2 gloo ranks,
tests/test_comm_cpu.py) sends:

    ZeRO-0    all-reduce of the gradients at the accumulation boundary                2N·g
    ZeRO-1    all-reduce of the gradient buckets at the boundary, then the all-gather
              of the updated partitions                                                2N·g + N·p
    ZeRO-2    the same, but the gradients are reduced after every micro-batch        2N·g·A + N·p
              (use_multi_rank_bucket_allreduce, on by default, all-reduces each bucket instead of reducing
              each rank's slice to it; with it off and reduce_scatter on, the gradients cost N·g instead of 2N·g)
    ZeRO-3    reduce-scatter of the gradients after every micro-batch                N·g·A
              + the all-gathers of partitioned parameters (numel > stage3_param_persistence_threshold, 1e5 by
              default) every micro-batch: once each in the forward, and again in the backward only for those
              whose next use lies more than stage3_max_reuse_distance (1e9) parameter elements ahead in the
              module trace; a tied weight (GPT-2's lm_head) is gathered at each use when it is not kept
              + the all-gather of the persistent parameters after each optimizer step   N_persist·p
    one rank  the gradients are still all-reduced (reduce-scattered) on a group of one; every all-gather is skipped
    1-bit     Adam / 0-1 Adam / LAMB (ZeRO-0): warm-up like ZeRO-0; compressed steps send the signs (1 bit per
              element) through an all-to-all and an all-gather: about N/4 bytes, plus a scale per chunk (on one
              rank nothing)
    autocast  torch_autocast at ZeRO 1-3: each parameter has a comm dtype (runtime/torch_autocast.py), the
              autocast dtype (2 bytes) where a module of exactly one of lower_precision_safe_modules' classes owns
              it (AUTOCAST_SAFE_MODULES by default: torch.nn.Linear, Conv1d/2d/3d), its own fp32 elsewhere; its
              gradient is reduced, and at ZeRO-3 the partitioned parameter gathered, in that dtype
              (communication_data_type is not read); the all-gathers after the step (ZeRO-1/2's partitions, ZeRO-3's
              persistent parameters) stay fp32. ZeRO-0 all-reduces in communication_data_type (default fp32)
    ZeRO++    qwZ: the parameter all-gathers in int8 (1 byte, scales ignored); qgZ: the 2-D gradients through two
              int4 all-to-alls (0.5 byte in the intra-node one, 0.5/L in the inter-node one, L = ranks per node;
              1-D ones still reduce-scatter); hpZ: the backward gathers stay within groups of
              zero_hpz_partition_size ranks (same volume, less of it across nodes)

Which parameters ZeRO-3 gathers again in the backward is replayed over its hooks' fetches (dsx.comm.zero3:
DeepSpeed's release and prefetch rules; exact on every committed multi-GPU ZeRO-3 row). Without a trace (synthetic
facts, a model that does not run on the meta device) a formula stands in: the parameters kept through the backward
are the forward's last R/2 elements (R = stage3_max_reuse_distance) or, with prefetching on, up to L =
stage3_max_live_parameters elements, whichever is more: a share max(0, 1 - max(R/2, L) / U) of the U partitioned
elements used per pass is gathered again (gpt2-xl on 2 H200s: -2.4%; llama-1b: +23%). Under activation
checkpointing the recomputed forward gathers what the backward would have. The small all-reduces of the gradient
norm and the overflow flag (a few bytes) are not counted.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from dsx.config_facts import ONEBIT, precision_of, ulysses_group, weights_precision, zero_stage

ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}

AUTOCAST_SAFE_MODULES = ("torch.nn.Linear", "torch.nn.Conv1d", "torch.nn.Conv2d", "torch.nn.Conv3d")
"""DeepSpeed 0.19.8's lower_precision_safe_modules when torch_autocast names none (runtime/torch_autocast.py). Its
test is the module's exact class: transformers' Conv1D (GPT-2's attention and MLP) is not one, so GPT-2's gradients
go in fp32 but for its tied embedding (which the lm_head, a torch.nn.Linear, also owns)."""

_FP32_NAMES = ("fp32", "float32", "float", "torch.float32", "torch.float")


@dataclass(frozen=True)
class ParamFacts:
    """What the prediction needs to know about a model's parameters."""

    numels: tuple[int, ...]
    """Each distinct parameter's element count, in named_parameters order."""
    uses: tuple[int, ...]
    """How many modules own each parameter directly (2 for a tied embedding)."""
    ndims: tuple[int, ...]
    owners: tuple[tuple[str, ...], ...] = ()
    """The classes of the modules that own each parameter directly, as module.qualname ('torch.nn.modules.linear.
    Linear'): what torch_autocast's lower_precision_safe_modules is matched against. Empty: not known."""
    trace: tuple[tuple[int, ...], ...] = ()
    """The fetches of ZeRO-3's module hooks in one micro-batch, in order, each the fetching module's own parameters'
    indices (dsx.comm.zero3.module_trace): what its gathers are replayed over. Empty: not known (the module
    docstring's formula then)."""
    trace_checkpointed: tuple[tuple[int, ...], ...] = ()
    """The same with activation checkpointing on (the recompute's fetches inside the backward)."""

    @property
    def total(self) -> int:
        return sum(self.numels)


_FACTS: dict[str, ParamFacts] = {}


def param_facts(resolved) -> ParamFacts:
    """The facts of a dsx model preset, from its meta-device model (imports torch); kept in this process and in
    dsx's disk cache (dsx.cache.derived_path), so a later command (`dsx estimate`) does not build the model again."""
    from pathlib import Path

    from dsx.cache import derived
    from dsx.models import _cache_key, disk_key, meta_model

    key = _cache_key(resolved)
    if key not in _FACTS:
        dsx_dir = Path(__file__).parents[1]  # the checkpointed trace calls dsx.rank.memory_savers' switch
        sources = [Path(__file__), Path(__file__).with_name("zero3.py"), dsx_dir / "models.py",
                   dsx_dir / "rank" / "memory_savers.py"]
        fields = ("numels", "uses", "ndims")

        def load(cached) -> ParamFacts:
            return ParamFacts(**{name: tuple(cached[name]) for name in fields},
                              owners=tuple(tuple(names) for names in cached["owners"]),
                              trace=tuple(tuple(call) for call in cached["trace"]),
                              trace_checkpointed=tuple(tuple(call) for call in cached["trace_checkpointed"]))

        def measure() -> ParamFacts:
            from dsx.comm.zero3 import module_trace

            return replace(facts_of_module(meta_model(resolved)), trace=module_trace(resolved),
                           trace_checkpointed=module_trace(resolved, checkpointed=True))

        _FACTS[key] = derived("param-facts", disk_key(resolved), sources, measure, load, asdict)
    return _FACTS[key]


def facts_of_module(model) -> ParamFacts:
    owners: dict[int, list[str]] = {}
    for module in model.modules():
        for param in module.parameters(recurse=False):
            owners.setdefault(id(param), []).append(f"{type(module).__module__}.{type(module).__qualname__}")
    params = list(model.parameters())
    return ParamFacts(numels=tuple(p.numel() for p in params), uses=tuple(len(owners.get(id(p), [1])) for p in params),
                      ndims=tuple(p.dim() for p in params), owners=tuple(tuple(owners.get(id(p), [])) for p in params))


@dataclass
class CommPrediction:
    """Predicted volume per optimizer step and per rank (dsx.comm.volume's units)."""

    bytes_per_step: float
    """What DeepSpeed sends, by the formulas of this module's docstring."""
    paper_bytes_per_step: float
    """The ZeRO paper's figure: 2N·g (ZeRO 0-2) or 3N·g (ZeRO-3)."""
    parts: dict[str, float] = field(default_factory=dict)
    """bytes_per_step by what moves: gradients, parameters (forward/backward gathers, after the step)."""
    compressed_bytes_per_step: float | None = None
    """1-bit optimizers: a step in the compressed phase (bytes_per_step is a warm-up step)."""
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _zero_value(zero: dict, name: str, alias: str | None, default):
    for key in (alias, name):
        if key and isinstance(zero.get(key), (int, float)) and not isinstance(zero.get(key), bool):
            return zero[key]
    return default


def _truthy(value) -> bool:
    return value is True


def _dtype_bytes(config: dict) -> tuple[int, int]:
    """(g, p): bytes of a communicated gradient element and of a parameter element. Under Ulysses DeepSpeed's engine
    reduces gradients in seq_parallel_communication_data_type instead (default fp32: 4.00 bytes a parameter logged
    on 4 H100s, bench/multigpu/rows/long4.jsonl)."""
    precision = weights_precision(precision_of(config))
    p = ELEMENT_BYTES.get(precision, 4)
    comm = str(config.get("communication_data_type") or "").lower()
    if ulysses_group(config) > 1:
        comm = str(config.get("seq_parallel_communication_data_type") or "fp32").lower()
    g = ELEMENT_BYTES.get({"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}.get(comm, comm), p)
    return g, p


def _same_class(name: str, qualified: str) -> bool:
    """Whether a class name as a config writes it ('torch.nn.Linear') names the class a module reports
    ('torch.nn.modules.linear.Linear'): the same top-level package and class name (DeepSpeed imports the name; dsx
    reads it without importing torch)."""
    return name.split(".")[0] == qualified.split(".")[0] and name.rsplit(".", 1)[-1] == qualified.rsplit(".", 1)[-1]


def autocast_element_bytes(config: dict, facts: ParamFacts) -> tuple[float, ...] | None:
    """Under torch_autocast at ZeRO 1-3, each parameter's communication dtype in bytes (DeepSpeed's comm_dtype,
    runtime/torch_autocast.py): the autocast dtype where a module of exactly one of lower_precision_safe_modules'
    classes owns the parameter, its own fp32 elsewhere. ZeRO reduces each gradient in it, and ZeRO-3 gathers each
    partitioned parameter in it (partition_parameters.get_allgather_dtype). None without autocast or at ZeRO-0."""
    autocast = config.get("torch_autocast") if isinstance(config.get("torch_autocast"), dict) else {}
    if autocast.get("enabled") is not True or zero_stage(config) == 0:
        return None
    low = 4.0 if str(autocast.get("dtype", "")).lower() in _FP32_NAMES else 2.0
    safe = autocast.get("lower_precision_safe_modules")
    safe = AUTOCAST_SAFE_MODULES if safe is None else tuple(str(name) for name in safe)
    owners = facts.owners or ((),) * len(facts.numels)
    return tuple(low if any(_same_class(name, cls) for name in safe for cls in classes) else 4.0
                 for classes in owners)


def _autocast_note(facts: ParamFacts, element_bytes: tuple[float, ...]) -> str:
    """What share of the gradients torch_autocast sends in 16 bits, and which class holds most of the rest."""
    low = sum(x for x, e in zip(facts.numels, element_bytes) if e < 4)
    by_class: dict[str, int] = {}
    for x, e, classes in zip(facts.numels, element_bytes, facts.owners or ((),) * len(facts.numels)):
        if e == 4 and classes:
            by_class[classes[0]] = by_class.get(classes[0], 0) + x
    note = (f"torch_autocast: {low / facts.total:.0%} of the parameters' gradients go in 16 bits (a module of "
            "lower_precision_safe_modules owns them), the rest in fp32")
    name, count = max(by_class.items(), key=lambda item: item[1], default=("", 0))
    if count >= 0.1 * facts.total:  # worth a config line: e.g. GPT-2's Conv1D, 68% of gpt2's parameters
        note += (f" ({count / facts.total:.0%} of all are {name}'s: naming that class in torch_autocast."
                 "lower_precision_safe_modules sends their gradients in 16 bits)")
    return note


def _zero3_partition(zero: dict, facts: ParamFacts) -> tuple[list[bool], int, int, float]:
    """ZeRO-3's split of the parameters (stage3.py, partition_parameters.py): which stay whole on every rank
    (persistent: numel <= stage3_param_persistence_threshold, while their sum stays under
    stage3_model_persistence_threshold), their element count, the partitioned parameters' elements summed over
    their uses, and the share of those uses released before the backward pass needs them again (the module
    docstring's model)."""
    threshold = _zero_value(zero, "param_persistence_threshold", "stage3_param_persistence_threshold", 100_000)
    model_cap = _zero_value(zero, "model_persistence_threshold", "stage3_model_persistence_threshold", sys.maxsize)
    reuse = _zero_value(zero, "max_reuse_distance", "stage3_max_reuse_distance", 1_000_000_000)
    live = _zero_value(zero, "max_live_parameters", "stage3_max_live_parameters", 1_000_000_000)
    prefetch = _zero_value(zero, "prefetch_bucket_size", "stage3_prefetch_bucket_size", 50_000_000)
    persist = [False] * len(facts.numels)
    persisted = 0
    for i, numel in enumerate(facts.numels):
        if numel + persisted > model_cap:
            continue
        if numel <= threshold:
            persist[i] = True
            persisted += numel
    part_uses = sum(x * u for x, u, kept in zip(facts.numels, facts.uses, persist) if not kept)
    # kept through the backward: the forward's last R/2 elements (their next use lies within the reuse distance),
    # or with prefetching on what the prefetcher holds gathered (up to max_live elements) when it scans past the
    # forward into the backward and marks those parameters' backward uses (partitioned_param_coordinator.py:
    # __params_to_release keeps a parameter whose later use the prefetcher already passed)
    kept = max(reuse / 2.0, live if prefetch > 0 else 0.0)
    released = max(0.0, 1.0 - kept / part_uses) if part_uses else 0.0
    return persist, persisted, part_uses, released


def zero3_gathers(zero: dict, facts: ParamFacts, checkpointed: bool = False) -> tuple[int, ...] | None:
    """How many times ZeRO-3 gathers each parameter in one micro-batch on several ranks, replayed over the model's
    fetch trace (dsx.comm.zero3; `checkpointed`: activation checkpointing's); None without one (the module
    docstring's formula then)."""
    trace = facts.trace_checkpointed if checkpointed else facts.trace
    if not trace:
        return None
    from dsx.comm.zero3 import simulate_gathers

    persist = _zero3_partition(zero, facts)[0]
    return simulate_gathers(trace, facts.numels, persist,
                            _zero_value(zero, "max_reuse_distance", "stage3_max_reuse_distance", 1_000_000_000),
                            _zero_value(zero, "max_live_parameters", "stage3_max_live_parameters", 1_000_000_000),
                            _zero_value(zero, "prefetch_bucket_size", "stage3_prefetch_bucket_size", 50_000_000))


def zero3_fetches_per_micro_batch(config: dict, facts: ParamFacts, checkpointed: bool = False) -> float:
    """How many parameter all-gathers ZeRO-3 waits for in one micro-batch on several ranks: zero3_gathers' count
    (`checkpointed`: over the trace with activation checkpointing's recompute), or without a trace each use of a
    partitioned parameter in the forward pass, then the share of them released before the backward (the formula
    `predict` counts their bytes with; under checkpointing the same count)."""
    zero = config.get("zero_optimization") if isinstance(config.get("zero_optimization"), dict) else {}
    counts = zero3_gathers(zero, facts, checkpointed)
    if counts is not None:
        return float(sum(counts))
    persist, _, _, released = _zero3_partition(zero, facts)
    forward = sum(u for u, kept in zip(facts.uses, persist) if not kept)
    return float(forward) * (1.0 + released)


def predict(config: dict, facts: ParamFacts, world_size: int, grad_accum: int = 1,
            ranks_per_node: int | None = None, all_to_all_bytes: float = 0.0,
            checkpointed: bool = False) -> CommPrediction:
    """The volume one rank moves per optimizer step under `config` (see the module's docstring); all_to_all_bytes:
    Ulysses' all-to-alls (ulysses_all_to_all_bytes), added as a part of their own; checkpointed: activation
    checkpointing on (ZeRO-3's gathers in its recompute). Under Ulysses ZeRO partitions and reduces over every rank of
    the world (DeepSpeed's sequence-data-parallel group)."""
    n = facts.total
    g, p = _dtype_bytes(config)
    autocast = autocast_element_bytes(config, facts)
    grad_bytes = autocast or (float(g),) * len(facts.numels)
    gather_bytes = autocast or (float(p),) * len(facts.numels)
    grads = sum(x * e for x, e in zip(facts.numels, grad_bytes))  # N·g
    stage = zero_stage(config)
    zero = config.get("zero_optimization") if isinstance(config.get("zero_optimization"), dict) else {}
    accum = max(1, int(grad_accum))
    notes: list[str] = []
    parts: dict[str, float] = {}
    gathers = world_size > 1  # one rank: DeepSpeed skips its all-gathers (stage_1_and_2, partition_parameters)
    if not gathers:
        notes.append("one rank: DeepSpeed still reduces the gradients, on a group of one, and skips its all-gathers")
    kind = str((config.get("optimizer") or {}).get("type", "")).lower()
    compressed = None
    if stage in (0, 1, 2):
        paper = 2.0 * grads
        multi = _truthy(zero.get("use_multi_rank_bucket_allreduce", True))
        reduce_scatter = _truthy(zero.get("reduce_scatter", True))
        per_reduction = grads if (stage and reduce_scatter and not multi) else 2.0 * grads
        reductions = accum if stage == 2 else 1
        parts["gradients"] = per_reduction * reductions
        if stage:
            parts["parameters (all-gather after the step)"] = float(n * p) if gathers else 0.0
        if kind in ONEBIT and gathers:
            compressed = n / 4.0
            notes.append("1-bit: compressed steps send about N/4 bytes (signs through an all-to-all and an all-gather)"
                         "; 0/1 Adam also skips communication on its local steps")
        elif kind in ONEBIT:
            compressed = 0.0
            notes.append("1-bit on one rank: the compressed steps have no peer to send their signs to (measured: 2 "
                         "bytes a step on one H100, bench/onebit)")
    else:
        paper = 3.0 * grads
        persist, persisted, part_uses, released = _zero3_partition(zero, facts)
        if _truthy(zero.get("zero_quantized_weights")):
            gather_bytes = (1.0,) * len(facts.numels)
            notes.append("qwZ: parameter all-gathers in int8 (scales not counted)")
        counts = zero3_gathers(zero, facts, checkpointed)
        if counts is not None:
            per_micro_batch = float(sum(x * c * e for x, c, e in zip(facts.numels, counts, gather_bytes)))
        else:
            part = [(x * e, x * u * e) for x, u, e, kept in zip(facts.numels, facts.uses, gather_bytes, persist)
                    if not kept]
            part_bytes, part_use_bytes = sum(b for b, _ in part), sum(b for _, b in part)
            per_micro_batch = part_bytes + (2 * part_use_bytes - part_bytes) * released
        parts["parameters (forward and backward gathers)"] = per_micro_batch * accum if gathers else 0.0
        parts["parameters (persistent, after the step)"] = float(persisted * p) if gathers else 0.0
        local = max(1, min(world_size, ranks_per_node or world_size))
        qgz = _truthy(zero.get("zero_quantized_gradients"))
        if qgz and world_size // local > 1:
            two_d = sum(x for x, d in zip(facts.numels, facts.ndims) if d >= 2)
            one_d = sum(x * e for x, e, d in zip(facts.numels, grad_bytes, facts.ndims) if d < 2)
            parts["gradients"] = (two_d * 0.5 * (1 + 1 / local) + one_d) * accum
            notes.append("qgZ: 2-D gradients through two int4 all-to-alls, 1-D ones reduce-scattered")
        else:
            parts["gradients"] = float(grads * accum)
            if qgz:  # stage3.py: all_to_all_quant_reduce only when world size // devices per node > 1
                notes.append("qgZ: on one node DeepSpeed reduce-scatters the gradients as without it (its int4 "
                             "all-to-alls run only when the ranks span several nodes)")
        hpz = _zero_value(zero, "zero_hpz_partition_size", None, 1)
        if hpz > 1:
            notes.append(f"hpZ: backward gathers within groups of {hpz} ranks: the same volume, less of it between "
                         "nodes")
    if autocast is not None and world_size > 1:
        notes.append(_autocast_note(facts, autocast))
    if all_to_all_bytes:
        parts["Ulysses all-to-alls"] = float(all_to_all_bytes)
    total = float(sum(parts.values()))
    return CommPrediction(bytes_per_step=total, paper_bytes_per_step=paper, parts=parts,
                          compressed_bytes_per_step=compressed, notes=notes)


def ulysses_bytes_of(config: dict, resolved, micro_batch: int, grad_accum: int, act_ckpt: bool) -> float:
    """ulysses_all_to_all_bytes for a run of `config` (its sequence_parallel_size and precision); 0 without Ulysses."""
    size = ulysses_group(config)
    if size < 2:
        return 0.0
    return ulysses_all_to_all_bytes(resolved, micro_batch, grad_accum, size, ELEMENT_BYTES.get(precision_of(config), 4),
                                    act_ckpt)


def ulysses_all_to_all_bytes(resolved, micro_batch: int, grad_accum: int, size: int, dtype_bytes: int,
                             act_ckpt: bool) -> float:
    """Bytes one rank hands DeepSpeed's Ulysses all-to-alls per optimizer step (as the comms logger logs them: each
    call's input). Per layer and pass, q, k, v (heads, key/value heads) and the attention output (heads), each
    [seq_len / size, micro_batch, heads, head_dim]; the forward, the backward's mirror of it, and with activation
    checkpointing the recomputed forward."""
    passes = 3 if act_ckpt else 2
    per_layer = (2 * resolved.num_heads + 2 * resolved.num_kv_heads) * resolved.head_dim * \
        (resolved.seq_len // size) * micro_batch * dtype_bytes
    return float(per_layer * resolved.num_layers * passes * grad_accum)
