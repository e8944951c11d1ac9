"""What a run trains on, and the promise that makes two runs comparable step by step.

Sources (`--data` of run, sweep and check; dsx.data.spec):
  synthetic  the default: a seeded first-order Markov source over a small alphabet of the vocabulary
             (dsx.data.synthetic). A model learns it within tens of steps, so the loss falls from ln(vocab)
             towards the source's entropy rate, and a configuration that trains a different model shows.
  random     uniform token ids, dsx's data before the parity check: the loss cannot fall. Kept to show that the
             learnable source costs no throughput.
  PATH       your own tokens (dsx.data.files): a flat binary file of uint16/uint32 ids (the memmap layout
             nanoGPT-style scripts write), or a `datasets` dataset saved to disk with an `input_ids` column.
             Non-overlapping windows of the run's sequence length, read in order.

Every sample has a global index, and step s of a run whose global batch is B (micro-batch x grad-accum x
data-parallel replicas) trains samples [s*B, (s+1)*B): replica d takes its own contiguous shard of them
(dsx.data.batches.sample_indices). So the same seed and global batch give the same batches whatever the ZeRO
stage, offload, micro-batch / grad-accum split, pipeline or world size, and two rows' loss curves can be
compared step by step (dsx.parity).

dsx.data.spec imports neither torch nor numpy: the CLI reads it.
"""

from dsx.data.spec import DATA_WORDS, DataError, DataSpec

__all__ = ["DATA_WORDS", "DataError", "DataSpec"]
