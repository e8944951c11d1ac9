"""Model presets for `dsx run` and `dsx models` (their shapes: dsx.model_presets), resolved and built with random init.

Every model is made from a transformers config class (GPT2Config, BertConfig, AlbertConfig, LlamaConfig) and
`AutoModelFor{CausalLM,MaskedLM}.from_config`: random weights, never a hub download, so a run needs no network
and no tokenizer. Batches are synthetic token ids (`synthetic_batch`).

Importing this module is cheap: torch and transformers are imported inside the functions that need them, so
`dsx --help` and argument parsing can read `MODELS` without paying for them.

Parameter counts (`count_params`) build the model on the meta device (no memory, no init: llama-7b counts in
about a second) and count like transformers' `model.num_parameters()`: every distinct parameter once, so a tied
input embedding / LM head matrix counts ONCE (GPT-2: 124,439,808).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from dsx.model_presets import FAMILIES, MODELS, ModelPreset  # the presets; read from here too

if TYPE_CHECKING:  # pragma: no cover
    import torch



class ModelError(ValueError):
    """A model request that cannot be honoured: the message says what to change."""


# `--attn` names -> transformers attn_implementation; "dsx_sparse" is dsx.sparse's (a rank with a sparse_attention
# plan builds with it; not an --attn choice).
ATTN_IMPLEMENTATIONS = {"eager": "eager", "sdpa": "sdpa", "flash": "flash_attention_2", "dsx_sparse": "dsx_sparse"}

MASK_FRACTION = 0.15
"""Share of positions masked per sequence in masked-LM batches (BERT's 15%)."""


@dataclass(frozen=True)
class ResolvedModel:
    """A preset with overrides applied: everything needed to build the model and its batches.

    Re-resolving from (preset.name, overrides, seq_len, vocab_pad) gives the same model on every rank."""

    preset: ModelPreset
    hf_config: Any
    """transformers PretrainedConfig (treat as read-only: build_model copies it)."""
    seq_len: int
    overrides: dict[str, Any] = field(default_factory=dict)
    """The `--set` overrides as applied, keys in the config class's own spelling (hidden_size -> n_embd for GPT-2)."""
    vocab_pad: int | None = None
    token_vocab_size: int = 0
    """Vocab before padding: synthetic token ids are drawn below it (padded rows are never looked up)."""

    @property
    def name(self) -> str:
        return self.preset.name

    @property
    def family(self) -> str:
        return self.preset.family

    @property
    def task(self) -> str:
        return self.preset.task

    @property
    def num_layers(self) -> int:
        return int(self.hf_config.num_hidden_layers)

    @property
    def hidden_size(self) -> int:
        return int(self.hf_config.hidden_size)

    @property
    def num_heads(self) -> int:
        return int(self.hf_config.num_attention_heads)

    @property
    def num_kv_heads(self) -> int:
        """Key/value heads (grouped-query attention); the attention heads where the family has no such key."""
        return int(getattr(self.hf_config, "num_key_value_heads", None) or self.num_heads)

    @property
    def head_dim(self) -> int:
        head_dim = getattr(self.hf_config, "head_dim", None)
        return int(head_dim) if head_dim else self.hidden_size // self.num_heads

    @property
    def vocab_size(self) -> int:
        """Vocab as built (padded when vocab_pad is set)."""
        return int(self.hf_config.vocab_size)

    @property
    def ffn_size(self) -> int:
        """Feed-forward inner width (GPT-2's n_inner defaults to 4 x hidden)."""
        inner = getattr(self.hf_config, "intermediate_size", None) or getattr(self.hf_config, "n_inner", None)
        return int(inner) if inner else 4 * self.hidden_size

    @property
    def embedding_size(self) -> int:
        """Token embedding width (ALBERT's factorised embedding is narrower than the hidden size)."""
        return int(getattr(self.hf_config, "embedding_size", None) or self.hidden_size)

    @property
    def max_positions(self) -> int:
        return int(getattr(self.hf_config, FAMILIES[self.family].positions_key))

    def describe(self) -> dict[str, Any]:
        """JSON-ready summary for result rows and `dsx models --json`."""
        return {
            "name": self.name, "family": self.family, "task": self.task, "overrides": dict(self.overrides),
            "seq_len": self.seq_len, "vocab_pad": self.vocab_pad, "vocab_size": self.vocab_size,
            "token_vocab_size": self.token_vocab_size, "layers": self.num_layers, "hidden": self.hidden_size,
            "heads": self.num_heads, "head_dim": self.head_dim, "ffn": self.ffn_size, "embedding": self.embedding_size,
            "max_positions": self.max_positions,
        }


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """`["n_layer=8", "tie_word_embeddings=false"]` -> dict; each VALUE is JSON when it parses, else a string."""
    out: dict[str, Any] = {}
    for text in items:
        key, sep, raw = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ModelError(f"--set expects KEY=VALUE (a transformers config attribute), got '{text}'")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def _config_class(family: str):
    import transformers

    return getattr(transformers, FAMILIES[family].config_class)


def _config_keys(cls) -> tuple[set[str], dict[str, str]]:
    """(attribute names a config of this class holds, aliases -> attribute) for override checking."""
    if dataclasses.is_dataclass(cls):  # transformers 5: configs are strict dataclasses
        names = {f.name for f in dataclasses.fields(cls)}
    else:  # transformers 4: plain classes; the default instance shows the attributes
        names = set(vars(cls()))
    aliases = dict(getattr(cls, "attribute_map", {}) or {})
    return {n for n in names if not n.startswith("_")}, aliases


def _did_you_mean(word: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, sorted(candidates), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def _canonical_overrides(preset: ModelPreset, overrides: dict[str, Any], cls) -> dict[str, Any]:
    names, aliases = _config_keys(cls)
    out: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    for key, value in overrides.items():
        if key in ("seq_len", "seq-len", "vocab_pad", "vocab-pad"):
            flag = "--" + key.replace("_", "-")
            raise ModelError(f"'{key}' is not a config attribute: pass {flag} (seq_len= / vocab_pad= in Python)")
        canonical = aliases.get(key, key)
        if canonical not in names:
            raise ModelError(f"unknown {cls.__name__} key '{key}' for {preset.name}"
                             f"{_did_you_mean(key, names | set(aliases))}")
        if canonical in out:
            raise ModelError(f"'{given_as[canonical]}' and '{key}' both set {cls.__name__}.{canonical}: "
                             f"give one of them")
        out[canonical] = value
        given_as[canonical] = key
    return out


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelError(f"{what} must be a positive integer, got {value!r}")
    return value


MAX_LAYERS = 256
"""Deeper is a typo: Llama 3.1 405B has 126 layers; building 100,000 on the meta device took 10 min and 4.9 GB."""


def _check_shape(preset: ModelPreset, config: Any) -> None:
    family = FAMILIES[preset.family]
    for attr, key in (("num_hidden_layers", family.layers_key), ("hidden_size", None),
                      ("num_attention_heads", None), ("vocab_size", None), (family.positions_key, None)):
        _positive_int(getattr(config, attr), f"{preset.name}: {key or attr}")
    if config.num_hidden_layers > MAX_LAYERS:
        raise ModelError(f"{preset.name}: {family.layers_key or 'num_hidden_layers'}={config.num_hidden_layers} is "
                         f"more than {MAX_LAYERS} layers, twice the deepest published model (126): dsx builds the "
                         "model layer by layer on the meta device to count it, which would take minutes and GBs")
    hidden, heads = config.hidden_size, config.num_attention_heads
    if hidden % heads:
        hidden_key, heads_key = ("n_embd", "n_head") if preset.family == "gpt2" else ("hidden_size",
                                                                                     "num_attention_heads")
        raise ModelError(f"{preset.name}: hidden size {hidden} is not a multiple of the {heads} attention heads: "
                         f"change --set {hidden_key}=... or --set {heads_key}=...")
    if preset.family == "llama" and heads % config.num_key_value_heads:
        raise ModelError(f"{preset.name}: {heads} attention heads are not a multiple of num_key_value_heads="
                         f"{config.num_key_value_heads} (grouped-query attention shares each KV head among "
                         f"heads/kv_heads query heads)")
    mask_id = family.mask_token_id
    if mask_id is not None and config.vocab_size <= mask_id:
        raise ModelError(f"{preset.name}: vocab_size {config.vocab_size} has no room for the [MASK] id {mask_id} "
                         f"used by masked-LM batches: use vocab_size > {mask_id}")
    if preset.family == "albert" and config.num_hidden_layers % config.num_hidden_groups:
        raise ModelError(f"{preset.name}: num_hidden_layers={config.num_hidden_layers} must be a multiple of "
                         f"num_hidden_groups={config.num_hidden_groups}")


class ConfigSnapshot:
    """A transformers config as dsx's disk cache keeps it: its fields and aliases, read without importing
    transformers (what makes a repeated `dsx estimate` start fast). A name the real config has but the snapshot
    does not hold, or a model built from it (config_of), resolves the model for real, exactly as without the cache.
    """

    def __init__(self, snapshot: dict[str, Any], resolve: Any):
        self._values = snapshot["values"]
        self._names = set(snapshot["names"])
        self._dict = snapshot["to_dict"]
        self._resolve = resolve
        self._real: Any = None

    @staticmethod
    def take(config: Any) -> dict[str, Any]:
        """The snapshot of a real config: to_dict() and the attribute_map aliases (JSON), every public name."""
        values = config.to_dict()
        values.update({alias: getattr(config, alias) for alias in getattr(type(config), "attribute_map", {})})
        names = sorted({n for n in dir(config) if not n.startswith("_")} | set(values))
        return json.loads(json.dumps({"values": values, "names": names, "to_dict": config.to_dict()}, default=str))

    def real(self) -> Any:
        if self._real is None:
            self._real = self._resolve().hf_config
        return self._real

    def to_dict(self) -> dict[str, Any]:
        """The real config's to_dict() as JSON keeps it (id2label's keys are strings): what disk_key hashes."""
        return copy.deepcopy(self._dict)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._values:
            return self._values[name]
        if name in self._names:  # a method or a property the snapshot did not keep
            return getattr(self.real(), name)
        raise AttributeError(f"{type(self).__name__} of a transformers config has no attribute {name!r}")


def config_of(resolved: ResolvedModel) -> Any:
    """The real transformers config of `resolved` (a ConfigSnapshot made real): what transformers builds from."""
    config = resolved.hf_config
    return config.real() if isinstance(config, ConfigSnapshot) else config


def resolve_model_cached(name: str, overrides: dict[str, Any] | None = None, seq_len: int | None = None,
                         vocab_pad: int | None = None) -> ResolvedModel:
    """resolve_model, answered from dsx's disk cache when this very request (preset, overrides, lengths, the
    installed torch/transformers, this file) was resolved before: the config is then a ConfigSnapshot and nothing
    imports transformers until a model is built. A request that fails is never cached: it fails as it always did."""
    from pathlib import Path

    from dsx.cache import derived

    def resolve() -> ResolvedModel:
        return resolve_model(name, overrides, seq_len, vocab_pad)

    def load(cached: Any) -> ResolvedModel:
        return ResolvedModel(preset, ConfigSnapshot(cached["config"], resolve), cached["seq_len"],
                             cached["overrides"], vocab_pad, cached["token_vocab_size"])

    def dump(resolved: ResolvedModel) -> dict[str, Any]:
        return {"config": ConfigSnapshot.take(resolved.hf_config), "seq_len": resolved.seq_len,
                "overrides": resolved.overrides, "token_vocab_size": resolved.token_vocab_size}

    preset = MODELS.get(name)
    if preset is None:
        return resolve()
    return derived("resolved", [name, overrides or {}, seq_len, vocab_pad, dataclasses.asdict(preset)],
                   [Path(__file__)], resolve, load, dump)


def resolve_model(name: str, overrides: dict[str, Any] | None = None, seq_len: int | None = None,
                  vocab_pad: int | None = None) -> ResolvedModel:
    """Preset + `--set` overrides + `--seq-len` + `--vocab-pad` -> ResolvedModel; ModelError (a ValueError) with
    the fix for an unknown preset, an unknown config key, a bad value, or a sequence longer than the positions."""
    if name not in MODELS:
        raise ModelError(f"unknown model '{name}'{_did_you_mean(name, MODELS)} (known: {', '.join(MODELS)})")
    preset = MODELS[name]
    family = FAMILIES[preset.family]
    cls = _config_class(preset.family)
    canonical = _canonical_overrides(preset, dict(overrides or {}), cls)
    kwargs = {**copy.deepcopy(preset.config), **canonical}
    try:
        config = cls(**kwargs)
    except Exception as exc:  # transformers 5 validates types and shapes (huggingface_hub StrictDataclass*Error)
        if not canonical:
            raise
        detail = " ".join(str(exc).split())
        raise ModelError(f"{preset.name}: {cls.__name__} rejects the overrides {canonical}: {detail}") from None
    _check_shape(preset, config)
    token_vocab = config.vocab_size
    if vocab_pad is not None:
        _positive_int(vocab_pad, "vocab_pad")
        config.vocab_size = -(-token_vocab // vocab_pad) * vocab_pad
    seq = preset.seq_len if seq_len is None else seq_len
    _positive_int(seq, "seq_len")
    limit = getattr(config, family.positions_key)
    if seq > limit:
        cost = ("adds learned position embeddings, so the parameter count changes" if family.learned_positions
                else "RoPE: no new parameters")
        raise ModelError(f"seq_len {seq} is longer than {preset.name}'s {family.positions_key}={limit}: pass a "
                         f"shorter --seq-len, or --set {family.positions_key}={seq} ({cost})")
    return ResolvedModel(preset, config, seq, canonical, vocab_pad, token_vocab)


def attn_available(attn: str, family: str | None = None) -> tuple[bool, str]:
    """Can `build_model(attn=...)` work here? (ok, reason): the reason says why not, or what runs when it can.

    eager and sdpa always work: transformers 5 supports sdpa for GPT-2, BERT, ALBERT and Llama (all four set
    `_supports_sdpa`; so does 5.17 on the GPU hosts). "flash" is transformers' `flash_attention_2`: it needs a CUDA
    GPU and the flash_attn package (transformers would otherwise fetch a kernel from the hub, which dsx never does).
    On CUDA, "sdpa" with bf16/fp16 already lets PyTorch pick its own FlashAttention kernel.
    """
    if attn not in ATTN_IMPLEMENTATIONS:
        choices = ", ".join(name for name in ATTN_IMPLEMENTATIONS if name != "dsx_sparse")
        return False, f"unknown attention '{attn}': choose one of {choices}"
    if family is not None and family not in FAMILIES:
        return False, f"unknown model family '{family}'"
    if attn == "eager":
        return True, "eager: the model's own matmul + softmax attention"
    if attn == "sdpa":
        return True, "sdpa: torch.nn.functional.scaled_dot_product_attention (PyTorch picks flash/efficient/math)"
    if attn == "dsx_sparse":
        return True, "dsx_sparse: block-sparse attention (dsx.sparse.attention: FlexAttention on CUDA, masked SDPA on CPU)"
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        return False, "flash needs a CUDA GPU (none visible); use --attn sdpa"
    if importlib.util.find_spec("flash_attn") is None:
        return False, ("flash needs the flash_attn package (pip install flash-attn --no-build-isolation), which is "
                       "not installed; --attn sdpa uses PyTorch's built-in flash kernel for bf16/fp16")
    from transformers.utils import is_flash_attn_2_available

    if not is_flash_attn_2_available():
        return False, ("flash_attn is installed but transformers cannot use it here (version or GPU not supported; "
                       "FlashAttention-2 needs Ampere or newer); use --attn sdpa")
    return True, "flash: transformers flash_attention_2 (flash_attn package; needs bf16/fp16 weights)"


# transformers picks a model's loss from its class name (LlamaForCausalLM -> "ForCausalLM"); GPT2LMHeadModel and
# BertForMaskedLM's relatives match nothing, and every loss then logs "`loss_type=None` was set in the config but it
# is unrecognized". dsx knows the task, so it names the loss transformers would fall back to anyway.
_LOSS_TYPES = {"causal-lm": "ForCausalLM", "masked-lm": "ForMaskedLM"}


def from_config(task: str, config: Any, attn_implementation: str) -> "torch.nn.Module":
    """AutoModelForCausalLM / AutoModelForMaskedLM.from_config on the current default device, with the task's loss
    named (see _LOSS_TYPES)."""
    import transformers

    cls = transformers.AutoModelForCausalLM if task == "causal-lm" else transformers.AutoModelForMaskedLM
    model = cls.from_config(config, attn_implementation=attn_implementation)
    model.loss_type = _LOSS_TYPES[task]
    return model


def build_model(resolved: ResolvedModel, attn: str = "sdpa", *, device: Any = None) -> "torch.nn.Module":
    """A randomly initialised AutoModelForCausalLM / AutoModelForMaskedLM of the resolved shape.

    Built on the current default device (or `device`, as a `with torch.device(device):` context): under
    `deepspeed.zero.Init` the caller's context partitions it as it is made. Weights follow the global torch RNG
    (seed it for reproducible weights). ModelError when `attn` cannot work here (see attn_available)."""
    ok, reason = attn_available(attn, resolved.family)
    if not ok:
        raise ModelError(reason)
    import contextlib

    import torch

    config = copy.deepcopy(config_of(resolved))
    ctx = torch.device(device) if device is not None else contextlib.nullcontext()
    with ctx:
        return from_config(resolved.task, config, ATTN_IMPLEMENTATIONS[attn])


_META_CACHE: dict[str, Any] = {}


def _cache_key(resolved: ResolvedModel) -> str:
    return json.dumps([resolved.name, resolved.overrides, resolved.vocab_pad], sort_keys=True, default=str)


def disk_key(resolved: ResolvedModel) -> list:
    """What a model built from `resolved` is, for dsx's disk cache: its task and its whole transformers config (a
    preset whose shape changed is another model, whatever its name)."""
    return [resolved.task, resolved.hf_config.to_dict()]


def meta_model(resolved: ResolvedModel) -> "torch.nn.Module":
    """The model built on the meta device (shapes only: no memory, no init); cached per preset+overrides+pad.
    For counting only: its forward does not run (transformers calls .item() while building masks)."""
    key = _cache_key(resolved)
    if key not in _META_CACHE:
        import torch

        config = copy.deepcopy(config_of(resolved))
        with torch.device("meta"):
            _META_CACHE[key] = from_config(resolved.task, config, "eager")
    return _META_CACHE[key]


_COUNTS: dict[str, dict[str, int]] = {}


def _counts(resolved: ResolvedModel) -> dict[str, int]:
    """{"params", "tensors", "largest_module", "modules"} of the model built on the meta device; kept in this process
    and in dsx's disk cache (dsx.cache.derived_path), so a later command (`dsx estimate`) does not build the model
    again."""
    key = _cache_key(resolved)
    if key not in _COUNTS:
        from pathlib import Path

        from dsx.cache import derived

        def measure() -> dict[str, int]:
            model = meta_model(resolved)
            return {"params": sum(p.numel() for p in model.parameters()),
                    "tensors": sum(1 for _ in model.parameters()),
                    "largest_module": max(sum(p.numel() for p in module.parameters(recurse=False))
                                          for module in model.modules()),
                    "modules": sum(1 for _ in model.modules())}

        def load(cached: Any) -> dict[str, int]:
            counts = {name: cached[name] for name in ("params", "tensors", "largest_module", "modules")}
            if not all(isinstance(n, int) for n in counts.values()):
                raise ValueError(f"not counts: {counts}")
            return counts

        _COUNTS[key] = derived("counts", disk_key(resolved), [Path(__file__)], measure, load, dict)
    return _COUNTS[key]


def count_params(resolved: ResolvedModel) -> int:
    """Parameters as transformers' `model.num_parameters()` counts them: each distinct tensor once (tied
    embedding + LM head once), buffers excluded. Built on the meta device: no memory; cached (_counts)."""
    return _counts(resolved)["params"]


def count_tensors(resolved: ResolvedModel) -> int:
    """Parameter tensors (each distinct one once, as count_params): DeepSpeed's ZeRO-1/2 overflow check visits them
    one by one at every optimizer step (dsx.estimate.predict.overflow_check_seconds)."""
    return _counts(resolved)["tensors"]


def count_modules(resolved: ResolvedModel) -> int:
    """Modules, the model itself included: DeepSpeed's ZeRO-3 registers its fetch and release hooks on every one
    of them, with or without parameters of its own, so its per-pass host work grows with this count."""
    return _counts(resolved)["modules"]


def largest_module_params(resolved: ResolvedModel) -> int:
    """Parameters of the largest single module (its own, not its children's): what ZeRO-3 gathers at once at the
    least (the embedding, often). On the meta device, like count_params."""
    return _counts(resolved)["largest_module"]


def synthetic_batch(resolved: ResolvedModel, micro_batch: int, device: Any = "cpu",
                    generator: "torch.Generator | None" = None) -> dict[str, "torch.Tensor"]:
    """A deterministic batch of `micro_batch` sequences of `resolved.seq_len` token ids (int64).

    causal-lm: input_ids and labels (= input_ids; transformers shifts labels inside the loss). No attention_mask:
        every position is real, so attention stays on the plain causal path.
    masked-lm: input_ids, attention_mask (all ones), labels. Exactly round(15% of seq_len) positions per sequence
        (at least 1) are masked: their input becomes the family's [MASK] id and their label the original token;
        every other label is -100 (ignored by the loss). (BERT's 80/10/10 replacement is left out: same compute.)

    Ids are drawn from [0, token_vocab_size) on the CPU with `generator` (default: a fresh one seeded 0), then
    moved to `device`, so the same seed gives the same batch on every device."""
    import torch

    _positive_int(micro_batch, "micro_batch")
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    shape = (micro_batch, resolved.seq_len)
    ids = torch.randint(0, resolved.token_vocab_size, shape, generator=generator, dtype=torch.long)
    if resolved.task == "causal-lm":
        batch = {"input_ids": ids, "labels": ids.clone()}
    else:
        masked_per_row = max(1, round(MASK_FRACTION * resolved.seq_len))
        order = torch.rand(shape, generator=generator).argsort(dim=1)
        mask = torch.zeros(shape, dtype=torch.bool)
        mask.scatter_(1, order[:, :masked_per_row], True)
        labels = torch.where(mask, ids, torch.full_like(ids, -100))
        inputs = torch.where(mask, torch.full_like(ids, FAMILIES[resolved.family].mask_token_id), ids)
        batch = {"input_ids": inputs, "attention_mask": torch.ones_like(ids), "labels": labels}
    return {k: v.to(device) for k, v in batch.items()}


def assume_unpacked_batches() -> bool:
    """Tell transformers that every batch this process feeds a model is one whole sequence per row, no padding
    (synthetic_batch's causal-lm batches), so that a compiled model keeps the plain causal mask:
    - transformers stops looking for several sequences packed into a row. Compiled, it cannot evaluate that look and
      wraps every causal mask in a packed-sequence test (uncompiled, it costs a device sync per forward);
    - "sdpa" gets a mask function that answers None (SDPA's is_causal) for a plain causal mask over whole sequences
      without padding. transformers' own never does while compiling on torch < 2.14, whatever the
      batch: a full [B, 1, S, S] mask per forward (1 GiB at 32k), and SDPA on an explicit mask instead of its flash
      kernel (3.5x slower attention at 32k on an H100, bench/sparse/README.md).
    Padded, windowed or otherwise patterned masks still go to transformers. False where this transformers has no
    packed-sequence check or mask interface (nothing to turn off)."""
    from transformers import masking_utils

    if not all(hasattr(masking_utils, name) for name in ("find_packed_sequence_indices", "AttentionMaskInterface")):
        return False
    global _MASKING_UTILS
    _MASKING_UTILS = masking_utils
    masking_utils.find_packed_sequence_indices = _no_packed_sequences
    masking_utils.AttentionMaskInterface.register("sdpa", _sdpa_mask_of_whole_sequences)
    return True


@contextmanager
def packed_sequences_unchecked() -> Iterator[None]:
    """transformers' packed-sequence check off inside the block (_no_packed_sequences), as assume_unpacked_batches
    turns it off for the whole process; nothing to do where this transformers has no such check."""
    try:
        from transformers import masking_utils
    except ImportError:
        masking_utils = None
    check = getattr(masking_utils, "find_packed_sequence_indices", None)
    if check is None:
        yield
        return
    masking_utils.find_packed_sequence_indices = _no_packed_sequences
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = check


_MASKING_UTILS: Any = None
"""transformers.masking_utils, held by assume_unpacked_batches for the mask function: an import inside it is a
graph break of every compiled forward on transformers 5.17 (its lazy module: dynamo's "Bad import result")."""


def _no_packed_sequences(position_ids: "torch.Tensor") -> None:
    """transformers' find_packed_sequence_indices for unpacked batches: None, one sequence per row."""
    return None


def _sdpa_mask_of_whole_sequences(batch_size: int, q_length: int, kv_length: int, q_offset: Any = 0,
                                  kv_offset: Any = 0, mask_function=None, attention_mask=None, **kwargs):
    """The "sdpa" mask: None where the mask is only causal over whole, unpadded sequences, else transformers'
    sdpa_mask."""
    masking_utils = _MASKING_UTILS

    whole = isinstance(q_offset, int) and isinstance(kv_offset, int) and q_offset == kv_offset == 0
    if (mask_function is masking_utils.causal_mask_function and attention_mask is None and whole
            and q_length == kv_length and kwargs.get("allow_is_causal_skip", True)):
        return None
    return masking_utils.sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                                   kv_offset=kv_offset, mask_function=mask_function, attention_mask=attention_mask,
                                   **kwargs)
