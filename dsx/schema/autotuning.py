"""DeepSpeed autotuner settings (`autotuning`), read by `deepspeed --autotuning` and by the engine it launches.

DeepSpeed reads the section with dict.get (DeepSpeedAutotuningConfig): misspelled keys are silently IGNORED (e.g. the
`start_step`/`end_step` of its own format string); only empty results_dir/exps_dir are asserted.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import model_validator
from typing_extensions import Annotated

from dsx.schema.base import Bool, Field, Int, Section

__all__ = ["AutotuningConfig", "AutotuningModelInfo"]


class AutotuningModelInfo(Section):
    """`autotuning.model_info`: model size hints; with num_params set the autotuner skips its profiling run."""

    profile: Bool = False
    """Run only the model-info profiling experiment (the autotuner sets this itself)."""
    num_params: Optional[Int] = None
    """Number of model parameters (used to estimate memory per ZeRO stage)."""
    hidden_size: Optional[Int] = None
    """Model hidden size (used for the bucket-size search space)."""
    num_layers: Optional[Int] = None
    """Number of transformer layers."""


class AutotuningConfig(Section):
    """Autotuner settings; `enabled` makes the engine profile start..end_profile_step, write metrics and exit."""

    enabled: Bool = False
    """Run this job as an autotuning experiment (the engine exits after end_profile_step)."""
    fast: Bool = True
    """Tune only ZeRO stage and micro-batch size, not the other ZeRO knobs."""
    results_dir: Annotated[str, Field(min_length=1)] = "autotuning_results"
    """Directory for the tuning results and the best config (must not be empty)."""
    exps_dir: Annotated[str, Field(min_length=1)] = "autotuning_exps"
    """Directory for the per-experiment configs (must not be empty)."""
    overwrite: Bool = True
    """Delete existing results_dir/exps_dir before tuning (the docs say false; the code default is true)."""
    start_profile_step: Int = 3
    """Step at which the FLOPs profiler measures an experiment."""
    end_profile_step: Int = 5
    """Last measured step; the engine writes the metrics file and exits at end_profile_step + 1."""
    metric: Literal["latency", "throughput", "flops"] = "throughput"
    """Metric the tuners maximise; gridsearch/random keep the highest value, so "latency" picks the slowest run."""
    metric_path: Optional[str] = None
    """Where the engine writes the metrics JSON (default: ./autotuning_metric.json)."""
    tuner_type: Literal["gridsearch", "random", "model_based"] = "gridsearch"
    """Search algorithm (DeepSpeed silently falls back to gridsearch for an unknown name; dsx rejects it)."""
    tuner_early_stopping: Int = 5
    """Stop a tuning space after this many experiments without improvement."""
    tuner_num_trials: Int = 50
    """Maximum experiments per tuning space."""
    arg_mappings: Optional[dict[str, str]] = None
    """DeepSpeed config key -> training-script argument, for scripts that take batch sizes on the command line."""
    model_info: Optional[AutotuningModelInfo] = None
    """Model size hints (only profile/num_params/hidden_size/num_layers are read)."""
    model_info_path: Optional[str] = None
    """Where the profiling run writes model info (default: ./autotuning_model_info.json)."""
    mp_size: Annotated[Int, Field(ge=1)] = 1
    """Model-parallel degree of the training script (the autotuner divides by it)."""
    max_train_batch_size: Optional[Int] = None
    """Upper bound on train_batch_size explored."""
    min_train_batch_size: Int = 1
    """Lower bound on train_batch_size explored."""
    max_train_micro_batch_size_per_gpu: Int = 1024
    """Upper bound on train_micro_batch_size_per_gpu explored."""
    min_train_micro_batch_size_per_gpu: Int = 1
    """Lower bound on train_micro_batch_size_per_gpu explored."""
    num_tuning_micro_batch_sizes: Int = 3
    """Number of micro-batch sizes tried per ZeRO stage."""

    @model_validator(mode="after")
    def _check_metric_and_profile_window(self) -> "AutotuningConfig":
        if self.metric == "flops":
            raise ValueError(
                'autotuning.metric "flops" crashes the autotuner: the engine writes the FLOPs metric as '
                '"FLOPS_per_gpu", so reading results["flops"] raises KeyError; use "throughput"'
            )
        if self.enabled and self.end_profile_step < self.start_profile_step:
            raise ValueError(
                f"autotuning.end_profile_step ({self.end_profile_step}) is before start_profile_step "
                f"({self.start_profile_step}): the engine would exit before the FLOPs profiler has measured anything"
            )
        return self
