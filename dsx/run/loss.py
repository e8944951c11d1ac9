"""`--loss plain|tiled|fused`: which loss the ranks compute (dsx.rank.tiled_loss), resolved and refused before any
launch (fused: Liger's kernel, planned with the other kernels in dsx.run.kernels)."""

from __future__ import annotations

from dsx.rank.tiled_loss import default_tile_tokens  # torch only inside its functions
from dsx.run.refused import RunRefused
from dsx.units import format_bytes

LOSSES = ("plain", "tiled", "fused")


def resolve_loss(loss: str, tile_tokens: int | None, resolved, pipeline, micro_batch: int,
                 notes: list[str], sequence: int | None = None) -> int | None:
    """Tokens per tile of --loss tiled (None: the plain or the fused loss); RunRefused where the loss cannot apply.
    `sequence`: the Ulysses group size, whose ranks each compute the loss of their shard of the sequence."""
    if loss not in LOSSES:
        raise RunRefused(f"unknown --loss '{loss}' (known: {', '.join(LOSSES)})")
    if loss != "tiled" and tile_tokens is not None:
        raise RunRefused(f"--loss-tile-tokens {tile_tokens} sizes the tiles of --loss tiled: add --loss tiled")
    if loss == "plain":
        return None
    if resolved.task != "causal-lm":
        raise RunRefused(f"--loss {loss} computes a causal LM's loss; {resolved.name} is a {resolved.task} model")
    if pipeline is not None:
        raise RunRefused(f"--loss {loss} does not apply to pipeline stages: the last stage computes the loss of "
                         f"DeepSpeed's PipelineModule on its whole logits; drop --pipeline-stages or --loss {loss}")
    if loss == "fused":
        return None
    if tile_tokens is not None and tile_tokens < 1:
        raise RunRefused(f"--loss-tile-tokens must be at least 1, got {tile_tokens}")
    tile = tile_tokens or default_tile_tokens(resolved.vocab_size)
    tokens = micro_batch * resolved.seq_len // (sequence or 1)
    count = -(-tokens // tile)
    whose = f"each rank's shard ({tokens:,} tokens) of a micro-batch" if sequence else \
        f"each micro-batch's {tokens:,} tokens"
    notes.append(f"--loss tiled: the loss of {whose} in {count} tile(s) of up to "
                 f"{tile:,} ({format_bytes(min(tile, tokens) * resolved.vocab_size * 4)} of fp32 logits at a time, "
                 f"against {format_bytes(tokens * resolved.vocab_size * 4)} whole)")
    return tile
