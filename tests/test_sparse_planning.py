"""What dsx decides before a sparse run starts: the request checked (one-line errors naming the flag), the costs
of the layout, the predictor behind `auto`, and what the rank plan, the trial key and the config carry."""

from __future__ import annotations

import json
import random

import pytest
import torch
from click.testing import CliRunner

from conftest import ROOT
from dsx.cli import cli
from dsx.models import resolve_model
from dsx.sparse import predict
from dsx.sparse.attention import SparseAttention
from dsx.sparse.layouts import make_layout
from dsx.sparse.planning import decide
from dsx.sparse.spec import MODE_MODELS, SparseRequestError, parse_word, resolve_block, take_block

NO_DROPOUT = ["--set", "attn_pdrop=0"]


def dry_run(tmp_path, *args) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["run", "--model", "gpt2-tiny", *args, "--dry-run",
                                      "--results", str(tmp_path / "runs.jsonl")])
    assert "Traceback" not in result.output
    return result.exit_code, result.output


# ------------------------------------------------------------------------------------------------ bad input

REFUSALS = [
    (["--sparse-attention", "bigbrd"],
     "--sparse-attention: unknown mode 'bigbrd' (choose none, auto, dense, fixed, variable, bigbird, bslongformer, "
     "local or auto:MODE); did you mean 'bigbird'?"),
    (["--sparse-attention", "bigbird", "--sparse-set", "block=48"],
     "sparse attention: the sequence length 64 (--seq-len) is not a multiple of the block size 48 "
     "(--sparse-set block=N)"),
    (["--sparse-attention", "bigbird", "--sparse-set", "num_sliding_window_blocks=9"],
     "sparse_attention.num_sliding_window_blocks (--sparse-set): num_sliding_window_blocks 9 is more than the 4 "
     "blocks of a row at sequence length 64 (blocks of 16)"),
    (["--sparse-attention", "bslongformer", "--sparse-set", "global_block_indices=[7]"],
     "sparse_attention.global_block_indices (--sparse-set): 7 is past the last block (3) of this sequence (4 blocks "
     "of 16): DeepSpeed ignores it"),
    (["--sparse-attention", "variable", "--sparse-set", "global_block_indices=[-1]"],
     "sparse_attention.global_block_indices (--sparse-set): -1 is negative (DeepSpeed would wrap it to a block "
     "counted from the end)"),
    (["--sparse-attention", "fixed", "--sparse-set", "num_local_blocks=3", "--sparse-set", "num_global_blocks=2"],
     "--sparse-set: num_local_blocks (3) must be a multiple of num_global_blocks (2)"),
    (["--sparse-attention", "bigbird", "--sparse-set", "num_random_blocks=-1"],
     "--sparse-set num_random_blocks: Input should be greater than or equal to 0"),
    (["--sparse-attention", "bigbird", "--sparse-set", "windw=3"],
     "--sparse-set windw: not a key of mode bigbird (its keys: block, different_layout_per_head, num_random_blocks, "
     "num_sliding_window_blocks, num_global_blocks)"),
    (["--sparse-attention", "bigbird", "--sparse-set", "mode=fixed"],
     "--sparse-set mode=...: the mode is --sparse-attention MODE"),
    (["--sparse-set", "block=16"],
     "--sparse-set needs --sparse-attention MODE (or a --config file with a sparse_attention block)"),
    (["--sparse-attention", "bigbird", "--attn", "flash"],
     "--attn flash cannot be combined with sparse attention (bigbird): sparse attention is its own attention "
     "implementation (FlexAttention on CUDA, a masked SDPA on CPU); drop --attn"),
]


@pytest.mark.parametrize("flags, message", REFUSALS, ids=[f[-1] for f, _ in REFUSALS])
def test_bad_sparse_input_is_one_line_naming_the_flag_exit_2(tmp_path, flags, message):
    code, output = dry_run(tmp_path, *NO_DROPOUT, *flags)
    assert code == 2
    assert output.splitlines()[-1] == f"Error: {message}"
    assert not (tmp_path / "runs.jsonl").exists()


def test_attention_dropout_is_refused_with_the_key_to_set(tmp_path):
    code, output = dry_run(tmp_path, "--sparse-attention", "bigbird")
    assert code == 2
    assert output.splitlines()[-1] == (
        "Error: --sparse-attention: gpt2-tiny has attention dropout attn_pdrop=0.1, and FlexAttention applies none: "
        "pass --set attn_pdrop=0 (and the same to the dense run you compare with)")


def test_a_flag_mode_and_a_config_block_together_are_refused():
    with pytest.raises(SparseRequestError, match=r"^--sparse-attention fixed: the config already has a "
                                                 r"sparse_attention block \(mode bigbird\): drop the flag"):
        resolve_block("fixed", (), {"mode": "bigbird"})


def test_words():
    assert parse_word("none") == ("none", None)
    assert parse_word("auto") == ("auto", None)
    assert parse_word("auto:fixed") == ("auto", "fixed")
    assert parse_word("LOCAL") == ("local", "local")


def test_auto_takes_the_config_block_and_none_drops_it():
    requested, block = resolve_block("auto", ("num_random_blocks=1",), {"mode": "bigbird", "block": 32})
    assert requested == "auto" and (block.mode, block.block, block.num_random_blocks) == ("bigbird", 32, 1)
    assert resolve_block("none", (), {"mode": "bigbird"}) == ("none", None)
    assert resolve_block(None, (), {"block": 32})[1].mode == "fixed"  # DeepSpeed's default mode
    assert resolve_block(None, (), None) == ("none", None)


def test_the_block_is_kept_for_deepspeed_018_and_removed_for_019():
    config = {"sparse_attention": {"mode": "fixed"}, "train_batch_size": 1}
    taken = take_block(config, legacy_target=True)
    assert (taken.block, taken.handed, "sparse_attention" in config) == ({"mode": "fixed"}, True, True)
    taken = take_block(config, legacy_target=False)
    assert (taken.block, taken.handed, config) == ({"mode": "fixed"}, False, {"train_batch_size": 1})


# ------------------------------------------------------------------------------------------------ dry runs


def test_a_config_files_block_runs_without_reaching_deepspeed(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                                "zero_optimization": {"stage": 2}, "bf16": {"enabled": True},
                                "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
                                "sparse_attention": {"mode": "bigbird", "block": 16, "num_random_blocks": 1}}))
    code, output = dry_run(tmp_path, *NO_DROPOUT, "--config", str(path))
    assert code == 0, output
    config = json.loads(output.split("--dry-run writes nothing):\n", 1)[1].split("\nrank plan", 1)[0])
    assert "sparse_attention" not in config
    plan = json.loads(output.split("plan.json): ", 1)[1].splitlines()[0])
    assert plan["sparse_attention"] == {"block": {"mode": "bigbird", "block": 16, "different_layout_per_head": False,
                                                  "num_random_blocks": 1, "num_sliding_window_blocks": 3,
                                                  "num_global_blocks": 1}, "seed": 1234, "kernel": "sdpa"}
    assert ("note: sparse attention bigbird (block 16, applied by dsx, removed from the DeepSpeed config): sparse: "
            "CPU ranks apply the layout as a boolean mask through dense SDPA") in output


def test_validate_for_019_says_dsx_run_applies_the_block(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_batch_size": 1, "sparse_attention": {"mode": "bigbird"}}))
    result = CliRunner().invoke(cli, ["validate", "--target-deepspeed", "0.19.8", "--json", str(path)])
    finding = next(f for f in json.loads(result.output)["files"][0]["findings"] if f["path"] == "sparse_attention")
    assert finding["fix"].startswith("use dsx run, which applies the block itself (FlexAttention block masks")


def test_sparse_and_dense_runs_are_different_trials(tmp_path):
    from dsx.run import RunRequest, resolve_trial

    def key(**sparse):
        return resolve_trial(RunRequest(model="gpt2-tiny", overrides={"attn_pdrop": 0}, results=str(tmp_path / "r"),
                                        **sparse)).key

    keys = [key(), key(sparse_attention="none"), key(sparse_attention="bigbird"), key(sparse_attention="auto"),
            key(sparse_attention="bigbird", sparse_sets=("num_random_blocks=1",))]
    assert keys[0] == keys[1]
    assert len(set(keys)) == 4


# ------------------------------------------------------------------------------------------------ decisions


def _block(mode, **keys):
    return MODE_MODELS[mode].model_validate({"mode": mode, **keys})


def _gpt2(seq_len: int):
    return resolve_model("gpt2-medium", {"attn_pdrop": 0, "n_positions": seq_len}, seq_len=seq_len)


def test_auto_on_an_h100_runs_bigbird_at_32k_and_dense_at_4k():
    block = _block("bigbird", block=128)
    long = decide("auto", block, _gpt2(32768), "cuda", handed_to_deepspeed=False, origin="--sparse-set")
    short = decide("auto", block, _gpt2(4096), "cuda", handed_to_deepspeed=False, origin="--sparse-set")
    assert long.plan is not None and long.info["applied"] and long.info["kernel"] == "flex_attention"
    assert long.info["predicted_attention_speedup"] > 5
    assert short.plan is None and not short.info["applied"] and short.info["kernel"] is None
    assert short.info["decision"].startswith("dense: attention forward+backward predicted 0.")
    assert short.info["decision"].endswith(f"below auto's {predict.AUTO_MARGIN}x")


def test_an_explicit_mode_runs_but_says_when_dense_is_predicted_faster():
    decision = decide("fixed", _block("fixed", block=16), _gpt2(4096), "cuda", handed_to_deepspeed=False,
                      origin="--sparse-set")
    assert decision.plan is not None and decision.plan.kernel == "flex"
    assert decision.notes[0].startswith("sparse attention: dense SDPA is predicted faster here: attention "
                                        "forward+backward predicted 0.")
    assert decision.notes[0].endswith("--sparse-attention auto would run dense attention")


def test_auto_on_cpu_ranks_runs_dense():
    decision = decide("auto", _block("bigbird"), resolve_model("gpt2-tiny", {"attn_pdrop": 0}), "cpu",
                      handed_to_deepspeed=False, origin="--sparse-set")
    assert decision.plan is None and decision.info["predicted_attention_speedup"] is None
    assert decision.info["decision"].startswith("dense: CPU ranks apply the layout as a boolean mask")


def test_the_rows_densities_of_a_block_diagonal_layout():
    block = _block("bslongformer", block=64, num_sliding_window_blocks=1, global_block_indices=[0])
    decision = decide("bslongformer", block, _gpt2(1024), "cuda", handed_to_deepspeed=True, origin="--config x")
    info = decision.info
    assert info["layout_density"] == (16 + 15 + 15) / 256  # diagonal + global row 0 and column 0
    # causal: diagonal blocks give 64*65/2 pairs each, column 0 below the diagonal 15 full blocks
    assert info["attended_fraction"] == pytest.approx((16 * 64 * 65 / 2 + 15 * 64 * 64) / (1024 * 1025 / 2))
    assert info["tile_fraction"] == pytest.approx((8 + 7) / (8 * 9 / 2))  # 128-tiles: diagonal + column 0
    assert info["handed_to_deepspeed"] and info["causal"]


# ------------------------------------------------------------------------------------------------ the predictor


PROBE_FILES = {"bigbird": ROOT / "bench/sparse/h100_rest/kernel.txt",
               "fixed": ROOT / "bench/sparse/h100_profile/kernel_fixed.txt"}


def _probe_lines(layout: str) -> list[dict]:
    return [json.loads(line) for line in PROBE_FILES[layout].read_text().splitlines() if line.startswith("{")]


def test_the_predictor_is_fitted_on_the_committed_kernel_probes():
    committed = [(layout, r["seq"], r["tiles"], r["flex_ms"], r["dense_ms"])
                 for layout in PROBE_FILES for r in _probe_lines(layout) if r["seq"] >= 16384]
    assert list(predict.PROBES) == committed


def test_the_predictor_reproduces_every_probe_from_16k_within_5_percent():
    for layout, seq, kept, flex, dense in predict.PROBES:
        predicted = predict.speedup(seq, predict.HEADS, 1, True, kept * predict.HEADS)
        assert predicted == pytest.approx(dense / flex, rel=0.05), (layout, seq)


def test_below_16k_the_predictor_errs_towards_dense():
    for layout in PROBE_FILES:
        for r in _probe_lines(layout):
            if r["seq"] < 16384:
                predicted = predict.speedup(r["seq"], predict.HEADS, 1, True, r["tiles"] * predict.HEADS)
                assert predicted < r["speedup"], (layout, r["seq"])


def test_the_probes_tile_counts_are_what_the_layouts_keep():
    for mode in PROBE_FILES:
        block = _block(mode, block=128)
        for r in _probe_lines(mode)[:3]:
            layout = make_layout(block, 1, r["seq"], rng=random.Random(1234), compact=True)
            sparse = SparseAttention(layout=layout, block=128, unidirectional=False, kernel="flex")
            assert sparse.kept_tiles(r["seq"], True) == r["tiles"], (mode, r["seq"])


def test_auto_runs_fixed_at_32k_where_the_probe_measured_it_faster_and_dense_at_8k():
    block = _block("fixed", block=128)
    long = decide("auto", block, _gpt2(32768), "cuda", handed_to_deepspeed=False, origin="--sparse-set")
    short = decide("auto", block, _gpt2(8192), "cuda", handed_to_deepspeed=False, origin="--sparse-set")
    assert long.info["applied"] and long.info["predicted_attention_speedup"] == pytest.approx(2.12, abs=0.01)
    assert not short.info["applied"] and short.info["predicted_attention_speedup"] < 1


def test_kept_tiles_of_a_block_that_does_not_line_up_with_the_tiles():
    from torch.nn.attention.flex_attention import create_block_mask

    block = _block("bigbird", block=48, num_random_blocks=1)
    layout = make_layout(block, 2, 960, rng=random.Random(3), compact=True)
    sparse = SparseAttention(layout=layout, block=48, unidirectional=False, kernel="flex")
    for causal in (True, False):
        reference = create_block_mask(sparse.mask_mod(torch.device("cpu"), causal), None, None, 960, 960,
                                      device="cpu", BLOCK_SIZE=128)
        assert sparse.kept_tiles(960, causal) == int(reference.to_dense().sum())
