#!/bin/bash
# Usage: SCENARIO=long.yaml worker-switches.sh (perf record -e sched:sched_switch of the worker, 3 s)
OUT=${OUT:-/tmp/pf/sw}
. "$(dirname "$0")/testbed-run.sh"
perf record -e sched:sched_switch -g -p $W -o $OUT/sw.data -- sleep 3 >/dev/null 2>&1
wait $B; tail -1 $OUT/log
