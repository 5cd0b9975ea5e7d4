#!/bin/bash
# Interleaved whole-scenario runs (the suite's `run`, 3 rounds each) of two builds on the
# scenarios whose store runs had all-local checks.
cd "$(dirname "$0")/../../.."
REFS=bench/results/random-v2-seed1-oracle-23-1f49be8,bench/results/random-v2-seed1-oracle-21-23-328dcd0,bench/results/random-v2-seed1-8a612bf,bench/results/random-v2-seed1-3b2e2ad
OUT=$1; OLD=$2; NEW=$3  # usage: ab.sh OUTDIR OLD_BIN NEW_BIN (from anywhere)
k=0
for sc in random-17-job-s random-14-job-m random-03-job-l random-12-image; do
  k=$((k+1))
  if [ $((k % 2)) -eq 1 ]; then order="old new"; else order="new old"; fi
  for b in $order; do
    bin=$OLD; [ $b = new ] && bin=$NEW
    /usr/bin/python3 bench/random_suite.py run bench/scenarios/random-v2 --sluice $bin --only $sc --policies none,sluice --repeats 3 --oracle-plan-from $REFS --fastflow-plan-from $REFS --results $OUT/$b --work-dir /tmp/abw-$b --data-dir /tmp/sluice-bench-data > /dev/null 2>&1
    echo "$sc $b done $(date +%T)"
  done
done
