#!/bin/sh
# Interleaved rounds of the offload bench at cut 5 (where local and received samples fill slot
# buffers of their own), 400 steps, ratios 0.6-0.75: the rounds of
# bench/results/shared-ring/ab.sh with those settings. Usage: ab.sh OLD NEW ROUNDS OUTDIR
STEPS=400 CUTS=5 RATIOS=0.6,0.65,0.7,0.75 exec sh "$(dirname "$0")/../shared-ring/ab.sh" "$@"
