"""A rank's report on disk: rewritten at every phase, so a killed rank still says how far it got."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from dsx.rank.protocol import PHASES, Phase, RankReport, write_rank_report


def _process_start() -> float:
    try:
        import psutil

        return psutil.Process().create_time()
    except Exception:
        return time.time()


class Progress:
    """The rank's RankReport and where it is written; `phase(name)` stamps the time and writes it."""

    def __init__(self, out_dir: Path, rank: int, local_rank: int, world_size: int):
        self.out_dir = out_dir
        self.report = RankReport(
            rank=rank, local_rank=local_rank, world_size=world_size, host=socket.gethostname(),
            node_rank=int(os.environ["CROSS_RANK"]) if os.environ.get("CROSS_RANK") else None, pid=os.getpid(),
            times={"process_start": _process_start(), "started": time.time()})

    def phase(self, name: Phase) -> None:
        if name not in PHASES:
            raise ValueError(f"not a rank phase: {name!r} (dsx.rank.protocol.PHASES)")
        self.report.phase = name
        self.report.times[name] = time.time()
        self.write()

    def write(self) -> None:
        write_rank_report(self.report, self.out_dir)
