#!/usr/bin/env bash
# Checks what `cargo package` would publish: only the library's sources (src/,
# backends/, kernels/), the guide's pages (docs/), the build script, the manifest, the lock file, the
# README, the changelog and the licence texts; and every one of the required files present.
set -euo pipefail
cd "$(dirname "$0")/.."
list=$(cargo package --list --allow-dirty 2>/dev/null)
echo "$list"
bad=$(grep -vE '^(src/.+\.rs|backends/.+\.rs|kernels/.+\.cu|docs/[a-z_]+\.md|docs/README\.md|backends/README\.md|build\.rs|Cargo\.toml|Cargo\.toml\.orig|Cargo\.lock|\.cargo_vcs_info\.json|README\.md|CHANGELOG\.md|LICENSE-MIT|LICENSE-APACHE)$' <<<"$list" || true)
if [ -n "$bad" ]; then
  echo "package-check: files that do not belong in the package:" >&2
  echo "$bad" >&2
  exit 1
fi
for need in README.md CHANGELOG.md LICENSE-MIT LICENSE-APACHE build.rs src/lib.rs src/guide.rs docs/measured.md backends/common.rs kernels/somalloc_kernels.cu; do
  if ! grep -qx "$need" <<<"$list"; then
    echo "package-check: $need is missing from the package" >&2
    exit 1
  fi
done
echo "package-check: $(wc -l <<<"$list") files, all expected"
