"""Cross-section rules about what happens once training runs: configs DeepSpeedConfig accepts that the engine then
stops early, or that the transformers Trainer refuses at the start of train() (dsx.lint.rules runs them with the
others)."""

from __future__ import annotations

from typing import Iterator

from dsx.lint.context import LintContext, as_dict, is_true
from dsx.lint.findings import Finding


def _positive_int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def autotuning_exits(data: dict, ctx: LintContext) -> Iterator[Finding]:
    """An enabled autotuning block is for the experiments `deepspeed --autotuning` launches: the engine ends the
    process with exit() once step end_profile_step + 1 is done (engine.py: `if self.autotuning_enabled() and
    self.global_steps == (self.autotuning_end_profile_step() + 1): self._autotuning_exit()`), status 0, no error."""
    from dsx.schema.autotuning import AutotuningConfig

    block = as_dict(data.get("autotuning"))
    if not is_true(block.get("enabled")):
        return
    fix = "remove the autotuning block from a training config; keep it only for `deepspeed --autotuning`"
    if is_true(as_dict(block.get("model_info")).get("profile")):
        yield Finding("autotuning.enabled", "error", "autotuning-exits",
                      "autotuning with model_info.profile makes the DeepSpeed engine write the model info and call "
                      "exit() at the end of the first forward pass: training stops there with exit status 0 and "
                      "no error", fix)
        return
    default = AutotuningConfig.model_fields["end_profile_step"].default  # DeepSpeed: END_PROFILE_STEP_DEFAULT 5
    end = block.get("end_profile_step", default)
    if not isinstance(end, int) or isinstance(end, bool) or end < 0:
        return  # a wrong type was reported by the section model
    given = "" if "end_profile_step" in block else ", the default"
    yield Finding("autotuning.enabled", "error", "autotuning-exits",
                  f"autotuning enabled makes the DeepSpeed engine call exit() once optimizer step {end + 1} is done "
                  f"(end_profile_step + 1, with end_profile_step {end}{given}): training stops there with exit "
                  "status 0 and no error, after writing the autotuning metrics file", fix)


def hf_fixed_train_batch(data: dict, ctx: LintContext) -> Iterator[Finding]:
    """A concrete train_batch_size beside an "auto" micro-batch or accumulation: the Trainer fills those from its
    arguments and then compares (transformers integrations/deepspeed.py, trainer_config_finalize raises "Please
    correct the following DeepSpeed config values that mismatch TrainingArguments values"). Whether it holds depends
    on arguments dsx cannot see: a warning."""
    train = _positive_int(data.get("train_batch_size"))
    filled = [n for n in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps") if n in ctx.filled_by_hf]
    if not ctx.hf or train is None or not filled:
        return
    micro = _positive_int(data.get("train_micro_batch_size_per_gpu"))
    accum = _positive_int(data.get("gradient_accumulation_steps"))
    if ctx.world_size is not None and train % (ctx.world_size * (micro or 1) * (accum or 1)):
        return  # no argument can make it hold: batch_arithmetic reports that as an error
    factors = [str(ctx.world_size) if ctx.world_size is not None else "world size",
               str(micro) if micro else "per_device_train_batch_size",
               str(accum) if accum else "gradient_accumulation_steps"]
    yield Finding("train_batch_size", "warning", "hf-fixed-train-batch",
                  f"train_batch_size {train} is fixed while {' and '.join(filled)} "
                  f"{'is' if len(filled) == 1 else 'are'} \"auto\": the Trainer fills "
                  f"{'it' if len(filled) == 1 else 'them'} from its arguments and refuses to train unless "
                  f"{' x '.join(factors)} = {train} (\"Please correct the following DeepSpeed config values that "
                  f"mismatch TrainingArguments values: - ds train_batch_size={train} vs hf train_batch_size "
                  "(calculated)=...\"; under accelerate alone, deepspeed.initialize asserts instead)",
                  'set train_batch_size to "auto": the Trainer computes it from the same arguments')
