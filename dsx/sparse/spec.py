"""What a run asks of sparse attention, checked: `--sparse-attention WORD`, `--sparse-set KEY=VALUE` and a DeepSpeed
config's `sparse_attention` block, resolved into one layout block (a dsx.schema.sparse_attention mode model), and
the plan a rank follows (SparsePlan, part of dsx.rank.protocol.RankPlan).

Pydantic only (no torch): dsx.rank.protocol imports SparsePlan before a rank imports torch.

Words of --sparse-attention: `none` (dense attention, the model's own), a layout mode (DeepSpeed's dense, fixed,
variable, bigbird, bslongformer, and `local`: 0.18.9's LocalSlidingWindowSparsityConfig, which its config parser
has no mode for), `auto` (the layout of the config's block, else bigbird, run only where it is predicted faster
than dense SDPA: dsx.sparse.predict) and `auto:MODE`.
"""

from __future__ import annotations

import difflib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError
from typing_extensions import Annotated

from dsx.schema.base import Field, Int, Section
from dsx.schema.sparse_attention import (
    BigBirdSparseAttentionConfig, BSLongformerSparseAttentionConfig, DenseSparseAttentionConfig,
    FixedSparseAttentionConfig, VariableSparseAttentionConfig,
)

ATTN_NAME = "dsx_sparse"
"""The attn_implementation name dsx.sparse.attention registers with transformers."""

AUTO_DEFAULT_MODE = "bigbird"
"""The layout `auto` weighs when neither `auto:MODE` nor a config block names one."""


class LocalSparseAttentionConfig(Section):
    """mode "local": a purely local sliding window (DeepSpeed 0.18.9's LocalSlidingWindowSparsityConfig). Not a
    DeepSpeed config mode (0.18.9's parser raises NotImplementedError for it): only `--sparse-attention local`."""

    mode: Literal["local"]
    """Sparsity pattern."""
    block: Annotated[Int, Field(ge=1)] = 16
    """Block size in tokens; the sequence length must be a multiple of it."""
    num_sliding_window_blocks: Int = 3
    """Width in blocks of the window (num_sliding_window_blocks // 2 blocks on each side; only earlier ones when
    unidirectional)."""
    attention: Literal["unidirectional", "bidirectional"] = "unidirectional"
    """Attention direction (the class's default is unidirectional)."""


MODE_MODELS: dict[str, type[Section]] = {
    "dense": DenseSparseAttentionConfig, "fixed": FixedSparseAttentionConfig,
    "variable": VariableSparseAttentionConfig, "bigbird": BigBirdSparseAttentionConfig,
    "bslongformer": BSLongformerSparseAttentionConfig, "local": LocalSparseAttentionConfig,
}
WORDS = ("none", "auto", *MODE_MODELS)


class SparseRequestError(ValueError):
    """A sparse-attention request dsx refuses; the one-line message names the flag (or config key) to change."""


def refuse_other_attention(attn: str, requested: str) -> None:
    """Sparse attention is an attention implementation of its own: --attn naming another is refused (dsx run and
    dsx estimate alike)."""
    if attn != "sdpa":
        raise SparseRequestError(f"--attn {attn} cannot be combined with sparse attention ({requested}): sparse "
                                 "attention is its own attention implementation (FlexAttention on CUDA, a masked SDPA "
                                 "on CPU); drop --attn")


class SparsePlan(BaseModel):
    """What a rank needs to build the layout and attend with it (RankPlan.sparse_attention)."""

    model_config = ConfigDict(extra="forbid")

    block: dict[str, Any]
    """The layout block, every key written out (a dsx.schema.sparse_attention mode model's dump, mode first)."""
    seed: int
    """Seed of the random.Random that draws the random blocks: every rank builds the same layout."""
    kernel: Literal["flex", "sdpa"]
    """flex: compiled FlexAttention with a BlockMask (CUDA); sdpa: the layout as a boolean mask through
    torch's scaled_dot_product_attention (CPU ranks: no FlexAttention backward there)."""


def parse_word(word: str) -> tuple[str, str | None]:
    """(requested, mode): 'none' -> ('none', None); 'auto' -> ('auto', None); 'auto:fixed' -> ('auto', 'fixed');
    'bigbird' -> ('bigbird', 'bigbird'). SparseRequestError for anything else."""
    text = word.strip().lower()
    if text.startswith("auto:") and text[5:] in MODE_MODELS:
        return "auto", text[5:]
    if text in ("none", "auto"):
        return text, None
    if text in MODE_MODELS:
        return text, text
    close = difflib.get_close_matches(text, [*WORDS, *(f"auto:{m}" for m in MODE_MODELS)], n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    raise SparseRequestError(f"--sparse-attention: unknown mode '{word}' (choose {', '.join(WORDS)} or auto:MODE)"
                             f"{hint}")


def parse_sets(items: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """['num_random_blocks=2', 'global_block_indices=[0,4]'] -> dict; VALUE is JSON when it parses, else text."""
    out: dict[str, Any] = {}
    for text in items:
        key, sep, raw = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SparseRequestError(f"--sparse-set expects KEY=VALUE (a key of the sparse_attention block), got "
                                     f"'{text}'")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def resolve_block(word: str | None, sets: tuple[str, ...] | list[str], config_block: Any,
                  config_source: str = "the config") -> tuple[str, Section | None]:
    """(requested, layout block) from the flags and the config's block; the block is None for `none` or when no
    sparse attention is asked for. `requested` is the flag's word, or 'config' when only the config's block asks."""
    requested, mode = parse_word(word) if word is not None else (None, None)
    changes = parse_sets(sets)
    if requested is None and config_block is None:
        if changes:
            raise SparseRequestError("--sparse-set needs --sparse-attention MODE (or a --config file with a "
                                     "sparse_attention block)")
        return "none", None
    if config_block is not None and not isinstance(config_block, dict):
        raise SparseRequestError(f"{config_source}: sparse_attention must be an object with a 'mode', got "
                                 f"{json.dumps(config_block)}")
    if requested == "none":
        if changes:
            raise SparseRequestError("--sparse-set has no effect with --sparse-attention none: drop it")
        return "none", None
    if config_block is not None and mode is not None:
        raise SparseRequestError(
            f"--sparse-attention {word}: {config_source} already has a sparse_attention block (mode "
            f"{config_block.get('mode', 'fixed')}): drop the flag (or use --sparse-attention auto), and change the "
            "block with --sparse-set KEY=VALUE")
    if config_block is not None:
        data, origin = dict(config_block), f"{config_source}: sparse_attention"
        data.setdefault("mode", "fixed")  # DeepSpeed's default mode
    else:
        data, origin = {"mode": mode or AUTO_DEFAULT_MODE}, f"--sparse-attention {word}"
    if "mode" in changes:
        raise SparseRequestError("--sparse-set mode=...: the mode is --sparse-attention MODE")
    model_class = MODE_MODELS.get(data["mode"])
    if model_class is None:
        raise SparseRequestError(f"{origin}.mode: unknown mode '{data['mode']}' "
                                 f"(DeepSpeed's modes: {', '.join(m for m in MODE_MODELS if m != 'local')})")
    keys = [k for k in model_class.model_fields if k != "mode"]
    for key in changes:
        if key not in keys:
            close = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise SparseRequestError(f"--sparse-set {key}: not a key of mode {data['mode']} ({hint}its keys: "
                                     f"{', '.join(keys)})")
    data.update(changes)
    try:
        block = model_class.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(part) for part in error["loc"])
        if not key:  # a check across keys (the model's validator)
            where = "--sparse-set" if changes else origin
        else:
            where = f"--sparse-set {key}" if key.split(".")[0] in changes else f"{origin}.{key}"
        message = error["msg"].removeprefix("Value error, ")
        raise SparseRequestError(f"{where}: {message}") from None
    return requested or "config", block


class TakenBlock(BaseModel):
    """A config's sparse_attention block as dsx found it, and whether DeepSpeed still gets it."""

    block: Any = None
    handed: bool = False
    """True for a DeepSpeed 0.18 target (it parses the block and never applies it); 0.19 rejects the key, so
    dsx removed it from the config the ranks get."""


def take_block(config: dict, legacy_target: bool) -> TakenBlock:
    """The config's sparse_attention block (None when absent); removed from `config` unless the target DeepSpeed
    is 0.18 (legacy_target), whose parser accepts it."""
    if "sparse_attention" not in config:
        return TakenBlock()
    block = config["sparse_attention"] if legacy_target else config.pop("sparse_attention")
    return TakenBlock(block=block, handed=legacy_target)


def block_dict(block: Section) -> dict[str, Any]:
    """Every key of the layout block, mode first (what the row and the rank plan carry)."""
    data = block.model_dump(mode="json")
    return {"mode": data.pop("mode"), **data}


def block_model(data: dict[str, Any]) -> Section:
    """The mode model of a block_dict (the rank's way back from the plan)."""
    return MODE_MODELS[data["mode"]].model_validate(data)
