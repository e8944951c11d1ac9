"""Blocks DeepSpeed 0.19 removed (legacy.py), checked against the real DeepSpeed 0.18.9 in a subprocess: defaults
pinned to 0.18.9's constants, and a config using every field of each model is accepted by 0.18.9's DeepSpeedConfig
and read back with the values dsx holds (0.18.9 reads these blocks with dict.get, so acceptance alone proves nothing
about key names)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from pydantic import ValidationError

from dsx.schema.legacy import (
    AmpConfig,
    CompressionTrainingConfig,
    CurriculumLearningLegacyConfig,
    EigenvalueConfig,
    ElasticityConfig,
    LayerReductionConfig,
    NebulaConfig,
    ProgressiveLayerDropConfig,
    QuantizeTrainingConfig,
)
from tests.deepspeed_parser import require

# One instance of every legacy model with every field set (mostly to non-default values), all valid together.
# Elasticity keeps num_gpus_per_node / model_parallel_size at 1: DeepSpeedConfig runs it with world size 1.
GROUP = {"params": {"start_bits": 12, "target_bits": 8, "quantization_period": 50}, "modules": ["attention.self"],
         "related_modules": None}
FULL = {
    "elasticity": ElasticityConfig(
        enabled=True, max_train_batch_size=1024, micro_batch_sizes=[2, 4], min_gpus=1, max_gpus=64,
        num_gpus_per_node=1, model_parallel_size=1, min_time=20, prefer_larger_batch=False,
        ignore_non_elastic_batch_info=True, version=0.2,
    ),
    "compression_training": CompressionTrainingConfig(
        weight_quantization={
            "shared_parameters": {"enabled": True, "quantizer_kernel": False, "schedule_offset": 10,
                                  "quantize_groups": 4, "quantize_verbose": True, "quantization_type": "asymmetric",
                                  "quantize_weight_in_forward": True, "rounding": "stochastic",
                                  "fp16_mixed_quantize": {"enabled": True, "quantize_change_ratio": 0.01}},
            "different_groups": {"wq1": GROUP},
        },
        activation_quantization={
            "shared_parameters": {"enabled": True, "quantization_type": "asymmetric", "range_calibration": "static",
                                  "schedule_offset": 20},
            "different_groups": {"aq1": {"params": {"bits": 8}, "modules": ["attention.output"]}},
        },
        sparse_pruning={
            "shared_parameters": {"enabled": True, "method": "topk", "schedule_offset": 30},
            "different_groups": {"sp1": {"params": {"dense_ratio": 0.5}, "modules": ["attention.self"]}},
        },
        row_pruning={
            "shared_parameters": {"enabled": True, "method": "topk", "schedule_offset": 40},
            "different_groups": {"rp1": {"params": {"dense_ratio": 0.5}, "modules": ["intermediate.dense"],
                                         "related_modules": [["layer.\\w+.output.dense"]]}},
        },
        head_pruning={
            "shared_parameters": {"enabled": True, "method": "topk", "schedule_offset": 50, "num_heads": 12},
            "different_groups": {"hp1": {"params": {"dense_ratio": 0.5}, "modules": ["attention.output.dense"],
                                         "related_modules": [["self.query", "self.key", "self.value"]]}},
        },
        channel_pruning={
            "shared_parameters": {"enabled": True, "method": "topk", "schedule_offset": 60},
            "different_groups": {"cp1": {"params": {"dense_ratio": 0.5}, "modules": ["conv1"]}},
        },
        layer_reduction=LayerReductionConfig(
            enabled=True, keep_number_layer=6, module_name_prefix="bert.encoder.layer",
            teacher_layer=[1, 3, 5, 7, 9, 11],
            other_module_name=["bert.pooler", "bert.embeddings", "classifier"],
        ),
    ),
    "nebula": NebulaConfig(
        enabled=True, persistent_storage_path="/nebula/store", persistent_time_interval=10,
        num_of_version_in_retention=3, enable_nebula_load=False, nebula_load_path="/nebula/load",
    ),
    "amp": AmpConfig(enabled=True, opt_level="O2", loss_scale="dynamic", keep_batchnorm_fp32=False),
    "progressive_layer_drop": ProgressiveLayerDropConfig(enabled=True, theta=0.5, gamma=0.01),
    "curriculum_learning": CurriculumLearningLegacyConfig(
        enabled=True, curriculum_type="seqlen", min_difficulty=8, max_difficulty=1024, schedule_type="fixed_root",
        schedule_config={"total_curriculum_step": 10000, "difficulty_step": 8, "root_degree": 2.0},
    ),
    "eigenvalue": EigenvalueConfig(
        enabled=True, verbose=True, max_iter=50, tol=1e-3, stability=1e-5, gas_boundary_resolution=2,
        layer_name="model.layers", layer_num=12,
    ),
    "quantize_training": QuantizeTrainingConfig(enabled=True, quantize_bits={"start_bits": 16, "target_bits": 8}),
}

_CHILD = r'''
import copy, json, sys, logging, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
import deepspeed
from deepspeed.runtime.config import DeepSpeedConfig
from deepspeed.elasticity.config import ElasticityConfig
from deepspeed.runtime import constants as rc
from deepspeed.elasticity import constants as ec
from deepspeed.nebula import constants as nc
logging.disable(logging.CRITICAL)

def jsonable(v):
    return json.loads(json.dumps(v, default=str))

out = {"version": deepspeed.__version__, "constants": {
    "elasticity": {k: getattr(ec, k) for k in dir(ec) if k.isupper()},
    "nebula": {k: getattr(nc, k) for k in dir(nc) if k.isupper()},
    "runtime": {k: v for k, v in vars(rc).items() if k.isupper() and isinstance(v, (bool, int, float, str))},
}, "results": []}
for cfg in json.load(open(sys.argv[1])):
    try:
        c = DeepSpeedConfig(copy.deepcopy(cfg))
    except BaseException as e:
        out["results"].append({"accepted": False, "error": f"{type(e).__name__}: {e}"})
        continue
    probe = {
        "train_batch_size": c.train_batch_size,
        "elasticity_enabled": c.elasticity_enabled,
        "compression": c.compression_config,
        "nebula": {k: v for k, v in vars(c.nebula_config).items() if not k.startswith("_")},
        "amp": [c.amp_enabled, c.amp_params],
        "pld": [c.pld_enabled, c.pld_params],
        "curriculum": [c.curriculum_enabled_legacy, c.curriculum_params_legacy],
        "eigenvalue_enabled": c.eigenvalue_enabled,
    }
    if "elasticity" in cfg:
        probe["elasticity"] = vars(ElasticityConfig(copy.deepcopy(cfg["elasticity"])))
    out["results"].append({"accepted": True, "probe": jsonable(probe)})
json.dump(out, open(sys.argv[2], "w"))
'''


def _run_0189(target: Path, configs: list[dict]) -> dict:
    """DeepSpeedConfig(c) of DeepSpeed 0.18.9 (installed in `target`) for each config, in one subprocess
    (PYTHONPATH = the side install)."""
    require("0.18.9")
    env = dict(os.environ, PYTHONPATH=str(target))
    with tempfile.TemporaryDirectory(prefix="dsx_legacy_") as tmp:
        in_path, out_path = Path(tmp) / "in.json", Path(tmp) / "out.json"
        in_path.write_text(json.dumps(configs))
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(in_path), str(out_path)], env=env, cwd=tmp,
                              capture_output=True, text=True, timeout=600)
        if not out_path.exists():
            pytest.fail(f"DeepSpeed 0.18.9 subprocess failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
        data = json.loads(out_path.read_text())
    assert data["version"] == "0.18.9", f"{target} holds DeepSpeed {data['version']}, not 0.18.9"
    return data


def _block(key: str) -> dict:
    return FULL[key].model_dump(mode="json")


# Extra configs whose 0.18.9 outcome pins a dsx rule (name -> config).
PROBES = {
    "amp_without_enabled": {"train_batch_size": 1, "amp": {"opt_level": "O1"}},
    "pld_without_enabled": {"train_batch_size": 1, "progressive_layer_drop": {"theta": 0.5, "gamma": 0.01}},
    "curriculum_without_enabled": {"train_batch_size": 1, "curriculum_learning": {"curriculum_type": "seqlen"}},
    "technique_without_different_groups": {
        "train_batch_size": 1, "compression_training": {"row_pruning": {"shared_parameters": {"enabled": False}}}},
    "elasticity_with_batch_keys": {"train_batch_size": 1, "elasticity": dict(_block("elasticity"),
                                                                          ignore_non_elastic_batch_info=False)},
}


@pytest.fixture(scope="module")
def ds0189(legacy_deepspeed):
    """{"constants": ..., "full": {section: result}, "probes": {name: result}} from DeepSpeed 0.18.9."""
    full = {key: ({} if key == "elasticity" else {"train_batch_size": 1}) | {key: _block(key)} for key in FULL}
    data = _run_0189(legacy_deepspeed, list(full.values()) + list(PROBES.values()))
    results = data["results"]
    return {"constants": data["constants"], "full": dict(zip(full, results[: len(full)])),
            "probes": dict(zip(PROBES, results[len(full):]))}


# --- every field of every legacy model is accepted and read by 0.18.9


@pytest.mark.deepspeed
@pytest.mark.parametrize("key", list(FULL))
def test_full_block_uses_every_field(key):
    dumped = _block(key)
    for name, field in type(FULL[key]).model_fields.items():
        assert (field.alias or name) in dumped, name


@pytest.mark.deepspeed
@pytest.mark.parametrize("key", list(FULL))
def test_full_block_is_accepted_by_0189(ds0189, key):
    result = ds0189["full"][key]
    assert result["accepted"], result.get("error")


@pytest.mark.deepspeed
def test_elasticity_fields_are_read_by_0189(ds0189):
    probe = ds0189["full"]["elasticity"]["probe"]
    names = {"max_train_batch_size": "max_acceptable_batch_size", "micro_batch_sizes": "micro_batches",
             "prefer_larger_batch": "prefer_larger_batch_size"}
    assert {names.get(k, k): v for k, v in _block("elasticity").items()} == probe["elasticity"]
    assert probe["elasticity_enabled"] is True


@pytest.mark.deepspeed
def test_nebula_fields_are_read_by_0189(ds0189):
    names = {"nebula_load_path": "load_path"}
    probe = ds0189["full"]["nebula"]["probe"]["nebula"]
    assert {names.get(k, k): v for k, v in _block("nebula").items()} == probe


@pytest.mark.deepspeed
def test_amp_params_go_to_apex_unchanged(ds0189):
    block = _block("amp")
    enabled = block.pop("enabled")
    assert ds0189["full"]["amp"]["probe"]["amp"] == [enabled, block]


@pytest.mark.deepspeed
def test_pld_fields_are_read_by_0189(ds0189):
    assert ds0189["full"]["progressive_layer_drop"]["probe"]["pld"] == [True, {"theta": 0.5, "gamma": 0.01}]


@pytest.mark.deepspeed
def test_curriculum_fields_are_read_by_0189(ds0189):
    block = _block("curriculum_learning")
    del block["enabled"]
    assert ds0189["full"]["curriculum_learning"]["probe"]["curriculum"] == [True, block]


@pytest.mark.deepspeed
def test_compression_fields_are_read_by_0189(ds0189):
    parsed = ds0189["full"]["compression_training"]["probe"]["compression"]
    block = _block("compression_training")
    assert parsed["layer_reduction"] == block.pop("layer_reduction")
    for technique, sub in block.items():
        shared = parsed[technique]["shared_parameters"]
        expected = dict(sub["shared_parameters"])
        if "fp16_mixed_quantize" in expected:  # 0.18.9 flattens this sub-dict into two keys
            mixed = expected.pop("fp16_mixed_quantize")
            expected |= {"fp16_mixed_quantize": mixed["enabled"],
                         "quantize_change_ratio": mixed["quantize_change_ratio"]}
        assert {k: shared[k] for k in expected} == expected, technique
        groups = parsed[technique]["different_groups"]
        assert set(groups) == set(sub["different_groups"]), technique
        for name, group in sub["different_groups"].items():
            assert groups[name]["params"].items() >= group["params"].items(), technique
            assert groups[name]["modules"] == group["modules"], technique


@pytest.mark.deepspeed
def test_eigenvalue_block_is_ignored_by_0189(ds0189):
    assert ds0189["full"]["eigenvalue"]["probe"]["eigenvalue_enabled"] is False


# --- 0.18.9 behaviours the models pin


@pytest.mark.deepspeed
@pytest.mark.parametrize("name", ["amp_without_enabled", "pld_without_enabled", "curriculum_without_enabled"])
def test_0189_needs_enabled_in_these_blocks(ds0189, name):
    assert ds0189["probes"][name] == {"accepted": False, "error": "KeyError: 'enabled'"}


@pytest.mark.deepspeed
def test_0189_needs_different_groups(ds0189):
    assert ds0189["probes"]["technique_without_different_groups"] == {
        "accepted": False, "error": "KeyError: 'different_groups'"}


@pytest.mark.deepspeed
def test_0189_rejects_elastic_block_with_batch_keys(ds0189):
    # Cross-section (linter): enabled elasticity + a top-level batch key needs ignore_non_elastic_batch_info.
    result = ds0189["probes"]["elasticity_with_batch_keys"]
    assert not result["accepted"] and result["error"].startswith("ElasticityConfigError: One or more batch related")


@pytest.mark.deepspeed
def test_defaults_match_0189_constants(ds0189):
    c = ds0189["constants"]
    e, n, r = c["elasticity"], c["nebula"], c["runtime"]
    assert {k: f.get_default() for k, f in ElasticityConfig.model_fields.items()} == {
        "enabled": e["ENABLED_DEFAULT"], "max_train_batch_size": e["MAX_ACCEPTABLE_BATCH_SIZE_DEFAULT"],
        "micro_batch_sizes": e["MICRO_BATCHES_DEFAULT"], "min_gpus": e["MIN_GPUS_DEFAULT"],
        "max_gpus": e["MAX_GPUS_DEFAULT"], "num_gpus_per_node": e["NUM_GPUS_PER_NODE_DEFAULT"],
        "model_parallel_size": e["MODEL_PARALLEL_SIZE_DEFAULT"], "min_time": e["MIN_TIME_DEFAULT"],
        "prefer_larger_batch": e["PREFER_LARGER_BATCH_DEFAULT"],
        "ignore_non_elastic_batch_info": e["IGNORE_NON_ELASTIC_BATCH_INFO_DEFAULT"], "version": e["VERSION_DEFAULT"]}
    assert {k: f.get_default() for k, f in NebulaConfig.model_fields.items()} == {
        "enabled": n["NEBULA_ENABLED_DEFAULT"], "persistent_storage_path": n["NEBULA_PERSISTENT_STORAGE_PATH_DEFAULT"],
        "persistent_time_interval": n["NEBULA_PERSISTENT_TIME_INTERVAL_DEFAULT"],
        "num_of_version_in_retention": n["NEBULA_NUM_OF_VERSION_IN_RETENTION_DEFAULT"],
        "enable_nebula_load": n["NEBULA_ENABLE_NEBULA_LOAD_DEFAULT"],
        "nebula_load_path": n["NEBULA_LOAD_PATH_DEFAULT"]}
    assert {k: f.get_default() for k, f in EigenvalueConfig.model_fields.items()} == {
        k: r[f"EIGENVALUE_{k.upper()}_DEFAULT"] for k in EigenvalueConfig.model_fields}
    # The keys the constants name (0.18.9 never applies PLD_THETA_DEFAULT / PLD_GAMMA_DEFAULT: see below).
    keys = (r["PLD_ENABLED"], r["PLD_THETA"], r["PLD_GAMMA"], r["AMP_ENABLED"])
    assert keys == ("enabled", "theta", "gamma", "enabled")
    assert "QUANTIZE_TRAINING" not in r


# --- the models' own checks


def test_required_enabled_keys():
    for model in (AmpConfig, ProgressiveLayerDropConfig, CurriculumLearningLegacyConfig):
        with pytest.raises(ValidationError, match="enabled\n  Field required"):
            model()


def test_different_groups_is_required():
    with pytest.raises(ValidationError, match="row_pruning.different_groups\n  Field required"):
        CompressionTrainingConfig(row_pruning={"shared_parameters": {"enabled": False}})


def test_compression_top_level_is_strict():
    with pytest.raises(ValidationError, match="weight_quantisation\n  Extra inputs are not permitted"):
        CompressionTrainingConfig(weight_quantisation={"different_groups": {}})


def test_misspelled_key_is_rejected():
    with pytest.raises(ValidationError, match="micro_batch_size\n  Extra inputs are not permitted"):
        ElasticityConfig(micro_batch_size=[2])


def test_false_string_is_rejected_for_a_bool():
    with pytest.raises(ValidationError, match="enabled\n  Input should be a valid boolean"):
        NebulaConfig(enabled="false")


def test_amp_and_quantize_training_keep_extra_keys():
    assert AmpConfig(enabled=True, opt_level="O1").model_dump() == {"enabled": True, "opt_level": "O1"}
    assert QuantizeTrainingConfig(quantize_groups=8).model_dump(exclude_defaults=True) == {"quantize_groups": 8}


def test_elasticity_needs_its_batch_keys_when_enabled():
    msg = "elasticity is enabled, so max_train_batch_size and micro_batch_sizes must be specified"
    with pytest.raises(ValidationError, match=msg):
        ElasticityConfig(enabled=True)


def test_elasticity_gpu_range():
    with pytest.raises(ValidationError, match=r"elasticity.min_gpus \(8\) cannot be greater than max_gpus \(4\)"):
        ElasticityConfig(enabled=True, max_train_batch_size=64, micro_batch_sizes=[2], min_gpus=8, max_gpus=4)


def test_elasticity_micro_batch_above_max_batch():
    with pytest.raises(ValidationError, match=r"micro_batch_sizes \[128\] exceed max_train_batch_size \(64\)"):
        ElasticityConfig(enabled=True, max_train_batch_size=64, micro_batch_sizes=[2, 128])


def test_elasticity_model_parallel_needs_version_0_2():
    with pytest.raises(ValidationError, match="elasticity version 0.1 does not support model_parallel_size > 1"):
        ElasticityConfig(enabled=True, max_train_batch_size=64, micro_batch_sizes=[2], model_parallel_size=2,
                         num_gpus_per_node=2, version=0.1)


def test_elasticity_model_parallel_divides_gpus_per_node():
    msg = r"num_gpus_per_node \(3\) must be divisible by model_parallel_size \(2\)"
    with pytest.raises(ValidationError, match=msg):
        ElasticityConfig(enabled=True, max_train_batch_size=64, micro_batch_sizes=[2], model_parallel_size=2,
                         num_gpus_per_node=3)


def test_elasticity_unknown_version_is_rejected():
    with pytest.raises(ValidationError, match="version\n  Input should be 0.1 or 0.2"):
        ElasticityConfig(version=0.3)


def test_elasticity_checks_only_when_enabled():
    config = ElasticityConfig(enabled=False, min_gpus=8, max_gpus=4)
    assert config.model_dump(exclude_unset=True) == {"enabled": False, "min_gpus": 8, "max_gpus": 4}


def test_pld_needs_theta_and_gamma_when_enabled():
    msg = "progressive_layer_drop is enabled, so theta and gamma must be specified"
    with pytest.raises(ValidationError, match=msg):
        ProgressiveLayerDropConfig(enabled=True)


def test_layer_reduction_needs_its_keys_when_enabled():
    msg = "layer_reduction is enabled, so module_name_prefix, teacher_layer, other_module_name must be specified"
    with pytest.raises(ValidationError, match=msg):
        LayerReductionConfig(enabled=True)


def test_curriculum_needs_its_keys_when_enabled():
    msg = "curriculum_learning is enabled, so curriculum_type, min_difficulty, max_difficulty, schedule_type must be"
    with pytest.raises(ValidationError, match=msg):
        CurriculumLearningLegacyConfig(enabled=True)


def test_curriculum_schedule_keys_per_type():
    msg = "schedule_type 'fixed_root' needs schedule_config.root_degree"
    with pytest.raises(ValidationError, match=msg):
        CurriculumLearningLegacyConfig(enabled=True, curriculum_type="seqlen", min_difficulty=8, max_difficulty=64,
                                       schedule_type="fixed_root",
                                       schedule_config={"total_curriculum_step": 10, "difficulty_step": 8})


def test_curriculum_fixed_discrete_lengths():
    msg = r"one more difficulty than max_step entries \(got 2 and 2\)"
    with pytest.raises(ValidationError, match=msg):
        CurriculumLearningLegacyConfig(enabled=True, curriculum_type="seqlen", min_difficulty=8, max_difficulty=64,
                                       schedule_type="fixed_discrete",
                                       schedule_config={"difficulty": [8, 64], "max_step": [10, 20]})


def test_curriculum_custom_schedule_needs_no_config():
    given = {"enabled": True, "curriculum_type": "seqlen", "min_difficulty": 8, "max_difficulty": 64,
             "schedule_type": "custom"}
    assert CurriculumLearningLegacyConfig(**given).model_dump(exclude_unset=True) == given


def test_full_models_round_trip():
    for key, model in FULL.items():
        assert type(model).model_validate(copy.deepcopy(model.model_dump())) == model, key
