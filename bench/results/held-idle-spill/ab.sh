#!/bin/bash
# Rounds of one scenario (default random-17) with two builds' `sluice` and a fixed plan, each
# run its own `sluice bench` on a fresh testbed and an empty metric store; odd rounds run
#   old sluice, new sluice, fixed        and even rounds the reverse order.
#   OLD=<sluice> NEW=<sluice> FIXED=<fixed:...> ab.sh OUT ROUNDS [SCENARIO]
#   then: summary.py OUT
# With KEEP=1 each run's `sluice train` report is kept as OUT/NAME-ROUND.train.json (the
# per-step progress and the timeline, for switch.py and phases.py).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
OUT=$1; N=${2:-4}; SCENARIO=${3:-bench/scenarios/random-v2/random-17-job-s.yaml}
mkdir -p "$OUT"
one() {  # name binary policy round
  rm -rf "$OUT/runs/metric-store"
  "$2" bench "$SCENARIO" --no-verify --policies "$3" --json "$OUT/$1-$4.json" \
    --work-dir "$OUT/runs" --data-dir "${DATA:-/tmp/sluice-bench-data}" > "$OUT/$1-$4.log" 2>&1
  if [[ -n "${KEEP:-}" ]]; then mv "$OUT/runs/train-0.json" "$OUT/$1-$4.train.json"; fi
}
for i in $(seq 1 "$N"); do
  if (( i % 2 == 1 )); then
    one old "${OLD:?}" sluice "$i"; one new "${NEW:?}" sluice "$i"; one fixed "$NEW" "${FIXED:?}" "$i"
  else
    one fixed "$NEW" "$FIXED" "$i"; one new "$NEW" sluice "$i"; one old "$OLD" sluice "$i"
  fi
done
rm -rf "$OUT/runs"
