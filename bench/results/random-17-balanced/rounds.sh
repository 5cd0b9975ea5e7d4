#!/bin/bash
# Rounds of random-17 with the policies in POLICIES (comma-separated, run in that order in one
# `sluice bench`, each round on a fresh testbed and an empty metric store):
#   BIN=<sluice binary> POLICIES=... rounds.sh OUT ROUNDS        then: summary.py OUT/*.json
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
OUT=$1; N=${2:-2}; mkdir -p "$OUT"
for i in $(seq 1 "$N"); do
  rm -rf "$OUT/runs/metric-store"
  "${BIN:?}" bench bench/scenarios/random-v2/random-17-job-s.yaml --no-verify --policies "${POLICIES:?}" \
    --json "$OUT/r$i.json" --work-dir "$OUT/runs" --data-dir "${DATA:-/tmp/sluice-bench-data}" > "$OUT/r$i.log" 2>&1
done
