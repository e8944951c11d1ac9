"""optimizer: type resolution, per-type params models, in-section rules, and pins against DeepSpeed's source.

The real construction of every backend through deepspeed.initialize is in test_optimizer_deepspeed.py.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import json
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from dsx.schema.docs import field_docstring
from dsx.schema.optimizer import (
    BACKEND_PARAMS,
    DEEPSPEED_OPTIMIZER_NAMES,
    KNOWN_WRONG_PARAMS,
    REMOVED_OPTIMIZERS,
    TORCH_OPTIMIZER_NAMES,
    ZERO_SUPPORTED_OPTIMIZERS,
    AdagradOptimizer,
    AdagradParams,
    AdamOptimizer,
    AdamParams,
    AdamWOptimizer,
    AdamWParams,
    LambOptimizer,
    LambParams,
    LionOptimizer,
    LionParams,
    MuonOptimizer,
    MuonParams,
    MupOptimizer,
    OneBitAdamOptimizer,
    OneBitAdamParams,
    OneBitLambOptimizer,
    OneBitLambParams,
    OptimizerConfig,
    TorchOptimizer,
    ZeroOneAdamOptimizer,
    ZeroOneAdamParams,
    optimizer_backend,
    optimizer_kind,
)
from tests.deepspeed_parser import require

ADAPTER = TypeAdapter(OptimizerConfig)


def validate(block):
    return ADAPTER.validate_python(block)


# ---------------------------------------------------------------------------------------------------------- types


@pytest.mark.parametrize(
    "spelling, model",
    [
        ("Adam", AdamOptimizer),
        ("adam", AdamOptimizer),
        ("ADAM", AdamOptimizer),
        ("AdamW", AdamWOptimizer),
        ("adamw", AdamWOptimizer),
        ("Lamb", LambOptimizer),
        ("lion", LionOptimizer),
        ("Adagrad", AdagradOptimizer),
        ("Muon", MuonOptimizer),
        ("OneBitAdam", OneBitAdamOptimizer),
        ("zerooneadam", ZeroOneAdamOptimizer),
        ("ONEBITLAMB", OneBitLambOptimizer),
        ("MuAdam", MupOptimizer),
        ("musgd", MupOptimizer),
        ("SGD", TorchOptimizer),
        ("Adafactor", TorchOptimizer),
    ],
)
def test_type_selects_its_own_model(spelling, model):
    assert type(validate({"type": spelling})) is model


@pytest.mark.parametrize(
    "name, kind",
    [
        ("Adam", "adam"),
        ("ADAMW", "adamw"),
        ("Lamb", "lamb"),
        ("Lion", "lion"),
        ("adagrad", "adagrad"),
        ("Muon", "muon"),
        ("MuAdamW", "muadamw"),
        ("OneBitAdam", "onebitadam"),
        ("ZeroOneAdam", "zerooneadam"),
        ("OneBitLamb", "onebitlamb"),
        ("SGD", "torch:SGD"),
        ("RMSprop", "torch:RMSprop"),
        ("sgd", None),
        ("adamm", None),
        ("Optimizer", None),
        (None, None),
        (3, None),
    ],
)
def test_optimizer_kind(name, kind):
    assert optimizer_kind(name) == kind


def test_unknown_type_is_one_error_listing_the_accepted_names():
    with pytest.raises(ValidationError) as info:
        validate({"type": "adamm", "params": {"lr": 1e-4}})
    assert info.value.error_count() == 1
    assert "unknown optimizer type 'adamm'" in str(info.value)
    assert "Adam, AdamW, Lamb, Lion, Adagrad, Muon" in str(info.value)
    assert "SGD, RMSprop" in str(info.value)


def test_torch_names_are_case_sensitive_with_a_hint():
    with pytest.raises(ValidationError, match=r"unknown optimizer type 'sgd'.*did you mean 'SGD'\?"):
        validate({"type": "sgd"})


def test_missing_type_is_rejected():
    with pytest.raises(ValidationError, match="optimizer.type is missing: without it DeepSpeed builds no optimizer"):
        validate({"params": {"lr": 1e-4}})


def test_misspelled_type_key_is_rejected():
    with pytest.raises(ValidationError, match="optimizer.type is missing"):
        validate({"tpye": "Adam"})


def test_non_object_block_is_rejected():
    with pytest.raises(ValidationError, match="optimizer must be an object with a known `type`"):
        validate("Adam")


def test_misspelled_block_key_is_rejected():
    with pytest.raises(ValidationError, match=r"adam\.parmas\n  Extra inputs are not permitted"):
        validate({"type": "Adam", "parmas": {"lr": 1e-4}})


def test_variant_model_rejects_a_type_of_another_variant():
    with pytest.raises(ValidationError, match=r"String should match pattern '\^\(\[Aa\]\[Dd\]\[Aa\]\[Mm\]\)\$'"):
        AdamOptimizer(type="Lion")


def test_the_variants_json_schemas_are_mutually_exclusive():
    jsonschema = pytest.importorskip("jsonschema")
    schema = ADAPTER.json_schema()
    for block in [{"type": "OneBitAdam", "params": {"freeze_step": 10}}, {"type": "ADAM"}, {"type": "musgd"},
                  {"type": "SGD", "params": {"lr": 0.1}}]:
        jsonschema.validate(block, schema)  # oneOf: exactly one variant matches
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"type": "sgd"}, schema)


# --------------------------------------------------------------------------------------------------------- params


@pytest.mark.parametrize("type_name", ["Adam", "AdamW", "Lamb", "Lion", "Adagrad", "Muon", "OneBitAdam"])
def test_max_grad_norm_is_rejected_as_an_unknown_param(type_name):
    with pytest.raises(ValidationError, match=r"params\.max_grad_norm\n  Extra inputs are not permitted"):
        validate({"type": type_name, "params": {"max_grad_norm": 1.0}})


def test_known_wrong_params_name_the_fix():
    assert "gradient_clipping" in KNOWN_WRONG_PARAMS["max_grad_norm"]
    assert "var_freeze_step" in KNOWN_WRONG_PARAMS["freeze_step"]
    assert "adam_w_mode" in KNOWN_WRONG_PARAMS["adamw_mode"]


def test_misspelled_param_is_rejected():
    with pytest.raises(ValidationError, match=r"adam\.params\.lrr\n  Extra inputs are not permitted"):
        validate({"type": "Adam", "params": {"lrr": 1e-4}})


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match=r"params\.torch_adam\n  Input should be a valid boolean"):
        validate({"type": "Adam", "params": {"torch_adam": "false"}})


def test_lr_string_is_rejected():
    with pytest.raises(ValidationError, match=r"params\.lr\n  Input should be a valid number"):
        validate({"type": "Adam", "params": {"lr": "1e-4"}})


def test_betas_is_a_pair_of_floats():
    block = validate({"type": "AdamW", "params": {"betas": [0.9, 0.95]}})
    assert block.params.betas == (0.9, 0.95)
    assert json.loads(json.dumps(block.model_dump(exclude_defaults=True))) == {
        "type": "AdamW",
        "params": {"betas": [0.9, 0.95]},
    }


@pytest.mark.parametrize(
    "betas, message",
    [
        ([0.9, 0.95, 0.99], "Tuple should have at most 2 items"),
        ([0.9], "Field required"),
        (["0.9", "0.95"], "Input should be a valid number"),
        ([0.9, 1.0], "Input should be less than 1"),
        (0.9, "Input should be a valid tuple"),
    ],
)
def test_bad_betas_are_rejected(betas, message):
    with pytest.raises(ValidationError, match=message):
        validate({"type": "Adam", "params": {"betas": betas}})


def test_adam_weight_decay_is_unset_by_default_so_zero_is_emitted():
    # torch AdamW defaults to 0.01, FusedAdam/DeepSpeedCPUAdam to 0: an explicit 0 must never be dropped.
    assert AdamParams.model_fields["weight_decay"].default is None
    block = validate({"type": "AdamW", "params": {"weight_decay": 0}})
    assert block.model_dump(exclude_defaults=True) == {"type": "AdamW", "params": {"weight_decay": 0.0}}


@pytest.mark.parametrize("key, value", [("foreach", True), ("maximize", False), ("fused", True), ("capturable", True)])
def test_torch_adam_arguments_need_torch_adam(key, value):
    with pytest.raises(
        ValidationError,
        match=rf"optimizer\.params {key}: torch\.optim\.Adam/AdamW arguments, set torch_adam: true or remove them",
    ):
        validate({"type": "Adam", "params": {key: value}})


def test_torch_adam_arguments_are_accepted_with_torch_adam():
    block = validate(
        {"type": "AdamW", "params": {"torch_adam": True, "foreach": True, "maximize": True, "amsgrad": True}}
    )
    assert block.params.foreach is True


@pytest.mark.parametrize("key, value", [("bias_correction", True), ("set_grad_none", False)])
def test_fused_and_cpu_adam_arguments_are_rejected_with_torch_adam(key, value):
    with pytest.raises(ValidationError, match=rf"optimizer\.params {key}: not with torch_adam: true"):
        validate({"type": "AdamW", "params": {"torch_adam": True, key: value}})


def test_fp32_optimizer_states_is_rejected_with_torch_adam():
    with pytest.raises(ValidationError, match="fp32_optimizer_states only affects DeepSpeedCPUAdam"):
        validate({"type": "Adam", "params": {"torch_adam": True, "fp32_optimizer_states": False}})


def test_amsgrad_needs_torch_adam():
    with pytest.raises(ValidationError, match="optimizer.params.amsgrad: true needs torch_adam: true"):
        validate({"type": "Adam", "params": {"amsgrad": True}})


@pytest.mark.parametrize(
    "block",
    [
        {"type": "Adam", "params": {"torch_adam": True, "differentiable": True}},
        {"type": "Adagrad", "params": {"differentiable": True}},
    ],
)
def test_differentiable_true_is_rejected(block):
    with pytest.raises(ValidationError, match="differentiable: true cannot train under DeepSpeed"):
        validate(block)


def test_decoupled_weight_decay_needs_adam_w_mode_false():
    with pytest.raises(ValidationError, match="with adam_w_mode true DeepSpeed builds torch.optim.AdamW"):
        validate({"type": "Adam", "params": {"torch_adam": True, "decoupled_weight_decay": True}})
    block = validate(
        {"type": "Adam", "params": {"torch_adam": True, "adam_w_mode": False, "decoupled_weight_decay": True}}
    )
    assert block.params.decoupled_weight_decay is True


def test_adamw_has_no_decoupled_weight_decay():
    with pytest.raises(ValidationError, match=r"params\.decoupled_weight_decay\n  Extra inputs are not permitted"):
        validate({"type": "AdamW", "params": {"torch_adam": True, "decoupled_weight_decay": True}})


def test_adamw_rejects_adam_w_mode_false():
    with pytest.raises(ValidationError, match="adam_w_mode: false is ignored for type AdamW"):
        validate({"type": "AdamW", "params": {"adam_w_mode": False}})


def test_adam_defaults_to_adamw_semantics():
    assert AdamParams.model_fields["adam_w_mode"].default is True
    assert "runs AdamW" in field_docstring(AdamParams, "adam_w_mode")


def test_lamb_rejects_amsgrad():
    with pytest.raises(ValidationError, match=r"amsgrad: true is not supported by Lamb \(FusedLamb raises"):
        validate({"type": "Lamb", "params": {"amsgrad": True}})


def test_adagrad_rejects_amsgrad_true():
    with pytest.raises(ValidationError, match="amsgrad: true has no effect for Adagrad"):
        validate({"type": "Adagrad", "params": {"amsgrad": True}})


def test_lion_accepts_the_union_of_fused_and_cpu_params():
    block = validate({"type": "Lion", "params": {"set_grad_none": False, "fp32_optimizer_states": False}})
    assert (block.params.set_grad_none, block.params.fp32_optimizer_states) == (False, False)
    assert "FusedLion only" in field_docstring(LionParams, "set_grad_none")
    assert "DeepSpeedCPULion only" in field_docstring(LionParams, "fp32_optimizer_states")


@pytest.mark.parametrize("model", [AdamParams, AdamWParams, LionParams, AdagradParams, MuonParams])
def test_every_backend_specific_field_says_where_it_applies(model):
    backends = _backends_of(model)
    for name, info in model.model_fields.items():
        if not all(name in BACKEND_PARAMS[b] for b in backends):
            assert "only" in field_docstring(model, name), f"{model.__name__}.{name}: where does it apply?"


def test_muon_ns_method_is_gram_or_standard():
    assert validate({"type": "Muon", "params": {"ns_method": "standard"}}).params.ns_method == "standard"
    with pytest.raises(ValidationError, match=r"params\.ns_method\n  Input should be 'gram' or 'standard'"):
        validate({"type": "Muon", "params": {"ns_method": "newton"}})


def test_muon_rejects_unknown_keys_that_deepspeed_would_ignore():
    with pytest.raises(ValidationError, match=r"muon\.params\.momentumm\n  Extra inputs are not permitted"):
        validate({"type": "Muon", "params": {"momentumm": 0.9}})


def test_muon_foreach_needs_torch_adam():
    with pytest.raises(ValidationError, match="optimizer.params.foreach only applies with torch_adam: true"):
        validate({"type": "Muon", "params": {"foreach": True}})


def test_muon_fp32_optimizer_states_is_rejected_with_torch_adam():
    with pytest.raises(ValidationError, match="fp32_optimizer_states only affects the DeepSpeedCPUAdam half"):
        validate({"type": "Muon", "params": {"torch_adam": True, "fp32_optimizer_states": False}})


def test_muon_keys_new_in_0_19_are_version_gated():
    gated = {name for name, info in MuonParams.model_fields.items() if info.json_schema_extra}
    assert gated == {"ns_method", "per_head_muon", "torch_adam", "adam_w_mode", "fp32_optimizer_states", "foreach"}
    assert MuonParams.model_fields["ns_method"].json_schema_extra == {"dsx_added_in": "0.19.0"}


def test_muon_lr_is_unset_because_the_halves_have_different_defaults():
    assert MuonParams.model_fields["lr"].default is None
    assert "0.02 for Muon, 3e-4 for Adam" in field_docstring(MuonParams, "lr")


def test_zero_one_adam_takes_var_freeze_step_not_freeze_step():
    assert validate({"type": "ZeroOneAdam", "params": {"var_freeze_step": 1000}}).params.var_freeze_step == 1000
    with pytest.raises(ValidationError, match=r"zerooneadam\.params\.freeze_step\n  Extra inputs are not permitted"):
        validate({"type": "ZeroOneAdam", "params": {"freeze_step": 1000}})


def test_onebit_adam_takes_freeze_step():
    assert validate({"type": "OneBitAdam", "params": {"freeze_step": 400}}).params.freeze_step == 400


def test_onebit_comm_backend_is_checked():
    with pytest.raises(ValidationError, match="Input should be 'nccl', 'mpi', 'hccl' or 'compressed'"):
        validate({"type": "OneBitLamb", "params": {"comm_backend_name": "gloo"}})


@pytest.mark.parametrize(
    "kind, model", [("onebitadam", OneBitAdamOptimizer), ("zerooneadam", ZeroOneAdamOptimizer),
                    ("onebitlamb", OneBitLambOptimizer)]
)
def test_onebit_types_carry_the_removal_gate(kind, model):
    gate = {"dsx_removed_in": "0.19.0", "dsx_instead": REMOVED_OPTIMIZERS[kind]["dsx_instead"]}
    assert REMOVED_OPTIMIZERS[kind] == gate
    assert "zero_quantized_gradients" in gate["dsx_instead"]
    assert model.model_fields["type"].json_schema_extra == gate


def test_only_the_onebit_types_are_removed():
    assert set(REMOVED_OPTIMIZERS) == {"onebitadam", "zerooneadam", "onebitlamb"}


def test_torch_and_mup_params_are_open_dicts():
    sgd = validate({"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9, "nesterov": True}})
    assert sgd.params == {"lr": 0.1, "momentum": 0.9, "nesterov": True}
    assert "dsx cannot check these" in field_docstring(TorchOptimizer, "params")
    assert validate({"type": "MuAdam", "params": {"anything": 1}}).params == {"anything": 1}


def test_legacy_fusion_is_a_block_key():
    block = validate({"type": "Adam", "legacy_fusion": True})
    assert block.model_dump(exclude_defaults=True) == {"type": "Adam", "legacy_fusion": True}


def test_dump_keeps_the_users_type_spelling_and_only_non_defaults():
    block = validate({"type": "ADAMW", "params": {"lr": 3e-4, "eps": 1e-8, "torch_adam": False}})
    assert block.model_dump(exclude_defaults=True) == {"type": "ADAMW", "params": {"lr": 3e-4}}


def test_schema_of_the_block_is_generated():
    schema = ADAPTER.json_schema()
    assert "AdamParams" in schema["$defs"]
    assert schema["$defs"]["OneBitAdamOptimizer"]["properties"]["type"]["dsx_removed_in"] == "0.19.0"


# ------------------------------------------------------------------------------------------------- backend tables


def _backends_of(model) -> set[str]:
    kinds = {AdamParams: "adam", AdamWParams: "adamw", LambParams: "lamb", LionParams: "lion",
             AdagradParams: "adagrad", MuonParams: "muon"}
    return {
        optimizer_backend(kinds[model], offload=offload, torch_adam=torch_adam, adam_w_mode=adam_w_mode)
        for offload, torch_adam, adam_w_mode in itertools.product([False, True], repeat=3)
    }


@pytest.mark.parametrize("model", [AdamParams, AdamWParams, LambParams, LionParams, AdagradParams, MuonParams])
def test_each_params_model_is_the_union_of_its_backends(model):
    assert set(model.model_fields) == set().union(*(BACKEND_PARAMS[b] for b in _backends_of(model)))


@pytest.mark.parametrize(
    "kind, offload, torch_adam, adam_w_mode, backend",
    [
        ("adam", False, False, True, "FusedAdam"),
        ("adam", True, False, True, "DeepSpeedCPUAdam"),
        ("adam", True, True, True, "torch.optim.AdamW"),
        ("adam", False, True, False, "torch.optim.Adam"),
        ("adamw", False, True, False, "torch.optim.AdamW"),
        ("lion", False, False, True, "FusedLion"),
        ("lion", True, False, True, "DeepSpeedCPULion"),
        ("adagrad", False, False, True, "torch.optim.Adagrad"),
        ("adagrad", True, False, True, "DeepSpeedCPUAdagrad"),
        ("lamb", True, False, True, "FusedLamb"),
        ("muon", True, True, True, "MuonWithAuxAdam"),
        ("torch:SGD", False, False, True, "torch.optim.SGD"),
    ],
)
def test_optimizer_backend(kind, offload, torch_adam, adam_w_mode, backend):
    assert optimizer_backend(kind, offload=offload, torch_adam=torch_adam, adam_w_mode=adam_w_mode) == backend


def test_zero_supported_kinds():
    assert ZERO_SUPPORTED_OPTIMIZERS == ("adam", "adamw", "adagrad", "lion", "muon")


def test_torch_optimizer_names_exist_in_torch_and_are_not_deepspeed_names():
    torch = pytest.importorskip("torch")
    for name in TORCH_OPTIMIZER_NAMES:
        assert issubclass(getattr(torch.optim, name), torch.optim.Optimizer)
        assert name.lower() not in DEEPSPEED_OPTIMIZER_NAMES


# ---------------------------------------------------------------------------------------- pins against DeepSpeed


@pytest.mark.deepspeed
def test_deepspeed_names_are_the_0_19_8_list_plus_the_0_18_9_onebit_names(legacy_deepspeed):
    from deepspeed.runtime.config import DEEPSPEED_OPTIMIZERS

    assert set(DEEPSPEED_OPTIMIZER_NAMES) == set(DEEPSPEED_OPTIMIZERS) | set(REMOVED_OPTIMIZERS)
    source = _ds0189_source(legacy_deepspeed, "runtime/config.py")
    names_0189 = {
        node.value.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        and any(isinstance(t, ast.Name) and t.id.endswith("_OPTIMIZER") for t in node.targets)
    }
    assert set(DEEPSPEED_OPTIMIZER_NAMES) == names_0189


def _backend_classes():
    import torch
    from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad
    from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam
    from deepspeed.ops.lamb import FusedLamb
    from deepspeed.ops.lion import DeepSpeedCPULion, FusedLion

    return {
        "FusedAdam": FusedAdam,
        "DeepSpeedCPUAdam": DeepSpeedCPUAdam,
        "torch.optim.Adam": torch.optim.Adam,
        "torch.optim.AdamW": torch.optim.AdamW,
        "FusedLamb": FusedLamb,
        "FusedLion": FusedLion,
        "DeepSpeedCPULion": DeepSpeedCPULion,
        "torch.optim.Adagrad": torch.optim.Adagrad,
        "DeepSpeedCPUAdagrad": DeepSpeedCPUAdagrad,
    }


# Keys DeepSpeed pops from params before calling an Adam-family constructor (it passes adam_w_mode on itself).
POPPED = {"torch_adam", "adam_w_mode"}
MODEL_OF_BACKEND = {
    "FusedAdam": AdamParams,
    "DeepSpeedCPUAdam": AdamParams,
    "torch.optim.Adam": AdamParams,
    "torch.optim.AdamW": AdamWParams,
    "FusedLamb": LambParams,
    "FusedLion": LionParams,
    "DeepSpeedCPULion": LionParams,
    "torch.optim.Adagrad": AdagradParams,
    "DeepSpeedCPUAdagrad": AdagradParams,
}


@pytest.mark.deepspeed
@pytest.mark.parametrize("backend", sorted(MODEL_OF_BACKEND))
def test_backend_params_are_constructor_arguments_with_our_defaults(backend):
    signature = inspect.signature(_backend_classes()[backend].__init__).parameters
    keys = BACKEND_PARAMS[backend]
    assert keys - set(signature) <= POPPED
    model = MODEL_OF_BACKEND[backend]
    for key in keys & set(signature):
        ours = model.model_fields[key].default
        if ours is not None or key == "foreach":  # None: backend-dependent, dsx writes it whenever set
            assert ours == signature[key].default, f"{backend}.{key}: {ours!r} != {signature[key].default!r}"


@pytest.mark.deepspeed
def test_the_constructor_arguments_we_leave_out_are_the_ones_deepspeed_passes_or_forbids():
    # max_grad_norm: the engine raises when it is in params; adamw_mode: DeepSpeed sets it from adam_w_mode.
    expected_missing = {
        "FusedAdam": set(),
        "DeepSpeedCPUAdam": {"adamw_mode"},
        "FusedLamb": {"max_grad_norm"},
        "torch.optim.Adam": set(),
        "torch.optim.AdamW": set(),
        "FusedLion": set(),
        "DeepSpeedCPULion": set(),
        "torch.optim.Adagrad": set(),
        "DeepSpeedCPUAdagrad": set(),
    }
    for backend, cls in _backend_classes().items():
        arguments = set(inspect.signature(cls.__init__).parameters) - {"self", "params", "model_params"}
        assert arguments - BACKEND_PARAMS[backend] == expected_missing[backend], backend


@pytest.mark.deepspeed
def test_adam_w_mode_default_is_deepspeeds():
    from deepspeed.runtime.config import ADAM_W_MODE_DEFAULT

    assert AdamParams.model_fields["adam_w_mode"].default is ADAM_W_MODE_DEFAULT
    assert MuonParams.model_fields["adam_w_mode"].default is ADAM_W_MODE_DEFAULT


@pytest.mark.deepspeed
def test_zero_supported_kinds_match_deepspeeds_class_list():
    from deepspeed.runtime.zero.utils import ZERO_SUPPORTED_OPTIMIZERS as DS_SUPPORTED

    classes = _backend_classes()
    for kind in ("adam", "adamw", "lion", "adagrad", "lamb"):
        backends = {optimizer_backend(kind, offload=o, torch_adam=t) for o in (False, True) for t in (False, True)}
        supported = {classes[b] in DS_SUPPORTED for b in backends}
        assert supported == {kind in ZERO_SUPPORTED_OPTIMIZERS}, kind


@pytest.mark.deepspeed
def test_muon_ns_methods_match_deepspeed():
    from deepspeed.runtime.zero.muon.original_muon import NS_METHODS

    assert set(MuonParams.model_fields["ns_method"].annotation.__args__) == NS_METHODS


def _ds0189_source(legacy_deepspeed: Path, relative: str) -> str:
    require("0.18.9")
    return (legacy_deepspeed / "deepspeed" / relative).read_text()


def _constructor_defaults(source: str, class_name: str) -> dict:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            init = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
            args = init.args.args[-len(init.args.defaults):]
            return {a.arg: ast.literal_eval(d) for a, d in zip(args, init.args.defaults)}
    raise AssertionError(f"{class_name} not found")


@pytest.mark.parametrize(
    "relative, class_name, model",
    [
        ("runtime/fp16/onebit/adam.py", "OnebitAdam", OneBitAdamParams),
        ("runtime/fp16/onebit/zoadam.py", "ZeroOneAdam", ZeroOneAdamParams),
        ("runtime/fp16/onebit/lamb.py", "OnebitLamb", OneBitLambParams),
    ],
)
def test_onebit_params_are_the_0_18_9_constructor_arguments_with_their_defaults(legacy_deepspeed, relative, class_name,
                                                                               model):
    defaults = _constructor_defaults(_ds0189_source(legacy_deepspeed, relative), class_name)
    defaults.pop("deepspeed")  # DeepSpeed passes the engine itself
    defaults.pop("max_grad_norm")  # the engine raises when it is in params
    ours = {name: info.default for name, info in model.model_fields.items()}
    assert ours == defaults


ALL_MODELS = [
    AdamOptimizer, AdamWOptimizer, LambOptimizer, LionOptimizer, AdagradOptimizer, MuonOptimizer, OneBitAdamOptimizer,
    ZeroOneAdamOptimizer, OneBitLambOptimizer, MupOptimizer, TorchOptimizer, AdamParams, AdamWParams, LambParams,
    LionParams, AdagradParams, MuonParams, OneBitAdamParams, ZeroOneAdamParams, OneBitLambParams,
]


@pytest.mark.parametrize("model", ALL_MODELS)
def test_every_field_has_a_docstring(model):
    assert [name for name in model.model_fields if not field_docstring(model, name)] == []


def test_params_models_do_not_import_torch_or_deepspeed():
    package = Path(__file__).resolve().parents[2].joinpath("dsx/schema/optimizer")
    source = "".join(path.read_text() for path in sorted(package.glob("*.py")))
    assert "import torch" not in source and "import deepspeed" not in source
