#!/usr/bin/env bash
# The demo: finds a prep stall and removes it by offloading.
#   1. generates a small photo-like JPEG set under demo-data/ (once) and prints the standard
#      ImageNet pipeline's per-op table (`sluice run`): where the CPU goes;
#   2. trains with an emulated 20 ms accelerator on a trainer with half a CPU, first all
#      local (the stall), then with `--policy sluice` and one worker with a whole CPU: the
#      plan, why, and the speed-up.
# As root, step 2 runs on the testbed (examples/demo/testbed.yaml: network namespaces, a
# 10 Gbit link, cgroup CPU quotas). Otherwise, or where the testbed cannot be set up, it
# runs a plain `sluice worker` on 127.0.0.1 beside a one-thread trainer.
#   scripts/demo.sh [path/to/sluice]        (make demo builds first, then calls this)
# Environment: DEMO_DATA (folder, default demo-data), DEMO_COUNT (images, default 512),
#   DEMO_OUT (reports, default demo-out), DEMO_TESTBED (0: skip the testbed even as root).
set -euo pipefail

SLUICE=${1:-build/bin/sluice}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=${DEMO_DATA:-demo-data}
COUNT=${DEMO_COUNT:-512}
OUT=${DEMO_OUT:-demo-out}
PIPELINE="$ROOT/examples/pipelines/imagenet_train.yaml"
SCENARIO="$ROOT/examples/demo/testbed.yaml"
PYTHON=/usr/bin/python3
START=$(date +%s)

if [ ! -x "$SLUICE" ]; then
  echo "demo: no sluice binary at '$SLUICE' (run 'make demo', or pass the binary's path)" >&2
  exit 2
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)  # absolute: the testbed and the workers see the same paths

# A marker written last, so an interrupted generation is redone rather than half used.
MARKER="$DATA/.complete-$COUNT"
if [ ! -f "$MARKER" ]; then
  echo "demo: generating $COUNT JPEGs (500x375, quality 90, 10 classes) in $DATA/"
  rm -rf "$DATA"
  "$SLUICE" gen-data --kind jpeg --count "$COUNT" --out "$DATA" --width 500 --height 375 \
    --quality 90 --classes 10 --seed 1
  touch "$MARKER"
else
  echo "demo: using the $COUNT JPEGs already in $DATA/"
fi

echo
echo "== 1. Where the CPU goes: sluice run $PIPELINE --files '$DATA/**/*.jpg'"
echo
"$SLUICE" run "$PIPELINE" --files "$DATA/**/*.jpg" --threads 1

# Prints the comparison of two `sluice train --json` reports: the stall, the plan, the gain.
summarize() {
  "$PYTHON" - "$1" "$2" <<'PY'
import json, sys
none, auto = (json.load(open(p)) for p in sys.argv[1:3])
def rate(r):
    return r.get("steady", {}).get("samples_per_s") or r["samples_per_s"]
def stall(r):
    return r.get("steady", {}).get("stall_fraction", r["stall_fraction"])
print(f"  all local:        {rate(none):7.1f} samples/s, the accelerator waits "
      f"{100 * stall(none):.0f}% of the time")
plan = auto["plan"]
print(f"  --policy sluice:  {rate(auto):7.1f} samples/s, the accelerator waits "
      f"{100 * stall(auto):.0f}% of the time")
print(f"  speed-up:         {rate(auto) / rate(none):.2f}x  (planned in "
      f"{auto['time_to_plan_s']:.2f} s)")
timeline = auto.get("timeline", [])
# The plan that ran longest: each decision's plan runs until the next one (the last one
# until the run ended).
if timeline:
    end = max(auto.get("wall_s", 0), timeline[-1]["t_s"])
    held = {}
    for e, nxt in zip(timeline, timeline[1:] + [None]):
        p = e["plan"]
        name = p.get("policy") if p.get("offload") else "none (all local)"
        held[name] = held.get(name, 0) + (nxt["t_s"] if nxt else end) - e["t_s"]
    longest = max(held, key=held.get)
    total = end - timeline[0]["t_s"]
    print(f"  plan that ran longest: {longest} ({held[longest]:.1f} of {total:.1f} s"
          f" after the first plan)")
print()
print("  the plan in force at the end, as the planner explained it:")
for line in plan.get("explanation", "(none)").splitlines():
    print("    " + line)
if len(timeline) > 1:
    print("  later decisions:")
    for e in timeline[1:]:
        print(f"    {e['t_s']:6.2f} s  {e['kind']}: {e['reason']}")
PY
}

echo
echo "== 2. The stall, and offloading it away (trainer: half a CPU, accelerator step 20 ms)"
echo
ran_testbed=0
if [ "$(id -u)" = 0 ] && [ "${DEMO_TESTBED:-1}" != 0 ]; then
  echo "demo: on the testbed: $SCENARIO"
  echo "demo: sluice bench $SCENARIO --policies none,sluice --json $OUT/demo.json"
  if "$SLUICE" bench "$SCENARIO" --policies none,sluice --json "$OUT/demo.json" \
      --work-dir "$OUT/testbed" --data-dir "$OUT/testbed-data"; then
    ran_testbed=1
    "$PYTHON" - "$OUT" "$OUT/demo.json" <<'PY'
import json, sys
out, report = sys.argv[1], json.load(open(sys.argv[2]))
for name in ("none", "sluice"):
    json.dump(report["policies"][name], open(f"{out}/train-{name}.json", "w"))
PY
    echo
    summarize "$OUT/train-none.json" "$OUT/train-sluice.json"
  else
    echo "demo: the testbed could not run here (see above); using a local worker instead"
  fi
fi

if [ "$ran_testbed" = 0 ]; then
  # Without root: one `sluice worker` process on loopback with one thread, and a trainer
  # with one pipeline thread. The machine's cores are shared, so the gain is smaller than
  # on the testbed's separate CPUs.
  PORT=${DEMO_PORT:-7731}
  # The worker reads only under its data root; the trainer names the files by their
  # absolute paths, which lie in it.
  DATA_ABS=$(cd "$DATA" && pwd)
  echo "demo: sluice worker --listen 127.0.0.1:$PORT --threads 1 --data-root $DATA_ABS (a local process)"
  "$SLUICE" worker --listen "127.0.0.1:$PORT" --threads 1 --data-root "$DATA_ABS" \
    > "$OUT/worker.log" 2>&1 &
  WORKER=$!
  trap 'kill $WORKER 2>/dev/null || true' EXIT
  TRAIN=("$SLUICE" train "$PIPELINE" --files "$DATA_ABS/**/*.jpg" --accelerator-ms 20 --steps 60
         --epochs -1 --threads 1 --metric-store "$OUT/metric-store")
  echo "demo: ${TRAIN[*]} --policy none"
  "${TRAIN[@]}" --policy none --json "$OUT/train-none.json" > "$OUT/train-none.log"
  echo "demo: ${TRAIN[*]} --policy sluice --workers 127.0.0.1:$PORT"
  "${TRAIN[@]}" --policy sluice --workers "127.0.0.1:$PORT" --json "$OUT/train-sluice.json" \
    > "$OUT/train-sluice.log"
  kill $WORKER 2>/dev/null || true
  wait $WORKER 2>/dev/null || true
  trap - EXIT
  echo
  summarize "$OUT/train-none.json" "$OUT/train-sluice.json"
fi

echo
echo "demo: done in $(( $(date +%s) - START )) s; reports in $OUT/ (docs/offload.md, docs/policy.md)"
