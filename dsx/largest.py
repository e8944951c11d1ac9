"""The largest model of a family that trains on a machine (`dsx estimate --model M --largest`), and how.

The scaling rule: a family grows the way its published sizes grow (a ladder of anchors, below), and between two
published sizes A and B it takes the steps in between:
- width h from A's up to B's in steps of A's head size x (A's KV heads under grouped-query attention, so that
  the heads stay a multiple of the KV heads; 1 with one KV head per head): the heads are h / head size;
- depth at width h interpolated linearly between A's and B's depth (rounded), then one layer at a time up to the
  next width's depth, so no size between two rungs is skipped;
- FFN width by Meta's formula for Llama (multiple_of x ceil(int(m x int(8h/3)) / multiple_of), multiple_of 1024
  for Llama-3 and 256 for Llama-2, m the ffn_dim_multiplier interpolated between A's and B's: the m each anchor
  needs for its published FFN); GPT-2's FFN is 4h;
- the rest (vocabulary, positions, norms, RoPE, tied or not below the first untied anchor) from the preset the user
  named and the lower anchor.
The rungs are ordered by parameters (counted analytically; the anchors' counts equal the published ones), and the
largest rung that fits is found by bisection: a rung fits when one configuration of `dsx sweep`'s default search
(dsx.sweep.space: ZeRO 1-3 x offload none/partial/full x checkpointing x compile) fits the GPU, the host's memory
and the NVMe path at micro-batch 1 (with --min-tflops: when the configuration that search's plan puts first is
also predicted at least that fast); the answer's configuration is the one the plan puts first. The host memory it
plans with is the host's less dsx.fit.HOST_ERROR (the estimator's worst judged host error): the answer is meant to
run as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsx.models import MODELS


class LargestError(ValueError):
    """A --largest request that cannot be answered: the message says why."""


@dataclass(frozen=True)
class Anchor:
    """A published size of a family."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    tied: bool
    ffn_multiplier: float = 1.0
    """Meta's ffn_dim_multiplier that gives this anchor's FFN (Llama; unused for GPT-2)."""


@dataclass(frozen=True)
class Ladder:
    name: str
    family: str
    anchors: tuple[Anchor, ...]
    ffn_multiple: int
    """Meta's multiple_of for the FFN width (GPT-2's FFN is 4h and needs none: 0)."""
    source: str


LADDERS: dict[str, Ladder] = {ladder.name: ladder for ladder in (
    Ladder("llama-3", "llama", (
        Anchor("Llama-3.2-1B", 2048, 16, 32, 8, 8192, True, 1.5),
        Anchor("Llama-3.2-3B", 3072, 28, 24, 8, 8192, True, 1.0),
        Anchor("Llama-3-8B", 4096, 32, 32, 8, 14336, False, 1.3),
        Anchor("Llama-3-70B", 8192, 80, 64, 8, 28672, False, 1.3),
        Anchor("Llama-3.1-405B", 16384, 126, 128, 8, 53248, False, 1.2),
    ), 1024, "meta-llama config.json of Llama-3.2-1B/3B, Meta-Llama-3-8B/70B and Llama-3.1-405B; the FFN formula "
             "of Meta's reference model.py (multiple_of 1024, ffn_dim_multiplier 1.3 for 8B/70B, 1.2 for 405B)"),
    Ladder("llama-2", "llama", (
        Anchor("Llama-2-7B", 4096, 32, 32, 32, 11008, False, 1.0),
        Anchor("Llama-2-13B", 5120, 40, 40, 40, 13824, False, 1.0),
        Anchor("Llama-2-70B", 8192, 80, 64, 8, 28672, False, 1.3),
    ), 256, "meta-llama/Llama-2-{7b,13b,70b}-hf config.json; the FFN formula of Meta's reference model.py "
            "(multiple_of 256, ffn_dim_multiplier 1.3 for 70B)"),
    Ladder("gpt2", "gpt2", (
        Anchor("GPT-2", 768, 12, 12, 12, 3072, True),
        Anchor("GPT-2 medium", 1024, 24, 16, 16, 4096, True),
        Anchor("GPT-2 large", 1280, 36, 20, 20, 5120, True),
        Anchor("GPT-2 XL", 1600, 48, 25, 25, 6400, True),
        Anchor("GPT-3 2.7B", 2560, 32, 32, 32, 10240, True),
        Anchor("GPT-3 6.7B", 4096, 32, 32, 32, 16384, True),
        Anchor("GPT-3 13B", 5120, 40, 40, 40, 20480, True),
        Anchor("GPT-3 175B", 12288, 96, 96, 96, 49152, True),
    ), 0, "openai-community/gpt2* config.json, then GPT-3's sizes (Brown et al. 2020, Table 2.1; 13B's width "
          "5140 taken as 40 heads x 128 = 5120) in GPT-2's layout"),
)}

PRESET_LADDERS = {"llama-1b": "llama-3", "llama-3b": "llama-3", "llama-8b": "llama-3", "llama-7b": "llama-2",
                  "gpt2": "gpt2", "gpt2-medium": "gpt2", "gpt2-large": "gpt2", "gpt2-xl": "gpt2"}
"""Which family's published sizes a preset scales along."""


@dataclass(frozen=True)
class Rung:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    tied: bool
    params: int
    anchor: str | None = None
    """The published size this rung is, if it is one."""

    def overrides(self, family: str) -> dict[str, Any]:
        """The `--set` overrides that make the preset this shape."""
        if family == "gpt2":
            return {"n_embd": self.hidden, "n_layer": self.layers, "n_head": self.heads}
        return {"hidden_size": self.hidden, "num_hidden_layers": self.layers, "num_attention_heads": self.heads,
                "num_key_value_heads": self.kv_heads, "intermediate_size": self.ffn,
                "tie_word_embeddings": self.tied}

    def describe(self) -> str:
        heads = f"{self.heads} heads" + (f" / {self.kv_heads} KV heads" if self.kv_heads != self.heads else "")
        what = f"{self.layers} layers, hidden {self.hidden}, {heads}, FFN {self.ffn}"
        return what + (f" ({self.anchor})" if self.anchor else "")


def ladder_of(preset: str) -> Ladder:
    if preset not in PRESET_LADDERS:
        known = ", ".join(PRESET_LADDERS)
        raise LargestError(f"--largest scales a model along its family's published sizes; dsx knows them for the "
                           f"GPT-2 and Llama presets ({known}), not for {preset}")
    return LADDERS[PRESET_LADDERS[preset]]


def params_of(family: str, vocab: int, positions: int, hidden: int, layers: int, heads: int, kv_heads: int,
              ffn: int, tied: bool) -> int:
    """Parameters as transformers counts them (a tied head once): GPT-2's and Llama's layouts, no biases in Llama."""
    if family == "gpt2":
        return vocab * hidden + positions * hidden + layers * (12 * hidden * hidden + 13 * hidden) + 2 * hidden
    head_dim = hidden // heads
    layer = 2 * hidden * hidden + 2 * hidden * kv_heads * head_dim + 3 * hidden * ffn + 2 * hidden
    return vocab * hidden * (1 if tied else 2) + layers * layer + hidden


def llama_ffn(hidden: int, multiplier: float, multiple_of: int) -> int:
    """Meta's FeedForward width (llama/model.py): int(2 x 4h / 3), times ffn_dim_multiplier, up to multiple_of."""
    width = int(multiplier * int(2 * 4 * hidden / 3))
    return multiple_of * ((width + multiple_of - 1) // multiple_of)


def rungs(preset: str) -> list[Rung]:
    """Every shape of the preset's family ladder (module docstring), smallest first."""
    ladder = ladder_of(preset)
    config = MODELS[preset].config
    vocab = config.get("vocab_size")
    positions = config.get("n_positions", config.get("max_position_embeddings", 0))
    out: dict[tuple, Rung] = {}

    def add(hidden: int, layers: int, heads: int, kv: int, ffn: int, tied: bool, anchor: str | None = None) -> None:
        params = params_of(ladder.family, vocab, positions, hidden, layers, heads, kv, ffn, tied)
        out[(hidden, layers)] = Rung(hidden, layers, heads, kv, ffn, tied, params, anchor)

    for a, b in zip(ladder.anchors, ladder.anchors[1:]):
        head_dim = a.hidden // a.heads
        gqa = a.kv_heads < a.heads
        step = head_dim * (a.kv_heads if gqa else 1)
        widths = list(range(a.hidden, b.hidden, step))
        depth = {h: round(a.layers + (b.layers - a.layers) * (h - a.hidden) / (b.hidden - a.hidden)) for h in widths}
        for index, h in enumerate(widths):
            heads = h // head_dim
            kv = a.kv_heads if gqa else heads
            share = (h - a.hidden) / (b.hidden - a.hidden)
            multiplier = a.ffn_multiplier + (b.ffn_multiplier - a.ffn_multiplier) * share
            if ladder.family == "gpt2":
                ffn = 4 * h
            elif h == a.hidden:
                ffn = a.ffn
            else:
                ffn = llama_ffn(h, multiplier, ladder.ffn_multiple)
            top = depth[widths[index + 1]] if index + 1 < len(widths) else b.layers
            for layers in range(depth[h], max(depth[h] + 1, top)):
                add(h, layers, heads, kv, ffn, a.tied,
                    a.name if (h, layers) == (a.hidden, a.layers) else None)
    last = ladder.anchors[-1]
    add(last.hidden, last.layers, last.heads, last.kv_heads, last.ffn, last.tied, last.name)
    return sorted(out.values(), key=lambda r: r.params)


@dataclass
class Answer:
    preset: str
    ladder: str
    rung: Rung | None
    """The largest rung that fits (None: not even the smallest)."""
    plan: Any = None
    """dsx.sweep.planning.Plan of the configuration the default search would run first for that rung."""
    estimate: Any = None
    """dsx.estimate.Estimate of that configuration at its start micro-batch."""
    next_rung: Rung | None = None
    next_reason: str | None = None
    """Why the next rung up does not fit (its closest configuration's binding resource), or is too slow."""
    tried: list[tuple[Rung, bool]] = field(default_factory=list)


def largest(spec, gpu: str, min_tflops: float | None = None) -> Answer:
    """The largest rung of spec.model's ladder that fits on `gpu` (spec: a dsx.sweep.SweepSpec carrying the model,
    the user's --set/--seq-len/precision/--ds-set, --gpus, --memory-cap, --host-memory, --nvme-free; its
    host_memory is the one planned with, margin included), with the configuration the default search would run
    first; with `min_tflops`, the largest whose first configuration is predicted at least that fast."""
    ladder = ladder_of(spec.model)
    shapes = rungs(spec.model)
    low, high = -1, len(shapes)  # shapes[low] fits, shapes[high] does not
    answer = Answer(spec.model, ladder.name, None)
    reasons: dict[int, str] = {}
    while high - low > 1:
        middle = (low + high) // 2
        fits, reason = _fits(spec, shapes[middle], gpu)
        if fits and min_tflops is not None:
            fits, reason = _fast_enough(spec, shapes[middle], gpu, min_tflops)
        answer.tried.append((shapes[middle], fits))
        if fits:
            low = middle
        else:
            high, reasons[middle] = middle, reason
    if low < 0:
        answer.next_rung, answer.next_reason = shapes[0], reasons.get(0)
        return answer
    answer.rung = shapes[low]
    if high < len(shapes):
        answer.next_rung, answer.next_reason = shapes[high], reasons.get(high)
    answer.plan, answer.estimate = best_plan(_rung_spec(spec, answer.rung, ladder.family), gpu)
    return answer


def _rung_spec(spec, rung: Rung, family: str):
    from dataclasses import replace

    from dsx.sweep.space import GRAD_ACCUM_CHOICES

    return replace(spec, overrides={**spec.overrides, **rung.overrides(family)}, search="default",
                   grad_accum_choices=GRAD_ACCUM_CHOICES)


def _fits(spec, rung: Rung, gpu: str) -> tuple[bool, str]:
    """Whether one default-search configuration fits the rung at micro-batch 1 (configuration_fits)."""
    return configuration_fits(_rung_spec(spec, rung, ladder_of(spec.model).family), gpu)


def configuration_fits(rung_spec, gpu: str) -> tuple[bool, str]:
    """Whether one configuration of the default search of `rung_spec` fits at micro-batch 1 (checkpointing, compile
    and ZeRO-3's partial ratios included); else the binding resource of the one that came closest."""
    from dsx.estimate import GPUS, EstimateError, estimate
    from dsx.estimate.rows import setup_of_trial
    from dsx.fit import host_capacity, nvme_capacity, shortfall_text
    from dsx.fit import Resource
    from dsx.run import RunRefused, resolve_trial
    from dsx.sweep.space import sweep_configurations
    from dsx.sweep.trials import run_request

    spec = rung_spec
    host, nvme = host_capacity(spec.host_memory), nvme_capacity(spec.nvme_free, spec.nvme_path)
    closest: tuple[float, str] | None = None
    for configuration in sweep_configurations(rung_spec):
        try:
            trial = resolve_trial(run_request(rung_spec, configuration, 1, "fixed"))
            result = estimate(setup_of_trial(trial, GPUS[gpu], 1, 1, host_memory=host, nvme_free=nvme,
                                             activation_margin=spec.activation_margin), search_max=False)
        except (RunRefused, EstimateError):
            continue
        if result.fits:
            return True, ""
        short = [Resource(r["name"], r["needed"], r["capacity"], r["detail"]) for r in result.resources
                 if not r["fits"]]
        worst = max(r.needed / r.capacity for r in short)
        if closest is None or worst < closest[0]:
            closest = (worst, f"{configuration.label}: " + "; ".join(shortfall_text(r) for r in short))
    return False, closest[1] if closest else "dsx refuses every configuration of it"


def predicted_tflops(rung_spec, estimate) -> float:
    """Model TFLOP/s per GPU of a predicted configuration (dsx.flops, as rows count them)."""
    from dsx.flops import model_flops_per_token
    from dsx.models import resolve_model

    resolved = resolve_model(rung_spec.model, rung_spec.overrides, seq_len=rung_spec.seq_len,
                             vocab_pad=rung_spec.vocab_pad)
    return estimate.tokens_per_s * model_flops_per_token(resolved) / estimate.world_size / 1e12


def _fast_enough(spec, rung: Rung, gpu: str, min_tflops: float) -> tuple[bool, str]:
    rung_spec = _rung_spec(spec, rung, ladder_of(spec.model).family)
    best, predicted = best_plan(rung_spec, gpu)
    if best is None:
        return False, "no configuration is predicted to run it"
    tflops = predicted_tflops(rung_spec, predicted)
    if tflops < min_tflops:
        return False, (f"its fastest configuration ({best.configuration.label}, micro-batch {best.start}) is predicted "
                       f"at {tflops:,.0f} TFLOP/s, below --min-tflops {min_tflops:g}")
    return True, ""


def best_plan(rung_spec, gpu: str):
    """The configuration the default search of `rung_spec` would run first (the fastest predicted that fits) and its
    estimate; (None, None) when every one is skipped."""
    from dsx.estimate import estimate
    from dsx.sweep.planning import plan
    from dsx.sweep.space import sweep_configurations

    plans = [p for p in plan(rung_spec, sweep_configurations(rung_spec), gpu) if p.skip is None and p.tokens_per_s]
    if not plans:
        return None, None
    best = plans[0]
    return best, _estimate_at(rung_spec, best, gpu, estimate)


def _estimate_at(rung_spec, item, gpu: str, estimate):
    from dsx.estimate import GPUS
    from dsx.estimate.rows import setup_of_trial
    from dsx.fit import host_capacity, nvme_capacity
    from dsx.run import resolve_trial
    from dsx.sweep.trials import run_request

    trial = resolve_trial(run_request(rung_spec, item.configuration, item.start, "fixed"))
    return estimate(setup_of_trial(trial, GPUS[gpu], host_memory=host_capacity(rung_spec.host_memory),
                                   nvme_free=nvme_capacity(rung_spec.nvme_free, rung_spec.nvme_path),
                                   activation_margin=rung_spec.activation_margin), search_max=False)
