"""`compile`: options of `engine.compile()` and DeepCompile (graph-level ZeRO passes, offloading, syncs).

DeepSpeed parses this section with a pydantic model (deepspeed/compile/config.py CompileConfig, extra="forbid"): a
misspelled key is REJECTED, but "true" strings pass and a value of "auto" silently becomes the default. Nothing
here takes effect until user code calls `engine.compile()`; the offload options act only with DeepCompile.
"""

from __future__ import annotations

from typing import List, Literal, Optional

from pydantic import model_validator

from dsx.schema.base import Bool, Field, Int, Section, version_gate

__all__ = ["CompileConfig", "PassName", "PASS_ADDED_IN"]

PassName = Literal["z1", "z3", "autosp", "autotp"]
"""DeepCompile pass names DeepSpeed 0.19.8 accepts in `passes`."""

PASS_ADDED_IN = {"autotp": "0.19.0"}
"""Pass names that older DeepSpeed rejects: 0.18.9's CompileConfig accepts only z1, z3 and autosp."""


class CompileConfig(Section):
    """engine.compile() / DeepCompile settings."""

    deepcompile: Bool = False
    """Compile with DeepCompile (ZeRO 1-3 as compiler passes) instead of plain torch.compile."""
    autoep_non_moe: Bool = Field(False, json_schema_extra=version_gate(added_in="0.19.0"))
    """Compile the non-MoE parents of AutoEP layers with plain torch.compile, keeping AutoEP eager; not DeepCompile."""
    free_activation: Bool = False
    """DeepCompile: free activations eagerly once no longer needed (ignored with the inductor backend)."""
    free_activation_threshold: Int = 10 * 1024 * 1024
    """DeepCompile free_activation: only activations of at least this many bytes are freed eagerly."""
    offload_activation: Bool = False
    """DeepCompile ZeRO-3: move saved activations to pinned host memory until backward; not with other offloads."""
    offload_activation_pin_memory: Bool = Field(True, json_schema_extra=version_gate(added_in="0.19.0"))
    """Pin the host buffers of offload_activation (false only under tight memlock limits, ulimit -l)."""
    offload_opt_states: Bool = False
    """DeepCompile ZeRO-3: keep optimizer states in host memory between optimizer steps, as the budget requires."""
    double_buffer: Bool = True
    """DeepCompile: double-buffer parameter all-gathers."""
    symmetric_memory: Bool = False
    """DeepCompile ZeRO-3: use symmetric memory for the data-parallel group's collectives."""
    debug_log: Bool = False
    """DeepCompile: log and dump the graphs it builds."""
    offload_parameters: Bool = False
    """DeepCompile ZeRO-3: offload parameters to the host (turned on for you when ZeRO offloads both to the CPU)."""
    sync_before_reduce: Bool = False
    """DeepCompile: synchronize the device before each gradient reduce (debugging)."""
    sync_after_reduce: Bool = False
    """DeepCompile: synchronize the device after each gradient reduce (debugging)."""
    sync_before_allgather: Bool = False
    """DeepCompile: synchronize the device before each parameter all-gather (debugging)."""
    sync_after_allgather: Bool = False
    """DeepCompile: synchronize the device after each parameter all-gather (debugging)."""
    keep_int_input_tensors: Bool = True
    """Keep the real values of integer input tensors for profiling instead of dummy values."""
    keep_all_input_tensors: Bool = False
    """Keep the real values of all input tensors for profiling instead of dummy values."""
    passes: Optional[List[PassName]] = None
    """DeepCompile passes: "autosp" or "autotp" (new in 0.19) replace the ZeRO-stage passes, named "z1"/"z3"."""

    @model_validator(mode="after")
    def _compatible_options(self) -> "CompileConfig":
        # DeepSpeed 0.19 raises these when engine.compile() runs (deepspeed/compile/init_z3.py, runtime/engine.py).
        if self.offload_parameters and self.offload_opt_states:
            raise ValueError(
                "offload_parameters and offload_opt_states cannot both be true: choose one offloading target "
                "(DeepSpeed raises ValueError at engine.compile())"
            )
        if self.offload_activation and (self.offload_parameters or self.offload_opt_states):
            raise ValueError(
                "offload_activation cannot be combined with offload_parameters or offload_opt_states: choose one "
                "offloading target (DeepSpeed raises ValueError at engine.compile())"
            )
        if self.passes and "autotp" in self.passes and len(set(self.passes)) > 1:
            raise ValueError(
                'passes: "autotp" cannot yet be combined with "autosp" or the ZeRO passes "z1"/"z3" '
                "(DeepSpeed raises NotImplementedError at engine.compile())"
            )
        if self.autoep_non_moe and self.deepcompile:
            raise ValueError(
                "autoep_non_moe uses plain torch.compile and cannot be combined with deepcompile "
                "(DeepSpeed raises ValueError at engine.compile())"
            )
        return self
