#!/bin/bash
# unequal-workers on one machine: the oracle's sweep once (skipped when OUT/oracle.json is
# there), then REPEATS interleaved rounds: none, sluice and the oracle's best plan from this
# build, then none and sluice from an earlier one (OLD: the planner before the change), each
# build with its own metric store (its first round measures, the later ones plan from it).
# usage (as root, from the project root):
#   OLD=path/to/old/bin/sluice bench/results/planner-trust/rerun-saturation/run.sh OUT_DIR
OUT=$1; REPEATS=${REPEATS:-3}; mkdir -p $OUT; rm -rf $OUT/work-new $OUT/work-old
SC=bench/scenarios/unequal-workers.yaml
DATA=${DATA:-/tmp/sluice-bench-data}
[ -f $OUT/oracle.json ] || build/bin/sluice bench $SC --no-verify --policies oracle \
  --json $OUT/oracle.json --work-dir $OUT/work-oracle --data-dir $DATA 2>>$OUT/bench.log
ORACLE=$(/usr/bin/python3 -c "import json; print(json.load(open('$OUT/oracle.json'))['policies']['oracle']['policy_arg'])")
for i in $(seq 1 $REPEATS); do
  for who in new old; do
    bin=build/bin/sluice; pol=none,sluice,$ORACLE
    [ $who = old ] && bin=$OLD && pol=none,sluice
    $bin bench $SC --no-verify --policies $pol --json $OUT/$who-$i.json \
      --work-dir $OUT/work-$who --data-dir $DATA 2>>$OUT/bench.log
    /usr/bin/python3 -c "
import json;d=json.load(open('$OUT/$who-$i.json'))['policies']
n=d['none']['samples_per_s'];s=d['sluice']['samples_per_s'];o=d.get('$ORACLE',{}).get('samples_per_s')
print('$who', $i, round(n), round(s), round(o) if o else '-', round(s/o,2) if o else '-', d['sluice']['plan'].get('policy_string'), round(d['sluice']['time_to_plan_s'],2), [(round(e['t_s'],1), e['kind']) for e in d['sluice'].get('timeline',[])])"
  done
done
