#!/usr/bin/env bash
# Prints the hip* functions the rocm backend loads, one a line, sorted:
# its own ("hipX\0" in backends/rocm/*.rs: mod.rs, and any file beside it
# such as a vmm.rs; not tests.rs, whose names are the tests' own) and those
# both backends load (concat!($p, "X\0") in backends/shared.rs, with the
# prefix "hip").
#
#   bash ci/hip-on-cuda/required-symbols.sh [REPO_ROOT]
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
own=()
for f in "$root"/backends/rocm/*.rs; do
  [ "$(basename "$f")" = tests.rs ] || own+=("$f")
done
{
  grep -ohE '"hip[A-Za-z0-9_]+\\0"' "${own[@]}" | sed -E 's/^"(hip[A-Za-z0-9_]+)\\0"$/\1/'
  grep -oE 'concat!\(\$p, "[A-Za-z0-9_]+\\0"\)' "$root/backends/shared.rs" |
    sed -E 's/^concat!\(\$p, "([A-Za-z0-9_]+)\\0"\)$/hip\1/'
} | LC_ALL=C sort -u
