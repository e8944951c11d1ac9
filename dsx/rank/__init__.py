"""The rank side of `dsx run`: what each process DeepSpeed's launcher starts does.

protocol     the plan dsx writes and the report a rank writes (both sides import it), the phase names
train_rank   the script the launcher starts (a path, see dsx.launcher): reads the plan, runs the loop, reports
loop         the phases: imports, process group, model, deepspeed.initialize, warm-up and timed steps
model        building the model (ZeRO-3 under zero.Init) and the flop-counter check
measure      memory figures with their methods, and the --memory-cap
progress     the rank's report on disk, rewritten at every phase
faults       injected failures (dsx's tests) and oom/error classification
"""
