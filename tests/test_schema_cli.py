"""`dsx schema`: a JSON Schema editors can use, pruned to the target version."""

import json

import jsonschema
import pytest
from click.testing import CliRunner

from conftest import ROOT
from dsx.cli import cli
from dsx.json_schema import build_schema, config_schema, shipped_path
from dsx.versions import KNOWN_VERSIONS
from dsx.presets import PRESETS
from dsx.versions import NEWEST_KNOWN, Version

NEW, OLD = Version("0.19.8"), Version("0.18.9")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_validates_against_the_schema_of_its_target(name):
    target = Version(PRESETS[name].target or NEWEST_KNOWN)
    config = json.loads((ROOT / "ds_configs" / PRESETS[name].file).read_text())
    jsonschema.validate(config, config_schema(target))


def test_schema_is_valid_draft_2020_12():
    jsonschema.Draft202012Validator.check_schema(config_schema(NEW))


def test_removed_features_are_not_in_the_0_19_schema():
    props = config_schema(NEW)["properties"]
    assert "sparse_attention" not in props and "elasticity" not in props
    assert "sparse_attention" in config_schema(OLD)["properties"]


def test_keys_new_in_0_19_are_not_in_the_0_18_schema():
    assert "log_level" not in config_schema(OLD)["properties"]
    assert "log_level" in config_schema(NEW)["properties"]


def test_a_typo_fails_schema_validation():
    config = json.loads((ROOT / "ds_configs/zero3.json").read_text())
    config["zero_optimization"]["stage3_max_live_paramters"] = 1
    with pytest.raises(jsonschema.ValidationError, match="Additional properties are not allowed"):
        jsonschema.validate(config, config_schema(NEW))


def test_bounds_are_standard_json_schema():
    config = json.loads((ROOT / "ds_configs/zero2.json").read_text())
    config["train_micro_batch_size_per_gpu"] = 0
    with pytest.raises(jsonschema.ValidationError, match="0 is less than or equal to the minimum of 0"):
        jsonschema.validate(config, config_schema(NEW))


def test_hf_schema_allows_auto_only_where_the_trainer_fills_it():
    schema = config_schema(NEW, hf=True)
    config = json.loads((ROOT / "ds_configs/zero3.json").read_text())
    config["train_micro_batch_size_per_gpu"] = "auto"
    config["zero_optimization"]["stage3_prefetch_bucket_size"] = "auto"
    jsonschema.validate(config, schema)
    config["zero_optimization"]["overlap_comm"] = "auto"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(config, schema)


def test_plain_schema_refuses_auto():
    config = json.loads((ROOT / "ds_configs/zero3.json").read_text())
    config["train_micro_batch_size_per_gpu"] = "auto"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(config, config_schema(NEW))


def test_cli_writes_the_schema(tmp_path):
    out = tmp_path / "s.json"
    result = CliRunner().invoke(cli, ["schema", "--target-deepspeed", "0.18.9", "-o", str(out)])
    assert result.exit_code == 0
    assert "sparse_attention" in json.loads(out.read_text())["properties"]


def test_field_docstrings_become_descriptions():
    zero = config_schema(NEW)["$defs"]["ZeroConfig"]["properties"]
    assert zero["stage3_max_live_parameters"]["description"]


@pytest.mark.parametrize("version", KNOWN_VERSIONS)
def test_shipped_schemas_match_the_models(version):
    shipped = json.loads(shipped_path(Version(version)).read_text())
    assert shipped == json.loads(json.dumps(build_schema(Version(version)))), "regenerate: python -m dsx.json_schema"


def test_unknown_patch_version_is_built_from_the_models():
    assert config_schema(Version("0.19.3")) == {**build_schema(Version("0.19.3")),
                                                "title": "DeepSpeed 0.19.3 config (dsx)"}
