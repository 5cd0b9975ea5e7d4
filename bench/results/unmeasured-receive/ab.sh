#!/bin/bash
# ab.sh OLD NEW ROUNDS OUT SCENARIO...: per round and scenario, interleaved, a cold `sluice`
# run and one from its store (store emptied first) with each build, then `none` once (with NEW).
OLD=$1; NEW=$2; R=$3; OUT=$4; shift 4
WORK=${WORK:-/tmp/ab-unmeasured}
mkdir -p "$OUT"
for i in $(seq 1 "$R"); do
  for s in "$@"; do
    n=$(basename "$s" .yaml)
    for b in old new; do
      bin=$OLD; [ $b = new ] && bin=$NEW
      rm -rf "$WORK/metric-store"
      "$bin" bench "$s" --no-verify --policies sluice,sluice --json "$OUT/$n-$b-$i.json" \
        --work-dir "$WORK" --data-dir /tmp/sluice-bench-data > "$OUT/$n-$b-$i.log" 2>&1
    done
    "$NEW" bench "$s" --no-verify --policies none --json "$OUT/$n-none-$i.json" \
      --work-dir "$WORK" --data-dir /tmp/sluice-bench-data > "$OUT/$n-none-$i.log" 2>&1
  done
done
/usr/bin/python3 "$(dirname "$0")/ab_paired.py" --rates "$OUT"
