"""Sparse attention in sweeps and reports: the --sparse-attention axis, and the long-context table read from the real
rows of such a sweep (tests/fixtures/rows/cpu_sparse.jsonl, README there)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from conftest import ROOT

from dsx import report as rp
from dsx.cli import cli
from dsx.results import read_rows
from dsx.sweep.grid import SweepSpec
from dsx.sweep.space import sweep_configurations
from dsx.sweep.trials import run_request

SPARSE_ROWS = ROOT / "tests/fixtures/rows/cpu_sparse.jsonl"
LONG_CONTEXT_ROWS = ROOT / "tests/fixtures/rows/cpu_long_context.jsonl"
H100 = ROOT / "tests/fixtures/rows/h100.jsonl"


def test_the_axis_multiplies_the_grid_and_names_each_point():
    spec = SweepSpec(model="gpt2-tiny", zero=[2], offload=["none"], vary={"seq_len": [64, 128]},
                     sparse_attention=[None, "bigbird"], sparse_sets=("num_random_blocks=1",))
    labels = [c.label for c in sweep_configurations(spec)]
    assert labels == ["z2 bf16 seq_len=64", "z2 bf16 seq_len=64 sparse=bigbird", "z2 bf16 seq_len=128",
                      "z2 bf16 seq_len=128 sparse=bigbird"]
    dense, sparse = (run_request(spec, c, 1, "fixed") for c in sweep_configurations(spec)[:2])
    assert (dense.sparse_attention, dense.sparse_sets) == (None, ())
    assert (sparse.sparse_attention, sparse.sparse_sets, sparse.seq_len) == ("bigbird", ("num_random_blocks=1",), 64)
    assert sparse.command[sparse.command.index("--sparse-attention") + 1] == "bigbird"
    assert "--sparse-set" not in dense.command


def test_a_sweep_without_the_axis_keeps_its_id_and_configuration():
    plain = SweepSpec(model="gpt2-tiny", zero=[2], offload=["none"])
    assert plain.sweep_id() == SweepSpec(model="gpt2-tiny", zero=[2], offload=["none"],
                                         sparse_attention=[None]).sweep_id()
    assert plain.sweep_id() != SweepSpec(model="gpt2-tiny", zero=[2], offload=["none"],
                                         sparse_attention=[None, "bigbird"]).sweep_id()
    assert "sparse" not in sweep_configurations(plain)[0].as_dict()


def test_a_bad_word_in_the_axis_is_refused_before_anything_runs():
    result = CliRunner().invoke(cli, ["sweep", "--model", "gpt2-tiny", "--sparse-attention", "none,bigbrd",
                                      "--dry-run"])
    assert result.exit_code == 2
    assert result.output.splitlines()[-1].startswith("Error: --sparse-attention: unknown mode 'bigbrd'")


def _lines(table):
    return [r for r in table.rows if not isinstance(r, str)]


def test_long_context_table_puts_each_sparse_row_beside_the_dense_row_of_its_length():
    rows = read_rows(SPARSE_ROWS)
    table = rp.long_context_table(rows)
    assert table.columns[:9] == ["seq", "attention", "loss", "savers", "GPUs (SP)", "block", "tiles", "tokens/s",
                                 "memory GiB"]
    assert [line[:2] for line in _lines(table)] == [["64", "dense"], ["64", "bigbird"], ["64", "local"],
                                                    ["128", "dense"], ["128", "bigbird"], ["128", "local"]]
    dense = {r["model"]["seq_len"]: r for r in rows if not r.get("sparse_attention")}
    for line, row in zip(_lines(table), sorted(rows, key=lambda r: (r["model"]["seq_len"], bool(
            r.get("sparse_attention")), (r.get("sparse_attention") or {}).get("mode", "")))):
        base = dense[row["model"]["seq_len"]]
        ratio = row["figures"]["tokens_per_s"] / base["figures"]["tokens_per_s"]
        assert line[9] == f"{ratio:.2f}"
        assert line[7] == f"{row['figures']['tokens_per_s']:,.0f}"


def test_tiled_loss_and_ulysses_rows_sit_beside_the_plain_one_rank_row_of_their_length():
    rows = read_rows(LONG_CONTEXT_ROWS)  # llama-tiny, seq 128, CPU: plain, tiled; 2 ranks Ulysses 2 plain, tiled
    table = rp.long_context_table(rows)
    assert len([r for r in table.rows if isinstance(r, str)]) == 1  # one family whatever the ranks
    assert [line[1:5] for line in _lines(table)] == [["dense", "plain", "-", "1"], ["dense", "tiled", "-", "1"],
                                                     ["dense", "plain", "-", "2 (2)"], ["dense", "tiled", "-", "2 (2)"]]
    base = next(r for r in rows if r["world_size"] == 1 and r["toggles"]["loss"] == "plain")
    for line, row in zip(_lines(table)[1:], [r for r in rows if r is not base]):
        assert line[9] == f"{row['figures']['tokens_per_s'] / base['figures']['tokens_per_s']:.2f}"


def test_no_long_context_table_without_sparse_rows():
    assert rp.long_context_table(read_rows(H100)) is None


@pytest.mark.parametrize("where, count", [("sparse=bigbird", 2), ("sparse=none", 2), ("sparse=local,seq_len=128", 1)])
def test_rows_are_selected_by_their_sparse_attention(where, count):
    assert len(rp.select(read_rows(SPARSE_ROWS), where)) == count


def test_the_report_shows_the_long_context_table():
    result = CliRunner().invoke(cli, ["report", str(SPARSE_ROWS), "--format", "markdown"])
    assert result.exit_code == 0, result.output
    assert "## Long context: sequence length, method, speed and memory" in result.output
