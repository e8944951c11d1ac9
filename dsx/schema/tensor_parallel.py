"""AutoTP tensor parallelism for training (`tensor_parallel`): shards Linear layers across `autotp_size` ranks.

DeepSpeed parses it with a pydantic model (TPTrainingConfig, extra="forbid"): a misspelled key is REJECTED by
DeepSpeed too; the value combinations below are only checked inside deepspeed.initialize() when autotp_size > 1.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, get_args

from pydantic import BeforeValidator, model_validator
from typing_extensions import Annotated

from dsx.schema.base import Bool, Field, Int, Section, version_gate

__all__ = ["TPConfig", "TensorParallelConfig", "TPPresetModel", "TP_PRESET_MODELS"]

TPPresetModel = Literal["llama", "bloom", "chatglm", "mixtral", "deepseek_v2", "qwen2", "phi3"]
"""AutoTPPresets.get_preset's names (matched lower-cased; an unknown name silently means "no preset")."""

TP_PRESET_MODELS = get_args(TPPresetModel)


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


class TPConfig(Section):
    """`tensor_parallel.tp` (python field `tensor_parallel`): the inner tensor-parallel settings.

    DeepSpeed's model also has `mpu` and `tp_group`, Python objects the engine fills in; they have no JSON form.
    """

    tp_size: Annotated[Int, Field(ge=1)] = 1
    """Tensor-parallel degree; the engine sets it to autotp_size (a value other than 1 or autotp_size raises)."""
    tp_grain_size: Annotated[Int, Field(ge=1)] = 1
    """Granularity (in rows) of uneven MLP/lm_head splits; the AutoTP parser divides shapes by it."""


class TensorParallelConfig(Section):
    """AutoTP training settings; the section is inert unless autotp_size > 1.

    DeepSpeed's `dtype` (a torch.dtype, no JSON form: a string is rejected) and `injection_policy_tuple` (set by
    the engine for every layer it shards, overwriting any config value) are left out.
    """

    autotp_size: Annotated[Int, Field(ge=0)] = 0
    """Number of ranks each model is sharded across with AutoTP; 0 (or 1) disables AutoTP."""
    tp_overlap_comm: Bool = False
    """Overlap the AutoTP all-reduce with computation."""
    vocab_parallel_lm_head: Optional[Bool] = Field(None, json_schema_extra=version_gate(added_in="0.19.0"))
    """Shard the LM head over the vocabulary: true always (needs lm_head/embed_out), null per the HF tp_plan."""
    vocab_parallel_ce_backend: Literal["torch", "liger"] = Field(
        "torch", json_schema_extra=version_gate(added_in="0.19.0")
    )
    """Cross-entropy kernel for the vocabulary-parallel loss; "liger" needs a vocabulary-parallel LM head."""
    tensor_parallel: Optional[TPConfig] = Field(None, alias="tp")
    """Inner tensor-parallel settings (JSON key `tp`)."""
    partition_config: Optional[dict[str, Any]] = None
    """Custom AutoTP layer specs ({"use_default_specs", "layer_specs": [...]}), passed to AutoTPConfig.from_dict."""
    preset_model: Optional[Annotated[TPPresetModel, BeforeValidator(_lower)]] = None
    """Built-in AutoTP partitioning preset (DeepSpeed ignores unknown names silently; dsx rejects them)."""
    keep_module_on_host: Bool = False
    """Keep loaded checkpoint weights on the host instead of moving them to the device (avoids device OOM)."""
    replace_with_kernel_inject: Bool = Field(False, alias="kernel_inject")
    """Inject DeepSpeed inference kernels (JSON key `kernel_inject`)."""

    @model_validator(mode="after")
    def _check_autotp_combinations(self) -> "TensorParallelConfig":
        if self.autotp_size <= 1:
            return self
        if self.tensor_parallel is not None and self.tensor_parallel.tp_size not in (1, self.autotp_size):
            raise ValueError(
                f"tensor_parallel.tp.tp_size ({self.tensor_parallel.tp_size}) does not match "
                f"tensor_parallel.autotp_size ({self.autotp_size}); leave tp.tp_size unset or make them equal"
            )
        if self.vocab_parallel_ce_backend == "liger" and self.vocab_parallel_lm_head is False:
            raise ValueError(
                'tensor_parallel.vocab_parallel_ce_backend "liger" requires a vocabulary-parallel LM head, but '
                "vocab_parallel_lm_head is false; set it to true (or null) or use the \"torch\" backend"
            )
        return self
