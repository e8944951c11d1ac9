"""`dsx estimate --longest`: the longest sequence a model trains on a GPU kind, with the plain and the tiled loss."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from click.testing import CliRunner

from dsx.cli import cli


def longest(*args: str):
    result = CliRunner().invoke(cli, ["estimate", "--longest", "--json", *args])
    assert result.exit_code == 0, result.output
    return {answer["loss"] + (" + savers" if answer["savers"] else ""): answer for answer in json.loads(result.stdout)}


def test_llama_1b_trains_a_longer_sequence_on_an_h100_with_the_tiled_loss():
    """The plain loss's fp32 logits (128,256 words) bind long before the layers do."""
    answers = longest("--model", "llama-1b", "--gpu-kind", "h100-80gb", "--host-memory", "125GiB")
    plain, tiled = answers["plain"], answers["tiled"]
    assert tiled["longest"] > 4 * plain["longest"]
    for answer in (plain, tiled):
        assert answer["longest"] % 1024 == 0 and answer["next"] == answer["longest"] + 1024
        assert f"--seq-len {answer['longest']}" in answer["command"]
        assert answer["next_reason"].endswith("allocator headroom + 26% of the activations), has 79.18 GiB")
        assert answer["command"].startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True dsx run ")
        assert "compile" not in answer["label"]  # dsx.longest.EAGER
    assert f"--set max_position_embeddings={tiled['longest']}" in tiled["command"]  # RoPE: raised past 131,072
    assert "--loss tiled" in tiled["command"] and "--loss" not in plain["command"]
    savers = answers["tiled + savers"]  # the checkpointed inputs on the host, the MLP in slices
    assert savers["longest"] > 2 * tiled["longest"]
    host = [r for r in savers["estimate"]["resources"] if r["name"] == "host memory"][0]
    assert host["fits"] and host["capacity"] == int(125 * 2**30 * (1 - 0.141))  # dsx.fit.HOST_ERROR kept free


def test_a_model_with_learned_positions_stops_at_its_table():
    answers = longest("--model", "gpt2-tiny", "--memory-cap", "6GiB")
    assert answers["plain"]["longest"] == answers["tiled"]["longest"] == 128
    assert answers["plain"]["next"] is None
    assert answers["plain"]["limit"] == "n_positions=128 (learned positions: --set n_positions=N raises it)"


def test_a_masked_lm_is_answered_with_its_plain_loss_only():
    assert list(longest("--model", "bert-tiny", "--memory-cap", "6GiB")) == ["plain"]


def test_longest_refuses_the_choices_it_makes():
    result = CliRunner().invoke(cli, ["estimate", "--longest", "--model", "gpt2", "--seq-len", "2048", "--zero", "3",
                                       "--loss", "tiled"])
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == ("Error: --longest chooses the sequence length and the configuration "
                                              "itself, with either loss: drop --zero, --seq-len, --loss")


ROOT = Path(__file__).resolve().parent.parent


def _activation_errors() -> list[tuple[float, str]]:
    """(measured - predicted) / predicted activations of every eager, checkpointed row at 32,768 tokens or more whose
    predicted peak is in the forward/backward pass (what ACTIVATION_ERROR is the worst of)."""
    from dsx.estimate import EstimateError, setup_of_row
    from dsx.estimate.predict import _peak_allocated, activation_margin_bytes
    from dsx.results import read_rows

    errors = []
    for path in sorted(ROOT.glob("bench/**/*.jsonl")):
        for row in read_rows(path):
            toggles = row.get("toggles") or {}
            if row.get("status") != "ok" or not isinstance(row.get("model"), dict):
                continue
            if row["model"]["seq_len"] < 32768 or toggles.get("compile") or not toggles.get("act_ckpt"):
                continue
            try:
                setup = dataclasses.replace(setup_of_row(row), activation_margin=1.0)
            except EstimateError:  # a CPU row
                continue
            if activations := activation_margin_bytes(setup, setup.micro_batch):
                predicted = _peak_allocated(setup, setup.micro_batch)[0]
                errors.append(((row["memory"]["max"]["peak_allocated"] - predicted) / activations, row["run_id"]))
    return errors


def test_the_activation_margin_is_the_worst_under_prediction_of_the_long_rows():
    from dsx.fit import ACTIVATION_ERROR

    errors = _activation_errors()
    worst, run_id = max(errors)
    assert len(errors) >= 30 and ACTIVATION_ERROR == pytest.approx(worst, abs=0.001)
    assert run_id == "8e2f6b6ca34d4bd1a5b29673692e284e"  # llama-8b at 200,704 tokens, bench/long/h200_longest


def test_the_llama_8b_answer_on_an_h200_ran_with_expandable_segments_and_not_without():
    from dsx.estimate import GPUS
    from dsx.results import read_rows

    folder = ROOT / "bench/long/h200_longest"
    without, = read_rows(folder / "longest-8b-oom.jsonl")
    ran, = read_rows(folder / "longest-8b.jsonl")
    assert without["status"] == "oom" and ran["status"] == "ok"
    assert without["command"] == ran["command"]  # the environment was the difference
    assert "4.76 GiB reserved by torch's caching allocator but unallocated" in " ".join(without["notes"])
    room = ran["memory"]["capacity"] - GPUS["h200-141gb"].context_bytes
    assert 0 < room - ran["memory"]["max"]["peak_allocated"] < 2 * 2**30  # it ran within 2 GiB of the edge
