"""Sparse attention that runs: DeepSpeed 0.18.9's `sparse_attention` block on today's stack.

- layouts.py: the [heads, nb, nb] block layouts of every mode, equal to 0.18.9's make_layout (pure torch).
- spec.py: what a run asks for (--sparse-attention, --sparse-set, a config's block) checked and resolved into the
  plan a rank follows (pydantic only: no torch).
- predict.py: when block-sparse FlexAttention beats dense SDPA, from measured H100 kernel times (mode `auto`).
- attention.py: the layout as FlexAttention BlockMask (CUDA) or a boolean SDPA mask (CPU), registered with
  transformers' AttentionInterface as "dsx_sparse" so GPT-2, Llama, BERT and ALBERT train with it.

Importing this package imports nothing heavy; torch and transformers are imported by layouts.py / attention.py.
"""
