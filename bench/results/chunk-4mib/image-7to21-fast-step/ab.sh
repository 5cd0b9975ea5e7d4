#!/bin/bash
# Interleaved rounds of image-7to21-fast-step (none, then sluice), the build before 4 MiB
# chunks (OLD) and after (NEW), alternating which goes first; one metric store per build.
# Usage: ab.sh OLD NEW ROUNDS OUTDIR WORKDIR   (from the repository root)
set -e
OLD=$1; NEW=$2; ROUNDS=$3; OUT=$4; WORK=$5
mkdir -p "$OUT"
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then order="old new"; else order="new old"; fi
  for b in $order; do
    if [ "$b" = old ]; then bin=$OLD; else bin=$NEW; fi
    "$bin" bench bench/scenarios/image-7to21-fast-step.yaml --no-verify --policies none,sluice \
      --json "$OUT/r$r-$b.json" --work-dir "$WORK/store-$b" --data-dir "$WORK/data" \
      > "$OUT/r$r-$b.log" 2>&1
    /usr/bin/python3 -c "
import json; d=json.load(open('$OUT/r$r-$b.json'))['policies']
n=d['none']['samples_per_s']; s=d['sluice']['samples_per_s']
print('r$r $b none %.0f sluice %.0f ratio %.2f' % (n, s, s/n), d['sluice']['plan'].get('policy'))"
  done
done
