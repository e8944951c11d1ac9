"""The `torch_autocast` section: torch.autocast around the engine's forward, instead of fp16/bf16 master weights.

DeepSpeed reads it with dict.get (IGNORED regime): a misspelled key such as `enable` silently leaves autocast off.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, get_args

from pydantic import AfterValidator, field_validator

from dsx.schema.base import Bool, Section

__all__ = ["TorchAutocastConfig", "AUTOCAST_DTYPES"]

# DeepSpeed's DtypeEnum spellings (runtime/config.py) of the two dtypes torch.autocast lowers to on GPUs.
AutocastDtype = Literal["torch.bfloat16", "bf16", "bfloat16", "torch.float16", "fp16", "float16", "half"]
AUTOCAST_DTYPES = get_args(AutocastDtype)

# DtypeEnum also maps these, but they are no lower-precision autocast dtype: fp32 makes autocast a no-op, int8 is no
# autocast dtype at all, and DeepSpeed still tags the safe modules' parameters with that communication dtype.
_NOT_AUTOCAST_DTYPES = ("torch.float32", "fp32", "float32", "float", "torch.int8", "int8")


def _check_module_name(name: str) -> str:
    """DeepSpeed imports each entry as `package.Class` (rsplit on the last dot) at initialize."""
    package, _, class_name = name.rpartition(".")
    if not package or not class_name:
        raise ValueError(
            f"'{name}' is not a fully qualified class name such as 'torch.nn.Linear' "
            "(DeepSpeed imports it at initialize and raises ValueError otherwise)"
        )
    return name


ModuleName = Annotated[str, AfterValidator(_check_module_name)]


class TorchAutocastConfig(Section):
    """torch.autocast settings applied inside the DeepSpeed engine's forward."""

    enabled: Bool = False
    """Run the engine's forward under torch.autocast."""
    dtype: Optional[AutocastDtype] = None
    """Autocast dtype in a DeepSpeed spelling (bf16/fp16 family); unset: torch.autocast's device default
    (float16 on CUDA; the docs' "bfloat16" default is wrong)."""
    lower_precision_safe_modules: Optional[list[ModuleName]] = None
    """Module classes whose parameters communicate in the autocast dtype, as 'package.Class' import paths
    (unset: torch.nn.Linear and Conv1d/2d/3d)."""

    @field_validator("dtype", mode="before")
    @classmethod
    def _reject_non_autocast_dtypes(cls, value: Any) -> Any:
        if value in _NOT_AUTOCAST_DTYPES:
            raise ValueError(
                f"torch_autocast.dtype {value!r} is accepted by DeepSpeed but is no lower-precision autocast dtype "
                "(fp32 makes autocast a no-op, int8 is no autocast dtype): use bf16 or fp16, or disable torch_autocast"
            )
        return value
