#!/usr/bin/env bash
# The step's cost against the micro-batch, per model, on one GPU (bench/estimator/terms.md, issue 30 item 5): what
# of a step grows with the tokens and what does not, for models of different size, from the repo root:
#     bash bench/estimator/ladder.sh $OUT            # kind nvidia-h200 or nvidia-h100-x1, carry [".whl"]
# RUNS (default below): space-separated MODEL:ZERO:MICRO_BATCH:GRAD_ACCUM[:noclip] entries, run in order while BUDGET_S
# (default 560) lasts, each capped at RUN_S (default 80) seconds. dsx run's defaults otherwise (bf16, GPT-2's dropout,
# clipping 1.0, the bf16 overflow check, eager, the comms logger) with torch's fused AdamW (no JIT build), vocabulary
# padded to 64, STEPS (default 10) timed steps after 3, the learnable synthetic data. `noclip`: clipping 0 and no
# overflow check, `nocheck`: no overflow check (measurements of what they cost, not configurations a sweep would pick),
# `dsadam`: DeepSpeed's FusedAdam (dsx's default on a GPU, the calibration's) instead of torch's fused AdamW, `compile`:
# --compile (engine.compile(); an eager entry beside it is its baseline), `nodrop`: GPT-2's dropout probabilities set to
# 0, `gpusN`: N GPUs of the host (data parallel) instead of 1, `socket`: the ranks talk over TCP on the loopback
# (the prelude's nccl_socket), not NVLink; tags combine with '+' (gpt2-xl:1:8:1:compile+nodrop).
# Rows in $OUT/ladder.jsonl.
set -uo pipefail
out=${1:?usage: bench/estimator/ladder.sh OUT}
source "${PRELUDE:-bench/gpu/prelude.sh}" "${WHEELHOUSE:-.whl}" || exit 1
set_deadline "${BUDGET_S:-560}"
mkdir -p "$out"
res=$out/ladder.jsonl
start_log "$out/ladder.log"
runs=${RUNS:-"gpt2:2:4:1 gpt2:2:16:1 gpt2:2:4:4 gpt2:2:16:1:noclip gpt2-medium:2:4:1 gpt2-medium:2:16:1 gpt2-xl:2:4:1
gpt2-xl:2:8:1 gpt2:2:8:1"}
case $runs in *:dsadam*) BUILD_S=200 build_ops FusedAdamBuilder ;; esac
for entry in $runs; do
  IFS=: read -r model zero mb ga tag <<<"$entry"
  extra=(--ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true)
  gpus=1
  envs=()
  IFS=+ read -ra tags <<<"${tag:-}"
  for tag in "${tags[@]}"; do
    case $tag in
      noclip) extra+=(--ds-set gradient_clipping=0 --ds-set bf16.check_grad_overflow=false) ;;
      nocheck) extra+=(--ds-set bf16.check_grad_overflow=false) ;;
      dsadam) extra=("${extra[@]:4}") ;;  # drops the two torch-AdamW settings above
      compile) extra+=(--compile) ;;
      nodrop) extra+=(--set resid_pdrop=0 --set embd_pdrop=0 --set attn_pdrop=0) ;;
      gpus[1-9]) gpus=${tag#gpus} ;;
      socket) envs=("${nccl_socket[@]}") ;;
      *) echo "bench/estimator/ladder.sh: unknown tag '$tag' in '$entry' (noclip, nocheck, dsadam, compile," \
              "nodrop, gpusN, socket)" >&2; exit 2 ;;
    esac
  done
  run_by "${RUN_S:-80}" env "${envs[@]}" python3 -m dsx run --model "$model" --vocab-pad 64 --gpus "$gpus" --zero "$zero" \
    --micro-batch "$mb" --grad-accum "$ga" --steps "${STEPS:-10}" --warmup 3 --results "$res" "${extra[@]}" \
    </dev/null || true
done
[ -s "$res" ] && python3 -m dsx report "$res" --vs-estimate >>"$log" 2>&1
show_log
