#!/bin/bash
# Usage: POLS="none sluice none sluice" tie.sh (perf stat of the trainer of random-09, 10 s)
# trainer CPU per sample and rate, none vs sluice, on random-09
BIN=${BIN:-build/bin/sluice}
OUT=${OUT:-/tmp/pf/tie}
mkdir -p $OUT; cd "$(dirname "$0")/../../.."
for pol in ${POLS:-none sluice none sluice}; do
$BIN bench bench/scenarios/random-v2/random-09-job-m.yaml --no-verify --policies $pol --json $OUT/$pol.json --work-dir /tmp/pf/work9 --data-dir /tmp/sluice-bench-data > $OUT/log 2>&1 &
B=$!
for i in $(seq 200); do P=$(pgrep -f "sluice train" | head -1); [ -n "$P" ] && break; sleep 0.2; done
sleep 3
perf stat -e task-clock,context-switches,cpu-migrations -p $P -o $OUT/stat.txt -- sleep 10 >/dev/null 2>&1
wait $B
/usr/bin/python3 -c "
import json,re; d=json.load(open('$OUT/$pol.json'))['policies']['$pol']
s=open('$OUT/stat.txt').read()
tc=float(re.search(r'([\d.,]+) msec task-clock',s).group(1).replace(',',''))
cs=int(re.search(r'([\d,]+)\s+context-switches',s).group(1).replace(',',''))
r=d['samples_per_s']
print('$pol rate %.0f stall %.4f cpu/sample %.1f us sw/sample %.2f' % (r, d['stall_fraction'], tc*1000/(r*10), cs/(r*10)))"
done
