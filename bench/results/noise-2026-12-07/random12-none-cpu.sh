#!/bin/bash
P=$1; TAG=$2; BIN=${3:-${BIN:-build/bin/sluice}}
cd "$(dirname "$0")/../../..";  rm -rf ${WORK:-/tmp/r12-w}/metric-store
($BIN bench bench/scenarios/random-v2/random-12-image.yaml --no-verify --policies $P --json ${OUT:-/tmp/r12}/f-$TAG.json --work-dir ${WORK:-/tmp/r12-w} --data-dir /tmp/sluice-bench-data > ${OUT:-/tmp/r12}/f-$TAG.log 2>&1 &)
for i in $(seq 400); do PID=$(pgrep -f "sluice train" | head -1); [ -n "$PID" ] && break; sleep 0.02; done
: > ${OUT:-/tmp/r12}/f-$TAG.flt
while [ -d /proc/$PID ]; do echo "$(date +%s.%N) $(awk '{print $10, $14, $15}' /proc/$PID/stat 2>/dev/null)" >> ${OUT:-/tmp/r12}/f-$TAG.flt; sleep 0.25; done
sleep 1; cp ${WORK:-/tmp/r12-w}/train-0.json ${OUT:-/tmp/r12}/f-$TAG.train.json
