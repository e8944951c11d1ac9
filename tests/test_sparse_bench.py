"""bench/sparse/h100.sh's logic on CPU ranks: a tiny plan through the real script (its GPU prelude replaced by a stub
that installs nothing), rows written as the points end, a line's extra flags given to its point only, points past the
budget skipped with a line, the summary."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from dsx.results import read_rows

ROOT = Path(__file__).resolve().parent.parent
STUB_PRELUDE = """
start_log() { log=$1; mkdir -p "$(dirname "$log")"; echo "## stub prelude" >"$log"; }
run() { local limit=$1; shift; echo "+ $*" >>"$log"; timeout "$limit" "$@" >>"$log" 2>&1; local rc=$?;
        echo "exit $rc" >>"$log"; return $rc; }
show_log() { grep -E '^\\+|^exit|^skip' "$log"; }
"""


@pytest.mark.slow
@pytest.mark.deepspeed
def test_the_script_runs_its_plan_in_order_within_the_budget(tmp_path):
    (tmp_path / "prelude.sh").write_text(STUB_PRELUDE)
    (tmp_path / "plan.txt").write_text("# tiny\ngpt2-tiny 64 dense 30 --no-comm-log\ngpt2-tiny 64 bigbird+compile 60\n"
                                       "gpt2-tiny 128 bigbird 900\n")
    out = tmp_path / "out"
    env = {**os.environ, "PRELUDE": str(tmp_path / "prelude.sh"), "PLAN": str(tmp_path / "plan.txt"),
           "BLOCK": "16", "STEPS": "2", "WARMUP": "1", "PYTHONPATH": str(ROOT)}
    env.pop("OMP_NUM_THREADS", None)
    result = subprocess.run(["bash", "bench/sparse/h100.sh", str(out), "120"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = read_rows(out / "runs.jsonl")
    assert [(r["status"], (r.get("sparse_attention") or {}).get("mode")) for r in rows] == [("ok", None),
                                                                                          ("ok", "bigbird")]
    assert rows[1]["sparse_attention"]["params"]["block"] == 16
    assert "--set attn_pdrop=0" in " ".join(rows[1]["command"])
    assert [r["toggles"]["compile"] for r in rows] == [False, True]
    assert ["--no-comm-log" in r["command"] for r in rows] == [True, False]
    assert "skip gpt2-tiny 128 bigbird: 900 s expected" in result.stdout
    summary = (out / "summary.md").read_text()
    assert "| gpt2-tiny | 64 | bigbird | yes | no | bf16 | 16 |" in summary
    assert json.loads((out / "runs.jsonl").read_text().splitlines()[0])["model"]["seq_len"] == 64
