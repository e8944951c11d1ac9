"""One behaviour of `dsx validate` per test: a small config in, the exact finding out."""

import pytest

from dsx.lint.engine import lint
from dsx.versions import Version

NEW, OLD = Version("0.19.8"), Version("0.18.9")

# A clean base every test starts from: valid for both 0.18.9 and 0.19.8, no warnings.
BASE = {
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 1,
    "bf16": {"enabled": True, "check_grad_overflow": True},
    "zero_optimization": {"stage": 2},
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
    "gradient_clipping": 1.0,
}


def config(**changes):
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def run(cfg, **kw):
    kw.setdefault("target", NEW)
    return lint(cfg, **kw)


def one(cfg, **kw):
    found = run(cfg, **kw)
    assert len(found) == 1, [f.render() for f in found]
    return found[0]


def codes(cfg, **kw):
    return [(f.path, f.severity, f.code) for f in run(cfg, **kw)]


def test_base_config_is_clean_for_both_versions():
    assert run(BASE) == [] and run(BASE, target=OLD) == []


# ---- unknown keys and typos


def test_top_level_typo_names_the_right_key():
    f = one(config(zero_optimisation={"stage": 3}))
    assert (f.path, f.code, f.message, f.fix) == (
        "zero_optimisation", "unknown-key", "unknown key 'zero_optimisation': DeepSpeed silently ignores it",
        "did you mean 'zero_optimization'?")


def test_typo_in_dict_read_section_is_an_error():
    f = one(config(optimizer={"type": "AdamW", "parmas": {"lr": 1e-4}}))
    assert (f.path, f.fix) == ("optimizer.parmas", "did you mean 'params'?")


def test_typo_in_pydantic_section_says_deepspeed_rejects_it():
    f = one(config(zero_optimization={"stage": 3, "stage3_max_live_paramters": 1}))
    assert f.message == "unknown key 'stage3_max_live_paramters': DeepSpeed rejects the config"
    assert f.fix == "did you mean 'stage3_max_live_parameters'?"


def test_misspelled_key_set_to_auto_is_caught():
    f = one(config(zero_optimization={"stage": 3, "stage3_prefetch_bucket_sise": "auto"}))
    assert f.code == "unknown-key"
    assert "drops keys set to \"auto\" before checking names" in f.message


def test_docs_spelling_thread_count_points_to_intra_op_parallelism():
    nvme = {"device": "nvme", "nvme_path": "/nvme", "pin_memory": True}
    f = one(config(zero_optimization={"stage": 3, "offload_param": nvme}, aio={"thread_count": 2}))
    assert f.fix.startswith("use intra_op_parallelism")


def test_max_grad_norm_in_optimizer_params_points_to_gradient_clipping():
    f = one(config(optimizer={"type": "AdamW", "params": {"lr": 1e-4, "max_grad_norm": 1.0}}))
    assert (f.path, f.code) == ("optimizer.params.max_grad_norm", "unknown-key")
    assert f.fix.startswith("remove it and set the top-level `gradient_clipping` instead")


def test_dotted_top_level_key_is_explained():
    f = one(config(**{"zero_optimization.reduce_bucket_size": 5}))
    assert f.fix.startswith('nest it: {"zero_optimization": {"reduce_bucket_size": ...}}')


# ---- "auto"


def test_auto_stage_without_hf_turns_zero_off():
    f = one(config(zero_optimization={"stage": "auto"}))
    assert (f.path, f.code) == ("zero_optimization.stage", "auto-unfilled")
    assert f.message.endswith("it is silently dropped: stage 0, ZeRO is off")


def test_auto_is_fine_where_hf_fills_it():
    assert run(config(train_micro_batch_size_per_gpu="auto", gradient_accumulation_steps="auto",
                      gradient_clipping="auto", bf16={"enabled": "auto", "check_grad_overflow": True}), hf=True) == []


def test_auto_where_nothing_fills_it_is_an_error_even_with_hf():
    f = one(config(zero_optimization={"stage": 2, "overlap_comm": "auto"}), hf=True)
    assert (f.path, f.code) == ("zero_optimization.overlap_comm", "auto-unfilled")


def test_auto_where_deepspeed_takes_it_is_fine():
    assert run(config(zero_optimization={"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                                         "zenflow": {"select_strategy": "auto"}})) == []


# ---- types


def test_false_string_for_a_top_level_bool():
    f = one(config(prescale_gradients="false"))
    assert (f.code, f.message, f.fix) == (
        "string-for-bool", 'expected true or false, got the string "false" (DeepSpeed reads any non-empty string '
                           'as true)', "write false without quotes")


def test_string_for_a_number():
    f = one(config(steps_per_print="10"))
    assert (f.code, f.message) == ("string-for-number", 'expected a number, got the string "10"')


def test_integral_float_is_accepted_for_an_int():
    assert run(config(zero_optimization={"stage": 2, "reduce_bucket_size": 5e8})) == []


# ---- versions


def test_removed_block_names_the_replacement():
    f = one(config(sparse_attention={"mode": "fixed"}))
    assert (f.code, f.message) == ("removed-feature", "'sparse_attention' was removed in DeepSpeed 0.19; "
                                                      "DeepSpeed 0.19.8 does not support it")
    assert f.fix.startswith("use dsx run, which applies the block itself")


def test_removed_block_is_valid_for_0_18():
    assert run(config(sparse_attention={"mode": "fixed"}), target=OLD) == []


def test_removed_optimizer_for_0_19():
    found = codes(config(optimizer={"type": "OneBitAdam", "params": {"lr": 1e-4, "freeze_step": 100}},
                         zero_optimization={"stage": 0}, fp16={"enabled": True}, bf16=None))
    assert ("optimizer.type", "error", "removed-feature") in found


def test_new_key_is_refused_for_0_18():
    f = one(config(log_level="info"), target=OLD)
    assert (f.code, f.message) == ("not-in-target", "'log_level' is new in DeepSpeed 0.19.0; DeepSpeed 0.18.9 does "
                                                    "not know it")


# ---- ZeRO stage rules


def test_offload_param_at_stage_2_is_an_error():
    f = one(config(zero_optimization={"stage": 2, "offload_param": {"device": "cpu", "pin_memory": True}}))
    assert (f.code, f.severity) == ("stage3-only", "error")
    assert "does NOT offload parameters" in f.message


def test_stage3_tuning_key_at_stage_2_is_a_warning():
    f = one(config(zero_optimization={"stage": 2, "stage3_max_live_parameters": 1000}))
    assert (f.path, f.severity, f.code) == ("zero_optimization.stage3_max_live_parameters", "warning", "stage3-only")


def test_zero_plus_plus_at_stage_2_is_an_error():
    f = one(config(zero_optimization={"stage": 2, "zero_quantized_gradients": True}))
    assert (f.severity, f.code) == ("error", "stage3-only")


def test_nvme_offload_without_path():
    f = one(config(zero_optimization={"stage": 3, "offload_param": {"device": "nvme", "pin_memory": True}}))
    assert (f.path, f.code) == ("zero_optimization.offload_param.nvme_path", "nvme-without-path")


def test_nvme_optimizer_offload_at_stage_2_is_really_cpu():
    f = one(config(zero_optimization={"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme",
                                                                        "pin_memory": True}}))
    assert f.code == "nvme-below-stage3"


def test_offload_at_stage_0():
    f = one(config(zero_optimization={"stage": 0, "offload_optimizer": {"device": "cpu", "pin_memory": True}}))
    assert f.code == "offload-without-zero"


# ---- optimizer and schedule


def test_onebit_with_zero():
    found = codes(config(optimizer={"type": "OneBitAdam", "params": {"lr": 1e-4}}, fp16={"enabled": True}, bf16=None),
                  target=OLD)
    assert found == [("optimizer.type", "error", "onebit-with-zero")]


def test_lamb_with_zero_needs_the_untested_flag():
    f = one(config(optimizer={"type": "Lamb", "params": {"lr": 1e-3}}))
    assert f.code == "untested-optimizer"


def test_scheduler_without_optimizer():
    f = one(config(optimizer=None, scheduler={"type": "WarmupLR", "params": {"warmup_num_steps": 10}}))
    assert (f.path, f.severity, f.code) == ("scheduler", "warning", "scheduler-without-optimizer")


def test_warmup_num_steps_zero():
    found = run(config(scheduler={"type": "WarmupLR", "params": {"warmup_num_steps": 0}}))
    assert [(f.path, f.code) for f in found] == [("scheduler.params.warmup_num_steps", "invalid-value")]


def test_adam_with_weight_decay_warns_about_adamw():
    f = one(config(optimizer={"type": "Adam", "params": {"lr": 1e-4, "weight_decay": 0.1}}))
    assert f.code == "adam-is-adamw"


# ---- precision and defaults


def test_fp16_and_bf16_together():
    found = codes(config(fp16={"enabled": True}))
    assert ("fp16.enabled", "error", "fp16-and-bf16") in found


def test_missing_gradient_clipping_warns_about_the_changed_default():
    f = one(config(gradient_clipping=None))
    assert (f.severity, f.code, f.message) == (
        "warning", "version-default",
        "not set: DeepSpeed 0.19 clips gradients at norm 1.0 by default, 0.18 did not clip at all")


def test_negative_gradient_clipping():
    assert one(config(gradient_clipping=-1.0)).code == "negative-clipping"


def test_offload_without_pin_memory_warns():
    f = one(config(zero_optimization={"stage": 2, "offload_optimizer": {"device": "cpu"}}))
    assert (f.path, f.code) == ("zero_optimization.offload_optimizer.pin_memory", "version-default")


# ---- batch


def test_batch_arithmetic_against_world_size():
    f = one(config(train_batch_size=64), world_size=8)
    assert f.message == ("train_batch_size 64 != micro-batch 4 x gradient accumulation 1 x world size 8 = 32 "
                         "(deepspeed.initialize asserts)")
    assert f.fix == "set train_batch_size to 32, or leave it out"


def test_batch_that_holds_for_some_world_size_is_fine_without_one():
    assert run(config(train_batch_size=32)) == []


def test_batch_that_no_world_size_fixes():
    assert one(config(train_batch_size=30)).code == "batch-arithmetic"


def test_a_concrete_train_batch_must_divide_by_the_concrete_micro_batch_when_the_trainer_fills_the_accumulation():
    f = one(config(train_batch_size=3, train_micro_batch_size_per_gpu=2, gradient_accumulation_steps="auto"),
            world_size=2, hf=True)
    assert (f.path, f.code, f.message) == ("train_batch_size", "batch-arithmetic",
                                           "train_batch_size 3 is not divisible by train_micro_batch_size_per_gpu 2 x "
                                           "world size 2")


def test_a_concrete_train_batch_must_divide_by_the_world_size_when_the_trainer_fills_the_rest():
    f = one(config(train_batch_size=6, train_micro_batch_size_per_gpu="auto", gradient_accumulation_steps="auto"),
            world_size=4, hf=True)
    assert (f.code, f.message) == ("batch-arithmetic", "train_batch_size 6 is not divisible by the world size 4")


def test_auto_batch_sizes_that_can_hold_have_no_error():
    assert codes(config(train_batch_size=8, train_micro_batch_size_per_gpu=2, gradient_accumulation_steps="auto"),
                 world_size=2, hf=True) == [("train_batch_size", "warning", "hf-fixed-train-batch")]
    assert run(config(train_batch_size="auto", train_micro_batch_size_per_gpu=3, gradient_accumulation_steps="auto"),
               world_size=2, hf=True) == []


def test_a_train_batch_alone_must_divide_by_the_world_size():
    f = one(config(train_batch_size=10, train_micro_batch_size_per_gpu=None, gradient_accumulation_steps=None),
            world_size=4)
    assert f.message == "train_batch_size 10 is not divisible by the world size 4"


def test_no_batch_at_all():
    assert one(config(train_micro_batch_size_per_gpu=None, gradient_accumulation_steps=None)).code == "batch-missing"


# ---- no-op blocks, deprecations


def test_pipeline_with_zero_3():
    found = codes(config(zero_optimization={"stage": 3}, pipeline={"activation_checkpoint_interval": 1}))
    assert found == [("pipeline", "error", "pipeline-with-zero")]


def test_pipeline_stages_is_dead():
    f = one(config(zero_optimization={"stage": 1}, pipeline={"stages": 4}))
    assert (f.path, f.code) == ("pipeline.stages", "dead-key")


def test_activation_checkpointing_that_enables_nothing():
    f = one(config(activation_checkpointing={"number_checkpoints": 4}))
    assert f.code == "no-op-block"


def test_activation_checkpointing_under_the_trainer():
    f = one(config(activation_checkpointing={"partition_activations": True}), hf=True)
    assert f.fix == "use TrainingArguments(gradient_checkpointing=True) instead"


def test_deprecated_cpu_offload():
    f = one(config(zero_optimization={"stage": 2, "cpu_offload": True}))
    assert (f.code, f.fix) == ("deprecated-key", 'use offload_optimizer: {"device": "cpu"}')


def test_deprecated_gather_fp16_spelling():
    f = one(config(zero_optimization={"stage": 3, "stage3_gather_fp16_weights_on_model_save": True}))
    assert f.fix == "use stage3_gather_16bit_weights_on_model_save"


def test_datastates_enabled_false_still_enables_it():
    assert one(config(datastates_ckpt={"enabled": False})).code == "datastates-enabled"


def test_duplicate_keys_reported_from_the_loader():
    f = lint(BASE, target=NEW, duplicate_keys=["zero_optimization.stage"])[0]
    assert (f.path, f.code) == ("zero_optimization.stage", "duplicate-key")


def test_every_problem_is_reported_not_just_the_first():
    cfg = config(zero_optimisation={"stage": 3}, prescale_gradients="false", gradient_clipping=-1,
                 sparse_attention={"mode": "fixed"})
    assert sorted(f.code for f in run(cfg)) == ["negative-clipping", "removed-feature", "string-for-bool",
                                                "unknown-key"]


def test_lamb_with_static_loss_scale():
    f = one(config(optimizer={"type": "Lamb", "params": {"lr": 1e-3}}, zero_optimization={"stage": 0},
                   fp16={"enabled": True, "loss_scale": 1024}, bf16=None))
    assert (f.path, f.code) == ("fp16.loss_scale", "lamb-static-loss-scale")


def test_reduce_bucket_size_zero_is_only_fine_for_0_18():
    cfg = config(zero_optimization={"stage": 2, "reduce_bucket_size": 0})
    assert one(cfg).code == "invalid-value" and run(cfg, target=OLD) == []


def test_unknown_optimizer_param_fails_at_initialize():
    f = one(config(optimizer={"type": "AdamW", "params": {"lr": 1e-4, "lrr": 1.0}}))
    assert f.message == ("unknown key 'lrr': DeepSpeed accepts the config, then deepspeed.initialize() fails when it "
                         "passes the key to the constructor")
    assert f.fix == "did you mean 'lr'?"


def test_zenflow_at_stage_2_needs_cpu_offload():
    f = one(config(zero_optimization={"stage": 2, "zenflow": {"topk_ratio": 0.1}}))
    assert (f.path, f.code) == ("zero_optimization.zenflow", "zenflow-needs-offload")


def test_compute_grad_norm_off_needs_no_clipping_and_no_offload():
    found = codes(config(zero_optimization={"stage": 2, "compute_grad_norm": False,
                                            "offload_optimizer": {"device": "cpu", "pin_memory": True}}))
    assert found == [("zero_optimization.compute_grad_norm", "error", "grad-norm-needed")] * 2


def test_compute_grad_norm_off_with_zero_clipping_is_fine():
    assert run(config(zero_optimization={"stage": 2, "compute_grad_norm": False}, gradient_clipping=0.0)) == []


def test_compile_pass_new_in_0_19_is_refused_for_0_18():
    cfg = config(compile={"deepcompile": True, "passes": ["autotp"]})
    f = one(cfg, target=OLD)
    assert (f.path, f.code) == ("compile.passes", "not-in-target")
    assert not [x for x in run(cfg) if x.code == "not-in-target"]


def test_a_comms_logger_block_with_enabled_false_is_flagged_because_deepspeed_logs_anyway():
    finding = one(config(comms_logger={"enabled": False}))
    assert (finding.path, finding.severity, finding.code) == ("comms_logger.enabled", "warning", "comms-logger-on")
    assert finding.message.startswith("comms_logger.enabled false does not turn the logger off")
    assert run(config(comms_logger={"enabled": True})) == []


# ---- issue 34: what the engine or the Trainer does at run time; blocks and keys nothing reads


def test_autotuning_enabled_stops_training_after_end_profile_step_plus_one():
    f = one(config(autotuning={"enabled": True}))
    assert (f.path, f.severity, f.code) == ("autotuning.enabled", "error", "autotuning-exits")
    assert f.message == ("autotuning enabled makes the DeepSpeed engine call exit() once optimizer step 6 is done "
                         "(end_profile_step + 1, with end_profile_step 5, the default): training stops there with "
                         "exit status 0 and no error, after writing the autotuning metrics file")
    assert f.fix == "remove the autotuning block from a training config; keep it only for `deepspeed --autotuning`"


def test_autotuning_exit_step_follows_end_profile_step():
    f = one(config(autotuning={"enabled": True, "start_profile_step": 2, "end_profile_step": 10}))
    assert "exit() once optimizer step 11 is done (end_profile_step + 1, with end_profile_step 10)" in f.message


def test_autotuning_model_info_profile_stops_after_the_first_forward():
    f = one(config(autotuning={"enabled": True, "model_info": {"profile": True}}))
    assert "call exit() at the end of the first forward pass" in f.message


@pytest.mark.parametrize("stages, shown", [([0, 1, 2, 3], "[0, 1, 2, 3]"), ("all", '"all"')])
def test_a_list_of_stages_is_named_as_the_autotuners_search_space(stages, shown):
    findings = run(config(zero_optimization={"stage": stages}))
    assert [(f.path, f.severity, f.message) for f in findings] == [(
        "zero_optimization.stage", "error",
        f"stage {shown} is DeepSpeed's autotuner's search space (`deepspeed --autotuning tune` tries each stage); "
        "deepspeed.initialize refuses it: a training config takes one of the integers 0, 1, 2, 3")]


def test_autotuning_disabled_is_clean():
    assert run(config(autotuning={"enabled": False, "fast": True})) == []


def test_fixed_train_batch_with_trainer_filled_micro_and_accumulation():
    f = one(config(train_batch_size=32, train_micro_batch_size_per_gpu="auto", gradient_accumulation_steps="auto"),
            hf=True)
    assert (f.path, f.severity, f.code) == ("train_batch_size", "warning", "hf-fixed-train-batch")
    assert f.message == (
        'train_batch_size 32 is fixed while train_micro_batch_size_per_gpu and gradient_accumulation_steps are '
        '"auto": the Trainer fills them from its arguments and refuses to train unless world size x '
        'per_device_train_batch_size x gradient_accumulation_steps = 32 ("Please correct the following DeepSpeed '
        'config values that mismatch TrainingArguments values: - ds train_batch_size=32 vs hf train_batch_size '
        '(calculated)=..."; under accelerate alone, deepspeed.initialize asserts instead)')
    assert f.fix == 'set train_batch_size to "auto": the Trainer computes it from the same arguments'


def test_fixed_train_batch_names_the_known_factors():
    f = one(config(train_batch_size=32, train_micro_batch_size_per_gpu=4, gradient_accumulation_steps="auto"),
            hf=True, world_size=8)
    assert "refuses to train unless 8 x 4 x gradient_accumulation_steps = 32 (" in f.message


def test_fixed_train_batch_no_argument_can_match_is_the_arithmetic_error_alone():
    assert codes(config(train_batch_size=30, train_micro_batch_size_per_gpu="auto",
                        gradient_accumulation_steps="auto"), hf=True, world_size=8) == [
        ("train_batch_size", "error", "batch-arithmetic")]


def test_aio_block_without_nvme_offload_is_unused():
    f = one(config(aio={"block_size": 1048576, "queue_depth": 8}))
    assert (f.path, f.severity, f.code) == ("aio", "warning", "aio-unused")
    assert f.message == ('nothing reads this block: DeepSpeed uses aio only for offload device "nvme" (ZeRO stage 3) '
                         "and for checkpoint.writer, and this config has neither")


def test_unused_aio_block_with_a_key_deepspeed_does_not_read_is_one_finding():
    f = one(config(aio={"block_size": 1048576, "thread_count": 1}))
    assert f.code == "aio-unused"
    assert f.message.endswith("and this config has neither; so what is wrong inside it is moot (thread_count)")


def test_aio_block_for_the_checkpoint_writer_is_used():
    assert run(config(aio={"queue_depth": 8}, checkpoint={"writer": {"type": "FAST"}})) == []


def test_zero_options_at_stage_0_are_one_finding():
    zero = {"stage": 0, "overlap_comm": True, "contiguous_gradients": True, "reduce_bucket_size": 50000000,
            "allgather_bucket_size": 50000000, "reduce_scatter": True, "round_robin_gradients": True}
    f = one(config(zero_optimization=zero))
    assert (f.path, f.severity, f.code) == ("zero_optimization", "warning", "zero-off")
    assert f.message == ("ZeRO is off (stage 0): DeepSpeed accepts and ignores overlap_comm, contiguous_gradients, "
                         "reduce_bucket_size, allgather_bucket_size, reduce_scatter, round_robin_gradients")


def test_allgather_bucket_size_at_stage_0_is_read_by_a_bf16_pipeline():
    zero = {"stage": 0, "allgather_bucket_size": 50000000, "overlap_comm": True}
    f = one(config(zero_optimization=zero, pipeline={"activation_checkpoint_interval": 0}))
    assert f.message == "ZeRO is off (stage 0): DeepSpeed accepts and ignores overlap_comm"


def test_contiguous_checkpointing_without_count_is_a_warning_configure_arguments_can_fill():
    f = one(config(activation_checkpointing={"partition_activations": True, "contiguous_memory_optimization": True}))
    assert (f.path, f.severity, f.code) == ("activation_checkpointing.contiguous_memory_optimization", "warning",
                                            "checkpointing-configure")
    assert f.message == ('without number_checkpoints, deepspeed.checkpointing.configure() asserts "Must specify the '
                         'number of layers with contiguous memory checkpointing" unless the script passes '
                         "num_checkpoints= to it (Megatron-DeepSpeed passes its layer count)")


def test_contiguous_checkpointing_under_the_trainer_is_moot():
    block = {"contiguous_memory_optimization": True, "partitioned_activations": True}
    f = one(config(activation_checkpointing=block), hf=True)
    assert (f.path, f.severity, f.code) == ("activation_checkpointing", "warning", "no-op-block")
    assert f.message == ("the transformers Trainer never applies this block (it does not call "
                         "deepspeed.checkpointing.configure); so what is wrong inside it is moot "
                         "(partitioned_activations)")


def test_offload_param_without_a_device_below_stage_3_is_a_warning():
    f = one(config(zero_optimization={"stage": 2, "offload_param": {"device": "none"}}))
    assert (f.severity, f.message) == ("warning", "offload_param with device none offloads nothing; it only applies "
                                                  "to ZeRO stage 3 and is ignored at stage 2")


def test_offload_param_device_filled_by_accelerate_below_stage_3_is_a_warning():
    f = one(config(zero_optimization={"stage": 2, "offload_param": {"device": "auto", "pin_memory": True}}), hf=True)
    assert (f.severity, f.code) == ("warning", "stage3-only")
    assert "if accelerate fills its \"auto\" device with cpu or nvme, DeepSpeed does NOT offload" in f.message
