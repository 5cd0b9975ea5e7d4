#!/bin/bash
# five interleaved repeats of unequal-workers: none, sluice (store after the first), the oracle's plan
# usage (as root, from the project root): bench/results/planner-trust/rerun-recv-fit/run.sh OUT_DIR
OUT=$1; mkdir -p $OUT; rm -rf $OUT/work
for i in 1 2 3 4 5; do
  build/bin/sluice bench bench/scenarios/unequal-workers.yaml --no-verify \
    --policies none,sluice,fixed:cut=4,ratio=1.0,read=remote --json $OUT/rep-$i.json \
    --work-dir $OUT/work --data-dir ${DATA:-/tmp/sluice-bench-data} 2>>$OUT/bench.log
  /usr/bin/python3 -c "
import json;d=json.load(open('$OUT/rep-$i.json'))['policies']
n=d['none']['samples_per_s'];s=d['sluice']['samples_per_s'];o=d['fixed:cut=4,ratio=1.0,read=remote']['samples_per_s']
print($i, round(n), round(s), round(o), round(s/o,2), d['sluice']['plan'].get('policy_string'), [ (round(e['t_s'],1), e['kind']) for e in d['sluice'].get('timeline',[])])"
done
