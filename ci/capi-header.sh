#!/usr/bin/env bash
# Fails when the committed C header (capi/include/somalloc.h) is not what
# cbindgen makes from capi/src now. Installs the pinned cbindgen if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.29.4
if ! cbindgen --version 2>/dev/null | grep -qx "cbindgen $version"; then
  cargo install cbindgen --locked --version "$version"
fi
fresh=$(mktemp)
trap 'rm -f "$fresh"' EXIT
(cd capi && cbindgen --quiet --config cbindgen.toml --output "$fresh")
if ! diff -u capi/include/somalloc.h "$fresh"; then
  echo "capi-header: capi/include/somalloc.h is stale: run (cd capi && cbindgen --config cbindgen.toml --output include/somalloc.h)" >&2
  exit 1
fi
echo "capi-header: capi/include/somalloc.h is what cbindgen $version makes"
