"""What DeepSpeed's OWN parser does with every real-config fixture in tests/fixtures/configs/.

For each fixture (malformed_* aside) this runs `deepspeed.runtime.config.DeepSpeedConfig` -- the first thing
`deepspeed.initialize` does with a config -- under DeepSpeed 0.19.8 (the venv) and 0.18.9 (side directory, see
tests/deepspeed_parser.py), with the data-parallel world size the fixture is meant for, and pins the outcome:
"accepted" or "rejected:ExceptionClass".

Why: a fixture's "silent" mistakes (MANIFEST.md) are only worth a dsx finding if DeepSpeed really accepts the config;
the clean fixtures must really be accepted. For accepted configs a few values DeepSpeed derived are pinned too
(SILENT_EFFECTS), which shows what the silent mistake turns into (ZeRO off, no clipping, optimizer params dropped...).

Hugging Face "auto" fixtures are checked after substituting the values the Trainer / accelerate would write
(`fill_auto`); their raw form (passed to DeepSpeed directly) is pinned separately.

Non-"auto" fixtures are handed to DeepSpeed as a file path, so DeepSpeed's own hjson loader reads them (comments,
unquoted keys, duplicate-key rejection) exactly as `deepspeed --deepspeed_config FILE` would.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/ (for deepspeed_parser), whatever the rootdir

from deepspeed_parser import (  # noqa: E402
    VERSIONS,
    deepspeed_probe_many,
    outcome,
    require,
    unavailable_reason,
)

FIXTURE_DIR = Path(__file__).parent / "fixtures" / "configs"
MANIFEST = FIXTURE_DIR / "MANIFEST.md"

ACC = "accepted"


def rej(exc: str) -> str:
    return f"rejected:{exc}"


# --------------------------------------------------------------------------------------------------------------
# The HF "auto" substitution (what transformers' HfTrainerDeepSpeedConfig / accelerate's DeepSpeedPlugin write)
# --------------------------------------------------------------------------------------------------------------

#: Plausible TrainingArguments (transformers defaults where they exist) and model facts.
HF_TRAINER_VALUES = {
    "per_device_train_batch_size": 4,
    "gradient_accumulation_steps": 2,
    "learning_rate": 2e-5,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-8,
    "weight_decay": 0.0,
    "max_grad_norm": 1.0,
    "fp16": False,
    "bf16": True,
    "warmup_steps": 100,
    "num_training_steps": 1000,
    "hidden_size": 4096,
}

#: What an `accelerate config` DeepSpeed plugin would add on top (zero_stage, offload devices, 16-bit save).
ACCELERATE_PLUGIN_VALUES = {
    "zero_stage": 3,
    "offload_optimizer_device": "cpu",
    "offload_param_device": "cpu",
    "zero3_save_16bit_model": True,
}


def _get(cfg: dict, path: tuple[str, ...]):
    node = cfg
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _set(cfg: dict, path: tuple[str, ...], value) -> None:
    node = cfg
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _auto_paths(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _auto_paths(v, prefix + (k,))
    elif node == "auto":
        yield prefix


def fill_auto(config: dict, world_size: int, filler: str = "trainer", **overrides) -> dict:
    """A copy of `config` with its "auto" values replaced the way the HF integration would.

    filler="trainer": transformers' Trainer (HfTrainerDeepSpeedConfig.trainer_config_process/finalize). It fills only
      the keys it knows; any other "auto" stays in the config and reaches DeepSpeed (which drops it in Pydantic
      sections). The two stage-3 hidden-size keys are filled only when stage == 3.
    filler="accelerate": accelerate's DeepSpeedPlugin + Accelerator._prepare_deepspeed, which also fills
      zero_optimization.stage, the offload devices and stage3_gather_16bit_weights_on_model_save, and raises if an
      "auto" is left over.
    """
    if filler not in ("trainer", "accelerate"):
        raise ValueError(f"unknown filler {filler!r}")
    v = {**HF_TRAINER_VALUES, **ACCELERATE_PLUGIN_VALUES, **overrides}
    cfg = copy.deepcopy(config)
    h = v["hidden_size"]
    table = {
        ("train_micro_batch_size_per_gpu",): v["per_device_train_batch_size"],
        ("gradient_accumulation_steps",): v["gradient_accumulation_steps"],
        ("train_batch_size",): world_size * v["per_device_train_batch_size"] * v["gradient_accumulation_steps"],
        ("gradient_clipping",): v["max_grad_norm"],
        ("optimizer", "params", "lr"): v["learning_rate"],
        ("optimizer", "params", "betas"): [v["adam_beta1"], v["adam_beta2"]],
        ("optimizer", "params", "eps"): v["adam_epsilon"],
        ("optimizer", "params", "weight_decay"): v["weight_decay"],
        ("scheduler", "params", "warmup_min_lr"): 0,
        ("scheduler", "params", "warmup_max_lr"): v["learning_rate"],
        ("scheduler", "params", "warmup_num_steps"): v["warmup_steps"],
        ("scheduler", "params", "total_num_steps"): v["num_training_steps"],
        ("fp16", "enabled"): v["fp16"],
        ("bf16", "enabled"): v["bf16"],
        ("zero_optimization", "reduce_bucket_size"): h * h,
    }
    stage3_keys = {
        ("zero_optimization", "stage3_prefetch_bucket_size"): int(0.9 * h * h),
        ("zero_optimization", "stage3_param_persistence_threshold"): 10 * h,
    }
    if filler == "accelerate":
        table.update(stage3_keys)
        table.update({
            ("zero_optimization", "stage"): v["zero_stage"],
            ("zero_optimization", "offload_optimizer", "device"): v["offload_optimizer_device"],
            ("zero_optimization", "offload_param", "device"): v["offload_param_device"],
            ("zero_optimization", "stage3_gather_16bit_weights_on_model_save"): v["zero3_save_16bit_model"],
        })
    elif _get(cfg, ("zero_optimization", "stage")) == 3:
        table.update(stage3_keys)
    for path, value in table.items():
        if _get(cfg, path) == "auto":
            _set(cfg, path, value)
    if filler == "accelerate":
        left = [".".join(p) for p in _auto_paths(cfg)]
        if left:
            raise ValueError(f"accelerate would refuse these unresolved 'auto' values: {left}")
    return cfg


# --------------------------------------------------------------------------------------------------------------
# The fixtures and their pinned outcomes
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fixture:
    target: str  # the DeepSpeed version the config was written for (MANIFEST.md)
    world_size: int  # data-parallel world size DeepSpeedConfig is told about (the batch arithmetic uses it)
    expected: dict  # version -> "accepted" | "rejected:ExceptionClass"
    filler: str | None = None  # None, "trainer" or "accelerate": the "auto" values are legitimate and get filled
    raw_expected: dict = field(default_factory=dict)  # for filler fixtures: outcome without substitution


BOTH_ACC = {"0.19.8": ACC, "0.18.9": ACC}
RAW_AUTO_BATCH = {"0.19.8": rej("TypeError"), "0.18.9": rej("TypeError")}  # "auto" batch size compared with 0

FIXTURES: dict[str, Fixture] = {
    # ---- Hugging Face / accelerate templates ("auto" legitimate) ----
    "hf_trainer_zero2_auto": Fixture("0.19.8", 8, BOTH_ACC, "trainer", RAW_AUTO_BATCH),
    "hf_trainer_zero3_auto": Fixture("0.19.8", 8, BOTH_ACC, "trainer", RAW_AUTO_BATCH),
    "hf_zero3_offload_nvme": Fixture("0.19.8", 8, BOTH_ACC, "trainer", RAW_AUTO_BATCH),
    "accelerate_zero3_auto_stage": Fixture("0.19.8", 8, BOTH_ACC, "accelerate", RAW_AUTO_BATCH),
    "llama_factory_zero3_offload": Fixture("0.19.8", 8, BOTH_ACC, "trainer", RAW_AUTO_BATCH),
    "axolotl_zero3_bf16_offload_all": Fixture("0.19.8", 8, BOTH_ACC, "trainer", RAW_AUTO_BATCH),
    # accepted: what goes wrong (the engine's exit() after step end_profile_step + 1) happens only while training
    "azureml_autotuning_bert_hf": Fixture("0.19.8", 8, BOTH_ACC, "trainer", RAW_AUTO_BATCH),
    # no "auto" in it, but an HF Trainer config; reduce_bucket_size 0 is rejected since 0.19 (must be > 0)
    "hf_trainer_zero3_legacy_2021": Fixture(
        "0.18.9", 8, {"0.19.8": rej("ValidationError"), "0.18.9": ACC}),
    # ---- DeepSpeedExamples-era configs ----
    "deepspeedexamples_bert_onebit_adam": Fixture("0.18.9", 32, BOTH_ACC),  # 0.19.8: fails only at initialize
    "zero_one_adam_with_freeze_step": Fixture("0.18.9", 32, BOTH_ACC),
    "onebit_lamb": Fixture("0.18.9", 8, BOTH_ACC),
    "sparse_attention_bslongformer": Fixture("0.18.9", 16, {"0.19.8": rej("DeepSpeedConfigError"), "0.18.9": ACC}),
    "moe_zero2": Fixture("0.19.8", 8, BOTH_ACC),
    "megatron_gpt_pipeline_zero1": Fixture("0.19.8", 2, BOTH_ACC),  # 16 GPUs = TP 2 x PP 4 x DP 2
    "zero_infinity_nvme": Fixture("0.19.8", 8, BOTH_ACC),
    "deepspeedexamples_zero_infinity_original": Fixture(
        "0.19.8", 8, {"0.19.8": rej("ValidationError"), "0.18.9": rej("ValidationError")}),
    "deepspeedexamples_cifar_bf16_loss_scale": Fixture(
        "0.19.8", 2, {"0.19.8": rej("ValidationError"), "0.18.9": rej("ValidationError")}),
    "deepspeedexamples_megatron_zero2_cpu_offload": Fixture("0.18.9", 4, BOTH_ACC),
    # ---- user mistakes ----
    "mistake_typos_top_level": Fixture("0.19.8", 8, BOTH_ACC),
    "mistake_typos_in_dict_sections": Fixture("0.19.8", 8, BOTH_ACC),
    "mistake_stage_auto_without_accelerate": Fixture("0.19.8", 8, BOTH_ACC),
    "mistake_offload_param_stage2": Fixture("0.19.8", 4, BOTH_ACC),
    "mistake_stage3_keys_at_stage2": Fixture("0.19.8", 8, BOTH_ACC),
    "mistake_nvme_without_path": Fixture("0.19.8", 8, BOTH_ACC),
    "mistake_string_booleans": Fixture("0.19.8", 8, BOTH_ACC),
    "mistake_clipping_in_optimizer_zero_warmup": Fixture("0.19.8", 8, BOTH_ACC),
    "mistake_optimizer_tpye_orphan_scheduler": Fixture("0.19.8", 2, BOTH_ACC),
    "mistake_fp16_and_bf16_enabled": Fixture(
        "0.19.8", 8, {"0.19.8": rej("AssertionError"), "0.18.9": rej("AssertionError")}),
    "mistake_pipeline_zero3": Fixture("0.19.8", 8, BOTH_ACC),  # 16 GPUs = PP 2 x DP 8; fails only at initialize
    "mistake_removed_features_0198": Fixture("0.19.8", 8, {"0.19.8": rej("DeepSpeedConfigError"), "0.18.9": ACC}),
    "mistake_onebit_adam_zero2": Fixture("0.18.9", 8, BOTH_ACC),
    "mistake_lamb_amsgrad_static_loss_scale": Fixture("0.19.8", 8, BOTH_ACC),
    "mistake_batch_arithmetic_world8": Fixture(
        "0.19.8", 8, {"0.19.8": rej("AssertionError"), "0.18.9": rej("AssertionError")}),
    # ---- clean ----
    "clean_zero2": Fixture("0.19.8", 8, BOTH_ACC),
    "clean_zero3_offload_0198": Fixture("0.19.8", 8, BOTH_ACC),
    # ---- hjson (comments / unquoted keys) ----
    "hjson_comments_zero2": Fixture("0.19.8", 8, BOTH_ACC),
    "hjson_sparse_attention_docs_paste": Fixture("0.18.9", 8, {"0.19.8": rej("DeepSpeedConfigError"), "0.18.9": ACC}),
}

#: Not valid JSON and not valid hjson: DeepSpeed's file loader must reject them too.
MALFORMED = {
    "malformed_extra_closing_brace": rej("HjsonDecodeError"),
    "malformed_missing_brace": rej("HjsonDecodeError"),
}

#: Extra runs: (fixture, world size, version) -> outcome. The world-size mistake is invisible at world size 1,
#: which is all DeepSpeedConfig sees outside a process group (facts C01/W01).
EXTRA_WORLD_SIZE_RUNS = {
    ("mistake_batch_arithmetic_world8", 1, "0.19.8"): ACC,
    ("mistake_batch_arithmetic_world8", 1, "0.18.9"): ACC,
    # the elasticity block of 0.18.9 rejects world sizes outside its computed GPU list (here: 7)
    ("mistake_removed_features_0198", 7, "0.18.9"): rej("ElasticityIncompatibleWorldSize"),
}

#: What DeepSpeed made of an accepted config: probe values (deepspeed_parser._probe) pinned per version.
#: Each entry shows a silent mistake's effect (or, for clean configs, that the intended value arrived).
SILENT_EFFECTS: dict[str, dict[str, dict]] = {
    "mistake_typos_top_level": {
        # zero_optimisation/gradient_clip/train_micro_batch_size/gradient_accumulation_step all ignored (T01-T06)
        "0.19.8": {"zero_stage": 0, "gradient_clipping": 1.0, "train_micro_batch_size_per_gpu": 16,
                   "gradient_accumulation_steps": 1, "fp16_enabled": True},
        "0.18.9": {"zero_stage": 0, "gradient_clipping": 0.0, "train_micro_batch_size_per_gpu": 16,
                   "gradient_accumulation_steps": 1},
    },
    "mistake_typos_in_dict_sections": {
        # optimizer.parmas (N03), activation_checkpointing.partitioned_activations (T50),
        # flops_profiler.enable (T52), checkpoint.tag_validate (T56): all dropped
        "0.19.8": {"optimizer_name": "adamw", "optimizer_params": None, "partition_activations": False,
                   "flops_profiler_enabled": False, "checkpoint_tag_validation_fail": False},
        "0.18.9": {"optimizer_params": None, "partition_activations": False, "flops_profiler_enabled": False},
    },
    "mistake_stage_auto_without_accelerate": {
        # "auto" stripped before validation: ZeRO off, fp16 off, offload off (T40, A04, A08); misspelled
        # stage3_prefetch_bucket_sise passes because its value is "auto" (T41)
        "0.19.8": {"zero_stage": 0, "fp16_enabled": False, "offload_optimizer_device": "none",
                   "prefetch_bucket_size": 50000000},
        "0.18.9": {"zero_stage": 0, "fp16_enabled": False, "offload_optimizer_device": "none"},
    },
    "mistake_offload_param_stage2": {
        # parsed, but stage 2 never reads offload_param (C20) and runs nvme as CPU offload (Z12)
        "0.19.8": {"zero_stage": 2, "offload_param_device": "cpu", "offload_optimizer_device": "nvme",
                   "offload_optimizer_nvme_path": "/local_nvme"},
    },
    "mistake_stage3_keys_at_stage2": {
        "0.19.8": {"zero_stage": 2, "prefetch_bucket_size": 450000000, "param_persistence_threshold": 1000000,
                   "gather_16bit_weights_on_model_save": True},
    },
    "mistake_nvme_without_path": {
        # fails only inside deepspeed.initialize (Z23/Z24)
        "0.19.8": {"zero_stage": 3, "offload_param_device": "nvme", "offload_param_nvme_path": None,
                   "offload_optimizer_device": "nvme", "offload_optimizer_nvme_path": None},
    },
    "mistake_string_booleans": {
        # top-level strings kept as (truthy) strings (T80, T81, T87); Pydantic sections coerce them (K01)
        "0.19.8": {"prescale_gradients": "false", "zero_allow_untested_optimizer": "false",
                   "dataloader_drop_last": "false", "steps_per_print": "100",
                   "bf16_enabled": True, "fp16_enabled": False},
        "0.18.9": {"prescale_gradients": "false", "zero_allow_untested_optimizer": "false", "bf16_enabled": True},
    },
    "mistake_clipping_in_optimizer_zero_warmup": {
        # negative clipping accepted (= no clipping, C55); max_grad_norm kept in 0.19.8 params (ValueError at
        # initialize, I04) but zeroed by 0.18.9 at config time (T18/M01); warmup_num_steps 0 only fails at
        # initialize in 0.19.8 (S01)
        "0.19.8": {"gradient_clipping": -1.0, "scheduler_name": "WarmupLR",
                   "optimizer_params": {"lr": 5e-05, "betas": [0.9, 0.999], "eps": 1e-08, "weight_decay": 0.01,
                                        "max_grad_norm": 1.0},
                   "scheduler_params": {"warmup_min_lr": 0, "warmup_max_lr": 5e-05, "warmup_num_steps": 0}},
        "0.18.9": {"gradient_clipping": -1.0,
                   "optimizer_params": {"lr": 5e-05, "betas": [0.9, 0.999], "eps": 1e-08, "weight_decay": 0.01,
                                        "max_grad_norm": 0.0}},
    },
    "mistake_optimizer_tpye_orphan_scheduler": {
        # optimizer.tpye: no optimizer at all (N01); the scheduler is then dropped at initialize (I08)
        "0.19.8": {"optimizer_name": None, "scheduler_name": "WarmupCosineLR", "zero_stage": 0},
        "0.18.9": {"optimizer_name": None, "scheduler_name": "WarmupCosineLR"},
    },
    "mistake_pipeline_zero3": {
        "0.19.8": {"zero_stage": 3, "pipeline": {"stages": "auto", "partition": "best", "seed_layers": False,
                                                  "activation_checkpoint_interval": 1, "pipe_partitioned": "false",
                                                  "grad_partitioned": "false"}},
    },
    "mistake_onebit_adam_zero2": {
        "0.18.9": {"optimizer_name": "onebitadam", "zero_stage": 2, "fp16_enabled": True},
        "0.19.8": {"optimizer_name": "OneBitAdam", "zero_stage": 2},  # no longer a DeepSpeed name: not lower-cased
    },
    "mistake_lamb_amsgrad_static_loss_scale": {
        "0.19.8": {"optimizer_name": "lamb", "fp16_enabled": True},
    },
    "mistake_removed_features_0198": {
        # 0.18.9: elasticity (with ignore_non_elastic_batch_info) silently replaces train_batch_size 32 by 480
        "0.18.9": {"elasticity_enabled": True, "amp_enabled": True, "train_batch_size": 480,
                   "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 15},
    },
    "moe_zero2": {"0.19.8": {"zero_stage": 2, "bf16_enabled": True, "gradient_accumulation_steps": 1}},
    "megatron_gpt_pipeline_zero1": {
        # pipeline.stages / partition are kept but dead: PipelineModule decides (P04)
        "0.19.8": {"zero_stage": 1, "partition_activations": True,
                   "pipeline": {"stages": 4, "partition": "parameters", "seed_layers": False,
                                "activation_checkpoint_interval": 1, "pipe_partitioned": True,
                                "grad_partitioned": True}},
    },
    "deepspeedexamples_megatron_zero2_cpu_offload": {
        # deprecated cpu_offload turned into offload_optimizer {device: cpu} (C35)
        "0.19.8": {"zero_stage": 2, "offload_optimizer_device": "cpu", "train_micro_batch_size_per_gpu": 4},
        "0.18.9": {"zero_stage": 2, "offload_optimizer_device": "cpu"},
    },
    "hf_trainer_zero3_legacy_2021": {
        # deprecated stage3_gather_fp16_weights_on_model_save mapped to gather_16bit_weights_on_model_save (C38)
        "0.18.9": {"zero_stage": 3, "gather_16bit_weights_on_model_save": True, "reduce_bucket_size": 0,
                   "gradient_clipping": 0.0},
    },
    "hf_zero3_offload_nvme": {
        # aio.thread_count (the documented name) is ignored: intra_op_parallelism stays 1 (D01/T55)
        "0.19.8": {"aio_intra_op_parallelism": 1, "offload_param_device": "nvme",
                   "offload_param_nvme_path": "/local_nvme/ds_offload"},
    },
    "accelerate_zero3_auto_stage": {
        "0.19.8": {"zero_stage": 3, "offload_param_device": "cpu", "offload_optimizer_device": "cpu",
                   "gather_16bit_weights_on_model_save": True, "bf16_enabled": True},
    },
    "hf_trainer_zero2_auto": {
        "0.19.8": {"zero_stage": 2, "bf16_enabled": True, "fp16_enabled": False, "train_batch_size": 64,
                   "reduce_bucket_size": 16777216, "gradient_clipping": 1.0},
    },
    "hf_trainer_zero3_auto": {
        "0.19.8": {"zero_stage": 3, "prefetch_bucket_size": 15099494, "param_persistence_threshold": 40960},
    },
    "sparse_attention_bslongformer": {
        # bslongformer's parser never reads "attention" (nor fixed-mode num_local_blocks): dropped (facts 9.1)
        "0.18.9": {"sparse_attention": {"mode": "bslongformer", "block": 16, "different_layout_per_head": True,
                                        "num_sliding_window_blocks": 3, "global_block_indices": [0, 8],
                                        "global_block_end_indices": [1, 9]}},
    },
    "hjson_sparse_attention_docs_paste": {
        # Python `None` in an hjson file is the quoteless string "None," (comma included)
        "0.18.9": {"sparse_attention": {"mode": "variable", "block": 16, "different_layout_per_head": True,
                                        "num_random_blocks": 0, "local_window_blocks": [4],
                                        "global_block_indices": [0], "global_block_end_indices": "None,",
                                        "attention": "unidirectional", "horizontal_global_attention": False},
                   "fp16_enabled": True},
    },
    "hjson_comments_zero2": {
        "0.19.8": {"zero_stage": 2, "bf16_enabled": True, "train_batch_size": 128,
                   "gradient_accumulation_steps": 4, "reduce_bucket_size": 500000000},
    },
    "clean_zero2": {"0.19.8": {"zero_stage": 2, "bf16_enabled": True, "gradient_clipping": 1.0}},
    "clean_zero3_offload_0198": {
        "0.19.8": {"zero_stage": 3, "bf16_enabled": True, "bf16_check_grad_overflow": True,
                   "gradient_clipping": 1.0, "offload_param_pin_memory": True, "offload_optimizer_pin_memory": True},
        # the same file under 0.18.9 gets what it spells out, too (the point of writing the 0.19 defaults down)
        "0.18.9": {"bf16_check_grad_overflow": True, "gradient_clipping": 1.0, "offload_param_pin_memory": True},
    },
}


# --------------------------------------------------------------------------------------------------------------
# Running DeepSpeed (one subprocess per version for everything in this module)
# --------------------------------------------------------------------------------------------------------------


def _load(name: str) -> dict:
    return json.loads((FIXTURE_DIR / f"{name}.json").read_text())


def _jobs() -> list[tuple[str, object, int]]:
    """(key, config-or-path, world size) for every DeepSpeedConfig run this module needs."""
    jobs = []
    for name, fx in FIXTURES.items():
        path = str(FIXTURE_DIR / f"{name}.json")
        if fx.filler:
            jobs.append((f"filled:{name}", fill_auto(_load(name), fx.world_size, fx.filler), fx.world_size))
            jobs.append((f"raw:{name}", path, fx.world_size))
        else:
            jobs.append((f"file:{name}", path, fx.world_size))
    for name in MALFORMED:
        jobs.append((f"file:{name}", str(FIXTURE_DIR / f"{name}.json"), 1))
    for (name, ws, _version) in EXTRA_WORLD_SIZE_RUNS:
        jobs.append((f"ws{ws}:{name}", str(FIXTURE_DIR / f"{name}.json"), ws))
    return jobs


def _needs(request, *versions: str) -> None:
    """Take the legacy_deepspeed fixture (DeepSpeed 0.18.9, installed on first use) when 0.18.9 is among `versions`."""
    if "0.18.9" in versions:
        request.getfixturevalue("legacy_deepspeed")


@lru_cache(maxsize=None)
def _results(version: str) -> dict[str, dict]:
    require(version)
    jobs = _jobs()
    # de-duplicate keys (EXTRA runs may be listed for both versions)
    unique = {}
    for key, cfg, ws in jobs:
        unique.setdefault(key, (cfg, ws))
    keys = list(unique)
    res = deepspeed_probe_many([unique[k][0] for k in keys], version, [unique[k][1] for k in keys])
    return dict(zip(keys, res))


def _outcome(r: dict) -> str:
    return outcome(r["accepted"], f"{r['exception']}: {r['message']}")


def _main_key(name: str) -> str:
    return f"filled:{name}" if FIXTURES[name].filler else f"file:{name}"


# --------------------------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------------------------


def test_every_fixture_file_is_pinned_and_listed_in_manifest():
    files = {p.stem for p in FIXTURE_DIR.glob("*.json")}
    assert files == set(FIXTURES) | set(MALFORMED), (
        f"unpinned: {sorted(files - set(FIXTURES) - set(MALFORMED))}, "
        f"missing files: {sorted(set(FIXTURES) | set(MALFORMED) - files)}")
    assert all(name.startswith("malformed_") for name in MALFORMED)
    assert not any(name.startswith("malformed_") for name in FIXTURES)
    manifest = MANIFEST.read_text()
    for name in files:
        assert f"`{name}.json`" in manifest, f"{name}.json has no row in MANIFEST.md"


def test_targets_and_fillers_are_sane():
    for name, fx in FIXTURES.items():
        assert fx.target in VERSIONS, name
        assert set(fx.expected) == set(VERSIONS), name
        has_auto = any(True for _ in _auto_paths(_load(name))) if not name.startswith("hjson_") else False
        if fx.filler:
            assert has_auto, f"{name} is marked HF/accelerate but has no 'auto' value"
            assert set(fx.raw_expected) == set(VERSIONS), name


@pytest.mark.deepspeed
@pytest.mark.parametrize("name", sorted(FIXTURES))
@pytest.mark.parametrize("version", VERSIONS)
def test_deepspeed_outcome_is_pinned(request, name, version):
    _needs(request, version)
    got = _outcome(_results(version)[_main_key(name)])
    r = _results(version)[_main_key(name)]
    assert got == FIXTURES[name].expected[version], f"{name} on {version}: {r['exception']}: {r['message']}"


@pytest.mark.deepspeed
@pytest.mark.parametrize("name", sorted(n for n, fx in FIXTURES.items() if fx.filler))
@pytest.mark.parametrize("version", VERSIONS)
def test_raw_auto_config_outcome(request, name, version):
    """The HF templates handed straight to DeepSpeed (no Trainer/accelerate in between)."""
    _needs(request, version)
    r = _results(version)[f"raw:{name}"]
    assert _outcome(r) == FIXTURES[name].raw_expected[version], f"{r['exception']}: {r['message']}"


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_target_version_outcome_matches_manifest_intent(name):
    """Every fixture written for a version is accepted by it, except the ones whose point is a rejection."""
    rejected_on_purpose = {
        "deepspeedexamples_zero_infinity_original", "deepspeedexamples_cifar_bf16_loss_scale",
        "mistake_fp16_and_bf16_enabled", "mistake_batch_arithmetic_world8", "mistake_removed_features_0198",
    }
    fx = FIXTURES[name]
    if name in rejected_on_purpose:
        assert fx.expected[fx.target] != ACC
    else:
        assert fx.expected[fx.target] == ACC


@pytest.mark.deepspeed
@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_fixture_rejected_by_json_and_by_deepspeed_loader(request, name):
    _needs(request, *VERSIONS)
    text = (FIXTURE_DIR / f"{name}.json").read_text()
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    hjson = pytest.importorskip("hjson")
    with pytest.raises(hjson.HjsonDecodeError):
        hjson.loads(text)
    for version in VERSIONS:
        if unavailable_reason(version):
            continue
        assert _outcome(_results(version)[f"file:{name}"]) == MALFORMED[name]


@pytest.mark.deepspeed
@pytest.mark.parametrize("run", sorted(EXTRA_WORLD_SIZE_RUNS), ids=lambda r: f"{r[0]}-ws{r[1]}-{r[2]}")
def test_world_size_dependent_outcomes(request, run):
    name, ws, version = run
    _needs(request, version)
    r = _results(version)[f"ws{ws}:{name}"]
    assert _outcome(r) == EXTRA_WORLD_SIZE_RUNS[run], f"{r['exception']}: {r['message']}"


@pytest.mark.deepspeed
@pytest.mark.parametrize(
    "name,version", sorted((n, v) for n, per in SILENT_EFFECTS.items() for v in per))
def test_silent_effect_of_accepted_config(request, name, version):
    _needs(request, version)
    r = _results(version)[_main_key(name)]
    assert r["accepted"], f"{name} was rejected by {version}: {r['exception']}: {r['message']}"
    want = SILENT_EFFECTS[name][version]
    got = {k: r["probe"].get(k) for k in want}
    assert got == want


def test_hjson_fixtures_need_deepspeeds_hjson_loader():
    """The hjson_* fixtures are not JSON; DeepSpeed reads them anyway (facts J02)."""
    for name in (n for n in FIXTURES if n.startswith("hjson_")):
        with pytest.raises(json.JSONDecodeError):
            json.loads((FIXTURE_DIR / f"{name}.json").read_text())


# ---- the substitution helper itself ----


def test_fill_auto_trainer_fills_known_keys_and_keeps_others():
    cfg = fill_auto(_load("hf_trainer_zero2_auto"), world_size=8)
    assert cfg["train_batch_size"] == 8 * 4 * 2
    assert cfg["train_micro_batch_size_per_gpu"] == 4 and cfg["gradient_accumulation_steps"] == 2
    assert cfg["optimizer"]["params"] == {"lr": 2e-5, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}
    assert cfg["scheduler"]["params"] == {"warmup_min_lr": 0, "warmup_max_lr": 2e-5, "warmup_num_steps": 100}
    assert cfg["bf16"]["enabled"] is True and cfg["fp16"]["enabled"] is False
    assert cfg["zero_optimization"]["reduce_bucket_size"] == 4096 * 4096
    assert not list(_auto_paths(cfg))
    # stage-3 only keys are not filled at stage 2 by the Trainer
    z2 = {"zero_optimization": {"stage": 2, "stage3_prefetch_bucket_size": "auto"}}
    assert fill_auto(z2, 1)["zero_optimization"]["stage3_prefetch_bucket_size"] == "auto"


def test_fill_auto_accelerate_fills_stage_and_refuses_leftovers():
    cfg = fill_auto(_load("accelerate_zero3_auto_stage"), world_size=8, filler="accelerate")
    z = cfg["zero_optimization"]
    assert z["stage"] == 3 and z["offload_param"]["device"] == "cpu" and z["offload_optimizer"]["device"] == "cpu"
    assert z["stage3_gather_16bit_weights_on_model_save"] is True
    with pytest.raises(ValueError, match="unresolved"):
        fill_auto({"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_sise": "auto"}}, 1, "accelerate")


def test_fill_auto_does_not_mutate_input():
    original = _load("hf_trainer_zero3_auto")
    snapshot = copy.deepcopy(original)
    fill_auto(original, 8)
    assert original == snapshot


def test_manifest_rows_name_known_target_versions():
    rows = [line for line in MANIFEST.read_text().splitlines() if line.startswith("| `")]
    assert len(rows) == len(FIXTURES) + len(MALFORMED)
    for line in rows:
        name = re.match(r"\| `([^`]+)\.json`", line).group(1)
        if name in FIXTURES:
            assert FIXTURES[name].target in line, f"MANIFEST row of {name} does not name target {FIXTURES[name].target}"
