#!/usr/bin/env bash
# The collectives' time at ZeRO 0-2 (bench/estimator/terms.md, "The collectives' time"): NCCL's bus bandwidth
# between this host's GPUs over NVLink and over sockets (bench/estimator/link_probe.py), then dsx runs that pay it
# (bench/estimator/ladder.sh's RUNS, its `socket` tag for the runs over sockets). From the repo root:
#     RUNS="gpt2-xl:1:8:1:gpus2 gpt2-xl:1:8:1 gpt2-xl:1:8:1:gpus2+socket" bash bench/estimator/link.sh $OUT
# on kind nvidia-h200-x2 (carry [".whl"]). TRANSPORTS (default "nvlink socket"): which probes run, GPUS (default 2)
# their ranks. $OUT/link.jsonl (the probes), $OUT/link.log, and ladder.sh's $OUT/ladder.jsonl and ladder.log.
set -uo pipefail
out=${1:?usage: bench/estimator/link.sh OUT}
source "${PRELUDE:-bench/gpu/prelude.sh}" "${WHEELHOUSE:-.whl}" || exit 1
set_deadline "${BUDGET_S:-560}"
mkdir -p "$out"
start_log "$out/link.log"
for transport in ${TRANSPORTS:-nvlink socket}; do
  envs=()
  [ "$transport" = socket ] && envs=("${nccl_socket[@]}")
  run_by 90 env "${envs[@]}" python3 -m torch.distributed.run --standalone --nproc_per_node "${GPUS:-2}" \
    bench/estimator/link_probe.py "$out/link.jsonl" "$transport" </dev/null || true
done
show_log
if [ -n "${RUNS:-}" ]; then
  BUDGET_S=$(( $(time_left) - 5 )) bash bench/estimator/ladder.sh "$out"
fi
