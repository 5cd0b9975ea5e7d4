#!/bin/bash
# Fixed plans of one scenario under two builds, alternately: each round runs the same
# policies (one `sluice bench`, a fresh testbed) with the old build, then the new, and the
# reverse order in even rounds. What it compares is the runtime (the coordinator's hand-out
# of splits), not a planner: the plans are fixed.
#   OLD=<sluice> NEW=<sluice> ab-fixed.sh SCENARIO POLICIES OUT [ROUNDS]
#   then: summary.py OUT
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
SC=$1; POLICIES=$2; OUT=$3; N=${4:-3}
DATA=${DATA:-/tmp/sluice-bench-data}
mkdir -p "$OUT"
one() {  # name binary round
  "$2" bench "$SC" --no-verify --policies "$POLICIES" --json "$OUT/$1-$3.json" \
    --work-dir "$OUT/runs" --data-dir "$DATA" > "$OUT/$1-$3.log" 2>&1
}
for i in $(seq 1 "$N"); do
  if (( i % 2 == 1 )); then
    one old "${OLD:?}" "$i"; one new "${NEW:?}" "$i"
  else
    one new "$NEW" "$i"; one old "$OLD" "$i"
  fi
done
rm -rf "$OUT/runs"
