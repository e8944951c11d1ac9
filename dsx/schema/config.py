"""The whole DeepSpeed JSON config: the top-level scalar keys, plus one model per section.

Sections are imported only when a config uses them (`SECTIONS`): building all ~90 section classes costs
~0.3 s, more than dsx's whole cold-start budget, and a typical config uses four sections. `full_model()`
assembles the complete model when everything is needed (`dsx schema`, tests).

Defaults mirror DeepSpeed 0.19.8; a default of None means "absent" (DeepSpeed's own default applies, or the
default changed between releases and dsx always writes the key explicitly).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, Optional, get_args, get_origin

from pydantic import BeforeValidator, Discriminator, Field, Tag, TypeAdapter, create_model
from pydantic.fields import FieldInfo
from typing_extensions import Annotated

from dsx.schema.base import Bool, Float, Int, Section, version_gate

DTYPE_NAMES = Literal["fp16", "bf16", "fp32"]


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _legacy_zero_bool(value: Any) -> Any:
    return {"stage": 1 if value else 0} if isinstance(value, bool) else value


REMOVED = "0.19.0"



class TopLevelConfig(Section):
    """The top-level scalar keys of a DeepSpeed config (DeepSpeed reads them with dict.get: typos pass)."""

    # --- batch sizes: train_batch_size = micro_batch x gradient_accumulation x data-parallel world size
    train_batch_size: Optional[Annotated[Int, Field(gt=0)]] = None
    """Global batch per optimizer step: micro-batch x gradient accumulation x data-parallel world size."""
    train_micro_batch_size_per_gpu: Optional[Annotated[Int, Field(gt=0)]] = None
    """Samples each data-parallel rank processes per forward/backward."""
    gradient_accumulation_steps: Optional[Annotated[Int, Field(gt=0)]] = None
    """Micro-batches accumulated before each optimizer step."""

    # --- ZeRO and optimizer switches
    zero_allow_untested_optimizer: Bool = False
    """Let ZeRO run with an optimizer outside DeepSpeed's tested list (e.g. Lamb, torch.optim.SGD)."""
    zero_force_ds_cpu_optimizer: Bool = True
    """With offload, require DeepSpeed's CPU optimizer for a client optimizer."""
    gradient_clipping: Optional[Float] = None
    """Global gradient-norm clip; 0 disables. Default changed 0.0 -> 1.0 in 0.19, so dsx always writes it."""

    # --- communication
    prescale_gradients: Bool = False
    """Divide gradients by the world size before the all-reduce instead of after."""
    gradient_predivide_factor: Float = 1.0
    """Divide gradients by this before the all-reduce and by world_size/factor after."""
    gradient_allreduce_op: Annotated[Literal["mean", "sum"], BeforeValidator(_lower)] = Field(
        "mean", json_schema_extra=version_gate(added_in="0.19.0")
    )
    """How data-parallel gradients are combined."""
    communication_data_type: Optional[DTYPE_NAMES] = None
    """Dtype of gradient communication (default: the training dtype)."""
    seq_parallel_communication_data_type: DTYPE_NAMES = "fp32"
    """Dtype of sequence-parallel communication."""
    managed_gradient_accumulation: Bool = Field(True, json_schema_extra=version_gate(added_in="0.19.0"))
    """Let the engine own gradient accumulation boundaries (required by pipeline and DeepCompile)."""

    # --- logging
    steps_per_print: Optional[Annotated[Int, Field(ge=1)]] = None
    """Print a progress report every N steps (unset: never)."""
    wall_clock_breakdown: Bool = False
    """Time forward/backward/step with synchronising timers (slows training)."""
    memory_breakdown: Bool = False
    """Print memory usage at each step."""
    dump_state: Bool = False
    """Print the engine state after initialisation."""
    log_level: Optional[Literal["debug", "info", "warning", "error", "critical"]] = Field(
        None, json_schema_extra=version_gate(added_in="0.19.0")
    )
    """DeepSpeed's logger level."""

    # --- parallelism
    sequence_parallel_size: Optional[Annotated[Int, Field(ge=1)]] = None
    """Ulysses sequence-parallel degree (must divide the world size)."""
    data_parallel_size: Optional[Annotated[Int, Field(ge=1)]] = None
    """Data-parallel degree when a device mesh is built with sequence_parallel_size."""

    # --- misc
    vocabulary_size: Optional[Annotated[Int, Field(ge=1)]] = None
    """Model vocabulary size (DeepSpeed only warns when it is not a multiple of 8)."""
    dataloader_drop_last: Bool = False
    """Drop the last incomplete batch in deepspeed_io data loaders."""
    use_data_before_expert_parallelism: Bool = False
    """Use the data before expert-parallel all-to-all (MoE)."""
    disable_python_gc: Optional[Bool | Annotated[Int, Field(ge=0)]] = Field(
        None, json_schema_extra=version_gate(added_in="0.19.0")
    )
    """Disable Python's garbage collector during training steps (0.19)."""
    disable_allgather: Bool = False
    """Dead key: parsed by DeepSpeed and never used."""
    datastates_ckpt: Optional[Any] = None
    """DataStates asynchronous checkpointing: any value other than false enables it."""

    # --- removed in DeepSpeed 0.19 (scalars; the removed blocks are sections below)
    sparse_gradients: Optional[Bool] = Field(
        None,
        json_schema_extra=version_gate(
            removed_in=REMOVED, instead="ZeRO++ quantized gradients (zero_quantized_gradients) to cut traffic"
        ),
    )
    """Sparse gradient all-reduce for embeddings (0.18 and older)."""
    graph_harvesting: Optional[Bool] = Field(
        None, json_schema_extra=version_gate(removed_in=REMOVED, instead="compile (engine.compile / DeepCompile)")
    )
    """CUDA-graph harvesting (0.18 and older)."""


@dataclass(frozen=True)
class SectionSpec:
    """A top-level key whose value is a section model, imported only when used."""

    key: str
    module: str
    type_name: str
    doc: str
    gate: dict = field(default_factory=dict)

    def section_type(self) -> Any:
        return getattr(importlib.import_module(self.module), self.type_name)

    def annotation(self) -> Any:
        section = self.section_type()
        if self.key == "zero_optimization":
            return Annotated[Optional[section], BeforeValidator(_legacy_zero_bool)]
        return Optional[section]

    def field_info(self) -> FieldInfo:
        return FieldInfo.from_annotated_attribute(
            self.annotation(), Field(None, description=self.doc, json_schema_extra=self.gate or None))


def _spec(key: str, module: str, type_name: str, doc: str, **gate: str) -> SectionSpec:
    return SectionSpec(key, f"dsx.schema.{module}", type_name, doc, version_gate(**gate) if gate else {})


# In the order `dsx config` emits them.
SECTIONS: dict[str, SectionSpec] = {s.key: s for s in (
    _spec("bf16", "bf16", "BF16Config",
          "bfloat16 mixed precision (DeepSpeed keeps fp32 master weights in the optimizer)."),
    _spec("bfloat16", "bf16", "BF16Config", "Older spelling of `bf16`; ignored by DeepSpeed when `bf16` is present."),
    _spec("fp16", "fp16", "FP16Config", "float16 mixed precision with loss scaling."),
    _spec("torch_autocast", "torch_autocast", "TorchAutocastConfig",
          "torch.autocast inside the engine's forward (an alternative to fp16/bf16 master-weight training)."),
    _spec("zero_optimization", "zero", "ZeroConfig",
          "ZeRO partitioning of optimizer states (1), gradients (2) and parameters (3), with offload. The legacy "
          "boolean form (true = stage 1) is accepted, as DeepSpeed does, and linted as deprecated."),
    _spec("optimizer", "optimizer", "OptimizerConfig",
          "The optimizer DeepSpeed builds (ignored when the script passes its own optimizer)."),
    _spec("scheduler", "scheduler", "SchedulerConfig",
          "Learning-rate schedule; dropped silently by DeepSpeed when there is no optimizer."),
    _spec("activation_checkpointing", "activation_checkpointing", "ActivationCheckpointingConfig",
          "Settings for deepspeed.checkpointing; applied only if the model calls deepspeed.checkpointing.configure."),
    _spec("pipeline", "pipeline", "PipelineConfig",
          "Pipeline-engine settings; used only when the model is a deepspeed.pipe.PipelineModule."),
    _spec("compile", "compile", "CompileConfig", "DeepCompile and engine.compile() options."),
    _spec("flops_profiler", "flops_profiler", "FlopsProfilerConfig",
          "DeepSpeed's FLOPs profiler (enabling it also turns on wall_clock_breakdown)."),
    _spec("comms_logger", "comms_logger", "CommsLoggerConfig", "Log collective calls with sizes and latencies."),
    _spec("tensorboard", "monitors", "TensorBoardConfig", "TensorBoard monitor."),
    _spec("wandb", "monitors", "WandbConfig", "Weights & Biases monitor."),
    _spec("csv_monitor", "monitors", "CSVMonitorConfig", "CSV monitor."),
    _spec("comet", "monitors", "CometConfig", "Comet monitor."),
    _spec("timers", "timers", "TimersConfig", "Throughput timer settings."),
    _spec("aio", "aio", "AioConfig", "Async I/O settings for NVMe offload (libaio)."),
    _spec("checkpoint", "checkpoint", "CheckpointConfig", "Checkpoint saving and loading options."),
    _spec("data_types", "data_types", "DataTypesConfig", "Dtypes of gradient accumulation, parameters and buffers."),
    _spec("tensor_parallel", "tensor_parallel", "TensorParallelConfig", "AutoTP tensor parallelism for training."),
    _spec("expert_parallel", "expert_parallel", "ExpertParallelConfig",
          "Automatic expert parallelism (AutoEP) for MoE models.", added_in="0.19.0"),
    _spec("hybrid_engine", "hybrid_engine", "HybridEngineConfig", "Hybrid engine (training + inference, RLHF)."),
    _spec("weight_quantization", "weight_quantization", "WeightQuantizationConfig", "Post-init weight quantization."),
    _spec("data_efficiency", "data_efficiency", "DataEfficiencyConfig",
          "Data-efficiency library: curriculum learning, dynamic batching, random-LTD."),
    _spec("autotuning", "autotuning", "AutotuningConfig",
          "DeepSpeed autotuner settings (used by `deepspeed --autotuning`)."),
    # removed in DeepSpeed 0.19 (valid for 0.18 targets only)
    _spec("sparse_attention", "sparse_attention", "SparseAttentionConfig",
          "Block-sparse attention layouts (DeepSpeed 0.18 and older, whose kernels never ran on torch >= 2; dsx run "
          "applies them with FlexAttention).",
          removed_in=REMOVED, instead="dsx run, which applies the block itself (FlexAttention block masks, "
          "dsx.sparse) and hands DeepSpeed the config without it; a script of yours that gives this file to "
          "DeepSpeed 0.19 must drop the block"),
    _spec("elasticity", "legacy", "ElasticityConfig", "Elastic training batch-size solver (0.18 and older).",
          removed_in=REMOVED,
          instead="set train_batch_size, train_micro_batch_size_per_gpu and gradient_accumulation_steps directly"),
    _spec("compression_training", "legacy", "CompressionTrainingConfig",
          "DeepSpeed Compression library (0.18 and older).", removed_in=REMOVED,
          instead="quantize after training (e.g. torchao); for communication compression use ZeRO++ "
          "(zero_quantized_weights / zero_quantized_gradients)"),
    _spec("nebula", "legacy", "NebulaConfig", "Nebula asynchronous checkpointing (Azure, 0.18 and older).",
          removed_in=REMOVED, instead="the `checkpoint` section's writer options"),
    _spec("amp", "legacy", "AmpConfig", "NVIDIA Apex AMP (0.18 and older).", removed_in=REMOVED,
          instead="bf16, fp16 or torch_autocast"),
    _spec("quantize_training", "legacy", "QuantizeTrainingConfig",
          "MoQ quantize-aware training (already ignored by 0.18.9).", removed_in=REMOVED,
          instead="ZeRO++ quantized weights/gradients"),
    _spec("eigenvalue", "legacy", "EigenvalueConfig",
          "Eigenvalue computation for MoQ (already ignored as a top-level block by 0.18.9).", removed_in=REMOVED,
          instead="nothing: the MoQ eigenvalue path is gone"),
    _spec("curriculum_learning", "legacy", "CurriculumLearningLegacyConfig",
          "Legacy top-level curriculum learning (0.18 and older).", removed_in=REMOVED,
          instead="data_efficiency.data_sampling.curriculum_learning"),
    _spec("progressive_layer_drop", "legacy", "ProgressiveLayerDropConfig", "Progressive layer drop (0.18 and older).",
          removed_in=REMOVED, instead="nothing: progressive layer drop is gone"),
)}


def top_level_keys() -> list[str]:
    """Every key DeepSpeed reads at the top level of a config (both spellings where aliased)."""
    return list(TopLevelConfig.model_fields) + list(SECTIONS)


def root_field(key: str) -> FieldInfo | None:
    """The FieldInfo for a top-level key (a section's is built on demand), or None for an unknown key."""
    if key in SECTIONS:
        return _section_field(key)
    return TopLevelConfig.model_fields.get(key)


@lru_cache(maxsize=None)
def _section_field(key: str) -> FieldInfo:
    return SECTIONS[key].field_info()


@lru_cache(maxsize=None)
def _adapter(key: str, variant: str | None) -> TypeAdapter:
    spec = SECTIONS[key]
    if variant is None:
        return TypeAdapter(spec.annotation())
    return TypeAdapter(Optional[_variant_type(spec.section_type(), variant)])


def _variant_tag(section_type: Any, value: Any) -> str | None:
    """For a discriminated union (optimizer, scheduler, sparse_attention): the tag `value` selects, else None."""
    if get_origin(section_type) is not Annotated:
        return None
    discriminator = next((m for m in get_args(section_type)[1:] if isinstance(m, Discriminator)), None)
    if discriminator is None or not callable(discriminator.discriminator):
        return None
    try:
        tag = discriminator.discriminator(value)
    except Exception:
        return None
    return tag if _variant_type(section_type, tag) is not None else None


def _variant_type(section_type: Any, tag: Any) -> Any:
    union, *metadata = get_args(section_type)
    others = tuple(m for m in metadata if not isinstance(m, Discriminator))
    for member in get_args(union):
        model, *marks = get_args(member) or (member,)
        if any(isinstance(mark, Tag) and mark.tag == tag for mark in marks):
            return Annotated.__class_getitem__((model, *others)) if others else model
    return None


def section_adapter(key: str, value: Any = None) -> TypeAdapter:
    """Validates (and dumps) one section's value, built the first time a config uses the section.

    For a discriminated union only the variant `value` selects is built (building all eleven optimizer types
    costs ~40 ms of cold start); an unknown type gets the full union, whose error names the known types.
    """
    return _adapter(key, _variant_tag(SECTIONS[key].section_type(), value))


@lru_cache(maxsize=None)
def full_model() -> type[Section]:
    """The complete DeepSpeedConfig model: top-level keys and every section (slow to build: ~0.3 s)."""
    sections = {key: (spec.annotation(), _section_field(key)) for key, spec in SECTIONS.items()}
    return create_model("DeepSpeedConfig", __base__=TopLevelConfig,
                        __doc__="A DeepSpeed JSON config (ds_config.json) as DeepSpeed 0.18.x / 0.19.x read it.",
                        **sections)
