"""The contract between dsx and its ranks (dsx.rank.protocol): what the plan and a rank's report may hold."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from pydantic import ValidationError

from dsx.rank.protocol import (
    PHASES, TIMELINE, Injection, RankPlan, RankReport, parse_injection, rank_report_path, read_rank_report,
    write_rank_report,
)

PLAN = {"run_id": "abc", "model": "gpt2-tiny", "micro_batch": 2, "grad_accum": 1, "steps": 3, "warmup": 1,
        "ds_config_path": "/r/ds_config.json", "output_dir": "/r", "device": "cpu"}


def test_a_plan_with_a_key_the_rank_does_not_know_is_refused():
    with pytest.raises(ValidationError, match="micro_bach"):
        RankPlan(**PLAN, micro_bach=4)


def test_a_plan_round_trips_through_its_file(tmp_path):
    plan = RankPlan(**PLAN, toggles={"act_ckpt": True}, inject_failure="oom:2@1")
    plan.write(tmp_path / "plan.json")
    assert RankPlan.read(tmp_path / "plan.json") == plan
    assert json.loads((tmp_path / "plan.json").read_text())["toggles"] == {
        "tf32": False, "compile": False, "attn": "sdpa", "act_ckpt": True, "loss": "plain", "loss_tile_tokens": None,
        "act_ckpt_offload": False, "tiled_mlp": False, "kernels": None, "liger_fused_loss": False, "fp8": None}


def test_an_injection_names_kind_step_and_rank():
    assert parse_injection("oom:2@1") == Injection(kind="oom", step=2, rank=1)
    assert parse_injection("error") == Injection(kind="error", step=None, rank=None)
    assert parse_injection(None) is None


@pytest.mark.parametrize("text", ["segfault", "oom:x", "error@one"])
def test_an_injection_dsx_cannot_do_is_refused_with_its_text(text):
    with pytest.raises(ValueError, match=f"^unknown injected failure {text!r}$"):
        parse_injection(text)


def test_the_timeline_is_the_phases_between_process_start_and_the_last_write():
    assert PHASES[0] == "started" and PHASES[-1] == "done"
    assert TIMELINE == ("process_start", "imported", "distributed", "model_built", "initialized", "warmup_done",
                        "timed_done", "end")


def test_a_report_round_trips_with_a_non_finite_loss(tmp_path):
    report = RankReport(rank=1, world_size=2, status="ok", phase="done", loss=[2.5, math.nan],
                        times={"process_start": 1.0, "imported": 3.5}, memory={"host_rss_peak": 123})
    write_rank_report(report, tmp_path)
    back = read_rank_report(tmp_path, 1)
    assert back.loss[0] == 2.5 and math.isnan(back.loss[1])
    assert back.memory == {"host_rss_peak": 123} and back.span("process_start", "imported") == 2.5
    assert back.span("imported", "distributed") is None
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_missing_or_torn_report_reads_as_none(tmp_path):
    assert read_rank_report(tmp_path, 0) is None
    rank_report_path(tmp_path, 0).write_text('{"rank": 0, "status": "ok", "los')
    assert read_rank_report(tmp_path, 0) is None


def test_the_rank_script_takes_its_own_folder_off_sys_path():
    """Run as a script, dsx/rank/ is first on sys.path, where its loop.py/model.py could shadow top-level modules
    that torch or transformers import; the script removes it before importing anything else."""
    from dsx.launcher import RANK_SCRIPT

    folder = str(RANK_SCRIPT.parent)
    probe = ("import runpy, sys\n"
             f"sys.path.insert(0, {folder!r}); sys.argv = [{str(RANK_SCRIPT)!r}, '--help']\n"
             "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\nexcept SystemExit:\n    pass\n"
             f"print('still on sys.path' if {folder!r} in sys.path else 'removed')\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert "--plan-json" in out.stdout and out.stdout.strip().endswith("removed"), out.stdout + out.stderr


def test_a_rank_can_only_stamp_the_phases_the_protocol_names(tmp_path):
    from dsx.rank.progress import Progress

    progress = Progress(tmp_path, rank=0, local_rank=0, world_size=1)
    progress.phase("imported")
    assert read_rank_report(tmp_path, 0).phase == "imported"
    with pytest.raises(ValueError, match=r"^not a rank phase: 'model_build' \(dsx.rank.protocol.PHASES\)$"):
        progress.phase("model_build")
    with pytest.raises(ValidationError):
        RankReport(rank=0, phase="halfway")
