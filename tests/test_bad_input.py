"""Issue 34, items 1-5: what a user can hand dsx by mistake gets one clear line and exit 2, in bounded time and memory;
never a hang, a traceback, an "internal error", a folder made under / or a row recorded for nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
from click.testing import CliRunner

from conftest import ROOT
from dsx.cli import cli
from dsx.hostfile import HostfileError, parse_hostfile
from dsx.results import append_row, read_rows
from dsx.safe_io import UnreadableFile
from dsx.units import parse_size

FIXTURE_ROWS = ROOT / "tests" / "fixtures" / "rows" / "h100.jsonl"
OK_CONFIG = ROOT / "ds_configs" / "zero2.json"


def dsx(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


# --- every file-reading command against a FIFO, /dev/zero, a 100k-deep JSON and an oversize file -----------------

DRIVER = """
import json, resource, sys
from click.testing import CliRunner
from dsx.cli import cli
out = []
for args in json.loads(sys.argv[1]):
    result = CliRunner().invoke(cli, args)
    out.append([result.exit_code, result.stderr[:2000], repr(result.exception)])
print(json.dumps({"results": out, "max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

ALL_KINDS = ("fifo", "dev_zero", "deep", "oversize")
COMMANDS = {  # {f}: the bad file; each command with the kinds of file it reads whole (run/launch only append rows)
    "validate": (["validate", "{f}"], ALL_KINDS),
    "report": (["report", "{f}"], ALL_KINDS),
    "report --best": (["report", "--best", "{f}"], ALL_KINDS),
    "run --hostfile": (["run", "--model", "gpt2-tiny", "--hostfile", "{f}", "--dry-run"], ALL_KINDS),
    "run --config": (["run", "--model", "gpt2-tiny", "--config", "{f}", "--dry-run"], ALL_KINDS),
    "run --results": (["run", "--model", "gpt2-tiny", "--results", "{f}", "--dry-run"], ("fifo", "dev_zero")),
    "run --data": (["run", "--model", "gpt2-tiny", "--data", "{f}", "--dry-run"], ("fifo", "dev_zero")),
    "launch --config": (["launch", "--config", "{f}", "--dry-run", "--", "python", __file__], ALL_KINDS),
    "sweep --results": (["sweep", "--model", "gpt2-tiny", "--results", "{f}", "--dry-run"], ALL_KINDS),
}


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad")
    os.mkfifo(folder / "fifo.json")
    (folder / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with open(folder / "oversize.json", "wb") as f:  # sparse: above every limit (results: 256 MiB), no disk used
        f.truncate(256 * 1024 * 1024 + 1)
    return {"fifo": folder / "fifo.json", "dev_zero": "/dev/zero", "deep": folder / "deep.json",
            "oversize": folder / "oversize.json"}


@pytest.mark.parametrize("name", COMMANDS)
def test_every_file_reading_command_refuses_unbounded_input_with_exit_2_in_seconds(name, bad_files, tmp_path):
    template, kinds = COMMANDS[name]
    argvs = [[part.format(f=bad_files[kind]) for part in template] for kind in kinds]
    out = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(argvs)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    for kind, (code, stderr, exception) in zip(kinds, report["results"]):
        assert code == 2, (kind, stderr, exception)
        assert "internal error" not in stderr and "Traceback" not in stderr and "Usage:" not in stderr, (kind, stderr)
        assert str(bad_files[kind]) in stderr.splitlines()[0], (kind, stderr)
    assert report["max_rss_kib"] < 2 * 1024 * 1024  # bounded memory: /dev/zero once grew to 5 GB


def test_results_reader_refuses_a_fifo_without_opening_it(tmp_path):
    os.mkfifo(tmp_path / "fifo.jsonl")
    with pytest.raises(UnreadableFile, match=r"fifo.jsonl: is a FIFO, not a results file$"):
        read_rows(tmp_path / "fifo.jsonl")


def test_appending_a_row_to_a_fifo_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "fifo.jsonl")
    errors = []
    worker = threading.Thread(target=lambda: errors.append(_raises(append_row, tmp_path / "fifo.jsonl", {"a": 1})))
    worker.start()
    worker.join(10)
    assert not worker.is_alive() and errors[0] is not None  # (a writer would block until a reader came)


def _raises(function, *args):
    try:
        function(*args)
    except Exception as exc:  # noqa: BLE001 - the test looks at what was raised
        return exc
    return None


# --- item 2: user errors that were "internal error", exit 3 ---------------------------------------------------------

def test_a_hostfile_with_an_absurd_slot_count_is_refused_with_the_bound():
    with pytest.raises(HostfileError) as raised:
        parse_hostfile("node1 slots=99999999999999999999\n", "hosts")
    assert str(raised.value) == ("hosts:1: slots=99999999999999999999 is more than 1,024, the most one node runs "
                                 "(slots are the node's GPUs)")


def test_a_hostfile_of_1024_slots_is_read():
    assert parse_hostfile("node1 slots=1024\n") == {"node1": 1024}


@pytest.mark.parametrize("command", ["config", "schema"])
def test_output_into_a_missing_folder_is_one_line_and_exit_2(command, tmp_path):
    target = tmp_path / "no" / "c.json"
    result = dsx(command, "-o", target)
    assert result.exit_code == 2
    assert result.stderr == f"Error: -o {target}: no such directory: {tmp_path / 'no'}\n"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_output_to_a_full_disk_is_one_line_and_exit_2():
    result = dsx("config", "-o", "/dev/full")
    assert (result.exit_code, result.stderr) == (2, "Error: -o /dev/full: cannot write: no space left on the device\n")


@pytest.mark.parametrize("flag", [[], ["--best"]])
def test_report_makes_no_folders_above_the_one_it_was_given(flag, tmp_path):
    target = tmp_path / "missing" / "report"
    result = dsx("report", FIXTURE_ROWS, *flag, "-o", target)
    assert result.exit_code == 2
    assert result.stderr == f"dsx report: -o {target}: no such directory: {tmp_path / 'missing'}\n"
    assert not (tmp_path / "missing").exists()


# --- item 3: non-finite numbers --------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["inf", "1e400", "nan"])
def test_config_refuses_a_non_finite_learning_rate(value):
    result = dsx("config", "--lr", value)
    assert (result.exit_code, result.stderr) == (2, f"Error: Invalid value for '--lr': '{value}' is not a finite "
                                                    "number\n")


def test_validate_flags_infinity_and_nan_as_errors(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text('{"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": NaN}}, '
                    '"gradient_clipping": Infinity}')
    result = dsx("validate", "--json", path)
    findings = json.loads(result.stdout)["files"][0]["findings"]
    flagged = {(f["path"], f["severity"]) for f in findings if f["code"] == "non-finite-number"}
    assert flagged == {("optimizer.params.lr", "error"), ("gradient_clipping", "error")}
    assert result.exit_code == 1


def test_memory_cap_refuses_infinity():
    with pytest.raises(ValueError, match="^'inf' is not a finite size$"):
        parse_size("inf")


# --- item 4: an empty config -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, why", [("", ""), ("  \n\t\n", " (only whitespace)"),
                                       ("// a comment\n# another\n/* and a block */\n", " (only comments)")])
def test_validate_says_empty_file_for_a_config_with_nothing_in_it(text, why, tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(text)
    result = dsx("validate", path)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == f"{path}: empty file{why}"
    assert result.stdout == ""  # no findings: it is not linted as {}


# --- item 5: refusals are one line; stdin; a missing script; a model too deep to build ------------------------------

@pytest.mark.parametrize("args, first_words", [
    (["run", "--model", "nope"], "Error: unknown model 'nope'"),
    (["estimate", "--model", "gpt2", "--zero", "9"], "Error: Invalid value for '--zero': 9"),
    (["config", "--zero", "7"], "Error: Invalid value for '--zero': 7"),
    (["sweep", "--model", "nope", "--dry-run"], "Error: unknown model 'nope'"),
    (["launch"], "Error: Missing argument 'COMMAND'."),
])
def test_a_refusal_is_one_line_without_the_usage_banner(args, first_words):
    result = dsx(*args)
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(first_words), result.stderr


def test_help_still_starts_with_usage():
    assert CliRunner().invoke(cli, ["run", "--help"], prog_name="dsx").output.startswith("Usage: dsx run [OPTIONS]")


def test_validate_dash_reads_the_config_from_stdin():
    result = dsx("validate", "--json", "-", input=OK_CONFIG.read_text())
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["files"][0]["file"] == "<stdin>"


def test_launch_refuses_a_missing_script_before_starting_or_recording(tmp_path):
    results = tmp_path / "runs.jsonl"
    result = dsx("launch", "--config", OK_CONFIG, "--results", results, "--", "python", tmp_path / "train.py")
    assert (result.exit_code, result.stderr) == (2, f"Error: {tmp_path / 'train.py'}: no such file (the script after "
                                                    "--)\n")
    assert not results.exists()


def test_estimate_refuses_a_model_too_deep_to_build_at_once():
    result = dsx("estimate", "--model", "gpt2", "--set", "n_layer=100000")
    assert result.exit_code == 2
    assert result.stderr == ("Error: gpt2: n_layer=100000 is more than 256 layers, twice the deepest published model "
                             "(126): dsx builds the model layer by layer on the meta device to count it, which would "
                             "take minutes and GBs\n")
