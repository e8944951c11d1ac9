"""How long a sweep has left: the trials still to run times the mean time of the trials run so far.

A configuration's trials are its micro-batch search (from the predicted largest micro-batch: two to four trials;
a fixed list: its length), so the trials left are the configurations not finished times the mean trials per
finished configuration (FIRST_GUESS before one has finished). Trials whose row an earlier run left take no time
and count for neither mean.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

FIRST_GUESS = 3.0
"""Trials per configuration before any configuration has finished: a search from a predicted start fits, grows
x1.25 to an out-of-memory trial, then bisects once or twice."""


@dataclass
class Eta:
    runnable: int = 0
    """Configurations the plan will run (not skipped)."""
    per_configuration: float = FIRST_GUESS
    trial_seconds: list[float] = field(default_factory=list)
    finished_trials: list[int] = field(default_factory=list)
    """Trials each finished configuration ran (its search)."""
    current_trials: int = 0
    started: int = 0

    def configuration_started(self) -> None:
        if self.started:
            self.finished_trials.append(self.current_trials)
        self.started += 1
        self.current_trials = 0

    def trial_done(self, seconds: float, ran: bool) -> None:
        self.current_trials += 1
        if ran:
            self.trial_seconds.append(seconds)

    def trials_left(self) -> float:
        """Trials expected after the ones done: the current configuration's rest and the untouched ones'."""
        mean = statistics.mean(self.finished_trials) if self.finished_trials else self.per_configuration
        untouched = max(0, self.runnable - self.started)
        return untouched * mean + max(0.0, mean - self.current_trials)

    def seconds_left(self) -> float | None:
        if not self.trial_seconds:
            return None
        return self.trials_left() * statistics.mean(self.trial_seconds)

    def text(self) -> str:
        """'ETA ~12 min (about 4 trials left, 2 of 5 configurations done)'."""
        done = max(0, self.started - 1)
        left = self.seconds_left()
        when = "ETA after the first trial that runs" if left is None else f"ETA ~{_duration(left)}"
        return (f"{when} (about {self.trials_left():.0f} trial(s) left, {done} of {self.runnable} "
                f"configuration(s) done)")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
