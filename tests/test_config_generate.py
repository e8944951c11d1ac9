"""`dsx config`: what it writes, what it refuses, and that DeepSpeed itself accepts every config it writes."""

import itertools
import json

import pytest
from click.testing import CliRunner

from conftest import ROOT
from deepspeed_parser import deepspeed_check_many
from dsx.cli import cli
from dsx.generate import ConfigRequest, ConfigRequestError, generate, parse_set
from dsx.lint.engine import lint
from dsx.presets import PRESETS
from dsx.versions import NEWEST_KNOWN, Version

NEW = Version(NEWEST_KNOWN)
OLD = Version("0.18.9")


def preset_target(name):
    return Version(PRESETS[name].target or NEWEST_KNOWN)


def preset_config(name):
    runner = CliRunner()
    result = runner.invoke(cli, ["config", "--preset", name, "--target-deepspeed", str(preset_target(name))])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_ds_configs_match_the_generator(name):
    on_disk = json.loads((ROOT / "ds_configs" / PRESETS[name].file).read_text())
    assert on_disk == preset_config(name), "regenerate with: dsx config --write-presets ds_configs"


def test_ds_configs_holds_exactly_the_presets():
    assert sorted(str(p.relative_to(ROOT / "ds_configs")) for p in (ROOT / "ds_configs").rglob("*.json")) == \
        sorted(p.file for p in PRESETS.values())


def test_the_shipped_configs_are_clean_for_the_deepspeed_their_folder_names():
    top = CliRunner().invoke(cli, ["validate", *map(str, sorted((ROOT / "ds_configs").glob("*.json")))])
    legacy = CliRunner().invoke(cli, ["validate", "--target-deepspeed", "0.18.9",
                                      *map(str, sorted((ROOT / "ds_configs" / "deepspeed-0.18.9").glob("*.json")))])
    assert top.exit_code == 0, top.output
    assert legacy.exit_code == 0, legacy.output
    assert sorted(p.name for p in (ROOT / "ds_configs" / "deepspeed-0.18.9").glob("*.json")) == [
        "onebit-adam.json", "sparse-long-context.json"]


def test_a_preset_for_another_deepspeed_says_so_and_how_dsx_runs_it():
    result = CliRunner().invoke(cli, ["config", "--preset", "onebit-adam"])
    assert result.exit_code == 0
    assert result.stderr.startswith("dsx config: note: the onebit-adam preset is written for DeepSpeed 0.18.9 "
                                    "(installed here: 0.19.8); its 1-bit optimizers were removed in DeepSpeed 0.19: "
                                    "run it through a DeepSpeed 0.18.9 lane, `dsx run --python ")
    assert json.loads(result.stdout)["optimizer"]["type"] == "OneBitAdam"
    assert CliRunner().invoke(cli, ["config", "--preset", "onebit-adam", "--target-deepspeed", "0.18.9"]).stderr == ""
    assert CliRunner().invoke(cli, ["config", "--preset", "zero2"]).stderr == ""


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_lints_clean_for_its_target(name):
    world = PRESETS[name].changes.get("world_size", 1) // PRESETS[name].changes.get("pipeline_stages", 1)
    assert lint(preset_config(name), target=preset_target(name), world_size=world) == []


def test_required_presets_exist():
    assert {"zero1", "zero2", "zero2-offload", "zero3", "zero3-offload", "zero3-offload-nvme", "zero-infinity",
            "onebit-adam", "sparse-long-context", "pipeline"} <= set(PRESETS)


def test_version_dependent_defaults_are_written_out():
    config = generate(ConfigRequest(zero=3, offload="cpu", offload_params="cpu"), NEW)
    assert config["gradient_clipping"] == 1.0
    assert config["bf16"] == {"enabled": True, "check_grad_overflow": True}
    assert config["zero_optimization"]["offload_param"]["pin_memory"] is True
    assert config["zero_optimization"]["offload_optimizer"]["pin_memory"] is True


def test_only_non_default_keys_plus_the_ones_a_reader_needs():
    config = generate(ConfigRequest(zero=2, micro_batch=4, grad_accum=2, world_size=8), NEW)
    assert config == {
        "train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
        "bf16": {"enabled": True, "check_grad_overflow": True}, "zero_optimization": {"stage": 2},
        "optimizer": {"type": "AdamW", "params": {"lr": 0.0001}}, "gradient_clipping": 1.0,
    }


def test_set_reaches_any_dotted_key_and_ints_stay_ints():
    config = generate(ConfigRequest(zero=2, sets=(parse_set("zero_optimization.reduce_bucket_size=2e8"),
                                                  parse_set("steps_per_print=50"))), NEW)
    assert config["zero_optimization"]["reduce_bucket_size"] == 200000000
    assert isinstance(config["zero_optimization"]["reduce_bucket_size"], int)
    assert config["steps_per_print"] == 50


def test_set_with_a_typo_is_refused_with_the_finding():
    with pytest.raises(ConfigRequestError, match=r"zero_optimization.overlap_com: unknown key 'overlap_com'"):
        generate(ConfigRequest(sets=(parse_set("zero_optimization.overlap_com=true"),)), NEW)


def test_set_needs_key_and_value():
    with pytest.raises(ConfigRequestError, match="^--set expects KEY=VALUE with a dotted key, got 'steps_per_print'$"):
        parse_set("steps_per_print")


@pytest.mark.parametrize("request_, message", [
    (ConfigRequest(zero=2, offload_params="cpu"), r"^--offload-params needs --zero 3 \(stage 2 ignores parameter "
                                                  r"offload\)$"),
    (ConfigRequest(zero=0, offload="cpu"), "^--offload needs ZeRO: use --zero 1, 2 or 3$"),
    (ConfigRequest(zero=2, offload="nvme", nvme_path="/nvme"), r"^--offload nvme needs --zero 3"),
    (ConfigRequest(zero=3, offload="nvme"), r"^NVMe offload needs --nvme-path DIR"),
    (ConfigRequest(zero=0, precision="fp16", onebit="adam"), r"^1-bit optimizers were removed in DeepSpeed 0.19 "
                                                             r"\(target 0.19.8\): pass --target-deepspeed 0.18.9"),
    (ConfigRequest(zero=2, pipeline_stages=2, world_size=2), "^pipeline parallelism works with ZeRO 0 or 1, not 2$"),
    (ConfigRequest(zero=1, pipeline_stages=3, world_size=4), "^--world-size 4 is not divisible by --pipeline-stages 3$"),
    (ConfigRequest(micro_batch=4, train_batch=10), r"^train batch 10 is not divisible by micro-batch 4 x world size 1"),
    (ConfigRequest(scheduler="WarmupDecayLR"), "^--scheduler WarmupDecayLR needs --total-steps N$"),
    (ConfigRequest(act_ckpt="on", hf_auto=True), "^--act-ckpt writes DeepSpeed's activation_checkpointing block"),
])
def test_impossible_requests_are_refused_with_the_reason(request_, message):
    with pytest.raises(ConfigRequestError, match=message):
        generate(request_, NEW)


def test_onebit_with_zero_is_refused_on_0_18():
    with pytest.raises(ConfigRequestError, match="^1-bit optimizers do not work with ZeRO: use --zero 0$"):
        generate(ConfigRequest(zero=2, precision="fp16", onebit="lamb"), OLD)


def test_zero_one_adam_gets_var_freeze_step_not_freeze_step():
    params = generate(ConfigRequest(zero=0, precision="fp16", onebit="zero-one-adam"), OLD)["optimizer"]["params"]
    assert "var_freeze_step" in params and "freeze_step" not in params


def test_hf_auto_writes_auto_exactly_where_the_trainer_fills():
    config = generate(ConfigRequest(zero=3, offload="cpu", scheduler="WarmupDecayLR", total_steps=1000,
                                    hf_auto=True), NEW)
    assert config["train_batch_size"] == config["train_micro_batch_size_per_gpu"] == "auto"
    assert config["gradient_clipping"] == "auto"
    assert config["zero_optimization"]["stage"] == 3  # the Trainer cannot choose the stage
    assert config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert config["zero_optimization"]["stage3_prefetch_bucket_size"] == "auto"
    assert config["scheduler"]["params"]["total_num_steps"] == "auto"
    assert config["scheduler"]["params"]["warmup_num_steps"] == 100  # the Trainer would fill 0, which 0.19 rejects
    assert config["bf16"]["enabled"] == "auto" and config["fp16"]["enabled"] == "auto"
    assert lint(config, target=NEW, hf=True) == []


def test_hf_auto_config_is_an_error_without_hf():
    config = generate(ConfigRequest(zero=2, hf_auto=True), NEW)
    assert {f.code for f in lint(config, target=NEW)} == {"auto-unfilled"}


def test_hf_auto_with_flags_it_would_overwrite_is_refused_naming_both():
    result = CliRunner().invoke(cli, ["config", "--preset", "zero3", "--hf-auto", "--micro-batch", "4", "--lr", "3e-5"])
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (
        'Error: --hf-auto conflicts with --micro-batch and --lr: --hf-auto writes "auto" there, for the transformers '
        "Trainer to fill from TrainingArguments. Drop --hf-auto to write the values, or drop --micro-batch and --lr "
        "and set them in TrainingArguments")


def test_hf_auto_keeps_flags_whose_keys_the_trainer_does_not_fill():
    """A OneCycle schedule is not one the Trainer fills, so its warm-up stays as given."""
    result = CliRunner().invoke(cli, ["config", "--zero", "2", "--hf-auto", "--scheduler", "OneCycle",
                                      "--warmup-steps", "10"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["scheduler"]["params"]["cycle_first_step_size"] == 10


@pytest.mark.parametrize("word, block", [
    ("off", None), ("none", None), ("on", {"partition_activations": True}),
    ("cpu", {"partition_activations": True, "cpu_checkpointing": True}),
])
def test_act_ckpt_takes_the_words_every_command_takes(word, block):
    result = CliRunner().invoke(cli, ["config", "--act-ckpt", word])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output).get("activation_checkpointing") == block


def test_bare_act_ckpt_means_on_as_in_dsx_run():
    result = CliRunner().invoke(cli, ["config", "--act-ckpt", "--zero", "1"])
    assert result.exit_code == 0, result.output
    config = json.loads(result.output)
    assert config["activation_checkpointing"] == {"partition_activations": True}
    assert config["zero_optimization"]["stage"] == 1


def test_cli_writes_a_file(tmp_path):
    out = tmp_path / "ds.json"
    result = CliRunner().invoke(cli, ["config", "--zero", "3", "--micro-batch", "2", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["zero_optimization"]["stage"] == 3


def test_cli_refusal_is_a_clear_usage_error():
    result = CliRunner().invoke(cli, ["config", "--zero", "1", "--offload-params", "cpu"])
    assert result.exit_code == 2
    assert "Error: --offload-params needs --zero 3" in result.output
    assert "Traceback" not in result.output


def test_cli_list_shows_every_preset():
    result = CliRunner().invoke(cli, ["config", "--list"])
    assert [line.split()[0] for line in result.output.splitlines()] == list(PRESETS)


# ---- DeepSpeed's own parser accepts everything dsx writes (one subprocess per version)

MATRIX = [
    ConfigRequest(zero=z, offload=o, offload_params=p, precision=prec, micro_batch=2, grad_accum=2, world_size=1,
                  scheduler=s, total_steps=500, nvme_path="/tmp/nvme")
    for z, o, p, prec, s in itertools.product((0, 1, 2, 3), ("none", "cpu", "nvme"), ("none", "cpu", "nvme"),
                                              ("bf16", "fp16", "fp32"), ("none", "WarmupDecayLR"))
    if not (o != "none" and z == 0) and not (p != "none" and z != 3) and not (o == "nvme" and z != 3)
]


@pytest.mark.deepspeed
def test_deepspeed_0_19_accepts_every_config_dsx_generates():
    configs = [generate(r, NEW) for r in MATRIX]
    configs += [preset_config(n) for n in PRESETS if preset_target(n) == NEW and n != "pipeline"]
    results = deepspeed_check_many(configs, "0.19.8")
    rejected = [(c, detail) for c, (ok, detail) in zip(configs, results) if not ok]
    assert rejected == []
    assert len(configs) > 80


@pytest.mark.deepspeed
def test_deepspeed_0_19_accepts_the_pipeline_preset_at_its_world_size():
    (ok, detail), = deepspeed_check_many([preset_config("pipeline")], "0.19.8", world_size=4)
    assert ok, detail


@pytest.mark.slow
@pytest.mark.deepspeed
def test_deepspeed_0_18_accepts_every_legacy_config_dsx_generates(legacy_deepspeed):
    configs = [generate(r, OLD) for r in MATRIX[::3]]
    configs += [preset_config(n) for n in PRESETS if preset_target(n) == OLD]
    configs += [generate(ConfigRequest(zero=0, precision="fp16", onebit=k), OLD) for k in ("adam", "zero-one-adam",
                                                                                              "lamb")]
    configs += [generate(ConfigRequest(zero=2, precision="fp16", sparse_attention=m), OLD)
                for m in ("fixed", "variable", "bigbird", "bslongformer", "dense")]
    results = deepspeed_check_many(configs, "0.18.9")
    assert [(c, d) for c, (ok, d) in zip(configs, results) if not ok] == []
