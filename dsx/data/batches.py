"""A rank's batches: which samples step s gives each replica and micro-step, and the tensors the model takes.

Step s trains the global batch of samples [s*B, (s+1)*B), B = micro x accum x replicas; replica d takes samples
[s*B + d*micro*accum, ...), micro-step j the micro-batch after j*micro of them. The union is the same for every
split, so a step's mean loss (over the replicas) and its gradient are the same training whatever the split.
"""

from __future__ import annotations

import time

from dsx.data.spec import DataSpec
from dsx.data.synthetic import MarkovSource, RandomSource, _generator


def global_batch(micro: int, accum: int, replicas: int) -> int:
    return micro * accum * replicas


def sample_indices(step: int, replica: int, micro_step: int, micro: int, accum: int, replicas: int) -> range:
    """The global indices of the samples of one micro-batch."""
    first = step * global_batch(micro, accum, replicas) + replica * micro * accum + micro_step * micro
    return range(first, first + micro)


def source_of(spec: DataSpec, vocab: int):
    """The object whose sample(index, length) gives a sample's token ids."""
    if spec.source == "synthetic":
        return MarkovSource(vocab, spec.seed)
    if spec.source == "random":
        return RandomSource(vocab, spec.seed)
    from dsx.data.files import TokenWindows, open_stream

    return TokenWindows(open_stream(spec))


class Batches:
    """The micro-batches of one replica, step by step, on the CPU; `wait_s` is the time each step's took to make."""

    def __init__(self, spec: DataSpec, resolved, micro: int, accum: int, replica: int, replicas: int):
        from dsx.models import FAMILIES, MASK_FRACTION

        self.spec, self.resolved = spec, resolved
        self.micro, self.accum, self.replica, self.replicas = micro, accum, replica, replicas
        self.source = source_of(spec, resolved.token_vocab_size)
        self.masked = resolved.task != "causal-lm"
        self.mask_id = FAMILIES[resolved.family].mask_token_id
        self.masked_per_row = max(1, round(MASK_FRACTION * resolved.seq_len))
        self.wait_s: list[float] = []

    def step(self, step: int) -> list[dict]:
        """The `accum` micro-batches of step `step` for this replica (CPU tensors)."""
        started = time.perf_counter()
        batches = [self.micro_batch(sample_indices(step, self.replica, j, self.micro, self.accum, self.replicas))
                   for j in range(self.accum)]
        self.wait_s.append(time.perf_counter() - started)
        return batches

    def micro_batch(self, indices: range) -> dict:
        import torch

        seq = self.resolved.seq_len
        ids = torch.stack([self.source.sample(i, seq) for i in indices])
        if not self.masked:
            # no attention_mask: every position is real, so attention stays on the plain causal path
            return {"input_ids": ids, "labels": ids.clone()}
        # BERT-style: exactly round(15% of seq) positions of each sequence masked (at least one), drawn per sample
        order = torch.stack([torch.rand(seq, generator=_generator(self.spec.seed, i, "mask")).argsort()
                             for i in indices])
        mask = torch.zeros_like(ids, dtype=torch.bool)
        mask.scatter_(1, order[:, :self.masked_per_row], True)
        labels = torch.where(mask, ids, torch.full_like(ids, -100))
        inputs = torch.where(mask, torch.full_like(ids, self.mask_id), ids)
        return {"input_ids": inputs, "attention_mask": torch.ones_like(ids), "labels": labels}


def window_dataset(spec: DataSpec, vocab: int, seq_len: int, samples: int):
    """A torch Dataset of the first `samples` samples of `spec` ({"input_ids", "labels"} of seq_len ids each): the
    same token stream `dsx run` trains on, for a script of your own (a transformers Trainer, say), which shards it
    its own way."""
    import torch

    source = source_of(spec, vocab)

    class Windows(torch.utils.data.Dataset):
        def __len__(self):
            return samples

        def __getitem__(self, index):
            ids = source.sample(index, seq_len)
            return {"input_ids": ids, "labels": ids.clone()}

    return Windows()
