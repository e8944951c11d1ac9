"""`comms_logger`: time and size every collective that goes through deepspeed.comm.

DeepSpeed parses this section with a pydantic model (deepspeed/comm/config.py CommsLoggerConfig, extra="forbid"):
a misspelled key is REJECTED, but "true" strings pass and a value of "auto" silently becomes the default. The mere
presence of the block turns the logger on: CommsLogger.configure sets enabled from the block's presence, not from
its `enabled` (0.18.9 and 0.19.8, tested: a `{"enabled": false}` block logs; the linter warns: comms-logger-on).
"""

from __future__ import annotations

from typing import List

from dsx.schema.base import Bool, Section

__all__ = ["CommsLoggerConfig"]


class CommsLoggerConfig(Section):
    """Which deepspeed.comm operations are timed and logged (summary via deepspeed.comm.log_summary())."""

    enabled: Bool = False
    """Time and record collectives. DeepSpeed ignores it: the block's presence turns the logger on."""
    prof_all: Bool = True
    """Record every collective; false records only those named in prof_ops (or called with prof=True)."""
    prof_ops: List[str] = []
    """Log names of the collectives to record when prof_all is false, e.g. ["all_reduce", "all_gather"]."""
    verbose: Bool = False
    """Print every recorded operation as it completes, not only the summary."""
    debug: Bool = False
    """Append the calling function's name to each log name."""
