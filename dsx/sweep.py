"""`dsx sweep`: run a grid of configurations, each trial its own `dsx run` launch; the results file is the state.

A sweep is a list of configurations (the product of the axes: ZeRO stage x offload x offload of parameters x
precision x activation checkpointing x compile x GPUs x model variations) and, for each, the micro-batches to run:
a fixed list, or `auto` - grow geometrically until a trial runs out of memory, then bisect between the largest
micro-batch that fit and the smallest that did not, and measure there. Every trial is one launched job through
dsx.run (one process group, a timeout); its row - ok, oom, error or timeout - is appended before the next trial
starts, so an OOM, a crash or a hung rank never stops the sweep.

Resuming is re-running the same command: a trial whose key (dsx.results.RunRow.trial_key: the resolved DeepSpeed
config, model, toggles, world size, steps...) already has a row in the results file is not run again; its row
stands in for it, so the micro-batch search replays to the same point and goes on. Rows are appended whole
(dsx.results.append_row), so a SIGKILL of dsx loses at most the trial that was running. That trial's ranks live
in their own process group; its id is kept in a lock file beside the results, and the next sweep on the same
file kills what is left of that group before it starts anything.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import math
import os
import signal
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from collections.abc import Callable
from typing import Any

from dsx import leftovers
from dsx.config_facts import configuration_label
from dsx.results import config_hash, read_rows

AUTO = "auto"
OFFLOAD_CHOICES = ("none", "cpu", "nvme")
PRECISION_CHOICES = ("bf16", "fp16", "fp32")
DONE_STATUSES = ("ok", "oom", "error", "timeout")
"""Outcomes a re-run would most likely repeat: they count as done (errors and timeouts too, unless --retry-failed)."""


class SweepError(ValueError):
    """The sweep cannot start as asked; the message says what to change."""


@dataclass(frozen=True)
class Configuration:
    """One point of the grid, without the micro-batch."""

    zero: int
    offload: str
    offload_params: str
    precision: str
    act_ckpt: bool
    compile: bool
    gpus: int | None
    vary: tuple[tuple[str, Any], ...] = ()
    """Model overrides of this point (`--vary`), in the order given; seq_len and vocab_pad included."""

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["vary"] = dict(self.vary)
        return data

    @property
    def label(self) -> str:
        extra = ([] if self.gpus is None else [f"{self.gpus}gpu"]) + [f"{k}={v}" for k, v in self.vary]
        return configuration_label(zero=self.zero, offload=self.offload, offload_params=self.offload_params,
                                   precision=self.precision, act_ckpt=self.act_ckpt, compile=self.compile,
                                   extra=extra)

    def problem(self, nvme_path: str | None) -> str | None:
        """Why this point cannot run (skipped, no launch), or None."""
        if self.offload != "none" and self.zero == 0:
            return "optimizer offload needs ZeRO 1-3"
        if self.offload_params != "none" and self.zero != 3:
            return "parameter offload needs ZeRO-3"
        if "nvme" in (self.offload, self.offload_params) and not nvme_path:
            return "NVMe offload needs --nvme-path"
        return None


@dataclass
class SweepSpec:
    model: str
    zero: list[int]
    offload: list[str]
    offload_params: list[str] = field(default_factory=lambda: ["none"])
    precision: list[str] = field(default_factory=lambda: ["bf16"])
    act_ckpt: list[bool] = field(default_factory=lambda: [False])
    compile: list[bool] = field(default_factory=lambda: [False])
    gpus: list[int | None] = field(default_factory=lambda: [None])
    vary: dict[str, list[Any]] = field(default_factory=dict)
    one_at_a_time: bool = False
    """--vary points: the base model plus one key changed at a time (for a parameter-effects table), instead of
    every combination."""
    micro_batch: list[int] | str = AUTO
    mb_start: int = 1
    mb_max: int = 1024
    mb_tolerance: float = 0.0
    """Stop bisecting when (first OOM - largest fit) <= max(1, tolerance x largest fit): 0 finds the exact boundary,
    0.25 saves trials on big models."""
    grad_accum: int = 1
    steps: int = 5
    warmup: int = 2
    overrides: dict[str, Any] = field(default_factory=dict)
    seq_len: int | None = None
    vocab_pad: int | None = None
    nvme_path: str | None = None
    optimizer: str | None = None
    lr: float | None = None
    ds_sets: tuple[str, ...] = ()
    attn: str = "sdpa"
    tf32: bool = False
    memory_cap: int | None = None
    trial_timeout_s: float | None = 1800.0
    results: str = "results/runs.jsonl"
    retry_failed: bool = False
    inject: dict[int, str] = field(default_factory=dict)
    """Tests: trial number (1-based, in the order trials are launched) -> --inject-failure spec."""
    prune: bool = True
    """Use dsx estimate on a calibrated GPU: skip configurations predicted not to fit, start the micro-batch search
    at the predicted largest, run the likely fastest configurations first (--no-prune turns it off)."""
    keep_within: float = 0.1
    """With pruning: skip configurations predicted slower than the predicted fastest by more than this fraction
    (1 keeps every one that fits). dsx estimate's tokens/s is rough alone but errs alike across one model's
    configurations, so the ranking holds better than the figures."""
    estimate_gpu: str | None = None
    """The calibrated GPU kind (dsx.estimate.GPUS) the estimates are for; None: the visible GPU's, if calibrated."""
    nodes: dict[str, Any] = field(default_factory=dict)
    """dsx run's multi-node options for every trial (hostfile, launcher, include, exclude, num_nodes, master_addr,
    master_port, ssh_port), those given only."""

    def sweep_id(self) -> str:
        """Hash of what decides the trials; the same command gives the same id (results path, timeout excluded)."""
        keys = ("model", "zero", "offload", "offload_params", "precision", "act_ckpt", "compile", "gpus", "vary",
                "one_at_a_time", "micro_batch", "mb_start", "mb_max", "mb_tolerance", "grad_accum", "steps",
                "warmup", "overrides", "seq_len", "vocab_pad", "nvme_path", "optimizer", "lr", "ds_sets", "attn",
                "tf32", "memory_cap")
        nodes = {"nodes": self.nodes} if self.nodes else {}  # ids of single-node sweeps stay as they were
        return config_hash({**{k: getattr(self, k) for k in keys}, **nodes})[:16]

    def vary_points(self) -> list[tuple[tuple[str, Any], ...]]:
        if not self.vary:
            return [()]
        keys = list(self.vary)
        if self.one_at_a_time:
            return [()] + [((k, v),) for k in keys for v in self.vary[k]]
        return [tuple(zip(keys, values)) for values in itertools.product(*(self.vary[k] for k in keys))]

    def configurations(self) -> list[Configuration]:
        return [Configuration(z, o, op, p, a, c, g, v) for z, o, op, p, a, c, g, v in itertools.product(
            self.zero, self.offload, self.offload_params, self.precision, self.act_ckpt, self.compile, self.gpus,
            self.vary_points())]


# ------------------------------------------------------------------------------------------ micro-batch search


Probe = Callable[[int, str], str]
"""probe(micro_batch, search) -> 'fit' | 'oom' | 'fail'."""


@dataclass
class SearchResult:
    largest_fit: int | None = None
    first_oom: int | None = None
    stopped: str | None = None
    """Why the search ended early: a trial failed for another reason than memory, or --mb-max was reached."""
    tried: list[tuple[int, str]] = field(default_factory=list)


def search_micro_batch(probe: Probe, start: int, maximum: int, tolerance: float = 0.0,
                       step: float = 2.0) -> SearchResult:
    """Grow x`step` from `start` until a trial runs out of memory (or `maximum` fits), then bisect the boundary.

    Memory grows with the micro-batch, so one OOM bounds everything above it. When `start` itself does not fit
    the bisection runs between 0 and `start` (x2 search), or it first shrinks /`step` until one fits (a predicted
    start, step < 2: the boundary is near). A trial that fails for another reason than memory ends the search."""
    result = SearchResult()

    class Failed(Exception):
        pass

    def fits(mb: int, search: str) -> bool:
        outcome = probe(mb, search)
        result.tried.append((mb, outcome))
        if outcome == "fail":
            result.stopped = f"micro-batch {mb} failed (not out of memory); search stopped"
            raise Failed
        if outcome == "oom":
            result.first_oom = mb
            return False
        result.largest_fit = mb
        return True

    try:
        mb = min(start, maximum)
        while fits(mb, "grow"):
            if mb >= maximum:
                result.stopped = f"--mb-max {maximum} fits; the out-of-memory boundary lies above it"
                return result
            mb = min(max(mb + 1, int(mb * step)), maximum)
        if result.largest_fit is None and step < 2:
            while mb > 1:
                mb = max(1, min(mb - 1, int(mb / step)))
                if fits(mb, "shrink"):
                    break
        low, high = result.largest_fit or 0, result.first_oom
        while high - low > max(1, int(tolerance * low)):
            mid = (low + high) // 2
            if fits(mid, "bisect"):
                low = mid
            else:
                high = mid
    except Failed:
        pass
    return result


def fixed_micro_batches(probe: Probe, values: list[int]) -> SearchResult:
    """Run the given micro-batches in increasing order; after an OOM the larger ones are skipped (they would OOM)."""
    result = SearchResult()
    for mb in sorted(set(values)):
        outcome = probe(mb, "fixed")
        result.tried.append((mb, outcome))
        if outcome == "oom":
            result.first_oom = mb
            skipped = [v for v in sorted(set(values)) if v > mb]
            if skipped:
                result.stopped = f"micro-batch {mb} ran out of memory; skipped {', '.join(map(str, skipped))}"
            break
        if outcome == "fit":
            result.largest_fit = mb
    return result


# ------------------------------------------------------------------------------------------ state between runs


class SweepLock:
    """An exclusive lock on `<results>.lock` for the sweep's lifetime, holding the running trial's process group.

    flock is released by the kernel when dsx dies, however it dies, so the next sweep can always take it; the file's
    content then tells it which process group the dead sweep left running."""

    def __init__(self, results: Path):
        self.path = results.with_name(results.name + ".lock")
        self.fd: int | None = None

    def acquire(self) -> dict | None:
        """Take the lock; returns what the previous holder left in it (None when it ended cleanly)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = _read_json(self.path) or {}
            raise SweepError(f"another dsx sweep (pid {holder.get('pid', '?')}) is writing to "
                             f"{self.path.with_suffix('')}; wait for it or use another --results") from None
        self.fd = fd
        left = _read_json(self.path)
        self.write(pgid=None)
        return left if left and left.get("pgid") else None

    def write(self, pgid: int | None, run_dir: str | None = None) -> None:
        assert self.fd is not None
        data = json.dumps({"pid": os.getpid(), "pgid": pgid, "run_dir": run_dir}).encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)
        os.fsync(self.fd)

    def release(self) -> None:
        if self.fd is not None:
            self.write(pgid=None)
            os.close(self.fd)  # closing releases the flock
            self.fd = None


def _read_json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text() or "null")
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def reap_orphans(left: dict) -> str | None:
    """Kill what is left of the trial a killed sweep was running (its process group), if anything; say what."""
    pgid = left.get("pgid")
    if not isinstance(pgid, int) or pgid <= 1:
        return None
    import psutil

    members = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if os.getpgid(proc.info["pid"]) == pgid:
                members.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    ours = [p for p in members if any(word in " ".join(p.info["cmdline"] or []) for word in
                                      ("train_rank", "deepspeed"))]
    if not ours:
        return None
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return None
    deadline = time.monotonic() + 10  # the kernel unmaps a killed process's memory as it dies: wait for that
    while time.monotonic() < deadline and any(_alive(p) for p in members):
        time.sleep(0.1)
    # The killed ranks' shared-memory buffers and any JIT-build lock they held die with them only on disk.
    leftovers.remove(leftovers.stale_shm_buffers())
    leftovers.remove(leftovers.stale_jit_locks(leftovers.extensions_dir(os.environ)))
    return (f"stopped {len(ours)} process(es) of the trial a killed dsx sweep left running (process group {pgid}, "
            f"{left.get('run_dir')}); that trial runs again")


def _alive(proc) -> bool:
    """Running (a zombie has already released its memory; waiting for it is its parent's business)."""
    import psutil

    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def done_rows(results: Path, retry_failed: bool) -> dict[str, dict]:
    """trial_key -> the latest row for it that counts as done."""
    done: dict[str, dict] = {}
    for row in read_rows(results):
        key, status = row.get("trial_key"), row.get("status")
        if key and status in DONE_STATUSES and not (retry_failed and status in ("error", "timeout")):
            done[key] = row
    return done


# ------------------------------------------------------------------------------------------ the sweep


@dataclass
class TrialOutcome:
    number: int
    configuration: Configuration
    micro_batch: int
    search: str
    status: str
    """A row status, or 'done' (a row from an earlier run stands in), or 'refused' (dsx refused the config)."""
    row: dict | None
    message: str | None = None


@dataclass
class ConfigurationResult:
    configuration: Configuration
    search: SearchResult | None = None
    skipped: str | None = None
    pruned: list[int] = field(default_factory=list)
    """Fixed micro-batches not run: predicted not to fit."""
    best: dict | None = None
    """The ok row with the most tokens/s."""


@dataclass
class SweepRun:
    """What one invocation did (the rows are in the results file)."""

    spec: SweepSpec
    results: list[ConfigurationResult] = field(default_factory=list)
    trials: list[TrialOutcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    device_seconds: float = 0.0
    """Spent by this invocation's launches."""
    interrupted: bool = False


def preflight(spec: SweepSpec) -> dict[Configuration, str]:
    """Resolve every configuration at its first micro-batch before anything runs (--dry-run too): a configuration
    dsx refuses (a combination of --vary values the model rejects, a config with lint errors...) is skipped with
    the reason. The sweep stops here (SweepError) when a --vary value cannot be built in any configuration (an
    unknown key, a value the model rejects whatever the other axes are), or when dsx refuses every configuration."""
    from dsx.run import RunRefused, resolve_trial

    first = spec.mb_start if spec.micro_batch == AUTO else min(spec.micro_batch)
    runnable = [c for c in spec.configurations() if not c.problem(spec.nvme_path)]
    refused: dict[Configuration, str] = {}
    for configuration in runnable:
        try:
            resolve_trial(run_request(spec, configuration, first, "fixed"))
        except RunRefused as exc:
            refused[configuration] = f"refused: {exc}"
    unbuildable: dict[str, list[str]] = {}  # reason -> the KEY=VALUE of --vary that no configuration can build
    for key, values in spec.vary.items():
        for value in values:
            points = [c for c in runnable if (key, value) in c.vary]
            if not points or not all(c in refused for c in points):
                continue
            try:  # refused everywhere: its own fault only if it is refused alone too (not just by its partners)
                resolve_trial(run_request(spec, replace(points[0], vary=((key, value),)), first, "fixed"))
            except RunRefused as exc:
                unbuildable.setdefault(str(exc), []).append(f"{key}={json.dumps(value)}")
    if unbuildable:
        raise SweepError("; ".join(f"--vary {', '.join(axes)} cannot be built: {reason}"
                                   for reason, axes in unbuildable.items()) + " (nothing was run)")
    if runnable and len(refused) == len(runnable):
        raise SweepError(next(iter(refused.values())).removeprefix("refused: "))
    if not runnable:
        raise SweepError("no configuration can run: " + "; ".join(
            f"{c.label}: {c.problem(spec.nvme_path)}" for c in spec.configurations()))
    return refused


PREDICTED_STEP = 1.25
"""Growth (and shrink) factor of the micro-batch search from a predicted start: the estimate's memory error is
within a few percent on the H100 rows, so the boundary is one or two steps away."""


@dataclass
class Plan:
    """What the estimate says of one configuration before it runs."""

    configuration: Configuration
    start: int
    """First micro-batch of the auto search: the predicted largest that fits, within --mb-start..--mb-max."""
    predicted_max: int | None = None
    tokens_per_s: float | None = None
    """Predicted at the start micro-batch (the order of the configurations)."""
    skip: str | None = None
    """Why the configuration is skipped: predicted not to fit even at the smallest micro-batch, or more than
    --keep-within slower than the predicted fastest."""
    skip_micro_batches: list[int] = field(default_factory=list)
    """Fixed micro-batches predicted not to fit (skipped)."""


def visible_gpu_kind(spec: SweepSpec) -> str | None:
    """The calibrated GPU kind the estimates use: --gpu-kind, else the first visible GPU when it is one."""
    if spec.estimate_gpu:
        return spec.estimate_gpu
    import os

    from dsx.estimate import gpu_kind_of
    from dsx.host import probe_gpus

    gpus = probe_gpus(dict(os.environ))
    kind = gpu_kind_of(gpus[0][0]) if gpus else None
    return kind.key if kind else None


def plan(spec: SweepSpec, configurations: list[Configuration], gpu: str) -> list[Plan]:
    """Estimate every configuration on `gpu` and order them, likely fastest first; those predicted not to fit, or
    slower than the fastest by more than --keep-within, are skipped and go last."""
    from dsx.estimate import GPUS, EstimateError, Setup, estimate
    from dsx.run import RunRefused, resolve_trial

    kind = GPUS[gpu]
    plans: list[Plan] = []
    fixed = spec.micro_batch != AUTO
    for configuration in configurations:
        first = min(spec.micro_batch) if fixed else spec.mb_start
        try:
            trial = resolve_trial(run_request(spec, configuration, first, "fixed"))
        except RunRefused:
            plans.append(Plan(configuration, spec.mb_start))
            continue

        def setup(micro_batch: int) -> Setup:
            return Setup(resolved=trial.resolved, ds_config=trial.ds_config, world_size=trial.world_size,
                         micro_batch=micro_batch, grad_accum=trial.grad_accum, attn=spec.attn,
                         act_ckpt=configuration.act_ckpt, gpu=kind, memory_limit=spec.memory_cap)
        try:
            predicted = estimate(setup(first))
        except EstimateError:
            plans.append(Plan(configuration, spec.mb_start))
            continue
        item = Plan(configuration, spec.mb_start, predicted.max_micro_batch)
        if predicted.max_micro_batch is None:
            needed = predicted.needed / 1024**3
            item.skip = (f"predicted not to fit: {needed:.1f} GiB at micro-batch {first}, "
                         f"{predicted.capacity / 1024**3:.1f} GiB available (--no-prune runs it)")
        elif fixed:
            item.skip_micro_batches = [mb for mb in spec.micro_batch if mb > predicted.max_micro_batch]
            runnable = [mb for mb in spec.micro_batch if mb <= predicted.max_micro_batch]
            if not runnable:
                item.skip = (f"predicted not to fit at micro-batch {', '.join(map(str, spec.micro_batch))} (the "
                             f"largest predicted to fit is {predicted.max_micro_batch}; --no-prune runs them)")
            else:
                item.tokens_per_s = max(estimate(setup(mb), search_max=False).tokens_per_s for mb in runnable)
        else:
            item.start = max(spec.mb_start, min(spec.mb_max, predicted.max_micro_batch))
            item.tokens_per_s = estimate(setup(item.start), search_max=False).tokens_per_s
        plans.append(item)
    fastest = max((p for p in plans if p.skip is None and p.tokens_per_s), key=lambda p: p.tokens_per_s,
                  default=None)
    for item in plans:
        if item.skip is None and item.tokens_per_s and fastest and \
                item.tokens_per_s < (1 - spec.keep_within) * fastest.tokens_per_s:
            slower = 1 - item.tokens_per_s / fastest.tokens_per_s
            item.skip = (f"predicted {item.tokens_per_s:,.0f} tokens/s, {slower:.0%} below the predicted fastest "
                         f"({fastest.configuration.label}, {fastest.tokens_per_s:,.0f}; --keep-within "
                         f"{math.ceil(slower * 100) / 100:g} or --no-prune runs it)")
    return sorted(plans, key=lambda p: (p.skip is not None, -(p.tokens_per_s or 0.0)))


def run_request(spec: SweepSpec, configuration: Configuration, micro_batch: int, search: str):
    from dsx.run import RunRequest

    overrides = dict(spec.overrides)
    seq_len, vocab_pad = spec.seq_len, spec.vocab_pad
    for key, value in configuration.vary:
        if key == "seq_len":
            seq_len = value
        elif key == "vocab_pad":
            vocab_pad = value
        else:
            overrides[key] = value
    flags = {"zero": configuration.zero, "offload": configuration.offload,
             "offload_params": configuration.offload_params, "nvme_path": spec.nvme_path,
             "precision": configuration.precision, "micro_batch": micro_batch, "grad_accum": spec.grad_accum,
             "optimizer": spec.optimizer, "lr": spec.lr}
    request = RunRequest(
        model=spec.model, overrides=overrides, seq_len=seq_len, vocab_pad=vocab_pad, config_flags=flags,
        ds_sets=tuple(spec.ds_sets), gpus=configuration.gpus, steps=spec.steps, warmup=spec.warmup, tf32=spec.tf32,
        compile=configuration.compile, attn=spec.attn, act_ckpt=configuration.act_ckpt, results=spec.results,
        timeout_s=spec.trial_timeout_s, memory_cap=spec.memory_cap,
        sweep={"sweep_id": spec.sweep_id(), "configuration": configuration.as_dict(), "label": configuration.label,
               "search": search},
        **spec.nodes,
    )
    request.command = run_command(request)
    return request


def run_command(request) -> list[str]:
    """The `dsx run` command line that repeats this trial on its own (what `dsx report --best` prints)."""
    argv = ["dsx", "run", "--model", request.model]
    for key, value in request.overrides.items():
        argv += ["--set", f"{key}={json.dumps(value)}"]
    if request.seq_len is not None:
        argv += ["--seq-len", str(request.seq_len)]
    if request.vocab_pad is not None:
        argv += ["--vocab-pad", str(request.vocab_pad)]
    for key, value in request.config_flags.items():
        if value is not None:
            argv += ["--" + key.replace("_", "-"), str(value)]
    for item in request.ds_sets:
        argv += ["--ds-set", item]
    if request.gpus is not None:
        argv += ["--gpus", str(request.gpus)]
    argv += ["--steps", str(request.steps), "--warmup", str(request.warmup)]
    for flag, on in (("--tf32", request.tf32), ("--compile", request.compile), ("--act-ckpt", request.act_ckpt)):
        if on:
            argv.append(flag)
    if request.attn != "sdpa":
        argv += ["--attn", request.attn]
    if request.memory_cap is not None:
        argv += ["--memory-cap", str(request.memory_cap)]
    if request.hostfile:
        for key in ("hostfile", "launcher", "include", "exclude", "num_nodes", "master_addr", "master_port",
                    "ssh_port"):
            value = getattr(request, key)
            if value is not None and not (key == "launcher" and value == "pdsh"):
                argv += ["--" + key.replace("_", "-"), str(value)]
    argv += ["--results", request.results]
    return argv


def sweep(spec: SweepSpec, on_trial: Callable[[TrialOutcome], None] | None = None,
          on_configuration: Callable[[int, Configuration], None] | None = None) -> SweepRun:
    """Run (or resume) the sweep. Ctrl-C stops the running trial's whole process group and returns with
    `interrupted` set; the trials finished so far are in the results file."""
    from dsx.run import RunRefused, execute, prepare, resolve_trial

    results_path = Path(spec.results)
    refused = preflight(spec)  # a sweep dsx would refuse entirely fails before it takes the lock
    lock = SweepLock(results_path)
    left = lock.acquire()
    outcome = SweepRun(spec=spec)
    try:
        if left:
            reaped = reap_orphans(left)
            if reaped:
                outcome.notes.append(reaped)
        done = done_rows(results_path, spec.retry_failed)
        counter = itertools.count(1)

        def probe_for(configuration: Configuration, result: ConfigurationResult) -> Probe:
            def probe(micro_batch: int, search: str) -> str:
                number = next(counter)
                request = run_request(spec, configuration, micro_batch, search)
                request.entered_at = time.time()
                if number in spec.inject:
                    request.inject_failure = spec.inject[number]
                try:
                    trial = resolve_trial(request)
                except RunRefused as exc:
                    report = TrialOutcome(number, configuration, micro_batch, search, "refused", None, str(exc))
                    outcome.trials.append(report)
                    on_trial and on_trial(report)
                    return "fail"
                row = done.get(trial.key)
                if row is not None:
                    report = TrialOutcome(number, configuration, micro_batch, search, "done", row)
                else:
                    prepared = prepare(request, trial=trial)
                    lock.write(pgid=None, run_dir=str(prepared.run_dir))
                    row_model = execute(prepared, on_start=lambda pgid: lock.write(pgid, str(prepared.run_dir)))
                    lock.write(pgid=None)
                    row = row_model.model_dump(mode="json")
                    done[trial.key] = row
                    outcome.device_seconds += row["overhead"].get("device_seconds") or 0.0
                    report = TrialOutcome(number, configuration, micro_batch, search, row["status"], row,
                                          row.get("error"))
                outcome.trials.append(report)
                on_trial and on_trial(report)
                status = row["status"]
                if status == "ok":
                    tokens = (row.get("figures") or {}).get("tokens_per_s") or 0.0
                    best = (result.best or {}).get("figures", {}).get("tokens_per_s") or -1.0
                    if tokens > best:
                        result.best = row
                return {"ok": "fit", "oom": "oom"}.get(status, "fail")
            return probe

        configurations = spec.configurations()
        plans = {c: Plan(c, spec.mb_start) for c in configurations}
        gpu = visible_gpu_kind(spec) if spec.prune else None
        if gpu:
            runnable = [c for c in configurations if not (c.problem(spec.nvme_path) or refused.get(c))]
            ordered = plan(spec, runnable, gpu)
            plans.update({p.configuration: p for p in ordered})
            configurations = [p.configuration for p in ordered] + [c for c in configurations if c not in runnable]
            outcome.notes.append(f"dsx estimate ({gpu}): configurations in predicted order, fastest first; "
                                 f"{sum(1 for p in ordered if p.skip)} skipped: predicted not to fit or more than "
                                 f"{spec.keep_within:.0%} slower than the fastest (--no-prune runs them)")
        elif spec.prune:
            outcome.notes.append("no calibrated GPU for dsx estimate here: every configuration runs, in order")
        for index, configuration in enumerate(configurations, start=1):
            result = ConfigurationResult(configuration)
            outcome.results.append(result)
            on_configuration and on_configuration(index, configuration)
            problem = configuration.problem(spec.nvme_path) or refused.get(configuration) or \
                plans[configuration].skip
            if problem:
                result.skipped = problem
                continue
            probe = probe_for(configuration, result)
            if spec.micro_batch == AUTO:
                predicted = plans[configuration].predicted_max is not None
                result.search = search_micro_batch(probe, plans[configuration].start, spec.mb_max,
                                                   spec.mb_tolerance, step=PREDICTED_STEP if predicted else 2.0)
            else:
                skipped = set(plans[configuration].skip_micro_batches)
                result.search = fixed_micro_batches(probe, [mb for mb in spec.micro_batch if mb not in skipped])
                result.pruned = sorted(skipped)
    except KeyboardInterrupt:
        outcome.interrupted = True
    finally:
        lock.release()
    return outcome


def sweep_device_seconds(results: Path, sweep_id: str) -> tuple[float, int]:
    """(device-seconds, rows) of every row of this sweep in the results file, over all invocations."""
    total, count = 0.0, 0
    for row in read_rows(results):
        if (row.get("sweep") or {}).get("sweep_id") == sweep_id:
            total += (row.get("overhead") or {}).get("device_seconds") or 0.0
            count += 1
    return total, count



def default_model(device: str) -> str:
    """The model when --model is not given: a tiny one on CPU ranks (seconds per trial), GPT-2 124M on GPUs."""
    return "gpt2" if device == "cuda" else "gpt2-tiny"
