#!/bin/bash
# The loaded-machine check of the process tests (docs/testing.md, "On a loaded machine"):
# runs the tests labelled `integration` (real `sluice` processes, workers, the testbed)
# REPEATS times in a row, stopping at the first failure, while a load of LOAD busy processes
# (default: one per CPU) competes for every core at the same priority, as a build beside
# them would. Every load process is bounded in time and killed on exit.
#
#   scripts/loaded-check.sh [BUILD_DIR] [REPEATS]      (defaults: build, 20)
#   LOAD=4 CTEST_ARGS="-R Autoplan" scripts/loaded-check.sh build 5
set -euo pipefail

BUILD=${1:-build}
REPEATS=${2:-20}
LOAD=${LOAD:-$(nproc)}
if [ ! -f "$BUILD/CTestTestfile.cmake" ]; then
  echo "loaded-check: no ctest tree in '$BUILD' (run 'make build' first)" >&2
  exit 2
fi
# A bound on the load: long enough for the repeats (a round takes minutes on 2 cores).
LIMIT_S=$((REPEATS * 300 + 300))
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
for _ in $(seq "$LOAD"); do
  timeout "$LIMIT_S" sh -c 'while :; do :; done' &
  pids+=($!)
done
echo "loaded-check: $LOAD busy processes beside the integration tests, $REPEATS rounds"
start=$(date +%s)
cd "$BUILD"
# shellcheck disable=SC2086
ctest -L integration --repeat "until-fail:$REPEATS" ${CTEST_ARGS:-} --output-on-failure
echo "loaded-check: $REPEATS rounds passed in $(( $(date +%s) - start )) s"
