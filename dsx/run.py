"""`dsx run`: resolve a model and a DeepSpeed config, launch it through DeepSpeed's launcher, measure, append a row.

Flow: `prepare(request)` resolves the model, makes the DeepSpeed config (from flags through dsx.generate, or a
--config file) and lints it with the real world size - errors refuse the run (RunRefused: nothing is started and
no row is written) - then writes the config and the rank plan into the run's folder and builds the launch
(dsx.launcher.build_launch). `execute(prepared)` starts it (dsx.launcher.run_plan), gathers every rank's JSON into
one RunRow (per-rank values and their max) and appends it to the results file, whatever the outcome: a run that
ran out of memory, failed, hung or lost a rank is a row with status oom / error / timeout and the message.

The config is used as the user asked. In particular the default optimizer (AdamW) makes DeepSpeed JIT-build its
FusedAdam op on first use (about 50 s on a GPU host, once per TORCH_EXTENSIONS_DIR); dsx does not swap in
torch's AdamW behind the user's back: `--ds-set optimizer.params.torch_adam=true` does that explicitly, and the
build time shows up in the row (overhead.ds_initialize_s, overhead.jit_built).
"""

from __future__ import annotations

import json
import os
import platform
import socket
import statistics
import time
import uuid
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dsx import leftovers
from dsx.launcher import LaunchError, LaunchPlan, Nodes, build_launch, capture, run_plan
from dsx.results import (
    MEMORY_FIELDS, Figures, Memory, MemoryMax, ModelInfo, NodesInfo, Overhead, RankMemory, RankResult, RunRow, StepTime, SweepInfo,
    Toggles, Versions, append_row, config_hash,
)

DEFAULT_RESULTS = "results/runs.jsonl"
DEFAULT_TIMEOUT_S = 3600.0


class RunRefused(ValueError):
    """The run cannot start as asked (bad flags, a config with lint errors, "auto" values, too few GPUs...).
    Nothing was launched and no row is written; the message says what to change."""


@dataclass
class RunRequest:
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
    results: str = DEFAULT_RESULTS
    timeout_s: float | None = DEFAULT_TIMEOUT_S
    flop_check: bool = False
    echo: bool = False
    """Stream the launcher's and ranks' output to the terminal (it always goes to the run's launcher.log)."""
    command: list[str] = field(default_factory=list)
    inject_failure: str | None = None
    """For tests of the failure paths: KIND[:STEP][@RANK] (see launch/train_rank.py)."""
    entered_at: float | None = None
    """time.time() when the dsx command code was entered (for overhead.dsx_startup_s)."""
    memory_cap: int | None = None
    """Bytes one rank may use (CUDA: caching-allocator limit; CPU ranks: RLIMIT_DATA); None: no cap."""
    sweep: dict[str, Any] | None = None
    """dsx.results.SweepInfo fields when the run is a trial of `dsx sweep` (copied into the row)."""
    hostfile: str | None = None
    """Run over the nodes of a DeepSpeed hostfile (then `gpus` is the runner's --num_gpus: ranks per node)."""
    launcher: str = "pdsh"
    """DeepSpeed's multi-node launcher: pdsh | openmpi | slurm | no-ssh (one runner per node, all on this machine)."""
    include: str | None = None
    exclude: str | None = None
    num_nodes: int | None = None
    master_addr: str | None = None
    """Default: 127.0.0.1 on one node, else the first selected host."""
    master_port: int | None = None
    """Default: a port free on this machine."""
    ssh_port: int | None = None


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


@dataclass
class Prepared:
    request: RunRequest
    run_id: str
    run_dir: Path
    started_utc: str
    device: str
    world_size: int
    ds_config: dict
    ds_config_source: str
    config_path: Path
    plan_path: Path
    launch: LaunchPlan
    resolved: Any
    params: int | None
    micro_batch: int
    grad_accum: int
    precision: str
    gpu_names: list[str]
    notes: list[str]
    entered_at: float
    trial_key: str = ""
    prepared_at: float = 0.0
    layout: Any = None


# ----------------------------------------------------------------------------------------------- environment


def process_start_time() -> float | None:
    try:
        import psutil

        return psutil.Process().create_time()
    except Exception:
        return None


def detect_device() -> tuple[str, int]:
    """('cuda', visible GPU count) or ('cpu', 0). torch.cuda.device_count() creates no CUDA context."""
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return "cuda", torch.cuda.device_count()
    return "cpu", 0


def probe_gpus(env: dict[str, str]) -> list[tuple[str, tuple[int, int] | None]]:
    """(name, compute capability) of each visible GPU, in CUDA order, from NVML or nvidia-smi (never through
    torch.cuda, which would hold a CUDA context in the dsx process during the run). [] when unknown."""
    rows: list[tuple[str, str, str, tuple[int, int] | None]] = []  # index, uuid, name, cc
    try:
        import pynvml

        pynvml.nvmlInit()
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else name
            uid = pynvml.nvmlDeviceGetUUID(h)
            uid = uid.decode() if isinstance(uid, bytes) else uid
            cc = tuple(pynvml.nvmlDeviceGetCudaComputeCapability(h))
            rows.append((str(i), uid, name, (int(cc[0]), int(cc[1]))))
    except Exception:
        rc, out = capture(["nvidia-smi", "--query-gpu=index,uuid,name,compute_cap", "--format=csv,noheader"])
        if rc == 0:
            for line in out.strip().splitlines():
                parts = [p.strip() for p in line.split(",")]
                if len(parts) >= 4:
                    try:
                        ma, mi = parts[3].split(".")
                        cc: tuple[int, int] | None = (int(ma), int(mi))
                    except ValueError:
                        cc = None
                    rows.append((parts[0], parts[1], parts[2], cc))
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [(name, cc) for _, _, name, cc in rows]
    chosen = []
    for token in [t.strip() for t in visible.split(",") if t.strip()]:
        for index, uid, name, cc in rows:
            if token == index or (token.startswith("GPU-") and uid.startswith(token)):
                chosen.append((name, cc))
    return chosen


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def package_versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in ("torch", "deepspeed", "transformers", "dsx"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def built_since(root: Path, since: float) -> list[str]:
    """Names of extension ops whose shared library was written after `since` (JIT builds during the run)."""
    if not root.is_dir():
        return []
    names = set()
    for so in root.rglob("*.so"):
        try:
            if so.stat().st_mtime >= since:
                names.add(so.parent.name)
        except OSError:
            continue
    return sorted(names)


# ----------------------------------------------------------------------------------------------- config


def _auto_paths(node: Any, path: str = "") -> list[str]:
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _auto_paths(v, f"{path}.{k}" if path else str(k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _auto_paths(v, f"{path}[{i}]")]
    return [path] if node == "auto" else []


def _apply_sets(config: dict, sets: tuple[str, ...]) -> None:
    from dsx.generate import ConfigRequestError, parse_set

    for text in sets:
        try:
            key, value = parse_set(text)
        except ConfigRequestError as exc:
            raise RunRefused(str(exc).replace("--set", "--ds-set")) from None
        node = config
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise RunRefused(f"--ds-set {key}: '{part}' holds {child!r}, not a section")
            node = child
        node[parts[-1]] = value


def resolve_config(request: RunRequest, world_size: int) -> tuple[dict, str, list[str]]:
    """(config, source, warnings). Lint errors, "auto" values, an unreadable file -> RunRefused."""
    from dsx.lint.engine import lint
    from dsx.versions import VersionError, resolve_target

    try:
        target = resolve_target(None)
    except VersionError as exc:
        raise RunRefused(str(exc)) from None
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
        autos = _auto_paths(config)
        if autos:
            raise RunRefused(
                f'{request.config_path}: "auto" at {", ".join(autos)}: only the transformers Trainer / accelerate fill '
                '"auto", and dsx run passes the config to DeepSpeed directly. Write the values (dsx config writes a '
                "complete config: dsx config --preset ... -o FILE)")
        _apply_sets(config, request.ds_sets)
        source = str(Path(request.config_path).resolve())
    else:
        from dsx.generate import ConfigRequest, ConfigRequestError, generate, parse_set
        from dsx.presets import PRESETS

        changes: dict[str, Any] = {}
        if request.preset:
            if request.preset not in PRESETS:
                raise RunRefused(f"unknown --preset '{request.preset}' (known: {', '.join(PRESETS)})")
            changes.update(PRESETS[request.preset].changes)
        sets = tuple(changes.pop("sets", ()))
        changes.update({k: v for k, v in request.config_flags.items() if v is not None})
        if changes.get("micro_batch") is None and changes.get("train_batch") is None:
            changes["micro_batch"] = 1  # dsx run's default (dsx config would ask for it with --grad-accum)
        allowed = {f.name for f in fields(ConfigRequest)}
        unknown = set(changes) - allowed
        if unknown:
            raise RunRefused(f"unknown config option(s): {', '.join(sorted(unknown))}")
        try:
            sets += tuple(parse_set(s) for s in request.ds_sets)
            changes["world_size"] = world_size
            config = generate(ConfigRequest(**changes, sets=sets), target)
        except ConfigRequestError as exc:
            raise RunRefused(str(exc).replace("--set", "--ds-set")) from None
        source = "flags"
    findings = lint(config, target=target, world_size=world_size, duplicate_keys=duplicates)
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        lines = "\n".join("  " + f.render() for f in errors)
        raise RunRefused(f"the DeepSpeed config has errors for DeepSpeed {target} at world size {world_size}:\n{lines}")
    warnings = [f"config warning: {f.path or '<config>'}: {f.message}" for f in findings if f.severity == "warning"]
    return config, source, warnings


def precision_of(config: dict) -> str:
    if (config.get("bf16") or {}).get("enabled") is True or (config.get("bfloat16") or {}).get("enabled") is True:
        return "bf16"
    if (config.get("fp16") or {}).get("enabled") is True:
        return "fp16"
    return "fp32"


# ----------------------------------------------------------------------------------------------- prepare


def trial_key(config: dict, resolved: Any, request: RunRequest, device: str, world_size: int,
              layout: Any = None) -> str:
    """What makes two runs the same trial (see RunRow.trial_key); the micro-batch is inside the config."""
    nodes = {"nodes": layout.selection, "launcher": request.launcher} if layout is not None else {}
    return config_hash({**nodes,
        "ds_config": config, "model": resolved.name, "overrides": resolved.overrides, "seq_len": resolved.seq_len,
        "vocab_pad": resolved.vocab_pad, "toggles": {"tf32": request.tf32, "compile": request.compile,
                                                     "attn": request.attn, "act_ckpt": request.act_ckpt},
        "device": device, "world_size": world_size, "steps": request.steps, "warmup": request.warmup,
        "memory_cap": request.memory_cap,
    })


def resolve_trial(request: RunRequest) -> Trial:
    """Model, device, world size and the linted DeepSpeed config; writes and starts nothing. RunRefused on bad input."""
    if request.steps < 1:
        raise RunRefused(f"--steps must be at least 1, got {request.steps}")
    if request.warmup < 0:
        raise RunRefused(f"--warmup must be 0 or more, got {request.warmup}")
    if request.memory_cap is not None and request.memory_cap <= 0:
        raise RunRefused(f"--memory-cap must be positive, got {request.memory_cap}")
    if request.inject_failure:
        from launch.train_rank import parse_injection

        try:
            parse_injection(request.inject_failure)
        except ValueError as exc:
            raise RunRefused(str(exc)) from None

    from dsx.models import ModelError, attn_available, resolve_model

    try:
        resolved = resolve_model(request.model, request.overrides, seq_len=request.seq_len,
                                 vocab_pad=request.vocab_pad)
    except ModelError as exc:
        raise RunRefused(str(exc)) from None
    ok, reason = attn_available(request.attn, resolved.family)
    if not ok:
        raise RunRefused(f"--attn {request.attn} is unavailable here: {reason}")

    if not request.hostfile:
        given = [flag for flag, value in (("--include", request.include), ("--exclude", request.exclude),
                                          ("--num-nodes", request.num_nodes), ("--ssh-port", request.ssh_port),
                                          ("--launcher", request.launcher != "pdsh")) if value]
        if given:
            raise RunRefused(f"{', '.join(given)} need(s) --hostfile")
    device, visible = detect_device()
    notes: list[str] = []
    layout = resolve_nodes(request.hostfile, launcher=request.launcher, include=request.include,
                           exclude=request.exclude, num_nodes=request.num_nodes,
                           gpus=request.gpus) if request.hostfile else None
    if layout is not None:
        world = layout.world_size
        if device == "cuda" and max(len(slots) for slots in layout.selection.values()) > visible:
            notes.append(f"this machine has {visible} GPU(s); the hostfile gives a node more slots than that")
    elif device == "cuda":
        world = request.gpus if request.gpus is not None else visible
        if world > visible:
            raise RunRefused(f"--gpus {world} but only {visible} GPU(s) are visible")
    else:
        world = request.gpus if request.gpus is not None else 1
        if request.compile:
            notes.append("--compile on CPU ranks uses inductor's C++ backend (slow to compile)")
    if world < 1:
        raise RunRefused(f"--gpus must be at least 1, got {world}")
    if request.attn == "flash" and device != "cuda":
        raise RunRefused("--attn flash needs a CUDA GPU")

    config, source, warnings = resolve_config(request, world)
    notes += warnings
    from dsx.schema.batch import BatchError, solve_batch

    try:
        batch = solve_batch(world, config.get("train_batch_size"), config.get("train_micro_batch_size_per_gpu"),
                            config.get("gradient_accumulation_steps"))
    except (BatchError, TypeError) as exc:
        raise RunRefused(f"batch sizes: {exc}") from None
    optimizer = (config.get("optimizer") or {})
    if optimizer.get("type", "").lower() in ("adam", "adamw") and not (optimizer.get("params") or {}).get(
            "torch_adam") and not (config.get("zero_optimization") or {}).get("offload_optimizer"):
        notes.append("optimizer Adam/AdamW: DeepSpeed uses its FusedAdam op, JIT-built on first use and cached in "
                     "TORCH_EXTENSIONS_DIR (about 50 s on a GPU host); --ds-set optimizer.params.torch_adam=true uses "
                     "torch's AdamW instead")
    return Trial(request=request, resolved=resolved, device=device, world_size=world, ds_config=config,
                 ds_config_source=source, micro_batch=batch.train_micro_batch_size_per_gpu,
                 grad_accum=batch.gradient_accumulation_steps, notes=notes,
                 key=trial_key(config, resolved, request, device, world, layout), layout=layout)


def _is_this_machine(host: str) -> bool:
    """Whether a hostfile name is this machine: a loopback address, one of its addresses, or its host name."""
    import ipaddress
    import socket

    if host in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if address.is_loopback:
        return True
    import psutil

    return any(a.address.split("%")[0] == str(address) for addrs in psutil.net_if_addrs().values() for a in addrs)


def resolve_nodes(hostfile: str, *, launcher: str = "pdsh", include: str | None = None, exclude: str | None = None,
                  num_nodes: int | None = None, gpus: int | None = None):
    """The hostfile's rank layout after --include/--exclude/--num-nodes/--gpus, checked; RunRefused otherwise."""
    import shutil

    from dsx.hostfile import HostfileError, Layout, read_hostfile, select
    from dsx.launcher import LAUNCHERS

    if launcher not in LAUNCHERS:
        raise RunRefused(f"unknown --launcher {launcher!r} (known: {', '.join(LAUNCHERS)})")
    try:
        hosts = read_hostfile(hostfile)
        layout = Layout.from_selection(select(hosts, include, exclude, num_nodes, gpus))
    except HostfileError as exc:
        raise RunRefused(str(exc)) from None
    if launcher == "no-ssh":
        remote = [host for host in layout.selection if not _is_this_machine(host)]
        if remote:
            raise RunRefused(f"--launcher no-ssh starts every node's launcher from this machine, but "
                             f"{', '.join(remote)} is not this machine: use --launcher pdsh (or openmpi/slurm), or "
                             "run DeepSpeed's runner with --no_ssh --node_rank N on each node yourself")
    else:
        tool = {"pdsh": "pdsh", "openmpi": "mpirun", "slurm": "srun"}[launcher]
        if not shutil.which(tool):
            raise RunRefused(f"--launcher {launcher} needs {tool} on PATH"
                             + (" (Debian/Ubuntu: apt-get install pdsh)" if tool == "pdsh" else ""))
    return layout


def prepare(request: RunRequest, env: dict[str, str] | None = None, cwd: str | None = None,
            trial: Trial | None = None, check_nodes: bool = True) -> Prepared:
    """Everything up to the launch; writes the config and plan into the run folder. RunRefused on bad input.
    check_nodes=False (--dry-run) skips the ssh check of a hostfile's nodes."""
    entered = request.entered_at or time.time()
    env = dict(os.environ if env is None else env)
    cwd = cwd or os.getcwd()
    trial = trial or resolve_trial(request)
    resolved, device, world, config = trial.resolved, trial.device, trial.world_size, trial.ds_config
    notes = list(trial.notes)
    from dsx.models import count_params

    gpus = probe_gpus(env) if device == "cuda" else []
    if device == "cpu" and trial.layout is None:  # DeepSpeed's shm allreduce only when every rank is on one node
        if shortfall := leftovers.shm_shortfall(world):
            raise RunRefused(shortfall)
    run_id = uuid.uuid4().hex
    results = Path(request.results)
    run_dir = (results.parent / results.stem / run_id).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / "ds_config.json"
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    plan = {
        "run_id": run_id, "model": resolved.name, "overrides": resolved.overrides, "seq_len": resolved.seq_len,
        "vocab_pad": resolved.vocab_pad, "micro_batch": trial.micro_batch,
        "grad_accum": trial.grad_accum, "steps": request.steps, "warmup": request.warmup,
        "toggles": {"tf32": request.tf32, "compile": request.compile, "attn": request.attn,
                    "act_ckpt": request.act_ckpt},
        "ds_config_path": str(config_path), "output_dir": str(run_dir), "device": device,
        "flop_check": request.flop_check, "seed": 1234, "inject_failure": request.inject_failure,
        "memory_cap": request.memory_cap,
    }
    plan_path = run_dir / "plan.json"
    plan_path.write_text(json.dumps(plan, indent=2) + "\n")
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    nodes = None
    if trial.layout is not None:
        if request.launcher in ("pdsh", "openmpi") and check_nodes:
            check_ssh(trial.layout, env, request.ssh_port)
        nodes = Nodes(hostfile=str(Path(request.hostfile).resolve()), layout=trial.layout, launcher=request.launcher,
                      include=request.include, exclude=request.exclude, num_nodes=request.num_nodes,
                      num_gpus=request.gpus, ssh_port=request.ssh_port, env_file=str(run_dir / "deepspeed_env"))
    master_addr = request.master_addr or (next(iter(trial.layout.selection)) if trial.layout else "127.0.0.1")
    try:
        launch = build_launch(plan_json=str(plan_path), world_size=world, device=device,
                              master_port=request.master_port or free_port(), base_env=env, cwd=cwd,
                              gpu_capabilities=[cc for _, cc in gpus if cc] or None, cpu_count=cpus,
                              master_addr=master_addr, nodes=nodes)
    except LaunchError as exc:
        raise RunRefused(str(exc)) from None
    for path, text in launch.files.items():
        Path(path).write_text(text)
    try:
        params = count_params(resolved)
    except Exception:  # counting is informative only; never block a run on it
        params = None
    return Prepared(
        request=request, run_id=run_id, run_dir=run_dir,
        started_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"), device=device, world_size=world,
        ds_config=config, ds_config_source=trial.ds_config_source, config_path=config_path, plan_path=plan_path,
        launch=launch, resolved=resolved, params=params, micro_batch=trial.micro_batch, grad_accum=trial.grad_accum,
        precision=precision_of(config), gpu_names=[name for name, _ in gpus][:world], notes=notes + launch.notes,
        entered_at=entered, trial_key=trial.key, prepared_at=time.time(), layout=trial.layout,
    )


def check_ssh(layout: Any, env: dict[str, str], ssh_port: int | None) -> None:
    """Every node answers `ssh NODE true` with pdsh's options, or RunRefused naming the first that does not: fails
    in seconds where a launch would hang or die with a message about some other host."""
    from dsx.launcher import ssh_check_argv

    for host in layout.selection:
        code, output = capture(ssh_check_argv(host, env, ssh_port), timeout_s=20)
        if code != 0:
            detail = " ".join(output.split())[-300:] or "no answer within 20 s"
            raise RunRefused(f"host {host} is not reachable over ssh (ssh {host} true: {detail}); DeepSpeed's "
                             "runner needs passwordless ssh to every node (PDSH_SSH_ARGS_APPEND, --ssh-port)")


def describe_dry_run(prepared: Prepared) -> str:
    lines = [prepared.launch.describe(),
             f"DeepSpeed config: {prepared.config_path}",
             f"rank plan: {prepared.plan_path}",
             f"world size {prepared.world_size} ({prepared.device}), micro-batch {prepared.micro_batch}, "
             f"grad-accum {prepared.grad_accum}, {prepared.precision}, model {prepared.resolved.name} "
             f"({prepared.params:,} parameters)" if prepared.params else ""]
    lines += [f"note: {n}" for n in prepared.notes if n not in prepared.launch.notes]
    lines = [line for line in lines if line]
    if prepared.layout is not None:
        lines += ["", prepared.layout.describe(), "", *node_commands(prepared)]
    return "\n".join(lines)


def node_commands(prepared: Prepared) -> list[str]:
    """What DeepSpeed's runner starts on each node (launch.py with the node's rank), for --dry-run."""
    import shlex

    from dsx.hostfile import encode_world_info

    launch = prepared.launch
    if launch.node_argvs:
        return ["each node's runner, started here together:"] + [shlex.join(a) for a in launch.node_argvs]
    script = launch.argv[launch.argv.index("--no_local_rank") + 1:]
    lines = [f"what the runner ({prepared.request.launcher}) runs on each node:"]
    for node_rank, host in enumerate(prepared.layout.selection):
        command = [launch.argv[0], "-u", "-m", "deepspeed.launcher.launch",
                   f"--world_info={encode_world_info(prepared.layout.selection)}", f"--node_rank={node_rank}",
                   f"--master_addr={launch.master_addr}", f"--master_port={launch.master_port}", "--no_local_rank",
                   *script]
        lines.append(f"  {host}: cd {shlex.quote(launch.cwd)}; {shlex.join(command)}")
    return lines


# ----------------------------------------------------------------------------------------------- gather


def _load_rank(run_dir: Path, rank: int) -> dict | None:
    path = run_dir / f"rank-{rank}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _max_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _span(ranks: list[dict], start: str, end: str) -> float | None:
    return _max_or_none([(r["times"][end] - r["times"][start]) if start in r.get("times", {})
                         and end in r.get("times", {}) else None for r in ranks])


# Messages of a rank that lost a peer (the peer died or failed first): gloo, NCCL and torch.distributed wording.
PEER_LOST = ("connection closed by peer", "connection reset by peer", "broken pipe", "remote process exited",
             "communicator was aborted", "nccl error", "socket timeout", "connection refused")


def _is_peer_loss(message: str | None) -> bool:
    text = (message or "").lower()
    return any(p in text for p in PEER_LOST)


def _status(prepared: Prepared, ranks: list[dict | None], completed) -> tuple[str, str | None]:
    """(status, one-line message). The cause is named first: the earliest real failure of a rank; a rank that
    died without a result when the others only lost their peer; else what the launcher said."""
    log = prepared.run_dir / "launcher.log"
    if completed.timed_out:
        reached = ", ".join(f"rank {i}: {r.get('phase')}" if r else f"rank {i}: not started"
                            for i, r in enumerate(ranks))
        return "timeout", (f"timed out after {prepared.request.timeout_s:g} s and was killed ({reached}); "
                           f"output in {log}")
    failed = sorted(((r["times"].get("failed", float("inf")), i, r) for i, r in enumerate(ranks)
                     if r and r.get("status") in ("oom", "error")), key=lambda item: (item[0], item[1]))
    lost = [(i, r) for i, r in enumerate(ranks) if not r or r.get("status") not in ("ok", "oom", "error")]
    genuine = [item for item in failed if not _is_peer_loss(item[2].get("error"))]
    if genuine or (failed and not lost):
        _, i, r = (genuine or failed)[0]
        after = f"; {len(failed) - 1} other rank(s) failed after it" if len(failed) > 1 else ""
        return r["status"], (f"rank {i}: {r.get('error')} (traceback in {prepared.run_dir / f'rank-{i}.json'})"
                             f"{after}")
    if lost:
        parts = [f"rank {i} " + (f"stopped during '{r.get('phase')}' without a result" if r else "never reported")
                 for i, r in lost]
        message = (f"{'; '.join(parts)} (launcher exit code {completed.returncode}: the rank was killed, e.g. by "
                   "the kernel's OOM killer, or exited)")
        if failed:
            _, i, r = failed[0]
            message += f"; rank {i} then lost its peer: {r.get('error')[:200]}"
        elif not any(ranks):
            tail = [line for line in completed.tail.splitlines() if line.strip()]
            message += f"; last output: {tail[-1].strip()[:300]}" if tail else ""
        return "error", f"{message}; output in {log}"
    if completed.returncode != 0:
        return "error", f"the launcher exited with {completed.returncode} after every rank finished; output in {log}"
    return "ok", None


def gather(prepared: Prepared, completed, jit_built: list[str]) -> RunRow:
    request = prepared.request
    world = prepared.world_size
    raw = [_load_rank(prepared.run_dir, r) for r in range(world)]
    present = [r for r in raw if r]
    status, error = _status(prepared, raw, completed)
    resolved = prepared.resolved

    # ---- figures
    figures = Figures()
    from dsx.flops import model_flops_per_token

    try:
        figures.flops_per_token = float(model_flops_per_token(resolved))
    except Exception as exc:
        prepared.notes.append(f"analytic FLOPs unavailable: {exc}")
    dtype = prepared.precision
    if dtype == "fp32" and request.tf32 and prepared.device == "cuda":
        dtype = "tf32"
    figures.flops_dtype = dtype
    gpu_name = next((r.get("gpu_name") for r in present if r.get("gpu_name")), None) or (
        prepared.gpu_names[0] if prepared.gpu_names else None)
    if prepared.device == "cuda":
        from dsx.gpus import peak_tflops

        figures.peak_tflops = peak_tflops(gpu_name, dtype)
    steps_by_rank = [r.get("step_time_s") or [] for r in raw if r]
    if status == "ok" and len(steps_by_rank) == world and all(len(s) == request.steps for s in steps_by_rank):
        per_step = [max(s[i] for s in steps_by_rank) for i in range(request.steps)]
        median = statistics.median(per_step)
        figures.step_time_s = StepTime(median=median, min=min(per_step), max=max(per_step), all=per_step)
        samples = prepared.micro_batch * prepared.grad_accum * world
        figures.samples_per_s = samples / median
        figures.tokens_per_s = samples * resolved.seq_len / median
        if figures.flops_per_token is not None:
            figures.model_tflops_per_s = figures.flops_per_token * figures.tokens_per_s / world / 1e12
            if figures.peak_tflops:
                figures.mfu = figures.model_tflops_per_s / figures.peak_tflops
    check = (raw[0] or {}).get("flop_check") if raw else None
    if check:
        per_token = check.get("counter_flops_per_token")
        tokens_per_rank_step = prepared.micro_batch * resolved.seq_len * prepared.grad_accum
        if figures.flops_per_token is not None:
            figures.analytic_flops_per_step = figures.flops_per_token * tokens_per_rank_step
        if per_token is not None:
            figures.flop_counter_flops_per_step = per_token * tokens_per_rank_step
            if figures.analytic_flops_per_step:
                ratio = figures.analytic_flops_per_step / figures.flop_counter_flops_per_step
                figures.flop_check_note = (f"analytic / torch.utils.flop_counter = {ratio:.4f} (counter: attn "
                                           f"{check.get('attn')}, micro-batch {check.get('micro_batch')}, on "
                                           f"{check.get('device')}; the analytic count adds 6 FLOPs per 1-D "
                                           "parameter, which the counter does not see)")
        else:
            figures.flop_check_note = f"flop counter failed: {check.get('error')}"

    # ---- memory
    per_rank = []
    methods: dict[str, str] = {}
    for r in present:
        mem = r.get("memory") or {}
        per_rank.append(RankMemory(rank=r["rank"], **{k: mem.get(k) for k in MEMORY_FIELDS},
                                   unavailable=r.get("memory_unavailable") or {}))
        for k, v in (r.get("memory_methods") or {}).items():
            methods.setdefault(k, v)
    mem_max = MemoryMax(**{k: _max_or_none([getattr(m, k) for m in per_rank]) for k in MEMORY_FIELDS})
    capacities = [(r["capacity"], r.get("capacity_source")) for r in present if r.get("capacity")]
    capacity, capacity_source = min(capacities) if capacities else (None, None)
    memory = Memory(per_rank=per_rank, max=mem_max, methods=methods, capacity=capacity,
                    capacity_source=capacity_source)

    # ---- ranks
    ranks = []
    for i, r in enumerate(raw):
        if not r:
            ranks.append(RankResult(rank=i, status="missing"))
            continue
        times = r.get("times") or {}
        order = ["process_start", "imported", "distributed", "model_built", "initialized", "warmup_done",
                 "timed_done", "end"]
        spans = {f"{b}_s": times[b] - times[a] for a, b in zip(order, order[1:]) if a in times and b in times}
        ranks.append(RankResult(rank=i, status=r.get("status", "running"), phase=r.get("phase"),
                                error=r.get("error"), host=r.get("host"), node_rank=r.get("node_rank"),
                                device=r.get("device"),
                                step_time_s=r.get("step_time_s") or [], loss=r.get("loss") or [],
                                timings_s=spans))

    # ---- overhead
    flop_seconds = (check or {}).get("seconds")
    now = time.time()
    # A sweep runs many trials in one dsx process: its trials count from their own start, not the process's.
    proc_start = process_start_time() if request.sweep is None else None
    warm = [sum(r.get("warmup_step_time_s") or []) for r in present]
    timed = [sum(r.get("step_time_s") or []) for r in present]
    overhead = Overhead(
        dsx_startup_s=(prepared.entered_at - proc_start) if proc_start else None,
        prepare_s=completed.started - prepared.entered_at,
        launch_to_rank_start_s=(_max_or_none([r["times"].get("process_start") for r in present]) - completed.started)
        if present else None,
        rank_import_s=_span(present, "process_start", "imported"),
        dist_init_s=_span(present, "imported", "distributed"),
        model_build_s=_max_or_none([r["times"]["model_built"] - r["times"].get("flop_check_done", r["times"]["distributed"])
                                    for r in present if "model_built" in r["times"] and "distributed" in r["times"]]),
        flop_check_s=flop_seconds,
        ds_initialize_s=_span(present, "model_built", "initialized"),
        jit_built=jit_built,
        warmup_s=max(warm) if warm else None,
        timed_s=max(timed) if timed else None,
        teardown_s=(completed.ended - _max_or_none([r["times"].get("end") for r in present]))
        if present and all(r["times"].get("end") for r in present) and not completed.timed_out else None,
        total_s=(now - proc_start) if proc_start else now - prepared.entered_at,
        device_seconds=(completed.ended - completed.started) * world,
    )
    overhead.added_s = overhead.total_s - (overhead.warmup_s or 0.0) - (overhead.timed_s or 0.0)

    versions = package_versions()
    ran = next((r.get("versions") for r in present if r.get("versions")), None) or {}
    versions.update({k: v for k, v in ran.items() if v})
    notes = list(dict.fromkeys(prepared.notes + [n for r in present for n in r.get("notes") or []]
                               + getattr(completed, "cleaned", [])))
    seen = {r.get("params_seen") for r in present if r.get("params_seen") is not None}
    if prepared.params is not None and seen and seen != {prepared.params}:
        notes.append(f"the ranks' models hold {sorted(seen)} parameters, the meta-device count says "
                     f"{prepared.params}")
    if jit_built:
        notes.append(f"JIT-built during this run: {', '.join(jit_built)} (see overhead.ds_initialize_s)")
    if status == "ok":
        losses = [r.get("loss") or [] for r in present]
        if any(abs(a - b) > 1e-3 * max(1.0, abs(a)) for other in losses[1:] for a, b in zip(losses[0], other)):
            notes.append("ranks report different losses for the same step although they got the same batches")
    return RunRow(
        run_id=prepared.run_id, time=prepared.started_utc, host=socket.gethostname(), device=prepared.device,
        gpu_name=gpu_name, gpu_count=world if prepared.device == "cuda" else 0,
        versions=Versions(python=platform.python_version(), **versions),
        ds_config=prepared.ds_config, ds_config_hash=config_hash(prepared.ds_config),
        ds_config_source=prepared.ds_config_source,
        model=ModelInfo(preset=resolved.name, family=resolved.family, task=resolved.task,
                        overrides=dict(request.overrides), params=prepared.params, seq_len=resolved.seq_len,
                        vocab_pad=resolved.vocab_pad,
                        dims={k: v for k, v in resolved.describe().items()
                              if k not in ("name", "family", "task", "overrides", "seq_len", "vocab_pad")}),
        micro_batch=prepared.micro_batch, grad_accum=prepared.grad_accum, world_size=world,
        precision=prepared.precision, steps=request.steps, warmup=request.warmup,
        toggles=Toggles(tf32=request.tf32, compile=request.compile, attn=request.attn, act_ckpt=request.act_ckpt),
        figures=figures, memory=memory, ranks=ranks, status=status, error=error, notes=notes, overhead=overhead,
        memory_cap=request.memory_cap, trial_key=prepared.trial_key or None,
        sweep=SweepInfo(**request.sweep) if request.sweep else None, nodes=_nodes_info(prepared, raw),
        command=list(request.command), run_dir=str(prepared.run_dir),
    )


def _nodes_info(prepared: Prepared, raw: list[dict | None]) -> NodesInfo | None:
    layout = prepared.layout
    if layout is None:
        return None
    hosts = list(layout.selection)
    rss: dict[str, int | None] = {}
    for placement in layout.ranks:
        r = raw[placement.global_rank] if placement.global_rank < len(raw) else None
        value = ((r or {}).get("memory") or {}).get("host_rss_peak")
        if value is None:
            rss.setdefault(placement.host, None)
        else:
            rss[placement.host] = (rss.get(placement.host) or 0) + value
    return NodesInfo(hostfile=prepared.launch.argv[prepared.launch.argv.index("--hostfile") + 1],
                     launcher=prepared.request.launcher, hosts=hosts,
                     ranks_per_node=[len(slots) for slots in layout.selection.values()],
                     master_addr=prepared.launch.master_addr, host_rss_peak=rss)


def execute(prepared: Prepared, on_start=None) -> RunRow:
    """Launch, wait (killing the whole process group on timeout or Ctrl-C), gather, append the row.

    on_start(process_group_id) is called once the launcher runs (`dsx sweep` records it to reap the group if dsx
    itself is killed)."""
    ext = leftovers.extensions_dir(prepared.launch.env)
    before = time.time() - 1.0
    completed = run_plan(prepared.launch, prepared.request.timeout_s, log_path=prepared.run_dir / "launcher.log",
                         echo=prepared.request.echo, on_start=on_start)
    row = gather(prepared, completed, built_since(ext, before))
    append_row(prepared.request.results, row)
    return row


def run(request: RunRequest) -> RunRow:
    return execute(prepare(request))


# ----------------------------------------------------------------------------------------------- report


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def summary(row: RunRow, results: str) -> str:
    """The short table `dsx run` prints."""
    f, m, o = row.figures, row.memory.max, row.overhead
    zero = (row.ds_config.get("zero_optimization") or {}).get("stage", 0)
    offload = [k.split("_")[1] for k in ("offload_optimizer", "offload_param")
               if ((row.ds_config.get("zero_optimization") or {}).get(k) or {}).get("device") not in (None, "none")]
    where = f"{row.world_size} x {row.gpu_name or 'GPU'}" if row.device == "cuda" else f"{row.world_size} CPU rank(s)"
    lines = [
        f"{row.status.upper()}  {row.model.preset} ({row.model.params:,} params, seq {row.model.seq_len})"
        if row.model.params else f"{row.status.upper()}  {row.model.preset} (seq {row.model.seq_len})",
        f"  {where}, ZeRO-{zero}{' + offload ' + '/'.join(offload) if offload else ''}, {row.precision}, "
        f"micro-batch {row.micro_batch} x grad-accum {row.grad_accum}",
    ]
    if f.step_time_s:
        lines += [
            f"  step time   median {f.step_time_s.median * 1e3:.1f} ms (min {f.step_time_s.min * 1e3:.1f}, max "
            f"{f.step_time_s.max * 1e3:.1f}) over {len(f.step_time_s.all)} steps",
            f"  throughput  {f.tokens_per_s:,.0f} tokens/s, {f.samples_per_s:,.1f} samples/s, "
            f"{f.model_tflops_per_s:.3g} TFLOP/s per GPU" if f.model_tflops_per_s is not None else
            f"  throughput  {f.tokens_per_s:,.0f} tokens/s, {f.samples_per_s:,.1f} samples/s",
            f"  MFU         {f.mfu:.1%} of {f.peak_tflops:g} TFLOP/s {f.flops_dtype}" if f.mfu is not None else
            "  MFU         - (" + ("CPU run" if row.device == "cpu" else f"no peak for {row.gpu_name!r} in dsx.gpus")
            + ")",
        ]
    if f.flop_check_note:
        lines.append(f"  flop check  {f.flop_check_note}")
    lines.append(f"  memory max  allocated {_bytes(m.peak_allocated)}, reserved {_bytes(m.peak_reserved)}, NVML "
                 f"{_bytes(m.nvml_used)}, host RSS {_bytes(m.host_rss_peak)}, pinned {_bytes(m.pinned_host)}")
    if o.total_s is not None:
        def sec(v):
            return "-" if v is None else f"{v:.1f} s"

        lines.append(f"  wall        {o.total_s:.1f} s total, {o.added_s:.1f} s around the steps (launch "
                     f"{sec(o.launch_to_rank_start_s)}, imports {sec(o.rank_import_s)}, deepspeed.initialize "
                     f"{sec(o.ds_initialize_s)}, teardown {sec(o.teardown_s)})")
    if row.error:
        lines.append(f"  error       {row.error}")
    lines.append(f"  row {row.run_id} appended to {results}")
    return "\n".join(lines)
