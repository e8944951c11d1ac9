"""The estimate's memory at long sequence lengths, judged on the rows whose allocation history says what held the
peak (bench/tools/memory_peak.sh, 2 x H200): Adam's moments appear at the first optimizer step, and ZeRO-2's
and ZeRO-1's gradients are alive late in the backward pass of an offloaded-checkpoint run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dsx.calibration_roles import calibration_role
from dsx.estimate import estimate, setup_of_row
from dsx.estimate.predict import act_offload_bytes, act_offload_seconds
from dsx.estimate.states import LATE_GRADIENTS
from dsx.results import read_rows

ROOT = Path(__file__).resolve().parent.parent
PEAK = "bench/tools/h200_memory_peak"
GIB = 1024**3


def _row(path: str, index: int = 0) -> dict:
    return [r for r in read_rows(ROOT / path) if r["status"] == "ok"][index]


def _error(row: dict, **changes) -> float:
    setup = dataclasses.replace(setup_of_row(row), **changes)
    measured = row["memory"]["max"]["peak_allocated"]
    return estimate(setup, search_max=False).peak_allocated / measured - 1


def test_a_second_step_holds_adams_moments_the_first_step_s_backward_did_not():
    one, two = _row(f"{PEAK}/8b-1step.jsonl"), _row(f"{PEAK}/8b-2steps.jsonl")
    grown = two["memory"]["max"]["peak_allocated"] - one["memory"]["max"]["peak_allocated"]
    assert grown / GIB == pytest.approx(8 * 1_923_125_248 / GIB, rel=0.01)  # fp32 exp_avg + exp_avg_sq


@pytest.mark.parametrize("path, index", [(f"{PEAK}/8b-1step.jsonl", 0), ("bench/multigpu/rows/long4.jsonl", 0),
                                         ("bench/long/h200_8b_long/8b-196k-pieces.jsonl", 0)])  # partial offload
def test_a_row_of_one_step_is_judged_without_adams_moments_in_its_backward(path, index):
    row = _row(path, index)
    assert setup_of_row(row).first_step_only
    assert abs(_error(row)) < 0.06
    assert _error(row, first_step_only=False) > 0.14  # llama-8b at 524,288 tokens on 4 GPUs: +40% before


@pytest.mark.parametrize("path", [f"{PEAK}/8b-2steps.jsonl", f"{PEAK}/sp2-hist.jsonl", f"{PEAK}/1b-hist.jsonl",
                                  f"{PEAK}/1b-z1-hist.jsonl"])
def test_steady_state_long_context_rows_are_predicted_within_6_percent(path):
    row = _row(path)
    assert not setup_of_row(row).first_step_only
    assert abs(_error(row)) < 0.06


@pytest.mark.parametrize("run", ["1b-hist", "1b-z1-hist"])  # ZeRO-2's partition, ZeRO-1's whole .grad: one GPU
def test_the_gradients_count_late_in_an_offloaded_checkpoint_backward(run):
    row = _row(f"{PEAK}/{run}.jsonl")  # llama-1b, 131,072 tokens, --act-ckpt-offload --tiled-mlp
    parts = estimate(setup_of_row(row), search_max=False).breakdown
    assert parts[LATE_GRADIENTS] / GIB == pytest.approx(2.30 + 0.93, abs=0.01)  # the history's two blocks
    assert abs(_error(row)) < 0.02
    assert _error(row) - parts[LATE_GRADIENTS] / row["memory"]["max"]["peak_allocated"] < -0.10  # without it


def test_the_late_gradients_are_not_counted_where_checkpointed_inputs_stay_on_the_gpu():
    row = _row("bench/long/h100/longest.jsonl")  # llama-1b, 262,144 tokens, checkpointing without offload
    assert LATE_GRADIENTS not in estimate(setup_of_row(row), search_max=False).breakdown


OFFLOAD = "bench/long/h200_offload"


def test_offloading_checkpointed_inputs_costs_their_bytes_at_the_calibrated_rate():
    row = _row(f"{OFFLOAD}/longest.jsonl")  # llama-1b, 262,144 tokens, both savers, one H200
    setup = setup_of_row(row)
    assert act_offload_bytes(setup) == 16 * 262_144 * 2048 * 2  # every layer's bf16 input, once a step
    plain = estimate(dataclasses.replace(setup, act_ckpt_offload=False), search_max=False).step_time_s
    with_it = estimate(setup, search_max=False).step_time_s
    assert with_it - plain == pytest.approx(act_offload_seconds(setup), rel=0.01)
    assert 0.3 < act_offload_seconds(setup) < 0.02 * row["figures"]["step_time_s"]["median"]  # 16 GiB: 0.5 s of 55


@pytest.mark.parametrize("path, index", [(f"{OFFLOAD}/longest.jsonl", 0), (f"{OFFLOAD}/8b-2steps.jsonl", 0),
                                         (f"{OFFLOAD}/savers.jsonl", 3), (f"{OFFLOAD}/savers-pieces.jsonl", 3)])
def test_runs_with_offloaded_checkpointed_inputs_are_priced_within_5_percent(path, index):
    """The 4-layer llama-8b at ZeRO-3 within 9%: ZeRO-3's hooks per module took more of its calibration row's step
    when the overflow check was priced apart (2026-11-29: +2.9% -> +7.6%); its hidden 4,096 gets the width curve's
    widest, llama-3b's 3,072, since 2026-12-01 (+8.1%)."""
    row = _row(path, index)  # judged rows: the calibration pair is the savers file's first two
    assert row["toggles"]["act_ckpt_offload"] and calibration_role(row) == "judged"
    predicted = estimate(setup_of_row(row), search_max=False).step_time_s
    within = 0.09 if path.endswith("8b-2steps.jsonl") else 0.05
    assert abs(predicted / row["figures"]["step_time_s"]["median"] - 1) < within


def test_rows_of_the_first_offload_are_judged_for_memory_not_time():
    first, now = _row("bench/long/h200_savers/savers.jsonl", 1), _row(f"{OFFLOAD}/savers.jsonl", 1)
    assert calibration_role(first) == "first offload" and calibration_role(now) == "act offload calibration"
    steps = first["command"].index("--steps") + 1
    assert first["command"][:steps] + first["command"][steps + 1:] == now["command"][:steps] + now["command"][steps + 1:]
    step = {name: r["figures"]["step_time_s"]["median"] for name, r in (("first", first), ("now", now))}
    assert step["first"] > 1.5 * step["now"]  # 22.8 s against 14.6 s: the gradients' pageable round trip
    assert abs(_error(first)) < 0.02 and abs(_error(now)) < 0.02  # the memory is the same


def test_the_host_copies_in_pieces_cost_a_step_nothing_and_keep_the_loss():
    before, pieces = read_rows(ROOT / f"{OFFLOAD}/savers.jsonl"), read_rows(ROOT / f"{OFFLOAD}/savers-pieces.jsonl")
    assert [sorted(r["command"]) for r in before] == [sorted(r["command"]) for r in pieces]  # none, offload, MLP, both
    for old, new in zip(before, pieces):
        assert new["ranks"][0]["loss"] == pytest.approx(old["ranks"][0]["loss"], rel=1e-3)
        step = {name: r["figures"]["step_time_s"]["median"] for name, r in (("old", old), ("new", new))}
        assert abs(step["new"] / step["old"] - 1) < 0.01  # 14.63 s and 14.63 s with the offload alone


def test_the_pinned_pieces_take_their_own_bytes_on_the_gpu_host():
    from dsx.estimate.states import pinned_input_bytes

    killed = read_rows(ROOT / "bench/long/h200_8b_long/8b-196k.jsonl")[0]  # the pinned optimizer, before any offload
    row = _row("bench/long/h200_8b_long/8b-196k-pieces.jsonl")  # llama-8b, 196,608 tokens: 1.5 GiB a layer input
    pinned = row["memory"]["max"]["pinned_host"] - killed["memory"]["max"]["pinned_host"]
    assert pinned == pytest.approx(pinned_input_bytes(setup_of_row(row), 1), abs=2**20)  # 48 GiB
    assert pinned < 32 * 2 * GIB - 15 * GIB  # each input whole, rounded up to 2 GiB: 64 GiB


def test_a_margin_on_the_activations_is_kept_free_beside_what_must_fit():
    row = _row("bench/long/h200_longest/longest-8b.jsonl")  # llama-8b, 200,704 tokens, --longest's answer
    setup = setup_of_row(row)
    plain = estimate(setup, search_max=False)
    kept = estimate(dataclasses.replace(setup, activation_margin=0.25), search_max=False)
    activations = sum(plain.breakdown[part] for part in ("checkpointed inputs in flight", "embeddings, head, loss",
                                                         "loss tile", "recomputed layer"))
    assert kept.peak_allocated == plain.peak_allocated  # the prediction is the same; what must fit grows
    assert kept.needed - plain.needed == int(0.25 * activations)
    assert any(note.startswith(f"{0.25 * activations / GIB:,.2f} GiB (25% of the activations) kept free")
               for note in kept.notes)
