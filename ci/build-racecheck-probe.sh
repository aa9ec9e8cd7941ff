#!/usr/bin/env bash
# Builds ci/racecheck-probe.cu (plain CUDA, static runtime) with the nvcc of
# ci/setup.sh:   bash ci/build-racecheck-probe.sh OUTPUT
set -euo pipefail
out=${1:?usage: bash ci/build-racecheck-probe.sh OUTPUT}
cd "$(dirname "$0")/.."
if [ -z "${SOMALLOC_NVCC:-}" ]; then
  # shellcheck source=ci/setup.sh
  source ci/setup.sh cuda
fi
mkdir -p "$(dirname "$out")"
"$SOMALLOC_NVCC" -std=c++17 -O2 -L"$(dirname "$SOMALLOC_NVCC")/../lib" \
  -gencode arch=compute_80,code=sm_80 -gencode 'arch=compute_90,code=[sm_90,compute_90]' \
  ci/racecheck-probe.cu -o "$out"
