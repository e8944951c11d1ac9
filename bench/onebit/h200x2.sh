#!/usr/bin/env bash
# Communication on two GPUs for the multi-GPU issue (18), written with issue 15 and not yet run: kind nvidia-h200-x2,
# from the repo root, with both wheelhouses carried (.whl: DeepSpeed 0.19.8, .whl18: 0.18.9):
#     bash bench/onebit/h200x2.sh $OUT
# About 8 minutes (12 runs of GPT-2 124M, ~35 s each, and the quantizer op's JIT build). Rows go to $OUT/runs.jsonl
# (each with its comm: bytes per step by collective, measured against dsx's prediction), the log to
# $OUT/h200x2.log, the tables to $OUT/report.md:
#   1. DeepSpeed 0.18.9 lane (bench/onebit/lane18.sh), fp16, no ZeRO: Adam (torch's), then 1-bit Adam, 0/1 Adam and
#      1-bit LAMB, freeze step half-way through the timed steps (comm.phases: warm-up against compressed steps,
#      bytes and step time); the papers' claim is up to 5x less communication
#   2. DeepSpeed 0.19.8, bf16: ZeRO-1, ZeRO-2, ZeRO-3, and ZeRO-3 with ZeRO++: qwZ (int8 weights), qgZ (int4
#      gradients: on this one node DeepSpeed reduce-scatters them as without it, as dsx predicts; the int4
#      all-to-alls need several nodes), and both with hpZ (a secondary partition over both GPUs: one node, so no
#      fewer bytes, only where they go), 0.19's way to cut what the 1-bit optimizers cut
set -uo pipefail
out=${1:?usage: bench/onebit/h200x2.sh OUT}
source bench/gpu/prelude.sh "${WHEELHOUSE:-.whl}" || exit 1
source bench/onebit/lane18.sh "${WHEELHOUSE18:-.whl18}" || exit 1
res=$out/runs.jsonl
start_log "$out/h200x2.log"
"$lane18" -c "import deepspeed, cupy; print('lane', deepspeed.__version__, 'cupy', cupy.__version__)" >>"$log" 2>&1
keep_copies "$out/copies" "$res"
gpt2=(--model gpt2 --vocab-pad 64 --seq-len 1024 --micro-batch 8 --gpus 2 --steps 20 --warmup 5 --results "$res"
      --timeout 200)
adam=(--ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true)

# 1. the lane: plain data parallel Adam against the three 1-bit optimizers, all fp16 without ZeRO
run 220 python3 -m dsx run "${gpt2[@]}" --python "$lane18" --zero 0 --precision fp16 "${adam[@]}"
for onebit in adam zero-one-adam lamb; do
  run 220 python3 -m dsx run "${gpt2[@]}" --python "$lane18" --onebit "$onebit"
done

# 2. DeepSpeed 0.19.8: the ZeRO stages and ZeRO++
for zero in 1 2 3; do
  run 220 python3 -m dsx run "${gpt2[@]}" --zero "$zero" "${adam[@]}"
done
build_ops QuantizerBuilder
zpp=zero_optimization
run 220 python3 -m dsx run "${gpt2[@]}" --zero 3 "${adam[@]}" --ds-set $zpp.zero_quantized_weights=true
run 220 python3 -m dsx run "${gpt2[@]}" --zero 3 "${adam[@]}" --ds-set $zpp.zero_quantized_gradients=true
run 220 python3 -m dsx run "${gpt2[@]}" --zero 3 "${adam[@]}" --ds-set $zpp.zero_quantized_weights=true \
  --ds-set $zpp.zero_quantized_gradients=true --ds-set $zpp.zero_hpz_partition_size=2
run 220 python3 -m dsx run "${gpt2[@]}" --zero 2 "${adam[@]}" --no-comm-log  # the logger's cost on NCCL

python3 -m dsx report "$res" --all --format markdown >"$out/report.md" 2>>"$log"
python3 - "$res" >>"$log" 2>&1 <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    c, f = r.get("comm") or {}, r["figures"].get("step_time_s") or {}
    pred = (c.get("predicted") or {}).get("bytes_per_step")
    phases = {k: (v["bytes_per_step"], v["step_time_s_median"], len(v["steps"])) for k, v in (c.get("phases") or {}).items()}
    zero = r["ds_config"]["zero_optimization"]
    print("[row]", r["status"], r["ds_config"]["optimizer"]["type"], {k: v for k, v in zero.items() if "bucket" not in k},
          "deepspeed", r["versions"]["deepspeed"], "step", f.get("median"), "comm B/step", c.get("bytes_per_step"),
          "predicted", pred, "phases", phases, (r.get("error") or "")[:200])
EOF
show_log
