#!/usr/bin/env bash
# The parity check's CPU evidence (issue 29), from the repo root, in the project venv:
#     bash bench/parity/cpu.sh OUT
# gpt2-tiny without dropout, fp32, lr 3e-3, 12 steps (2 warm-up) on the learnable synthetic data: `dsx check` of each
# configuration against plain data parallel (ZeRO-0 at the candidate's split, and again split the other way):
# ZeRO 0-3 at micro-batch 4 x grad-accum 2; optimizer offload, full at ZeRO-2 and ratio 0.5 at ZeRO-3; micro-batch 8 x 1
# against references at 2 x 4 and 1 x 8; ZeRO-2 on 2 ranks; 2 pipeline stages on 2 ranks (by design: not judged);
# and ZeRO-2 with the first block's gradients zeroed (--inject-failure grad), which must differ. 7 min on 2 cores.
# Rows: OUT/runs.jsonl; log: OUT/cpu.log, ending with `dsx report`'s parity table.
set -uo pipefail
out=${1:?usage: bench/parity/cpu.sh OUT}
mkdir -p "$out"
log=$out/cpu.log
{ date -u +"## %FT%TZ $(nproc) cores"; python -c "import torch, transformers, deepspeed as ds
print('torch', torch.__version__, 'transformers', transformers.__version__, 'deepspeed', ds.__version__)"
} >"$log" 2>&1
common=(--model gpt2-tiny --set resid_pdrop=0 --set embd_pdrop=0 --set attn_pdrop=0 --precision fp32 --lr 3e-3
        --steps 10 --warmup 2 --results "$out/runs.jsonl")
check() {
  echo "+ python -m dsx check $*" >>"$log"
  python -m dsx check "$@" >>"$log" 2>&1
  echo "exit $?" >>"$log"
}
for zero in 0 1 2 3; do
  check "${common[@]}" --zero "$zero" --micro-batch 4 --grad-accum 2
done
check "${common[@]}" --zero 2 --offload cpu --micro-batch 4 --grad-accum 2
check "${common[@]}" --zero 3 --offload cpu --ds-set zero_optimization.offload_optimizer.ratio=0.5 --micro-batch 4 \
  --grad-accum 2
check "${common[@]}" --zero 2 --micro-batch 8 --grad-accum 1 --reference-micro-batch 2
check "${common[@]}" --zero 2 --gpus 2 --micro-batch 2 --grad-accum 2
check "${common[@]}" --zero 1 --gpus 2 --pipeline-stages 2 --micro-batch 2 --grad-accum 4
check "${common[@]}" --zero 2 --micro-batch 4 --grad-accum 2 --inject-failure grad
python -m dsx report "$out/runs.jsonl" --format markdown >"$out/report.md" 2>>"$log"
sed -n '/^## Parity/,$p' "$out/report.md" >>"$log"
grep -E '^\+|^exit|^verdict|^\|' "$log"
