#!/usr/bin/env bash
# Issue 6 evidence on one host with 2 GPUs (nvidia-h200-x2): data-parallel scaling 1 -> 2 GPUs of the same model,
#   1. one node, 1 GPU (the baseline);
#   2. one node, 2 GPUs (DeepSpeed's single-node launcher);
#   3. two 1-GPU "nodes" of this host through a hostfile and `--launcher no-ssh` (one runner per node, the
#      multi-node code path: --world_info, --node_rank, NCCL across the "nodes"): 127.0.0.1 gets GPU 0 and
#      127.0.0.2 GPU 1 (--include).
# Scaling efficiency = tokens/s (2 GPUs) / (2 x tokens/s (1 GPU)), same model, micro-batch and steps per GPU, all
# three in this one command. Usage on the host, from the repo root:  bash bench/gpu/issue6_h200x2.sh $OUT
set -uo pipefail
out=${1:?output dir}
start=$(date +%s)
source .whl/prelude.sh .whl
export PYTHONPATH=$PWD:$PYTHONPATH
dir=bench/results/issue6/h200x2
mkdir -p "$dir"
log=$out/issue6_h200x2_$(date -u +%Y%m%dT%H%M%SZ).log
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader >"$log"
python3 -c "import torch, transformers, deepspeed; print('torch', torch.__version__, 'transformers', transformers.__version__, 'deepspeed', deepspeed.__version__)" >>"$log" 2>&1
TORCH_CUDA_ARCH_LIST=9.0 python3 -c "from deepspeed.ops.op_builder import FusedAdamBuilder; FusedAdamBuilder().load()" >>"$log" 2>&1
echo "ops built after $(( $(date +%s) - start )) s" >>"$log"
( while sleep 15; do cp "$dir"/*.jsonl "$log" "$out"/ 2>/dev/null; done ) &

hosts=$out/hosts
printf '127.0.0.1 slots=2\n127.0.0.2 slots=2\n' >"$hosts"
cp "$hosts" "$dir/hostfile"
common=(--model gpt2-medium --zero 2 --micro-batch 16 --steps 20 --warmup 5 --results "$dir/scaling.jsonl")
run() { echo "+ dsx run $*" >>"$log"; timeout -s INT 300 python3 -m dsx run "$@" >>"$log" 2>&1; echo "exit $?" >>"$log"; }
run "${common[@]}" --gpus 1
run "${common[@]}" --gpus 2
run "${common[@]}" --hostfile "$hosts" --launcher no-ssh --include "127.0.0.1:0@127.0.0.2:1"
python3 -m dsx report "$dir/scaling.jsonl" --all --format markdown >>"$log" 2>&1
python3 - "$dir/scaling.jsonl" >>"$log" 2>&1 <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
one = [r for r in rows if r["status"] == "ok" and r["world_size"] == 1]
for r in rows:
    if r["status"] == "ok" and r["world_size"] == 2 and one:
        how = f"{len(r['nodes']['hosts'])} nodes ({r['nodes']['launcher']})" if r.get("nodes") else "1 node"
        eff = r["figures"]["tokens_per_s"] / (2 * one[-1]["figures"]["tokens_per_s"])
        print(f"scaling 1 -> 2 GPUs, {how}: {eff:.1%} ({r['figures']['tokens_per_s']:,.0f} vs 2 x "
              f"{one[-1]['figures']['tokens_per_s']:,.0f} tokens/s)")
PY
cp "$dir"/*.jsonl "$log" "$out"/
grep -E "^\+|^exit|^scaling|^ops|^torch|^OK|^ERROR" "$log"
