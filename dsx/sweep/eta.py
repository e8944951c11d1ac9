"""How long a sweep has left: the trials still to run times the mean time of the trials run so far.

A configuration's trials are its micro-batch search (from the predicted largest micro-batch: two to four trials;
a fixed list: its length), so the trials left are the configurations not finished times the mean trials per
finished configuration (FIRST_GUESS before one has finished). Trials whose row an earlier run left take no time
and count for neither mean. A trial that JIT-built DeepSpeed ops counts without the build: later trials load the
built ops (the first trial's build made a first ETA of ~68 min when ~9 were left).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

FIRST_GUESS = 3.0
"""Trials per configuration before any configuration has finished: a search from a predicted start fits, grows
x1.25 to an out-of-memory trial, then bisects once or twice."""


@dataclass
class _Trial:
    seconds: float
    initialize_s: float | None
    """The row's overhead.ds_initialize_s: deepspeed.initialize, where DeepSpeed loads or JIT-builds its ops."""
    built: bool
    """The row's overhead.jit_built is not empty: ops were built during this trial."""


@dataclass
class Eta:
    runnable: int = 0
    """Configurations the plan will run (not skipped)."""
    per_configuration: float = FIRST_GUESS
    trials: list[_Trial] = field(default_factory=list)
    """The trials that ran (not a row an earlier run left)."""
    finished_trials: list[int] = field(default_factory=list)
    """Trials each finished configuration ran (its search)."""
    current_trials: int = 0
    started: int = 0
    current_over: bool = False
    """The running configuration's search has ended (its last trial said so)."""
    goes_on: bool = False
    """The running configuration's search tries another micro-batch after its last trial."""

    def configuration_started(self) -> None:
        if self.started and not self.current_over:
            self.finished_trials.append(self.current_trials)
        self.started += 1
        self.current_trials, self.current_over, self.goes_on = 0, False, False

    def trial_done(self, seconds: float, ran: bool, last: bool | None = None, row: dict | None = None) -> None:
        """One trial ended after `seconds`; `last`: whether it ended its configuration's search (None: not known
        until the next configuration starts); `row`: its row, whose overhead says whether it built ops."""
        self.current_trials += 1
        if ran:
            overhead = (row or {}).get("overhead") or {}
            self.trials.append(_Trial(seconds, overhead.get("ds_initialize_s"), bool(overhead.get("jit_built"))))
        if last:
            self.finished_trials.append(self.current_trials)
        self.current_over, self.goes_on = bool(last), last is False

    def trial_seconds(self) -> list[float]:
        """Each trial's seconds, less what building ops added: a building trial's deepspeed.initialize beyond the
        median of those that built nothing (all of it while none has)."""
        plain = [t.initialize_s for t in self.trials if not t.built and t.initialize_s is not None]
        usual = statistics.median(plain) if plain else 0.0
        return [max(0.0, t.seconds - max(0.0, t.initialize_s - usual)) if t.built and t.initialize_s is not None
                else t.seconds for t in self.trials]

    def _mean(self) -> float:
        return statistics.mean(self.finished_trials) if self.finished_trials else self.per_configuration

    def unknown(self) -> bool:
        """The running search goes on past the mean trials per configuration: how far is not known."""
        return self.goes_on and self._mean() - self.current_trials < 1

    def trials_left(self) -> float:
        """Trials expected after the ones done: the current configuration's rest (at least one while its search goes
        on) and the untouched ones'."""
        mean = self._mean()
        untouched = max(0, self.runnable - self.started)
        rest = 0.0 if self.current_over else max(0.0, mean - self.current_trials)
        return untouched * mean + (max(rest, 1.0) if self.goes_on else rest)

    def seconds_left(self) -> float | None:
        seconds = self.trial_seconds()
        if not seconds:
            return None
        return self.trials_left() * statistics.mean(seconds)

    def done(self) -> int:
        """Configurations whose search has ended."""
        return len(self.finished_trials)

    def text(self) -> str:
        """'ETA ~12 min (about 4 trial(s) left, 2 of 5 configuration(s) done)'; 'at least' where the running search
        goes on for an unknown number of trials."""
        left = self.seconds_left()
        when = "ETA after the first trial that runs" if left is None else f"ETA ~{_duration(left)}"
        how_many = "at least" if self.unknown() else "about"
        return (f"{when} ({how_many} {self.trials_left():.0f} trial(s) left, {self.done()} of {self.runnable} "
                f"configuration(s) done)")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
