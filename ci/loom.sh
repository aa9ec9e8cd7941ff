#!/usr/bin/env bash
# The model-checked tests of the concurrent core (loom; see src/sync.rs,
# src/cache/tests/models.rs and src/graph/models.rs): the stream lock, a
# stream cache against flush / trim / detach, the shared credit, and the
# deferred-free queue, each under every interleaving of its threads up to
# LOOM_MAX_PREEMPTIONS preemptions (default 5; the models finish in seconds
# at 6, unbounded takes longer). The library is built with `--cfg loom` in
# a target directory of its own, so that the other cells' builds stay.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="${RUSTFLAGS:-} --cfg loom"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-5}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom"
# The models need no GPU and no kernels; one backend for the build.
cargo test --release --features cuda --lib loom_ -- --test-threads=2
