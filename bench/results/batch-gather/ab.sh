#!/bin/bash
# Interleaved pairs of two builds, 1 and 2 threads, 6 epochs of the local benchmark's images:
#   bench/results/batch-gather/ab.sh OLD_BINARY NEW_BINARY > OUT
OLD=$1 NEW=$2
for r in 1 2 3 4 5 6 7; do
  line="round $r:"
  for T in 1 2; do
    for B in "$OLD" "$NEW"; do
      "$B" run examples/pipelines/imagenet_train.yaml --files 'bench-data/images/**/*.jpg' \
        --threads $T --epochs 6 --json ab.json > /dev/null 2>&1
      line="$line $(basename "$B")/T$T $(/usr/bin/python3 -c "import json; d=json.load(open('ab.json')); print(round(d['samples_per_s']), str(d['batches_in_place'])+'/'+str(d['batches']))")"
    done
  done
  echo "$line"
done
rm -f ab.json
