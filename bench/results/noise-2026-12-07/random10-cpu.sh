#!/bin/bash
# cpu.sh POLICY TAG: run random-10 with POLICY; sample the trainer's process CPU (utime+stime, all threads) every 0.2 s
P=$1; TAG=$2
cd "$(dirname "$0")/../../.."
(${BIN:-build/bin/sluice} bench bench/scenarios/random-v2/random-10-job-t.yaml --no-verify --policies $P --json ${OUT:-/tmp/r10}/c-$TAG.json --work-dir ${WORK:-/tmp/r10-w} --data-dir /tmp/sluice-bench-data > ${OUT:-/tmp/r10}/c-$TAG.log 2>&1 &)
for i in $(seq 400); do PID=$(pgrep -f "sluice train" | head -1); [ -n "$PID" ] && break; sleep 0.02; done
: > ${OUT:-/tmp/r10}/c-$TAG.cpu
while [ -d /proc/$PID ]; do echo "$(date +%s.%N) $(awk '{print $14+$15}' /proc/$PID/stat 2>/dev/null)" >> ${OUT:-/tmp/r10}/c-$TAG.cpu; sleep 0.2; done
sleep 1; cp ${WORK:-/tmp/r10-w}/train-0.json ${OUT:-/tmp/r10}/c-$TAG.train.json
