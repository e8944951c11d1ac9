"""`timers`: the engine's throughput timer (samples/s and step time in the progress reports).

DeepSpeed reads only `timers.throughput` (deepspeed/utils/config.py): that inner block is a pydantic model
(extra="forbid", misspellings REJECTED, "true" strings pass), while any sibling of `throughput` is silently IGNORED.
"""

from __future__ import annotations

from typing import Optional

from dsx.schema.base import Bool, Section

__all__ = ["TimersConfig", "ThroughputTimerConfig"]


class ThroughputTimerConfig(Section):
    """The throughput timer (DeepSpeed's DeepSpeedThroughputTimerConfig)."""

    enabled: Bool = True
    """Measure throughput."""
    synchronized: Bool = True
    """Synchronize the device at the start and end of each timed step: accurate timings, at some cost in speed."""


class TimersConfig(Section):
    """Engine timers; only the throughput timer is configurable."""

    throughput: Optional[ThroughputTimerConfig] = None
    """Throughput timer settings."""
