"""Every real-config fixture gives exactly its pinned findings (path, severity, rule).

The fixtures (tests/fixtures/configs, see MANIFEST.md) are modelled on configs public projects ship and on mistakes
users reported; each entry: (target DeepSpeed, world size, goes through the HF Trainer/accelerate, findings).
What DeepSpeed itself does with each file is pinned in test_fixture_deepspeed_behaviour.py: together they show
which silent mistakes dsx catches.
"""

import re

import pytest

from conftest import ROOT
from dsx.lint.engine import lint
from dsx.lint.load import UnreadableConfig, read_config
from dsx.versions import Version

FIXTURES = ROOT / "tests/fixtures/configs"

PINNED = {
    "hf_trainer_zero2_auto": ("0.19.8", 8, True, [
        ("scheduler.params.warmup_num_steps", "warning", "hf-zero-warmup"),
    ]),
    "hf_trainer_zero3_auto": ("0.19.8", 8, True, [
        ("scheduler.params.warmup_num_steps", "warning", "hf-zero-warmup"),
    ]),
    "hf_zero3_offload_nvme": ("0.19.8", 8, True, [
        ("aio.thread_count", "error", "unknown-key"),
        ("scheduler.params.warmup_num_steps", "warning", "hf-zero-warmup"),
    ]),
    "accelerate_zero3_auto_stage": ("0.19.8", 8, True, [
        ("scheduler.params.warmup_num_steps", "warning", "hf-zero-warmup"),
    ]),
    "azureml_autotuning_bert_hf": ("0.19.8", 8, True, [
        ("gradient_clipping", "warning", "version-default"),
        ("autotuning.enabled", "error", "autotuning-exits"),
    ]),
    "llama_factory_zero3_offload": ("0.19.8", 8, True, [
        ("comms_config", "error", "unknown-key"),
        ("monitor_config", "error", "unknown-key"),
    ]),
    "axolotl_zero3_bf16_offload_all": ("0.19.8", 8, True, [
        ("bf16.check_grad_overflow", "warning", "version-default"),
    ]),
    "hf_trainer_zero3_legacy_2021": ("0.18.9", 8, False, [
        ("gradient_clipping", "warning", "version-default"),
        ("zero_optimization.stage3_gather_fp16_weights_on_model_save", "warning", "deprecated-key"),
    ]),
    "deepspeedexamples_bert_onebit_adam": ("0.18.9", 32, False, [
    ]),
    "zero_one_adam_with_freeze_step": ("0.18.9", 32, False, [
        ("optimizer.params.freeze_step", "error", "unknown-key"),
    ]),
    "onebit_lamb": ("0.18.9", 8, False, [
        ("optimizer.type", "warning", "onebit-precision"),
    ]),
    "sparse_attention_bslongformer": ("0.18.9", 16, False, [
        ("sparse_attention.attention", "error", "unknown-key"),
        ("sparse_attention.num_local_blocks", "error", "unknown-key"),
    ]),
    "moe_zero2": ("0.19.8", 8, False, [
        ("moe", "error", "unknown-key"),
        ("bf16.check_grad_overflow", "warning", "version-default"),
    ]),
    "megatron_gpt_pipeline_zero1": ("0.19.8", 2, False, [
        ("pipeline.stages", "warning", "dead-key"),
        ("pipeline.partition", "warning", "dead-key"),
    ]),
    "zero_infinity_nvme": ("0.19.8", 8, False, [
        ("optimizer.type", "warning", "adam-is-adamw"),
    ]),
    "deepspeedexamples_zero_infinity_original": ("0.19.8", 8, False, [
        ("zero_optimization.stage3_param_persitance_threshold", "error", "unknown-key"),
        ("aio.thread_count", "error", "unknown-key"),
    ]),
    "deepspeedexamples_cifar_bf16_loss_scale": ("0.19.8", 2, False, [
        ("bf16.loss_scale", "error", "unknown-key"),
        ("bf16.loss_scale_window", "error", "unknown-key"),
        ("bf16.hysteresis", "error", "unknown-key"),
        ("bf16.min_loss_scale", "error", "unknown-key"),
        ("bf16.initial_scale_power", "error", "unknown-key"),
        ("optimizer.type", "warning", "adam-is-adamw"),
        ("bf16.check_grad_overflow", "warning", "version-default"),
        ("zero_optimization.cpu_offload", "warning", "deprecated-key"),
        ("zero_optimization.allgather_partitions", "warning", "dead-key"),
        ("zero_optimization", "warning", "zero-off"),
    ]),
    "deepspeedexamples_megatron_zero2_cpu_offload": ("0.18.9", 4, False, [
        ("optimizer.type", "warning", "adam-is-adamw"),
        ("zero_optimization.cpu_offload", "warning", "deprecated-key"),
    ]),
    "mistake_typos_top_level": ("0.19.8", 8, False, [
        ("train_micro_batch_size", "error", "unknown-key"),
        ("gradient_accumulation_step", "error", "unknown-key"),
        ("gradient_clip", "error", "unknown-key"),
        ("zero_optimisation", "error", "unknown-key"),
        ("gradient_clipping", "warning", "version-default"),
    ]),
    "mistake_typos_in_dict_sections": ("0.19.8", 8, False, [
        ("optimizer.parmas", "error", "unknown-key"),
        ("activation_checkpointing.partitioned_activations", "error", "unknown-key"),
        ("flops_profiler.enable", "error", "unknown-key"),
        ("checkpoint.tag_validate", "error", "unknown-key"),
        ("bf16.check_grad_overflow", "warning", "version-default"),
    ]),
    "mistake_stage_auto_without_accelerate": ("0.19.8", 8, False, [
        ("fp16.enabled", "error", "auto-unfilled"),
        ("zero_optimization.stage", "error", "auto-unfilled"),
        ("zero_optimization.offload_optimizer.device", "error", "auto-unfilled"),
        ("zero_optimization.reduce_bucket_size", "error", "auto-unfilled"),
        ("zero_optimization.stage3_param_persistence_threshold", "error", "auto-unfilled"),
        ("zero_optimization.stage3_prefetch_bucket_sise", "error", "unknown-key"),
    ]),
    "mistake_offload_param_stage2": ("0.19.8", 4, False, [
        ("zero_optimization.offload_param", "error", "stage3-only"),
        ("zero_optimization.offload_optimizer.device", "error", "nvme-below-stage3"),
        ("bf16.check_grad_overflow", "warning", "version-default"),
    ]),
    "mistake_stage3_keys_at_stage2": ("0.19.8", 8, False, [
        ("zero_optimization.sub_group_size", "warning", "stage3-only"),
        ("zero_optimization.stage3_prefetch_bucket_size", "warning", "stage3-only"),
        ("zero_optimization.stage3_param_persistence_threshold", "warning", "stage3-only"),
        ("zero_optimization.stage3_max_live_parameters", "warning", "stage3-only"),
        ("zero_optimization.stage3_max_reuse_distance", "warning", "stage3-only"),
        ("zero_optimization.stage3_gather_16bit_weights_on_model_save", "warning", "stage3-only"),
        ("zero_optimization.zero_hpz_partition_size", "error", "stage3-only"),
        ("zero_optimization.zero_quantized_weights", "error", "stage3-only"),
        ("zero_optimization.zero_quantized_gradients", "error", "stage3-only"),
        ("bf16.check_grad_overflow", "warning", "version-default"),
    ]),
    "mistake_nvme_without_path": ("0.19.8", 8, False, [
        ("zero_optimization.offload_param.nvme_path", "error", "nvme-without-path"),
        ("zero_optimization.offload_optimizer.nvme_path", "error", "nvme-without-path"),
        ("bf16.check_grad_overflow", "warning", "version-default"),
    ]),
    "mistake_string_booleans": ("0.19.8", 8, False, [
        ("zero_allow_untested_optimizer", "error", "string-for-bool"),
        ("prescale_gradients", "error", "string-for-bool"),
        ("steps_per_print", "error", "string-for-number"),
        ("dataloader_drop_last", "error", "string-for-bool"),
        ("bf16.enabled", "error", "string-for-bool"),
        ("fp16.enabled", "error", "string-for-bool"),
        ("zero_optimization.contiguous_gradients", "error", "string-for-bool"),
        ("zero_optimization.overlap_comm", "error", "string-for-bool"),
    ]),
    "mistake_clipping_in_optimizer_zero_warmup": ("0.19.8", 8, False, [
        ("optimizer.params.max_grad_norm", "error", "unknown-key"),
        ("scheduler.params.warmup_num_steps", "error", "invalid-value"),
        ("bf16.check_grad_overflow", "warning", "version-default"),
        ("gradient_clipping", "error", "negative-clipping"),
    ]),
    "mistake_optimizer_tpye_orphan_scheduler": ("0.19.8", 2, False, [
        ("optimizer", "error", "invalid-value"),
        ("scheduler", "warning", "scheduler-without-optimizer"),
        ("bf16.check_grad_overflow", "warning", "version-default"),
    ]),
    "mistake_fp16_and_bf16_enabled": ("0.19.8", 8, False, [
        ("fp16.enabled", "error", "fp16-and-bf16"),
        ("bf16.check_grad_overflow", "warning", "version-default"),
    ]),
    "mistake_pipeline_zero3": ("0.19.8", 8, False, [
        ("pipeline.pipe_partitioned", "error", "string-for-bool"),
        ("pipeline.grad_partitioned", "error", "string-for-bool"),
        ("optimizer.type", "warning", "adam-is-adamw"),
        ("bf16.check_grad_overflow", "warning", "version-default"),
        ("pipeline", "error", "pipeline-with-zero"),
    ]),
    "mistake_removed_features_0198": ("0.19.8", 8, False, [
        ("amp", "error", "removed-feature"),
        ("elasticity", "error", "removed-feature"),
        ("sparse_attention", "error", "removed-feature"),
        ("compression_training", "error", "removed-feature"),
        ("optimizer.type", "warning", "adam-is-adamw"),
    ]),
    "mistake_onebit_adam_zero2": ("0.18.9", 8, False, [
        ("optimizer.params", "error", "invalid-value"),
        ("optimizer.type", "error", "onebit-with-zero"),
    ]),
    "mistake_lamb_amsgrad_static_loss_scale": ("0.19.8", 8, False, [
        ("optimizer.params", "error", "invalid-value"),
        ("fp16.loss_scale", "error", "lamb-static-loss-scale"),
    ]),
    "mistake_batch_arithmetic_world8": ("0.19.8", 8, False, [
        ("bf16.check_grad_overflow", "warning", "version-default"),
        ("train_batch_size", "error", "batch-arithmetic"),
    ]),
    "clean_zero2": ("0.19.8", 8, False, [
        ("bf16.check_grad_overflow", "warning", "version-default"),
    ]),
    "clean_zero3_offload_0198": ("0.19.8", 8, False, [
    ]),
    "hjson_comments_zero2": ("0.19.8", 8, False, [
        ("bf16.check_grad_overflow", "warning", "version-default"),
    ]),
    "hjson_sparse_attention_docs_paste": ("0.18.9", 8, False, [
        ("sparse_attention.global_block_end_indices", "error", "invalid-value"),
        ("sparse_attention.num_local_blocks", "error", "unknown-key"),
        ("sparse_attention.num_global_blocks", "error", "unknown-key"),
        ("sparse_attention.num_different_global_patterns", "error", "unknown-key"),
        ("sparse_attention.num_sliding_window_blocks", "error", "unknown-key"),
        ("optimizer.type", "warning", "adam-is-adamw"),
        ("gradient_clipping", "warning", "version-default"),
    ]),

}


def test_every_fixture_is_pinned():
    on_disk = {p.stem for p in FIXTURES.glob("*.json") if not p.stem.startswith("malformed")}
    assert on_disk == set(PINNED)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_fixture_findings(name):
    target, world, hf, expected = PINNED[name]
    loaded = read_config(FIXTURES / f"{name}.json")
    found = lint(loaded.data, target=Version(target), world_size=world, hf=hf, duplicate_keys=loaded.duplicate_keys)
    assert [(f.path, f.severity, f.code) for f in found] == expected


def test_clean_fixtures_have_no_errors():
    for name in ("clean_zero2", "clean_zero3_offload_0198", "hjson_comments_zero2", "zero_infinity_nvme"):
        assert all(severity != "error" for _, severity, _ in PINNED[name][3]), name


@pytest.mark.parametrize("name, where", [
    ("malformed_extra_closing_brace", ":27:1: not valid JSON (nor hjson): Extra data"),
    ("malformed_missing_brace", ":19:1: not valid JSON (nor hjson): Expecting ',' delimiter"),
])
def test_malformed_fixtures_are_unreadable_with_line_and_column(name, where):
    with pytest.raises(UnreadableConfig, match=re.escape(f"{name}.json{where}")):
        read_config(FIXTURES / f"{name}.json")
