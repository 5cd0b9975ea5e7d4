#!/bin/bash
# ab.sh SCENARIO ROUNDS OUT OLD NEW [extra policies for NEW's third call]
S=$1; R=$2; OUT=$3; OLD=$4; NEW=$5; EXTRA=$6
mkdir -p $OUT
for i in $(seq 1 $R); do
  rm -rf ${WORK:-/tmp/exp-w}/metric-store; $OLD bench $S --no-verify --policies sluice,sluice --json $OUT/old-$i.json --work-dir ${WORK:-/tmp/exp-w} --data-dir /tmp/sluice-bench-data > $OUT/old-$i.log 2>&1
  rm -rf ${WORK:-/tmp/exp-w}/metric-store; $NEW bench $S --no-verify --policies sluice,sluice --json $OUT/new-$i.json --work-dir ${WORK:-/tmp/exp-w} --data-dir /tmp/sluice-bench-data > $OUT/new-$i.log 2>&1
  if [ -n "$EXTRA" ]; then
    $NEW bench $S --no-verify --policies $EXTRA --json $OUT/ref-$i.json --work-dir ${WORK:-/tmp/exp-w} --data-dir /tmp/sluice-bench-data > $OUT/ref-$i.log 2>&1
  fi
done
/usr/bin/python3 - $OUT $R <<'PY'
import json,sys,glob
out,R=sys.argv[1],int(sys.argv[2])
for i in range(1,R+1):
    row=[]
    for k in ['old','new','ref']:
        try: d=json.load(open(f'{out}/{k}-{i}.json'))
        except Exception: continue
        for p,v in d['policies'].items():
            pl=v['plan'] if isinstance(v.get('plan'),dict) else {}
            row.append(f"{k}:{p[:40]}={round(v.get('samples_per_s',0))}" + (f"[{pl.get('cut')},{round(pl.get('ratio',0),2)},{pl.get('compression')}]" if p=='sluice' else ''))
    print(i, ' '.join(row))
PY
