"""One rank of `dsx run`, started by DeepSpeed's launcher: `python .../dsx/rank/train_rank.py --plan-json PLAN`.

The plan (dsx.rank.protocol.RankPlan, written by dsx.run.prepare) names the model preset, overrides, sequence
length, batch sizes, steps, toggles, the DeepSpeed config file and the output folder. The rank runs
dsx.rank.loop.run and writes rank-<rank>.json (dsx.rank.protocol.RankReport) at every phase, and a final one with
status ok, or oom / error with the message and the traceback (in the file, not on the terminal), then exits 0 / 1.

It is started as a script path, not `-m`: with `-m` Python puts the current directory first on sys.path, where
a user's folders could shadow dsx's modules (dsx/launcher.py says more).
"""

from __future__ import annotations

import sys

# Run as a script, Python puts this file's folder (dsx/rank/) first on sys.path, where loop.py, model.py, ... would
# shadow any top-level module of the same name that torch or transformers imports. The rank imports dsx.rank.*.
if sys.path and sys.path[0] and __name__ == "__main__":
    from pathlib import Path as _Path

    if _Path(sys.path[0]).resolve() == _Path(__file__).resolve().parent:
        del sys.path[0]

import argparse  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

from dsx.rank import memory_history  # noqa: E402
from dsx.rank.faults import classify, one_line  # noqa: E402
from dsx.rank.loop import run  # noqa: E402
from dsx.rank.measure import collect_memory  # noqa: E402
from dsx.rank.progress import Progress  # noqa: E402
from dsx.rank.protocol import RankPlan  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan-json", required=True)
    parser.add_argument("--local_rank", type=int, default=None, help=argparse.SUPPRESS)  # if a launcher adds it
    args = parser.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", args.local_rank or 0))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    plan = RankPlan.read(args.plan_json)
    out_dir = Path(plan.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    progress = Progress(out_dir, rank, local_rank, world_size)
    report = progress.report
    progress.write()
    code = 0
    state: dict = {}
    try:
        run(plan, progress, rank, local_rank, state)
        report.status = "ok"
        report.phase = "done"
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a result, never a bare traceback
        report.status = "oom" if not isinstance(exc, KeyboardInterrupt) and classify(exc) == "oom" else "error"
        report.error = one_line(exc)
        report.traceback = traceback.format_exc()
        report.times["failed"] = time.time()
        code = 1
        if "torch" in state:  # memory at the failure is what an OOM report needs most
            try:
                collect_memory(state["torch"], state["device"], state["on_cuda"], state.get("nvml"), report)
            except Exception as mem_exc:
                report.notes.append(f"memory figures after the failure: {one_line(mem_exc)}")
            if state.get("memory_history") is not None:  # what held the memory when an OOM struck
                memory_history.dump(state["torch"], state["memory_history"], rank, report)
    report.times["end"] = time.time()
    progress.write()
    return code


if __name__ == "__main__":
    exit_code = main()
    # Everything is written; skip the interpreter's teardown of torch/DeepSpeed (seconds of thread joins and
    # module finalisers) so the launcher sees the exit at once. The process group was destroyed in run().
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
