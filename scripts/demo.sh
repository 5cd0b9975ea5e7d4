#!/usr/bin/env bash
# The demo: generates a small photo-like JPEG set under demo-data/ (once), runs the standard
# ImageNet training pipeline on it and prints the per-op table.
#   scripts/demo.sh [path/to/sluice]        (make demo builds first, then calls this)
# Environment: DEMO_DATA (folder, default demo-data), DEMO_COUNT (images, default 512).
set -euo pipefail

SLUICE=${1:-build/bin/sluice}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=${DEMO_DATA:-demo-data}
COUNT=${DEMO_COUNT:-512}
PIPELINE="$ROOT/examples/pipelines/imagenet_train.yaml"

if [ ! -x "$SLUICE" ]; then
  echo "demo: no sluice binary at '$SLUICE' (run 'make demo', or pass the binary's path)" >&2
  exit 2
fi

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

echo "demo: sluice run $PIPELINE --files '$DATA/**/*.jpg'"
echo
"$SLUICE" run "$PIPELINE" --files "$DATA/**/*.jpg"
