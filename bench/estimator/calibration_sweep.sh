#!/usr/bin/env bash
# The six trials a GPU kind's speed and memory constants come from (dsx.calibration.CALIBRATION_ROWS: gpt2-xl at
# ZeRO-1 with checkpointing at micro-batch 8 and 32, ZeRO-1, ZeRO-2 with the optimizer on the CPU, ZeRO-3 with and
# without it, each at micro-batch 8), as issue 4's sweep ran them on the H100 (bench/sweep/README.md: dsx's defaults,
# FusedAdam, bf16), on whatever one GPU the host has. From the repo root:
#     bash bench/estimator/calibration_sweep.sh $OUT       # kind nvidia-h200 (or any one-GPU kind), carry [".whl"]
# Rows in $OUT/calibration.jsonl; ROWS=FILE (a results file in the tree, e.g.
# bench/estimator/h200_calibration/run1.jsonl) is copied there first, so a command cut by time goes on where the last
# one stopped (a sweep resumes from its rows). Then `python bench/estimator/calibrate.py --kind KEY --rows FILE` computes the constants. Arguments after
# OUT: the sweeps' axes to run instead of all five, in order, e.g. "--zero 1 --micro-batch 8" (a role run again).
# The first run of a command on a fresh host ran ~10% slow (bench/estimator/h200_optimizer: 18,791 then 20,795
# tokens/s, the same run), so the trials most constants rest on do not come first.
set -uo pipefail
out=${1:?usage: bench/estimator/calibration_sweep.sh OUT}
source "${PRELUDE:-bench/gpu/prelude.sh}" "${WHEELHOUSE:-.whl}" || exit 1
set_deadline "${BUDGET_S:-570}"
mkdir -p "$out"
res=$out/calibration.jsonl
[ -n "${ROWS:-}" ] && [ -s "$ROWS" ] && cp "$ROWS" "$res"
start_log "$out/calibration.log"
common=(--model gpt2-xl --steps 5 --warmup 2 --no-prune --trial-timeout 200 --results "$res")
# the checkpointed pair gives the per-sample slope and the fixed per-parameter work: second, after a warm trial
shift
[ $# -gt 0 ] || set -- "--zero 1 --micro-batch 8" "--zero 1 --act-ckpt on --micro-batch 8,32" \
  "--zero 3 --micro-batch 8" "--zero 2 --offload cpu --micro-batch 8" "--zero 3 --offload cpu --micro-batch 8"
ops=(FusedAdamBuilder)  # dsx's default AdamW on a GPU
case "$*" in *offload*) ops+=(CPUAdamBuilder) ;; esac  # the offloaded step
BUILD_S=240 build_ops "${ops[@]}"
for axes in "$@"; do
  # shellcheck disable=SC2086  # the axes split into flags
  run_by 400 python3 -m dsx sweep "${common[@]}" $axes </dev/null || true
done
[ -s "$res" ] && python3 -m dsx report "$res" --vs-estimate >>"$log" 2>&1
show_log
