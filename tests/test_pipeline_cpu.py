"""Pipeline stages for real: DeepSpeed's PipelineEngine on 2 gloo CPU ranks, tiny GPT-2 (tied embedding) and Llama
(untied, with activation checkpointing), each against the unsplit model on the same weights and batches.

Five launches in all, shared by every test (each ~30 s on 2 cores):
- one `dsx sweep --gpus 1,2 --pipeline-stages none,2` of gpt2-tiny: the unsplit model on 1 rank, 2 data-parallel
  ranks, and 2 pipeline stages (the 1-rank pipeline point is skipped: 2 stages need 2 ranks);
- `dsx run` of llama-tiny: 2 pipeline stages with --act-ckpt, and the unsplit model on 1 rank.
fp32, dropout 0, ZeRO-1, micro-batch 2 x 4 micro-batches: the same global batch for the unsplit model and the
pipeline (1 replica), so their losses must agree (CPU threads differ: 1 per pipeline rank, 2 for the single rank).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsx.pipeline import stage_layouts
from dsx.results import parse_row, read_rows

ROOT = Path(__file__).resolve().parent.parent
STEPS = 3
COMMON = ["--zero", "1", "--precision", "fp32", "--micro-batch", "2", "--grad-accum", "4", "--steps", str(STEPS),
          "--warmup", "0"]
NO_DROPOUT = ["--set", "resid_pdrop=0", "--set", "embd_pdrop=0", "--set", "attn_pdrop=0"]

pytestmark = [pytest.mark.slow, pytest.mark.deepspeed]


def dsx(results: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "DSX_DEBUG")}
    env.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".cache" / "torch_extensions"))
    out = subprocess.run([sys.executable, "-m", "dsx", *args, "--results", str(results)], cwd=results.parent,
                         env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    return out


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory) -> dict:
    """The sweep's rows by configuration: 'plain' (1 rank), 'dp2' (2 data-parallel ranks), 'pp2' (2 stages)."""
    results = tmp_path_factory.mktemp("pipeline") / "gpt2.jsonl"
    out = dsx(results, "sweep", "--model", "gpt2-tiny", *NO_DROPOUT, *COMMON, "--gpus", "1,2",
              "--pipeline-stages", "none,2", "--no-prune")
    rows = [parse_row(r) for r in read_rows(results)]
    by = {("pp2" if r.pipeline else "dp2" if r.world_size == 2 else "plain"): r for r in rows}
    assert len(rows) == 3 and set(by) == {"plain", "dp2", "pp2"}, out.stdout + out.stderr
    return {**by, "results": results, "sweep_output": out.stdout + out.stderr}


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> dict:
    results = tmp_path_factory.mktemp("pipeline") / "llama.jsonl"
    dsx(results, "run", "--model", "llama-tiny", *COMMON, "--act-ckpt", "--gpus", "2", "--pipeline-stages", "2")
    dsx(results, "run", "--model", "llama-tiny", *COMMON, "--act-ckpt", "--gpus", "1")
    pp2, plain = (parse_row(r) for r in read_rows(results))
    return {"pp2": pp2, "plain": plain, "results": results}


@pytest.fixture(params=["gpt2", "llama"])
def pair(request) -> dict:
    return request.getfixturevalue(request.param)


def test_a_two_stage_run_is_an_ok_row_with_the_pipeline_fields(pair):
    row = pair["pp2"]
    assert row.status == "ok" and row.world_size == 2 and len(row.ranks) == 2
    p = row.pipeline
    assert (p.stages, p.data_parallel, p.micro_batches, p.partition) == (2, 1, 4, "parameters")
    assert p.bubble_fraction == pytest.approx(1 / 5)
    assert [s.stage for s in p.per_stage] == [0, 1] and [s.ranks for s in p.per_stage] == [[0], [1]]
    assert all(s.memory.host_rss_peak and s.params for s in p.per_stage)
    assert p.largest_by == "host_rss_peak"
    assert p.largest_stage == max(p.per_stage, key=lambda s: s.memory.host_rss_peak).stage
    assert p.params_total == row.model.params  # every parameter on some stage, the tied table counted once
    assert row.ds_config["train_batch_size"] == 2 * 4 * 1
    assert row.trial_key and row.figures.step_time_s.median > 0


def test_the_stages_are_the_predicted_partition(pair):
    from dsx.models import resolve_model

    row = pair["pp2"]
    resolved = resolve_model(row.model.preset, row.model.overrides)
    predicted = stage_layouts(resolved, 2, "parameters")
    start = 0
    for stage, layout in zip(row.pipeline.per_stage, predicted):
        assert stage.layer_range == [start, start + len(layout.layers)] and stage.params == layout.params
        start += len(layout.layers)
    assert row.pipeline.per_stage[0].layers[0] == "TokenEmbeddingPipe"
    assert row.pipeline.per_stage[1].layers[-2:] == ["FinalNormPipe", "tied head" if row.model.family == "gpt2"
                                                     else "LMHeadPipe"]


def test_every_rank_reports_the_last_stages_loss(pair):
    first, last = pair["pp2"].ranks
    assert len(first.loss) == STEPS and first.loss == last.loss


def test_the_first_step_loss_is_the_unsplit_models(pair):
    """Same weights (seeded build), same batches: the loss of the first step is computed before any update."""
    assert pair["pp2"].ranks[0].loss[0] == pytest.approx(pair["plain"].ranks[0].loss[0], rel=1e-6)


def test_the_loss_curve_is_the_unsplit_models(pair):
    pipeline, plain = pair["pp2"].ranks[0].loss, pair["plain"].ranks[0].loss
    assert pipeline == pytest.approx(plain, rel=1e-5)


def test_the_tied_embedding_stays_equal_on_the_first_and_the_last_stage(gpt2, llama):
    assert gpt2["pp2"].pipeline.tied_weights_equal is True
    assert llama["pp2"].pipeline.tied_weights_equal is None  # llama-tiny's LM head is its own weight


def test_activation_checkpointing_runs_every_decoder_layer_checkpointed(llama):
    assert llama["pp2"].toggles.act_ckpt and llama["pp2"].pipeline.activation_checkpoint_interval == 1
    assert llama["pp2"].ds_config["pipeline"]["activation_checkpoint_interval"] == 1


def test_tokens_per_s_counts_replicas_not_ranks(gpt2):
    for name, replicas in (("plain", 1), ("dp2", 2), ("pp2", 1)):
        row = gpt2[name]
        figures = row.figures
        assert figures.tokens_per_s == pytest.approx(2 * 4 * replicas * 64 / figures.step_time_s.median)
        assert figures.model_tflops_per_s == pytest.approx(
            figures.flops_per_token * figures.tokens_per_s / row.world_size / 1e12)


def test_the_sweep_labels_and_skips_pipeline_points(gpt2):
    assert gpt2["pp2"].sweep.label == "z1 fp32 2gpu pp2" and gpt2["pp2"].sweep.configuration["pipeline_stages"] == 2
    assert "pipeline_stages" not in gpt2["plain"].sweep.configuration
    assert "z1 fp32 1gpu pp2" in gpt2["sweep_output"] and \
        "--pipeline-stages 2 does not divide the 1 rank(s) (--gpus)" in gpt2["sweep_output"]


def test_report_shows_the_pipeline_table(gpt2):
    from click.testing import CliRunner

    from dsx.cli import cli

    result = CliRunner().invoke(cli, ["report", str(gpt2["results"]), "--format", "markdown",
                                      "--where", "pipeline_stages=2"])
    assert result.exit_code == 0, result.output
    section = result.output.split("## Pipeline stages")[1]
    header, _, line = section.strip().splitlines()[:3]
    assert header.split("|")[1:-1] == [f" {c} " for c in (
        "configuration", "model", "GPU", "stages×DP", "micro-batch", "μ-batches/step", "bubble", "partition",
        "params per stage", "peak GiB per stage", "largest", "tokens/s", "TFLOP/s", "MFU", "tied")]
    cells = [c.strip() for c in line.split("|")[1:-1]]
    assert cells[:8] == ["z1 fp32 2gpu pp2", "gpt2-tiny attn_pdrop=0 embd_pdrop=0 resid_pdrop=0", "2 x CPU", "2×1",
                         "2", "4", "20.0%", "parameters"]
    assert cells[-1] == "equal"


def test_report_best_lints_a_pipeline_config_at_its_data_parallel_size(llama, tmp_path):
    from click.testing import CliRunner

    from dsx.cli import cli

    out = tmp_path / "best.json"
    result = CliRunner().invoke(cli, ["report", str(llama["results"]), "--best", "--where", "pipeline_stages=2",
                                      "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "--pipeline-stages 2" in result.output.splitlines()[2]  # the command that reproduces it
    assert json.loads(out.read_text()) == llama["pp2"].ds_config
