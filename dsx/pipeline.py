"""Pipeline stages (`--pipeline-stages N`) without torch: what dsx can pipeline, the checks that refuse a pipeline
before anything is launched, DeepSpeed's partition of the layers over the stages, the schedule's bubble, and the
pipeline part of a run's row. The rank side (the PipelineModule itself) is dsx.rank.pipeline.

Layers, in the order DeepSpeed's PipelineModule gets them (the names are the classes of dsx.rank.pipeline, what
`--pipeline-partition type:REGEX` matches):

    GPT-2   TokenEmbeddingPipe, GPT2PositionsPipe, GPT2BlockPipe x n_layer, FinalNormPipe, head
    Llama   TokenEmbeddingPipe, LlamaDecoderLayerPipe x num_hidden_layers, FinalNormPipe, head

The head is a second TokenEmbeddingPipe (a TiedLayerSpec of the same weight) when the model ties its input
embedding and LM head (GPT-2, Llama-3.2), else LMHeadPipe (Llama-2).

Batch arithmetic: the world is stages x data-parallel replicas; a rank's micro-batch is one pipeline micro-batch
and gradient-accumulation steps are the micro-batches of one optimizer step (DeepSpeed's PipelineEngine asserts
train_batch = micro x accumulation x data-parallel replicas). Ideal bubble of the 1F1B schedule: (p-1)/(m+p-1)
of a step, p stages, m micro-batches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

TIED_KEY = "embed"
"""The TiedLayerSpec key of a tied input embedding / LM head."""
EMBEDDING_LAYER = "TokenEmbeddingPipe"
GPT2_POSITIONS_LAYER = "GPT2PositionsPipe"
BLOCK_LAYER = {"gpt2": "GPT2BlockPipe", "llama": "LlamaDecoderLayerPipe"}
NORM_LAYER = "FinalNormPipe"
HEAD_LAYER = "LMHeadPipe"

PARTITION_HELP = "parameters|uniform|type:REGEX"
DEFAULT_PARTITION = "parameters"

NOT_PIPELINED = {
    "bert": "a masked LM: dsx pipelines causal LMs (GPT-2, Llama families); its embeddings' token types and "
            "bidirectional attention mask have no pipeline layout in dsx",
    "albert": "a masked LM whose layers all share one set of weights (one layer group): split over stages they "
              "would have to be tied across every stage; dsx pipelines causal LMs (GPT-2, Llama families)",
}

ZERO_REASON = "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
"""DeepSpeed's own words (PipelineEngine.__init__ asserts it)."""


class PipelineError(ValueError):
    """A pipeline dsx cannot run as asked; the message names the flag and what to change."""


# ------------------------------------------------------------------------------------------------ the checks


def check_partition(text: str | None) -> str:
    """`--pipeline-partition` as DeepSpeed's partition_method: parameters, uniform or type:REGEX (a valid regex)."""
    method = DEFAULT_PARTITION if text is None else text.strip()
    lowered = method.lower()
    if lowered in ("parameters", "uniform"):
        return lowered
    if lowered.startswith("type:"):
        pattern = method.split(":", 1)[1]
        if not pattern:
            raise PipelineError("--pipeline-partition type: needs a regular expression of layer class names, e.g. "
                                "type:Block")
        try:
            re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            raise PipelineError(f"--pipeline-partition {method}: not a regular expression ({exc})") from None
        return "type:" + pattern
    if lowered == "profile":
        raise PipelineError("--pipeline-partition profile: DeepSpeed 0.19 raises NotImplementedError for it; use "
                            f"{PARTITION_HELP}")
    raise PipelineError(f"--pipeline-partition {method!r}: use {PARTITION_HELP}")


def check_stages(stages: int, world_size: int, ranks_flag: str = "--gpus", asked: str | None = None) -> int:
    """The data-parallel replicas: world / stages; PipelineError when the stages do not divide the ranks.
    `asked`: how the stages were asked for (default '--pipeline-stages N')."""
    asked = asked or f"--pipeline-stages {stages}"
    if stages < 1:
        raise PipelineError(f"--pipeline-stages must be at least 1, got {stages}")
    if world_size % stages:
        raise PipelineError(f"{asked} does not divide the {world_size} rank(s) ({ranks_flag}): the world is stages x "
                            "data-parallel replicas")
    return world_size // stages


def check_zero(asked: str, zero: int) -> None:
    """`asked`: how the stages were asked for, e.g. '--pipeline-stages 2'."""
    if zero >= 2:
        raise PipelineError(f"{asked} with ZeRO stage {zero}: DeepSpeed refuses it (\"{ZERO_REASON}\"); use --zero 0 "
                            "or 1")


def check_layout(stages: int, world_size: int, zero: int, ranks_flag: str, asked: str) -> int:
    """check_stages, then check_zero: the data-parallel replicas of a pipeline that can run."""
    replicas = check_stages(stages, world_size, ranks_flag, asked)
    check_zero(asked, zero)
    return replicas


def check_model(resolved: Any, stages: int, partition: str) -> None:
    """The model can be cut into `stages` stages: a causal LM of a family dsx lays out, with at least one decoder
    layer per stage, and a type:REGEX that matches enough layers."""
    if resolved.family in NOT_PIPELINED:
        raise PipelineError(f"--pipeline-stages: {resolved.name} is {NOT_PIPELINED[resolved.family]}")
    if resolved.family not in BLOCK_LAYER:
        raise PipelineError(f"--pipeline-stages: no pipeline layout for the {resolved.family} family")
    if stages > resolved.num_layers:
        raise PipelineError(f"--pipeline-stages {stages} is more than {resolved.name}'s {resolved.num_layers} decoder "
                            "layers: every stage needs at least one")
    if partition.startswith("type:"):
        names = layer_names(resolved)
        pattern = re.compile(partition.split(":", 1)[1], re.IGNORECASE)
        matched = sum(1 for name in names if pattern.search(name))
        if matched < stages:
            raise PipelineError(f"--pipeline-partition {partition} matches {matched} of {resolved.name}'s layers "
                                f"({', '.join(dict.fromkeys(names))}): it must match at least one per stage "
                                f"({stages})")


def config_stages(config: dict) -> int | None:
    """A --config file's `pipeline.stages` when it is a number (DeepSpeed never reads it; dsx builds the
    PipelineModule with it)."""
    stages = (config.get("pipeline") or {}).get("stages") if isinstance(config.get("pipeline"), dict) else None
    return stages if isinstance(stages, int) and not isinstance(stages, bool) and stages > 0 else None


def config_interval(config: dict) -> int:
    """The config's pipeline.activation_checkpoint_interval (> 0 overrides the PipelineModule's)."""
    value = (config.get("pipeline") or {}).get("activation_checkpoint_interval", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


# ------------------------------------------------------------------------------------------------ the layout


def layer_names(resolved: Any) -> list[str]:
    """The PipelineModule's layer classes in order (what DeepSpeed's type:REGEX partition matches)."""
    family = resolved.family
    tied = bool(getattr(resolved.hf_config, "tie_word_embeddings", False))
    names = [EMBEDDING_LAYER] + ([GPT2_POSITIONS_LAYER] if family == "gpt2" else [])
    names += [BLOCK_LAYER[family]] * resolved.num_layers
    return names + [NORM_LAYER, EMBEDDING_LAYER if tied else HEAD_LAYER]


def layer_params(resolved: Any) -> list[int]:
    """Parameters of each layer as DeepSpeed's 'parameters' partition counts them (a tied embedding at both ends);
    from the model built on the meta device."""
    from dsx.models import meta_model

    modules, tied, _ = hf_pieces(meta_model(resolved), resolved.family)

    def count(*keys: str) -> int:
        return sum(p.numel() for key in keys for p in modules[key].parameters())

    params = [count("embed")] + ([count("wpe")] if resolved.family == "gpt2" else [])
    params += [count(f"block{i}") for i in range(resolved.num_layers)]
    return params + [count("norm"), count("embed") if tied else count("lm_head")]


def partition_uniform(num_items: int, num_parts: int) -> list[int]:
    """deepspeed.runtime.utils.partition_uniform (0.19.8), without numpy."""
    if num_items <= num_parts:
        return [min(p, num_items) for p in range(num_parts + 1)]
    chunk, residual = divmod(num_items, num_parts)
    parts = [p * chunk for p in range(num_parts + 1)]
    for i in range(residual):
        for j in range(i + 1, num_parts + 1):
            parts[j] += 1
    return parts


def partition_balanced(weights: list[int], num_parts: int) -> list[int]:
    """deepspeed.runtime.utils.partition_balanced (0.19.8): the linear partition that minimises the spread between
    the heaviest and the lightest part (the same dynamic programme, ties broken the same way)."""
    n, m = len(weights), num_parts
    if n <= m:
        return partition_uniform(n, m)
    inf = float("inf")
    dp_max = [[inf] * (m + 1) for _ in range(n + 1)]
    dp_min = [[inf] * (m + 1) for _ in range(n + 1)]
    dp_cost = [[inf] * (m + 1) for _ in range(n + 1)]
    position = [[0] * (m + 1) for _ in range(n + 1)]
    prefix = [0.0] * (n + 1)
    for i, w in enumerate(weights):
        prefix[i + 1] = prefix[i] + w
    dp_max[0][0] = 0
    dp_cost[0][0] = 0
    for i in range(1, n + 1):
        for j in range(1, min(i, m) + 1):
            for k in range(i):
                part = prefix[i] - prefix[k]
                high, low = max(dp_max[k][j - 1], part), min(dp_min[k][j - 1], part)
                if dp_cost[i][j] >= high - low:
                    dp_cost[i][j], dp_max[i][j], dp_min[i][j], position[i][j] = high - low, high, low, k
    parts = [n]
    for j in reversed(range(1, m + 1)):
        parts.append(position[parts[-1]][j])
    return list(reversed(parts))


def partition(method: str, names: list[str], params: list[int], stages: int) -> list[int]:
    """Stage boundaries as PipelineModule._partition_layers computes them: stage s runs layers [parts[s],
    parts[s+1])."""
    if method == "uniform":
        return partition_uniform(len(names), stages)
    if method == "parameters":
        return partition_balanced(params, stages)
    pattern = re.compile(method.split(":", 1)[1], re.IGNORECASE)
    return partition_balanced([1 if pattern.search(name) else 0 for name in names], stages)


@dataclass(frozen=True)
class StageLayout:
    """One stage as the partition makes it (predicted, no GPU): its layers and parameters."""

    stage: int
    layers: tuple[str, ...]
    params: int
    """Parameters its ranks hold (a tied embedding once per stage)."""
    blocks: int
    """Decoder layers on this stage."""
    first: bool
    last: bool


def stage_layouts(resolved: Any, stages: int, method: str) -> list[StageLayout]:
    """The stages DeepSpeed's partition makes; a stage holding both ends of a tied embedding holds it once."""
    names, params = layer_names(resolved), layer_params(resolved)
    parts = partition(method, names, params, stages)
    block = BLOCK_LAYER[resolved.family]
    tied = names[-1] == EMBEDDING_LAYER
    layouts = []
    for s in range(stages):
        start, stop = parts[s], parts[s + 1]
        held = sum(params[start:stop]) - (params[-1] if tied and start == 0 and stop == len(names) else 0)
        layouts.append(StageLayout(stage=s, layers=tuple(names[start:stop]), params=held,
                                   blocks=sum(1 for n in names[start:stop] if n == block), first=s == 0,
                                   last=s == stages - 1))
    return layouts


def bubble_fraction(stages: int, micro_batches: int) -> float:
    """The 1F1B schedule's ideal idle share of a step: (p-1)/(m+p-1)."""
    return (stages - 1) / (micro_batches + stages - 1)


def in_flight(stage: int, stages: int, micro_batches: int) -> int:
    """Micro-batches whose activations a stage holds at once in DeepSpeed's TrainSchedule (1F1B): stages - stage,
    at most the micro-batches of the step."""
    return min(stages - stage, micro_batches)


def hf_pieces(model: Any, family: str) -> tuple[dict[str, Any], bool, Any]:
    """(the HF model's modules by role, whether the input embedding and the LM head share one weight, the config
    the masks are built from)."""
    if family == "gpt2":
        body = model.transformer
        modules = {"embed": body.wte, "wpe": body.wpe, "drop": body.drop, "norm": body.ln_f}
        blocks = body.h
    elif family == "llama":
        body = model.model
        modules = {"embed": body.embed_tokens, "norm": body.norm, "rotary": body.rotary_emb}
        blocks = body.layers
    else:  # dsx.pipeline.check_model refuses other families before anything is launched
        raise ValueError(f"no pipeline layout for the {family} family")
    modules.update({f"block{i}": block for i, block in enumerate(blocks)})
    tied = model.lm_head.weight is modules["embed"].weight
    if not tied:
        modules["lm_head"] = model.lm_head
    return modules, tied, body.config
