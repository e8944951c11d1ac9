#!/usr/bin/env bash
# Issue 13's GPU evidence on one GPU (kind nvidia-h100-x1), from the repo root, with the wheelhouse carried in .whl:
#     bash bench/pipeline/h100.sh $OUT
# Does the pipeline wrapper cost anything? gpt2-xl (vocab padded to 50304, seq 1024), ZeRO-1, bf16, micro-batch 4 x
# 4 micro-batches per optimizer step, torch's fused AdamW (no JIT build), STEPS (20) timed steps after 3: the plain
# DeepSpeed engine against a 1-stage pipeline (`dsx run --pipeline-stages 1`: the HF model as a
# deepspeed.pipe.PipelineModule, stepped with engine.train_batch), PAIRS (3) pairs in this one command on this one
# GPU, the order alternating (plain first, then pipeline first, ...) so drift of the host favours neither. Target:
# tokens/s within 3%. Rows: $OUT/runs.jsonl; log: $OUT/h100.log, ending with bench/pipeline/summary.py's comparison.
# About 8 minutes: 6 runs of ~70 s (~50 s of imports, build, deepspeed.initialize and teardown, as gpt2-xl's rows
# in bench/buckets/h100 show, + 23 steps of ~0.75 s); each is stopped at 90 s, so 6 stay within a 10-minute command.
# (The first measurement, 8 steps and 2 pairs in one order, had 12-23% step spreads: bench/pipeline/h100/.)
set -uo pipefail
out=${1:?usage: bench/pipeline/h100.sh OUT}
source bench/gpu/prelude.sh "${WHEELHOUSE:-.whl}" || exit 1
res=$out/runs.jsonl
start_log "$out/h100.log"
common=(--model gpt2-xl --vocab-pad 64 --seq-len 1024 --zero 1 --precision bf16 --micro-batch "${MICRO_BATCH:-4}"
        --grad-accum "${GRAD_ACCUM:-4}" --steps "${STEPS:-20}" --warmup 3 --gpus 1 --results "$res" --timeout 90
        --ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true)
export RUN_SIGNAL=INT  # dsx run stops its ranks' process group and exits
plain() { run 100 python3 -m dsx run "${common[@]}"; }
piped() { run 100 python3 -m dsx run "${common[@]}" --pipeline-stages 1; }
for pair in $(seq "${PAIRS:-3}"); do
  if [ $((pair % 2)) = 1 ]; then plain; piped; else piped; plain; fi
done
python3 bench/pipeline/summary.py "$res" >>"$log" 2>&1
show_log
grep -E '^\||^speed' "$log"
