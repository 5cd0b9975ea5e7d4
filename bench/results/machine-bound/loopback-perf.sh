#!/bin/bash
# perf record -g of one side of a remote-only run on loopback at cut $CUT (trainer on core 0,
# worker on core 1). Usage: WHO=trainer|worker CUT=5 loopback-perf.sh   (BIN, OUT optional)
WHO=${WHO:-trainer}; BIN=${BIN:-build/bin/sluice}; CUT=${CUT:-5}; OUT=${OUT:-/tmp/pf/$WHO$CUT}
PORT=${PORT:-7791}
mkdir -p $OUT; cd "$(dirname "$0")/../../.."
taskset -c 1 $BIN worker --listen 127.0.0.1:$PORT --threads 1 --data-root $PWD > $OUT/worker.log 2>&1 &
WP=$!; sleep 1
taskset -c 0 $BIN train examples/pipelines/imagenet_train.yaml --files 'demo-data/**/*.jpg' --accelerator-ms 0 --steps 400 --threads 1 --epochs -1 --policy fixed:cut=$CUT,ratio=1.0 --workers 127.0.0.1:$PORT --json $OUT/r.json > $OUT/train.log 2>&1 &
TP=$!; sleep 3
case $WHO in trainer) TARGET=$TP ;; worker) TARGET=$WP ;; *) echo "WHO is trainer or worker" >&2; exit 2 ;; esac
perf record -g -p $TARGET -o $OUT/perf.data -- sleep 5 > /dev/null 2>&1
wait $TP; kill $WP; wait $WP 2>/dev/null
/usr/bin/python3 -c "import json; d=json.load(open('$OUT/r.json')); print('rate', d.get('steady',d)['samples_per_s'])"
