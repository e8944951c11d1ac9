"""Does a configuration train the same model? (`dsx check`, `dsx sweep --check`)

A sweep may change how a model trains, never what it trains. The check runs the candidate configuration and plain
data parallel on the same data (dsx.data: the same batches for the same global batch whatever the split) from the
same weights, and compares their loss step by step, warm-up steps included. The reference is the candidate's
training without the "how": ZeRO off (or --reference-zero), no offload, no pipeline or Ulysses, no compile, no
activation checkpointing, dense attention, the plain loss; the same model, precision, optimizer, learning rate,
clipping, seed, data and global batch (reference_config).

The two losses still differ a little: another ZeRO stage, bucket, kernel or micro-batch split rounds the same sums
differently, and Adam turns small differences into whole steps (its first update is lr x the sign of each
gradient), so they grow as training goes on. How much is legitimate is measured, not assumed: a second reference,
B, makes a perturbation of the size the candidate's arithmetic may: at bf16/fp16 the same training in fp32 (how far
the precision's own rounding moves the curve; compile's fused kernels or ZeRO-2's bf16 gradient buckets round no
more than that), at fp32 the batch split the other way (another summation order), with its micro-batch halved
either way (alternate_split) so that it fits. The tolerance is MARGIN times the largest step difference between A
and B, but at least FLOOR (relative to the loss) for references that agree to the last bit. A step outside it and
the verdict is "differs". References further apart than UNSTABLE of the loss say the training itself is chaotic at
that learning rate (a note says so: the check is weak there).

Pipeline stages, 1-bit optimizers and sparse attention change the arithmetic on purpose (a different reduction
schedule, compressed gradients, attention over fewer pairs): their difference is reported with the verdict "by
design", not judged.
"""

from __future__ import annotations

import copy
import json
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dsx.report.facts import curve

MARGIN = 4.0
"""Tolerance = MARGIN x the references' spread: the candidate may sum in an order as far from reference A as B's is,
and rounding differences grow with the steps at a rate that varies by a small factor from one order to another."""
UNSTABLE = 0.05
"""References further apart than this share of a step's loss: any perturbation changes the curve this much (a loss
spike early in training without learning-rate warm-up, say), so the check cannot tell configurations apart; the
verdict says so."""
FP8_FLOOR = 0.01
"""--fp8: float8 matmuls round inputs and weights to 8 bits (3 mantissa bits for e4m3), so no run agrees with a bf16
reference to bf16's rounding. A user accepts float8 training that stays within 1% of the bf16 loss at every step
(torchao's and torchtitan's published float8 curves sit well inside that on Llama-3); beyond it the check says
"differs" and the sweep passes the configuration over. Reported either way: the row keeps the largest difference."""

FLOOR = {"fp32": 1e-6, "bf16": 1e-3, "fp16": 1e-3}
"""The smallest tolerance, relative to the reference's loss at that step, by precision: a few units of the dtype's
rounding (2^-24 ~ 6e-8 for fp32 sums; bf16's 8-bit mantissa, 2^-9 ~ 2e-3, for its matmuls), for references that
happen to agree exactly (one micro-batch that cannot be split)."""
ADAM_KEYS = ("lr", "betas", "eps", "weight_decay", "bias_correction", "torch_adam", "adam_w_mode")
"""Keys of a 1-bit optimizer's params that plain Adam takes (its reference)."""


def verdict_of(verdict: str, steps: int, **fields):
    """The verdict as the row records it (dsx.results.ParityVerdict)."""
    from dsx.results import ParityVerdict

    return ParityVerdict(verdict=verdict, steps=steps, **fields)


def parity_of(judgement, check_id: str, role: str, candidate: str | None, references: list[str]):
    """The row's `parity` (dsx.results.ParityInfo) carrying a verdict."""
    from dsx.results import ParityInfo

    return ParityInfo(**judgement.model_dump(), check_id=check_id, role=role, candidate_run_id=candidate,
                      reference_run_ids=references)


def alternate_split(micro: int, accum: int) -> tuple[int, int]:
    """Another (micro-batch, grad-accum) with the same product: the micro-batch halved (its largest proper
    divisor) when it can be, else grad-accum's smallest factor moved into the micro-batch; (micro, accum) itself
    when both are 1."""
    if micro > 1:
        divisor = max(d for d in range(1, micro) if micro % d == 0)
        return divisor, accum * micro // divisor
    if accum > 1:
        factor = min(d for d in range(2, accum + 1) if accum % d == 0)
        return factor, accum // factor
    return micro, accum


def by_design(trial) -> str | None:
    """Why a configuration's arithmetic differs from plain data parallel on purpose, or None."""
    from dsx.onebit import kind_of

    reasons = []
    if trial.pipeline is not None:
        reasons.append(f"{trial.pipeline.stages} pipeline stages (each stage's reduction and the 1F1B schedule)")
    if kind_of(trial.ds_config):
        reasons.append(f"the 1-bit optimizer {trial.ds_config['optimizer']['type']} (compressed gradients)")
    if trial.sparse is not None and trial.sparse.info.get("applied"):
        reasons.append(f"sparse attention ({trial.sparse.info.get('mode')}: attention over fewer token pairs)")
    return "; ".join(reasons) or None


def judge(candidate: list[float], ref_a: list[float], ref_b: list[float], precision: str,
          design: str | None = None, fp8: bool = False):
    """The verdict on the candidate's losses against the two references' (every step, warm-up included); with fp8,
    at least FP8_FLOOR x the loss is allowed."""
    steps = len(ref_a)
    if not steps or len(candidate) != steps or len(ref_b) != steps:
        return verdict_of("unknown", steps, reason=f"loss curves of different lengths (candidate {len(candidate)}, "
                                                   f"references {len(ref_a)} and {len(ref_b)})")
    diffs = [abs(c - a) for c, a in zip(candidate, ref_a)]
    spread = max(abs(a - b) for a, b in zip(ref_a, ref_b))
    floor = FP8_FLOOR if fp8 else FLOOR.get(precision, FLOOR["bf16"])
    allowed = [max(MARGIN * spread, floor * abs(a)) for a in ref_a]
    worst = max(range(steps), key=lambda i: diffs[i] - allowed[i])
    largest = max(range(steps), key=lambda i: diffs[i])
    b_is = "in fp32" if precision != "fp32" else "split the other way"
    rule = (f"{MARGIN:g} x the references' spread ({spread:.3g}: B is A {b_is}), at least {floor:g} x the loss "
            f"({'float8 matmuls: the tolerance a user accepts, dsx.parity.FP8_FLOOR' if fp8 else precision})")
    notes = []
    if _finite(spread) and any(abs(a - b) > UNSTABLE * abs(a) for a, b in zip(ref_a, ref_b)):
        notes.append(f"the references drift apart by {spread:.3g}, more than {UNSTABLE:.0%} of a step's loss: at this "
                     "learning rate and precision any small difference grows that large, so the check cannot tell "
                     "configurations apart (a learning-rate warm-up, or a lower rate, makes it sharp)")
    finite = all(map(_finite, candidate + ref_a + ref_b))
    if not finite:
        verdict, reason = "differs", "a non-finite loss"
    elif design:
        verdict, reason = "by design", None
    else:
        verdict = "same" if diffs[worst] <= allowed[worst] else "differs"
        reason = None if verdict == "same" else (f"step {worst}: |{candidate[worst]:.6g} - {ref_a[worst]:.6g}| = "
                                                 f"{diffs[worst]:.3g} > {allowed[worst]:.3g}")
    return verdict_of(verdict, steps, max_abs_diff=diffs[largest], at_step=largest, reference_spread=spread,
                      tolerance=max(allowed), rule=rule, by_design=design, reason=reason, notes=notes)


def _finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")


def reference_config(config: dict, micro: int, accum: int, replicas: int, zero: int, fp32: bool = False) -> dict:
    """The candidate's DeepSpeed config without its "how": ZeRO `zero` with nothing offloaded, no pipeline or
    Ulysses, no sparse attention or compile block, a 1-bit optimizer replaced by Adam with the same
    hyper-parameters; the batch sizes of the reference's split; with fp32, bf16, fp16 and torch_autocast off
    (reference B of a mixed-precision candidate)."""
    from dsx.onebit import kind_of

    out = copy.deepcopy(config)
    if fp32:
        for key in ("bf16", "fp16"):
            if isinstance(out.get(key), dict) and out[key].get("enabled"):
                out[key] = {"enabled": False}
        if isinstance(out.get("torch_autocast"), dict) and out["torch_autocast"].get("enabled"):
            out["torch_autocast"] = {"enabled": False}
    out["zero_optimization"] = {"stage": zero}
    for key in ("pipeline", "sparse_attention", "compile", "activation_checkpointing", "sequence_parallel_size"):
        out.pop(key, None)
    if kind_of(out):
        params = out["optimizer"].get("params") or {}
        out["optimizer"] = {"type": "Adam", "params": {k: v for k, v in params.items() if k in ADAM_KEYS}}
    out["train_micro_batch_size_per_gpu"] = micro
    out["gradient_accumulation_steps"] = accum
    out["train_batch_size"] = micro * accum * replicas
    return out


def reference_request(candidate, trial, config_path: Path, micro: int, accum: int, results: str):
    """The reference's dsx.run.RunRequest: the candidate's model, data, steps and ranks (a pipeline's replicas)
    with the config at config_path, and none of the candidate's toggles that change how it runs."""
    replicas = trial.world_size // (trial.pipeline.stages if trial.pipeline else 1) // (trial.sequence_parallel or 1)
    return replace(candidate, config_path=str(config_path), preset=None, config_flags={}, ds_sets=(),
                   gpus=replicas if trial.pipeline or trial.sequence_parallel else candidate.gpus, compile=False,
                   act_ckpt=False, sequence_parallel=None,
                   loss="plain", loss_tile_tokens=None, act_ckpt_offload=False, tiled_mlp=False, kernels=None,
                   fp8=None,
                   sparse_attention="none" if trial.sparse is not None else None, sparse_sets=(),
                   pipeline_stages=None, pipeline_partition=None, inject_failure=None, results=results,
                   sweep=None, command=[], flop_check=False,
                   hostfile=None if trial.pipeline else candidate.hostfile)


@dataclass
class CheckPlan:
    """The three runs of a check, resolved: nothing is started yet."""

    check_id: str
    candidate: Any
    """The candidate's dsx.run.Trial (its request inside)."""
    references: list
    """Reference A (the candidate's split, or --reference-micro-batch's) and B (alternate_split of A's)."""
    design: str | None
    folder: Path
    notes: list[str] = field(default_factory=list)
    """What weakens the check (dropout on: the references' spread is dropout noise)."""


def plan_check(candidate_request, reference_zero: int = 0, reference_micro: int | None = None,
               trial=None) -> CheckPlan:
    """Resolve the candidate and write the references' configs; dsx.run.RunRefused for a request dsx would refuse,
    or a reference micro-batch that does not divide the candidate's batch per replica."""
    from dsx.config_facts import precision_of
    from dsx.run import RunRefused, resolve_trial
    from dsx.run.command_line import run_command

    trial = trial or resolve_trial(candidate_request)
    check_id = uuid.uuid4().hex[:12]
    results = Path(candidate_request.results)
    folder = (results.parent / results.stem / f"check-{check_id}").resolve()
    per_replica = trial.micro_batch * trial.grad_accum
    micro = reference_micro or trial.micro_batch
    if per_replica % micro:
        raise RunRefused(f"--reference-micro-batch {micro} does not divide the candidate's {per_replica} samples per "
                         f"replica per step (micro-batch {trial.micro_batch} x grad-accum {trial.grad_accum})")
    splits = [(micro, per_replica // micro)]
    splits.append(alternate_split(*splits[0]))
    replicas = trial.world_size // (trial.pipeline.stages if trial.pipeline else 1) // (trial.sequence_parallel or 1)
    mixed = precision_of(trial.ds_config) != "fp32"
    references = []
    for name, (m, a) in zip("ab", splits):
        config = reference_config(trial.ds_config, m, a, replicas, reference_zero, fp32=mixed and name == "b")
        path = folder / f"reference-{name}.json"
        request = reference_request(candidate_request, trial, path, m, a, candidate_request.results)
        request.command = run_command(request)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config, indent=2) + "\n")
        try:
            references.append(resolve_trial(request))
        except RunRefused as exc:
            raise RunRefused(f"the reference (plain data parallel, ZeRO-{reference_zero}) cannot run: {exc}") from None
    if precision_of(references[0].ds_config) != precision_of(trial.ds_config):
        raise RunRefused("the reference's precision differs from the candidate's")
    notes = []
    if dropout := dropouts(trial.resolved):
        notes.append("dropout is on (" + ", ".join(f"{k}={v:g}" for k, v in dropout.items()) + "): the references "
                     "draw different masks, so their spread (and the tolerance) is dropout noise; for a sharp check "
                     "give the model " + " ".join(f"--set {k}=0" for k in dropout))
    return CheckPlan(check_id=check_id, candidate=trial, references=references, design=by_design(trial),
                     folder=folder, notes=notes)


def dropouts(resolved) -> dict[str, float]:
    """The model config's dropout probabilities above 0 (GPT-2's *_pdrop, BERT's *_dropout_prob, Llama's
    attention_dropout, ...)."""
    config = resolved.hf_config.to_dict()
    return {key: float(value) for key, value in config.items()
            if ("dropout" in key or key.endswith("pdrop")) and not key.startswith(("summary_", "classifier"))
            and isinstance(value, (int, float))
            and not isinstance(value, bool) and value > 0}


def run_check(plan: CheckPlan, say=print, existing: dict | None = None) -> tuple:
    """Run reference A, reference B, then the candidate (each appends its row, all with the check's id); the
    candidate's row carries the verdict. With `existing` (a row of the candidate's trial already in the results,
    e.g. a sweep's best), the candidate does not run again: reference B's row carries the verdict on it. A reference
    that does not finish ok ends the check: verdict unknown. Returns the judgement and the rows by name ('a', 'b',
    'candidate')."""
    from dsx.config_facts import precision_of
    from dsx.results import ParityInfo
    from dsx.run import execute, prepare

    rows: dict = {"candidate": existing} if existing else {}
    holder: dict = {}

    def verdict(row, role: str, references: list[str]) -> None:
        candidate = row if role == "candidate" else existing
        if row.status != "ok":
            name = "the candidate" if role == "candidate" else "reference B"
            judgement = verdict_of("unknown", 0, reason=f"{name} ended {row.status}: {row.error}")
        else:
            judgement = judge(curve(candidate), curve(rows["a"]), curve(row if role == "reference" else rows["b"]),
                              precision_of(candidate.ds_config if role == "candidate" else candidate["ds_config"]),
                              plan.design, fp8=bool(plan.candidate.kernels and plan.candidate.kernels.fp8))
        judgement.notes = judgement.notes + plan.notes
        holder["judgement"] = judgement
        run_id = row.run_id if role == "candidate" else candidate["run_id"]
        row.parity = parity_of(judgement, plan.check_id, role, run_id, references)

    for name, trial in zip("ab", plan.references):
        say(f"dsx check {plan.check_id}: reference {name.upper()} (plain data parallel, ZeRO-"
            f"{trial.ds_config['zero_optimization']['stage']}, {precision_of(trial.ds_config)}, micro-batch "
            f"{trial.micro_batch} x grad-accum {trial.grad_accum}) ...")
        if name == "b" and existing:
            amend = lambda row: verdict(row, "reference", [rows["a"].run_id, row.run_id])  # noqa: E731
        else:
            amend = lambda row: setattr(row, "parity",  # noqa: E731
                                        ParityInfo(check_id=plan.check_id, role="reference"))
        rows[name] = execute(prepare(trial.request, trial=trial), amend=amend)
        if rows[name].status != "ok":
            judgement = verdict_of("unknown", 0, reason=f"reference {name.upper()} ended {rows[name].status}: "
                                                        f"{rows[name].error}", notes=plan.notes)
            return judgement, rows
    if existing:
        return holder["judgement"], rows
    candidate = plan.candidate
    say(f"dsx check {plan.check_id}: the candidate ...")
    rows["candidate"] = execute(prepare(candidate.request, trial=candidate),
                                amend=lambda row: verdict(row, "candidate", [rows["a"].run_id, rows["b"].run_id]))
    return holder["judgement"], rows


def table(judgement, rows: dict) -> str:
    """Step by step: both references, the candidate, |candidate - reference A|; then the verdict."""
    a, b = curve(rows.get("a")) if rows.get("a") else [], curve(rows.get("b")) if rows.get("b") else []
    c = curve(rows["candidate"]) if rows.get("candidate") else []
    lines = []
    if a and b and c and len(a) == len(b) == len(c):
        lines.append(f"{'step':>4}  {'reference A':>12}  {'reference B':>12}  {'candidate':>12}  {'|cand - A|':>10}")
        for i, values in enumerate(zip(a, b, c)):
            cells = "  ".join(f"{v:>12.6f}" for v in values)
            lines.append(f"{i:>4}  {cells}  {abs(values[2] - values[0]):>10.3g}")
    lines.append(verdict_line(judgement))
    lines += [f"note: {note}" for note in judgement.notes]
    return "\n".join(lines)


def verdict_line(j) -> str:
    if j.verdict == "unknown":
        return f"verdict: unknown ({j.reason})"
    head = {"same": "SAME model", "differs": "DIFFERS", "by design": "differs by design"}[j.verdict]
    text = (f"verdict: {head}: largest |candidate - reference| {j.max_abs_diff:.3g} at step {j.at_step} of "
            f"{j.steps}; references' spread {j.reference_spread:.3g}; tolerance {j.tolerance:.3g} ({j.rule})")
    if j.by_design:
        text += f"; not judged: {j.by_design}"
    if j.reason:
        text += f"; {j.reason}"
    return text
