#!/usr/bin/env bash
# Races (race.sh) outlive one 10-minute device command: this starts them, one after another, in their own session
# and waits for them, command after command, on the same warm machine. From the repo root on the GPU host:
#     bash bench/peers/autotuner/device.sh OUT WORK MODEL:SEQ:CAP:REPEATS[:dsx-first] ...   # start
#     bash bench/peers/autotuner/device.sh OUT WORK                                           # wait on
# A race resumes from bench/peers/autotuner/MODEL/ when that folder holds an earlier race's files (the parts done
# there are not run again). Either way it returns when WORK/races.done exists or WAIT_S seconds (default 540) have
# passed, leaving in OUT race.tgz (each WORK/MODEL's logs, JSON and JSON-lines files: the tools' results, the
# autotuner's trials, the launches' ran.json) and progress.txt (what ran so far). The races run from WORK/src, a
# copy made at the start, so a later command's checkout cannot change them mid-race.
set -u
out=$1 work=$2
shift 2
source bench/gpu/prelude.sh .whl || exit 1
if [ $# -gt 0 ]; then
  rm -rf "$work" && mkdir -p "$work/src" && cp -r . "$work/src/" || exit 1
  script=""
  for race in "$@"; do
    IFS=: read -r model seq cap repeats order <<<"$race"
    if [ -f "bench/peers/autotuner/$model/walls.jsonl" ]; then
      mkdir -p "$work/$model" && cp -a "bench/peers/autotuner/$model/." "$work/$model/"  # -a: trials keep their times
    fi
    first=""; [ "$order" = dsx-first ] && first="DSX_FIRST=1 "
    script+="${first}bash bench/peers/autotuner/race.sh $work/$model $model $seq $cap $repeats; "
  done
  (cd "$work/src" && setsid nohup bash -c "${script}touch $work/races.done" >"$work/driver.log" 2>&1 </dev/null &)
fi
deadline=$(( $(date +%s) + ${WAIT_S:-540} ))
while [ ! -f "$work/races.done" ] && [ "$(date +%s)" -lt "$deadline" ]; do
  sleep 10
done
mkdir -p "$out"
{
  date -u +%FT%TZ
  [ -f "$work/races.done" ] && echo "races done" || echo "races still running"
  for run in "$work"/*/walls.jsonl; do echo "== $run"; cat "$run"; done 2>/dev/null
  for run in "$work"/*/; do
    [ "$run" = "$work/src/" ] && continue
    echo "== $run"
    grep -h "^+ \|^exit \|^ops: " "$run/race.log" 2>/dev/null | cut -c1-300
    grep -h "INFO\] \[autotuner.py" "$run/autotune.log" 2>/dev/null | cut -c1-300 | tail -8
    tail -c 1500 "$run/sweep.log" 2>/dev/null
    tail -c 800 "$run/remeasure.log" 2>/dev/null
  done
  tail -c 1000 "$work/driver.log" 2>/dev/null
} >"$out/progress.txt"
(cd "$work" && find . -maxdepth 5 -path ./src -prune -o -type f -size -8M \
  \( -name "*.json" -o -name "*.jsonl" -o -name "*.log" -o -name "*.txt" -o -name "*.flags" -o -name "*.done" \
     -o -name "*.same" \) -print0 | tar czf "$out/race.tgz" --null -T -)
cat "$out/progress.txt"
