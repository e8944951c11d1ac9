"""`sparse_attention`: block-sparse attention layouts of DeepSpeed 0.18 and older (0.19 rejects the whole block).

DeepSpeed 0.18.9 reads this section with dict.get per `mode` (deepspeed/runtime/config.py get_sparse_*_config):
misspelled keys and keys of another mode are silently IGNORED, an unknown mode raises NotImplementedError. The
value checks live in deepspeed.ops.sparse_attention's *SparsityConfig classes, which only user code builds; the
engine never reads the block. Here each mode is its own model, chosen by `mode` (default "fixed").
"""

from __future__ import annotations

from typing import Any, List, Literal, Optional, Union

from pydantic import Discriminator, Tag, model_validator
from typing_extensions import Annotated

from dsx.schema.base import Bool, Field, Int, Section

__all__ = [
    "SparseAttentionConfig",
    "DenseSparseAttentionConfig",
    "FixedSparseAttentionConfig",
    "VariableSparseAttentionConfig",
    "BigBirdSparseAttentionConfig",
    "BSLongformerSparseAttentionConfig",
    "SPARSE_MODES",
]

SPARSE_MODES = ("fixed", "variable", "bigbird", "bslongformer", "dense")
"""The modes DeepSpeed 0.18.9's config parser knows; "fixed" when `mode` is absent."""

AttentionType = Literal["unidirectional", "bidirectional"]
"""What FixedSparsityConfig / VariableSparsityConfig accept (anything else raises NotImplementedError)."""


def _check_global_ranges(starts: List[int], ends: Optional[List[int]]) -> None:
    """The start/end index checks of VariableSparsityConfig and BSLongformerSparsityConfig, same wording."""
    if ends is None:
        return
    if len(starts) != len(ends):
        raise ValueError(
            f"global_block_end_indices must have as many entries as global_block_indices "
            f"({len(ends)} != {len(starts)})"
        )
    for start, end in zip(starts, ends):
        if start >= end:
            raise ValueError(
                f"each global_block_indices entry must be smaller than its global_block_end_indices entry "
                f"(start {start} >= end {end})"
            )


def _check_horizontal(attention: str, horizontal_global_attention: bool) -> None:
    if horizontal_global_attention and attention != "bidirectional":
        raise ValueError('horizontal_global_attention requires attention "bidirectional"')


class DenseSparseAttentionConfig(Section):
    """mode "dense": every block attends to every block (a baseline, not sparse)."""

    mode: Literal["dense"]
    """Sparsity pattern."""
    block: Annotated[Int, Field(ge=1)] = 16
    """Block size in tokens; the sequence length must be a multiple of it (0 divides by zero when building)."""


class FixedSparseAttentionConfig(Section):
    """mode "fixed" (the default): local windows plus global blocks, after Sparse Transformers (Child et al.)."""

    mode: Literal["fixed"] = "fixed"
    """Sparsity pattern."""
    block: Annotated[Int, Field(ge=1)] = 16
    """Block size in tokens; the sequence length must be a multiple of it (0 divides by zero when building)."""
    different_layout_per_head: Bool = False
    """Give each attention head its own layout instead of one layout for all heads."""
    num_local_blocks: Annotated[Int, Field(ge=1)] = 4
    """Blocks in each local attention window."""
    num_global_blocks: Annotated[Int, Field(ge=1)] = 1
    """Consecutive blocks of each local window that act as its global representatives."""
    attention: AttentionType = "bidirectional"
    """Attention direction: "unidirectional" (autoregressive, no attention to later blocks) or "bidirectional"."""
    horizontal_global_attention: Bool = False
    """Let global blocks also attend to all blocks (rows as well as columns); bidirectional attention only."""
    num_different_global_patterns: Annotated[Int, Field(ge=1)] = 1
    """Number of distinct global-block choices spread over the heads; > 1 needs different_layout_per_head."""

    @model_validator(mode="after")
    def _fixed_layout_is_buildable(self) -> "FixedSparseAttentionConfig":
        # The checks FixedSparsityConfig.__init__ makes (DeepSpeed 0.18.9).
        if self.num_local_blocks % self.num_global_blocks != 0:
            raise ValueError(
                f"num_local_blocks ({self.num_local_blocks}) must be a multiple of num_global_blocks "
                f"({self.num_global_blocks})"
            )
        _check_horizontal(self.attention, self.horizontal_global_attention)
        if self.num_different_global_patterns > 1 and not self.different_layout_per_head:
            raise ValueError(
                "num_different_global_patterns > 1 requires different_layout_per_head: true "
                "(with one layout for all heads there is only one global pattern)"
            )
        patterns = self.num_local_blocks // self.num_global_blocks
        if self.num_different_global_patterns > patterns:
            raise ValueError(
                f"num_different_global_patterns ({self.num_different_global_patterns}) cannot exceed "
                f"num_local_blocks / num_global_blocks = {self.num_local_blocks} / {self.num_global_blocks} "
                f"= {patterns}"
            )
        return self


class VariableSparseAttentionConfig(Section):
    """mode "variable": random blocks, a list of local window sizes and explicit global blocks."""

    mode: Literal["variable"]
    """Sparsity pattern."""
    block: Annotated[Int, Field(ge=1)] = 16
    """Block size in tokens; the sequence length must be a multiple of it (0 divides by zero when building)."""
    different_layout_per_head: Bool = False
    """Give each attention head its own layout instead of one layout for all heads."""
    num_random_blocks: Annotated[Int, Field(ge=0)] = 0
    """Randomly chosen blocks each block row attends to (at most the blocks per row)."""
    local_window_blocks: Annotated[List[Annotated[Int, Field(ge=1)]], Field(min_length=1)] = [4]
    """Sizes in blocks of the first local windows; the last size repeats (empty or a trailing 0 fails to build)."""
    global_block_indices: List[Int] = [0]
    """Blocks that attend to and are attended by all blocks (start indices when end indices are given)."""
    global_block_end_indices: Optional[List[Int]] = None
    """Exclusive end of each global range starting at the matching global_block_indices entry."""
    attention: AttentionType = "bidirectional"
    """Attention direction: "unidirectional" (autoregressive, no attention to later blocks) or "bidirectional"."""
    horizontal_global_attention: Bool = False
    """Let global blocks also attend to all blocks (rows as well as columns); bidirectional attention only."""

    @model_validator(mode="after")
    def _variable_layout_is_buildable(self) -> "VariableSparseAttentionConfig":
        # The checks VariableSparsityConfig.__init__ makes (DeepSpeed 0.18.9).
        _check_global_ranges(self.global_block_indices, self.global_block_end_indices)
        _check_horizontal(self.attention, self.horizontal_global_attention)
        return self


class BigBirdSparseAttentionConfig(Section):
    """mode "bigbird": random, sliding-window and global blocks, after BigBird (Zaheer et al.)."""

    mode: Literal["bigbird"]
    """Sparsity pattern."""
    block: Annotated[Int, Field(ge=1)] = 16
    """Block size in tokens; the sequence length must be a multiple of it (0 divides by zero when building)."""
    different_layout_per_head: Bool = False
    """Give each attention head its own layout instead of one layout for all heads."""
    num_random_blocks: Annotated[Int, Field(ge=0)] = 0
    """Randomly chosen blocks each block row attends to (at most the blocks per row)."""
    num_sliding_window_blocks: Int = 3
    """Width in blocks of the sliding window centred on each block (at most the blocks per row)."""
    num_global_blocks: Int = 1
    """Leading blocks that attend to and are attended by all blocks (at most the blocks per row)."""


class BSLongformerSparseAttentionConfig(Section):
    """mode "bslongformer": block-sparse Longformer, a sliding window plus explicit global blocks."""

    mode: Literal["bslongformer"]
    """Sparsity pattern."""
    block: Annotated[Int, Field(ge=1)] = 16
    """Block size in tokens; the sequence length must be a multiple of it (0 divides by zero when building)."""
    different_layout_per_head: Bool = False
    """Give each attention head its own layout instead of one layout for all heads."""
    num_sliding_window_blocks: Int = 3
    """Width in blocks of the sliding window centred on each block (at most the blocks per row)."""
    global_block_indices: List[Int] = [0]
    """Blocks that attend to and are attended by all blocks (start indices when end indices are given)."""
    global_block_end_indices: Optional[List[Int]] = None
    """Exclusive end of each global range starting at the matching global_block_indices entry."""

    @model_validator(mode="after")
    def _bslongformer_layout_is_buildable(self) -> "BSLongformerSparseAttentionConfig":
        # The checks BSLongformerSparsityConfig.__init__ makes (DeepSpeed 0.18.9).
        _check_global_ranges(self.global_block_indices, self.global_block_end_indices)
        return self


def _mode_of(value: Any) -> Any:
    """The discriminator: the `mode` key, "fixed" when absent (DeepSpeed 0.18.9's default)."""
    if isinstance(value, dict):
        return value.get("mode", "fixed")
    # A mode model instance has its mode; anything else (true, a list...) fails as a "fixed" block would.
    return getattr(value, "mode", "fixed")


SparseAttentionConfig = Annotated[
    Union[
        Annotated[FixedSparseAttentionConfig, Tag("fixed")],
        Annotated[VariableSparseAttentionConfig, Tag("variable")],
        Annotated[BigBirdSparseAttentionConfig, Tag("bigbird")],
        Annotated[BSLongformerSparseAttentionConfig, Tag("bslongformer")],
        Annotated[DenseSparseAttentionConfig, Tag("dense")],
    ],
    Discriminator(
        _mode_of,
        custom_error_type="sparse_attention_mode",
        custom_error_message='mode must be one of "fixed", "variable", "bigbird", "bslongformer", "dense"',
    ),
]
"""The `sparse_attention` block: one of the five mode models, picked by `mode` (absent means "fixed")."""
