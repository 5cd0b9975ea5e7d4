#!/bin/bash
# Two builds of sluice, alternately, one `sluice` run each on a scenario; each build keeps its
# own work directory (and metric store) under OUT:
#   OLD=<binary> NEW=<binary> ab.sh SCENARIO.yaml OUT ROUNDS    then: summary.py OUT
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
SC=$1; OUT=$2; N=${3:-3}
DATA=${DATA:-/tmp/sluice-bench-data}
mkdir -p "$OUT"
for i in $(seq 1 "$N"); do
  for b in old new; do
    BIN=${OLD:?}; [ "$b" = new ] && BIN=${NEW:?}
    "$BIN" bench "$SC" --no-verify --policies sluice --json "$OUT/$b-$i.json" \
      --work-dir "$OUT/work-$b" --data-dir "$DATA" > "$OUT/$b-$i.log" 2>&1
  done
done
