"""The race's training script (issue 31): a transformers Trainer on one of dsx's model presets, on the tokens dsx
trains on, as a user's run_clm.py would be written. Both tools' winners are launched with it (`dsx launch -- python
bench/peers/autotuner/train.py ...`), and DeepSpeed's autotuner tunes it (`deepspeed --autotuning tune ...`).

    python bench/peers/autotuner/train.py --model gpt2-xl --seq_len 1024 [--data synthetic|PATH] \\
        --deepspeed ds.json --output_dir out --per_device_train_batch_size 8 --gradient_accumulation_steps 4 \\
        --max_steps 20 --bf16 --report_to none

The model is built from the preset's config (random weights, no download) with dropout as dsx's preset has it;
the data is dsx.data.window_dataset: the learnable synthetic stream by default, or the user's token file, so a
row of this script and a `dsx run` row train on the same tokens. With --output_dir it writes ran.json: the losses,
the steps' wall times after the first --skip_steps, and tokens/s over them (the harness's own clock, the same for
both winners).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import (AutoModelForCausalLM, HfArgumentParser, Trainer, TrainerCallback, TrainingArguments)
from transformers.integrations import is_deepspeed_zero3_enabled

from dsx.data.batches import window_dataset
from dsx.data.spec import parse_data
from dsx.models import resolve_model


@dataclass
class RaceArguments:
    model: str = field(default="gpt2-xl", metadata={"help": "a dsx preset (dsx models)"})
    seq_len: int = 1024
    data: str = field(default="synthetic", metadata={"help": "synthetic, random, or a token file / datasets folder"})
    data_dtype: str | None = None
    token_seed: int | None = field(default=None, metadata={"help": "seed of the synthetic source (dsx --data-seed; "
                                                                  "TrainingArguments owns --data_seed)"})
    skip_steps: int = field(default=3, metadata={"help": "steps left out of the timing (compile, warm-up)"})


class StepClock(TrainerCallback):
    """Wall time of every optimizer step, between device synchronisations."""

    def __init__(self):
        self.times: list[float] = []
        self._start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.times.append(time.perf_counter() - self._start)


def main() -> None:
    race, args = HfArgumentParser((RaceArguments, TrainingArguments)).parse_args_into_dataclasses()
    resolved = resolve_model(race.model, seq_len=race.seq_len)
    torch.manual_seed(args.seed)
    if torch.cuda.is_available() and not is_deepspeed_zero3_enabled():
        with torch.device(args.device):  # built where it trains: a 1.5B model's init on the host takes ~20 s
            model = AutoModelForCausalLM.from_config(resolved.hf_config)
    else:  # ZeRO-3: transformers builds it under deepspeed.zero.Init, partitioned as it is made
        model = AutoModelForCausalLM.from_config(resolved.hf_config)
    spec = parse_data(race.data, race.data_dtype, race.token_seed)
    world = max(args.world_size, 1)
    per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps * world
    samples = per_step * max(args.max_steps, 1)
    dataset = window_dataset(spec, resolved.token_vocab_size or resolved.vocab_size, race.seq_len, samples)
    clock = StepClock()
    trainer = Trainer(model=model, args=args, train_dataset=dataset, callbacks=[clock])
    result = trainer.train()
    if trainer.is_world_process_zero() and args.output_dir:
        timed = clock.times[race.skip_steps:]
        median = sorted(timed)[len(timed) // 2] if timed else None
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        Path(args.output_dir).mkdir(parents=True, exist_ok=True)
        Path(args.output_dir, "ran.json").write_text(json.dumps({
            "model": race.model, "seq_len": race.seq_len, "data": spec.label, "world_size": world,
            "micro_batch": args.per_device_train_batch_size, "grad_accum": args.gradient_accumulation_steps,
            "step_time_s": clock.times, "timed_steps": len(timed), "step_time_median_s": median,
            "tokens_per_s": per_step * race.seq_len / median if median else None, "losses": losses,
            "train_loss": result.metrics.get("train_loss"),
            "peak_allocated": torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None}))
    if torch.distributed.is_initialized():  # leave the group before exiting (a gloo rank can abort in teardown)
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
