#!/usr/bin/env bash
# dsx run's host-memory check on a GPU host (dsx/run/host_check.py), from the repo root:
#     bash bench/tools/host_check.sh $OUT        # any single-GPU kind, carry [".whl"]
# Three dry runs of llama-8b ZeRO-3 with CPU optimizer offload and checkpointing at micro-batch 1 on one GPU: full
# offload (predicted past a 128 GiB host: refused, exit 2), offload ratio 0.3 (predicted to fit: the launch is
# printed), and full offload with --no-host-check (printed). A dry run prepares everything a run does, the check
# included, and starts nothing. -> $OUT/host_check.log
set -uo pipefail
out=${1:?usage: bench/tools/host_check.sh OUT}
source "${PRELUDE:-bench/gpu/prelude.sh}" "${WHEELHOUSE:-.whl}" || exit 1
start_log "$out/host_check.log"
free -b | awk '/^Mem:/ {printf "host RAM (free -b): %.0f bytes, %.2f GiB\n", $2, $2 / 2^30}' >>"$log"
for extra in "" "--ds-set zero_optimization.offload_optimizer.ratio=0.3" "--no-host-check"; do
  # shellcheck disable=SC2086  # $extra is zero or more words
  run 120 python3 -m dsx run --model llama-8b --zero 3 --offload cpu --act-ckpt --micro-batch 1 --gpus 1 --dry-run \
    $extra </dev/null
done
grep -E "^\+|^exit|^host RAM|predicted not to fit|^Error|deepspeed " "$log"
