#!/bin/bash
# Usage: SCENARIO=long.yaml worker-switches.sh (perf record -e sched:sched_switch of the worker, 3 s)
BIN=${BIN:-build/bin/sluice}
POL=${POL:-fixed:cut=4,ratio=1.0,read=remote,compress=none,spill=workers}
OUT=${OUT:-/tmp/pf/sw}
mkdir -p $OUT; cd "$(dirname "$0")/../../.."
$BIN bench ${SCENARIO:?a copy of bench/scenarios/image-7to21-fast-step.yaml with steps: 2000} --no-verify --policies $POL --json $OUT/r.json --work-dir /tmp/pf/work --data-dir /tmp/pf/data > $OUT/log 2>&1 &
B=$!
for i in $(seq 120); do P=$(pgrep -f "sluice train" | head -1); [ -n "$P" ] && break; sleep 0.5; done
sleep 4
W=$(pgrep -f "sluice worker" | head -1)
perf record -e sched:sched_switch -g -p $W -o $OUT/sw.data -- sleep 3 >/dev/null 2>&1
wait $B; tail -1 $OUT/log
