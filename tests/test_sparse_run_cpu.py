"""A real 2-rank ZeRO-2 `dsx run` whose --config file carries a bigbird sparse_attention block: DeepSpeed 0.19
would reject the block, dsx applies it and the ranks train with the layout. One launch, read by every test here."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsx.results import parse_row, read_rows

ROOT = Path(__file__).resolve().parent.parent
BLOCK = {"mode": "bigbird", "block": 16, "num_random_blocks": 1, "num_sliding_window_blocks": 3,
         "num_global_blocks": 1}


@pytest.fixture(scope="module")
def bigbird_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sparse")
    config = folder / "ds.json"
    config.write_text(json.dumps({
        "train_batch_size": 2, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 2}, "bf16": {"enabled": True}, "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
        "sparse_attention": BLOCK}))
    results = folder / "runs.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "DSX_DEBUG")}
    env.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".cache" / "torch_extensions"))
    out = subprocess.run([sys.executable, "-m", "dsx", "run", "--model", "gpt2-tiny", "--set", "attn_pdrop=0",
                          "--seq-len", "128", "--gpus", "2", "--config", str(config), "--steps", "4", "--warmup", "1",
                          "--results", str(results)], cwd=folder, env=env, capture_output=True, text=True,
                         timeout=400)
    rows = read_rows(results)
    return out, rows


@pytest.mark.slow
@pytest.mark.deepspeed
def test_the_run_trains_and_its_row_is_ok(bigbird_run):
    out, rows = bigbird_run
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    row = parse_row(rows[-1])
    assert row.status == "ok" and row.world_size == 2 and row.ds_config["zero_optimization"]["stage"] == 2
    losses = [x for rank in row.ranks for x in rank.loss]
    assert len(losses) == 8 and all(math.isfinite(x) for x in losses)
    assert row.ranks[0].loss == row.ranks[1].loss  # both ranks built the same layout (one seed)


@pytest.mark.slow
@pytest.mark.deepspeed
def test_the_row_records_the_layout_and_who_applied_it(bigbird_run):
    _, rows = bigbird_run
    row = parse_row(rows[-1])
    sparse = row.sparse_attention
    assert (sparse.requested, sparse.mode, sparse.block, sparse.applied) == ("config", "bigbird", 16, True)
    assert sparse.params == {**BLOCK, "different_layout_per_head": False}
    assert (sparse.kernel, sparse.applied_by, sparse.handed_to_deepspeed) == ("sdpa_mask", "dsx", False)
    assert sparse.causal and 0 < sparse.layout_density < 1 and 0 < sparse.attended_fraction < 1
    assert "sparse_attention" not in row.ds_config  # DeepSpeed 0.19 got the config without it


@pytest.mark.slow
@pytest.mark.deepspeed
def test_the_ranks_built_the_model_with_the_sparse_attention(bigbird_run):
    out, rows = bigbird_run
    row = parse_row(rows[-1])
    assert ("the ranks built the model with attn_implementation dsx_sparse (bigbird layout, kernel sdpa)"
            in row.notes)
    plan = json.loads((Path(row.run_dir) / "plan.json").read_text())
    assert plan["sparse_attention"]["block"]["mode"] == "bigbird"
    assert "  sparse      bigbird (block 16, asked: config) -> masked SDPA;" in out.stdout


@pytest.mark.slow
@pytest.mark.deepspeed
def test_the_flops_count_only_the_attended_token_pairs(bigbird_run):
    from dsx.flops import attention_flops_per_token, model_flops_per_token
    from dsx.models import resolve_model

    _, rows = bigbird_run
    row = parse_row(rows[-1])
    resolved = resolve_model("gpt2-tiny", {"attn_pdrop": 0}, seq_len=128)
    dense = model_flops_per_token(resolved)
    skipped = (1 - row.sparse_attention.attended_fraction) * attention_flops_per_token(resolved)
    assert row.figures.flops_per_token == pytest.approx(dense - skipped, rel=1e-12)
    assert row.figures.flops_per_token < dense
