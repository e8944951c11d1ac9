"""`flops_profiler`: DeepSpeed's FLOPs/latency/parameter profiler, printed once at `profile_step`.

DeepSpeed reads this section with dict.get (deepspeed/profiling/config.py): misspelled keys such as `enable` are
silently IGNORED and values are not type-checked. Enabling it also turns on wall_clock_breakdown's timers.
"""

from __future__ import annotations

from typing import Optional

from dsx.schema.base import Bool, Float, Int, Section

__all__ = ["FlopsProfilerConfig"]


class FlopsProfilerConfig(Section):
    """Profile one training step on rank 0 and print per-module FLOPs, latency and parameter counts."""

    enabled: Bool = False
    """Turn the profiler on (it is also on whenever autotuning is enabled)."""
    recompute_fwd_factor: Float = 0.0
    """Extra forward passes per step from activation recomputation (0.0 none, 1.0 full), added to backward FLOPs."""
    profile_step: Int = 1
    """Global step at which to profile and print (a step the run never reaches prints nothing)."""
    module_depth: Int = -1
    """Depth of nested modules shown in the aggregated profile; -1 means the innermost modules."""
    top_modules: Int = 1
    """Number of top modules listed per depth in the aggregated profile."""
    detailed: Bool = True
    """Also print the full per-module profile tree (forced off under autotuning)."""
    output_file: Optional[str] = None
    """File to write the profile to (its directory is created); None prints to stdout."""
