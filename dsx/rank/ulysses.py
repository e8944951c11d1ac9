"""`--sequence-parallel N` on the ranks: DeepSpeed 0.19's Ulysses (UlyssesSPAttentionHF) and the training step.

Groups of N consecutive ranks (DeepSpeed's parallel_state_sp) share one data-parallel replica's micro-batch: each
feeds 1/N of the sequence with its position ids; registering Ulysses replaces the model's attention function with one
whose all-to-alls give every rank the whole sequence for 1/N of the heads. The labels are shifted over the whole
sequence before it is cut, so the token after each shard's last one is still its last label.

The loss: each rank's summed cross-entropy divided by the valid labels of the whole group (an all-reduce of one
count); summed over the group it is the group's mean loss. How DeepSpeed 0.19.8 then reduces the gradients depends
on the ZeRO stage (measured on 2 CPU ranks, N=2, against one process's gradient of the whole sequence): ZeRO 0, 1
and 2 sum the group's gradients (1.0000x, max |diff| 1.5e-10), ZeRO-3 averages them over every rank (0.5000x). So
at ZeRO-3 the backward pass gets the loss x N. The aggregation DeepSpeed's Ulysses tutorial shows (a differentiable
all-gather of the per-rank losses, so every rank holds the whole mean) is right at ZeRO-3 and gives N times the
gradient at ZeRO 0-2 (2.0000x): its backward sums the N copies before DeepSpeed sums again. Adam hides a constant
factor; gradient clipping does not (dsx check caught the 0.5x at ZeRO-3: "differs" by step 7).
"""

from __future__ import annotations

from dsx.rank.trainer import Trainer


def register(size: int, resolved, micro_batch: int, attn: str):
    """Set up DeepSpeed's sequence-parallel groups and route the model's attention (--attn's) through Ulysses, which
    wraps transformers' function of that name in place; the mpu for deepspeed.initialize."""
    import copy
    from types import SimpleNamespace

    from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF

    from dsx.models import ATTN_IMPLEMENTATIONS

    config = copy.deepcopy(resolved.hf_config)
    config.num_key_value_heads = resolved.num_kv_heads  # DeepSpeed reads it; GPT-2's config has no such key
    return UlyssesSPAttentionHF.register_with_transformers(
        SimpleNamespace(config=config), core_attn_implementation=ATTN_IMPLEMENTATIONS[attn],
        sequence_parallel_size=size,
        micro_batch_size=micro_batch, seq_length=resolved.seq_len, seq_length_is_variable=True)


class SequenceParallelTrainer(Trainer):
    """Trainer for Ulysses groups: one replica per group of `size` ranks."""

    def __init__(self, engine, mpu, size: int, tiled_loss: bool, zero3: bool):
        super().__init__(engine)
        self.group = mpu.get_sequence_parallel_group()
        self.size = size
        self.tiled_loss = tiled_loss
        self.backward_scale = size if zero3 else 1  # see the module's docstring

    def data_parallel(self) -> tuple[int, int]:
        import deepspeed.comm as dist

        return dist.get_rank() // self.size, dist.get_world_size() // self.size

    def step(self, batches: list[dict]) -> list:
        import torch

        from dsx.rank.tiled_loss import IGNORE_INDEX, shifted_labels

        rank = torch.distributed.get_rank(group=self.group)
        losses = []
        for batch in batches:
            ids = batch["input_ids"]
            length = ids.shape[1] // self.size
            shard = slice(rank * length, (rank + 1) * length)
            labels = shifted_labels(batch["labels"])[:, shard]
            positions = torch.arange(ids.shape[1], device=ids.device).expand(ids.shape[0], -1)[:, shard]
            count = (labels != IGNORE_INDEX).sum()
            total = count.clone()
            torch.distributed.all_reduce(total, group=self.group)
            if self.tiled_loss:  # dsx.rank.tiled_loss's module: the mean over this shard's labels
                output = self.engine(input_ids=ids[:, shard], position_ids=positions, shift_labels=labels)
                shard_sum = output.loss * count
            else:
                logits = self.engine(input_ids=ids[:, shard], position_ids=positions).logits
                shard_sum = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                              labels.reshape(-1), ignore_index=IGNORE_INDEX,
                                                              reduction="sum")
            loss = shard_sum / total.clamp(min=1)
            self.engine.backward(loss * self.backward_scale)
            with torch.no_grad():
                self.engine.step()
            losses.append(loss.detach())
        return losses

    def step_loss(self, losses: list) -> float:
        """The step's mean loss: each rank holds its shard's share of its group's, so the sum over every rank, over
        the replicas."""
        import torch

        value = torch.stack([x.float() for x in losses]).mean()
        torch.distributed.all_reduce(value)
        return float(value.item()) / self.data_parallel()[1]
