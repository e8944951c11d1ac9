"""Every optimizer param dsx accepts is taken by DeepSpeed: each backend is really built by deepspeed.initialize
(one CPU process, gloo) from a block that dsx validated, holding every key dsx's model accepts for that backend
(BACKEND_PARAMS) at a non-default value.

Backends that cannot be built on CPU are skipped there with the reason: FusedLion and FusedLamb are CUDA kernels
the CPU accelerator does not have. On a CUDA machine they run too (this file passed in full on an H100 with
torch 2.11+cu130 and DeepSpeed 0.19.8, TORCH_CUDA_ARCH_LIST=9.0). The CPU ops (cpu_adam, cpu_lion, cpu_adagrad, and
the CPU fused_adam) are JIT-built once into TORCH_EXTENSIONS_DIR (tests/conftest.py puts it under .cache/).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pydantic import TypeAdapter

from dsx.schema.optimizer import BACKEND_PARAMS, ZERO_SUPPORTED_OPTIMIZERS, OptimizerConfig, optimizer_kind

pytestmark = [pytest.mark.deepspeed, pytest.mark.usefixtures("single_process_group")]

torch = pytest.importorskip("torch")
deepspeed = pytest.importorskip("deepspeed")

OFFLOAD = {"stage": 1, "offload_optimizer": {"device": "cpu"}}
CUDA_ONLY = ("{} is a CUDA kernel: DeepSpeed's CPU accelerator has no op for it "
             "('This op had not been implemented on CPU backend')")


class TinyAttention(torch.nn.Module):
    """Linear layers named like an attention block, with a config giving the head count (for per_head_muon)."""

    def __init__(self):
        super().__init__()
        self.config = SimpleNamespace(num_attention_heads=2, num_key_value_heads=2, hidden_size=8, head_dim=4)
        self.q_proj = torch.nn.Linear(8, 8)
        self.o_proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.o_proj(self.q_proj(x))


def build(block: dict, zero: dict | None = None, model: torch.nn.Module | None = None):
    """Validate the block with dsx, then build the engine from what dsx emits; returns DeepSpeed's basic optimizer."""
    validated = TypeAdapter(OptimizerConfig).validate_python(block)
    emitted = validated.model_dump(exclude_unset=True)
    assert emitted["params"] == {k: tuple(v) if isinstance(v, list) else v for k, v in block["params"].items()}
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0.0, "optimizer": emitted}
    if zero:
        config["zero_optimization"] = zero
    engine, *_ = deepspeed.initialize(model=model or TinyAttention(), config=config)
    return engine.basic_optimizer


ADAM_COMMON = {"lr": 2e-3, "betas": [0.8, 0.9], "eps": 1e-7, "weight_decay": 0.1}

# backend -> (optimizer block with every key of BACKEND_PARAMS[backend], zero_optimization, why it cannot run on CPU)
CASES = {
    "FusedAdam": (
        {"type": "Adam", "params": {**ADAM_COMMON, "bias_correction": False, "amsgrad": False,
                                    "set_grad_none": False, "adam_w_mode": False, "torch_adam": False}},
        None, None),
    "DeepSpeedCPUAdam": (
        {"type": "Adam", "params": {**ADAM_COMMON, "bias_correction": False, "amsgrad": False,
                                    "fp32_optimizer_states": False, "adam_w_mode": False, "torch_adam": False}},
        OFFLOAD, None),
    "torch.optim.Adam": (
        {"type": "Adam", "params": {**ADAM_COMMON, "amsgrad": True, "torch_adam": True, "adam_w_mode": False,
                                    "foreach": False, "maximize": True, "capturable": True, "differentiable": False,
                                    "fused": True, "decoupled_weight_decay": True}},
        None, None),
    "torch.optim.AdamW": (
        {"type": "AdamW", "params": {**ADAM_COMMON, "amsgrad": True, "torch_adam": True, "adam_w_mode": True,
                                     "foreach": True, "maximize": True, "capturable": True, "differentiable": False,
                                     "fused": False}},
        OFFLOAD, None),
    "FusedLamb": (
        {"type": "Lamb", "params": {"lr": 2e-3, "bias_correction": False, "betas": [0.8, 0.9], "eps": 1e-7,
                                    "eps_inside_sqrt": True, "weight_decay": 0.1, "max_coeff": 5.0,
                                    "min_coeff": 0.02, "amsgrad": False}},
        None, CUDA_ONLY.format("FusedLamb")),
    "FusedLion": (
        {"type": "Lion", "params": {"lr": 2e-3, "betas": [0.8, 0.9], "weight_decay": 0.1, "set_grad_none": False}},
        None, CUDA_ONLY.format("FusedLion")),
    "DeepSpeedCPULion": (
        {"type": "Lion", "params": {"lr": 2e-3, "betas": [0.8, 0.9], "weight_decay": 0.1,
                                    "fp32_optimizer_states": False}},
        OFFLOAD, None),
    "torch.optim.Adagrad": (
        {"type": "Adagrad", "params": {"lr": 0.02, "eps": 1e-9, "weight_decay": 0.1, "lr_decay": 0.01,
                                       "initial_accumulator_value": 0.1, "foreach": True, "maximize": True,
                                       "differentiable": False, "fused": False}},
        None, None),
    "DeepSpeedCPUAdagrad": (
        {"type": "Adagrad", "params": {"lr": 0.02, "eps": 1e-9, "weight_decay": 0.1, "amsgrad": False,
                                       "fp32_optimizer_states": False}},
        OFFLOAD, None),
    "MuonWithAuxAdam": (
        {"type": "Muon", "params": {"lr": 0.01, "muon_lr": 0.03, "adam_lr": 0.002, "momentum": 0.9,
                                    "weight_decay": 0.1, "betas": [0.8, 0.9], "eps": 1e-9, "ns_method": "standard",
                                    "per_head_muon": True, "torch_adam": True, "adam_w_mode": False,
                                    "foreach": True}},
        None, None),
}
# fp32_optimizer_states reaches Muon's DeepSpeedCPUAdam half only under offload (without torch_adam).
MUON_OFFLOAD = {"type": "Muon", "params": {"fp32_optimizer_states": False}}


def test_cases_cover_every_backend_and_every_key():
    assert set(CASES) == set(BACKEND_PARAMS)
    for backend, (block, _, _) in CASES.items():
        keys = set(block["params"]) | (set(MUON_OFFLOAD["params"]) if backend == "MuonWithAuxAdam" else set())
        assert keys == BACKEND_PARAMS[backend], backend


def _check_values_landed(optimizer, params: dict):
    """Keys the optimizer records in its defaults (torch.optim.Optimizer.defaults) hold the values we gave."""
    recorded = {k: optimizer.defaults[k] for k in params if k in optimizer.defaults}
    assert recorded == {k: tuple(v) if isinstance(v, list) else v for k, v in params.items() if k in recorded}
    return recorded


@pytest.mark.parametrize("backend", sorted(set(CASES) - {"MuonWithAuxAdam"}))
def test_deepspeed_builds_the_backend_from_every_accepted_key(backend):
    block, zero, cpu_skip = CASES[backend]
    if cpu_skip and not torch.cuda.is_available():
        pytest.skip(cpu_skip)
    optimizer = build(block, zero)
    assert type(optimizer).__name__ == backend.split(".")[-1]
    if backend.startswith("torch.optim."):
        assert type(optimizer) is getattr(torch.optim, backend.split(".")[-1])
    recorded = _check_values_landed(optimizer, block["params"])
    assert {"lr", "weight_decay"} <= set(recorded)


def test_deepspeed_builds_muon_from_every_accepted_key():
    block = CASES["MuonWithAuxAdam"][0]
    optimizer = build(block, None, TinyAttention())
    assert type(optimizer).__name__ == "MuonWithAuxAdam"
    muon = next(g for g in optimizer.param_groups if g["use_muon"])
    adam = next(g for g in optimizer.param_groups if not g["use_muon"])
    assert (muon["lr"], muon["momentum"], muon["weight_decay"], muon["ns_method"]) == (0.03, 0.9, 0.1, "standard")
    assert (adam["lr"], adam["betas"], adam["eps"], adam["weight_decay"]) == (0.002, (0.8, 0.9), 1e-9, 0.1)
    assert type(optimizer.aux_optimizer) is torch.optim.Adam  # torch_adam with adam_w_mode false
    assert optimizer.aux_optimizer.defaults["foreach"] is True


def test_muon_defaults_are_deepspeeds():
    from dsx.schema.optimizer import MuonParams

    optimizer = build({"type": "Muon", "params": {"torch_adam": True}})
    muon = next(g for g in optimizer.param_groups if g["use_muon"])
    adam = next(g for g in optimizer.param_groups if not g["use_muon"])
    ours = MuonParams()
    assert (muon["lr"], adam["lr"]) == (0.02, 3e-4)  # why MuonParams.lr is None
    assert (muon["momentum"], muon["weight_decay"], muon["ns_method"]) == (ours.momentum, ours.weight_decay,
                                                                            ours.ns_method)
    assert (adam["betas"], adam["eps"], adam["weight_decay"]) == (ours.betas, ours.eps, ours.weight_decay)


def test_muon_fp32_optimizer_states_reaches_the_cpu_adam_half_under_offload():
    optimizer = build(MUON_OFFLOAD, OFFLOAD)
    assert type(optimizer.aux_optimizer).__name__ == "DeepSpeedCPUAdam"
    assert optimizer.aux_optimizer.fp32_optimizer_states is False


def test_deepspeed_builds_a_torch_optimizer_by_exact_name():
    optimizer = build({"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9, "nesterov": True}})
    assert type(optimizer) is torch.optim.SGD
    assert optimizer.defaults["nesterov"] is True


@pytest.mark.parametrize(
    "block, zero",
    [
        ({"type": "Adam", "params": {"torch_adam": True}}, {"stage": 1}),
        ({"type": "Adam", "params": {}}, {"stage": 1}),
        ({"type": "Lion", "params": {}}, OFFLOAD),
        ({"type": "Adagrad", "params": {}}, {"stage": 1}),
        ({"type": "Muon", "params": {"torch_adam": True}}, {"stage": 1}),
    ],
)
def test_zero_supported_kinds_run_under_zero_without_allow_untested(block, zero):
    assert optimizer_kind(block["type"]) in ZERO_SUPPORTED_OPTIMIZERS
    build(block, zero)


def test_a_kind_outside_the_zero_list_needs_zero_allow_untested_optimizer():
    assert optimizer_kind("SGD") not in ZERO_SUPPORTED_OPTIMIZERS
    with pytest.raises(AssertionError, match="zero_allow_untested_optimizer"):
        build({"type": "SGD", "params": {"lr": 0.1}}, {"stage": 1})


@pytest.mark.parametrize("type_name", ["OneBitAdam", "ZeroOneAdam", "OneBitLamb"])
def test_deepspeed_0_19_no_longer_builds_the_onebit_optimizers(type_name):
    # dsx accepts them (for 0.18 targets) and marks them removed in 0.19.0; 0.19.8 fails at initialize.
    with pytest.raises(AssertionError, match=f"{type_name} is not a supported DeepSpeed Optimizer"):
        build({"type": type_name, "params": {}})


def test_deepspeed_rejects_max_grad_norm_at_initialize():
    config = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "Adam", "params": {"max_grad_norm": 1.0}}}
    with pytest.raises(ValueError, match="'max_grad_norm' is not supported as an optimizer parameter"):
        deepspeed.initialize(model=TinyAttention(), config=config)
