"""Result rows: append-only JSON lines with a schema version; a torn last line is skipped, never fatal."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from pydantic import ValidationError

from dsx.results import (
    SCHEMA_VERSION, ModelInfo, RunRow, Toggles, Versions, append_row, config_hash, parse_row, read_rows,
)

CONFIG = {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
          "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}


def make_row(**changes) -> RunRow:
    fields = dict(
        run_id="0" * 32, time="2026-11-23T00:00:00+00:00", host="h", device="cpu",
        versions=Versions(python="3.11.7", torch="2.13.0"), ds_config=CONFIG, ds_config_hash=config_hash(CONFIG),
        ds_config_source="flags", model=ModelInfo(preset="gpt2-tiny", seq_len=64), micro_batch=1, grad_accum=1,
        world_size=2, precision="bf16", steps=3, warmup=1, toggles=Toggles(), status="ok", command=["dsx", "run"],
    )
    fields.update(changes)
    return RunRow(**fields)


def test_config_hash_is_sha256_of_canonical_json_and_ignores_key_order():
    reordered = {"zero_optimization": {"stage": 2}, "bf16": {"enabled": True}, "gradient_accumulation_steps": 1,
                 "train_micro_batch_size_per_gpu": 1, "train_batch_size": 2}
    canonical = json.dumps(CONFIG, sort_keys=True, separators=(",", ":"))
    assert config_hash(CONFIG) == hashlib.sha256(canonical.encode()).hexdigest()
    assert config_hash(reordered) == config_hash(CONFIG)
    assert config_hash({**CONFIG, "train_batch_size": 4}) != config_hash(CONFIG)


def test_append_writes_one_line_per_row_fsyncs_and_never_touches_earlier_bytes(tmp_path, monkeypatch):
    path = tmp_path / "deep" / "runs.jsonl"  # missing folders are created
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    append_row(path, make_row(run_id="a" * 32))
    before = path.read_bytes()
    append_row(path, make_row(run_id="b" * 32, status="oom", error="rank 0: OutOfMemoryError: ..."))
    after = path.read_bytes()
    assert after.startswith(before) and after.endswith(b"\n")
    assert after.count(b"\n") == 2 and len(synced) == 2
    rows = read_rows(path)
    assert [r["run_id"] for r in rows] == ["a" * 32, "b" * 32] and rows.skipped == []
    assert parse_row(rows[1]).status == "oom" and rows[0]["schema_version"] == SCHEMA_VERSION


def test_a_torn_last_line_is_skipped_and_counted_and_the_next_row_stays_whole(tmp_path):
    path = tmp_path / "runs.jsonl"
    append_row(path, make_row(run_id="a" * 32))
    with open(path, "ab") as f:
        f.write(b'{"schema_version": 1, "run_id": "tor')  # a crash mid-write
    rows = read_rows(path)
    assert [r["run_id"] for r in rows] == ["a" * 32]
    assert rows.skipped == [(2, "torn last line (no newline)")]
    append_row(path, make_row(run_id="c" * 32))
    rows = read_rows(path)
    assert [r["run_id"] for r in rows] == ["a" * 32, "c" * 32]
    assert [n for n, _ in rows.skipped] == [2]
    assert "not JSON" in rows.skipped[0][1]  # no longer the last line, still reported


def test_read_rows_of_a_missing_file_is_empty(tmp_path):
    rows = read_rows(tmp_path / "none.jsonl")
    assert rows == [] and rows.skipped == []


def test_a_row_round_trips_through_json(tmp_path):
    row = make_row(error=None, notes=["x"])
    append_row(tmp_path / "r.jsonl", row)
    assert parse_row(read_rows(tmp_path / "r.jsonl")[0]) == row


def test_rows_reject_unknown_fields_and_statuses():
    with pytest.raises(ValidationError, match="extra"):
        make_row(tokens_per_second=1.0)
    with pytest.raises(ValidationError, match="status"):
        make_row(status="crashed")


def test_parse_row_refuses_another_schema_version():
    data = make_row().model_dump(mode="json") | {"schema_version": SCHEMA_VERSION + 1}
    with pytest.raises(ValueError, match=f"schema_version {SCHEMA_VERSION + 1}"):
        parse_row(data)


def test_non_finite_figures_cannot_be_written(tmp_path):
    row = make_row()
    row.figures.tokens_per_s = float("nan")
    with pytest.raises(ValueError):
        append_row(tmp_path / "r.jsonl", row)
    assert not (tmp_path / "r.jsonl").exists() or (tmp_path / "r.jsonl").read_bytes() == b""


def test_rows_with_fields_a_newer_dsx_added_still_parse():
    data = make_row().model_dump(mode="json")
    data["a_new_optional_field"] = 1
    data["memory"]["max"]["another_one"] = 2
    assert parse_row(data) == make_row()
