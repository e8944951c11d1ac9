"""ZeRO buckets sized to the model (issue 19): what dsx writes, what it leaves alone, what lint says, what the
estimator counts. The measurements behind the sizes: bench/buckets/README.md."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from dsx.buckets import DEEPSPEED_DEFAULT, sized_buckets
from dsx.lint.engine import lint
from dsx.versions import Version

GPT2_TINY_PARAMS = 172_288  # dsx models: gpt2-tiny, counted on the meta device
NEW = Version("0.19.8")


def dsx(*args, cwd):
    """The dsx command in this process (a dry run and an estimate write nothing; cwd is where a slip would)."""
    from dsx.cli import cli

    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(cli, list(args))
    finally:
        os.chdir(old)


def dry_run_config(tmp_path, *args) -> dict:
    out = dsx("run", "--model", "gpt2-tiny", "--dry-run", *args, cwd=tmp_path)
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout.split("; --dry-run writes nothing):\n", 1)[1].split("\nrank plan", 1)[0])


@pytest.mark.parametrize("params, stage, expected", [
    (GPT2_TINY_PARAMS, 2, {"reduce_bucket_size": GPT2_TINY_PARAMS, "allgather_bucket_size": GPT2_TINY_PARAMS}),
    (GPT2_TINY_PARAMS, 1, {"reduce_bucket_size": GPT2_TINY_PARAMS, "allgather_bucket_size": GPT2_TINY_PARAMS}),
    (1_557_686_400, 2, {"reduce_bucket_size": DEEPSPEED_DEFAULT, "allgather_bucket_size": DEEPSPEED_DEFAULT}),
    (GPT2_TINY_PARAMS, 0, {}),
])
def test_buckets_are_the_smaller_of_deepspeeds_default_and_the_model(params, stage, expected):
    assert sized_buckets(params, stage) == expected


@pytest.mark.parametrize("params, device, expected", [
    (GPT2_TINY_PARAMS, "cuda", {"reduce_bucket_size": GPT2_TINY_PARAMS, "stage3_prefetch_bucket_size": GPT2_TINY_PARAMS,
                                "stage3_param_persistence_threshold": 100_000}),
    (1_557_686_400, "cuda", {"reduce_bucket_size": DEEPSPEED_DEFAULT, "stage3_prefetch_bucket_size": 50_000_000,
                             "stage3_param_persistence_threshold": 100_000}),
    (GPT2_TINY_PARAMS, "cpu", {"reduce_bucket_size": GPT2_TINY_PARAMS, "stage3_prefetch_bucket_size": GPT2_TINY_PARAMS,
                               "stage3_param_persistence_threshold": 0}),
])
def test_zero3_gets_the_prefetch_bucket_and_the_persistence_threshold_measured_for_its_device(params, device, expected):
    assert sized_buckets(params, 3, device) == expected


def test_a_zero3_run_on_cpu_ranks_writes_persistence_0_into_its_config(tmp_path):
    zero = dry_run_config(tmp_path, "--zero", "3", "--micro-batch", "2")["zero_optimization"]
    assert (zero["stage3_prefetch_bucket_size"], zero["stage3_param_persistence_threshold"]) == (GPT2_TINY_PARAMS, 0)


def test_ds_set_overrides_the_persistence_threshold(tmp_path):
    zero = dry_run_config(tmp_path, "--zero", "3", "--micro-batch", "2",
                          "--ds-set", "zero_optimization.stage3_param_persistence_threshold=100000")["zero_optimization"]
    assert zero.get("stage3_param_persistence_threshold", 100_000) == 100_000


def test_a_run_writes_the_buckets_for_its_model_into_the_config(tmp_path):
    zero = dry_run_config(tmp_path, "--zero", "2", "--micro-batch", "2")["zero_optimization"]
    assert (zero["reduce_bucket_size"], zero["allgather_bucket_size"]) == (GPT2_TINY_PARAMS, GPT2_TINY_PARAMS)


def test_ds_set_overrides_a_bucket(tmp_path):
    zero = dry_run_config(tmp_path, "--zero", "2", "--micro-batch", "2", "--ds-set", "zero_optimization.reduce_bucket_size=1000000")[
        "zero_optimization"]
    assert (zero["reduce_bucket_size"], zero["allgather_bucket_size"]) == (1_000_000, GPT2_TINY_PARAMS)


def test_ds_set_of_deepspeeds_default_keeps_the_default(tmp_path):
    # the emitted config leaves out a value equal to DeepSpeed's default: the sized bucket must not take its place
    zero = dry_run_config(tmp_path, "--zero", "2", "--micro-batch", "2", "--ds-set",
                          "zero_optimization.reduce_bucket_size=500000000")["zero_optimization"]
    assert zero.get("reduce_bucket_size", DEEPSPEED_DEFAULT) == DEEPSPEED_DEFAULT
    assert zero["allgather_bucket_size"] == GPT2_TINY_PARAMS


def test_a_config_file_is_run_as_it_is(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                                "gradient_clipping": 1.0, "zero_optimization": {"stage": 2},
                                "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}))
    assert dry_run_config(tmp_path, "--config", str(path))["zero_optimization"] == {"stage": 2}


def test_lint_warns_about_a_bucket_much_smaller_than_the_model_citing_the_measurement():
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0,
              "zero_optimization": {"stage": 2, "reduce_bucket_size": 589_824}}
    [finding] = lint(config, target=NEW)
    assert finding.render() == (
        "warning: zero_optimization.reduce_bucket_size: 589,824 elements: below 1,000,000 a model's gradients are "
        "reduced in many small pieces, measured slower (one H100, gpt2 ZeRO-2 micro-batch 16: 100.1 ms a step at "
        "589,824 elements, 83.9-92.2 ms from 1e7 to 1e9: bench/buckets/README.md) [bucket-size]\n"
        "    fix: use min(500,000,000, the model's parameters), as dsx writes")


def test_a_small_bucket_that_holds_the_whole_model_is_fine():
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0,
              "zero_optimization": {"stage": 2, "reduce_bucket_size": GPT2_TINY_PARAMS}}
    assert lint(config, target=NEW, model_params=GPT2_TINY_PARAMS) == []


def test_lint_warns_about_a_bucket_above_deepspeeds_default():
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0,
              "zero_optimization": {"stage": 1, "allgather_bucket_size": 1e9}}
    [finding] = lint(config, target=NEW)
    assert finding.render() == (
        "warning: zero_optimization.allgather_bucket_size: 1,000,000,000 elements, above DeepSpeed's default "
        "500,000,000: measured no faster and with more memory reserved (one H100, gpt2-xl ZeRO-2 micro-batch 8: 401 ms "
        "a step and 63.5 GiB reserved at 5e8, 407 ms and 71.2 GiB at 1e9: bench/buckets/README.md) [bucket-size]\n"
        "    fix: remove it or use 500,000,000")


@pytest.mark.parametrize("extra, bucket_bytes", [
    ((), 2 * GPT2_TINY_PARAMS),  # the bucket dsx chose: the whole model, in bf16
    (("--ds-set", "zero_optimization.reduce_bucket_size=1000"), 2 * 1000),
])
def test_the_estimate_counts_the_bucket_of_the_config(tmp_path, extra, bucket_bytes):
    out = dsx("estimate", "--model", "gpt2-tiny", "--zero", "3", "--micro-batch", "2", "--json", *extra, cwd=tmp_path)
    assert out.exit_code == 0, out.output
    estimate = json.loads(out.stdout)
    assert estimate["params"] == GPT2_TINY_PARAMS
    assert estimate["breakdown"]["gradient bucket"] == bucket_bytes


# ------------------------------------------------------------------------------------- a bucket-size sweep axis


def test_a_small_bucket_asked_with_ds_set_runs_and_the_warning_is_a_note(tmp_path):
    out = dsx("run", "--model", "gpt2-tiny", "--zero", "2", "--ds-set", "zero_optimization.reduce_bucket_size=4096",
              "--dry-run", cwd=tmp_path)
    assert out.exit_code == 0, out.output
    assert '"reduce_bucket_size": 4096' in out.stdout
    assert ("note: config warning: zero_optimization.reduce_bucket_size: 4,096 elements: below 1,000,000 a model's "
            "gradients are reduced in many small pieces") in out.stdout


def test_dsx_config_writes_a_set_key_lint_warns_about_and_prints_the_warning(tmp_path):
    out = dsx("config", "--zero", "2", "--set", "zero_optimization.reduce_bucket_size=4096", cwd=tmp_path)
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["zero_optimization"]["reduce_bucket_size"] == 4096
    assert out.stderr.startswith("dsx config: warning: zero_optimization.reduce_bucket_size: 4,096 elements")


def test_the_bucket_axis_sets_both_buckets_at_zero_1_2_and_the_reduce_bucket_at_zero_3():
    from dsx.sweep import SweepSpec, sweep_configurations
    from dsx.sweep.trials import axis_sets

    spec = SweepSpec(model="gpt2-tiny", zero=[0, 2, 3], offload=["none"], bucket_size=[None, 10_000_000])
    points = {(c.zero, c.bucket_size): c for c in sweep_configurations(spec)}
    assert [c.label for c in points.values()] == ["z0 bf16", "z0 bf16 bucket=1e7", "z2 bf16", "z2 bf16 bucket=1e7",
                                                  "z3 bf16", "z3 bf16 bucket=1e7"]
    assert points[(0, 10_000_000)].problem(None) == "a ZeRO bucket size needs ZeRO 1-3 (ZeRO-0 has no buckets)"
    assert axis_sets(points[(2, 10_000_000)]) == ("zero_optimization.reduce_bucket_size=10000000",
                                                  "zero_optimization.allgather_bucket_size=10000000")
    assert axis_sets(points[(3, 10_000_000)]) == ("zero_optimization.reduce_bucket_size=10000000",)
    assert axis_sets(points[(2, None)]) == ()
    assert points[(2, 10_000_000)].as_dict()["bucket_size"] == 10_000_000 and "bucket_size" not in \
        points[(2, None)].as_dict()


def test_a_sweep_without_the_bucket_axis_keeps_its_id():
    from dsx.sweep import SweepSpec

    plain = SweepSpec(model="gpt2-tiny", zero=[1, 2], offload=["none"])
    assert plain.sweep_id() == SweepSpec(model="gpt2-tiny", zero=[1, 2], offload=["none"], bucket_size=[None]).sweep_id()
    assert plain.sweep_id() != SweepSpec(model="gpt2-tiny", zero=[1, 2], offload=["none"],
                                         bucket_size=[None, 1_000_000]).sweep_id()


@pytest.mark.parametrize("value, message", [
    ("1.5", "--bucket-size: 1.5 is not a whole number of elements (at least 1)"),
    ("big", "--bucket-size: 'big' is not a number of elements or auto"),
])
def test_a_bad_bucket_size_is_refused_in_one_line(tmp_path, value, message):
    out = dsx("sweep", "--model", "gpt2-tiny", "--bucket-size", value, "--dry-run", cwd=tmp_path)
    assert out.exit_code == 2
    assert out.output.splitlines()[-1] == f"Error: {message}"


def test_the_dry_run_lists_the_bucket_points(tmp_path):
    out = dsx("sweep", "--model", "gpt2-tiny", "--zero", "2", "--bucket-size", "auto,1e7", "--micro-batch", "2",
              "--dry-run", cwd=tmp_path)
    assert out.exit_code == 0, out.output
    assert "  1. z2 bf16\n  2. z2 bf16 bucket=1e7\n" in out.output
