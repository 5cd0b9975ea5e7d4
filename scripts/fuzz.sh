#!/usr/bin/env bash
# Runs the libFuzzer targets of a fuzz build (`make fuzz`; docs/fuzzing.md).
#   scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]     (default: every target in fuzz/corpus/)
# Each target runs SECONDS on a working copy of fuzz/corpus/<target>/ (BUILD_DIR/corpus/<target>/,
# kept between runs; the committed seeds are only read). A crash, a leak, a timeout or an
# out-of-memory stops the target and leaves the input in BUILD_DIR/crashes/<target>/; the
# script then fails after running the remaining targets. The last lines of each run
# (executions, corpus size) are kept in BUILD_DIR/fuzz-logs/<target>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$1
seconds=$2
shift 2
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for d in fuzz/corpus/*/; do targets+=("$(basename "$d")"); done
fi

failed=()
for t in "${targets[@]}"; do
  bin=$build/fuzz/fuzz_$t
  work=$build/corpus/$t
  crashes=$build/crashes/$t
  log=$build/fuzz-logs/$t.log
  mkdir -p "$work" "$crashes" "$(dirname "$log")"
  dict=()
  [ -f "fuzz/dict/$t.dict" ] && dict=(-dict="fuzz/dict/$t.dict")
  echo "fuzz: $t for ${seconds}s"
  # rss/malloc limits: a parser asked to allocate more than 1 GiB for an input of a few KB is
  # a finding (the decoders' pixel limit, the spec's value bounds); -timeout: one input
  # taking over 10 s is a hang.
  if "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$crashes/" "${dict[@]}" \
      "$work" "fuzz/corpus/$t" > "$log" 2>&1; then
    grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$log" | tr '\n' ' '
    echo
  else
    failed+=("$t")
    tail -n 60 "$log"
    echo "fuzz: $t FAILED; input(s) in $crashes/, log in $log"
  fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: failures in: ${failed[*]}"
  exit 1
fi
echo "fuzz: ${#targets[@]} targets ran ${seconds}s each without a finding"
