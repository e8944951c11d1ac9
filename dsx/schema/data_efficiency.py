"""Data-efficiency library (`data_efficiency`): curriculum data sampling, dynamic batching and random-LTD token
dropping.

DeepSpeed reads the section with dict.get (runtime/data_pipeline/config.py): misspelled keys are silently IGNORED;
only curriculum_metrics / max_tokens are asserted when their feature is enabled. The curriculum_learning and
random_ltd blocks are handed on unchecked, so those two sub-models accept extra keys.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import ConfigDict, model_validator
from typing_extensions import Annotated

from dsx.schema.base import Bool, Field, Int, Section

__all__ = [
    "DataEfficiencyConfig",
    "DataSamplingConfig",
    "CurriculumLearningConfig",
    "DynamicBatchingConfig",
    "DataRoutingConfig",
    "RandomLTDConfig",
]


class CurriculumLearningConfig(Section):
    """`data_sampling.curriculum_learning`: sample data by difficulty metrics with a per-metric schedule.

    Extra keys are allowed: DeepSpeed copies every key of this block except `enabled` into the curriculum config
    unchecked and its data sampler reads them from there (the per-metric schedules live in curriculum_metrics).
    """

    model_config = ConfigDict(extra="allow")

    enabled: Bool = False
    """Turn curriculum learning on (needs curriculum_metrics)."""
    curriculum_metrics: Optional[dict[str, dict[str, Any]]] = None
    """{metric: {index_to_sample_path, index_to_metric_path, difficulty_type, clustering_type, schedule...}}."""
    data_cluster_path: Optional[str] = None
    """Directory where the data sampler writes its difficulty clusters (rank 0 creates it)."""

    @model_validator(mode="after")
    def _check_required_keys(self) -> "CurriculumLearningConfig":
        if self.enabled and self.curriculum_metrics is None:
            raise ValueError(
                "data_efficiency.data_sampling.curriculum_learning is enabled, so curriculum_metrics must be specified"
            )
        return self


class DynamicBatchingConfig(Section):
    """`data_sampling.dynamic_batching`: pack variable-length samples into batches of at most max_tokens, scaling
    the learning rate with the batch size (used by deepspeed's get_dataloader_and_lr_scheduler_for_variable_batch_size).
    """

    enabled: Bool = False
    """Turn dynamic batching on (needs max_tokens)."""
    lr_scaling_method: Literal["linear", "sqrt", "none"] = "linear"
    """How the learning rate follows the batch size."""
    min_batch_size: Int = 1
    """Fewest samples in a micro-batch."""
    max_batch_size: Optional[Int] = None
    """Most samples in a micro-batch (null: no limit)."""
    sequence_picking_order: Literal["random", "seqlen", "dataloader"] = "dataloader"
    """Order samples are packed in (anything else fails an assertion when the loader is built)."""
    max_tokens: Optional[Annotated[Int, Field(gt=0)]] = None
    """Token budget of a micro-batch (samples longer than this are dropped); required when enabled."""
    verbose: Bool = False
    """Log the batch-packing decisions."""
    metrics_path: Optional[str] = None
    """Directory of the DataAnalyzer "seqlen" metric; written there when no sequence lengths are passed in."""

    @model_validator(mode="after")
    def _check_required_keys(self) -> "DynamicBatchingConfig":
        if self.enabled and self.max_tokens is None:
            raise ValueError(
                "data_efficiency.data_sampling.dynamic_batching is enabled, so max_tokens must be specified"
            )
        return self


class DataSamplingConfig(Section):
    """`data_efficiency.data_sampling`: DeepSpeed's data sampler and its curriculum / dynamic-batching options."""

    enabled: Bool = False
    """Use DeepSpeed's data sampler in deepspeed_io data loaders."""
    num_epochs: Annotated[Int, Field(ge=1)] = 1000
    """Epochs the sampler plans for (0 makes the sampler assert "no sample to consume")."""
    num_workers: Annotated[Int, Field(ge=0)] = 0
    """DataLoader worker processes."""
    pin_memory: Bool = False
    """DataLoader pin_memory."""
    curriculum_learning: Optional[CurriculumLearningConfig] = None
    """Curriculum learning by difficulty metrics."""
    dynamic_batching: Optional[DynamicBatchingConfig] = None
    """Variable batch size with learning-rate scaling."""


class RandomLTDConfig(Section):
    """`data_routing.random_ltd`: random layer-token drop (skip a random subset of tokens in middle layers).

    Extra keys are allowed: when enabled, DeepSpeed copies every key of this block into the random-LTD config
    unchecked and the scheduler / RandomLayerTokenDrop layers read them from there.
    """

    model_config = ConfigDict(extra="allow")

    enabled: Bool = False
    """Turn random-LTD on (the model must use deepspeed's RandomLayerTokenDrop layers)."""
    total_layer_num: Optional[Int] = None
    """Number of layers in the model."""
    random_ltd_layer_num: Optional[Int] = None
    """Number of layers that drop tokens (must equal the layers matched by random_ltd_layer_id)."""
    random_ltd_layer_id: Optional[list[Int]] = None
    """Indices of the layers that drop tokens."""
    model_mask_name: Optional[str] = None
    """Name of the attention-mask argument of the wrapped layers."""
    model_type: Optional[Literal["encoder", "decoder"]] = None
    """Which token sampler to use (anything else raises NotImplementedError in the layers)."""
    hidden_state_order: Optional[Literal["batch_seq_dim", "seq_batch_dim"]] = None
    """Layout of the hidden states the wrapped layers receive (anything else raises NotImplementedError)."""
    random_ltd_schedule: Optional[dict[str, Any]] = None
    """{min_value, max_value, schedule_type: "fixed_linear", schedule_config: {require_steps, seq_per_step}}."""
    layer_token_lr_schedule: Optional[dict[str, Any]] = None
    """Layer-token learning-rate schedule; `enabled: true` is not implemented (initialize raises)."""

    @model_validator(mode="after")
    def _check_required_keys(self) -> "RandomLTDConfig":
        if not self.enabled:
            return self
        required = ("total_layer_num", "random_ltd_layer_num", "random_ltd_layer_id", "random_ltd_schedule")
        missing = [key for key in required if getattr(self, key) is None]
        if missing:
            raise ValueError(
                "data_efficiency.data_routing.random_ltd is enabled, so " + ", ".join(missing) + " must be specified"
            )
        if (self.layer_token_lr_schedule or {}).get("enabled") is True:
            raise ValueError(
                "data_efficiency.data_routing.random_ltd.layer_token_lr_schedule.enabled is not implemented by "
                "DeepSpeed (initialize raises NotImplementedError); set it to false"
            )
        return self


class DataRoutingConfig(Section):
    """`data_efficiency.data_routing`: token-routing techniques (random-LTD)."""

    enabled: Bool = False
    """Master switch for data routing."""
    random_ltd: Optional[RandomLTDConfig] = None
    """Random layer-token drop."""


class DataEfficiencyConfig(Section):
    """The data-efficiency library's settings."""

    enabled: Bool = False
    """Master switch for the data-efficiency library."""
    seed: Int = 1234
    """Seed of the data sampler and dynamic batching."""
    data_sampling: Optional[DataSamplingConfig] = None
    """Data sampling: curriculum learning and dynamic batching."""
    data_routing: Optional[DataRoutingConfig] = None
    """Data routing: random-LTD."""
