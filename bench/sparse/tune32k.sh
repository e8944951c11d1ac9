#!/usr/bin/env bash
# What stands between bigbird at 32,768 tokens and 3x the fastest dense run (issue 32, bench/sparse/README.md), on one
# GPU, from the repo root, with the wheelhouse carried in .whl:
#     bash bench/sparse/tune32k.sh $OUT          (one device command, ~9 min)
# 1. the attention alone: FlexAttention's settings at 32k (bench/sparse/kernel.py --variants: kernel_options and
#    inductor's max-autotune, each against the default settings' output), $OUT/variants.jsonl;
# 2. the model: `dsx run` pairs of compiled bigbird and compiled dense (bench/sparse/plan_32k_engine.txt) through
#    bench/sparse/h100.sh, without the comms logger, at ZeRO-2 then ZeRO-1: $OUT/runs.jsonl, $OUT/h100.log.
# PART=tiles: dsx's FlexAttention tiles (dsx.sparse.attention.TUNED_TILES) against inductor's defaults instead, the
# kernel at 16k, 32k and 64k (kernel.py --tiles) and end to end at 32k (bench/sparse/plan_32k_tiles.txt).
set -uo pipefail
out=${1:?usage: bench/sparse/tune32k.sh OUT}
source "${PRELUDE:-bench/gpu/prelude.sh}" "${WHEELHOUSE:-.whl}" || exit 1
set_deadline "${DEADLINE_S:-570}"
start_log "$out/variants.log"
if [ "${PART:-}" = tiles ]; then
  kernel=(--tiles 16384 32768 65536) plan=bench/sparse/plan_32k_tiles.txt
else
  kernel=(--variants 32768) plan=bench/sparse/plan_32k_engine.txt
fi
run_by 200 bash -c "python3 bench/sparse/kernel.py ${kernel[*]} >'$out/variants.jsonl'"
show_log
cut -c1-240 "$out/variants.jsonl" 2>/dev/null
CKPT_FROM=1000000 STEPS=5 PLAN=$plan bash bench/sparse/h100.sh "$out" $(( $(time_left) - 15 ))
