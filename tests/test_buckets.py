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
    (GPT2_TINY_PARAMS, 3, {"reduce_bucket_size": GPT2_TINY_PARAMS}),  # ZeRO-3 gathers through its prefetch bucket
    (GPT2_TINY_PARAMS, 0, {}),
])
def test_buckets_are_the_smaller_of_deepspeeds_default_and_the_model(params, stage, expected):
    assert sized_buckets(params, stage) == expected


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
