#!/bin/bash
# Two builds' `sluice` on the five scenarios whose runs from the metric store had checked
# most, each a whole `random_suite.py run --repeats 3` (a cold run, then two from the store,
# beside all-local and the oracle's and FastFlow's plans), in rounds of alternating order:
#   OLD=<sluice> NEW=<sluice> ab.sh OUT ROUNDS
#   then: compare.py OUT (new / old per run), random_suite.py pool ... --results OUT/new-1,...
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
OUT=$1; N=${2:-2}
REFS=bench/results/random-v2-seed1-oracle-23-1f49be8,bench/results/random-v2-seed1-oracle-21-23-328dcd0,bench/results/random-v2-seed1-8a612bf,bench/results/random-v2-seed1-3b2e2ad
ONLY=random-17-job-s,random-00-image,random-12-image,random-14-job-m,random-20-image
one() { # new|old binary round
  /usr/bin/python3 bench/random_suite.py run bench/scenarios/random-v2 --sluice "$2" \
    --policies none,sluice --repeats 3 --oracle-plan-from $REFS --fastflow-plan-from $REFS \
    --results "$OUT/$1-$3" --only $ONLY --work-dir "$OUT/work" \
    --data-dir "${DATA:-/tmp/sluice-bench-data}" > "$OUT/$1-$3.log" 2>&1
}
for r in $(seq 1 "$N"); do
  if (( r % 2 == 1 )); then one new "${NEW:?}" "$r"; one old "${OLD:?}" "$r"
  else one old "$OLD" "$r"; one new "$NEW" "$r"; fi
done
rm -rf "$OUT/work"
