#!/bin/bash
# make demo's script, old and new builds interleaved, each with its own metric store.
# usage: ab.sh OLD_BIN NEW_BIN PAIRS OUTDIR
OLD=$1; NEW=$2; N=$3; OUT=$4
mkdir -p "$OUT"; rm -rf "$OUT/old" "$OUT/new"
for i in $(seq 1 "$N"); do
  for b in old new; do
    if [ $b = old ]; then BIN=$OLD; else BIN=$NEW; fi
    s=$(DEMO_OUT="$OUT/$b" scripts/demo.sh "$BIN" 2>&1 | grep -E "speed-up" | sed 's/ \+/ /g')
    echo "$b $i: $s"
    cp "$OUT/$b/train-sluice.json" "$OUT/$b-sluice-$i.json"
    cp "$OUT/$b/train-none.json" "$OUT/$b-none-$i.json"
  done
done
