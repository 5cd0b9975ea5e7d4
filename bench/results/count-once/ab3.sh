#!/bin/bash
# Rounds of the offload bench at cut 5 for several builds, the order rotating from round to
# round. Usage (from anywhere): ab3.sh OUT ROUNDS BIN...   (needs demo-data/, `make demo`)
OUT=$(mkdir -p "$1" && cd "$1" && pwd); ROUNDS=$2; shift 2; BINS=("$@"); n=${#BINS[@]}
cd "$(dirname "$0")/../../.."
for r in $(seq "$ROUNDS"); do
  for k in $(seq 0 $((n - 1))); do
    b=${BINS[$(( (k + r) % n ))]}
    /usr/bin/python3 bench/offload_bench.py --sluice "$b" --files 'demo-data/**/*.jpg' \
      --steps 150 --repeats 1 --cuts 5 --ratios 0.5,0.55,0.6 --spill all \
      --json "$OUT/r$r-$(basename "$b").json" > "$OUT/r$r-$(basename "$b").txt" 2>&1
  done
done
