"""Stage 1 of `dsx run`: a request resolved, without side effects, into a trial: the model, the device and world
size, and the DeepSpeed config (from flags, a preset or a --config file, plus --ds-set keys) linted for that world
size. Anything wrong is a RunRefused with what to change; nothing is written or started.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from dsx.config_facts import (AUTOCAST, AUTOCAST_AT_ZERO0, AUTOCAST_WITH_PIPELINE, CONFIG_FLAGS, config_flags,
                              precision_of)
from dsx.lint.autos import auto_paths
from dsx.host import detect_device
from dsx.results import trial_key
from dsx.run.nodes import NODE_KEYS, NodeRequest, place
from dsx.run.refused import RunRefused
from dsx.run.pipeline import pipeline_flags, pipeline_plan, pipeline_stages

DEFAULT_RESULTS = "results/runs.jsonl"
DEFAULT_TIMEOUT_S = 3600.0

@dataclass(kw_only=True)
class RunRequest(NodeRequest):
    """What `dsx run` was asked (its flags, as data); the node flags are NodeRequest's."""

    model: str
    overrides: dict[str, Any] = field(default_factory=dict)
    seq_len: int | None = None
    vocab_pad: int | None = None
    config_path: str | None = None
    """A DeepSpeed JSON to use as is (no "auto"); excludes the config flags below except ds_sets."""
    preset: str | None = None
    config_flags: dict[str, Any] = field(default_factory=dict)
    """dsx.generate.ConfigRequest fields the user gave (zero, offload, offload_params, precision, micro_batch,
    grad_accum, optimizer, lr)."""
    ds_sets: tuple[str, ...] = ()
    """`KEY=VALUE` DeepSpeed keys (dotted), applied on top of the flags or the --config file."""
    gpus: int | None = None
    steps: int = 20
    warmup: int = 5
    tf32: bool = False
    compile: bool = False
    attn: str = "sdpa"
    act_ckpt: bool = False
    loss: str = "plain"
    """--loss: plain (transformers' head and loss) or tiled (dsx.rank.tiled_loss)."""
    loss_tile_tokens: int | None = None
    """--loss-tile-tokens of --loss tiled (None: dsx.rank.tiled_loss.default_tile_tokens)."""
    act_ckpt_offload: bool = False
    """--act-ckpt-offload: checkpointed layer inputs kept in host memory (dsx.rank.memory_savers)."""
    tiled_mlp: bool = False
    """--tiled-mlp: Llama MLPs through DeepSpeed's TiledMLP (dsx.rank.memory_savers)."""
    kernels: str | None = None
    """--kernels: none or liger (dsx.run.kernels)."""
    fp8: str | None = None
    """--fp8: none, tensorwise or rowwise (torchao's float8 training; dsx.run.kernels)."""
    results: str = DEFAULT_RESULTS
    timeout_s: float | None = DEFAULT_TIMEOUT_S
    flop_check: bool = False
    echo: bool = False
    """Stream the launcher's and ranks' output to the terminal (it always goes to the run's launcher.log)."""
    command: list[str] = field(default_factory=list)
    inject_failure: str | None = None
    """For tests of the failure paths: KIND[:STEP][@RANK] (see dsx.rank.protocol.parse_injection)."""
    entered_at: float | None = None
    """time.time() when the dsx command code was entered (for overhead.dsx_startup_s)."""
    memory_cap: int | None = None
    """Bytes one rank may use (CUDA: caching-allocator limit; CPU ranks: RLIMIT_DATA); None: no cap."""
    sweep: dict[str, Any] | None = None
    """dsx.results.SweepInfo fields when the run is a trial of `dsx sweep` (copied into the row)."""
    sparse_attention: str | None = None
    """--sparse-attention WORD (dsx.sparse.spec.parse_word); None: the config's sparse_attention block, if any."""
    sparse_sets: tuple[str, ...] = ()
    """--sparse-set KEY=VALUE: keys of the sparse_attention layout block."""
    pipeline_stages: int | None = None
    """--pipeline-stages: run the model as a deepspeed.pipe.PipelineModule of this many stages (dsx.pipeline)."""
    pipeline_partition: str | None = None
    """--pipeline-partition: DeepSpeed's partition_method (parameters, uniform, type:REGEX); None: parameters."""
    sequence_parallel: int | None = None
    """--sequence-parallel N: Ulysses over N ranks per micro-batch (dsx.run.sequence); None: the config's, if any."""
    comm_log: bool = True
    """Count communication with DeepSpeed's comms logger (dsx.comm.logger; --no-comm-log turns it off)."""
    host_check: bool = True
    """Refuse a GPU run on one machine predicted to need more host memory than it has (dsx.run.host_check;
    --no-host-check starts it anyway)."""
    python: str | None = None
    """The ranks' interpreter (`--python`, dsx.lane); None: dsx's own."""
    data: str | None = None
    """--data: synthetic (None: the default), random, or a path of the user's tokens (dsx.data)."""
    data_dtype: str | None = None
    """--data-dtype of a token file (uint16 / uint32; None: from the vocabulary's size)."""
    data_seed: int | None = None
    """--data-seed of the built-in sources (None: dsx.data.spec.DEFAULT_SEED)."""

    @property
    def nodes(self) -> NodeRequest:
        return NodeRequest(**{key: getattr(self, key) for key in NODE_KEYS})


@dataclass
class Trial:
    """A request resolved without side effects: the model, device, world size, config and the trial key."""

    request: RunRequest
    resolved: Any
    device: str
    world_size: int
    ds_config: dict
    ds_config_source: str
    micro_batch: int
    grad_accum: int
    notes: list[str]
    key: str
    layout: Any = None
    """dsx.hostfile.Layout of a hostfile run, else None."""
    sparse: Any = None
    """dsx.sparse.planning.SparseDecision when the run asked for sparse attention, else None."""
    pipeline: Any = None
    """dsx.rank.protocol.PipelinePlan of a pipeline run, else None."""
    lane: Any = None
    """dsx.lane.Lane of a `--python` run, else None."""
    data: Any = None
    """dsx.data.DataSpec: what the ranks train on, checked against the model and the run."""
    loss_tile_tokens: int | None = None
    """Tokens per tile of --loss tiled; None: the plain loss."""
    sequence_parallel: int | None = None
    """Ranks sharing each micro-batch's sequence (Ulysses); None: no sequence parallelism."""
    kernels: Any = None
    """dsx.run.kernels.KernelPlan: Liger's kernels and float8 training; None: the stock kernels."""


def resolve_config(request: RunRequest, world_size: int, lane: Any = None) -> tuple[dict, str, list[str]]:
    """(config, source, warnings), linted for the ranks' DeepSpeed (the lane's, else the installed one). Lint
    errors, "auto" values, an unreadable file -> RunRefused."""
    config, source, warnings, _ = _resolve_config(request, world_size, lane)
    return config, source, warnings


def _resolve_config(request: RunRequest, world_size: int, lane: Any = None) -> tuple[dict, str, list[str], Any]:
    """resolve_config, plus the sparse_attention block dsx applies itself (dsx.sparse.spec.take_block): taken out
    of the config before lint for a DeepSpeed 0.19 target, which rejects it."""
    from dsx.sparse.spec import take_block
    from dsx.lint.engine import lint
    from dsx.onebit import FLAG_KINDS, kind_of, refusal_on, run_defaults
    from dsx.versions import VersionError, resolve_target

    try:
        target = resolve_target(lane.deepspeed if lane else None)
    except VersionError as exc:
        raise RunRefused(f"--python {lane.python}: {exc}" if lane else str(exc)) from None
    duplicates: list[str] = []
    if request.config_path:
        given = sorted(k for k, v in request.config_flags.items() if v is not None)
        if given or request.preset:
            flags = ", ".join("--" + k.replace("_", "-") for k in given + (["preset"] if request.preset else []))
            raise RunRefused(f"--config takes the DeepSpeed config as it is: drop {flags} (or use --ds-set KEY=VALUE "
                             "to change a key of the file)")
        from dsx.lint.load import UnreadableConfig, read_config

        try:
            loaded = read_config(request.config_path)
        except UnreadableConfig as exc:
            raise RunRefused(str(exc)) from None
        config, duplicates = loaded.data, loaded.duplicate_keys
        autos = auto_paths(config)
        if autos:
            raise RunRefused(
                f'{request.config_path}: "auto" at {", ".join(autos)}: only the transformers Trainer / accelerate fill '
                '"auto", and dsx run passes the config to DeepSpeed directly. Write the values (dsx config writes a '
                "complete config: dsx config --preset ... -o FILE)")
        from dsx.generate import ConfigRequestError, apply_sets

        try:
            apply_sets(config, request.ds_sets)
        except ConfigRequestError as exc:
            raise RunRefused(str(exc).replace("--set", "--ds-set")) from None
        source = str(Path(request.config_path).resolve())
    else:
        from dsx.generate import ConfigRequest, ConfigRequestError, generate, parse_set
        from dsx.presets import PRESETS

        changes: dict[str, Any] = {}
        preset_block = None
        if request.preset:
            if request.preset not in PRESETS:
                raise RunRefused(f"unknown --preset '{request.preset}' (known: {', '.join(PRESETS)})")
            changes.update(PRESETS[request.preset].changes)
            if "sparse_attention" in changes:  # dsx applies it: the preset's mode becomes the config's block
                preset_block = {"mode": changes.pop("sparse_attention")}
        sets = tuple(changes.pop("sets", ()))
        changes.update({k: v for k, v in request.config_flags.items() if v is not None})
        sets += pipeline_flags(request, changes, world_size)
        if changes.get("onebit") in FLAG_KINDS and not target.is_legacy:
            raise RunRefused(refusal_on(target, FLAG_KINDS[changes["onebit"]], f"--onebit {changes['onebit']}"))
        onebit_sets = tuple(run_defaults(changes, request.ds_sets, request.warmup, request.steps))
        if changes.get("micro_batch") is None and changes.get("train_batch") is None:
            changes["micro_batch"] = 1  # dsx run's default (dsx config would ask for it with --grad-accum)
        allowed = {f.name for f in fields(ConfigRequest)}
        unknown = set(changes) - allowed
        if unknown:
            raise RunRefused(f"unknown config option(s): {', '.join(sorted(unknown))}")
        try:
            sets += tuple(parse_set(s) for s in onebit_sets + tuple(request.ds_sets))
            changes["world_size"] = _data_parallel_ranks(world_size, 1, request.sequence_parallel or 1)
            config = generate(ConfigRequest(**changes, sets=sets), target)
        except ConfigRequestError as exc:
            raise RunRefused(str(exc).replace("--set", "--ds-set")) from None
        source = "flags"
        if preset_block is not None and "sparse_attention" not in config:
            config["sparse_attention"] = preset_block
    if (kind := kind_of(config)) and not target.is_legacy:
        raise RunRefused(refusal_on(target, kind, f"{request.config_path or 'the config'}: optimizer.type"))
    sparse = take_block(config, target.is_legacy)
    stages = pipeline_stages(request, config, world_size) or 1
    sequence = request.sequence_parallel or config.get("sequence_parallel_size")
    sequence = sequence if isinstance(sequence, int) and not isinstance(sequence, bool) and sequence > 1 else 1
    data_parallel = _data_parallel_ranks(world_size, stages, sequence)
    # linted at the data-parallel size its batch sizes are for; dsx.run.sequence checks sequence_parallel_size
    linted = {k: v for k, v in config.items() if k != "sequence_parallel_size"} if sequence > 1 else config
    findings = lint(linted, target=target, world_size=data_parallel, duplicate_keys=duplicates)
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        lines = "\n".join("  " + f.render() for f in errors)
        size = (f"world size {world_size}" if data_parallel == world_size else
                f"data-parallel size {data_parallel} ({world_size} ranks / {stages} pipeline stage(s)"
                + (f" / {sequence} sequence-parallel ranks" if sequence > 1 else "") + ")")
        raise RunRefused(f"the DeepSpeed config has errors for DeepSpeed {target} at {size}:\n{lines}")
    warnings = [f"config warning: {f.path or '<config>'}: {f.message}" for f in findings if f.severity == "warning"]
    return config, source, warnings, sparse


def _data_parallel_ranks(world_size: int, stages: int, sequence: int) -> int:
    """The data-parallel replicas a config's batch sizes are for: the ranks less pipeline stages and Ulysses groups."""
    if sequence > 1 and world_size % (stages * sequence):
        raise RunRefused(f"sequence parallelism over {sequence} ranks must divide the {world_size} rank(s)"
                         + (f" / {stages} pipeline stages" if stages > 1 else ""))
    return world_size // stages // sequence


def resolve_lane(python: str | None, env: dict[str, str] | None = None, runs_dsx: bool = True):
    """The `--python` interpreter's dsx.lane.Lane (asked with the PYTHONPATH the ranks get), or None without one.
    Not an interpreter, no DeepSpeed, no torch/transformers/pydantic, another dsx -> RunRefused (runs_dsx=False, a
    user's script under dsx launch: DeepSpeed and torch only)."""
    if not python:
        return None
    import os

    from dsx.host import package_versions
    from dsx.lane import LaneError, probe, problems
    from dsx.launcher import ROOT, ranks_pythonpath

    env = dict(os.environ if env is None else env)
    if (pythonpath := ranks_pythonpath(env)) is not None:
        env["PYTHONPATH"] = pythonpath
    try:
        lane = probe(python, env)
    except LaneError as exc:
        raise RunRefused(str(exc)) from None
    if issues := problems(lane, ROOT, package_versions().get("dsx"), runs_dsx):
        raise RunRefused(issues[0])
    return lane


def resolve_trial(request: RunRequest) -> Trial:
    """Model, device, world size and the linted DeepSpeed config; writes and starts nothing. RunRefused on bad input."""
    if request.steps < 1:
        raise RunRefused(f"--steps must be at least 1, got {request.steps}")
    if request.warmup < 0:
        raise RunRefused(f"--warmup must be 0 or more, got {request.warmup}")
    if request.memory_cap is not None and request.memory_cap <= 0:
        raise RunRefused(f"--memory-cap must be positive, got {request.memory_cap}")
    device, visible = detect_device()
    placement = place(request.nodes, request.gpus, device, visible)
    world, layout, notes = placement.world_size, placement.layout, list(placement.notes or [])
    if layout is None and device == "cpu" and request.compile:
        notes.append("--compile on CPU ranks uses inductor's C++ backend (slow to compile)")
    lane = resolve_lane(request.python)
    config, source, warnings, taken = _resolve_config(request, world, lane)
    notes += warnings
    from dsx.onebit import run_problems

    if problems := run_problems(config, device, lane):
        raise RunRefused(problems[0])
    zero = config.get("zero_optimization") if isinstance(config.get("zero_optimization"), dict) else {}
    precision = precision_of(config)
    if precision == AUTOCAST and zero.get("zero_quantized_weights") is True:
        raise RunRefused("--precision bf16-autocast with zero_optimization.zero_quantized_weights (ZeRO++ qwZ): "
                         "DeepSpeed refuses the pair at deepspeed.initialize; use bf16 for qwZ")
    if precision == AUTOCAST and not zero.get("stage"):
        notes.append(AUTOCAST_AT_ZERO0)
    if device == "cpu" and zero.get("zero_quantized_weights") is True:
        raise RunRefused("zero_optimization.zero_quantized_weights (ZeRO++ qwZ) cannot run on CPU ranks: DeepSpeed's "
                         "weight quantizer has no CPU kernel (its ranks fail with 'This op had not been implemented "
                         "on CPU backend'); run it on GPUs")
    from dsx.sparse.spec import SparseRequestError, refuse_other_attention, resolve_block

    try:
        requested, block = resolve_block(request.sparse_attention, request.sparse_sets, taken.block,
                                         f"--config {request.config_path}" if request.config_path else "the config")
        if block is not None:
            refuse_other_attention(request.attn, requested)
    except SparseRequestError as exc:
        raise RunRefused(str(exc)) from None
    if request.inject_failure:
        from dsx.rank.protocol import parse_injection

        try:
            parse_injection(request.inject_failure)
        except ValueError as exc:
            raise RunRefused(str(exc)) from None

    from dsx.buckets import fill_buckets
    from dsx.models import ModelError, attn_available, count_params, resolve_model

    try:
        resolved = resolve_model(request.model, request.overrides, seq_len=request.seq_len,
                                 vocab_pad=request.vocab_pad)
    except ModelError as exc:
        raise RunRefused(str(exc)) from None
    ok, reason = attn_available(request.attn, resolved.family)
    if not ok:
        raise RunRefused(f"--attn {request.attn} is unavailable here: {reason}")
    if request.attn == "flash" and device != "cuda":
        raise RunRefused("--attn flash needs a CUDA GPU")
    if source == "flags":  # a --config file is run as it is
        fill_buckets(config, count_params(resolved), request.ds_sets, device)
    from dsx.schema.batch import BatchError, solve_batch

    pipeline = pipeline_plan(request, config, world, resolved, notes)
    if pipeline is not None and precision == AUTOCAST:
        raise RunRefused(AUTOCAST_WITH_PIPELINE)
    from dsx.run.sequence import sequence_parallel_size

    sequence = sequence_parallel_size(request, config, world, resolved, pipeline, notes)
    try:
        replicas = world // (pipeline.stages if pipeline else 1) // (sequence or 1)
        batch = solve_batch(replicas, config.get("train_batch_size"),
                            config.get("train_micro_batch_size_per_gpu"), config.get("gradient_accumulation_steps"))
    except (BatchError, TypeError) as exc:
        raise RunRefused(f"batch sizes: {exc}") from None
    data = resolve_data(request, resolved, batch.train_batch_size, notes)
    from dsx.run.loss import resolve_loss

    loss_tile = resolve_loss(request.loss, request.loss_tile_tokens, resolved, pipeline,
                             batch.train_micro_batch_size_per_gpu, notes, sequence)
    from dsx.run.memory_savers import check_memory_savers

    check_memory_savers(request, resolved, pipeline, notes, sequence)
    from dsx.config_facts import zero_stage
    from dsx.run.kernels import kernel_plan

    kernels = kernel_plan(request, resolved, device, zero_stage(config), pipeline, sequence, notes,
                          precision=precision)
    sparse = None
    if block is not None:
        from dsx.sparse.planning import decide

        origin = ("--sparse-set" if request.sparse_sets or taken.block is None else
                  f"--config {request.config_path}" if request.config_path else f"--preset {request.preset}")
        try:
            sparse = decide(requested, block, resolved, device, handed_to_deepspeed=taken.handed, origin=origin,
                            micro_batch=batch.train_micro_batch_size_per_gpu)
        except SparseRequestError as exc:
            raise RunRefused(str(exc)) from None
        notes += sparse.notes
    optimizer = (config.get("optimizer") or {})
    if optimizer.get("type", "").lower() in ("adam", "adamw") and not (optimizer.get("params") or {}).get(
            "torch_adam") and not (config.get("zero_optimization") or {}).get("offload_optimizer"):
        notes.append("optimizer Adam/AdamW: DeepSpeed uses its FusedAdam op, JIT-built on first use and cached in "
                     "TORCH_EXTENSIONS_DIR (about 50 s on a GPU host); --ds-set optimizer.params.torch_adam=true uses "
                     "torch's AdamW instead")
    return Trial(request=request, resolved=resolved, device=device, world_size=world, ds_config=config,
                 ds_config_source=source, micro_batch=batch.train_micro_batch_size_per_gpu,
                 grad_accum=batch.gradient_accumulation_steps, notes=notes,
                 key=trial_key(ds_config=config, model={"model": resolved.name, "overrides": resolved.overrides,
                                                        "seq_len": resolved.seq_len, "vocab_pad": resolved.vocab_pad},
                               toggles={"tf32": request.tf32, "compile": request.compile, "attn": request.attn,
                                        "act_ckpt": request.act_ckpt,
                                        **({"loss": "tiled", "loss_tile_tokens": loss_tile} if loss_tile else {}),
                                        **({"loss": "fused"} if request.loss == "fused" else {}),
                                        **({"act_ckpt_offload": True} if request.act_ckpt_offload else {}),
                                        **({"tiled_mlp": True} if request.tiled_mlp else {}),
                                        **({"kernels": "liger"} if kernels and kernels.liger else {}),
                                        **({"fp8": kernels.fp8} if kernels and kernels.fp8 else {}),
                                        **({"sparse_attention": {"requested": requested, **sparse.info["params"]}}
                                           if sparse else {})},
                               device=device, world_size=world, steps=request.steps, warmup=request.warmup,
                               memory_cap=request.memory_cap,
                               nodes=({"nodes": layout.selection, "launcher": request.launcher}
                                      if layout is not None else None),
                               pipeline=pipeline.model_dump() if pipeline else None,
                               lane={"python": lane.python, "deepspeed": lane.deepspeed} if lane else None,
                               data=data.trial_part()),
                 layout=layout, sparse=sparse, pipeline=pipeline, lane=lane, data=data, loss_tile_tokens=loss_tile,
                 sequence_parallel=sequence, kernels=kernels)


def resolve_data(request: RunRequest, resolved, global_batch: int, notes: list[str]):
    """--data as a checked dsx.data.DataSpec (a file's dtype, ids and size against the model and every step the
    run takes); RunRefused with the one-line reason otherwise."""
    from dsx.data import DataError
    from dsx.data.files import inspect
    from dsx.data.spec import parse_data

    try:
        spec = parse_data(request.data, request.data_dtype, request.data_seed)
        spec, data_notes = inspect(spec, resolved.token_vocab_size, resolved.seq_len, global_batch,
                                   (request.warmup + request.steps) * global_batch)
    except DataError as exc:
        raise RunRefused(str(exc)) from None
    notes += data_notes
    return spec

