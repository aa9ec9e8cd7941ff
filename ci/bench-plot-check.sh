#!/usr/bin/env bash
# The benchmark's JSON -> plot path, no GPU needed: draws the pictures of the
# recorded results file and checks that every one is there and non-empty.
#
#   bash ci/bench-plot-check.sh          # NVIDIA build (cuda)
#   bash ci/bench-plot-check.sh rocm     # AMD build
#
# Without benches/data/sample-results.json it runs the format test instead
# (placeholder values, labelled so, written, read back and drawn).
set -euo pipefail
backend=${1:-cuda}
cd "$(dirname "$0")/.."
# shellcheck source=ci/setup.sh
source ci/setup.sh "$backend" >/dev/null
sample=benches/data/sample-results.json
out=target/bench-plot-check
pictures=(pair.svg churn.svg threshold.svg synchronous.svg seed_pipeline.svg threads.svg timeline.svg)
# A recorded run with the borrowed-stream rows also draws their picture.
if [ ! -f "$sample" ] || grep -q '@borrowed' "$sample"; then
  pictures+=(borrowed.svg)
fi

cargo build --quiet --release --features "$backend,kernels" --example bench
bin=${CARGO_TARGET_DIR:-target}/release/examples/bench
rm -rf "$out"
if [ -f "$sample" ]; then
  "$bin" --plot-only "$sample" --out "$out"
else
  echo "bench-plot-check: $sample is missing; running the format test instead"
  "$bin" --format-test --out "$out"
fi

failed=0
for p in "${pictures[@]}"; do
  f="$out/$p"
  if [ ! -s "$f" ]; then
    echo "bench-plot-check: $f is missing or empty"
    failed=1
  elif ! grep -q '<svg' "$f"; then
    echo "bench-plot-check: $f is not an SVG"
    failed=1
  fi
done
if [ "$failed" -ne 0 ]; then
  echo "bench-plot-check: 0 passed, 1 failed"
  exit 1
fi
echo "bench-plot-check: ${#pictures[@]} pictures in $out"
echo "bench-plot-check: 1 passed, 0 failed"
