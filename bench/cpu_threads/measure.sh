#!/usr/bin/env bash
# How OpenMP's waiting policy decides a CPU rank's step time when another process wants a core (issue 19,
# bench/cpu_threads/README.md). From the repo root, in the project venv:
#     bash bench/cpu_threads/measure.sh OUT
# gpt2-tiny, micro-batch 8, 10 timed steps after 2, one CPU rank (OMP_NUM_THREADS = the cores), ZeRO-1 and ZeRO-2:
# libgomp's default spinning (GOMP_SPINCOUNT=300000, what dsx left before) against dsx's OMP_WAIT_POLICY=PASSIVE, each
# on a quiet machine and with one core kept busy by a Python loop.
set -uo pipefail
out=${1:?usage: bench/cpu_threads/measure.sh OUT}
mkdir -p "$out"
log=$out/measure.log
{ date -u +"## %FT%TZ $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"; python -c "import torch, deepspeed as ds
print('torch', torch.__version__, 'deepspeed', ds.__version__)"; } >"$log" 2>&1
busy() { python -c "import time
t = time.time()
while time.time() - t < 60: pass" & }
for zero in 1 2; do
  for policy in GOMP_SPINCOUNT=300000 OMP_WAIT_POLICY=PASSIVE; do
    for load in quiet busy; do
      pid=
      if [ $load = busy ]; then busy; pid=$!; sleep 0.5; fi
      cmd=(env "$policy" python -m dsx run --model gpt2-tiny --micro-batch 8 --steps 10 --warmup 2 --zero "$zero"
           --results "$out/runs.jsonl")
      echo "+ [$load] ${cmd[*]}" >>"$log"
      "${cmd[@]}" >>"$log" 2>&1
      echo "exit $?" >>"$log"
      [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
  done
done
grep -E '^\+|step time' "$log"
