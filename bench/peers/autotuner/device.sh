#!/usr/bin/env bash
# A race (race.sh) outlives one 10-minute device command: this starts it in its own session and waits for it,
# command after command, on the same warm machine. From the repo root on the GPU host:
#     bash bench/peers/autotuner/device.sh OUT WORK MODEL SEQ CAP [REPEATS]   # start (a copy of this checkout)
#     bash bench/peers/autotuner/device.sh OUT WORK                           # wait on
# Either way it returns when WORK/run/race.done exists or WAIT_S seconds (default 540) have passed, leaving in OUT
# race.tgz (WORK/run's logs, JSON and JSON-lines files: the tools' results, the autotuner's trials, the launches'
# ran.json) and progress.txt (what ran so far). The race runs from WORK/src, a copy made at the start, so a later
# command's checkout cannot change it mid-race.
set -u
out=$1 work=$2
shift 2
source bench/gpu/prelude.sh .whl || exit 1
if [ $# -gt 0 ]; then
  rm -rf "$work" && mkdir -p "$work/src" && cp -r . "$work/src/" || exit 1
  (cd "$work/src" && setsid nohup bash bench/peers/autotuner/race.sh "$work/run" "$@" >"$work/driver.log" 2>&1 \
    </dev/null &)
fi
deadline=$(( $(date +%s) + ${WAIT_S:-540} ))
while [ ! -f "$work/run/race.done" ] && [ "$(date +%s)" -lt "$deadline" ]; do
  sleep 10
done
mkdir -p "$out"
{
  date -u +%FT%TZ
  [ -f "$work/run/race.done" ] && echo "race done" || echo "race still running"
  cat "$work/run/walls.jsonl" 2>/dev/null
  grep -h "^+ \|^exit \|^ops: " "$work/run/race.log" 2>/dev/null | cut -c1-300
  grep -h "INFO\] \[autotuner.py" "$work/run/autotune.log" 2>/dev/null | cut -c1-300 | tail -40
  tail -c 3000 "$work/run/sweep.log" 2>/dev/null
  tail -c 1500 "$work/driver.log" 2>/dev/null
} >"$out/progress.txt"
(cd "$work/run" 2>/dev/null && find . -maxdepth 4 -type f -size -8M \
  \( -name "*.json" -o -name "*.jsonl" -o -name "*.log" -o -name "*.txt" -o -name "*.flags" \) -print0 |
  tar czf "$out/race.tgz" --null -T -)
cat "$out/progress.txt"
