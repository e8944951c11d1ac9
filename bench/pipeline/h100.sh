#!/usr/bin/env bash
# Issue 13's GPU evidence on one GPU (kind nvidia-h100-x1), from the repo root, with the wheelhouse carried in .whl:
#     bash bench/pipeline/h100.sh $OUT
# Does the pipeline wrapper cost anything? gpt2-xl (vocab padded to 50304, seq 1024), ZeRO-1, bf16, micro-batch 4 x
# 4 micro-batches per optimizer step, torch's fused AdamW (no JIT build), 8 timed steps after 3: the plain DeepSpeed
# engine against a 1-stage pipeline (`dsx run --pipeline-stages 1`: the HF model as a deepspeed.pipe.PipelineModule,
# stepped with engine.train_batch), alternating, twice each, in this one command on this one GPU. Target: tokens/s
# within 3%. Rows: $OUT/runs.jsonl; log: $OUT/h100.log, ending with bench/pipeline/summary.py's comparison.
# About 4 minutes: 4 runs of ~1 minute (~50 s of imports, build, deepspeed.initialize and teardown, as gpt2-xl's rows
# in bench/buckets/h100 show, + 11 steps of ~0.8 s); each is stopped at 130 s, so 4 stay within a 10-minute command.
set -uo pipefail
out=${1:?usage: bench/pipeline/h100.sh OUT}
source bench/gpu/prelude.sh "${WHEELHOUSE:-.whl}" || exit 1
res=$out/runs.jsonl
start_log "$out/h100.log"
common=(--model gpt2-xl --vocab-pad 64 --seq-len 1024 --zero 1 --precision bf16 --micro-batch "${MICRO_BATCH:-4}"
        --grad-accum "${GRAD_ACCUM:-4}" --steps "${STEPS:-8}" --warmup 3 --gpus 1 --results "$res" --timeout 130
        --ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true)
export RUN_SIGNAL=INT  # dsx run stops its ranks' process group and exits
for _ in 1 2; do
  run 140 python3 -m dsx run "${common[@]}"
  run 140 python3 -m dsx run "${common[@]}" --pipeline-stages 1
done
python3 bench/pipeline/summary.py "$res" >>"$log" 2>&1
show_log
grep -E '^\||^speed' "$log"
