"""`dsx estimate --model M --largest`: the family ladders (published sizes and the steps between them), the
bisection over them, the host margin, and the answer for issue 16's machine (one H100 80GB, 125 GiB host)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import load_bench_script
from dsx.cli import cli
from dsx.fit import HOST_ERROR, with_host_margin
from dsx.largest import LADDERS, PRESET_LADDERS, ladder_of, rungs
from dsx.models import MODELS, count_params, resolve_model
from dsx.units import GIB

PUBLISHED = {"Llama-3.2-1B": 1_235_814_400, "Llama-3.2-3B": 3_212_749_824, "Llama-3-8B": 8_030_261_248,
             "Llama-3-70B": 70_553_706_496, "Llama-3.1-405B": 405_853_388_800, "Llama-2-7B": 6_738_415_616,
             "Llama-2-13B": 13_015_864_320, "Llama-2-70B": 68_976_648_192, "GPT-2": 124_439_808,
             "GPT-2 medium": 354_823_168, "GPT-2 large": 774_030_080, "GPT-2 XL": 1_557_611_200}
"""Parameter counts of the published checkpoints (transformers' num_parameters(), a tied head once)."""

ISSUE_16_MACHINE = ["--gpu-kind", "h100-80gb", "--host-memory", "125GiB"]


@pytest.mark.parametrize("preset, ladder", sorted(PRESET_LADDERS.items()))
def test_the_published_sizes_of_each_ladder_are_rungs_with_their_published_counts(preset, ladder):
    anchors = {r.anchor: r.params for r in rungs(preset) if r.anchor}
    assert set(anchors) == {a.name for a in LADDERS[ladder].anchors}
    if MODELS[preset].config["vocab_size"] in (128256, 32000, 50257):
        assert {name: anchors[name] for name in anchors if name in PUBLISHED} == \
            {name: PUBLISHED[name] for name in anchors if name in PUBLISHED}


@pytest.mark.parametrize("preset", ["llama-8b", "llama-7b", "gpt2-xl"])
def test_rung_counts_are_the_models_own_counts_and_grow_along_the_ladder(preset):
    shapes = rungs(preset)
    assert [r.params for r in shapes] == sorted(r.params for r in shapes)
    family = ladder_of(preset).family
    for rung in (shapes[1], shapes[len(shapes) // 3], shapes[len(shapes) // 2]):
        assert count_params(resolve_model(preset, rung.overrides(family))) == rung.params


def test_between_llama_3_8b_and_70b_width_steps_keep_the_heads_a_multiple_of_the_kv_heads_and_depth_steps_by_one():
    between = [r for r in rungs("llama-8b") if 4096 <= r.hidden < 8192]
    assert sorted({r.hidden for r in between}) == [4096, 5120, 6144, 7168]  # 8 KV heads x head size 128
    assert [r.layers for r in between if r.hidden == 4096] == list(range(32, 44))  # up to 5120's depth, 44
    assert all(r.heads % r.kv_heads == 0 and r.ffn % 1024 == 0 and r.hidden // r.heads == 128 for r in between)
    assert next(r for r in between if r.hidden == 5120).ffn == 18432  # 5120 x 3.5 (both anchors' ratio)


def test_between_llama_2_7b_and_13b_the_ffn_follows_metas_8h_over_3_rounded_up_to_256():
    for rung in [r for r in rungs("llama-7b") if 4096 <= r.hidden < 5120]:
        assert rung.ffn == 256 * -(-int(8 * rung.hidden / 3) // 256) and rung.kv_heads == rung.heads


@pytest.mark.parametrize("ladder", sorted(name for name in LADDERS if name.startswith("llama")))
def test_metas_ffn_formula_gives_every_llama_anchor_its_published_ffn(ladder):
    from dsx.largest import llama_ffn

    for anchor in LADDERS[ladder].anchors:
        multiple = 4096 if anchor.name == "Llama-2-70B" else LADDERS[ladder].ffn_multiple  # 70B's own multiple_of
        assert llama_ffn(anchor.hidden, anchor.ffn_multiplier, multiple) == anchor.ffn, anchor.name


def test_a_family_without_a_ladder_is_refused_by_name():
    out = CliRunner().invoke(cli, ["estimate", "--model", "bert-base", "--largest"])
    assert out.exit_code == 2
    assert out.output.splitlines()[-1] == (
        "Error: --largest scales a model along its family's published sizes; dsx knows them for the GPT-2 and Llama "
        "presets (llama-1b, llama-3b, llama-8b, llama-7b, gpt2, gpt2-medium, gpt2-large, gpt2-xl), not for bert-base")


@pytest.mark.parametrize("args, message", [
    (["--largest", "--zero", "3", "--act-ckpt"], "--largest chooses the configuration itself: drop --zero, --act-ckpt"),
    (["--min-tflops", "100"], "--min-tflops goes with --largest"),
])
def test_what_largest_chooses_itself_is_refused_beside_it(args, message):
    out = CliRunner().invoke(cli, ["estimate", "--model", "llama-8b", *args])
    assert out.exit_code == 2
    assert out.output.splitlines()[-1] == f"Error: {message}"


def test_the_host_margin_is_the_estimators_worst_judged_host_error():
    accuracy = load_bench_script("bench/estimator/accuracy.py")
    judged = [t for t in accuracy.judged_trials(accuracy.FILES) if t["row"]["status"] == "ok"
              and t["role"] != "calibration" and t["estimate"].offload != "none"]
    errors = [accuracy.relative(t["estimate"].host_per_rank, t["row"]["memory"]["max"]["host_rss_peak"])
              for t in judged]
    assert round(-min(errors), 3) == HOST_ERROR
    assert with_host_margin(125 * GIB) == int(125 * GIB * (1 - 0.141))


@pytest.fixture(scope="module")
def h100_answer() -> dict:
    out = CliRunner().invoke(cli, ["estimate", "--model", "llama-8b", "--largest", *ISSUE_16_MACHINE, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


@pytest.mark.slow  # seconds of estimates / subprocesses: out of the fast tier
def test_on_one_h100_and_a_125_gib_host_the_largest_llama_3_shape_is_above_8b(h100_answer):
    assert h100_answer["largest"]["params"] == 8_466_485_248 and h100_answer["ladder"] == "llama-3"
    assert h100_answer["overrides"] == {"hidden_size": 4096, "num_hidden_layers": 34, "num_attention_heads": 32,
                                        "num_key_value_heads": 8, "intermediate_size": 14336,
                                        "tie_word_embeddings": False}
    # ga 16 since the estimator counts a dropout-free model's faster compute (Llama has none) and a 4,096-wide model's
    # (the width curve): the offloaded optimizer step is then a larger share of a step, and more micro-batches per
    # step amortise it
    assert h100_answer["label"] == "z3 off=cpu:0.6 bf16 ckpt 1gpu ga16" and h100_answer["micro_batch"] == 3
    assert h100_answer["next"]["layers"] == 35
    assert h100_answer["next_reason"] == ("z3 off=cpu:0.6 bf16 ckpt 1gpu: host memory needs 108.53 GiB (1 rank x "
                                          "108.53 GiB), has 107.38 GiB")


def test_the_answer_fits_the_gpu_and_the_host_less_its_margin(h100_answer):
    estimate = h100_answer["estimate"]
    host = next(r for r in estimate["resources"] if r["name"] == "host memory")
    assert estimate["fits"] and host["capacity"] == with_host_margin(125 * GIB)
    assert h100_answer["command"].startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True dsx run --model "
                                             "llama-8b --set hidden_size=4096 --set num_hidden_layers=34 ")
    assert "--ds-set zero_optimization.offload_optimizer.ratio=0.6" in h100_answer["command"]


@pytest.mark.slow  # seconds of estimates / subprocesses: out of the fast tier
def test_a_speed_floor_stops_the_ladder_where_the_prediction_falls_below_it():
    out = CliRunner().invoke(cli, ["estimate", "--model", "llama-8b", "--largest", *ISSUE_16_MACHINE,
                                   "--min-tflops", "300"])
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert lines[2] == "  3.51B parameters: 31 layers, hidden 3072, 24 heads / 8 KV heads, FFN 8192"
    assert lines[-2].endswith("does not fit: its fastest configuration (z3 off=cpu:0.6 bf16 ckpt 1gpu ga16, "
                              "micro-batch 3) is predicted at 259 TFLOP/s, below --min-tflops 300")
