#!/bin/bash
# One random-17 run of POLICY; with NICE=1 the trainer's local pipeline threads (sluice-map-*,
# sluice-prefetch) are reniced to +10 in their first 2 s, so that its receiving threads win
# the CPU whenever both can run:   BIN=<sluice binary> [NICE=1] nice.sh POLICY OUT TAG
set -uo pipefail
cd "$(git rev-parse --show-toplevel)"
POL=$1; OUT=$2; TAG=$3; mkdir -p "$OUT"
"${BIN:?}" bench bench/scenarios/random-v2/random-17-job-s.yaml --no-verify --policies "$POL" \
  --json "$OUT/$TAG.json" --work-dir "$OUT/work-$TAG" --data-dir "${DATA:-/tmp/sluice-bench-data}" > "$OUT/$TAG.log" 2>&1 &
B=$!
if [ "${NICE:-0}" = 1 ]; then
  NAME=$(basename "$BIN")
  P=; for i in $(seq 200); do P=$(pgrep -f "$NAME train" | head -1); [ -n "$P" ] && break; sleep 0.05; done
  for k in $(seq 8); do
    sleep 0.25
    for t in /proc/"$P"/task/*; do
      case "$(cat "$t/comm" 2>/dev/null)" in sluice-map*|sluice-prefetch*) renice -n 10 -p "$(basename "$t")" >/dev/null 2>&1;; esac
    done
  done
fi
wait $B
