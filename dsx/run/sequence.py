"""`--sequence-parallel N`: Ulysses sequence parallelism (DeepSpeed 0.19's UlyssesSPAttentionHF) resolved and
refused before any launch. N consecutive ranks share one micro-batch, each holding 1/N of its sequence; attention's
all-to-alls give each rank the whole sequence for 1/N of the heads (dsx.rank.ulysses)."""

from __future__ import annotations

from dsx.run.refused import RunRefused


def sequence_parallel_size(request, config: dict, world_size: int, resolved, pipeline, notes: list[str]) -> int | None:
    """N of --sequence-parallel (or of the config's sequence_parallel_size); None when 1 or absent. Writes the key
    into `config`; RunRefused where Ulysses cannot split this model, sequence or world."""
    given = request.sequence_parallel
    in_config = config.get("sequence_parallel_size")
    if given is not None and isinstance(in_config, int) and in_config not in (1, given):
        raise RunRefused(f"--sequence-parallel {given} and the config's sequence_parallel_size {in_config} differ: "
                         "drop one")
    size = given if given is not None else (in_config if isinstance(in_config, int) else None)
    if size is None or size == 1:
        return None
    where = "--sequence-parallel" if given is not None else "the config's sequence_parallel_size"
    if size < 1 or world_size % size:
        raise RunRefused(f"{where} {size} must divide the {world_size} rank(s): each group of {size} ranks shares "
                         "one micro-batch")
    if pipeline is not None:
        raise RunRefused(f"{where} {size} with pipeline stages: not supported by dsx; drop one")
    if resolved.task != "causal-lm":
        raise RunRefused(f"{where} {size}: dsx shards a causal LM's sequence; {resolved.name} is a {resolved.task} "
                         "model")
    if resolved.family != "llama":
        raise RunRefused(f"{where} {size}: dsx runs DeepSpeed's Ulysses on Llama-family models; {resolved.name}'s "
                         f"{resolved.family} attention does not take the output layout Ulysses returns (its c_proj "
                         "fails on the shape)")
    if request.attn == "eager":
        raise RunRefused(f"{where} {size} needs --attn sdpa or flash: DeepSpeed's Ulysses refuses eager attention "
                         "(its [S, S] mask)")
    heads, kv_heads = resolved.num_heads, resolved.num_kv_heads
    if heads % size:
        raise RunRefused(f"{where} {size} must divide {resolved.name}'s {heads} attention heads: after the all-to-all "
                         f"each rank attends with heads / {size} of them")
    if kv_heads % size and size % kv_heads:
        raise RunRefused(f"{where} {size} and {resolved.name}'s {kv_heads} key/value heads: one must divide the other")
    if resolved.seq_len % size:
        raise RunRefused(f"{where} {size} must divide the sequence length {resolved.seq_len:,}")
    config["sequence_parallel_size"] = size
    notes.append(f"Ulysses sequence parallelism over {size} ranks: each holds {resolved.seq_len // size:,} of the "
                 f"{resolved.seq_len:,} tokens of its group's micro-batch and attends with {heads // size} of "
                 f"{heads} heads; {world_size // size} data-parallel replica(s)")
    return size
