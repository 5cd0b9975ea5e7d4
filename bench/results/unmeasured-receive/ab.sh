#!/bin/bash
# ab.sh OLD NEW ROUNDS OUT SCENARIO...: per round and scenario, interleaved, a cold `sluice`
# run and one from its store (store emptied first) with each build, then `none` once (with NEW).
OLD=$1; NEW=$2; R=$3; OUT=$4; shift 4
WORK=${WORK:-/tmp/ab-unmeasured}
mkdir -p "$OUT"
for i in $(seq 1 "$R"); do
  for s in "$@"; do
    n=$(basename "$s" .yaml)
    for b in old new; do
      bin=$OLD; [ $b = new ] && bin=$NEW
      rm -rf "$WORK/metric-store"
      "$bin" bench "$s" --no-verify --policies sluice,sluice --json "$OUT/$n-$b-$i.json" \
        --work-dir "$WORK" --data-dir /tmp/sluice-bench-data > "$OUT/$n-$b-$i.log" 2>&1
    done
    "$NEW" bench "$s" --no-verify --policies none --json "$OUT/$n-none-$i.json" \
      --work-dir "$WORK" --data-dir /tmp/sluice-bench-data > "$OUT/$n-none-$i.log" 2>&1
  done
done
/usr/bin/python3 - "$OUT" <<'PY'
import json, glob, os, re, statistics, sys, collections
out = sys.argv[1]
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob(f"{out}/*-*-*.json")):
    m = re.match(r"(.+)-(old|new|none)-(\d+)\.json", os.path.basename(f))
    if not m: continue
    d = json.load(open(f))
    for k, v in d["policies"].items():
        kind = m.group(2) if m.group(2) == "none" else m.group(2) + ("-store" if "#" in k else "-cold")
        rows[m.group(1)][kind].append(v["samples_per_s"])
print("| scenario | none | old cold | new cold | old store | new store |")
print("|---|---|---|---|---|---|")
for s, r in sorted(rows.items()):
    cell = lambda k: "/".join(str(round(x)) for x in r.get(k, []))
    print(f"| {s} | {cell('none')} | {cell('old-cold')} | {cell('new-cold')} | {cell('old-store')} | {cell('new-store')} |")
PY
