#!/bin/bash
# Interleaved A/B of two sluice builds over some scenarios of the randomized suite, one metric
# store per build: ab.sh OLD_BINARY NEW_BINARY WORK_DIR SCENARIO... (from the repository root).
# The reports go to bench/results/spill-before-check/{old,new}; the table:
#   random_suite.py table bench/scenarios/random-v2 --results .../old --reference $REFS --beside
set -u
OLD=$1 NEW=$2 WORK=$3
shift 3
REFS=bench/results/random-v2-seed1-oracle-23-1f49be8,bench/results/random-v2-seed1-oracle-21-23-328dcd0,bench/results/random-v2-seed1-8a612bf,bench/results/random-v2-seed1-3b2e2ad
OUT=bench/results/spill-before-check
for s in "$@"; do
  for b in old new; do
    bin=$OLD
    [ "$b" = new ] && bin=$NEW
    /usr/bin/python3 bench/random_suite.py run bench/scenarios/random-v2 --sluice "$bin" \
      --policies none,sluice --repeats 3 --oracle-plan-from $REFS --fastflow-plan-from $REFS \
      --results $OUT/$b --work-dir "$WORK/W-$b" --data-dir /tmp/sluice-bench-data --only "$s" \
      > "$WORK/$s-$b.log" 2>&1
    echo "$s $b rc=$? $(date +%T)"
  done
done
