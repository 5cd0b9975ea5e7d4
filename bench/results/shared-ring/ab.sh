#!/bin/sh
# Interleaved rounds of the offload bench, an earlier build (OLD) against a later one (NEW),
# alternating which goes first. Usage: ab.sh OLD NEW ROUNDS OUTDIR
# (STEPS, CUTS and RATIOS change the bench's --steps, --cuts and --ratios.)
set -e
OLD=$1; NEW=$2; ROUNDS=$3; OUT=$4
mkdir -p "$OUT"
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then order="old new"; else order="new old"; fi
  for b in $order; do
    if [ "$b" = old ]; then bin=$OLD; else bin=$NEW; fi
    /usr/bin/python3 bench/offload_bench.py --sluice "$bin" --files 'demo-data/**/*.jpg' \
      --steps "${STEPS:-150}" --repeats 1 --cuts "${CUTS:-4,5}" \
      --ratios "${RATIOS:-0.5,0.55,0.6,0.65}" --spill all \
      --json "$OUT/r$r-$b.json" 2>&1 | grep -E "all-local|remote-only \(|best mixed|all trainer CPU"
  done
done
