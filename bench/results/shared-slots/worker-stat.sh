#!/bin/bash
# One run of a fixed plan with the worker under `perf stat`: the trainer on core 0 (one
# pipeline thread), one `sluice worker --threads 1` on core 1, 200 steps of the demo's data,
# accelerator step 0. Prints the rate, where the samples were made, the worker's CPU per
# sample it delivered and the batches that were views.
# Usage (from the repository root): worker-stat.sh BIN TAG   (POL: the plan, default
# fixed:cut=5,ratio=1.0; OUT: the folder, default /tmp/wstat)
BIN=$1; TAG=$2; OUT=${OUT:-/tmp/wstat}; mkdir -p "$OUT"
PORT=$((7800 + RANDOM % 100))
taskset -c 1 perf stat -e task-clock,page-faults,context-switches -o "$OUT/$TAG.perf" \
  "$BIN" worker --listen 127.0.0.1:$PORT --threads 1 --data-root "$PWD" > "$OUT/w.log" 2>&1 &
WP=$!
for i in $(seq 50); do grep -q "listening on" "$OUT/w.log" && break; sleep 0.1; done
taskset -c 0 "$BIN" train examples/pipelines/imagenet_train.yaml --files 'demo-data/**/*.jpg' \
  --accelerator-ms 0 --steps 200 --threads 1 --epochs -1 --policy "${POL:-fixed:cut=5,ratio=1.0}" \
  --workers 127.0.0.1:$PORT --json "$OUT/$TAG.json" > /dev/null 2>&1
pkill -INT -f "worker --listen 127.0.0.1:$PORT"
wait $WP 2>/dev/null
/usr/bin/python3 - "$OUT/$TAG.json" "$OUT/$TAG.perf" "$TAG" <<'EOF'
import json, re, sys
d = json.load(open(sys.argv[1]))
w = d["places"]["workers"][0]
cpu_ms = float(re.search(r"([\d.,]+) msec task-clock", open(sys.argv[2]).read()).group(1).replace(",", ""))
print(sys.argv[3], round(d["steady"]["samples_per_s"]), "local", d["samples_local"], "worker",
      w["samples"], "us/sample", round(cpu_ms * 1000 / max(1, w["samples"])), "inplace",
      d["batches_in_place"], "shared slots", w.get("shared_slots"))
EOF
