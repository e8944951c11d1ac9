"""The `optimizer` block: which optimizer DeepSpeed builds, and the keyword arguments it is built with.

DeepSpeed reads this block with dict.get (IGNORED regime): a misspelled `type`/`params` key silently means no
optimizer or constructor defaults, and `params` goes to the constructor as **kwargs, so a wrong param fails only
inside deepspeed.initialize (or, for Muon, is silently ignored). dsx checks each type's params against its own model.

Validate a block on its own with `pydantic.TypeAdapter(OptimizerConfig).validate_python(block)`.

    kinds   the type names DeepSpeed knows, optimizer_kind / optimizer_backend, each backend's params, the removed
            1-bit types, the ZeRO-tested kinds and the wrong keys the linter names (data, no models)
    params  one params model per type (AdamParams ... OneBitLambParams) and the combinations their backends refuse
    blocks  one block model per type (AdamOptimizer ... TorchOptimizer) and OptimizerConfig, the union `type` picks

Every name below is re-exported here: `from dsx.schema.optimizer import OptimizerConfig, optimizer_kind` works.
"""

from dsx.schema.optimizer.blocks import (
    AdagradOptimizer, AdamOptimizer, AdamWOptimizer, LambOptimizer, LionOptimizer, MuonOptimizer, MupOptimizer,
    OneBitAdamOptimizer, OneBitLambOptimizer, OptimizerConfig, TorchOptimizer, ZeroOneAdamOptimizer,
)
from dsx.schema.optimizer.kinds import (
    BACKEND_PARAMS, DEEPSPEED_OPTIMIZER_NAMES, KNOWN_WRONG_PARAMS, REMOVED_OPTIMIZERS, TORCH_OPTIMIZER_NAMES,
    ZERO_SUPPORTED_OPTIMIZERS, TorchOptimizerName, optimizer_backend, optimizer_kind,
)
from dsx.schema.optimizer.params import (
    AdagradParams, AdamParams, AdamWParams, LambParams, LionParams, MuonParams, OneBitAdamParams, OneBitLambParams,
    ZeroOneAdamParams,
)

__all__ = [
    "OptimizerConfig",
    "AdamOptimizer",
    "AdamWOptimizer",
    "LambOptimizer",
    "LionOptimizer",
    "AdagradOptimizer",
    "MuonOptimizer",
    "OneBitAdamOptimizer",
    "ZeroOneAdamOptimizer",
    "OneBitLambOptimizer",
    "MupOptimizer",
    "TorchOptimizer",
    "AdamParams",
    "AdamWParams",
    "LambParams",
    "LionParams",
    "AdagradParams",
    "MuonParams",
    "OneBitAdamParams",
    "ZeroOneAdamParams",
    "OneBitLambParams",
    "optimizer_kind",
    "optimizer_backend",
    "DEEPSPEED_OPTIMIZER_NAMES",
    "TORCH_OPTIMIZER_NAMES",
    "ZERO_SUPPORTED_OPTIMIZERS",
    "REMOVED_OPTIMIZERS",
    "KNOWN_WRONG_PARAMS",
    "BACKEND_PARAMS",
]
