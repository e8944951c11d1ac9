"""`dsx validate` as a user runs it: exit codes, output forms, unreadable files."""

import json
import os
import resource
import subprocess
import sys

from click.testing import CliRunner

from conftest import ROOT
from dsx.cli import cli

FIXTURES = ROOT / "tests/fixtures/configs"


def validate(*args):
    return CliRunner().invoke(cli, ["validate", *map(str, args)])


def validate_in_subprocess(*args):
    """`dsx validate` in its own process, with a time limit and a 2 GiB memory cap: an input that blocks or reads
    without bound fails the test instead of hanging it or exhausting the machine."""
    def cap_memory():
        resource.setrlimit(resource.RLIMIT_AS, (2 * 1024 ** 3, 2 * 1024 ** 3))

    return subprocess.run([sys.executable, "-m", "dsx", "validate", *map(str, args)], capture_output=True, text=True,
                          timeout=60, preexec_fn=cap_memory)


MISTAKE = FIXTURES / "mistake_offload_param_stage2.json"


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


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "ds.json"
    os.mkfifo(fifo)
    out = validate_in_subprocess(fifo, MISTAKE)
    assert out.returncode == 2
    assert out.stderr.splitlines()[0] == f"{fifo}: is a FIFO, not a config file"
    assert "offload_param only applies to ZeRO stage 3" in out.stdout


def test_dev_zero_is_refused_without_reading_it():
    out = validate_in_subprocess("/dev/zero", MISTAKE)
    assert out.returncode == 2
    assert out.stderr.splitlines()[0] == "/dev/zero: is a character device, not a config file"
    assert "offload_param only applies to ZeRO stage 3" in out.stdout


def test_a_directory_is_reported_like_any_unreadable_file(tmp_path):
    result = validate(tmp_path, MISTAKE)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == f"{tmp_path}: is a directory, not a config file"
    assert "offload_param only applies to ZeRO stage 3" in result.stdout


def test_the_summary_counts_unreadable_files_apart_from_the_files_read(tmp_path):
    result = validate(tmp_path, MISTAKE)
    assert result.stderr.splitlines()[-1].startswith("1 of 2 file(s) unreadable; 2 error(s), 1 warning(s) in 1 file(s) "
                                                     "read (target DeepSpeed ")


def test_a_file_over_16_mib_is_refused_unread(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(16 * 1024 ** 2 + 1)
    result = validate(big, MISTAKE)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (f"{big}: larger than 16 MiB, the most dsx reads; a DeepSpeed config is "
                                             "a few KiB")
    assert "offload_param only applies to ZeRO stage 3" in result.stdout


def test_10000_levels_of_nesting_are_refused_and_the_other_files_still_linted(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"a": ' * 10_000 + "1" + "}" * 10_000)
    result = validate(deep, MISTAKE)
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines()[0] == (f"{deep}: nested more than 100 levels deep; a DeepSpeed config is a "
                                             "few levels deep")
    assert "offload_param only applies to ZeRO stage 3" in result.stdout


def test_nesting_the_parser_survives_but_the_linter_would_not_is_refused(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"a": ' * 600 + "1" + "}" * 600)
    result = validate(deep)
    assert result.exit_code == 2, result.output
    assert "nested more than 100 levels deep" in result.stderr


def test_megabytes_of_junk_skip_the_slow_hjson_fallback(tmp_path):
    junk = tmp_path / "junk.json"
    junk.write_text("x" * 1_000_000)
    result = validate(junk, MISTAKE)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (f"{junk}:1:1: not valid JSON: Expecting value (hjson is tried only up "
                                             "to 256 KiB)")
    assert "offload_param only applies to ZeRO stage 3" in result.stdout


def test_auto_values_without_hf_are_one_finding_listing_the_keys():
    result = validate(FIXTURES / "hf_trainer_zero3_auto.json")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert len(lines) == 2, result.stdout  # the finding and its fix
    assert lines[0] == (
        f"{FIXTURES / 'hf_trainer_zero3_auto.json'}: error: <config>: 17 \"auto\" values only the transformers "
        "Trainer / accelerate fill; passed to DeepSpeed directly they fail at DeepSpeedConfig() (TypeError): "
        "gradient_accumulation_steps, train_batch_size, train_micro_batch_size_per_gpu; fail at "
        "deepspeed.initialize(): optimizer.params.lr, optimizer.params.betas, optimizer.params.eps, "
        "optimizer.params.weight_decay, scheduler.params.warmup_min_lr, scheduler.params.warmup_max_lr, "
        "scheduler.params.warmup_num_steps, scheduler.params.total_num_steps; fail at the first optimizer step: "
        "gradient_clipping; are silently dropped (DeepSpeed's defaults apply): bf16.enabled, fp16.enabled, "
        "zero_optimization.reduce_bucket_size, zero_optimization.stage3_prefetch_bucket_size, "
        "zero_optimization.stage3_param_persistence_threshold [auto-unfilled]")
    assert lines[1] == "    fix: lint with --hf if this config goes through the Trainer/accelerate, or set values"
    assert "17 error(s), 0 warning(s)" in result.stderr


def test_json_keeps_one_auto_finding_per_key():
    result = validate("--json", FIXTURES / "hf_trainer_zero3_auto.json")
    findings = json.loads(result.stdout)["files"][0]["findings"]
    assert len(findings) == 17 and {f["code"] for f in findings} == {"auto-unfilled"}
