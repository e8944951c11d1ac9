"""Derive the estimator's calibrated constants from committed result rows: what dsx/calibration.py ships.

dsx ships the constants as literal numbers (dsx.calibration.GPUS) and reads no result file at run time; this is the
code that computed them. Run it from the repository root to print them, with the run_ids of the rows they came
from, and whether they equal what dsx ships:

    python bench/estimator/calibrate.py [--kind h100-80gb|h200-141gb] [--rows FILE ...] [--headroom-rows FILE]

tests/test_calibration.py imports it and checks the shipped literals against it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import fields, replace
from pathlib import Path

from dsx.calibration import (AUTOCAST_PAIRS, AUTOCAST_S_PER_PARAM, CALIBRATION_FILES, CALIBRATION_ROWS, COMPILE_FILE,
                             COMPILE_HEAD_FACTOR,
                             COMPILE_LAYER_FACTOR, COMPILE_RUN_IDS, COMPILE_SPEEDUP, DROPOUT_FILES,
                             DROPOUT_FREE_SPEEDUP, DROPOUT_RUN_IDS, FP8_SPEEDUP, GPUS, H200_COMPILE_PAIRS,
                             HEADROOM_FILE, HEADROOM_STEP,
                             KERNEL_FILES, KERNEL_PAIRS, LIGER_SPEEDUP, LLAMA_COMPILE_FACTORS, LLAMA_COMPILE_FILE,
                             LLAMA_COMPILE_RUN_IDS, WIDTH_FILES, WIDTH_RUN_IDS,
                             ZERO3_FETCH_PAIRS, ZERO3_FETCH_S,
                             ULYSSES_BYTES_PER_S, ULYSSES_FILE, ULYSSES_RUN_IDS, ACT_OFFLOAD_BYTES_PER_S,
                             ACT_OFFLOAD_FILE, ACT_OFFLOAD_RUN_IDS, COMM_LOGGER_PAIRS, COMM_LOGGER_S_PER_BYTE,
                             COMM_LOGGER_S_PER_FETCH, OVERFLOW_CHECK_PAIRS, OVERFLOW_CHECK_S_PER_TENSOR, HOST_SPEED_RUNS,
                             ZERO3_HOST_SENSITIVITY,
                             BF16_OPTIMIZER_PAIR, BF16_OPTIMIZER_S_PER_TENSOR, LINK_FILES, LINK_PROBE_MIB,
                             NVLINK_BUSBW, ZERO3_LINK_EXPOSED, ZERO3_LINK_PAIRS, GpuKind)
from dsx.calibration_ladders import H200_MICRO_BATCH_LADDERS, H200_STEP_LADDERS, H200_ZERO3_LADDERS
from dsx.estimate import EstimateError, activation_bytes, compute_flops, estimate, setup_of_row, step_time
from dsx.estimate.predict import (act_offload_bytes, autocast_seconds, bf16_optimizer_seconds, overflow_check_seconds,
                                  sent_bytes,
                                  ulysses_bytes,
                                  exposed_hooks, ulysses_seconds, zero3_fetch_seconds, zero3_fetches_per_step,
                                  zero3_hook_seconds, zero3_pass_hooks)
from dsx.estimate.states import attention_seconds, compute_rate, compute_seconds, micro_batch_seconds, zero_layout
from dsx.gpus import peak_tflops
from dsx.models import count_modules, count_params, count_tensors, resolve_model
from dsx.results import read_rows

ROOT = Path(__file__).resolve().parents[2]

CALIBRATED = ("total_bytes", "context_bytes", "fragmentation", "achieved_fraction", "fixed_s_per_param",
              "step_s_per_tensor", "micro_batch_s_per_param", "cpu_step_s_per_param", "zero3_s_per_module_pass",
              "host_process_bytes", "host_bytes_per_param", "achieved_hidden")
"""The GpuKind fields `calibrate` sets (allocator_headroom_bytes comes from `calibrate_headroom`, the width curve
from `calibrate_width`)."""


def role_rows(rows: list[dict]) -> dict[str, list[dict]]:
    """The CALIBRATION_ROWS of one or more commands' results, by role: every ok row of each (sweep label,
    micro-batch), one per command that ran it."""
    chosen = {role: [row for row in rows if (row.get("sweep") or {}).get("label") == label
                     and row["micro_batch"] == micro_batch and row["status"] == "ok"]
              for role, (label, micro_batch) in CALIBRATION_ROWS.items()}
    for role, found in chosen.items():
        if not found:
            label, micro_batch = CALIBRATION_ROWS[role]
            raise EstimateError(f"calibration row '{label}' at micro-batch {micro_batch} is missing")
    return chosen


def pass_hooks(exposed: float, compute: float, act_ckpt: bool) -> float:
    """The hooks' seconds a pass at which exposed_hooks (what one micro-batch's compute does not hide of them) is
    `exposed`: it grows with them, so halving finds it."""
    if exposed <= 0:
        raise EstimateError(f"ZeRO-3's hooks show {exposed * 1e3:.1f} ms beyond the compute: they set no price")
    low, high = 0.0, exposed + compute
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if exposed_hooks(mid, compute, act_ckpt) < exposed else (low, mid)
    return (low + high) / 2


def calibration_rows(rows: list[dict]) -> dict[str, dict]:
    """The first ok row of each role (role_rows): the row of a kind calibrated from one command."""
    return {role: found[0] for role, found in role_rows(rows).items()}


def calibrate(rows: list[dict], key: str, name: str, fixed_s_per_param: float | None = None,
              micro_batch_s_per_param: float = 0.0, zero3_s_per_module_pass: float | None = None) -> GpuKind:
    """The constants of a GpuKind from the CALIBRATION_ROWS of one model on one GPU, run by one command or more: each
    role's step time and host memory the median over its rows (a kind run once: that row's). `fixed_s_per_param`:
    the step's fixed work per parameter from grad-accum ladders of several models (calibrate_step); the checkpointed
    pair's intercept, one model's, then sets the per-tensor rest (step_s_per_tensor) instead, less its one
    micro-batch's `micro_batch_s_per_param` (calibrate_micro_batch), which ZeRO-3's hooks hold at that stage.
    `zero3_s_per_module_pass`: the hooks' price from ZeRO-3 ladders (calibrate_zero3_hooks), else the ZeRO-3 row's."""
    chosen = role_rows(rows)
    first = {role: found[0] for role, found in chosen.items()}
    memory = [r["memory"]["max"] for found in chosen.values() for r in found]
    context = int(statistics.median(m["nvml_used"] - m["peak_reserved"] for m in memory))
    fragmentation = statistics.median(m["peak_reserved"] / m["peak_allocated"] for m in memory)
    t = {role: statistics.median(r["figures"]["step_time_s"]["median"] for r in found)
         for role, found in chosen.items()}
    setup = setup_of_row(first["ckpt_a"], GpuKind(key, name, 0, 0, 1.0, 1.0, 0.0, {}, 0.0, {}, {}, ""))
    n, modules = count_params(setup.resolved), count_modules(setup.resolved)
    a, b = first["ckpt_a"]["micro_batch"], first["ckpt_b"]["micro_batch"]
    per_sample = (t["ckpt_b"] - t["ckpt_a"]) / (b - a)
    # the intercept less the ZeRO-1 overflow check (priced per tensor apart): what every stage pays once a step; with
    # the ladders' per-parameter price, what is left of it is priced per tensor
    fixed = t["ckpt_a"] - a * per_sample - overflow_check_seconds(setup)
    per_tensor = 0.0
    if fixed_s_per_param is not None:
        per_tensor = (fixed - (fixed_s_per_param + micro_batch_s_per_param) * n) / count_tensors(setup.resolved)
    peak = (peak_tflops(name, "bf16") or 0.0) * 1e12
    if not peak:
        raise EstimateError(f"no bf16 peak FLOP/s known for {name}")
    # attention's kernels are priced apart (attention_seconds): the slope less their share of it is the rest's
    attention = attention_seconds(replace(setup, act_ckpt=True), 1, 1)
    achieved = compute_flops(setup.resolved, 1, 1, True) / (peak * (per_sample - attention))
    no_ckpt = replace(setup, act_ckpt=False)
    base = fixed + compute_flops(setup.resolved, 8, 1, False) / (peak * achieved) + attention_seconds(no_ckpt, 8, 1)
    # per module per pass (forward, backward), at which the hooks show beyond the passes' compute (exposed_hooks) as
    # much as the row exceeds the base; ZeRO-3 checks no tensor, and its hooks hold its micro-batch's own cost
    zero3 = zero3_s_per_module_pass
    if zero3 is None:
        hooks = pass_hooks(t["zero3"] - base + micro_batch_s_per_param * n, base - fixed, False)
        zero3 = float(f"{hooks / modules:.3g}")
    offload_check = overflow_check_seconds(setup_of_row(first["offload"], setup.gpu))  # ZeRO-2 offload checks each
    rss = {role: int(statistics.median(r["memory"]["max"]["host_rss_peak"] for r in found))
           for role, found in chosen.items()}
    return GpuKind(
        key=key, name=name, total_bytes=first["base"]["memory"]["capacity"], context_bytes=context,
        fragmentation=round(fragmentation, 3), achieved_fraction=round(achieved, 4),
        fixed_s_per_param=float(f"{fixed / n:.3g}") if fixed_s_per_param is None else fixed_s_per_param,
        step_s_per_tensor=float(f"{per_tensor:.3g}"), micro_batch_s_per_param=micro_batch_s_per_param,
        cpu_step_s_per_param={s: float(f"{v:.4g}") for s, v in (
            (1, (t["offload"] - base - offload_check) / n), (2, (t["offload"] - base - offload_check) / n),
            (3, (t["zero3_offload"] - base + micro_batch_s_per_param * n
                 - exposed_hooks(zero3 * modules, base - fixed, False)) / n))},
        zero3_s_per_module_pass=zero3,
        host_process_bytes={0: rss["base"], 1: rss["base"], 2: rss["base"], 3: rss["zero3"]},
        host_bytes_per_param={1: round((rss["offload"] - rss["base"]) / n, 2),
                              2: round((rss["offload"] - rss["base"]) / n, 2),
                              3: round((rss["zero3_offload"] - rss["zero3"]) / n, 2)},
        source="", achieved_hidden=setup.resolved.hidden_size,
    )


def step_ladders(root: Path = ROOT) -> dict[str, tuple[object, list[tuple[float, float]]]]:
    """H200_STEP_LADDERS by model: its setup (the ladder's configuration at grad-accum 1) and per machine (the step's
    intercept, its slope), seconds: the line through the grad-accum 1 and 4 steps, the intercept what a step pays
    once and the slope what a micro-batch costs."""
    by_model: dict[str, tuple[object, list[tuple[float, float]]]] = {}
    for path, one_id, four_id in H200_STEP_LADDERS:
        one, _, intercept, slope = ladder_line(root, path, one_id, four_id)
        model = one["model"]["preset"]
        if model not in by_model:
            by_model[model] = (setup_of_row(one), [])
        by_model[model][1].append((intercept, slope))
    return by_model


def ladder_line(root: Path, path: str, one_id: str, four_id: str) -> tuple[dict, dict, float, float]:
    """(the grad-accum 1 row, the grad-accum 4 row, the intercept, the slope) of one model's steps at grad-accum 1 and
    4 in `path`, seconds; EstimateError when the two rows are not that."""
    one, four = pair_rows(root, path, one_id, four_id, "step ladder")
    if (one["grad_accum"], four["grad_accum"]) != (1, 4) or one["model"] != four["model"]:
        raise EstimateError(f"{path}: {one_id}, {four_id} are not one model at grad-accum 1 and 4")
    slope = (_step(four) - _step(one)) / 3
    return one, four, _step(one) - slope, slope


def step_per_param(root: Path = ROOT) -> dict[str, float]:
    """Per H200_STEP_LADDERS model, the median over machines of the ladder's intercept, less the overflow check
    (priced per tensor apart), over the model's parameters: seconds a step pays once, per parameter."""
    return {model: (statistics.median(line[0] for line in lines) - overflow_check_seconds(setup))
            / count_params(setup.resolved) for model, (setup, lines) in step_ladders(root).items()}


def calibrate_step(root: Path = ROOT) -> float:
    """H200.fixed_s_per_param: the median over the models of step_per_param."""
    return float(f"{statistics.median(step_per_param(root).values()):.3g}")


def micro_batch_costs(root: Path = ROOT) -> dict[str, list[tuple[float, float]]]:
    """H200_MICRO_BATCH_LADDERS by model: per machine (a sample's cost, what a micro-batch pays besides), seconds: the
    grad-accum slopes at two micro-batches a and b are c + a x s and c + b x s."""
    by_model: dict[str, list[tuple[float, float]]] = {}
    for path, *ids in H200_MICRO_BATCH_LADDERS:
        (a, _, _, slope_a), (b, _, _, slope_b) = ladder_line(root, path, *ids[:2]), ladder_line(root, path, *ids[2:])
        if a["model"] != b["model"] or a["micro_batch"] == b["micro_batch"]:
            raise EstimateError(f"{path}: {', '.join(ids)} are not one model at two micro-batches, grad-accum 1 and 4")
        sample = (slope_b - slope_a) / (b["micro_batch"] - a["micro_batch"])
        by_model.setdefault(a["model"]["preset"], []).append((sample, slope_a - a["micro_batch"] * sample))
    return by_model


def calibrate_micro_batch(root: Path = ROOT) -> float:
    """H200.micro_batch_s_per_param: the median over the models of the median over machines of micro_batch_costs'
    cost per micro-batch, over the model's parameters."""
    per_param = [statistics.median(cost for _, cost in costs) / count_params(resolve_model(model))
                 for model, costs in micro_batch_costs(root).items()]
    return float(f"{statistics.median(per_param):.3g}")


def step_slope_errors(root: Path = ROOT) -> dict[str, float]:
    """Per H200_STEP_LADDERS model, the estimate's price of one micro-batch (dsx.calibration.GPUS' H200: its compute
    and micro_batch_seconds) against the median over machines of the ladder's slope, less 1: printed, not a
    constant."""
    return {model: (compute_seconds(setup, setup.micro_batch, 1) + micro_batch_seconds(setup))
            / statistics.median(line[1] for line in lines) - 1 for model, (setup, lines) in step_ladders(root).items()}


def calibrate_overflow_check(root: Path = ROOT) -> float:
    """OVERFLOW_CHECK_S_PER_TENSOR from OVERFLOW_CHECK_PAIRS (bench/tools/step_profile.py rows, one model each): the
    median over the pairs of (step with the check - step without) / the model's parameter tensors."""
    per_tensor = []
    for path, lean_line, checked_line in OVERFLOW_CHECK_PAIRS:
        lines = (root / path).read_text().splitlines()
        lean, checked = (json.loads(lines[n - 1]) for n in (lean_line, checked_line))
        if lean["model"] != checked["model"] or lean["micro_batch"] != checked["micro_batch"]:
            raise EstimateError(f"{path}: lines {lean_line} and {checked_line} are not one model and micro-batch")
        tensors = count_tensors(resolve_model(lean["model"]))
        per_tensor.append((checked["step_ms"] - lean["step_ms"]) / 1e3 / tensors)
    return float(f"{statistics.median(per_tensor):.3g}")


def calibrate_width(rows: list[dict], kind: GpuKind) -> tuple[int, int]:
    """(width_half_hidden, widest_hidden) of `kind` from its WIDTH_RUN_IDS rows (one model, one configuration).

    m, the median over the rows of the compute term predicted without a width curve over the measured one (the
    measured step less the predicted non-compute terms), is the achieved rate at their hidden size h over the rate at
    achieved_hidden hc. With the rate growing as h / (h + h0): m = h (hc + h0) / (hc (h + h0)), so
    h0 = h hc (1 - m) / (m hc - h)."""
    flat = replace(kind, width_half_hidden=0, widest_hidden=0)
    by_id = rows_of(rows, {run_id: run_id for run_id in WIDTH_RUN_IDS}, "width")
    ratios, widths = [], set()
    for run_id in WIDTH_RUN_IDS:
        setup = setup_of_row(by_id[run_id], flat)
        predicted = compute_flops(setup.resolved, setup.micro_batch, setup.grad_accum, setup.act_ckpt) / compute_rate(
            setup)
        ratios.append(predicted / _measured_compute(by_id[run_id], setup))
        widths.add(setup.resolved.hidden_size)
    if len(widths) != 1:
        raise EstimateError(f"width calibration rows of several hidden sizes: {sorted(widths)}")
    m, h, hc = statistics.median(ratios), widths.pop(), kind.achieved_hidden
    return round(h * hc * (1 - m) / (m * hc - h)), h


def calibrate_headroom(rows: list[dict], kind: GpuKind) -> int:
    """The allocator headroom of `kind`: the largest free memory (capacity - predicted allocated - context) an
    out-of-memory trial of `rows` still had, rounded up to HEADROOM_STEP (256 MiB); 0 when every OOM was predicted."""
    without = replace(kind, allocator_headroom_bytes=0)
    shortfall = 0
    for row in rows:
        if row["status"] == "oom":
            predicted = estimate(setup_of_row(row, without), search_max=False)
            shortfall = max(shortfall, predicted.capacity - predicted.peak_allocated - kind.context_bytes)
    return -(-shortfall // HEADROOM_STEP) * HEADROOM_STEP


def _eager_parts(row: dict) -> tuple[int, int, int]:
    """(what compiling leaves as it is: predicted model states and the parts compiled() does not scale, such as
    checkpointed inputs and a tiled loss's tiles; eager layer activations; eager head/loss activations) of a row at
    its peak moment."""
    from dataclasses import replace as replaced

    from dsx.activations import COMPILED_HEAD_PARTS, COMPILED_LAYER_PARTS
    from dsx.config_facts import precision_of

    setup = replaced(setup_of_row(row), compile=False)
    acts = activation_bytes(setup, precision_of(setup.ds_config), setup.micro_batch)
    total = estimate(setup, search_max=False).peak_allocated
    layers = sum(acts.get(k, 0) for k in COMPILED_LAYER_PARTS)
    head = sum(acts.get(k, 0) for k in COMPILED_HEAD_PARTS)
    return total - layers - head, layers, head


def calibrate_compile(rows: list[dict]) -> tuple[float, float, float]:
    """(COMPILE_LAYER_FACTOR, COMPILE_HEAD_FACTOR, COMPILE_SPEEDUP) from the COMPILE_RUN_IDS rows of `rows`.

    Memory: measured peak allocated = predicted states + f_layers x eager layer activations + f_head x eager
    head/loss activations, for the 'layers' (gpt2-xl) and 'head' (gpt2) rows: two equations, two factors. Speed:
    the 'layers' row against the 'eager' one (same command but compile): the compute term of the predicted eager
    step over the compiled row's measured step less the predicted non-compute terms."""
    from dataclasses import replace as replaced

    by_role = rows_of(rows, COMPILE_RUN_IDS, "compile")
    layer, head = _memory_factors(by_role)
    compiled = by_role["layers"]
    setup = replaced(setup_of_row(compiled), compile=False)
    peak = peak_tflops(setup.gpu.name, "bf16") * 1e12
    compute = compute_flops(setup.resolved, setup.micro_batch, setup.grad_accum, setup.act_ckpt) / (
        peak * setup.gpu.achieved_fraction)
    rest = step_time(setup, setup.micro_batch) - compute
    speedup = compute / (_step(compiled) - rest)
    return layer, head, round(speedup, 3)  # the factors rounded by _memory_factors


def _memory_factors(by_role: dict[str, dict]) -> tuple[float, float]:
    """(layers, head) compile memory factors from a 'layers' and a 'head' compiled row: measured peak allocated =
    what compiling leaves as it is + f_layers x eager layer activations + f_head x eager head/loss activations, one
    equation a row."""
    (s1, l1, h1), (s2, l2, h2) = (_eager_parts(by_role[role]) for role in ("layers", "head"))
    m1, m2 = (by_role[role]["memory"]["max"]["peak_allocated"] for role in ("layers", "head"))
    det = l1 * h2 - l2 * h1
    return (round(((m1 - s1) * h2 - (m2 - s2) * h1) / det, 3), round((l1 * (m2 - s2) - l2 * (m1 - s1)) / det, 3))


def calibrate_llama_compile(rows: list[dict]) -> tuple[float, float]:
    """LLAMA_COMPILE_FACTORS from the LLAMA_COMPILE_RUN_IDS rows of `rows` (as calibrate_compile's memory part)."""
    return _memory_factors(rows_of(rows, LLAMA_COMPILE_RUN_IDS, "llama compile"))


def _measured_compute(row: dict, setup) -> float:
    """The compute term of a row: its measured median step less the estimate's non-compute terms for `setup`."""
    rest = step_time(setup, setup.micro_batch) - compute_flops(
        setup.resolved, setup.micro_batch, setup.grad_accum, setup.act_ckpt) / compute_rate(setup)
    return _step(row) - rest


def calibrate_dropout(rows: list[dict]) -> float:
    """DROPOUT_FREE_SPEEDUP from the DROPOUT_RUN_IDS pair of `rows`: the compute term of the row with dropout (its
    measured step less the predicted non-compute terms) over that of the row without."""
    compute = {role: _measured_compute(row, setup_of_row(row))
               for role, row in rows_of(rows, DROPOUT_RUN_IDS, "dropout").items()}
    return round(compute["dropout"] / compute["none"], 3)


def calibrate_kernels(rows: list[dict]) -> tuple[float, dict[str, float]]:
    """(LIGER_SPEEDUP, FP8_SPEEDUP) from the KERNEL_PAIRS of `rows`: for each pair, the base row's compute term
    (its measured step less the predicted non-compute terms) over the kernel row's; the median of a factor's pairs."""
    by_id = {row["run_id"]: row for row in rows}
    factors = {}
    for name, pairs in KERNEL_PAIRS.items():
        ratios = []
        for base_id, kernel_id in pairs:
            if base_id not in by_id or kernel_id not in by_id:
                raise EstimateError(f"kernel calibration rows missing: {name} {base_id} {kernel_id}")
            # the non-compute terms of each row, kernels aside (they change only the compute term)
            base, kernel = (_measured_compute(row, replace(setup_of_row(row), liger=False, fp8=None))
                            for row in (by_id[base_id], by_id[kernel_id]))
            ratios.append(base / kernel)
        factors[name] = round(statistics.median(ratios), 3)
    return factors["liger"], {"eager": factors["fp8 eager"], "compiled": factors["fp8 compiled"]}


def rows_of(rows: list[dict], ids: dict[str, str], what: str) -> dict[str, dict]:
    """{role: row} for `ids` ({role: run id}) among `rows`; EstimateError naming `what` and the roles missing."""
    by_id = {row["run_id"]: row for row in rows}
    missing = [role for role, run_id in ids.items() if run_id not in by_id]
    if missing:
        raise EstimateError(f"{what} calibration rows missing: {', '.join(missing)}")
    return {role: by_id[run_id] for role, run_id in ids.items()}


def pair_rows(root: Path, path: str, first: str, second: str, what: str) -> tuple[dict, dict]:
    """The two rows of a calibration pair (file, run ids), EstimateError naming `what` when one is missing."""
    by_id = {row["run_id"]: row for row in read_rows(root / path)}
    if first not in by_id or second not in by_id:
        raise EstimateError(f"{what} calibration rows missing in {path}: {first}, {second}")
    return by_id[first], by_id[second]


def _step(row: dict) -> float:
    return row["figures"]["step_time_s"]["median"]


def calibrate_zero3_fetch(root: Path = ROOT) -> float:
    """ZERO3_FETCH_S from ZERO3_FETCH_PAIRS (one configuration on 2 ranks and on 1, each pair in one command): per
    pair, the 2-rank step less the 1-rank step, less the change the estimate's other terms predict between them (the
    per-parameter work halves on 2 ranks), over the 2-rank step's fetches; the median of those."""
    per_fetch = []
    for path, two_id, one_id in ZERO3_FETCH_PAIRS:
        rows = pair_rows(root, path, two_id, one_id, "ZeRO-3 fetch")
        two, one = (setup_of_row(row) for row in rows)
        others = [step_time(setup, setup.micro_batch) - zero3_fetch_seconds(setup) for setup in (two, one)]
        measured = _step(rows[0]) - _step(rows[1])
        per_fetch.append((measured - (others[0] - others[1])) / zero3_fetches_per_step(two))
    return float(f"{statistics.median(per_fetch):.3g}")


def calibrate_comm_logger(root: Path = ROOT) -> tuple[float, float]:
    """(COMM_LOGGER_S_PER_BYTE, COMM_LOGGER_S_PER_FETCH) from COMM_LOGGER_PAIRS (one configuration with the comms
    logger on and off, in one command): per byte, the median over the pairs without ZeRO-3's fetches of the step
    difference over the bytes a rank sends; per fetch, what is left of the fetching pairs' difference once their
    bytes are priced, over their fetches (the median)."""
    per_byte, fetching = [], []
    for path, on_id, off_id in COMM_LOGGER_PAIRS:
        on_row, off_row = pair_rows(root, path, on_id, off_id, "comms logger")
        on = setup_of_row(on_row)
        extra, sent, fetches = _step(on_row) - _step(off_row), sent_bytes(on), zero3_fetches_per_step(on)
        if fetches:
            fetching.append((extra, sent, fetches))
        else:
            per_byte.append(extra / sent)
    s_per_byte = float(f"{statistics.median(per_byte):.3g}")
    s_per_fetch = statistics.median((extra - s_per_byte * sent) / fetches for extra, sent, fetches in fetching)
    return s_per_byte, float(f"{s_per_fetch:.3g}")


def calibrate_autocast(root: Path = ROOT) -> float:
    """AUTOCAST_S_PER_PARAM from AUTOCAST_PAIRS (one configuration in bf16 and in bf16-autocast, in one command): per
    pair, the measured step difference less the estimate's without the term (autocast drops the overflow check),
    over parameters x micro-batches; the median of those."""
    per_param = []
    for path, bf16_id, autocast_id in AUTOCAST_PAIRS:
        bf16_row, autocast_row = pair_rows(root, path, bf16_id, autocast_id, "bf16-autocast")
        bf16, autocast = setup_of_row(bf16_row), setup_of_row(autocast_row)
        predicted = (step_time(autocast, autocast.micro_batch) - autocast_seconds(autocast)
                     - step_time(bf16, bf16.micro_batch))
        extra = _step(autocast_row) - _step(bf16_row) - predicted
        per_param.append(extra / (count_params(autocast.resolved) * autocast.grad_accum))
    return float(f"{statistics.median(per_param):.3g}")


def calibrate_bf16_optimizer(root: Path = ROOT) -> float:
    """BF16_OPTIMIZER_S_PER_TENSOR from BF16_OPTIMIZER_PAIR (one configuration at two splits of the same samples, in
    one command): the measured step difference less the estimate's without the term, over the extra micro-batches x
    the model's parameter tensors."""
    path, fewer_id, more_id = BF16_OPTIMIZER_PAIR
    rows = pair_rows(root, path, fewer_id, more_id, "BF16_Optimizer")
    fewer, more = (setup_of_row(row) for row in rows)
    others = [step_time(setup, setup.micro_batch) - bf16_optimizer_seconds(setup) for setup in (fewer, more)]
    extra = _step(rows[1]) - _step(rows[0]) - (others[1] - others[0])
    return float(f"{extra / (count_tensors(more.resolved) * (more.grad_accum - fewer.grad_accum)):.3g}")


def probe_busbw(path: Path, label: str, size_mib: int = LINK_PROBE_MIB) -> float:
    """The bus bandwidth (bytes/s) of `label`'s bf16 all-reduce of `size_mib` in a link_probe.py file."""
    values = [row["busbw_gbps"] * 1e9 for row in map(json.loads, path.read_text().splitlines())
              if row["label"] == label and row["op"] == "all_reduce" and row["size_mib"] == size_mib]
    if not values:
        raise SystemExit(f"{path}: no '{label}' all-reduce of {size_mib} MiB")
    return statistics.median(values)


def calibrate_link(root: Path = ROOT) -> float:
    """NVLINK_BUSBW: the median over LINK_FILES of their 'nvlink' all-reduce of LINK_PROBE_MIB, to 3 digits."""
    return float(f"{statistics.median(probe_busbw(root / path, 'nvlink') for path in LINK_FILES):.3g}")


def zero3_link_exposures(root: Path = ROOT) -> list[float]:
    """Per ZERO3_LINK_PAIRS pair: the step's growth over sockets against NVLink in one command, over the extra time
    the rank's bytes ((n-1)/n of dsx.comm's volume) take at the command's two probed bus bandwidths."""
    from dsx.estimate.predict import sent_bytes

    out = []
    for folder, socket_id, nvlink_id in ZERO3_LINK_PAIRS:
        socket, nvlink = pair_rows(root, f"{folder}/ladder.jsonl", socket_id, nvlink_id, "ZeRO-3 link")
        setup = setup_of_row(socket)
        wire = sent_bytes(setup) * (setup.world_size - 1) / setup.world_size
        probes = root / folder / "link.jsonl"
        extra = wire * (1 / probe_busbw(probes, "socket") - 1 / probe_busbw(probes, "nvlink"))
        out.append((_step(socket) - _step(nvlink)) / extra)
    return out


def calibrate_zero3_link(root: Path = ROOT) -> float:
    """ZERO3_LINK_EXPOSED: the median of zero3_link_exposures, to 3 digits."""
    return float(f"{statistics.median(zero3_link_exposures(root)):.3g}")


def calibrate_compile_pairs(root: Path = ROOT) -> float:
    """GpuKind.compile_speedup of the H200 from H200_COMPILE_PAIRS (one configuration eager and compiled, in one
    command): per pair, the estimate's eager compute term C over C less the measured step difference, the factor at
    which the predicted saving is the measured one (what does not compile, and the machine's speed, cancel within a
    command); the median of those."""
    factors = []
    for path, eager_id, compiled_id in H200_COMPILE_PAIRS:
        eager_row, compiled_row = pair_rows(root, path, eager_id, compiled_id, "compile")
        eager = setup_of_row(eager_row)
        flops = compute_flops(eager.resolved, eager.micro_batch, eager.grad_accum, eager.act_ckpt)
        compute = flops / compute_rate(eager)
        factors.append(compute / (compute - (_step(eager_row) - _step(compiled_row))))
    return round(statistics.median(factors), 3)


def zero3_hook_prices(root: Path = ROOT) -> list[tuple[str, float, float]]:
    """Per H200_ZERO3_LADDERS pair, (model, the hooks' seconds per module and pass it implies, its host's Python
    speed): the slope less the estimate's slope without the hooks (dsx.calibration.GPUS' H200) is what the hooks showed
    beyond a micro-batch's compute; pass_hooks finds the hooks' time a pass that shows that much."""
    prices = []
    for path, one_id, four_id in H200_ZERO3_LADDERS:
        one, four, _, slope = ladder_line(root, path, one_id, four_id)
        setups = [setup_of_row(row) for row in (one, four)]
        if any(zero_layout(setup.ds_config)[0] != 3 for setup in setups):
            raise EstimateError(f"{path}: {one_id}, {four_id} are not ZeRO-3 rows")
        without = [step_time(setup, setup.micro_batch) - zero3_hook_seconds(setup) for setup in setups]
        setup = setups[0]
        hooks = pass_hooks(slope - (without[1] - without[0]) / 3, compute_seconds(setup, setup.micro_batch, 1),
                           setup.act_ckpt)
        loop_ns = statistics.median(row["host_cpu"]["python_loop_ns"] for row in (one, four))
        prices.append((one["model"]["preset"], hooks / count_modules(setup.resolved), loop_ns))
    return prices


def calibrate_zero3_hooks(root: Path = ROOT) -> tuple[float, float]:
    """(H200.zero3_s_per_module_pass, H200.host_loop_ns): the ladders' hosts' median Python speed, and the median of
    zero3_hook_prices' prices, each brought to that speed as host_factor scales the hooks (ZERO3_HOST_SENSITIVITY)."""
    prices = zero3_hook_prices(root)
    host = float(f"{statistics.median(loop_ns for _, _, loop_ns in prices):.3g}")
    at_host = [price / (1 + ZERO3_HOST_SENSITIVITY * (loop_ns / host - 1)) for _, price, loop_ns in prices]
    return float(f"{statistics.median(at_host):.3g}"), host


def calibrate_host_sensitivity(root: Path = ROOT) -> float:
    """ZERO3_HOST_SENSITIVITY from HOST_SPEED_RUNS (one ZeRO-3 configuration on hosts of different Python speed): per
    row, the measured step less the estimate's other terms is what the hooks showed beyond the compute; the hooks'
    time a pass that shows that much (pass_hooks) over what the H200's price gives at its reference host, less 1, over
    the row's host speed over the reference, less 1. The median of those."""
    h200 = GPUS["h200-141gb"]
    sensitivities = []
    for path, run_id, loop_ns in HOST_SPEED_RUNS:
        row = {r["run_id"]: r for r in read_rows(root / path)}.get(run_id)
        if row is None:
            raise EstimateError(f"host speed calibration row missing in {path}: {run_id}")
        setup = replace(setup_of_row(row, h200), host_loop_ns=None)  # at the reference host
        exposed = _step(row) - (step_time(setup, setup.micro_batch) - zero3_hook_seconds(setup))
        hooks = pass_hooks(exposed / setup.grad_accum, compute_seconds(setup, setup.micro_batch, 1), setup.act_ckpt)
        sensitivities.append((hooks / zero3_pass_hooks(setup) - 1) / (loop_ns / h200.host_loop_ns - 1))
    return float(f"{statistics.median(sensitivities):.3g}")


def calibrate_ulysses(rows: list[dict]) -> float:
    """ULYSSES_BYTES_PER_S from the ULYSSES_RUN_IDS pair of `rows` (one configuration over a Ulysses group and on one
    rank): the group's measured step less its other predicted terms, those scaled by the one-rank row's measured /
    predicted step (its error is the model's, not the all-to-alls'), is the all-to-alls' time; their bytes over it."""
    by_role = rows_of(rows, ULYSSES_RUN_IDS, "Ulysses")
    group, one = by_role["group of 4"], by_role["one rank"]
    setup, single = setup_of_row(group), setup_of_row(one)
    scale = _step(one) / step_time(single, single.micro_batch)
    others = (step_time(setup, setup.micro_batch) - ulysses_seconds(setup)) * scale
    return float(f"{ulysses_bytes(setup) / (_step(group) - others):.3g}")


def calibrate_act_offload(rows: list[dict]) -> float:
    """ACT_OFFLOAD_BYTES_PER_S from the ACT_OFFLOAD_RUN_IDS pair of `rows` (one configuration without and with
    --act-ckpt-offload, one command): the offloaded inputs' bytes over the measured step difference."""
    by_role = rows_of(rows, ACT_OFFLOAD_RUN_IDS, "--act-ckpt-offload")
    plain, offloaded = by_role["checkpointing"], by_role["offloaded inputs"]
    extra = _step(offloaded) - _step(plain)
    return float(f"{act_offload_bytes(setup_of_row(offloaded)) / extra:.3g}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", default="h100-80gb", choices=sorted(GPUS), help="the GPU kind to recompute")
    parser.add_argument("--rows", type=Path, action="append",
                        help="results file holding the calibration rows, once per command that ran them (default: "
                             "the kind's dsx.calibration.CALIBRATION_FILES)")
    parser.add_argument("--headroom-rows", type=Path, default=ROOT / HEADROOM_FILE,
                        help=f"results file of boundary trials for the allocator headroom (default {HEADROOM_FILE})")
    args = parser.parse_args(argv)
    shipped = GPUS[args.kind]
    paths = args.rows or [ROOT / path for path in CALIBRATION_FILES[shipped.key]]
    rows = [row for path in paths for row in read_rows(path)]
    h100 = GPUS["h100-80gb"]
    zero3_price, host = calibrate_zero3_hooks()
    # the H200's per-step and per-micro-batch work and ZeRO-3's hooks from its grad-accum ladders; the H100 has none
    computed = (calibrate(rows, shipped.key, shipped.name) if shipped.key == h100.key
                else calibrate(rows, shipped.key, shipped.name, calibrate_step(), calibrate_micro_batch(), zero3_price))
    if shipped.key == h100.key:  # the headroom's trials and the width curve's rows ran on the H100 only
        computed = replace(computed, allocator_headroom_bytes=calibrate_headroom(
            list(read_rows(args.headroom_rows)), computed))
        half, widest = calibrate_width([row for path in WIDTH_FILES for row in read_rows(ROOT / path)], computed)
        computed = replace(computed, width_half_hidden=half, widest_hidden=widest)
        print(f"# {shipped.key}: from {', '.join(map(str, paths))} and {args.headroom_rows}")
    else:
        computed = replace(computed, allocator_headroom_bytes=h100.allocator_headroom_bytes,
                           width_half_hidden=h100.width_half_hidden, widest_hidden=h100.widest_hidden)
        print(f"# {shipped.key}: from {', '.join(map(str, paths))} and the grad-accum ladders (fixed_s_per_param, "
              f"micro_batch_s_per_param, step_s_per_tensor); the allocator headroom and the width curve are the H100's")
        print("# a micro-batch's price against the ladders' slopes: " + ", ".join(
            f"{model} {error:+.1%}" for model, error in step_slope_errors().items()))
    print("CALIBRATION_RUN_IDS = {")
    for role, found in role_rows(rows).items():  # one run_id per command that ran the role
        ids = [row["run_id"] for row in found]
        print(f"    {role!r}: {ids[0] if len(ids) == 1 else ids!r},  # {found[0]['sweep']['label']}, "
              f"micro-batch {found[0]['micro_batch']}")
    print("}")
    if shipped.key == h100.key:
        print(f"HEADROOM_RUN_IDS = {sorted(r['run_id'] for r in read_rows(args.headroom_rows))!r}")
    differ = []
    for field in fields(GpuKind):
        if field.name in (*CALIBRATED, "allocator_headroom_bytes", "width_half_hidden", "widest_hidden"):
            value = getattr(computed, field.name)
            same = value == getattr(shipped, field.name)
            differ += [] if same else [field.name]
            print(f"{field.name}={value!r},{'' if same else f'  # dsx ships {getattr(shipped, field.name)!r}'}")
    print(f"# {'equal to' if not differ else 'differs from'} dsx.calibration.GPUS[{shipped.key!r}]"
          + (f": {', '.join(differ)}" if differ else ""))
    factors = calibrate_compile(list(read_rows(ROOT / COMPILE_FILE)))
    shipped_factors = (COMPILE_LAYER_FACTOR, COMPILE_HEAD_FACTOR, COMPILE_SPEEDUP)
    print(f"# compile, from {COMPILE_FILE}: COMPILE_LAYER_FACTOR, COMPILE_HEAD_FACTOR, COMPILE_SPEEDUP = {factors!r}"
          + ("" if factors == shipped_factors else f"  # dsx ships {shipped_factors!r}"))
    print(f"# {'equal to' if factors == shipped_factors else 'differs from'} dsx.calibration's compile factors")
    llama = calibrate_llama_compile(list(read_rows(ROOT / LLAMA_COMPILE_FILE)))
    print(f"# compiled Llama memory, from {LLAMA_COMPILE_FILE}: LLAMA_COMPILE_FACTORS = {llama!r}"
          + ("" if llama == LLAMA_COMPILE_FACTORS else f"  # dsx ships {LLAMA_COMPILE_FACTORS!r}"))
    dropout = calibrate_dropout([row for path in DROPOUT_FILES for row in read_rows(ROOT / path)])
    print(f"# dropout, from {', '.join(DROPOUT_FILES)}: DROPOUT_FREE_SPEEDUP = {dropout!r}"
          + ("" if dropout == DROPOUT_FREE_SPEEDUP else f"  # dsx ships {DROPOUT_FREE_SPEEDUP!r}"))
    kernels = calibrate_kernels([row for path in KERNEL_FILES for row in read_rows(ROOT / path)])
    print(f"# kernels, from {', '.join(KERNEL_FILES)}: LIGER_SPEEDUP, FP8_SPEEDUP = {kernels!r}"
          + ("" if kernels == (LIGER_SPEEDUP, FP8_SPEEDUP) else f"  # dsx ships {(LIGER_SPEEDUP, FP8_SPEEDUP)!r}"))
    fetch = calibrate_zero3_fetch()
    print(f"# ZeRO-3 across GPUs, from {', '.join(sorted({path for path, _, _ in ZERO3_FETCH_PAIRS}))}: "
          f"ZERO3_FETCH_S = {fetch!r}"
          + ("" if fetch == ZERO3_FETCH_S else f"  # dsx ships {ZERO3_FETCH_S!r}"))
    ulysses = calibrate_ulysses(list(read_rows(ROOT / ULYSSES_FILE)))
    print(f"# Ulysses' all-to-alls, from {ULYSSES_FILE}: ULYSSES_BYTES_PER_S = {ulysses!r}"
          + ("" if ulysses == ULYSSES_BYTES_PER_S else f"  # dsx ships {ULYSSES_BYTES_PER_S!r}"))
    overflow = calibrate_overflow_check()
    print(f"# the overflow check, from {', '.join(sorted({path for path, _, _ in OVERFLOW_CHECK_PAIRS}))}: "
          f"OVERFLOW_CHECK_S_PER_TENSOR = {overflow!r}"
          + ("" if overflow == OVERFLOW_CHECK_S_PER_TENSOR else f"  # dsx ships {OVERFLOW_CHECK_S_PER_TENSOR!r}"))
    offload = calibrate_act_offload(list(read_rows(ROOT / ACT_OFFLOAD_FILE)))
    print(f"# --act-ckpt-offload, from {ACT_OFFLOAD_FILE}: ACT_OFFLOAD_BYTES_PER_S = {offload!r}"
          + ("" if offload == ACT_OFFLOAD_BYTES_PER_S else f"  # dsx ships {ACT_OFFLOAD_BYTES_PER_S!r}"))
    logger = calibrate_comm_logger()
    shipped_logger = (COMM_LOGGER_S_PER_BYTE, COMM_LOGGER_S_PER_FETCH)
    print(f"# the comms logger, from {', '.join(sorted({path for path, _, _ in COMM_LOGGER_PAIRS}))}: "
          f"COMM_LOGGER_S_PER_BYTE, COMM_LOGGER_S_PER_FETCH = {logger!r}"
          + ("" if logger == shipped_logger else f"  # dsx ships {shipped_logger!r}"))
    autocast = calibrate_autocast()
    print(f"# bf16-autocast at ZeRO-1/2, from {', '.join(sorted({path for path, _, _ in AUTOCAST_PAIRS}))}: "
          f"AUTOCAST_S_PER_PARAM = {autocast!r}"
          + ("" if autocast == AUTOCAST_S_PER_PARAM else f"  # dsx ships {AUTOCAST_S_PER_PARAM!r}"))
    bf16_optimizer = calibrate_bf16_optimizer()
    print(f"# DeepSpeed's BF16_Optimizer at ZeRO-0, from {BF16_OPTIMIZER_PAIR[0]}: BF16_OPTIMIZER_S_PER_TENSOR = "
          f"{bf16_optimizer!r}"
          + ("" if bf16_optimizer == BF16_OPTIMIZER_S_PER_TENSOR else f"  # dsx ships {BF16_OPTIMIZER_S_PER_TENSOR!r}"))
    h200_compile = calibrate_compile_pairs()
    print(f"# compile on the H200, from {', '.join(sorted({path for path, _, _ in H200_COMPILE_PAIRS}))}: "
          f"GPUS['h200-141gb'].compile_speedup = {h200_compile!r}"
          + ("" if h200_compile == GPUS["h200-141gb"].compile_speedup
             else f"  # dsx ships {GPUS['h200-141gb'].compile_speedup!r}"))
    link = calibrate_link()
    print(f"# NVLink's bus bandwidth, from {', '.join(LINK_FILES)}: NVLINK_BUSBW = {link!r}"
          + ("" if link == NVLINK_BUSBW else f"  # dsx ships {NVLINK_BUSBW!r}"))
    exposed = calibrate_zero3_link()
    print(f"# ZeRO-3 over a slower link, from {', '.join(sorted({f for f, _, _ in ZERO3_LINK_PAIRS}))}: "
          f"ZERO3_LINK_EXPOSED = {exposed!r}" + ("" if exposed == ZERO3_LINK_EXPOSED
                                                 else f"  # dsx ships {ZERO3_LINK_EXPOSED!r}"))
    print(f"# the host's Python speed, from {', '.join(sorted({path for path, _, _ in H200_ZERO3_LADDERS}))}: "
          f"GPUS['h200-141gb'].host_loop_ns = {host!r}"
          + ("" if host == GPUS["h200-141gb"].host_loop_ns else f"  # dsx ships {GPUS['h200-141gb'].host_loop_ns!r}"))
    sensitivity = calibrate_host_sensitivity()
    print(f"# how much of a slower host the hooks pay, from {', '.join(path for path, _, _ in HOST_SPEED_RUNS)}: "
          f"ZERO3_HOST_SENSITIVITY = {sensitivity!r}"
          + ("" if sensitivity == ZERO3_HOST_SENSITIVITY else f"  # dsx ships {ZERO3_HOST_SENSITIVITY!r}"))
    return 1 if differ or host != GPUS["h200-141gb"].host_loop_ns or sensitivity != ZERO3_HOST_SENSITIVITY or \
        factors != shipped_factors or dropout != DROPOUT_FREE_SPEEDUP or \
        kernels != (LIGER_SPEEDUP, FP8_SPEEDUP) or fetch != ZERO3_FETCH_S or ulysses != ULYSSES_BYTES_PER_S or \
        offload != ACT_OFFLOAD_BYTES_PER_S or overflow != OVERFLOW_CHECK_S_PER_TENSOR or logger != shipped_logger \
        or autocast != AUTOCAST_S_PER_PARAM or h200_compile != GPUS["h200-141gb"].compile_speedup \
        or bf16_optimizer != BF16_OPTIMIZER_S_PER_TENSOR or link != NVLINK_BUSBW or exposed != ZERO3_LINK_EXPOSED \
        or llama != LLAMA_COMPILE_FACTORS else 0


if __name__ == "__main__":
    sys.exit(main())
