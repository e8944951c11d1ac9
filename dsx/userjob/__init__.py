"""A user's own training job under `dsx launch`: what dsx checks before it starts and measures while and after it runs,
without touching the script.

Not to be confused with its neighbours: dsx/launcher.py builds a launch as data and dsx/processes.py is the one
module that starts processes (for `dsx run` and `dsx launch` alike), dsx/cli/launch.py is the `dsx launch` command;
this package is what that command knows about the job it starts.

    trainer   the transformers Trainer seen from its command line and its --output_dir: the warmup that crashes
              DeepSpeed 0.19, the precision it fills, the throughput it reports about itself
    sampler   a thread in the dsx process that samples the job while it runs: each GPU's memory (NVML) and the peak
              resident set of each rank process (the job's process group, /proc)
    row       the launch's one row in the results file (dsx.results.RunRow with kind "launch")
"""
