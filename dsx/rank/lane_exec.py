"""Start a rank with another interpreter (`--python`, dsx.lane): `lane_exec.py [--local_rank=N] PYTHON TARGET ARGS`.

DeepSpeed's launch.py starts every rank as `sys.executable -u SCRIPT [--local_rank=N] ARGS`, with its own
interpreter. dsx makes this file the SCRIPT: it replaces itself (os.execv: same process, same pid, which launch.py
waits on and signals) with `PYTHON -u TARGET [--local_rank=N] ARGS`, where TARGET is a script or `-m MODULE`, so
--local_rank stays where DeepSpeed puts it. It imports nothing beyond os and sys: the hop costs one bare
interpreter start.
"""

import os
import sys


def lane_argv(args: list[str]) -> list[str]:
    """The rank's command line for the arguments this file was given."""
    args = list(args)
    local_rank = [args.pop(0)] if args and args[0].startswith("--local_rank") else []
    if len(args) < 2:
        raise SystemExit("lane_exec.py: usage: lane_exec.py [--local_rank=N] PYTHON SCRIPT|-m MODULE ARGS")
    python = args.pop(0)
    width = 2 if args[0] == "-m" else 1
    return [python, "-u", *args[:width], *local_rank, *args[width:]]


if __name__ == "__main__":
    argv = lane_argv(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)
