#!/bin/bash
# Usage: SCENARIO=long.yaml trainer-perf.sh (perf record and perf stat of a testbed trainer, 4 s)
# perf the trainer of a fixed cut-4 plan on the testbed
OUT=${OUT:-/tmp/pf/out}
. "$(dirname "$0")/testbed-run.sh"
echo trainer pid $P
perf stat -e task-clock,context-switches -p $P -o $OUT/stat-trainer.txt -- sleep 4 &
perf stat -e task-clock,context-switches -p $W -o $OUT/stat-worker.txt -- sleep 4 &
perf record -g -p $P -o $OUT/perf.data -- sleep 4 > /dev/null 2>&1
wait %2 %3 2>/dev/null
wait $B
