#!/usr/bin/env bash
# Builds the wheel of one vendor into OUT: somalloc-cuda from python/ as it
# is, somalloc-rocm from a copy of python/ whose pyproject names the ROCm
# package and feature (maturin takes one package name per pyproject).
#
#   bash python/build-wheel.sh cuda|rocm OUT [maturin build options...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
vendor=$1
out=$(mkdir -p "$2" && cd "$2" && pwd)
shift 2
maturin=${MATURIN:-maturin}
case "$vendor" in
  cuda)
    (cd "$here" && "$maturin" build "$@" -o "$out")
    ;;
  rocm)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    cp -r "$here/Cargo.toml" "$here/pyproject.toml" "$here/README.md" "$here/src" "$here/somalloc" "$tmp/"
    cp "$here/../Cargo.lock" "$tmp/"
    sed -i -e 's/^name = "somalloc-cuda"/name = "somalloc-rocm"/' \
      -e 's/^description = "somalloc for CUDA:/description = "somalloc for ROCm:/' \
      -e 's/^features = \["cuda"\]/features = ["rocm"]/' \
      -e '/"Environment :: GPU :: NVIDIA CUDA",/d' "$tmp/pyproject.toml"
    sed -i -e "s|path = \"../capi\"|path = \"$here/../capi\"|" "$tmp/Cargo.toml"
    printf '\n[workspace]\n' >>"$tmp/Cargo.toml"
    (cd "$tmp" && CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$here/../target}/wheel-rocm" "$maturin" build "$@" -o "$out")
    ;;
  *)
    echo "usage: bash python/build-wheel.sh cuda|rocm OUT [maturin options]" >&2
    exit 2
    ;;
esac
