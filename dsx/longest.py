"""The longest sequence a model trains on a machine (`dsx estimate --model M --longest`), and how.

A length fits when one configuration of `dsx sweep`'s default search (ZeRO 1-3 x offload none/partial/full x
checkpointing, eager: EAGER, dsx.sweep.space) fits the GPU, the host's memory and the NVMe path at micro-batch 1, as
`--largest` judges a model size (dsx.largest), with dsx.fit.ACTIVATION_ERROR of the predicted activations kept free
on the GPU. The search doubles from 1,024 tokens until a length does not fit, then bisects in steps of STEP
tokens. It is asked twice for a causal LM: with transformers' plain loss, whose fp32 logits exist whole, and with
`--loss tiled` (dsx.rank.tiled_loss), so the answer shows what the loss costs. A
RoPE model's max_position_embeddings follows the length (no parameters change); a model with learned positions
stops at its table's size unless --set raises it (which adds parameters).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

STEP = 1024
"""The answer's granularity (tokens): lengths are multiples of it."""
LIMIT = 1 << 24
"""The longest length searched (16M tokens): beyond it the answer says 'at least'."""
EAGER = (False,)
"""The compile choices --longest searches: none. The compiled activation factors (dsx.calibration) were measured at
1,024 tokens; the one compiled, checkpointed dense row at 32,768 tokens (gpt2-medium, bench/sparse/h100_rest2) held
5.1 GiB more than they predict, 66% of its predicted 7.8 GiB of activations, so a compiled answer at the GPU's edge
would not be one to run as is. Compile the answer's configuration in a sweep: the trial measures it."""


@dataclass
class Longest:
    loss: str
    savers: bool = False
    """With --act-ckpt-offload and --tiled-mlp in every checkpointed configuration (dsx.rank.memory_savers)."""
    length: int | None = None
    """The longest length that fits (None: not even STEP tokens)."""
    limit: str | None = None
    """What bounds the search other than memory: the model's positions, or LIMIT."""
    next_length: int | None = None
    next_reason: str | None = None
    plan: Any = None
    """dsx.sweep.planning.Plan of the configuration the default search puts first at `length`."""
    estimate: Any = None
    spec: Any = None
    """The SweepSpec at `length` (the answer's command is built from it)."""
    tried: list[tuple[int, bool]] = field(default_factory=list)


def length_spec(spec, length: int, family):
    """The sweep spec at `length`: a RoPE model's positions raised to it when needed."""
    from dsx.sweep.space import GRAD_ACCUM_CHOICES

    overrides = dict(spec.overrides)
    if not family.learned_positions and length > _positions(spec):
        overrides[family.positions_key] = length
    return replace(spec, seq_len=length, overrides=overrides, search="default", grad_accum_choices=GRAD_ACCUM_CHOICES)


def _positions(spec) -> int:
    from dsx.models import resolve_model

    resolved = resolve_model(spec.model, spec.overrides, vocab_pad=spec.vocab_pad)
    from dsx.model_presets import FAMILIES

    return int(getattr(resolved.hf_config, FAMILIES[resolved.family].positions_key))


def longest(spec, gpu: str, loss: str) -> Longest:
    """The longest sequence of spec.model (multiples of STEP) that fits at micro-batch 1 with `loss`."""
    from dsx.fit import ACTIVATION_ERROR
    from dsx.largest import best_plan, configuration_fits
    from dsx.model_presets import FAMILIES
    from dsx.models import resolve_model

    family = FAMILIES[resolve_model(spec.model, spec.overrides, vocab_pad=spec.vocab_pad).family]
    spec = replace(spec, loss=loss, default_compile=EAGER, activation_margin=ACTIVATION_ERROR)
    ceiling = min(LIMIT, _positions(spec)) if family.learned_positions else LIMIT
    answer = Longest(loss=loss, savers=spec.act_ckpt_offload and spec.tiled_mlp)
    if ceiling < LIMIT:
        answer.limit = (f"{family.positions_key}={ceiling:,} (learned positions: --set {family.positions_key}=N "
                        "raises it)")
    reasons: dict[int, str] = {}

    def fits(length: int) -> bool:
        ok, reasons[length] = configuration_fits(length_spec(spec, length, family), gpu)
        answer.tried.append((length, ok))
        return ok

    low, high = 0, None  # low fits (0: none yet), high does not (None: none found yet)
    length = min(STEP, ceiling)
    while high is None:
        if fits(length):
            low = length
            if length >= ceiling:
                break
            length = min(length * 2, ceiling)
        else:
            high = length
    if high is None and ceiling == LIMIT:
        answer.limit = f"the search stops at {LIMIT:,} tokens"
    while high is not None and high - low > STEP:
        middle = (low + high) // 2 // STEP * STEP
        if fits(middle):
            low = middle
        else:
            high = middle
    if high is not None:
        answer.next_length, answer.next_reason = high, reasons[high]
    if low == 0:
        return answer
    answer.length = low
    answer.spec = length_spec(spec, low, family)
    answer.plan, answer.estimate = best_plan(answer.spec, gpu)
    return answer
