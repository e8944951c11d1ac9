"""`dsx report` as a user runs it, on real rows (tests/fixtures/rows/README.md says where each file comes from).

Figures are recomputed here from the rows themselves (memory / samples per rank, 1 / median step time, ...) and
compared with what the report prints, so a test fails when either the arithmetic or the formatting drifts.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import ROOT

from dsx import report as rp
from dsx.cli import cli
from dsx.lint.engine import lint
from dsx.results import read_rows
from dsx.versions import resolve_target

ROWS = ROOT / "tests/fixtures/rows"
H100 = ROWS / "h100.jsonl"
H200X2 = ROWS / "h200x2.jsonl"
SWEEP = ROWS / "cpu_sweep.jsonl"
SWEEP_LABEL = "z2 bf16"
EFFECTS = ROWS / "cpu_effects.jsonl"
GIB, MIB = 1024 ** 3, 1024 ** 2
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def report(*args):
    return CliRunner().invoke(cli, ["report", *map(str, args)])


def rows_of(path) -> dict[str, dict]:
    """Rows by the first 8 characters of their run id."""
    return {r["run_id"][:8]: r for r in read_rows(path)}


def md_table(text: str, title: str) -> list[list[str] | str]:
    """The lines of the markdown table under '## title': lists of cells, or the group name for a bold header line."""
    lines = text.split(f"## {title}\n\n", 1)[1].splitlines()
    out = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        out.append(cells[0].strip("*") if cells[0].startswith("**") else cells)
    return out


def header(text: str, title: str) -> str:
    return text.split(f"## {title}\n\n", 1)[1].splitlines()[0]


def line_for(table, column: int, value: str, micro_batch: str | None = None) -> list[str]:
    """The only table line whose cell `column` is `value` (and micro-batch cell, column 12, when given)."""
    found = [r for r in table if isinstance(r, list) and r[column] == value
             and (micro_batch is None or r[12].rstrip("*") == micro_batch)]
    assert len(found) == 1, found
    return found[0]


# ------------------------------------------------------------------------------------------------ the runs table


def test_markdown_header_is_the_seeds_columns_plus_dsx_figures():
    result = report(H100, "--format", "markdown")
    assert result.exit_code == 0, result.output
    assert header(result.stdout, "Runs") == (
        "| GPU | model | precision | vocab | seq | layers | hidden | ffn | embed | ZeRO | offload | ckpt | micro-batch | "
        "memory GiB | batch/s | mem/ex MiB | ex/s | tokens/s | spread | TFLOP/s | MFU | mem× | speed× | loss | "
        "parity |")


def test_row_figures_are_computed_from_the_row():
    row = rows_of(H100)["a2e52da9"]  # bert-base, micro-batch 256, H100
    result = report(H100, "--format", "markdown")
    line = line_for(md_table(result.stdout, "Runs"), 1, "bert-base", "256")
    cells = dict(zip(rp.RUN_COLUMNS, line))
    reserved = row["memory"]["max"]["peak_reserved"]
    assert cells["GPU"] == "H100"
    assert cells["memory GiB"] == f"{reserved / GIB:.1f}" == "70.0"
    assert cells["mem/ex MiB"] == f"{reserved / 256 / MIB:,.1f}" == "280.0"
    assert cells["batch/s"] == f"{1 / row['figures']['step_time_s']['median']:.2f}" == "2.84"
    assert cells["ex/s"] == "727.6"
    assert cells["tokens/s"] == "372,520"
    step = row["figures"]["step_time_s"]
    assert cells["spread"] == f"±{(step['max'] - step['min']) / step['median']:.1%}" == "±5.1%"
    assert cells["TFLOP/s"] == "265"
    assert cells["MFU"] == "26.8%"


def test_memory_legend_says_which_figure_the_column_is():
    result = report(H100, "--format", "markdown")
    assert ("memory (GPU rows): memory.max.peak_reserved, the peak reserved by torch's caching allocator on one GPU "
            "(max over ranks).") in result.stdout


def test_rows_without_dims_show_a_dash():
    line = line_for(md_table(report(H100, "--format", "markdown").stdout, "Runs"), 1, "bert-base", "128")
    cells = dict(zip(rp.RUN_COLUMNS, line))
    assert [cells[c] for c in ("vocab", "layers", "hidden", "ffn", "embed")] == ["-"] * 5
    assert cells["seq"] == "512"


def test_world_size_shows_in_the_gpu_column_and_the_label():
    table = md_table(report(H200X2, "--format", "markdown").stdout, "Runs")
    assert table[0] == "z2 bf16 2gpu" and table[1][:2] == ["2 x H200", "gpt2"]
    assert table[2] == "z3 bf16 ckpt 2gpu" and table[3][:2] == ["2 x H200", "gpt2"]


def test_baseline_by_run_id_reads_one_and_others_are_relative_to_it():
    rows = rows_of(H100)
    base, other = rows["acd120ac"], rows["a2e52da9"]  # bert-base micro-batch 128 and 256
    result = report(H100, "--format", "markdown", "--baseline", "acd120ac")
    table = md_table(result.stdout, "Runs")
    base_line = dict(zip(rp.RUN_COLUMNS, line_for(table, 1, "bert-base", "128")))
    other_line = dict(zip(rp.RUN_COLUMNS, line_for(table, 1, "bert-base", "256")))
    assert (base_line["mem×"], base_line["speed×"]) == ("1.00", "1.00")
    mem_ratio = (other["memory"]["max"]["peak_reserved"] / 256) / (base["memory"]["max"]["peak_reserved"] / 128)
    speed_ratio = other["figures"]["samples_per_s"] / base["figures"]["samples_per_s"]
    assert other_line["mem×"] == f"{mem_ratio:.2f}" == "0.99"
    assert other_line["speed×"] == f"{speed_ratio:.2f}" == "1.14"
    assert "mem× and speed×: mem/ex and ex/s relative to run acd120ac (bert-base, z1 bf16, micro-batch 128, H100)." \
        in result.stdout


def test_baseline_by_selector():
    result = report(H100, "--format", "markdown", "--baseline", "model=albert-base,micro_batch=192")
    line = dict(zip(rp.RUN_COLUMNS, line_for(md_table(result.stdout, "Runs"), 1, "albert-base", "192")))
    assert (line["mem×"], line["speed×"]) == ("1.00", "1.00")


def test_default_baseline_is_the_first_ok_row_shown():
    result = report(H100, "--format", "markdown")
    assert "relative to run 0ffb19ea (gpt2, z1 bf16 compile, micro-batch 32, H100)." in result.stdout


def test_rows_are_grouped_by_configuration_label_by_default():
    table = md_table(report(H100, "--format", "markdown").stdout, "Runs")
    assert [r for r in table if isinstance(r, str)] == ["z1 bf16 compile", "z3 off=cpu params=cpu bf16 ckpt",
                                                        "z1 bf16"]


def test_group_by_model():
    table = md_table(report(H100, "--format", "markdown", "--group-by", "model").stdout, "Runs")
    groups = [r for r in table if isinstance(r, str)]
    assert groups == ["model=gpt2", "model=gpt2-xl", "model=albert-base", "model=bert-base"]
    bert = table[table.index("model=bert-base") + 1:]
    assert [r[12] for r in bert] == ["128", "192", "256*"]


def test_only_ok_rows_unless_all():
    table = md_table(report(H100, "--format", "markdown").stdout, "Runs")
    assert not any(isinstance(r, list) and r[12] == "320" for r in table)
    result = report(H100, "--format", "markdown", "--all")
    line = line_for(md_table(result.stdout, "Runs"), 1, "bert-base", "320")
    assert line[-2:] == ["oom", "rank 0: OutOfMemoryError: … tried to allocate 9.32 GiB"]
    assert line[16] == "-"  # ex/s: no timed step


def test_largest_fitting_micro_batch_is_marked():
    result = report(H100, "--format", "markdown")
    assert line_for(md_table(result.stdout, "Runs"), 1, "bert-base", "256")[12] == "256*"
    assert line_for(md_table(result.stdout, "Runs"), 1, "bert-base", "192")[12] == "192"
    assert "*: the largest micro-batch that fit in its configuration" in result.stdout


def test_the_marks_footnote_points_to_the_oom_only_when_a_run_ran_out_of_memory(tmp_path):
    with_oom = report(H100, "--format", "markdown").stdout
    assert ("*: the largest micro-batch that fit in its configuration (the per-configuration table says where it ran "
            "out of memory).") in with_oom
    no_oom = tmp_path / "no_oom.jsonl"
    no_oom.write_text("".join(line + "\n" for line in SWEEP.read_text().splitlines()  # a search, OOM rows dropped
                              if json.loads(line)["status"] != "oom"))
    text = report(no_oom, "--format", "markdown").stdout
    assert ("*: the largest micro-batch that fit in its configuration (none of these runs ran out of memory: the "
            "search stopped for another reason).") in text


def test_where_restricts_rows():
    table = md_table(report(H100, "--format", "markdown", "--where", "model=bert-base").stdout, "Runs")
    assert {r[1] for r in table if isinstance(r, list)} == {"bert-base"}


def test_plain_rows_derive_their_configuration_from_the_ds_config():
    row = rp.load([str(H100)]).rows[1]  # gpt2-xl ZeRO-3, optimizer + parameters on CPU, act. ckpt; a `dsx run` row
    assert row["run_id"].startswith("d6015c52") and row["sweep"] is None
    assert rp.label(row) == "z3 off=cpu params=cpu bf16 ckpt"
    assert rp.configuration(row) == {"zero": 3, "offload": "cpu", "offload_params": "cpu", "precision": "bf16",
                                     "act_ckpt": True, "gpus": 1, "compile": False, "vary": {}}


@pytest.mark.parametrize("name, short", [
    ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H200", "H200"), ("NVIDIA A100-SXM4-40GB", "A100"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("Tesla T4", "T4"), (None, "GPU"),
])
def test_short_gpu_names(name, short):
    assert rp.short_gpu(name) == short


def test_terminal_table_fits_120_columns_and_says_what_it_left_out():
    result = report(H100)
    tables = [line for line in result.stdout.splitlines() if line.startswith("  ")]  # rich's cells, not the notes
    assert tables and max(len(line) for line in tables) <= 120
    assert ("Not shown for want of width: seq, batch/s, TFLOP/s, ckpt, mem/ex MiB (--format markdown has every "
            "column).") in result.stdout


def test_terminal_table_has_the_rows_and_no_markup_leak():
    result = report(H100)
    assert result.exit_code == 0, result.output
    assert f"Read 9 row(s) from {H100}.\n" in result.stdout  # one file, nothing skipped: the count once
    assert "372,520" in result.stdout and "[bold]" not in result.stdout


# ------------------------------------------------------------------------------------------------ per configuration


def test_oom_boundary_per_configuration():
    table = md_table(report(H100, "--format", "markdown").stdout, "Per configuration")
    bert = line_for(table, 1, "bert-base")
    assert bert[:5] == ["z1 bf16", "bert-base", "H100", "256", "320"]
    assert bert[5:9] == ["372,520", "70.0", "26.8%", "4 (3 ok, 1 oom)"]
    albert = line_for(table, 1, "albert-base")
    assert albert[3:5] == ["192", "256"]


def test_oom_boundary_of_a_sweep():
    rows = [r for r in read_rows(SWEEP) if r["sweep"]["label"] == SWEEP_LABEL]
    fits = max(r["micro_batch"] for r in rows if r["status"] == "ok")
    oom = min(r["micro_batch"] for r in rows if r["status"] == "oom")
    table = md_table(report(SWEEP, "--format", "markdown").stdout, "Per configuration")
    line = line_for(table, 0, SWEEP_LABEL)
    assert line[3:5] == [str(fits), str(oom)]


# ------------------------------------------------------------------------------------------------ sweeps


def test_sweep_summary_sums_device_seconds():
    rows = read_rows(SWEEP)
    total = sum(r["overhead"]["device_seconds"] for r in rows)
    result = report(SWEEP, "--format", "markdown")
    (line,) = md_table(result.stdout, "Sweeps")
    assert header(result.stdout, "Sweeps") == ("| sweep | trials | ok | oom | error | timeout | device-seconds | "
                                              "configurations | best configuration |")
    statuses = [sum(r["status"] == s for r in rows) for s in rp.STATUSES]
    assert line[:7] == [rows[0]["sweep"]["sweep_id"][:12], str(len(rows)), *map(str, statuses),
                        f"{total:,.1f} CPU-s"][:7]
    assert line[6] == f"{total:,.1f} CPU-s"
    assert line[7] == str(len({r["sweep"]["label"] for r in rows}))


def test_no_sweep_summary_for_plain_rows():
    assert "## Sweeps" not in report(H100, "--format", "markdown").stdout


# ------------------------------------------------------------------------------------------------ --best


def test_best_writes_the_fastest_config_linted_and_prints_how_to_reproduce(tmp_path):
    out = tmp_path / "best.json"
    result = report(H100, "--best", "-o", out)
    assert result.exit_code == 0, result.output
    best = rows_of(H100)["a2e52da9"]  # bert-base micro-batch 256: 372,520 tokens/s, the most of the file
    written = json.loads(out.read_text())
    assert written == best["ds_config"]
    assert out.read_text() == json.dumps(best["ds_config"], indent=2) + "\n"
    assert [f for f in lint(written, target=resolve_target(), world_size=1) if f.severity == "error"] == []
    assert result.stdout.splitlines()[0] == "best: run a2e52da9 (bert-base, z1 bf16, micro-batch 256, H100)"
    assert "  372,520 tokens/s, 727.6 ex/s, 265 TFLOP/s per GPU, MFU 26.8%, peak memory 70.0 GiB (peak_reserved)" \
        in result.stdout
    assert f"  reproduce: {shlex.join(best['command'])}" in result.stdout


ONEBIT_H100 = ROOT / "bench/onebit/h100/runs.jsonl"
"""Real rows of issue 15: AdamW on DeepSpeed 0.19.8 and the 1-bit optimizers through a 0.18.9 --python lane."""


def test_best_lints_a_row_against_the_deepspeed_it_ran_on(tmp_path):
    out = tmp_path / "best.json"
    result = report(ONEBIT_H100, "--best", "-o", out)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == "best: run bf57151e (gpt2, z0 fp16 OneBitAdam, micro-batch 8, H100)"
    assert json.loads(out.read_text())["optimizer"]["type"] == "OneBitAdam"
    assert f"  config: {out} (lint clean for DeepSpeed 0.18.9 at world size 1)" in result.stdout


def test_the_communication_table_names_each_1_bit_optimizer_and_judges_its_warm_up_steps_by_the_prediction():
    result = report(ONEBIT_H100, "--all", "--format", "markdown")
    lines = [line for line in result.stdout.splitlines() if "| 0.18.9 |" in line]
    assert [line.split(" | ")[2] for line in lines] == ["z0 fp16 OneBitAdam", "z0 fp16 ZeroOneAdam",
                                                        "z0 fp16 OneBitLamb"]
    # the mean over both phases is 207.7 MiB; the warm-up steps send the predicted 474.8 MiB
    assert all(line.split(" | ")[9:11] == ["474.8 MiB", "1.000"] for line in lines)
    assert lines[0].split(" | ")[-1] == "2 B, 55 ms (9 steps; predicted 29.7 MiB) |"


def test_best_with_a_target_lints_against_that_version(tmp_path):
    result = report(ONEBIT_H100, "--best", "--target-deepspeed", "0.19.8", "-o", tmp_path / "best.json")
    assert result.exit_code == 1
    assert ("the best row bf57151e has a DeepSpeed config with 1 lint error(s) for DeepSpeed 0.19.8 at data-parallel "
            "size 1, not writing it: error: optimizer.type: 'OneBitAdam' was removed in DeepSpeed 0.19") in result.output
    assert not (tmp_path / "best.json").exists()


def test_best_names_the_rows_within_the_noise_of_the_winner(tmp_path):
    # a2e52da9: 372,520 tokens/s, steps spread 5.1%; 25ddf07a 1.2% slower (spread 0.5%): a tie; 2695a46b 6.4%
    # slower (spread 3.1%): not one
    result = report(H100, "--best", "-o", tmp_path / "best.json")
    lines = result.stdout.splitlines()
    at = lines.index("  within the noise: 4 other row(s) are slower by less than the larger step-time spread of the "
                     "two runs, so which is fastest is a guess (rerun them with more --steps):")
    assert lines[at + 1:at + 5] == [
        "    run 25ddf07a (albert-base, z1 bf16, micro-batch 192, H100): 368,157 tokens/s, 1.2% slower, spread ±5.1%",
        "    run a28542d7 (bert-base, z1 bf16, micro-batch 192, H100): 360,018 tokens/s, 3.4% slower, spread ±6.1%",
        "    run acd120ac (bert-base, z1 bf16, micro-batch 128, H100): 326,612 tokens/s, 12.3% slower, spread ±24%",
        "    and 1 more",
    ]
    assert "2695a46b" not in result.stdout


def test_best_alone_says_nothing_of_noise(tmp_path):
    result = report(H100, "--best", "--where", "zero=3", "-o", tmp_path / "best.json")
    assert result.exit_code == 0, result.output
    assert "within the noise" not in result.stdout


def test_best_where_restricts_the_choice(tmp_path):
    out = tmp_path / "best.json"
    result = report(H100, "--best", "--where", "zero=3", "-o", out)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text()) == rows_of(H100)["d6015c52"]["ds_config"]


def test_best_refuses_a_config_with_lint_errors(tmp_path):
    row = json.loads(H100.read_text().splitlines()[5])  # a2e52da9, the fastest
    row["ds_config"]["zero_optimization"]["offload_param"] = {"device": "cpu"}  # ZeRO-1: an error for dsx lint
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(row) + "\n")
    result = report(bad, "--best", "-o", tmp_path / "best.json")
    assert result.exit_code == 1
    assert result.stderr.startswith(
        "dsx report: the best row a2e52da9 has a DeepSpeed config with 1 lint error(s) for DeepSpeed ")
    assert "error: zero_optimization.offload_param: offload_param only applies to ZeRO stage 3" in result.stderr
    assert not (tmp_path / "best.json").exists()


def test_best_without_an_ok_row(tmp_path):
    ooms = tmp_path / "oom.jsonl"
    ooms.write_text("".join(line + "\n" for line in H100.read_text().splitlines() if '"status":"oom"' in line))
    result = report(ooms, "--best")
    assert result.exit_code == 1
    assert result.stderr == "dsx report: no ok row with a throughput among 2 row(s): nothing to pick\n"


# ------------------------------------------------------------------------------------------------ --effects


def test_effects_are_relative_to_the_unchanged_model():
    rows = [r for r in read_rows(EFFECTS) if r["status"] == "ok"]
    base = next(r for r in rows if not r["model"]["overrides"] and r["model"]["seq_len"] == 64)
    fewer_layers = next(r for r in rows if r["model"]["overrides"] == {"n_layer": 1})
    result = report(EFFECTS, "--effects", "--format", "markdown")
    assert result.exit_code == 0, result.output
    table = md_table(result.stdout, "Parameter effects")
    assert header(result.stdout, "Parameter effects") == (
        "| model | configuration | micro-batch | change | params | memory GiB | mem× | ex/s | speed× | tokens/s |")
    assert [r[3] for r in table] == ["base", "n_layer 2→1", "n_embd 64→32", "seq_len 64→32"]
    assert table[0][6:9:2] == ["1.00", "1.00"]
    line = table[1]
    mem = fewer_layers["memory"]["max"]["host_rss_peak"] / base["memory"]["max"]["host_rss_peak"]
    speed = fewer_layers["figures"]["samples_per_s"] / base["figures"]["samples_per_s"]
    assert line[6] == f"{mem:.2f}"
    assert line[8] == f"{speed:.2f}"
    assert line[4] == rp.fmt_params(fewer_layers["model"]["params"])


def test_effects_with_nothing_to_compare():
    result = report(H100, "--effects")
    assert result.exit_code == 1
    assert result.stderr == ("dsx report: no parameter effects: needs an ok row without --set overrides and ok rows "
                             "that differ from it in exactly one of --set KEY / --seq-len / --vocab-pad, at the same "
                             "configuration and micro-batch\n")


# ------------------------------------------------------------------------------------------------ plots and report.md


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folder = tmp_path_factory.mktemp("report")
    result = report(SWEEP, H100, "-o", folder)
    assert result.exit_code == 0, result.output
    return folder, result


def test_plots_are_valid_pngs(written):
    folder, _ = written
    for name in ("memory_vs_micro_batch.png", "throughput.png", "memory_breakdown.png"):
        data = (folder / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 10_000, name


def test_report_md_links_the_plots_and_says_what_it_read(written):
    folder, result = written
    text = (folder / "report.md").read_text()
    n_sweep, n_h100 = len(read_rows(SWEEP)), len(read_rows(H100))
    assert text.startswith(f"# dsx report\n\nRead {n_sweep + n_h100} row(s) from {SWEEP} ({n_sweep} row(s)), "
                           f"{H100} ({n_h100} row(s)).\n")
    assert "![Peak memory vs micro-batch](memory_vs_micro_batch.png)" in text
    assert "![Throughput per configuration (best micro-batch)](throughput.png)" in text
    assert "![Memory breakdown per configuration (best micro-batch)](memory_breakdown.png)" in text
    assert "## Runs" in text and "## Per configuration" in text and "## Sweeps" in text
    assert result.stderr == f"dsx report: wrote {folder / 'report.md'} and 3 plot(s)\n"


def test_plots_that_would_show_nothing_are_left_out_and_report_md_says_why(tmp_path):
    # cpu_effects: one micro-batch per configuration, host RSS only, 0.4 GiB under a 23.5 GiB capacity
    result = report(EFFECTS, "-o", tmp_path)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["throughput.png"]
    assert result.stderr == f"dsx report: wrote {tmp_path / 'report.md'} and 1 plot(s) (2 left out: report.md says why)\n"
    assert ("Plots left out, as they would show nothing on these rows:\n\n"
            "- Peak memory vs micro-batch: no configuration's memory changes by 5% or more across micro-batches, and "
            "none ran out of memory.\n"
            "- Memory breakdown per configuration (best micro-batch): the rows measured host_rss_peak only: nothing to "
            "break down.\n") in (tmp_path / "report.md").read_text()


def _legend(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts()]


def test_a_capacity_far_above_the_measured_memory_is_named_not_drawn():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dsx.plots import memory_vs_micro_batch

    rows = rp.load([SWEEP]).rows  # host RSS 0.6-0.96 GiB under a 1 GiB --memory-cap: the line is drawn
    fig = memory_vs_micro_batch(plt, rows, "t")
    cap = "capacity {} GiB (--memory-cap (RLIMIT_DATA of each CPU rank, set after the imports))"
    assert cap.format("1.0") in _legend(fig)
    assert [line.get_linestyle() for line in fig.axes[0].lines].count("--") == 1
    for r in rows:
        r["memory"]["capacity"] = int(23.5 * GIB)
    fig = memory_vs_micro_batch(plt, rows, "t")
    assert cap.format("23.5") + ": off the scale" in _legend(fig)
    assert [line.get_linestyle() for line in fig.axes[0].lines].count("--") == 0
    assert fig.axes[0].get_ylim()[1] < 1.5


def test_output_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "x.md"
    target.write_text("")
    result = report(H100, "-o", target)
    assert result.exit_code == 2
    assert result.stderr == (f"dsx report: -o {target}: is a file; give a directory for the report (a file only "
                             f"with --best)\n")


PROBE = """
import sys
from dsx.cli import cli
try:
    cli.main(args={args!r}, prog_name="dsx", standalone_mode=True)
except SystemExit:
    pass
print("HEAVY:" + ",".join(sorted(m for m in ("torch", "deepspeed", "transformers", "matplotlib") if m in sys.modules)))
"""


@pytest.mark.parametrize("args", [["report", "--help"], ["report", str(H100), "--format", "markdown"],
                                  ["report", str(H100)]])
def test_tables_import_neither_torch_deepspeed_nor_matplotlib(args):
    out = subprocess.run([sys.executable, "-c", PROBE.format(args=args)], check=False, cwd=ROOT,
                          capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1] == "HEAVY:", out.stderr


# ------------------------------------------------------------------------------------------------ bad input


def test_missing_file_exits_2():
    result = report("no/such/runs.jsonl")
    assert result.exit_code == 2
    assert result.stderr == "dsx report: no/such/runs.jsonl: no such file\n"


def test_directory_exits_2(tmp_path):
    result = report(tmp_path)
    assert result.exit_code == 2
    assert result.stderr == f"dsx report: {tmp_path}: is a directory, not a results file\n"


def test_empty_file_exits_1(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    result = report(empty)
    assert result.exit_code == 1
    assert result.stderr == f"dsx report: no rows to report in {empty}\n"


def test_torn_and_garbage_lines_are_counted_and_the_rest_is_used(tmp_path):
    lines = H100.read_text().splitlines()
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text(lines[0] + "\nnot json at all\n" + lines[1] + "\n" + lines[2][:200])
    result = report(damaged, "--format", "markdown")
    assert result.exit_code == 0, result.output
    assert result.stderr == (f"dsx report: warning: {damaged}: skipped 2 line(s) that are not JSON rows (line 2: "
                             "not JSON: Expecting value: line 1 column 1 (char 0); line 4: torn last line (no "
                             "newline))\n")
    assert result.stdout.startswith(f"Read 2 row(s) from {damaged} (2 row(s), 2 skipped).")


def test_rows_of_another_schema_version_are_skipped_with_a_warning(tmp_path):
    lines = H100.read_text().splitlines()
    future = json.loads(lines[1])
    future["schema_version"] = 2
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(lines[0] + "\n" + json.dumps(future) + "\n")
    result = report(mixed, "--format", "markdown")
    assert result.exit_code == 0
    assert result.stderr == f"dsx report: warning: {mixed}: skipped 1 row(s) of schema_version 2 (this dsx reads 1)\n"
    assert result.stdout.startswith(f"Read 1 row(s) from {mixed} (1 row(s), 1 skipped).")


def test_a_file_of_other_json_lines_has_nothing_to_report():
    baseline = ROOT / "bench/mfu/h100/baseline.jsonl"  # plain PyTorch figures, not dsx rows
    result = report(baseline)
    assert result.exit_code == 1
    assert result.stderr == (f"dsx report: warning: {baseline}: skipped 1 row(s) without a schema_version (not a dsx "
                             f"run row)\ndsx report: no rows to report in {baseline}\n")


def test_unknown_group_by_key_exits_2():
    result = report(H100, "--group-by", "label,colour")
    assert result.exit_code == 2
    assert result.stderr == ("dsx report: unknown --group-by key 'colour' (known: label, zero, offload, precision, "
                             "act_ckpt, model, gpu, micro_batch, world_size, sweep, pipeline_stages)\n")


def test_bad_selector_exits_2():
    result = report(H100, "--where", "zero")
    assert result.exit_code == 2
    assert result.stderr == "dsx report: bad --where 'zero': expected KEY=VALUE[,KEY=VALUE...]\n"


def test_unknown_selector_key_exits_2():
    result = report(H100, "--baseline", "stage=3")
    assert result.exit_code == 2
    assert result.stderr.startswith("dsx report: unknown key 'stage' in --baseline 'stage=3' (known: label, zero, ")


def test_where_matching_nothing_exits_1():
    result = report(H100, "--where", "zero=2")
    assert result.exit_code == 1
    assert result.stderr == "dsx report: no row matches --where zero=2 (9 row(s) read)\n"


def test_baseline_matching_nothing_exits_1():
    result = report(H100, "--baseline", "ffffffff")
    assert result.exit_code == 1
    assert result.stderr.startswith("dsx report: --baseline 'ffffffff' matches no ok row shown")


def test_only_failed_rows_need_all(tmp_path):
    ooms = tmp_path / "oom.jsonl"
    ooms.write_text("".join(line + "\n" for line in H100.read_text().splitlines() if '"status":"oom"' in line))
    result = report(ooms)
    assert result.exit_code == 1
    assert result.stderr == "dsx report: no ok row among 2 row(s) (2 oom); --all lists them\n"
    assert report(ooms, "--all").exit_code == 0


# ---------------------------------------------------------------------------------------------- dsx launch rows

LAUNCHES = ROWS / "cpu_launch.jsonl"


def test_launch_rows_get_a_table_of_their_own_beside_the_runs():
    result = report(SWEEP, LAUNCHES, "--format", "markdown")
    assert result.exit_code == 0, result.output
    runs, launches = md_table(result.output, "Runs"), md_table(result.output, "Launches")
    assert not any("train_hf.py" in str(line) for line in runs)  # runs only in the runs table
    assert header(result.output, "Launches") == (
        "| GPU | launch | micro-batch | exit | wall s | GPU GiB | host RSS GiB | samples/s | steps/s | tokens/s | loss | "
        "config |")
    assert len(launches) == 5  # the ok ones; the failed launch needs --all
    trainer = read_rows(LAUNCHES)[0]
    t = trainer["launch"]["trainer"]
    line = launches[0]
    assert line[:4] == ["CPU", "z2 off=cpu fp32 · train_hf.py", "2", "0"]
    assert line[7:10] == [f"{t['samples_per_s']:,.2f}", f"{t['steps_per_s']:,.3f}", f"{t['tokens_per_s']:,.0f}"]
    assert line[11] == f"hf_trainer_zero2_auto.json {trainer['ds_config_hash'][:8]}"
    assert launches[4][1] == "z1 · user_train.py" and launches[4][7:11] == ["-", "-", "-", "-"]


def test_all_lists_the_failed_launch_with_its_error():
    result = report(LAUNCHES, "--all", "--format", "markdown")
    assert result.exit_code == 0, result.output
    failed = md_table(result.output, "Launches")[-1]
    assert failed[-2] == "error" and failed[-1].startswith("the job exited with 3: ")
    assert "## Runs" not in result.output


def test_where_selects_launch_rows_by_their_script_and_config():
    result = report(SWEEP, LAUNCHES, "--where", "model=train_hf.py,world_size=2", "--format", "markdown")
    assert result.exit_code == 0, result.output
    assert "## Runs" not in result.output and len(md_table(result.output, "Launches")) == 2


def test_best_and_effects_read_run_rows_only(tmp_path):
    result = report(LAUNCHES, "--best")
    assert result.exit_code == 1
    assert result.output.strip().startswith("dsx report: --best picks among dsx run / dsx sweep rows; the ")
    best = report(SWEEP, LAUNCHES, "--best", "-o", tmp_path / "best.json")
    assert best.exit_code == 0 and "train_hf" not in best.output
