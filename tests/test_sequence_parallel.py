"""--sequence-parallel N (Ulysses, dsx.run.sequence and dsx.rank.ulysses): what is refused before any launch, and
what a trial becomes. The real runs on 2 CPU ranks are in tests/test_parity.py (dsx check: the same model), and,
with sparse attention (whose reference dsx check does not build), at the end of this file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dsx.results import parse_row, read_rows
from dsx.run import RunRefused, RunRequest, resolve_trial

ROOT = Path(__file__).resolve().parent.parent


def _resolve(**fields):
    return resolve_trial(RunRequest(model=fields.pop("model", "llama-tiny"), **fields))


@pytest.mark.parametrize("fields, message", [
    (dict(gpus=2, sequence_parallel=3), "sequence parallelism over 3 ranks must divide the 2 rank(s)"),
    (dict(gpus=3, sequence_parallel=3),
     "--sequence-parallel 3 must divide llama-tiny's 4 attention heads: after the all-to-all each rank attends with "
     "heads / 3 of them"),
    (dict(gpus=2, sequence_parallel=2, model="gpt2-tiny"),
     "--sequence-parallel 2: dsx runs DeepSpeed's Ulysses on Llama-family models; gpt2-tiny's gpt2 attention does not "
     "take the output layout Ulysses returns (its c_proj fails on the shape)"),
    (dict(gpus=2, sequence_parallel=2, model="bert-tiny"),
     "--sequence-parallel 2: dsx shards a causal LM's sequence; bert-tiny is a masked-lm model"),
    (dict(gpus=2, sequence_parallel=2, attn="eager"),
     "--sequence-parallel 2 needs --attn sdpa or flash: DeepSpeed's Ulysses refuses eager attention (its [S, S] "
     "mask)"),
    (dict(gpus=2, sequence_parallel=2, seq_len=63, overrides={"max_position_embeddings": 128}),
     "--sequence-parallel 2 must divide the sequence length 63"),
])
def test_where_ulysses_cannot_split_the_run_is_refused(fields, message):
    with pytest.raises(RunRefused) as refused:
        _resolve(**fields)
    assert str(refused.value) == message


def test_a_ulysses_group_is_one_replica_of_the_batch():
    """4 ranks in groups of 2: 2 replicas, so the global batch is micro-batch x grad-accum x 2."""
    trial = _resolve(gpus=4, sequence_parallel=2, config_flags={"micro_batch": 2, "grad_accum": 3})
    assert trial.sequence_parallel == 2 and trial.ds_config["sequence_parallel_size"] == 2
    assert trial.ds_config["train_batch_size"] == 12
    assert ("Ulysses sequence parallelism over 2 ranks: each holds 32 of the 64 tokens of its group's micro-batch and "
            "attends with 2 of 4 heads; 2 data-parallel replica(s)") in trial.notes
    assert trial.key != _resolve(gpus=4, config_flags={"micro_batch": 2, "grad_accum": 3}).key


def test_the_loss_tiles_and_memory_savers_are_told_per_rank_under_ulysses():
    """Each rank computes the loss, offloads the checkpointed inputs and tiles the MLP of its own shard: 128 tokens
    over 2 ranks are 64 a rank, one MLP slice of llama-tiny's 64-wide hidden states, one loss tile of 64."""
    trial = _resolve(gpus=2, sequence_parallel=2, seq_len=128, overrides={"max_position_embeddings": 128},
                     loss="tiled", loss_tile_tokens=64, act_ckpt=True, act_ckpt_offload=True, tiled_mlp=True)
    notes = [n for n in trial.notes if n.startswith(("--loss tiled", "--act-ckpt-offload", "--tiled-mlp"))]
    assert notes == [
        "--loss tiled: the loss of each rank's shard (64 tokens) of a micro-batch in 1 tile(s) of up to 64 (250.0 KiB "
        "of fp32 logits at a time, against 250.0 KiB whole)",
        "--act-ckpt-offload: each checkpointed layer's input (64 x 64 values a sample) is kept in host memory and "
        "copied back for the layer's recompute",
        "--tiled-mlp: each MLP in 1 slice(s) of tokens (DeepSpeed's TiledMLP), recomputed in the backward pass"]


def test_the_parity_reference_of_a_ulysses_run_is_plain_data_parallel_over_its_replicas(tmp_path):
    from dsx.parity import plan_check

    request = RunRequest(model="llama-tiny", gpus=2, sequence_parallel=2, config_flags={"micro_batch": 2},
                         results=str(tmp_path / "r.jsonl"))
    check = plan_check(request, 0, None)
    reference = check.references[0]
    assert (reference.request.gpus, reference.world_size, reference.sequence_parallel) == (1, 1, None)
    assert "sequence_parallel_size" not in reference.ds_config and reference.ds_config["train_batch_size"] == 2


def test_the_estimate_gives_each_ulysses_rank_its_shard_of_the_activations():
    """llama-8b at 131,072 tokens on 4 GPUs, ZeRO-3, checkpointing, tiled loss: Ulysses over 4 keeps a quarter of
    the checkpointed layer inputs per GPU, adds the all-to-all buffers, and trains one replica's tokens."""
    from dsx.estimate import Setup, estimate
    from dsx.models import resolve_model

    resolved = resolve_model("llama-8b", {"max_position_embeddings": 131072}, seq_len=131072)
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
              "zero_optimization": {"stage": 3}, "optimizer": {"type": "AdamW"}}
    common = dict(resolved=resolved, ds_config=config, world_size=4, micro_batch=1, act_ckpt=True,
                  loss_tile_tokens=4194)
    alone, ulysses = (estimate(Setup(**common, sequence_parallel=n), search_max=False) for n in (None, 4))
    layers = resolved.num_layers * 131072 * resolved.hidden_size * 2
    assert alone.breakdown["checkpointed layer inputs"] == layers
    assert ulysses.breakdown["checkpointed layer inputs"] == layers // 4
    assert ulysses.breakdown["all-to-all buffers"] == 2 * 32768 * (32 + 2 * 8 + 32) * 128 * 2
    assert not alone.fits and ulysses.fits
    assert ulysses.tokens_per_s == pytest.approx(131072 / ulysses.step_time_s)


SPARSE = ["--model", "llama-tiny", "--seq-len", "128", "--precision", "fp32", "--lr", "3e-3", "--zero", "2",
          "--micro-batch", "2", "--steps", "9", "--warmup", "1", "--sparse-attention", "bigbird",
          "--sparse-set", "block=16", "--sparse-set", "num_random_blocks=2", "--sparse-set",
          "different_layout_per_head=true"]


def _sparse_run(results: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "DSX_DEBUG")}
    env.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".cache" / "torch_extensions"))
    return subprocess.run([sys.executable, "-m", "dsx", "run", *SPARSE, *args, "--results", str(results)],
                          cwd=results.parent, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.deepspeed
def test_sparse_attention_under_ulysses_trains_what_one_rank_trains(tmp_path):
    """bigbird with a layout per head on 2 CPU ranks, Ulysses over both, against one rank: each rank attends over
    the whole sequence with its 2 of the 4 heads and their layouts, so the losses are one rank's (fp32). A rank
    given the wrong heads' layouts trains another model."""
    results = tmp_path / "runs.jsonl"
    for args in ((), ("--gpus", "2", "--sequence-parallel", "2")):
        out = _sparse_run(results, *args)
        assert out.returncode == 0, out.stdout + out.stderr
    one, group = (parse_row(r) for r in read_rows(results))
    assert (one.world_size, group.world_size, group.ds_config["sequence_parallel_size"]) == (1, 2, 2)
    assert "sparse attention under Ulysses: each rank's layout is its 2 heads' over the whole sequence" in group.notes
    expected = one.ranks[0].warmup_loss + one.ranks[0].loss
    for rank in group.ranks:
        assert rank.warmup_loss + rank.loss == pytest.approx(expected, rel=1e-5)
    assert expected[-1] < 0.8 * expected[0]


@pytest.mark.slow
@pytest.mark.deepspeed
def test_a_ulysses_run_whose_ranks_fail_before_counting_leaves_an_error_row(tmp_path):
    """No rank reached the comms counter: the row is the failure (exit 1), not dsx's internal error over the
    all-to-alls' missing counts."""
    results = tmp_path / "runs.jsonl"
    out = _sparse_run(results, "--gpus", "2", "--sequence-parallel", "2", "--inject-failure", "error")
    assert out.returncode == 1, out.stdout + out.stderr
    row = parse_row(read_rows(results)[0])
    assert row.status == "error"  # every rank fails; whichever reports first is named
    assert re.match(r"rank [01]: InjectedFailure: injected failure after deepspeed.initialize on rank [01]", row.error)
    assert "internal error" not in out.stderr
