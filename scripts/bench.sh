#!/usr/bin/env bash
# The local benchmarks (docs/BENCHMARKS.md): throughput against the PyTorch DataLoader,
# scaling from 1 to 2 threads, engine overhead against a plain loop, and memory over epochs.
# Builds nothing (`make bench` builds first). Generates the data once under bench-data/,
# runs every measurement BENCH_REPEATS times (interleaved; medians), prints the ratios and
# writes bench/results/{throughput,engine_overhead,memory}.json.
#   scripts/bench.sh [path/to/sluice]
# Environment: BENCH_DATA (default bench-data), BENCH_COUNT (images, default 1600),
# BENCH_REPEATS (default 3), BENCH_SKIP_TORCH=1 (skip the PyTorch baseline).
# Plain runs, no CPU pinning: the numbers are those of this machine as it is.
set -euo pipefail

SLUICE=${1:-build/bin/sluice}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PLAIN_LOOP="$(dirname "$SLUICE")/sluice_plain_loop"
PYTHON=/usr/bin/python3

for bin in "$SLUICE" "$PLAIN_LOOP"; do
  if [ ! -x "$bin" ]; then
    echo "bench: no binary at '$bin' (run 'make bench', or pass the sluice binary's path)" >&2
    exit 2
  fi
done

extra=()
if [ "${BENCH_SKIP_TORCH:-0}" = 1 ]; then extra+=(--skip-torch); fi

exec "$PYTHON" "$ROOT/bench/run_benchmarks.py" \
  --sluice "$SLUICE" --plain-loop "$PLAIN_LOOP" \
  --pipeline "$ROOT/examples/pipelines/imagenet_train.yaml" \
  --data "${BENCH_DATA:-bench-data}" --count "${BENCH_COUNT:-1600}" \
  --repeats "${BENCH_REPEATS:-3}" --results "$ROOT/bench/results" "${extra[@]}"
