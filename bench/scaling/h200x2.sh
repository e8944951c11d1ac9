#!/usr/bin/env bash
# The scaling study (issue 6) on one host with 2 GPUs (one `device` command, kind nvidia-h200-x2), from the repo
# root, with the wheelhouse carried in .whl (was bench/gpu/issue6_h200x2.sh):
#     bash bench/scaling/h200x2.sh $OUT
# Data-parallel scaling 1 -> 2 GPUs of the same model:
#   1. one node, 1 GPU (the baseline);
#   2. one node, 2 GPUs (DeepSpeed's single-node launcher);
#   3. two 1-GPU "nodes" of this host through a hostfile and `--launcher no-ssh` (one runner per node, the
#      multi-node code path: --world_info, --node_rank, NCCL across the "nodes"): 127.0.0.1 gets GPU 0 and
#      127.0.0.2 GPU 1 (--include).
# Scaling efficiency = tokens/s (2 GPUs) / (2 x tokens/s (1 GPU)), same model, micro-batch and steps per GPU, all
# three in this one command. Rows and the hostfile go to bench/scaling/h200x2/ (copied into $OUT/bench/...).
# Issue 6 ran it as it is (gpt2-medium, ZeRO-2). Issue 18 runs 1-2 (gpt2-xl, ZeRO-1, 2 and 3, comm bytes per step
# in every row): one ZeRO stage per command (three gpt2-xl runs each, ~6-8 min):
#     MODEL=gpt2-xl MICRO_BATCH=8 ZEROS=1 bash bench/scaling/h200x2.sh $OUT    (then ZEROS=2, then ZEROS=3; carry
#     bench/scaling/h200x2/scaling.jsonl back between commands)
set -uo pipefail
out=${1:?usage: bench/scaling/h200x2.sh OUT}
start=$(date +%s)
source bench/gpu/prelude.sh "${WHEELHOUSE:-.whl}" || exit 1
dir=bench/scaling/h200x2
mkdir -p "$dir"
start_log "$out/scaling_h200x2_$(date -u +%Y%m%dT%H%M%SZ).log"
build_ops FusedAdamBuilder
echo "ops built after $(( $(date +%s) - start )) s" >>"$log"
keep_copies "$out" "$dir/*"

hosts=$out/hosts
printf '127.0.0.1 slots=2\n127.0.0.2 slots=2\n' >"$hosts"
cp "$hosts" "$dir/hostfile"
export RUN_SIGNAL=INT  # dsx run stops its ranks' process group and exits
for zero in ${ZEROS:-2}; do
  common=(--model "${MODEL:-gpt2-medium}" --zero "$zero" --micro-batch "${MICRO_BATCH:-16}" --steps 20 --warmup 5
          --results "$dir/scaling.jsonl")
  run 300 python3 -m dsx run "${common[@]}" --gpus 1
  run 300 python3 -m dsx run "${common[@]}" --gpus 2
  run 300 python3 -m dsx run "${common[@]}" --hostfile "$hosts" --launcher no-ssh --include "127.0.0.1:0@127.0.0.2:1"
done
python3 -m dsx report "$dir/scaling.jsonl" --all --format markdown >>"$log" 2>&1
python3 - "$dir/scaling.jsonl" >>"$log" 2>&1 <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
def key(r):  # the same model, ZeRO stage and micro-batch: a 2-GPU row's 1-GPU baseline
    return r["model"]["preset"], r["ds_config"].get("zero_optimization", {}).get("stage"), r["micro_batch"]
for r in rows:
    one = [o for o in rows if o["status"] == "ok" and o["world_size"] == 1 and key(o) == key(r)]
    if r["status"] == "ok" and r["world_size"] == 2 and one:
        how = f"{len(r['nodes']['hosts'])} nodes ({r['nodes']['launcher']})" if r.get("nodes") else "1 node"
        eff = r["figures"]["tokens_per_s"] / (2 * one[-1]["figures"]["tokens_per_s"])
        comm = (r.get("comm") or {}).get("bytes_per_step")
        print(f"scaling 1 -> 2 GPUs, {key(r)[0]} ZeRO-{key(r)[1]} mb {key(r)[2]}, {how}: {eff:.1%} "
              f"({r['figures']['tokens_per_s']:,.0f} vs 2 x {one[-1]['figures']['tokens_per_s']:,.0f} tokens/s)"
              + (f", {comm / 2**30:.2f} GiB communicated per step" if comm else ""))
PY
copy_out "$out" "$dir/*"
show_log
