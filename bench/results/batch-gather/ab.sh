#!/bin/bash
# interleaved pairs: old vs new, 1 and 2 threads, 6 epochs
for r in 1 2 3 4 5 6 7; do
  line="round $r:"
  for T in 1 2; do
    for B in /tmp/sluice-tie /tmp/sluice-gather; do
      $B run examples/pipelines/imagenet_train.yaml --files 'bench-data/images/**/*.jpg' --threads $T --epochs 6 --json /tmp/ab.json > /dev/null 2>&1
      line="$line $(basename $B)/T$T $(/usr/bin/python3 -c "import json; d=json.load(open('/tmp/ab.json')); print(round(d['samples_per_s']), str(d['batches_in_place'])+'/'+str(d['batches']))")"
    done
  done
  echo "$line"
done
