# Sourced by st.sh, trainer-perf.sh and worker-switches.sh: starts a testbed bench run of $SCENARIO with the plan
# $POL in the background (B), waits for its trainer (P), 4 s of steady state, and its worker (W).
BIN=${BIN:-build/bin/sluice}
POL=${POL:-fixed:cut=4,ratio=1.0,read=remote,compress=none,spill=workers}
mkdir -p $OUT; cd "$(dirname "$0")/../../.."
$BIN bench ${SCENARIO:?a copy of bench/scenarios/image-7to21-fast-step.yaml with steps: 2000} --no-verify --policies $POL --json $OUT/r.json --work-dir /tmp/pf/work --data-dir /tmp/pf/data > $OUT/log 2>&1 &
B=$!
NAME=$(basename $BIN)  # the processes are found by the binary's name, whatever it is
for i in $(seq 120); do P=$(pgrep -f "$NAME train" | head -1); [ -n "$P" ] && break; sleep 0.5; done
sleep 4
W=$(pgrep -f "$NAME worker" | head -1)
