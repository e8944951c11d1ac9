"""The whole DeepSpeed JSON config: one field per top-level key, each section its own model.

Field order here is the key order `dsx config` emits. Defaults mirror DeepSpeed 0.19.8; a default of None
means "absent" (DeepSpeed's own default applies, or the default changed between releases and dsx always
writes the key explicitly).
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BeforeValidator, Field
from typing_extensions import Annotated

from dsx.schema.activation_checkpointing import ActivationCheckpointingConfig
from dsx.schema.aio import AioConfig
from dsx.schema.autotuning import AutotuningConfig
from dsx.schema.base import Bool, Float, Int, Section, version_gate
from dsx.schema.bf16 import BF16Config
from dsx.schema.checkpoint import CheckpointConfig
from dsx.schema.comms_logger import CommsLoggerConfig
from dsx.schema.compile import CompileConfig
from dsx.schema.data_efficiency import DataEfficiencyConfig
from dsx.schema.data_types import DataTypesConfig
from dsx.schema.expert_parallel import ExpertParallelConfig
from dsx.schema.flops_profiler import FlopsProfilerConfig
from dsx.schema.fp16 import FP16Config
from dsx.schema.hybrid_engine import HybridEngineConfig
from dsx.schema.legacy import (
    AmpConfig,
    CompressionTrainingConfig,
    CurriculumLearningLegacyConfig,
    EigenvalueConfig,
    ElasticityConfig,
    NebulaConfig,
    ProgressiveLayerDropConfig,
    QuantizeTrainingConfig,
)
from dsx.schema.monitors import CometConfig, CSVMonitorConfig, TensorBoardConfig, WandbConfig
from dsx.schema.optimizer import OptimizerConfig
from dsx.schema.pipeline import PipelineConfig
from dsx.schema.scheduler import SchedulerConfig
from dsx.schema.sparse_attention import SparseAttentionConfig
from dsx.schema.tensor_parallel import TensorParallelConfig
from dsx.schema.timers import TimersConfig
from dsx.schema.torch_autocast import TorchAutocastConfig
from dsx.schema.weight_quantization import WeightQuantizationConfig
from dsx.schema.zero import ZeroConfig

DTYPE_NAMES = Literal["fp16", "bf16", "fp32"]


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _legacy_zero_bool(value: Any) -> Any:
    return {"stage": 1 if value else 0} if isinstance(value, bool) else value


REMOVED = "0.19.0"
_ISSUE = "(removed in DeepSpeed 0.19, see deepspeedai/DeepSpeed#8489)"


class DeepSpeedConfig(Section):
    """A DeepSpeed JSON config (ds_config.json) as DeepSpeed 0.18.x / 0.19.x read it."""

    # --- batch sizes: train_batch_size = micro_batch x gradient_accumulation x data-parallel world size
    train_batch_size: Optional[Annotated[Int, Field(gt=0)]] = None
    """Global batch per optimizer step: micro-batch x gradient accumulation x data-parallel world size."""
    train_micro_batch_size_per_gpu: Optional[Annotated[Int, Field(gt=0)]] = None
    """Samples each data-parallel rank processes per forward/backward."""
    gradient_accumulation_steps: Optional[Annotated[Int, Field(gt=0)]] = None
    """Micro-batches accumulated before each optimizer step."""

    # --- precision
    bf16: Optional[BF16Config] = None
    """bfloat16 mixed precision (DeepSpeed keeps fp32 master weights in the optimizer)."""
    bfloat16: Optional[BF16Config] = None
    """Older spelling of `bf16`; ignored by DeepSpeed when `bf16` is also present."""
    fp16: Optional[FP16Config] = None
    """float16 mixed precision with loss scaling."""
    torch_autocast: Optional[TorchAutocastConfig] = None
    """torch.autocast inside the engine's forward (an alternative to fp16/bf16 master-weight training)."""

    # --- ZeRO
    zero_optimization: Annotated[Optional[ZeroConfig], BeforeValidator(_legacy_zero_bool)] = None
    """ZeRO partitioning of optimizer states (1), gradients (2) and parameters (3), with offload. The legacy
    boolean form (true = stage 1) is accepted, as DeepSpeed does, and linted as deprecated."""
    zero_allow_untested_optimizer: Bool = False
    """Let ZeRO run with an optimizer outside DeepSpeed's tested list (e.g. Lamb, torch.optim.SGD)."""
    zero_force_ds_cpu_optimizer: Bool = True
    """With offload, require DeepSpeed's CPU optimizer for a client optimizer."""

    # --- optimizer and schedule
    optimizer: Optional[OptimizerConfig] = None
    """The optimizer DeepSpeed builds (ignored when the script passes its own optimizer)."""
    scheduler: Optional[SchedulerConfig] = None
    """Learning-rate schedule; dropped silently by DeepSpeed when there is no optimizer."""
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

    # --- activation checkpointing, pipeline, compile
    activation_checkpointing: Optional[ActivationCheckpointingConfig] = None
    """Settings for deepspeed.checkpointing; applied only if the model calls deepspeed.checkpointing.configure."""
    pipeline: Optional[PipelineConfig] = None
    """Pipeline-engine settings; used only when the model is a deepspeed.pipe.PipelineModule."""
    compile: Optional[CompileConfig] = None
    """DeepCompile and engine.compile() options."""

    # --- logging and profiling
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
    flops_profiler: Optional[FlopsProfilerConfig] = None
    """DeepSpeed's FLOPs profiler (enabling it also turns on wall_clock_breakdown)."""
    comms_logger: Optional[CommsLoggerConfig] = None
    """Log collective calls with sizes and latencies."""
    tensorboard: Optional[TensorBoardConfig] = None
    """TensorBoard monitor."""
    wandb: Optional[WandbConfig] = None
    """Weights & Biases monitor."""
    csv_monitor: Optional[CSVMonitorConfig] = None
    """CSV monitor."""
    comet: Optional[CometConfig] = None
    """Comet monitor."""
    timers: Optional[TimersConfig] = None
    """Throughput timer settings."""

    # --- I/O and checkpoints
    aio: Optional[AioConfig] = None
    """Async I/O settings for NVMe offload (libaio)."""
    checkpoint: Optional[CheckpointConfig] = None
    """Checkpoint saving and loading options."""
    data_types: Optional[DataTypesConfig] = None
    """Dtypes of gradient accumulation, parameters and buffers."""

    # --- parallelism and other engines
    tensor_parallel: Optional[TensorParallelConfig] = None
    """AutoTP tensor parallelism for training."""
    expert_parallel: Optional[ExpertParallelConfig] = Field(None, json_schema_extra=version_gate(added_in="0.19.0"))
    """Automatic expert parallelism (AutoEP) for MoE models."""
    sequence_parallel_size: Optional[Annotated[Int, Field(ge=1)]] = None
    """Ulysses sequence-parallel degree (must divide the world size)."""
    data_parallel_size: Optional[Annotated[Int, Field(ge=1)]] = None
    """Data-parallel degree when a device mesh is built with sequence_parallel_size."""
    hybrid_engine: Optional[HybridEngineConfig] = None
    """Hybrid engine (training + inference, RLHF)."""
    weight_quantization: Optional[WeightQuantizationConfig] = None
    """Post-init weight quantization."""
    data_efficiency: Optional[DataEfficiencyConfig] = None
    """Data-efficiency library: curriculum learning, dynamic batching, random-LTD."""
    autotuning: Optional[AutotuningConfig] = None
    """DeepSpeed autotuner settings (used by `deepspeed --autotuning`)."""

    # --- misc
    vocabulary_size: Optional[Annotated[Int, Field(ge=1)]] = None
    """Model vocabulary size (DeepSpeed only warns when it is not a multiple of 8)."""
    dataloader_drop_last: Bool = False
    """Drop the last incomplete batch in deepspeed_io data loaders."""
    use_data_before_expert_parallelism: Bool = False
    """Use the data before expert-parallel all-to-all (MoE)."""
    disable_python_gc: Optional[Union[Bool, Annotated[Int, Field(ge=0)]]] = Field(
        None, json_schema_extra=version_gate(added_in="0.19.0")
    )
    """Disable Python's garbage collector during training steps (0.19)."""
    disable_allgather: Bool = False
    """Dead key: parsed by DeepSpeed and never used."""
    datastates_ckpt: Optional[Any] = None
    """DataStates asynchronous checkpointing: any value other than false enables it."""

    # --- removed in DeepSpeed 0.19 (valid for 0.18 targets only)
    sparse_attention: Optional[SparseAttentionConfig] = Field(
        None,
        json_schema_extra=version_gate(
            removed_in=REMOVED,
            instead="dsx's own sparse attention runtime (FlexAttention block masks, coming in dsx run) or "
            "dense flash/SDPA attention",
        ),
    )
    """Block-sparse attention layouts (DeepSpeed 0.18 and older; never ran on torch >= 2)."""
    elasticity: Optional[ElasticityConfig] = Field(
        None,
        json_schema_extra=version_gate(
            removed_in=REMOVED,
            instead="set train_batch_size, train_micro_batch_size_per_gpu and gradient_accumulation_steps directly",
        ),
    )
    """Elastic training batch-size solver (0.18 and older)."""
    compression_training: Optional[CompressionTrainingConfig] = Field(
        None,
        json_schema_extra=version_gate(
            removed_in=REMOVED,
            instead="quantize after training (e.g. torchao); for communication compression use ZeRO++ "
            "(zero_quantized_weights / zero_quantized_gradients)",
        ),
    )
    """DeepSpeed Compression library (0.18 and older)."""
    nebula: Optional[NebulaConfig] = Field(
        None, json_schema_extra=version_gate(removed_in=REMOVED, instead="the `checkpoint` section's writer options")
    )
    """Nebula asynchronous checkpointing (Azure, 0.18 and older)."""
    amp: Optional[AmpConfig] = Field(
        None, json_schema_extra=version_gate(removed_in=REMOVED, instead="bf16, fp16 or torch_autocast")
    )
    """NVIDIA Apex AMP (0.18 and older)."""
    quantize_training: Optional[QuantizeTrainingConfig] = Field(
        None, json_schema_extra=version_gate(removed_in=REMOVED, instead="ZeRO++ quantized weights/gradients")
    )
    """MoQ quantize-aware training (already ignored by 0.18.9)."""
    sparse_gradients: Optional[Bool] = Field(
        None,
        json_schema_extra=version_gate(
            removed_in=REMOVED, instead="ZeRO++ quantized gradients (zero_quantized_gradients) to cut traffic"
        ),
    )
    """Sparse gradient all-reduce for embeddings (0.18 and older)."""
    eigenvalue: Optional[EigenvalueConfig] = Field(
        None, json_schema_extra=version_gate(removed_in=REMOVED, instead="nothing: the MoQ eigenvalue path is gone")
    )
    """Eigenvalue computation for MoQ (already ignored as a top-level block by 0.18.9)."""
    graph_harvesting: Optional[Bool] = Field(
        None, json_schema_extra=version_gate(removed_in=REMOVED, instead="compile (engine.compile / DeepCompile)")
    )
    """CUDA-graph harvesting (0.18 and older)."""
    curriculum_learning: Optional[CurriculumLearningLegacyConfig] = Field(
        None,
        json_schema_extra=version_gate(
            removed_in=REMOVED, instead="data_efficiency.data_sampling.curriculum_learning"
        ),
    )
    """Legacy top-level curriculum learning (0.18 and older)."""
    progressive_layer_drop: Optional[ProgressiveLayerDropConfig] = Field(
        None, json_schema_extra=version_gate(removed_in=REMOVED, instead="nothing: progressive layer drop is gone")
    )
    """Progressive layer drop (0.18 and older)."""


# The top-level keys a reader must always see in emitted JSON, in this order.
ALWAYS_EMITTED = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
