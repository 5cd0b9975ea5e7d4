#!/bin/bash
# worker-cpu-ab.sh A B ROUNDS POLICY OUT (OUT absolute): interleaved pairs, trainer on core 0, one worker on core 1, demo data; worker CPU per sample and trainer CPU per sample (process totals)
A=$1; B=$2; N=$3; POL=$4; OUT=$5; mkdir -p $OUT; cd "$(dirname "$0")/../../.."
run() {
  PORT=$((7800 + RANDOM % 100))
  taskset -c 1 $1 worker --listen 127.0.0.1:$PORT --threads 1 --data-root $PWD > $OUT/w.log 2>&1 &
  WP=$!; for i in $(seq 50); do grep -q "listening on" $OUT/w.log && break; sleep 0.1; done
  W0=$(awk '{print $14+$15}' /proc/$WP/stat)
  /usr/bin/time -f "%U %S" -o $OUT/$2.time taskset -c 0 $1 train examples/pipelines/imagenet_train.yaml --files 'demo-data/**/*.jpg' --accelerator-ms 0 --steps ${STEPS:-200} --threads 1 --epochs -1 --policy $POL --workers 127.0.0.1:$PORT --json $OUT/$2.json > /dev/null 2>&1
  W1=$(awk '{print $14+$15}' /proc/$WP/stat)
  kill $WP; wait $WP 2>/dev/null
  /usr/bin/python3 -c "
d=json=__import__('json').load(open('$OUT/$2.json')); s=d['samples']; u,sy=map(float,open('$OUT/$2.time').read().split()[-2:])
print('$2', round(d['steady']['samples_per_s']), 'worker us/sample %.0f'%(($W1-$W0)/100/s*1e6), 'trainer us/sample %.0f'%((u+sy)/s*1e6))"
}
for r in $(seq $N); do
  if [ $((r % 2)) -eq 1 ]; then run $A a$r; run $B b$r; else run $B b$r; run $A a$r; fi
done
