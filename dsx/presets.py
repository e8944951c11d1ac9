"""Named starting points for `dsx config --preset NAME`: one registry, each entry a ConfigRequest change.

ds_configs/<name>.json holds each preset as generated (tests fail when they drift). Presets for features
DeepSpeed 0.19 removed pin their target to 0.18.9.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LEGACY_TARGET = "0.18.9"


@dataclass(frozen=True)
class Preset:
    name: str
    summary: str
    changes: dict[str, Any] = field(default_factory=dict)
    target: str | None = None
    """The DeepSpeed version the preset needs, when it is not any supported one."""

    @property
    def file(self) -> str:
        """Its path under ds_configs/: presets that need another DeepSpeed sit in a folder named after it, so
        `dsx validate ds_configs/*.json` is clean for the installed one and the folder says which to name
        (`dsx validate --target-deepspeed 0.18.9 ds_configs/deepspeed-0.18.9/*.json`)."""
        return f"deepspeed-{self.target}/{self.name}.json" if self.target else f"{self.name}.json"


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("zero1", "ZeRO-1: optimizer states partitioned; the cheapest step up from plain data parallel",
           {"zero": 1}),
    Preset("zero2", "ZeRO-2: optimizer states and gradients partitioned; the usual default for models that "
                    "fit on one GPU in bf16", {"zero": 2}),
    Preset("zero2-offload", "ZeRO-2 with the optimizer (fp32 states + step) on the CPU: frees ~12 bytes/param of "
                            "GPU memory for a slower step", {"zero": 2, "offload": "cpu"}),
    Preset("zero3", "ZeRO-3: parameters partitioned too; models larger than one GPU", {"zero": 3}),
    Preset("zero3-offload", "ZeRO-3 with optimizer and parameters on the CPU: the largest models on few GPUs",
           {"zero": 3, "offload": "cpu", "offload_params": "cpu"}),
    Preset("zero3-offload-nvme", "ZeRO-3 with the optimizer on NVMe and parameters on the CPU",
           {"zero": 3, "offload": "nvme", "offload_params": "cpu", "nvme_path": "/local_nvme"}),
    Preset("zero-infinity", "ZeRO-Infinity: optimizer and parameters on NVMe, with larger I/O queues",
           {"zero": 3, "offload": "nvme", "offload_params": "nvme", "nvme_path": "/local_nvme",
            "sets": (("aio.queue_depth", 16), ("aio.intra_op_parallelism", 4),
                     ("zero_optimization.offload_param.buffer_count", 8))}),
    Preset("onebit-adam", "1-bit Adam (DeepSpeed 0.18.x only): compressed all-reduce after a warm-up; fp16, "
                          "no ZeRO", {"zero": 0, "precision": "fp16", "onebit": "adam", "micro_batch": 16},
           target=LEGACY_TARGET),
    Preset("sparse-long-context", "Block-sparse (BSLongformer) attention layout for long sequences (the block is "
                                  "DeepSpeed 0.18's; dsx run applies it with FlexAttention on any DeepSpeed)",
           {"zero": 2, "precision": "fp16", "sparse_attention": "bslongformer", "micro_batch": 1},
           target=LEGACY_TARGET),
    Preset("pipeline", "Two pipeline stages with ZeRO-1 over 8 GPUs (pass num_stages=2 to PipelineModule)",
           {"zero": 1, "pipeline_stages": 2, "world_size": 8, "micro_batch": 4, "grad_accum": 8}),
)}
