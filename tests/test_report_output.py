"""What `dsx report` prints and writes when its tables are narrow, its reader stops early, or its rows are of a kind
a view does not read (issue 34, item 11)."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from conftest import ROOT
from dsx.cli import cli
from dsx.report import comm_table, load, to_rich
from dsx.report.best import readable_command
from dsx.report.table import Table
from dsx.units import parse_size, size_arg

ROWS = ROOT / "tests/fixtures/rows"
SWEEP = ROWS / "cpu_sweep.jsonl"
LAUNCH = ROWS / "cpu_launch.jsonl"
TWO_NODES = ROOT / "bench/multigpu/rows/dp2-eager.jsonl"


def report(*args):
    return CliRunner().invoke(cli, ["report", *map(str, args)])


def test_a_narrow_table_whose_lines_are_alike_keeps_its_first_columns():
    columns = ["GPU", "configuration", "mb", "nodes", "bytes/step", "predicted", "a very long legend-like column"]
    table = Table("Communication per optimizer step", columns, rows=[["H200", "z1 bf16", "8 x 4", "1", "8.7 GiB",
                                                                     "8.7 GiB", "x" * 40]] * 2)
    rich_table, notes = to_rich(table, width=60)
    assert [c.header for c in rich_table.columns] == ["GPU", "configuration", "mb", "nodes"]
    assert notes[0].startswith("Same on every line: bytes/step 8.7 GiB, predicted 8.7 GiB")


def test_the_communication_table_tells_one_node_from_two():
    table = comm_table(load([str(TWO_NODES)]).rows)
    nodes, mb = table.columns.index("nodes"), table.columns.index("mb")
    assert [(line[nodes], line[mb]) for line in table.rows] == [("1", "8 x 4"), ("1", "8 x 4"), ("2", "8 x 4")]


def test_a_reader_that_stops_early_still_gets_the_report_written(tmp_path):
    folder = tmp_path / "report"
    done = subprocess.run(["bash", "-c", f"set -o pipefail; {sys.executable} -m dsx report {SWEEP} -o {folder} "
                                         "| head -1"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"Read 21 row(s) from {SWEEP}.\n"
    assert (folder / "report.md").exists() and (folder / "throughput.png").exists()


def test_an_output_that_is_a_file_is_refused_before_any_table_is_printed(tmp_path):
    target = tmp_path / "x.md"
    target.write_text("")
    result = report(SWEEP, "-o", target)
    assert result.exit_code == 2 and result.stdout == ""


def test_best_over_launch_rows_only_says_what_they_are():
    result = report(LAUNCH, "--best")
    assert result.exit_code == 1
    assert result.stderr == ("dsx report: --best picks among dsx run / dsx sweep rows; the 6 row(s) read are dsx "
                             "launch rows (your own script: its config is the one you launched it with)\n")


def test_best_on_cpu_rows_names_no_gpu_figures_and_reproduces_with_a_readable_memory_cap():
    result = report(SWEEP, "--best")
    assert result.exit_code == 0
    assert "  136 tokens/s, 1.1 ex/s, peak memory 0.9 GiB (host_rss_peak)\n" in result.stderr
    assert "TFLOP/s" not in result.stderr and " --memory-cap 1GiB " in result.stderr


def test_a_memory_cap_is_written_as_a_size_that_reads_back_exactly():
    for n in (1 << 30, 3 * (1 << 20), 1536 * (1 << 20), 1_000_001):
        assert parse_size(size_arg(n)) == n
    assert size_arg(1536 * (1 << 20)) == "1536MiB"
    assert readable_command(["dsx", "run", "--memory-cap", "2147483648"]) == ["dsx", "run", "--memory-cap", "2GiB"]


def test_equal_memory_lines_get_their_own_marker_and_dash():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dsx.plots import memory_vs_micro_batch

    rows = load([str(SWEEP)]).rows
    lines = [line for line in memory_vs_micro_batch(plt, rows, "t").axes[0].lines if line.get_label()[0] == "z"]
    assert len({(line.get_marker(), line.get_linestyle()) for line in lines}) == len(lines) > 1


def test_the_memory_breakdown_legend_sits_beside_the_bars():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dsx.plots import memory_breakdown

    rows = load([str(ROWS / "h100.jsonl")]).rows
    fig = memory_breakdown(plt, rows, "t")
    fig.canvas.draw()
    legend, axes = fig.axes[0].get_legend().get_window_extent(), fig.axes[0].get_window_extent()
    assert legend.x0 >= axes.x1
