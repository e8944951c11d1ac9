"""The launch as data: `build_launch(...)` turns a run into the command line of DeepSpeed's own launcher and the full
environment of the child - without side effects, so tests and `dsx run --dry-run` can look at it. dsx.processes
starts it (`run_plan`): the only module that starts processes.

Why these launcher arguments (DeepSpeed 0.19.8, deepspeed/launcher/runner.py and launch.py):
- `python -m deepspeed.launcher.runner` is what the `deepspeed` script runs; calling it with this interpreter
  keeps the venv, whatever PATH holds.
- Without a hostfile the runner counts local "GPUs" with the accelerator's device_count(): on the CPU accelerator
  that is the number of NUMA nodes (usually 1), so CPU ranks need an explicit `--num_gpus N`, which forces N slots.
- `--num_gpus` makes the runner ignore CUDA_VISIBLE_DEVICES and take physical GPUs 0..N-1. When the user restricted
  the GPUs with CUDA_VISIBLE_DEVICES, dsx passes `--include localhost:<the first N of them>` instead, which the
  runner turns back into each rank's CUDA_VISIBLE_DEVICES.
- The rank entry point is passed as the path of dsx/rank/train_rank.py, not `--module dsx.rank.train_rank`: with
  `-m` Python puts the current directory first on sys.path, so a `dsx/` folder of the user's would shadow ours.
  `--no_local_rank`: the rank reads LOCAL_RANK from the environment the launcher sets.
- The runner's local path passes the whole environment to the ranks, so the environment built here is what
  every rank sees. It includes TORCH_EXTENSIONS_DIR: this Python environment's own op cache unless the user set
  one (dsx.op_cache says why).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from dsx import op_cache

ROOT = Path(__file__).resolve().parent.parent
RANK_SCRIPT = ROOT / "dsx" / "rank" / "train_rank.py"
LANE_EXEC = ROOT / "dsx" / "rank" / "lane_exec.py"
"""Re-executes a rank with the `--python` interpreter (dsx.lane): launch.py starts it with the runner's."""

# One entry of TORCH_CUDA_ARCH_LIST as DeepSpeed's op builder can parse it: it splits on "." and calls int() on
# each part after dropping "+PTX" (builder.py compute_capability_args), so "9.0a" and "10.0f" kill the JIT build.
_CLEAN_ARCH = re.compile(r"^\d+\.\d+(\+PTX)?$")
_SUFFIXED_ARCH = re.compile(r"^(\d+)\.(\d+)[a-zA-Z]+(\+PTX)?$")


@dataclass
class LaunchPlan:
    argv: list[str]
    env: dict[str, str]
    """The complete environment of the launcher (and so of every rank)."""
    cwd: str
    notes: list[str] = field(default_factory=list)
    """What dsx chose and why, in plain words (printed by --dry-run and kept in the row)."""
    env_changes: dict[str, str | None] = field(default_factory=dict)
    """Differences from the caller's environment: name -> new value, or None where dsx removed it."""
    master_addr: str = "127.0.0.1"
    master_port: int | None = None
    """Where rank 0 listens; also names the job's shared-memory buffers (see dsx.leftovers)."""
    node_argvs: list[list[str]] = field(default_factory=list)
    """--launcher no-ssh: one runner command per node (all on this machine), started together; argv is the first."""
    files: dict[str, str] = field(default_factory=dict)
    """Files the launch needs (path -> content), written by the caller before run_plan: the .deepspeed_env."""

    def command_line(self) -> str:
        return "\n".join(shlex.join(argv) for argv in self.node_argvs or [self.argv])

    def describe(self) -> str:
        """Human-readable: the command line(s), files written, the environment changes, the notes."""
        lines = [f"cd {shlex.quote(self.cwd)}", self.command_line()]
        for path, text in self.files.items():
            lines.append(f"file {path}:")
            lines += [f"  {line}" for line in text.splitlines()]
        if self.env_changes:
            lines.append("environment changes:")
            for key in sorted(self.env_changes):
                value = self.env_changes[key]
                lines.append(f"  unset {key}" if value is None else f"  {key}={shlex.quote(value)}")
        else:
            lines.append("environment changes: none")
        for note in self.notes:
            lines.append(f"note: {note}")
        return "\n".join(lines)


class LaunchError(ValueError):
    """The launch cannot be built as asked (e.g. more ranks than visible GPUs)."""


def clean_arch_list(value: str | None, capabilities: Sequence[tuple[int, int]] | None) -> tuple[str | None, str | None]:
    """(value for the child env, note) for TORCH_CUDA_ARCH_LIST.

    A value DeepSpeed's op builder can parse is kept. Otherwise the list is derived from the visible GPUs'
    compute capabilities when known (e.g. H100 -> "9.0"), else each bad entry loses its letter suffix
    ("9.0a+PTX" -> "9.0+PTX") and unparseable entries (names like "Hopper") are dropped; if nothing is left the
    variable is removed and DeepSpeed probes the devices itself. The note says what was done (None: kept).
    """
    if value is None:
        return None, None
    entries = [e for e in value.replace(" ", ";").split(";") if e.strip()]
    entries = [e.strip() for e in entries]
    if entries and all(_CLEAN_ARCH.match(e) for e in entries):
        return value, None
    why = (f"TORCH_CUDA_ARCH_LIST={value!r} cannot be parsed by DeepSpeed's op builder (it calls int() on each "
           "part of every entry, so JIT-built ops such as FusedAdam or CPUAdam fail at deepspeed.initialize)")
    if capabilities:
        derived = ";".join(f"{ma}.{mi}" for ma, mi in sorted(set(capabilities)))
        return derived, f"{why}; the ranks get TORCH_CUDA_ARCH_LIST={derived!r}, from the visible GPUs"
    cleaned = []
    for entry in entries:
        if _CLEAN_ARCH.match(entry):
            cleaned.append(entry)
            continue
        m = _SUFFIXED_ARCH.match(entry)
        if m:
            cleaned.append(f"{m.group(1)}.{m.group(2)}{m.group(3) or ''}")
    cleaned = list(dict.fromkeys(cleaned))
    if not cleaned:
        return "", f"{why}; the ranks get it unset, so DeepSpeed probes the GPUs itself"
    derived = ";".join(cleaned)
    return derived, f"{why}; the ranks get TORCH_CUDA_ARCH_LIST={derived!r} (architecture suffixes dropped)"


LAUNCHERS = ("pdsh", "openmpi", "slurm", "no-ssh")

# Variables the ranks on other nodes need and DeepSpeed's runner does not forward (it forwards PYTHON*, MLFLOW*, MV2*,
# UCX* and the accelerator's own, runner.py EXPORT_ENVS): they go into the .deepspeed_env dsx writes.
_REMOTE_ENV = ("PATH", "PYTHONPATH", "TORCH_EXTENSIONS_DIR", "DS_ACCELERATOR", "OMP_NUM_THREADS", "OMP_WAIT_POLICY",
               "TORCH_CUDA_ARCH_LIST", "CUDA_HOME", "LD_LIBRARY_PATH", "HF_HOME", "TRANSFORMERS_OFFLINE")
_REMOTE_PREFIXES = ("NCCL_", "GLOO_", "TP_SOCKET_IFNAME", "DSX_", "ACCELERATE_")


INHERITED_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE")
"""What DeepSpeed's launch.py sets for every rank, removed from the environment dsx starts a job with."""

RECORDED_SETTINGS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "OMP_NUM_THREADS", "OMP_WAIT_POLICY")
"""Settings of dsx's environment that change how GPU ranks on this host run (the caching allocator, the CPU Adam
step's threads): the row's notes name them, since its command alone does not (the 30.2B row of bench/multigpu ran
with expandable segments that no field recorded)."""


@dataclass
class Nodes:
    """A launch over a hostfile: DeepSpeed's multi-node path (or one runner per node with --launcher no-ssh)."""

    hostfile: str
    layout: Any
    """dsx.hostfile.Layout: the ranks DeepSpeed will start, node by node."""
    launcher: str = "pdsh"
    include: str | None = None
    exclude: str | None = None
    num_nodes: int | None = None
    num_gpus: int | None = None
    ssh_port: int | None = None
    env_file: str | None = None
    """Absolute path for the .deepspeed_env dsx writes (passed to the runner as DS_ENV_FILE)."""


def _node_filter_args(nodes: Nodes) -> list[str]:
    args = []
    if nodes.include:
        args += ["--include", nodes.include]
    if nodes.exclude:
        args += ["--exclude", nodes.exclude]
    if nodes.num_nodes is not None:
        args += ["--num_nodes", str(nodes.num_nodes)]
    if nodes.num_gpus is not None:
        args += ["--num_gpus", str(nodes.num_gpus)]
    return args


def remote_environment(env: Mapping[str, str], python: str) -> dict[str, str]:
    """What ranks on other nodes must see that the runner would not send: the venv's bin first on PATH (JIT builds
    need its ninja), dsx on PYTHONPATH, the JIT cache, the accelerator and thread settings, NCCL/GLOO variables."""
    out = {key: env[key] for key in _REMOTE_ENV if env.get(key)}
    out.update({key: value for key, value in env.items() if key.startswith(_REMOTE_PREFIXES) and value})
    venv_bin = str(Path(python).parent)
    paths = [p for p in out.get("PATH", "").split(os.pathsep) if p]
    out["PATH"] = os.pathsep.join([venv_bin, *[p for p in paths if p != venv_bin]])
    return out


def ssh_check_argv(host: str, env: Mapping[str, str], ssh_port: int | None) -> list[str]:
    """`ssh HOST true` with the options pdsh will use (PDSH_SSH_ARGS_APPEND, the port), never asking for a password
    and giving up after 10 s: the reachability check dsx runs for every node before a pdsh/openmpi launch."""
    argv = ["ssh", *shlex.split(env.get("PDSH_SSH_ARGS_APPEND", ""))]
    if ssh_port is not None:
        argv += ["-p", str(ssh_port)]
    return argv + ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "--", host, "true"]


def user_rank_command(command: Sequence[str]) -> tuple[list[str], list[str]]:
    """(what follows the runner's options, the runner flags it needs) for a user's `python train.py ARGS`,
    `train.py ARGS`, `python -m MODULE ARGS` (the runner's --module) or `some-program ARGS` (--no_python): the
    runner itself runs a script or module with its own interpreter."""
    command = list(command)
    if not command:
        raise LaunchError("no command to launch: give it after --, e.g. -- python train.py")
    first = Path(command[0]).name
    if re.fullmatch(r"python(\d+(\.\d+)?)?", first) or command[0] == sys.executable:
        command = command[1:]
        if command[:1] == ["-m"] and len(command) > 1 and not command[1].startswith("-"):
            return command[1:], ["--module"]
        if not command or command[0].startswith("-"):
            raise LaunchError("dsx launch runs a script or a module: -- python SCRIPT.py ARGS or -- python -m MODULE "
                              "ARGS (python's other options, such as -c, are not supported by DeepSpeed's runner)")
        return command, []
    if command[0].endswith(".py"):
        return command, []
    return command, ["--no_python"]


def ranks_pythonpath(base_env: Mapping[str, str]) -> str | None:
    """The PYTHONPATH the ranks get: this checkout first (so a rank imports this dsx), unless dsx is installed
    (then it is unchanged: None)."""
    if ROOT.name == "site-packages":
        return None
    paths = [p for p in base_env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join([str(ROOT), *[p for p in paths if p != str(ROOT)]])


def _lane_command(rank_python: str, rank_command: list[str], runner_flags: list[str]) -> tuple[list[str], list[str]]:
    """(rank command, runner flags) that start `rank_command` with `rank_python` through the trampoline."""
    if "--no_python" in runner_flags:
        raise LaunchError("--python starts Python ranks: give the command as -- python SCRIPT.py ARGS or -- python -m "
                          "MODULE ARGS")
    module = ["-m"] if "--module" in runner_flags else []
    return [str(LANE_EXEC), rank_python, *module, *rank_command], [f for f in runner_flags if f != "--module"]


def build_launch(*, plan_json: str | None = None, world_size: int, device: str, master_port: int,
                 base_env: Mapping[str, str], cwd: str, python: str = sys.executable,
                 gpu_capabilities: Sequence[tuple[int, int]] | None = None, cpu_count: int | None = None,
                 master_addr: str = "127.0.0.1", nodes: Nodes | None = None,
                 user_command: Sequence[str] | None = None, local_rank_arg: bool = True,
                 rank_python: str | None = None, extensions_dir: str | None = None,
                 job_env: Mapping[str, str] | None = None) -> LaunchPlan:
    """The launcher command line and the child environment for a run (one node, or the nodes of a hostfile) of
    dsx's rank script with its plan (plan_json), or of a user's command (dsx launch; the runner appends
    --local_rank=N to its arguments, as DeepSpeed does by default, unless local_rank_arg is False).
    rank_python: the ranks' interpreter when it is not the runner's (`--python`, dsx.lane), with extensions_dir
    its op cache. job_env: variables the user's job reads (accelerate's, dsx launch --config-arg accelerate), set for
    every rank. Pure: reads only its arguments (pass os.environ as base_env) and this interpreter's environment
    (which names the op cache, dsx.op_cache), changes nothing."""
    if world_size < 1:
        raise LaunchError(f"world size must be at least 1, got {world_size}")
    if device not in ("cuda", "cpu"):
        raise LaunchError(f"device must be 'cuda' or 'cpu', got {device!r}")
    env = dict(base_env)
    notes: list[str] = []
    changes: dict[str, str | None] = {}

    def setenv(key: str, value: str | None) -> None:
        if value is None:
            if key in env:
                del env[key]
                changes[key] = None
        elif env.get(key) != value:
            env[key] = value
            changes[key] = value

    # A rank's variables in dsx's own environment (dsx started inside another job, or after something initialised a
    # process group in this process) are not the job's: DeepSpeed's launch.py sets them for each rank. Passed on,
    # they would make launch.py itself look like a rank to whoever reads the process tree (dsx launch's sampler).
    for key in INHERITED_RANK_VARIABLES:
        setenv(key, None)
    for key, value in (job_env or {}).items():
        setenv(key, value)
    argv = [python, "-u", "-m", "deepspeed.launcher.runner"]
    visible = base_env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if nodes is not None:
        if world_size != nodes.layout.world_size:
            raise LaunchError(f"world size {world_size} but the hostfile selection has {nodes.layout.world_size} "
                              "ranks")
        argv += ["--hostfile", nodes.hostfile, *_node_filter_args(nodes)]
        if nodes.launcher != "no-ssh":
            # dsx has checked every node over ssh itself (the runner's check asks only the first, without pdsh's
            # ssh options)
            argv += ["--launcher", nodes.launcher, "--no_ssh_check"]
            if nodes.ssh_port is not None:
                argv += ["--ssh_port", str(nodes.ssh_port)]
        notes.append(f"{nodes.layout.num_nodes} node(s) from {nodes.hostfile} through DeepSpeed's runner "
                     f"(--launcher {nodes.launcher}), world size {world_size}, master {master_addr}:{master_port}")
    elif device == "cuda" and visible:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if not all(i.isdigit() for i in ids):
            raise LaunchError(f"CUDA_VISIBLE_DEVICES={visible!r} names GPUs by UUID; DeepSpeed's launcher only "
                              "takes GPU indices: use indices (nvidia-smi -L lists them)")
        if world_size > len(ids):
            raise LaunchError(f"--gpus {world_size} but CUDA_VISIBLE_DEVICES={visible!r} makes {len(ids)} visible")
        argv += ["--include", f"localhost:{','.join(ids[:world_size])}"]
        notes.append(f"GPUs {','.join(ids[:world_size])} (from CUDA_VISIBLE_DEVICES), one rank each, NCCL")
    else:
        argv += ["--num_gpus", str(world_size), "--num_nodes", "1"]
        if device == "cuda":
            notes.append(f"GPUs 0..{world_size - 1}, one rank each, NCCL" if world_size > 1 else "GPU 0, one rank")
    if device == "cuda" and world_size > 1 and (nccl := sorted(k for k in env if k.startswith("NCCL_"))):
        from dsx.results import NCCL_ENV_NOTE

        notes.append(NCCL_ENV_NOTE + ", ".join(f"{k}={env[k]}" for k in nccl))
    argv += ["--master_addr", master_addr, "--master_port", str(master_port)]
    if user_command is not None:
        rank_command, runner_flags = user_rank_command(user_command)
        if rank_python:
            rank_command, runner_flags = _lane_command(rank_python, rank_command, runner_flags)
        argv += runner_flags + ([] if local_rank_arg else ["--no_local_rank"])
    else:
        argv += ["--no_local_rank"]
        rank_command = [str(RANK_SCRIPT), "--plan-json", str(plan_json)]
        if rank_python:
            rank_command, _ = _lane_command(rank_python, rank_command, [])
    if rank_python:
        notes.append(f"the ranks run {rank_python} (--python), started through {LANE_EXEC.name}; DeepSpeed's runner "
                     f"runs {python}")
    node_argvs = []
    if nodes is not None and nodes.launcher == "no-ssh":
        node_argvs = [argv + ["--no_ssh", "--node_rank", str(i)] + rank_command
                      for i in range(nodes.layout.num_nodes)]
        argv = node_argvs[0]
    else:
        argv += rank_command

    if device == "cpu":
        setenv("DS_ACCELERATOR", "cpu")
        threads = max(1, (cpu_count or 1) // world_size)
        if "OMP_NUM_THREADS" not in base_env:
            setenv("OMP_NUM_THREADS", str(threads))
        if "OMP_WAIT_POLICY" not in base_env and "GOMP_SPINCOUNT" not in base_env:
            # OpenMP threads that spin while they wait make a CPU rank 50x slower whenever anything else wants a
            # core (a busy core: 18 -> 986 ms a gpt2-tiny step; passive: 25 ms either way; bench/cpu_threads/)
            setenv("OMP_WAIT_POLICY", "PASSIVE")
        notes.append(f"no GPU: {world_size} CPU rank(s) through DeepSpeed's CPU accelerator "
                     f"(DS_ACCELERATOR=cpu; gloo unless oneccl_bindings_for_pytorch is installed), "
                     f"OMP_NUM_THREADS={env['OMP_NUM_THREADS']}, OMP_WAIT_POLICY={env.get('OMP_WAIT_POLICY') or 'unset'}")
    else:
        ranks_per_host = max(len(slots) for slots in nodes.layout.selection.values()) if nodes else world_size
        if ranks_per_host > 1 and cpu_count and "OMP_NUM_THREADS" not in base_env:
            # unset, each GPU rank's OpenMP (torch's CPU ops, the data's batches, DeepSpeed's CPU Adam) starts one
            # thread per core: 4 ranks on a 64-core host ran 256 threads, and the Ulysses ranks waited 7x longer for
            # their batches than one rank did (bench/multigpu/measured.md); torchrun sets 1 here, dsx the cores' share
            setenv("OMP_NUM_THREADS", str(max(1, cpu_count // ranks_per_host)))
            notes.append(f"OMP_NUM_THREADS={env['OMP_NUM_THREADS']} per rank: {cpu_count} cores shared by "
                         f"{ranks_per_host} ranks per host (set OMP_NUM_THREADS to choose)")
        arch, note = clean_arch_list(base_env.get("TORCH_CUDA_ARCH_LIST"), gpu_capabilities)
        if note:
            setenv("TORCH_CUDA_ARCH_LIST", arch or None)
            notes.append(note)
        settings = [f"{key}={base_env[key]}" for key in RECORDED_SETTINGS if base_env.get(key)]
        if settings and nodes is None:  # DeepSpeed's runner passes the whole environment to local ranks only
            notes.append(f"the ranks inherit {', '.join(settings)} from dsx's environment")
    if extensions_dir:
        setenv("TORCH_EXTENSIONS_DIR", extensions_dir)
        notes.append(f"the ranks' JIT-built ops are cached in TORCH_EXTENSIONS_DIR={extensions_dir} (their DeepSpeed's "
                     "own folder: ops of two DeepSpeed versions in one folder rebuild each other)")
    elif base_env.get("TORCH_EXTENSIONS_DIR"):
        notes.append(f"JIT-built ops are cached in TORCH_EXTENSIONS_DIR={base_env['TORCH_EXTENSIONS_DIR']}")
    else:
        cache = str(op_cache.environment_dir(base_env))
        setenv("TORCH_EXTENSIONS_DIR", cache)
        notes.append(f"JIT-built ops are cached in this Python environment's own folder (TORCH_EXTENSIONS_DIR={cache}; "
                     "other environments have theirs, so none rebuilds another's ops; set TORCH_EXTENSIONS_DIR to "
                     "choose another)")

    # The ranks find ninja and the compiler wrappers on PATH for JIT builds, and torch rebuilds an op when the
    # build environment changed (measured: every op again when PATH lost the venv's bin). Remote ranks get the
    # venv's bin first (remote_environment), so local ranks get the same: one build serves every launch.
    # A lane's ranks find their own venv's tools first, then this one's.
    bins = list(dict.fromkeys(([str(Path(rank_python).parent)] if rank_python else []) + [str(Path(python).parent)]))
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p]
    if path[:len(bins)] != bins:
        setenv("PATH", os.pathsep.join([*bins, *[p for p in path if p not in bins]]))

    # The rank script imports dsx. From an installed dsx that just works; from a source checkout it needs the
    # checkout on sys.path (the script's own folder, dsx/rank/, is what Python puts first; the script drops it).
    pythonpath = ranks_pythonpath(base_env)
    if pythonpath is not None and str(ROOT) not in base_env.get("PYTHONPATH", "").split(os.pathsep):
        setenv("PYTHONPATH", pythonpath)
    files: dict[str, str] = {}
    if nodes is not None and nodes.launcher != "no-ssh":
        from dsx.hostfile import deepspeed_env_text

        if not nodes.env_file:
            raise LaunchError("a multi-node launch needs a path for its .deepspeed_env")
        remote = remote_environment(env, python)
        try:
            files[nodes.env_file] = deepspeed_env_text(remote)
        except ValueError as exc:
            raise LaunchError(f"{exc}: unset or change it for a multi-node run") from None
        setenv("DS_ENV_FILE", nodes.env_file)
        notes.append(f"ranks on the other nodes get {', '.join(remote)} from {nodes.env_file} (DeepSpeed's runner "
                     "forwards only PYTHON*/MLFLOW*/MV2*/UCX* variables itself); the results folder must be on a "
                     "filesystem every node shares")
    return LaunchPlan(argv=argv, env=env, cwd=cwd, notes=notes, env_changes=changes, master_addr=master_addr,
                      master_port=master_port, node_argvs=node_argvs, files=files)
