#!/bin/bash
# Part of bench/results/gather-streams: run from anywhere; BIN is a sluice binary.
# usage: perf-mix.sh BIN OUT [POLICY]   (OUT an absolute folder)
BIN=$1; OUT=$2; POL=${3:-fixed:cut=5,ratio=0.65}
mkdir -p $OUT; cd "$(dirname "$0")/../../.."
taskset -c 1 $BIN worker --listen 127.0.0.1:7792 --threads 1 --data-root $PWD > $OUT/worker.log 2>&1 &
WP=$!; sleep 1
taskset -c 0 $BIN train examples/pipelines/imagenet_train.yaml --files 'demo-data/**/*.jpg' --accelerator-ms 0 --steps 400 --threads 1 --epochs -1 --policy $POL --workers 127.0.0.1:7792 --json $OUT/r.json > $OUT/train.log 2>&1 &
TP=$!; sleep 3
perf record -g -p $TP -o $OUT/perf.data -- sleep 5 > /dev/null 2>&1
wait $TP; kill $WP; wait $WP 2>/dev/null
perf report -i $OUT/perf.data --no-children --sort symbol --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -12
