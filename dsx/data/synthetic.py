"""The built-in sources, one sample at a time: each sample is drawn from its own generator, seeded by (seed, index),
so sample i is the same whichever rank, micro-batch or step draws it (dsx.data's promise).

The learnable source is a first-order Markov chain over ALPHABET token ids spread over the vocabulary (chosen by
the seed): from each symbol the next is one of four fixed steps around the alphabet, with probabilities 8/15,
4/15, 2/15, 1/15. A model first learns which 64 ids occur (the loss falls from ln(vocab) towards ln 64 = 4.16),
then each id's four successors (towards the entropy rate, ENTROPY_RATE = 1.14 nats per token). On gpt2-tiny (lr
1e-3, 8 sequences of 64 a step) the loss falls to 0.64 x its start in 30 steps. The chain is made without a loop:
the positions are a cumulative sum of the drawn steps, modulo the alphabet.
"""

from __future__ import annotations

import hashlib
import math

ALPHABET = 64
"""Symbols of the Markov source (fewer when the vocabulary is smaller)."""
STEP_WEIGHTS = (8, 4, 2, 1)
"""Relative probabilities of a symbol's four successors."""
ENTROPY_RATE = -sum(w / sum(STEP_WEIGHTS) * math.log(w / sum(STEP_WEIGHTS)) for w in STEP_WEIGHTS)
"""Nats per token the source cannot go below (1.14): what a perfect model's loss approaches."""


def sample_seed(seed: int, index: int, salt: str = "") -> int:
    """A 63-bit seed for sample `index` of a source seeded `seed` (distinct for every (seed, index, salt))."""
    digest = hashlib.blake2b(f"{seed}:{index}:{salt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def _generator(seed: int, index: int, salt: str = ""):
    import torch

    return torch.Generator().manual_seed(sample_seed(seed, index, salt))


class MarkovSource:
    """The learnable default (`--data synthetic`)."""

    def __init__(self, vocab: int, seed: int):
        import torch

        if vocab < 2:
            raise ValueError(f"a vocabulary of {vocab} token(s) cannot carry a Markov source")
        generator = torch.Generator().manual_seed(seed)
        size = min(ALPHABET, vocab)
        self.symbols = torch.randperm(vocab, generator=generator)[:size]
        # four distinct non-zero steps around the alphabet (fewer on a tiny alphabet)
        steps = torch.randperm(size - 1, generator=generator)[:len(STEP_WEIGHTS)] + 1
        self.steps = steps
        self.choice = torch.tensor([i for i, w in enumerate(STEP_WEIGHTS[:len(steps)]) for _ in range(w)])
        self.seed = seed

    def sample(self, index: int, length: int):
        """Sample `index`: `length` token ids (int64)."""
        import torch

        generator = _generator(self.seed, index)
        size = len(self.symbols)
        start = torch.randint(0, size, (1,), generator=generator)
        draws = torch.randint(0, len(self.choice), (length - 1,), generator=generator)
        positions = torch.cat([start, start + self.steps[self.choice[draws]].cumsum(0)]) % size
        return self.symbols[positions]


class RandomSource:
    """Uniform token ids (`--data random`): nothing to learn; the loss stays at ln(vocab)."""

    def __init__(self, vocab: int, seed: int):
        self.vocab = vocab
        self.seed = seed

    def sample(self, index: int, length: int):
        import torch

        return torch.randint(0, self.vocab, (length,), generator=_generator(self.seed, index), dtype=torch.long)
