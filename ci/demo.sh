#!/usr/bin/env bash
# The main job: installs the kernel compiler if needed, then runs the
# pipeline example (device and pools, the seeds' synchronous vs
# stream-ordered pipeline with its speedup, pool statistics).
#
#   bash ci/demo.sh          # NVIDIA (cuda)
#   bash ci/demo.sh rocm     # AMD (rocm)
#
# On a machine without a GPU it prints one line saying so and exits 0.
set -euo pipefail
backend=${1:-cuda}
cd "$(dirname "$0")/.."
# shellcheck source=ci/setup.sh
source ci/setup.sh "$backend"
cargo run --quiet --release --features "$backend,kernels" --example pipeline
