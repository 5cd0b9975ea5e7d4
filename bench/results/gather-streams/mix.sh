#!/bin/bash
# Part of bench/results/gather-streams: run from anywhere; BIN is a sluice binary.
# usage: mix.sh BIN policy...   prints rate, batches_in_place/batches, trainer cpu
BIN=$1; shift
cd "$(dirname "$0")/../../.."
taskset -c 1 $BIN worker --listen 127.0.0.1:7791 --threads 1 --data-root $PWD > ${TMPDIR:-/tmp}/mix-w.log 2>&1 &
WP=$!; sleep 1
for pol in "$@"; do
  /usr/bin/time -f "%U %S" -o ${TMPDIR:-/tmp}/mix-time.txt taskset -c 0 $BIN train examples/pipelines/imagenet_train.yaml --files 'demo-data/**/*.jpg' --accelerator-ms 0 --steps 150 --threads 1 --epochs -1 --policy $pol --workers 127.0.0.1:7791 --json ${TMPDIR:-/tmp}/mix-r.json > ${TMPDIR:-/tmp}/mix-t.log 2>&1
  /usr/bin/python3 -c "
import json; d=json.load(open('${TMPDIR:-/tmp}/mix-r.json')); u,s=open('${TMPDIR:-/tmp}/mix-time.txt').read().split()
print('$pol', round(d['steady']['samples_per_s']), 'in_place', d.get('batches_in_place'), 'of', d.get('steps'), 'local', d['places']['local'], 'cpu', round(float(u)+float(s),2))"
done
kill $WP; wait $WP 2>/dev/null
