#!/bin/bash
# Interleaved pairs of one fixed plan, trainer on core 0 and one worker on core 1, with the
# demo's data. Usage: mixed-ab.sh A B ROUNDS POLICY OUT (OUT an absolute path; STEPS, 200)
A=$1; B=$2; N=$3; POL=$4; OUT=$5; mkdir -p "$OUT"; cd "$(dirname "$0")/../../.."
run() { # bin tag
  PORT=$((7800 + RANDOM % 100))
  taskset -c 1 $1 worker --listen 127.0.0.1:$PORT --threads 1 --data-root $PWD > $OUT/w.log 2>&1 &
  WP=$!; for i in $(seq 50); do grep -q "listening on" $OUT/w.log && break; sleep 0.1; done
  taskset -c 0 $1 train examples/pipelines/imagenet_train.yaml --files 'demo-data/**/*.jpg' --accelerator-ms 0 --steps ${STEPS:-200} --threads 1 --epochs -1 --policy $POL --workers 127.0.0.1:$PORT --json $OUT/$2.json > /dev/null 2>&1
  kill $WP; wait $WP 2>/dev/null
  /usr/bin/python3 -c "import json; d=json.load(open('$OUT/$2.json')); print('$2', round(d.get('steady',d)['samples_per_s']))"
}
for r in $(seq $N); do
  if [ $((r % 2)) -eq 1 ]; then run $A a$r; run $B b$r; else run $B b$r; run $A a$r; fi
done
