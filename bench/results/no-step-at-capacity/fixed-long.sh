#!/bin/bash
# One long random-17 run of POLICY (a fixed plan, or sluice) with the trainer's and worker's CPU
# from their /proc stat over 10 s of steady state (8 s after the trainer starts):
#   BIN=<sluice binary> fixed-long.sh POLICY OUT_DIR
set -euo pipefail
POL=$1; OUT=$2; mkdir -p "$OUT"
cd "$(git rev-parse --show-toplevel)"
BIN=${BIN:?}; NAME=$(basename "$BIN")
"$BIN" bench bench/results/no-step-at-capacity/random-17-long.yaml --no-verify --policies "$POL" \
  --json "$OUT/r.json" --work-dir "$OUT/work" --data-dir "${DATA:-/tmp/sluice-bench-data}" > "$OUT/log" 2>&1 &
B=$!
P=; for i in $(seq 240); do P=$(pgrep -f "$NAME train" | head -1 || true); [ -n "$P" ] && break; sleep 0.5; done
sleep 8
W=$(pgrep -f "$NAME worker" | head -1)
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
p0=$(cpu "$P"); w0=$(cpu "$W"); sleep 10; p1=$(cpu "$P"); w1=$(cpu "$W")
echo "trainer $((p1 - p0)) worker $((w1 - w0)) ticks (100 a second) over 10 s"
wait $B
