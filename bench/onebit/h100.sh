#!/usr/bin/env bash
# Issue 15 on one GPU (kind nvidia-h100-x1), from the repo root, with both wheelhouses carried (.whl: DeepSpeed
# 0.19.8, .whl18: 0.18.9; bench/gpu/wheelhouse.sh .whl && bench/gpu/wheelhouse.sh .whl18 0.18.9):
#     bash bench/onebit/h100.sh $OUT
# About 3 minutes (most of it process starts and deepspeed.initialize; no JIT build: torch's fused AdamW, and the
# 1-bit optimizers are Python + cupy). Rows go to $OUT/runs.jsonl, the log to $OUT/h100.log, the report to
# $OUT/report.md:
#   1. what the comms logger costs: GPT-2 124M ZeRO-2 bf16 with it (dsx's default) and with --no-comm-log
#      (DeepSpeed synchronises the GPU after every collective while it logs; one GPU: its collectives are on a
#      group of one, so this is the synchronisation's cost, not the network's)
#   2. 1-bit Adam through the DeepSpeed 0.18.9 lane (bench/onebit/lane18.sh): world size 1, fp16, ZeRO 0,
#      freeze_step = warm-up + half the timed steps (dsx run --onebit), so the row has warm-up and compressed steps
#      (comm.phases); then 0/1 Adam and 1-bit LAMB the same way
set -uo pipefail
out=${1:?usage: bench/onebit/h100.sh OUT}
source bench/gpu/prelude.sh "${WHEELHOUSE:-.whl}" || exit 1
source bench/onebit/lane18.sh "${WHEELHOUSE18:-.whl18}" || exit 1
res=$out/runs.jsonl
start_log "$out/h100.log"
"$lane18" -c "import deepspeed, cupy; print('lane', deepspeed.__version__, deepspeed.__file__, 'cupy', cupy.__version__)" \
  >>"$log" 2>&1
gpt2=(--model gpt2 --vocab-pad 64 --seq-len 1024 --micro-batch 8 --gpus 1 --results "$res" --timeout 150)

run 170 python3 -m dsx run "${gpt2[@]}" --zero 2 --steps 15 --warmup 5 "${adam[@]}"
run 170 python3 -m dsx run "${gpt2[@]}" --zero 2 --steps 15 --warmup 5 "${adam[@]}" --no-comm-log
for onebit in adam zero-one-adam lamb; do
  run 200 python3 -m dsx run "${gpt2[@]}" --python "$lane18" --onebit "$onebit" --steps 16 --warmup 4
done
python3 -m dsx report "$res" --all --format markdown >"$out/report.md" 2>>"$log"
python3 - "$res" >>"$log" 2>&1 <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    c, f = r.get("comm") or {}, r["figures"].get("step_time_s") or {}
    phases = {k: (v["bytes_per_step"], v["step_time_s_median"], len(v["steps"])) for k, v in (c.get("phases") or {}).items()}
    print("[row]", r["status"], r["ds_config"]["optimizer"]["type"], "zero", r["ds_config"]["zero_optimization"]["stage"],
          "deepspeed", r["versions"]["deepspeed"], "step time", f.get("median"), "comm B/step", c.get("bytes_per_step"),
          "phases", phases, (r.get("error") or "")[:200])
EOF
show_log
