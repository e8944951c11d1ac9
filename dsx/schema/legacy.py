"""Sections DeepSpeed 0.19 removed, modelled as DeepSpeed 0.18.9 parsed them (valid for 0.18.x targets only; 0.19
rejects each of these top-level keys with DeepSpeedConfigError, and config.py gates them).

0.18.9 reads all of them with dict.get: misspelled keys are silently IGNORED; a few blocks crash DeepSpeedConfig() with
KeyError 'enabled' when that key is missing (amp, progressive_layer_drop, curriculum_learning).
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import ConfigDict, model_validator
from typing_extensions import Annotated

from dsx.schema.base import Bool, Field, Float, Int, Section

__all__ = [
    "ElasticityConfig",
    "CompressionTrainingConfig",
    "CompressionTechniqueConfig",
    "LayerReductionConfig",
    "NebulaConfig",
    "AmpConfig",
    "ProgressiveLayerDropConfig",
    "CurriculumLearningLegacyConfig",
    "CurriculumScheduleConfig",
    "EigenvalueConfig",
    "QuantizeTrainingConfig",
]


class ElasticityConfig(Section):
    """`elasticity` (0.18 and older): DeepSpeed picks train_batch_size and the micro-batch size so the job can run
    on any GPU count in [min_gpus, max_gpus]; when enabled it overrides the three top-level batch keys."""

    enabled: Bool = False
    """Let DeepSpeed compute the batch sizes (max_train_batch_size and micro_batch_sizes are then required)."""
    max_train_batch_size: Annotated[Int, Field(ge=1)] = 2000
    """Largest acceptable global batch size."""
    micro_batch_sizes: Annotated[list[Annotated[Int, Field(gt=0)]], Field(min_length=1)] = [2, 4, 6]
    """Acceptable micro-batch sizes per GPU (positive integers)."""
    min_gpus: Annotated[Int, Field(ge=1)] = 1
    """Fewest GPUs the job must be able to run on."""
    max_gpus: Annotated[Int, Field(ge=1)] = 10000
    """Most GPUs the job must be able to run on."""
    num_gpus_per_node: Annotated[Int, Field(ge=1)] = 1
    """GPUs per node (version 0.2 scales by whole nodes)."""
    model_parallel_size: Annotated[Int, Field(ge=1)] = 1
    """Model-parallel degree; above 1 needs version 0.2 and must divide num_gpus_per_node."""
    min_time: Annotated[Int, Field(ge=0)] = 0
    """Minutes the job runs before a scheduler may rescale it (0: unknown)."""
    prefer_larger_batch: Bool = True
    """Prefer the largest batch size compatible with the most GPU counts."""
    ignore_non_elastic_batch_info: Bool = False
    """Allow top-level batch keys while enabled (they are then silently overridden) instead of raising."""
    version: Literal[0.1, 0.2] = 0.2
    """Elasticity algorithm version (0.2 works per node and supports model parallelism)."""

    @model_validator(mode="after")
    def _check_enabled(self) -> "ElasticityConfig":
        if not self.enabled:
            return self
        missing = [k for k in ("max_train_batch_size", "micro_batch_sizes") if k not in self.model_fields_set]
        if missing:
            raise ValueError("elasticity is enabled, so " + " and ".join(missing) + " must be specified")
        if self.max_gpus < self.min_gpus:
            raise ValueError(
                f"elasticity.min_gpus ({self.min_gpus}) cannot be greater than max_gpus ({self.max_gpus})"
            )
        too_big = [m for m in self.micro_batch_sizes if m > self.max_train_batch_size]
        if too_big:
            raise ValueError(
                f"elasticity.micro_batch_sizes {too_big} exceed max_train_batch_size ({self.max_train_batch_size})"
            )
        if self.model_parallel_size > 1 and self.version != 0.2:
            raise ValueError(
                f"elasticity version {self.version} does not support model_parallel_size > 1; use version 0.2"
            )
        if self.num_gpus_per_node % self.model_parallel_size != 0:
            raise ValueError(
                f"elasticity.num_gpus_per_node ({self.num_gpus_per_node}) must be divisible by model_parallel_size "
                f"({self.model_parallel_size})"
            )
        return self


class CompressionTechniqueConfig(Section):
    """One compression technique (weight_quantization, activation_quantization, sparse_pruning, row_pruning,
    head_pruning, channel_pruning).

    shared_parameters and different_groups stay open dicts: their keys differ per technique and method (e.g.
    `enabled`, `method`, `schedule_offset`, `quantization_type`, `dense_ratio`, `num_heads`) and DeepSpeed passes
    each group's `params` on unchecked.
    """

    shared_parameters: Optional[dict[str, Any]] = None
    """Settings shared by all groups, e.g. {"enabled": true, "method": "l1", "schedule_offset": 1000}; absent: off."""
    different_groups: dict[str, Any]
    """{group: {"params": {...}, "modules": ["*"], "related_modules": null}}; 0.18.9 raises KeyError without it."""


class LayerReductionConfig(Section):
    """`compression_training.layer_reduction`: initialise a shallower student from chosen teacher layers."""

    enabled: Bool = False
    """Run layer reduction in init_compression (needs a teacher model)."""
    keep_number_layer: Optional[Int] = None
    """Number of layers the student keeps."""
    module_name_prefix: Optional[str] = None
    """Prefix of the numbered layers, e.g. "bert.encoder.layer"; required when enabled."""
    teacher_layer: Optional[list[Int]] = None
    """Teacher layers copied into student layers 0..n-1; required when enabled."""
    other_module_name: Optional[list[str]] = None
    """Other teacher modules copied to the student, e.g. ["bert.embeddings"]; required when enabled."""

    @model_validator(mode="after")
    def _check_enabled(self) -> "LayerReductionConfig":
        if not self.enabled:
            return self
        required = ("module_name_prefix", "teacher_layer", "other_module_name")
        missing = [key for key in required if getattr(self, key) is None]
        if missing:
            raise ValueError(
                "compression_training.layer_reduction is enabled, so " + ", ".join(missing) + " must be specified"
            )
        return self


class CompressionTrainingConfig(Section):
    """`compression_training` (0.18 and older): DeepSpeed Compression (quantization-aware training and pruning),
    applied by deepspeed.compression.compress.init_compression."""

    weight_quantization: Optional[CompressionTechniqueConfig] = None
    """Quantization-aware training of weights (MoQ)."""
    activation_quantization: Optional[CompressionTechniqueConfig] = None
    """Quantization-aware training of activations."""
    sparse_pruning: Optional[CompressionTechniqueConfig] = None
    """Unstructured (l1/topk) or snip_momentum sparse pruning."""
    row_pruning: Optional[CompressionTechniqueConfig] = None
    """Structured pruning of Linear rows."""
    head_pruning: Optional[CompressionTechniqueConfig] = None
    """Pruning of attention heads."""
    channel_pruning: Optional[CompressionTechniqueConfig] = None
    """Pruning of convolution channels."""
    layer_reduction: Optional[LayerReductionConfig] = None
    """Layer reduction (knowledge-distillation student initialisation)."""


class NebulaConfig(Section):
    """`nebula` (0.18 and older): Azure Nebula asynchronous checkpointing (needs the torch_nebula package)."""

    enabled: Bool = False
    """Save checkpoints through torch_nebula (falls back to torch.save if it is not installed)."""
    persistent_storage_path: Optional[str] = None
    """Where Nebula persists checkpoints."""
    persistent_time_interval: Int = 100
    """Interval between persisting checkpoints."""
    num_of_version_in_retention: Int = 2
    """Checkpoint versions Nebula keeps."""
    enable_nebula_load: Bool = True
    """Load checkpoints through Nebula (false: plain torch.load)."""
    nebula_load_path: Optional[str] = None
    """Where Nebula loads checkpoints from (null: persistent_storage_path)."""


class AmpConfig(Section):
    """`amp` (0.18 and older): NVIDIA Apex AMP.

    Extra keys are allowed: every key except `enabled` goes unchecked to apex.amp.initialize(**params), e.g.
    "opt_level": "O1", "loss_scale": "dynamic", "keep_batchnorm_fp32".
    """

    model_config = ConfigDict(extra="allow")

    enabled: Bool
    """Use Apex AMP; required: 0.18.9's DeepSpeedConfig raises KeyError 'enabled' when an amp block lacks it."""


class ProgressiveLayerDropConfig(Section):
    """`progressive_layer_drop` (0.18 and older): PLD; the engine passes progressive_layer_drop/pld_theta kwargs to
    the model's forward."""

    enabled: Bool
    """Turn PLD on; required: 0.18.9's DeepSpeedConfig raises KeyError 'enabled' when the block lacks it."""
    theta: Optional[Float] = None
    """Final keep probability of a layer; required when enabled (0.18.9 never applies its 1.0 default)."""
    gamma: Optional[Float] = None
    """How fast the keep probability decays; required when enabled (0.18.9 never applies its 0.001 default)."""

    @model_validator(mode="after")
    def _check_enabled(self) -> "ProgressiveLayerDropConfig":
        if self.enabled:
            missing = [key for key in ("theta", "gamma") if getattr(self, key) is None]
            if missing:
                raise ValueError(
                    "progressive_layer_drop is enabled, so " + " and ".join(missing) + " must be specified "
                    "(0.18.9 raises KeyError at initialize otherwise)"
                )
        return self


class CurriculumScheduleConfig(Section):
    """`curriculum_learning.schedule_config`: parameters of the difficulty schedule."""

    difficulty: Optional[list[Int]] = None
    """fixed_discrete: difficulty levels, one more than max_step."""
    max_step: Optional[list[Int]] = None
    """fixed_discrete: last step of each difficulty level but the final one."""
    total_curriculum_step: Optional[Int] = None
    """fixed_linear/fixed_root: steps to go from min_difficulty to max_difficulty."""
    difficulty_step: Optional[Int] = None
    """fixed_linear/fixed_root: difficulties are multiples of this (8 for fp16 tensor cores with seqlen)."""
    root_degree: Optional[Float] = None
    """fixed_root: degree of the root (2: square root)."""


_SCHEDULE_KEYS = {
    "fixed_discrete": ("difficulty", "max_step"),
    "fixed_root": ("total_curriculum_step", "difficulty_step", "root_degree"),
    "fixed_linear": ("total_curriculum_step", "difficulty_step"),
    "custom": (),
}


class CurriculumLearningLegacyConfig(Section):
    """Top-level `curriculum_learning` (0.18 and older): the legacy curriculum scheduler; with curriculum_type
    "seqlen" the engine passes curriculum_seqlen to the model's forward."""

    enabled: Bool
    """Turn the legacy curriculum on; required: 0.18.9's DeepSpeedConfig raises KeyError 'enabled' without it."""
    curriculum_type: Optional[str] = None
    """Difficulty metric; only "seqlen" makes the engine pass curriculum_seqlen (required when enabled)."""
    min_difficulty: Optional[Int] = None
    """Starting difficulty (required when enabled)."""
    max_difficulty: Optional[Int] = None
    """Final difficulty (required when enabled)."""
    schedule_type: Optional[Literal["fixed_discrete", "fixed_root", "fixed_linear", "custom"]] = None
    """How difficulty grows; "custom" needs engine.set_custom_curriculum_learning_schedule (required when enabled)."""
    schedule_config: Optional[CurriculumScheduleConfig] = None
    """Parameters of schedule_type."""

    @model_validator(mode="after")
    def _check_enabled(self) -> "CurriculumLearningLegacyConfig":
        if not self.enabled:
            return self
        required = ("curriculum_type", "min_difficulty", "max_difficulty", "schedule_type")
        missing = [key for key in required if getattr(self, key) is None]
        if missing:
            raise ValueError("curriculum_learning is enabled, so " + ", ".join(missing) + " must be specified")
        schedule = self.schedule_config or CurriculumScheduleConfig()
        missing = [key for key in _SCHEDULE_KEYS[self.schedule_type] if getattr(schedule, key) is None]
        if missing:
            raise ValueError(
                f"curriculum_learning schedule_type {self.schedule_type!r} needs schedule_config."
                + ", schedule_config.".join(missing)
            )
        if self.schedule_type == "fixed_discrete":
            if not schedule.max_step or len(schedule.difficulty) != len(schedule.max_step) + 1:
                raise ValueError(
                    "curriculum_learning fixed_discrete needs a non-empty schedule_config.max_step and one more "
                    f"difficulty than max_step entries (got {len(schedule.difficulty)} and {len(schedule.max_step)})"
                )
        return self


class EigenvalueConfig(Section):
    """`eigenvalue` (0.18 and older): Hessian eigenvalue estimation for MoQ. 0.18.9 ignores the top-level block (it
    only looked inside quantize_training), so these settings never took effect."""

    enabled: Bool = False
    """Compute per-layer eigenvalues during training."""
    verbose: Bool = False
    """Print the eigenvalues."""
    max_iter: Int = 100
    """Power-iteration steps."""
    tol: Float = 1e-2
    """Power-iteration convergence tolerance."""
    stability: Float = 1e-6
    """Small constant for numerical stability."""
    gas_boundary_resolution: Int = 1
    """Compute eigenvalues every N gradient-accumulation boundaries."""
    layer_name: str = "bert.encoder.layer"
    """Module path of the layer list."""
    layer_num: Int = 0
    """Number of layers to analyse."""


class QuantizeTrainingConfig(Section):
    """`quantize_training` (MoQ, removed long before 0.19): 0.18.9 ignores the whole block (its runtime does not
    even define the key's constant; MoQ moved into compression_training.weight_quantization).

    Extra keys are allowed: the block's old keys (quantize_bits, quantize_schedule, quantize_groups,
    fp16_mixed_quantize, quantize_algo, ...) are accepted unchecked since no 0.18.9 code reads them.
    """

    model_config = ConfigDict(extra="allow")

    enabled: Bool = False
    """Turn MoQ on (has no effect in 0.18.9)."""
