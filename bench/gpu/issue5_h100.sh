#!/usr/bin/env bash
# Issue 5 evidence on one H100: dsx estimate judged on fresh sweeps over three families (NOT RUN YET: no GPU was
# lent in the session that wrote it). A command may run 10 minutes and the host keeps nothing: re-run it, carrying
# bench/results/issue5/h100 back in, and the sweeps resume from their results files.
# Sweeps with --no-prune (the exhaustive baseline, every trial measured) on llama-1b, bert-large and gpt2-large: ZeRO 0-3 x
# offload none/cpu x checkpointing off/on; then the same gpt2-xl grid as issue 4 WITH pruning, to compare its
# GPU-seconds and best configuration with bench/results/issue4/h100/gpt2xl.jsonl (the exhaustive run).
# Usage on the host, from the repo root:  bash bench/gpu/issue5_h100.sh $OUT [SECONDS]
set -uo pipefail
out=${1:?output dir}
budget=${2:-540}
start=$(date +%s)
if [ -d /tmp/site/deepspeed ]; then  # a warm host from the previous command: reinstalling would touch the
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=/tmp/torch_extensions
  export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}  # sources and rebuild the ops
else
  source .whl/prelude.sh .whl
fi
export PYTHONPATH=$PWD:$PYTHONPATH
dir=bench/results/issue5/h100
mkdir -p "$dir"
log=$out/issue5_h100_$(date -u +%Y%m%dT%H%M%SZ).log
echo "## $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)" >"$log"
python3 -c "import torch, transformers, deepspeed; print('torch', torch.__version__, 'transformers', transformers.__version__, 'deepspeed', deepspeed.__version__)" >>"$log" 2>&1

# DeepSpeed JIT-builds FusedAdam (no offload) and CPUAdam (offload) on first use, ~50-70 s each: build both at
# once before the sweeps (TORCH_CUDA_ARCH_LIST as dsx gives the ranks; the host's 9.0a breaks the builder).
for op in FusedAdamBuilder CPUAdamBuilder; do
  TORCH_CUDA_ARCH_LIST=9.0 python3 -c "from deepspeed.ops.op_builder import $op; $op().load()" >>"$log" 2>&1 &
done
wait
echo "ops built after $(( $(date +%s) - start )) s" >>"$log"

# keep copies in $OUT as rows arrive: if the command is cut short, what was measured still comes back
( while sleep 15; do cp "$dir"/*.jsonl "$out"/ 2>/dev/null; cp "$log" "$out"/ 2>/dev/null; done ) &
left() { echo $(( budget - ($(date +%s) - start) )); }
sweep() { echo "+ dsx sweep $*" >>"$log"; timeout -s INT "$(left)" python3 -m dsx sweep "$@" >>"$log" 2>&1; echo "exit $?" >>"$log"; }

for model in llama-1b bert-large gpt2-large; do
  sweep --model $model --zero 0,1,2,3 --offload none,cpu --act-ckpt off,on --micro-batch auto --mb-start 4 \
    --mb-max 256 --mb-tolerance 0.25 --steps 3 --warmup 2 --trial-timeout 300 --no-prune --results "$dir/$model.jsonl"
done
sweep --model gpt2-xl --zero 1,2,3 --offload none,cpu --act-ckpt off,on --micro-batch auto --mb-start 8 \
  --mb-max 128 --mb-tolerance 0.5 --steps 3 --warmup 2 --trial-timeout 300 --results "$dir/gpt2xl_pruned.jsonl"

cp "$dir"/*.jsonl "$out"/
grep -E "^\+|^exit|^\[|^sweep|fits up|seconds|^ops|^torch" "$log"
