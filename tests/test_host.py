"""dsx.host: what a process learns of the machine it runs on, and the one-rank environment of the bench scripts."""

from __future__ import annotations

import os
import socket

from dsx.host import as_one_rank


def test_one_rank_without_a_launcher_is_rank_0_of_1_on_a_free_local_port(monkeypatch):
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    as_one_rank()
    assert [os.environ[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR")] == ["0", "0", "1", "127.0.0.1"]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", int(os.environ["MASTER_PORT"])))  # free: nothing holds it


def test_one_rank_keeps_what_a_launcher_set(monkeypatch):
    launched = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.2", "MASTER_PORT": "29511"}
    for key, value in launched.items():
        monkeypatch.setenv(key, value)
    as_one_rank()
    assert {k: os.environ[k] for k in launched} == launched
