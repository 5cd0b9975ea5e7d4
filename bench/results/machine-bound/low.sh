#!/bin/bash
# Usage: CUT=5 low.sh (perf record of the worker, remote-only on loopback)
# perf record of the worker, remote-only on loopback at cut $CUT
BIN=${BIN:-build/bin/sluice}; CUT=${CUT:-5}; OUT=${OUT:-/tmp/pf/low$CUT}
mkdir -p $OUT; cd "$(dirname "$0")/../../.."
taskset -c 1 $BIN worker --listen 127.0.0.1:7792 --threads 1 --data-root $PWD > $OUT/worker.log 2>&1 &
WP=$!; sleep 1
taskset -c 0 $BIN train examples/pipelines/imagenet_train.yaml --files 'demo-data/**/*.jpg' --accelerator-ms 0 --steps 400 --threads 1 --epochs -1 --policy fixed:cut=$CUT,ratio=1.0 --workers 127.0.0.1:7792 --json $OUT/r.json > $OUT/train.log 2>&1 &
TP=$!; sleep 3
perf record -g -p $WP -o $OUT/perf.data -- sleep 5 > /dev/null 2>&1
wait $TP; kill $WP; wait $WP 2>/dev/null
/usr/bin/python3 -c "import json; d=json.load(open('$OUT/r.json')); print('rate', d.get('steady',d)['samples_per_s'])"
