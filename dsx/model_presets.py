"""The model presets dsx knows: transformers shapes (a config class's keyword arguments), their default sequence
length and where each shape comes from. Data only; dsx.models resolves, counts and builds them (`dsx models`
prints the table)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ModelPreset:
    name: str
    family: str
    """"gpt2" | "bert" | "albert" | "llama"."""
    task: str
    """"causal-lm" (labels = input_ids, transformers shifts them) | "masked-lm" (15% of positions masked)."""
    config: dict[str, Any]
    """Keyword arguments for the family's transformers config class."""
    seq_len: int
    """Default sequence length of the synthetic batches."""
    source: str
    """Where the shape comes from."""


@dataclass(frozen=True)
class Family:
    config_class: str
    """Name of the transformers config class."""
    task: str
    layers_key: str
    """The config attribute holding the number of layers (what `--set` should name)."""
    positions_key: str
    """The config attribute that bounds the sequence length."""
    learned_positions: bool
    """True when positions are a learned table (raising the limit adds parameters); False for RoPE."""
    mask_token_id: int | None = None
    """[MASK] id of the family's tokenizer (bert-base-uncased 103, albert-base-v2 4); masked LM only."""


FAMILIES: dict[str, Family] = {
    "gpt2": Family("GPT2Config", "causal-lm", "n_layer", "n_positions", True),
    "bert": Family("BertConfig", "masked-lm", "num_hidden_layers", "max_position_embeddings", True, 103),
    "albert": Family("AlbertConfig", "masked-lm", "num_hidden_layers", "max_position_embeddings", True, 4),
    "llama": Family("LlamaConfig", "causal-lm", "num_hidden_layers", "max_position_embeddings", False),
}

# Training runs never use the KV cache; GPT-2 and Llama build one by default, which costs time and memory.
_NO_CACHE = {"use_cache": False}
_GPT2 = {"vocab_size": 50257, "n_positions": 1024, **_NO_CACHE}
_BERT = {"vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2}
# What Llama-3's config.json files share (3.2-1B, 3.2-3B, 3-8B): vocabulary, tokens, norm epsilon, RoPE base.
_LLAMA3 = {"vocab_size": 128256, "rms_norm_eps": 1e-5, "bos_token_id": 128000, "eos_token_id": 128001,
           "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}, **_NO_CACHE}
_TINY = "tiny shape for CPU tests and smoke runs (2 cores: a step takes milliseconds); not a published model"


def _p(name: str, family: str, config: dict[str, Any], seq_len: int, source: str) -> ModelPreset:
    return ModelPreset(name, family, FAMILIES[family].task, config, seq_len, source)


MODELS: dict[str, ModelPreset] = {p.name: p for p in (
    # GPT-2: Radford et al. 2019, shapes as in the openai-community/gpt2* config.json files on the HF hub and in
    # nanoGPT's from_pretrained table (124M / 350M / 774M / 1558M). vocab 50257, 1024 positions, tied LM head.
    # The GPU baselines (/work/shared/gpu/README.md, nanoGPT) pad the vocab to 50304: pass vocab_pad=64.
    _p("gpt2", "gpt2", {**_GPT2, "n_layer": 12, "n_embd": 768, "n_head": 12}, 1024,
       "GPT-2 small (openai-community/gpt2 config.json): 12 layers, 768 hidden, 12 heads, vocab 50257"),
    _p("gpt2-medium", "gpt2", {**_GPT2, "n_layer": 24, "n_embd": 1024, "n_head": 16}, 1024,
       "GPT-2 medium (openai-community/gpt2-medium config.json): 24 layers, 1024 hidden, 16 heads; with vocab_pad "
       "64 it is the 354,871,296-parameter '345M' model of Megatron-LM (seed 001)"),
    _p("gpt2-large", "gpt2", {**_GPT2, "n_layer": 36, "n_embd": 1280, "n_head": 20}, 1024,
       "GPT-2 large (openai-community/gpt2-large config.json): 36 layers, 1280 hidden, 20 heads"),
    _p("gpt2-xl", "gpt2", {**_GPT2, "n_layer": 48, "n_embd": 1600, "n_head": 25}, 1024,
       "GPT-2 XL (openai-community/gpt2-xl config.json): 48 layers, 1600 hidden, 25 heads, 1.56B parameters"),
    # BERT: Devlin et al. 2018 (arXiv:1810.04805) Table/§3: BASE L=12 H=768 A=12, LARGE L=24 H=1024 A=16, FFN 4H,
    # 512 positions; vocab 30522 of google-bert/bert-base-uncased. Dropout 0.1 as in the released configs.
    _p("bert-base", "bert", {**_BERT, "num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
                              "intermediate_size": 3072}, 512,
       "BERT-base uncased (arXiv:1810.04805; google-bert/bert-base-uncased config.json), seq 512 as in seed 001"),
    _p("bert-large", "bert", {**_BERT, "num_hidden_layers": 24, "hidden_size": 1024, "num_attention_heads": 16,
                               "intermediate_size": 4096}, 512,
       "BERT-large uncased (arXiv:1810.04805; google-bert/bert-large-uncased config.json); the 24-layer, "
       "1024-hidden, 16-head model of seed 001"),
    # ALBERT-base: Lan et al. 2019 (arXiv:1909.11942) Table 1, albert/albert-base-v2 config.json, and seed 000
    # (vocab 30K, width = seq 512, 12 layers, hidden 768, FFN 3072, embedding 128, 12 heads). v2 has no dropout.
    # All 12 layers share ONE set of weights (num_hidden_groups=1): 11.2M parameters, BERT-base compute.
    # Seed 000's PyTorch runs used vocab 30522 (graykode/ALBERT-Pytorch): --set vocab_size=30522.
    _p("albert-base", "albert", {"vocab_size": 30000, "embedding_size": 128, "hidden_size": 768,
                                 "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
                                 "max_position_embeddings": 512, "num_hidden_groups": 1, "inner_group_num": 1,
                                 "hidden_act": "gelu_new", "hidden_dropout_prob": 0.0,
                                 "attention_probs_dropout_prob": 0.0}, 512,
       "ALBERT-base v2 (arXiv:1909.11942 Table 1; albert/albert-base-v2 config.json; seed 000): vocab 30000, "
       "embedding 128, 12 shared layers, hidden 768, FFN 3072, 12 heads, seq 512"),
    # Llama: dims of meta-llama/Llama-3.2-1B and -3B (config.json: GQA with 8 KV heads, vocab 128256, tied
    # embeddings, rope_theta 500000) and meta-llama/Llama-2-7b-hf (MHA, vocab 32000, untied). The llama3 RoPE
    # frequency scaling of 3.2 is left out: it changes no shape, FLOP or speed. Default seq 2048 (the models
    # allow 131072 / 4096) keeps activations of a benchmark step in range; pass seq_len to change it.
    _p("llama-1b", "llama", {**_LLAMA3, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                             "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072,
                             "tie_word_embeddings": True}, 2048,
       "Llama-3.2-1B dims (meta-llama/Llama-3.2-1B config.json): 16 layers, 2048 hidden, 32 heads / 8 KV heads, "
       "FFN 8192, vocab 128256, tied embeddings"),
    _p("llama-3b", "llama", {**_LLAMA3, "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28,
                             "num_attention_heads": 24, "num_key_value_heads": 8, "max_position_embeddings": 131072,
                             "tie_word_embeddings": True}, 2048,
       "Llama-3.2-3B dims (meta-llama/Llama-3.2-3B config.json): 28 layers, 3072 hidden, 24 heads / 8 KV heads, "
       "FFN 8192, vocab 128256, tied embeddings"),
    _p("llama-7b", "llama", {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
                             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
                             "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
                             **_NO_CACHE}, 2048,
       "Llama-2-7B dims (meta-llama/Llama-2-7b-hf config.json): 32 layers, 4096 hidden, 32 heads, FFN 11008, "
       "vocab 32000, untied LM head"),
    # Llama-3-8B: meta-llama/Meta-Llama-3-8B config.json (GQA with 8 KV heads, FFN 14336 = 3.5 x hidden, vocab
    # 128256, rope_theta 500000, untied LM head, 8192 positions).
    _p("llama-8b", "llama", {**_LLAMA3, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                             "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 8192,
                             "tie_word_embeddings": False}, 2048,
       "Llama-3-8B dims (meta-llama/Meta-Llama-3-8B config.json): 32 layers, 4096 hidden, 32 heads / 8 KV heads, "
       "FFN 14336, vocab 128256, rope_theta 500000, untied LM head"),
    # Tiny versions of each family: 2 layers, hidden 64, 4 heads (head dim 16), vocab 1000, seq 64; 128 positions
    # so a test can go past the default seq_len. Token ids of the real tokenizers kept where they fit in 1000.
    _p("gpt2-tiny", "gpt2", {"vocab_size": 1000, "n_positions": 128, "n_layer": 2, "n_embd": 64, "n_head": 4,
                             "bos_token_id": 999, "eos_token_id": 999, **_NO_CACHE}, 64, _TINY + " (GPT-2 layout)"),
    _p("bert-tiny", "bert", {"vocab_size": 1000, "max_position_embeddings": 128, "num_hidden_layers": 2,
                             "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 256}, 64,
       _TINY + " (BERT layout)"),
    _p("albert-tiny", "albert", {"vocab_size": 1000, "embedding_size": 32, "max_position_embeddings": 128,
                                 "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                 "intermediate_size": 256, "num_hidden_groups": 1, "inner_group_num": 1,
                                 "hidden_act": "gelu_new", "hidden_dropout_prob": 0.0,
                                 "attention_probs_dropout_prob": 0.0}, 64,
       _TINY + " (ALBERT layout: factorised embedding 32, shared layers)"),
    _p("llama-tiny", "llama", {"vocab_size": 1000, "max_position_embeddings": 128, "num_hidden_layers": 2,
                               "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
                               "intermediate_size": 176, "tie_word_embeddings": False, **_NO_CACHE}, 64,
       _TINY + " (Llama layout: GQA 4 heads / 2 KV heads like 3.2, untied LM head like Llama-2)"),
)}
