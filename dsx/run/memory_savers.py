"""`--act-ckpt-offload` and `--tiled-mlp` (dsx.rank.memory_savers): refused before any launch where they cannot
apply."""

from __future__ import annotations

from dsx.run.refused import RunRefused


def check_memory_savers(request, resolved, pipeline, notes: list[str], sequence: int | None = None) -> None:
    """RunRefused where --act-ckpt-offload or --tiled-mlp cannot apply; a note of what each one keeps off the GPU
    (per rank: under Ulysses, `sequence` ranks share each sequence)."""
    tokens = resolved.seq_len // (sequence or 1)
    if request.act_ckpt_offload:
        if not request.act_ckpt:
            raise RunRefused("--act-ckpt-offload keeps the inputs activation checkpointing saves in host memory: add "
                             "--act-ckpt")
        if pipeline is not None:
            raise RunRefused("--act-ckpt-offload with pipeline stages: not supported by dsx; drop one")
        notes.append(f"--act-ckpt-offload: each checkpointed layer's input ({tokens:,} x "
                     f"{resolved.hidden_size:,} values a sample) is kept in host memory and copied back for the "
                     "layer's recompute")
    if request.tiled_mlp:
        if resolved.family != "llama":
            raise RunRefused(f"--tiled-mlp covers Llama-family MLPs (no dropout: each slice is recomputed in the "
                             f"backward pass); {resolved.name} is a {resolved.family} model")
        if pipeline is not None:
            raise RunRefused("--tiled-mlp with pipeline stages: not supported by dsx; drop one")
        from dsx.rank.memory_savers import mlp_slices

        notes.append(f"--tiled-mlp: each MLP in {mlp_slices(tokens, resolved.hidden_size)} slice(s) of "
                     f"tokens (DeepSpeed's TiledMLP), recomputed in the backward pass")
