"""`dsx validate` as a user runs it: exit codes, output forms, unreadable files."""

import json

from click.testing import CliRunner

from conftest import ROOT
from dsx.cli import cli

FIXTURES = ROOT / "tests/fixtures/configs"


def validate(*args):
    return CliRunner().invoke(cli, ["validate", *map(str, args)])


def test_clean_config_exits_0():
    result = validate(ROOT / "ds_configs/zero3-offload.json")
    assert result.exit_code == 0, result.output
    assert "zero3-offload.json: clean for DeepSpeed" in result.stdout


def test_findings_exit_1_with_path_severity_message_and_fix():
    result = validate(FIXTURES / "mistake_offload_param_stage2.json")
    assert result.exit_code == 1
    assert "error: zero_optimization.offload_param: offload_param only applies to ZeRO stage 3" in result.stdout
    assert "fix: set stage 3 for parameter offload" in result.stdout


def test_bad_json_exits_2_with_file_line_col(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "train_batch_size": 8,\n  "zero_optimization": {"stage": 2\n')
    result = validate(bad)
    assert result.exit_code == 2
    assert f"{bad}:4:1: not valid JSON (nor hjson)" in result.stderr
    assert "Traceback" not in result.output


def test_missing_file_exits_2():
    result = validate("no/such/ds_config.json")
    assert result.exit_code == 2
    assert "no/such/ds_config.json: no such file" in result.stderr


def test_every_file_is_reported_even_after_an_unreadable_one(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    result = validate(bad, FIXTURES / "mistake_offload_param_stage2.json")
    assert result.exit_code == 2
    assert "offload_param only applies to ZeRO stage 3" in result.stdout


def test_hjson_comments_are_read_like_deepspeed_reads_them(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(json.loads((ROOT / "ds_configs/zero2.json").read_text()), indent=1)
                    .replace("{", "{ // comment\n", 1))
    assert validate(path).exit_code == 0


def test_duplicate_keys_are_findings(tmp_path):
    path = tmp_path / "dup.json"
    text = (ROOT / "ds_configs/zero2.json").read_text().replace('"stage": 2', '"stage": 2, "stage": 3')
    path.write_text(text)
    result = validate(path)
    assert result.exit_code == 1
    assert "zero_optimization.stage: key appears more than once" in result.stdout


def test_json_output_is_machine_readable():
    result = validate("--json", FIXTURES / "mistake_offload_param_stage2.json")
    report = json.loads(result.stdout)
    assert report["summary"]["errors"] >= 1
    finding = report["files"][0]["findings"][0]
    assert set(finding) == {"path", "severity", "code", "message", "fix"}


def test_errors_only_ignores_warnings(tmp_path):
    path = tmp_path / "w.json"
    config = json.loads((ROOT / "ds_configs/zero2.json").read_text())
    del config["gradient_clipping"]
    path.write_text(json.dumps(config))
    assert validate(path).exit_code == 1
    assert validate("--errors-only", path).exit_code == 0


def test_unknown_target_version_is_a_usage_error():
    result = validate("--target-deepspeed", "0.9", ROOT / "ds_configs/zero2.json")
    assert result.exit_code == 2
    assert "dsx knows the DeepSpeed 0.18 and 0.19 config surface" in result.output


def test_world_size_checks_batch_arithmetic():
    result = validate("--world-size", "3", ROOT / "ds_configs/pipeline.json")
    assert result.exit_code == 1
    assert "batch-arithmetic" in result.stdout
