#!/usr/bin/env bash
# Fails when the committed C header (capi/include/somalloc.h) is not what
# cbindgen makes from capi/src now, or its version macros are not the
# crate's version. Installs the pinned cbindgen if missing.
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
# The version macros are the crate's (capi/src/version.rs checks its
# constants against Cargo.toml when it compiles; this checks the header).
crate=$(cargo pkgid -p somalloc-capi)
crate=${crate##*[@#]}
macros=$(for part in MAJOR MINOR PATCH; do
  sed -n "s/^#define SOMALLOC_VERSION_$part \([0-9]*\)$/\1/p" capi/include/somalloc.h
done | paste -sd.)
if [ "$macros" != "$crate" ]; then
  echo "capi-header: the header's SOMALLOC_VERSION_* say '$macros', the crate is $crate: update capi/src/version.rs and regenerate" >&2
  exit 1
fi
echo "capi-header: capi/include/somalloc.h is what cbindgen $version makes (version $crate)"
