"""Recording one `dsx launch`: the sampler started with the job, the job's output kept in a log beside the results
file, and after the job its row (dsx.userjob.row) appended to the results file."""

from __future__ import annotations

import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from dsx.results import NodesInfo, append_row
from dsx.userjob.row import LaunchRecord, batch_sizes, launch_row, summary_lines
from dsx.userjob.sampler import JobSampler
from dsx.userjob.trainer import precision, trainer_figures

LOG_READ_LIMIT = 4 << 20
"""The last bytes of the job's log searched for the Trainer's metrics line."""


def _gpu_indices(env: dict, world: int) -> list[int]:
    """NVML indices of ranks 0..world-1 on one node: the first of CUDA_VISIBLE_DEVICES (as dsx.launcher passes them
    to the runner with --include), else 0..world-1."""
    visible = [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if visible and all(v.isdigit() for v in visible):
        return [int(v) for v in visible[:world]]
    return list(range(world))


class Recorder:
    """Made before the job starts (it names the log run_plan writes); start(pgid) is run_plan's on_start;
    record(completed) writes the row and returns the lines to print (completed None: interrupted)."""

    def __init__(self, results: str, *, device: str, world: int, placement, env: dict, plan, config: dict,
                 config_path: str, hf: bool, config_arg: str, user_command: list[str], script: str,
                 args: list[str], trainer: bool, seq_len: int | None, nodes, gpu_names: list[str] = (), lane=None,
                 data=None):
        self.results = Path(results)
        run_id = uuid.uuid4().hex
        self.run_dir = (self.results.parent / self.results.stem / run_id).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.run_dir / "launch.log"
        self.plan, self.args, self.seq_len, self.trainer = plan, args, seq_len, trainer
        self.data = data
        """dsx.data.DataSpec handed to the script (--data), or None."""
        layout = placement.layout
        if layout is None:
            self.sampler = JobSampler(device, _gpu_indices(env, world))
        else:
            self.sampler = JobSampler(device, [], gpu_unavailable="a launch over a hostfile: dsx samples the GPUs "
                                      "of one-node launches only")
        micro, accum = batch_sizes(config, trainer, args)
        config_given = None if config_arg.lower() == "none" else config_arg
        self.record_data = LaunchRecord(
            run_id=run_id, started_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"), device=device,
            world_size=world, gpu_names=list(gpu_names), config=config, config_path=str(Path(config_path).resolve()),
            hf=hf, config_arg=config_given, user_command=list(user_command), script=script,
            command=list(sys.argv), precision=precision(config, args), micro_batch=micro,
            grad_accum=accum, notes=list(plan.notes), log=str(self.log_path), run_dir=str(self.run_dir), lane=lane,
            nodes=None if layout is None else NodesInfo(
                hostfile=nodes.hostfile, launcher=nodes.launcher, hosts=list(layout.selection),
                ranks_per_node=[len(slots) for slots in layout.selection.values()], master_addr=plan.master_addr),
        )
        self.started = time.time()

    def start(self, pgid: int) -> None:
        self.sampler.start(pgid)

    def _log_text(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, self.log_path.stat().st_size - LOG_READ_LIMIT))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def record(self, completed, stopped: str = "every rank was stopped") -> list[str]:
        """`stopped`: what became of an interrupted job's processes (dsx.processes.stopped_text)."""
        self.sampler.stop()
        interrupted = completed is None
        if interrupted:
            from dsx.processes import Completed

            completed = Completed(returncode=None, timed_out=False, started=self.started, ended=time.time(),
                                  log_path=str(self.log_path), tail="\n".join(self._log_text().splitlines()[-40:]))
        figures = trainer_figures(self.args, self.plan.cwd, self._log_text(), self.started, self.seq_len)
        row = launch_row(self.record_data, completed, self.sampler.memory(self.record_data.world_size), figures,
                         interrupted=interrupted, stopped=stopped)
        if self.data is not None:
            from dsx.results import DataInfo

            row.data = DataInfo(**self.data.model_dump(include={"source", "path", "dtype", "seed", "tokens"}),
                                label=self.data.label)
        append_row(self.results, row)
        return summary_lines(row, self.results)
