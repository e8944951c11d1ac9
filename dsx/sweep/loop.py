"""The sweep itself: take the lock, plan, then for each configuration run its micro-batch search, one launched
trial per probe, each row appended before the next trial starts; SweepRun says what this invocation did.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dsx.processes import NotStopped, left_running_text
from dsx.results import read_rows
from dsx.sweep.grid import AUTO, Configuration, SweepSpec
from dsx.sweep.lock import SweepLock, reap_orphans
from dsx.sweep.planning import PREDICTED_STEP, Plan, plan, preflight, visible_gpu_kind
from dsx.sweep.search import Probe, SearchResult, fixed_micro_batches, search_goes_on, search_micro_batch
from dsx.sweep.space import sweep_configurations
from dsx.sweep.trials import cap_filling_micro_batches, done_rows, micro_batch_ceiling, run_request, trial_replicas


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
    last: bool | None = None
    """This trial ends its configuration's search (the progress line counts the configuration done)."""


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
    left_running: str | None = None
    """Interrupted with processes of the running trial that outlived SIGKILL: which (the lock keeps their group, and
    the next sweep on the results file kills it before it starts)."""


def sweep(spec: SweepSpec, on_trial: Callable[[TrialOutcome], None] | None = None,
          on_configuration: Callable[[int, Configuration], None] | None = None,
          on_plan: Callable[[list[tuple[Configuration, str | None]]], None] | None = None) -> SweepRun:
    """Run (or resume) the sweep. Ctrl-C stops the running trial's whole process group and returns with
    `interrupted` set; the trials finished so far are in the results file. `on_plan` hears the configurations in
    the order they will run, each with why it is skipped (None: it runs), before the first trial."""
    from dsx.run import RunRefused, execute, prepare, resolve_trial

    results_path = Path(spec.results)
    refused = preflight(spec)  # a sweep dsx would refuse entirely fails before it takes the lock
    lock = SweepLock(results_path)
    left = lock.acquire()
    outcome = SweepRun(spec=spec)
    try:
        if left:
            reaped = reap_orphans(left, results_path)
            if reaped:
                outcome.notes.append(reaped)
        from dsx.estimate.assumed import visible_gpus

        elsewhere: list[str] = []
        here = next(iter(visible_gpus()), None)  # the name this machine's rows carry (RunRow.gpu_name)
        done = done_rows(results_path, spec.retry_failed, here, elsewhere)
        if elsewhere:
            outcome.notes.append(f"{len(elsewhere)} row(s) of {results_path} were measured on "
                                 f"{', '.join(sorted(set(elsewhere)))}, not on this machine's {here}: "
                                 "they do not stand in for trials here")
        counter = itertools.count(1)

        def probe_for(configuration: Configuration, result: ConfigurationResult,
                      run: Callable[[Probe], SearchResult]) -> Probe:
            answers: list = []  # what the probe told the search so far: replayed to know whether it goes on

            def answer(report: TrialOutcome, given):
                answers.append(given)
                report.last = not search_goes_on(run, answers)
                outcome.trials.append(report)
                on_trial and on_trial(report)
                return given

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
                    return answer(report, "fail")
                row = done.get(trial.key)
                if row is not None:
                    report = TrialOutcome(number, configuration, micro_batch, search, "done", row)
                else:
                    prepared = None
                    try:
                        prepared = prepare(request, trial=trial)
                        lock.write(pgid=None, run_dir=str(prepared.run_dir))
                        row_model = execute(prepared, on_start=lambda pgid: lock.write(pgid, str(prepared.run_dir)))
                    except NotStopped as exc:  # the lock keeps the group and its folder for the next sweep's reap
                        outcome.left_running = left_running_text(exc.pgid, exc.left)
                        raise
                    except KeyboardInterrupt:
                        _forget_interrupted(prepared, results_path, outcome)
                        raise
                    lock.write(pgid=None)
                    row = row_model.model_dump(mode="json")
                    done[trial.key] = row
                    outcome.device_seconds += row["overhead"].get("device_seconds") or 0.0
                    report = TrialOutcome(number, configuration, micro_batch, search, row["status"], row,
                                          row.get("error"))
                status = row["status"]
                if status == "ok":
                    tokens = (row.get("figures") or {}).get("tokens_per_s") or 0.0
                    best = (result.best or {}).get("figures", {}).get("tokens_per_s") or -1.0
                    if tokens > best:
                        result.best = row
                return answer(report, ({"ok": "fit", "oom": "oom"}.get(status, "fail"),
                                       (row.get("figures") or {}).get("tokens_per_s")))
            return probe

        configurations = sweep_configurations(spec)
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
        if on_plan:
            on_plan([(c, c.problem(spec.nvme_path) or refused.get(c) or plans[c].skip) for c in configurations])
        for index, configuration in enumerate(configurations, start=1):
            result = ConfigurationResult(configuration)
            outcome.results.append(result)
            on_configuration and on_configuration(index, configuration)
            problem = configuration.problem(spec.nvme_path) or refused.get(configuration) or \
                plans[configuration].skip
            ceiling = micro_batch_ceiling(spec, configuration)
            if not problem and ceiling < 1:
                problem = (f"--max-global-batch {spec.max_global_batch} is below one sequence per replica "
                           f"({trial_replicas(spec, configuration)} replicas)")
            if problem:
                result.skipped = problem
                continue
            if spec.micro_batch == AUTO:
                run = functools.partial(search_micro_batch, start=plans[configuration].start, maximum=ceiling,
                                        tolerance=spec.mb_tolerance, flat=spec.mb_flat,
                                        step=PREDICTED_STEP if plans[configuration].predicted_max is not None else 2.0,
                                        candidates=cap_filling_micro_batches(spec, configuration))
            else:
                skipped = set(plans[configuration].skip_micro_batches) | {mb for mb in spec.micro_batch if mb > ceiling}
                run = functools.partial(fixed_micro_batches,
                                        values=[mb for mb in spec.micro_batch if mb not in skipped])
                result.pruned = sorted(skipped)
            result.search = run(probe_for(configuration, result, run))
    except KeyboardInterrupt:
        outcome.interrupted = True
    finally:
        lock.release(keep_trial=outcome.left_running is not None)
    return outcome


def _forget_interrupted(prepared, results: Path, outcome: SweepRun) -> None:
    """Ctrl-C during a trial: remove its run folder unless its row was written, as the next sweep does for a
    killed sweep's trial (dsx.sweep.lock.reap_orphans): a trial without a row runs again on resume, so nothing is
    left half-recorded. A timeout, which a re-run would repeat, keeps its folder and gets a row instead."""
    from dsx.sweep.lock import _remove_run_dir_without_row

    removed = _remove_run_dir_without_row(str(prepared.run_dir), results) if prepared is not None else None
    if removed:
        outcome.notes.append(f"removed {removed}, the folder of the interrupted trial (no row): the same command "
                             "runs it again")


def sweep_device_seconds(results: Path, sweep_id: str) -> tuple[float, int]:
    """(device-seconds, rows) of every row of this sweep in the results file, over all invocations."""
    total, count = 0.0, 0
    for row in read_rows(results):
        if (row.get("sweep") or {}).get("sweep_id") == sweep_id:
            total += (row.get("overhead") or {}).get("device_seconds") or 0.0
            count += 1
    return total, count
