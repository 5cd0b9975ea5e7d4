#!/bin/bash
# Usage: SCENARIO=long.yaml trainer-perf.sh (perf record and perf stat of a testbed trainer, 4 s)
# perf the trainer of a fixed cut-4 plan on the testbed
BIN=${BIN:-build/bin/sluice}
POL=${POL:-fixed:cut=4,ratio=1.0,read=remote,compress=none,spill=workers}
OUT=${OUT:-/tmp/pf/out}
mkdir -p $OUT
cd "$(dirname "$0")/../../.."
$BIN bench ${SCENARIO:?a copy of bench/scenarios/image-7to21-fast-step.yaml with steps: 2000} --no-verify --policies $POL --json $OUT/r.json --work-dir /tmp/pf/work --data-dir /tmp/pf/data > $OUT/log 2>&1 &
B=$!
for i in $(seq 120); do
  P=$(pgrep -f "sluice train" | head -1)
  [ -n "$P" ] && break; sleep 0.5
done
echo trainer pid $P
sleep 4
W=$(pgrep -f "sluice worker" | head -1)
perf stat -e task-clock,context-switches -p $P -o $OUT/stat-trainer.txt -- sleep 4 &
perf stat -e task-clock,context-switches -p $W -o $OUT/stat-worker.txt -- sleep 4 &
perf record -g -p $P -o $OUT/perf.data -- sleep 4 > /dev/null 2>&1
wait %2 %3 2>/dev/null
wait $B
