"""zero_optimization: field parity with DeepSpeed's DeepSpeedZeroConfig, strict types and in-section rules."""

from __future__ import annotations

import enum
import json
import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from dsx.schema.offload import OffloadOptimizerConfig, OffloadParamConfig
from dsx.schema.zenflow import ZenFlowConfig
from dsx.schema.zero import DEFAULT_LEAF_MODULE_CLASSES, LeafModuleConfig, ZeroConfig
from tests.deepspeed_parser import require

# dsx fields that DeepSpeed 0.19.8 does not have: the 0.18-only keys, each gated with removed_in.
REMOVED_IN_0_19 = {"mics_shard_size", "mics_hierarchical_params_gather", "zeropp_loco_param"}
# Optional sub-sections default to None in dsx ("absent": DeepSpeed's own default applies).
SUBSECTION_DEFAULT_NONE = {"leaf_module"}


def _plain(value):
    """A DeepSpeed default as plain data: enum members become their values, pp_int an int."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    return value


def _fields(model, skip=()):
    """name -> (alias, default, type of default); the type keeps False from comparing equal to 0."""
    fields = {}
    for name, info in model.model_fields.items():
        if name not in skip:
            default = _plain(info.get_default(call_default_factory=True))
            fields[name] = (info.alias, default, type(default).__name__)
    return fields


def _gate(model, name):
    return model.model_fields[name].json_schema_extra or {}


@pytest.fixture(scope="module")
def ds_zero():
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    return DeepSpeedZeroConfig


# --- parity with DeepSpeed 0.19.8


@pytest.mark.deepspeed
def test_field_names_aliases_and_defaults_match_deepspeed(ds_zero):
    ours = _fields(ZeroConfig, skip=REMOVED_IN_0_19 | SUBSECTION_DEFAULT_NONE)
    theirs = _fields(ds_zero, skip=SUBSECTION_DEFAULT_NONE)
    assert ours == theirs


@pytest.mark.deepspeed
def test_subsection_fields_match_deepspeed(ds_zero):
    assert set(ZeroConfig.model_fields) - REMOVED_IN_0_19 == set(ds_zero.model_fields)
    assert ZeroConfig.model_fields["leaf_module"].default is None


@pytest.mark.deepspeed
def test_leaf_module_fields_and_defaults_match_deepspeed():
    from deepspeed.runtime.zero.leaf_module_config import DeepSpeedZeroLeafModuleConfig

    assert _fields(LeafModuleConfig) == _fields(DeepSpeedZeroLeafModuleConfig)


def _ds_sections(ds_zero):
    """DeepSpeed's zero_optimization model and its sub-section models, keyed by the sub-section's key."""
    from deepspeed.runtime.zenflow.zenflow_config import ZenFlowConfig as DeepSpeedZenFlowConfig
    from deepspeed.runtime.zero.leaf_module_config import DeepSpeedZeroLeafModuleConfig
    from deepspeed.runtime.zero.offload_config import (
        DeepSpeedZeroOffloadOptimizerConfig,
        DeepSpeedZeroOffloadParamConfig,
    )

    return {
        None: ds_zero,
        "offload_param": DeepSpeedZeroOffloadParamConfig,
        "offload_optimizer": DeepSpeedZeroOffloadOptimizerConfig,
        "zenflow": DeepSpeedZenFlowConfig,
        "leaf_module": DeepSpeedZeroLeafModuleConfig,
    }


@pytest.mark.deepspeed
def test_every_deepspeed_alias_is_accepted(ds_zero):
    checked = []
    for section, ds_model in _ds_sections(ds_zero).items():
        for name, info in ds_model.model_fields.items():
            if not info.alias:
                continue
            default = info.get_default(call_default_factory=True)
            value = (not default) if isinstance(default, bool) else 12345
            block = {info.alias: value}
            ours = ZeroConfig.model_validate({"stage": 3, **({section: block} if section else block)})
            ours_section = getattr(ours, section) if section else ours
            assert getattr(ours_section, name) == value, info.alias
            dumped = ours_section.model_dump(by_alias=True, exclude_defaults=True)
            assert dumped.get(info.alias) == value, info.alias
            checked.append(info.alias)
    assert "stage3_prefetch_bucket_size" in checked, checked


@pytest.mark.deepspeed
def test_deepspeed_parses_a_non_default_dump_to_the_same_values(ds_zero):
    ours = ZeroConfig.model_validate(
        {
            "stage": 3,
            "contiguous_gradients": False,
            "reduce_bucket_size": 2e8,
            "overlap_comm": False,
            "stage3_prefetch_bucket_size": 1e7,
            "stage3_param_persistence_threshold": 1e4,
            "stage3_max_live_parameters": 3e8,
            "stage3_gather_16bit_weights_on_model_save": True,
            "sub_group_size": 1e8,
            "zero_hpz_partition_size": 8,
            "zero_quantized_weights": True,
            "offload_param": {"device": "cpu", "pin_memory": True},
            "offload_optimizer": {"device": "cpu", "pin_memory": False, "ratio": 0.3},
            "leaf_module": {"names": ["block"]},
        }
    )
    dumped = ours.model_dump(by_alias=True, exclude_defaults=True)
    theirs = ds_zero(**json.loads(json.dumps(dumped)))
    for name in ours.model_fields_set:
        value = getattr(theirs, name)
        if hasattr(value, "model_dump"):
            value = {k: _plain(v) for k, v in value.model_dump(exclude_unset=True).items()}
            assert value == getattr(ours, name).model_dump(exclude_unset=True), name
        else:
            assert _plain(value) == getattr(ours, name), name


@pytest.mark.deepspeed
def test_removed_keys_are_rejected_by_deepspeed_0_19():
    from deepspeed.runtime.config import DeepSpeedConfig, DeepSpeedConfigError

    for key, value in (("mics_shard_size", 8), ("mics_hierarchical_params_gather", True),
                       ("zeropp_loco_param", {"err_beta": 0.8, "reset_T": 1024})):
        with pytest.raises(DeepSpeedConfigError, match=key):
            DeepSpeedConfig({"train_batch_size": 1, "zero_optimization": {"stage": 3, key: value}})


# --- version gates against DeepSpeed 0.18.9 (source installed with --no-deps)

_DUMP_0_18 = """
import json
import deepspeed
from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
from deepspeed.runtime.zero.offload_config import DeepSpeedZeroOffloadParamConfig, DeepSpeedZeroOffloadOptimizerConfig
from deepspeed.runtime.zenflow.zenflow_config import ZenFlowConfig
models = {"zero": DeepSpeedZeroConfig, "offload_param": DeepSpeedZeroOffloadParamConfig,
          "offload_optimizer": DeepSpeedZeroOffloadOptimizerConfig, "zenflow": ZenFlowConfig}
out = {"version": deepspeed.__version__}
for key, model in models.items():
    out[key] = {name: repr(info.get_default(call_default_factory=True)) for name, info in model.model_fields.items()}
print("DSX-JSON " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def ds_0_18(legacy_deepspeed):
    require("0.18.9")
    env = dict(os.environ, PYTHONPATH=str(legacy_deepspeed))
    run = subprocess.run([sys.executable, "-c", _DUMP_0_18], env=env, capture_output=True, text=True, timeout=300)
    line = [ln for ln in run.stdout.splitlines() if ln.startswith("DSX-JSON ")]
    assert run.returncode == 0 and line, run.stderr[-2000:]
    data = json.loads(line[-1][len("DSX-JSON "):])
    assert data["version"].startswith("0.18."), data["version"]
    return data


@pytest.mark.deepspeed
@pytest.mark.parametrize(
    "key, model",
    [("zero", ZeroConfig), ("offload_param", OffloadParamConfig), ("offload_optimizer", OffloadOptimizerConfig),
     ("zenflow", ZenFlowConfig)],
)
def test_version_gates_match_deepspeed_0_18(ds_0_18, key, model):
    old = set(ds_0_18[key])
    added = {name for name in model.model_fields if _gate(model, name).get("dsx_added_in") == "0.19.0"}
    removed = {name for name in model.model_fields if _gate(model, name).get("dsx_removed_in") == "0.19.0"}
    assert removed == old - (set(model.model_fields) - removed - added)
    assert added == set(model.model_fields) - removed - old


@pytest.mark.deepspeed
def test_pin_memory_default_changed_between_releases_so_ours_is_none(ds_0_18):
    from deepspeed.runtime.zero.offload_config import (
        DeepSpeedZeroOffloadOptimizerConfig,
        DeepSpeedZeroOffloadParamConfig,
    )

    for key, ds_model, model in (("offload_param", DeepSpeedZeroOffloadParamConfig, OffloadParamConfig),
                                 ("offload_optimizer", DeepSpeedZeroOffloadOptimizerConfig, OffloadOptimizerConfig)):
        assert ds_0_18[key]["pin_memory"] == "False"
        assert ds_model.model_fields["pin_memory"].default is True
        assert model.model_fields["pin_memory"].default is None


def test_gated_fields_name_their_version():
    assert _gate(ZeroConfig, "compute_grad_norm") == {"dsx_added_in": "0.19.0"}
    assert _gate(ZeroConfig, "parameter_alignment") == {"dsx_added_in": "0.19.0"}
    for name in REMOVED_IN_0_19:
        assert _gate(ZeroConfig, name)["dsx_removed_in"] == "0.19.0"
        assert _gate(ZeroConfig, name)["dsx_instead"]
        assert ZeroConfig.model_fields[name].default is None


# --- basics




def test_empty_block_is_all_defaults():
    assert ZeroConfig().model_dump(exclude_defaults=True) == {}


def test_misspelled_key_is_rejected():
    with pytest.raises(ValidationError, match="stage3_max_live_paramters\n  Extra inputs are not permitted"):
        ZeroConfig.model_validate({"stage": 3, "stage3_max_live_paramters": 1e9})


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match="contiguous_gradients\n  Input should be a valid boolean"):
        ZeroConfig.model_validate({"contiguous_gradients": "false"})


def test_integral_float_is_accepted_and_emitted_as_int():
    dumped = ZeroConfig.model_validate({"reduce_bucket_size": 2e8}).model_dump(exclude_defaults=True)
    assert dumped == {"reduce_bucket_size": 200000000}
    assert type(dumped["reduce_bucket_size"]) is int


def test_fractional_float_is_rejected_for_an_int():
    with pytest.raises(ValidationError, match="allgather_bucket_size"):
        ZeroConfig.model_validate({"allgather_bucket_size": 5.5})





def test_negative_bucket_is_rejected():
    with pytest.raises(ValidationError, match="stage3_prefetch_bucket_size\n  Input should be greater than or equal"):
        ZeroConfig.model_validate({"stage3_prefetch_bucket_size": -1})


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_stage_accepts_the_integers(stage):
    assert ZeroConfig.model_validate({"stage": stage}).stage == stage


@pytest.mark.parametrize(
    "value, shown", [(True, "true"), (2.0, "2.0"), ("2", '"2"'), ("auto", '"auto"')]
)
def test_stage_rejects_what_deepspeed_coerces(value, shown):
    with pytest.raises(ValidationError, match=f"stage must be one of the integers 0, 1, 2, 3, not {shown}"):
        ZeroConfig.model_validate({"stage": value})


def test_stage_4_is_rejected():
    with pytest.raises(ValidationError, match="stage\n  Input should be 0, 1, 2 or 3"):
        ZeroConfig.model_validate({"stage": 4})


def test_overlap_comm_default_is_unset_stage_dependent():
    assert ZeroConfig().overlap_comm is None


def test_field_name_is_accepted_and_emitted_as_the_stage3_alias():
    zero = ZeroConfig.model_validate({"prefetch_bucket_size": 1e7, "gather_16bit_weights_on_model_save": True})
    assert zero.model_dump(by_alias=True, exclude_defaults=True) == {
        "stage3_prefetch_bucket_size": 10000000,
        "stage3_gather_16bit_weights_on_model_save": True,
    }


def test_alias_and_field_name_together_are_rejected():
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        ZeroConfig.model_validate({"stage3_prefetch_bucket_size": 1, "prefetch_bucket_size": 2})


def test_leaf_module_single_string_becomes_a_list():
    zero = ZeroConfig.model_validate({"leaf_module": {"names": "experts", "classes": "my.Block"}})
    assert zero.leaf_module.names == ["experts"]
    assert zero.leaf_module.classes == ["my.Block"]


def test_leaf_module_default_classes_are_the_moe_blocks():
    assert LeafModuleConfig().classes == DEFAULT_LEAF_MODULE_CLASSES
    assert LeafModuleConfig().model_dump(exclude_defaults=True) == {}


def test_leaf_module_misspelled_key_is_rejected():
    with pytest.raises(ValidationError, match="leaf_module.class\n  Extra inputs are not permitted"):
        ZeroConfig.model_validate({"leaf_module": {"class": ["x"]}})


def test_loco_param_needs_both_keys():
    with pytest.raises(ValidationError, match="zeropp_loco_param.reset_T\n  Field required"):
        ZeroConfig.model_validate({"zeropp_loco_param": {"err_beta": 0.8}})


# --- in-section constraints


@pytest.mark.parametrize("stage", [0, 3])
def test_compute_grad_norm_false_needs_stage_1_or_2(stage):
    with pytest.raises(
        ValidationError,
        match=f"zero_optimization.compute_grad_norm=false is supported only with stage 1 or 2, not stage {stage}",
    ):
        ZeroConfig.model_validate({"stage": stage, "compute_grad_norm": False})


@pytest.mark.parametrize("stage", [1, 2])
def test_compute_grad_norm_false_is_accepted_at_stage_1_and_2(stage):
    assert ZeroConfig.model_validate({"stage": stage, "compute_grad_norm": False}).compute_grad_norm is False








def test_compute_grad_norm_false_accepts_offload_device_none():
    config = {"stage": 1, "compute_grad_norm": False, "offload_optimizer": {"device": "none"}}
    assert ZeroConfig.model_validate(config).model_dump(by_alias=True, exclude_unset=True) == config





@pytest.mark.parametrize(
    "config",
    [
        {"stage": 1, "zenflow": {}, "offload_optimizer": {"device": "cpu"}},
        {"stage": 2, "zenflow": {}, "cpu_offload": True},
        {"stage": 3, "zenflow": {}},
    ],
)
def test_zenflow_with_offload_or_at_stage_3_is_accepted(config):
    assert ZeroConfig.model_validate(config).model_dump(by_alias=True, exclude_unset=True) == config


@pytest.mark.parametrize("device", ["none", "cpu"])
def test_partial_offload_needs_stage_3(device):
    with pytest.raises(
        ValidationError,
        match=r"offload_optimizer.ratio=0.5 \(partial offload\) is supported only with stage 3, not stage 2",
    ):
        ZeroConfig.model_validate({"stage": 2, "offload_optimizer": {"device": device, "ratio": 0.5}})


def test_partial_offload_is_accepted_at_stage_3():
    assert ZeroConfig.model_validate({"stage": 3, "offload_optimizer": {"ratio": 0.5}}).offload_optimizer.ratio == 0.5


@pytest.mark.parametrize(
    "config, keys",
    [
        ({"cpu_offload": True, "offload_optimizer": {"device": "cpu"}}, "cpu_offload and its replacement "
         "offload_optimizer"),
        ({"cpu_offload": False, "offload_optimizer": {"device": "cpu"}}, "cpu_offload and its replacement "
         "offload_optimizer"),
        ({"cpu_offload_param": True, "offload_param": {}}, "cpu_offload_param and its replacement offload_param"),
        ({"stage3_gather_fp16_weights_on_model_save": True, "stage3_gather_16bit_weights_on_model_save": True},
         "stage3_gather_fp16_weights_on_model_save and its replacement stage3_gather_16bit_weights_on_model_save"),
    ],
)
def test_deprecated_key_with_its_replacement_is_rejected(config, keys):
    with pytest.raises(ValidationError, match=f"the deprecated {keys} are both set"):
        ZeroConfig.model_validate(config)


def test_deprecated_keys_alone_are_accepted():
    zero = ZeroConfig.model_validate(
        {"cpu_offload": True, "cpu_offload_param": True, "cpu_offload_use_pin_memory": True}
    )
    assert zero.cpu_offload is True


def test_cpu_offload_use_pin_memory_does_not_clash():
    config = {"cpu_offload_use_pin_memory": True, "offload_optimizer": {"device": "cpu"}}
    assert ZeroConfig.model_validate(config).model_dump(by_alias=True, exclude_unset=True) == config


def test_legacy_stage1_is_rejected_with_zero_enabled():
    with pytest.raises(ValidationError, match=r"zero_optimization.legacy_stage1=true is not supported since DeepSpeed"):
        ZeroConfig.model_validate({"stage": 1, "legacy_stage1": True})


def test_legacy_stage1_is_accepted_with_zero_off():
    zero = ZeroConfig.model_validate({"stage": 0, "legacy_stage1": True})
    assert (zero.stage, zero.legacy_stage1) == (0, True)





def test_nvme_with_path_is_accepted_at_stage_3():
    config = {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme"}}
    assert ZeroConfig.model_validate(config).model_dump(by_alias=True, exclude_unset=True) == config


def test_optimizer_nvme_without_path_is_accepted_at_stage_2():
    # DeepSpeed runs nvme as CPU offload at stages 1/2 and ignores nvme_path; the linter warns about it.
    zero = ZeroConfig.model_validate({"stage": 2, "offload_optimizer": {"device": "nvme"}})
    assert (zero.stage, zero.offload_optimizer.device, zero.offload_optimizer.nvme_path) == (2, "nvme", None)


# --- DeepSpeed agrees on the rules it checks at config time


@pytest.mark.deepspeed
@pytest.mark.parametrize(
    "config",
    [
        {"stage": 3, "compute_grad_norm": False},
        {"stage": 2, "offload_optimizer": {"ratio": 0.5}},
        {"cpu_offload": False, "offload_optimizer": {"device": "cpu"}},
        {"cpu_offload_param": True, "offload_param": {}},
        {"stage3_gather_fp16_weights_on_model_save": True, "stage3_gather_16bit_weights_on_model_save": True},
        {"stage": 4},
        {"stage3_max_live_paramters": 1},
    ],
)
def test_deepspeed_rejects_the_same_configs(ds_zero, config):
    with pytest.raises((ValidationError, AssertionError)):
        ds_zero(**config)
    with pytest.raises(ValidationError):
        ZeroConfig.model_validate(config)


def test_json_schema_is_valid_and_accepts_a_dump():
    jsonschema = pytest.importorskip("jsonschema")
    schema = ZeroConfig.model_json_schema(by_alias=True)
    jsonschema.Draft202012Validator.check_schema(schema)
    zero = ZeroConfig.model_validate(
        {"stage": 3, "stage3_prefetch_bucket_size": 1e7, "offload_optimizer": {"device": "cpu", "pin_memory": True},
         "zenflow": {"select_strategy": "step", "select_interval": 4, "update_interval": 2}}
    )
    jsonschema.validate(zero.model_dump(by_alias=True, exclude_defaults=True), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"reduce_bucket_size": -1}, schema)


# NVMe without nvme_path, zenflow without CPU offload and compute_grad_norm=false with offload/zenflow are checked
# by dsx's linter (tests/test_lint_rules.py), which reports them all at once, not by this model.
