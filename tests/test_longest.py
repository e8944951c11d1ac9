"""`dsx estimate --longest`: the longest sequence a model trains on a GPU kind, with the plain and the tiled loss."""

from __future__ import annotations

import json

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
        assert f"--set max_position_embeddings={answer['longest']}" in answer["command"]  # RoPE: raised to fit
        assert answer["next_reason"].endswith("has 79.18 GiB")
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
