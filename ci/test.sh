#!/usr/bin/env bash
# The test command: the whole CI matrix on a fresh machine with no GPU.
#
#   bash ci/test.sh            # every cell
#   bash ci/test.sh cuda       # only the cells of one backend (plus fmt)
#
# It installs its own toolchains (ci/setup.sh: nvcc from PyPI in a venv, hipcc
# and the HIP headers from apt), then runs each cell, keeps its log under
# target/ci-logs/, and prints a summary table. GPU tests print one SKIP line
# each where there is no GPU; the table counts them.
set -uo pipefail
cd "$(dirname "$0")/.."
only=${1:-all}
logs=target/ci-logs
mkdir -p "$logs"

names=() results=() times=() notes=()
failed=0

# cell NAME NOTE-FUNCTION COMMAND...: runs COMMAND, logs it, records the result.
cell() {
  local name=$1 show=$2
  shift 2
  local log="$logs/$name.log" t0=$SECONDS rc
  echo "==> $name: $*"
  if [ "$show" = show ]; then
    "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
  else
    "$@" >"$log" 2>&1
    rc=$?
  fi
  local dt=$((SECONDS - t0)) note=""
  if [ "$rc" -eq 0 ]; then
    results+=(pass)
  else
    results+=(FAIL)
    failed=1
    [ "$show" = show ] || tail -n 40 "$log"
  fi
  if grep -q '^test result:' "$log"; then
    local p s f
    p=$(grep -E '^test result:' "$log" | sed -E 's/.* ([0-9]+) passed.*/\1/' | awk '{s+=$1} END {print s+0}')
    f=$(grep -E '^test result:' "$log" | sed -E 's/.* ([0-9]+) failed.*/\1/' | awk '{s+=$1} END {print s+0}')
    # Skip lines can share a line with the harness's own output.
    s=$(grep -oE 'SKIP [A-Za-z0-9_:]+: ' "$log" | wc -l)
    note="$((p - s)) ran, $s skipped, $f failed"
  fi
  names+=("$name") times+=("$dt") notes+=("$note")
}

# must_fail_with PATTERN COMMAND...: succeeds when COMMAND fails and its
# output contains PATTERN.
must_fail_with() {
  local pattern=$1 out
  shift
  if out=$("$@" 2>&1); then
    echo "$out"
    echo "unexpectedly succeeded: $*"
    return 1
  fi
  echo "$out"
  if grep -qF -- "$pattern" <<<"$out"; then
    return 0
  fi
  echo "failed without the expected message: $pattern"
  return 1
}

export RUSTFLAGS="${RUSTFLAGS:-} -D warnings"
export RUSTDOCFLAGS="-D warnings"
# A run from a fresh clone gains nothing from incremental builds or full
# debug info, and both multiply the disk it needs (line tables keep the
# sanitizer's and the panics' backtraces readable).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}"
export CARGO_PROFILE_TEST_DEBUG="${CARGO_PROFILE_TEST_DEBUG:-line-tables-only}"

# Free disk, printed once: a run out of space fails with "No space left on
# device" in whichever cell it reaches, and this line says why.
free_kib=$(df -Pk . | awk 'NR == 2 {print $4}')
echo "disk free at start: $((free_kib / 1024 / 1024)) GiB (a full run writes about 3 GiB under target/)"

cell fmt quiet cargo fmt --check
# The library's modules form layers that only point down: a new import
# circle fails here (the script prints it).
cell layers quiet python3 ci/layers.py
# Every relative link of the Markdown pages names a file (and heading) that
# exists, on GitHub and, for the guide's pages, in the crate docs.
cell doc-links quiet python3 ci/doc-links.py
cell readme quiet bash ci/readme-check.sh # the README's Rust, C and Python quick starts: the guide's compiled program, built through pkg-config and run, names the package has
# No source file of 800 lines or more, but the exemptions the script lists
# (tests, generated bindings, the backends' shared macro, the HIP-ABI library).
cell file-sizes quiet python3 ci/file-sizes.py

backends=()
case "$only" in
  all) backends=(cuda rocm) ;;
  cuda | rocm) backends=("$only") ;;
  *) echo "usage: bash ci/test.sh [all|cuda|rocm]"; exit 2 ;;
esac

for b in "${backends[@]}"; do
  # shellcheck source=ci/setup.sh
  cell "setup-$b" quiet bash -c "source ci/setup.sh $b"
  # Export the compiler variables into this shell too.
  # shellcheck source=ci/setup.sh
  source ci/setup.sh "$b" >/dev/null 2>&1 || true
  cell "clippy-$b" quiet cargo clippy --features "$b,kernels" --all-targets
  # What users build: the library without the test kit.
  cell "lib-$b" quiet cargo clippy --features "$b"
  cell "test-$b" show cargo test --features "$b,kernels"
  cell "doc-$b" quiet cargo doc --no-deps --features "$b"
  # The C ABI (its C program skips without a GPU) and the Python package.
  cell "capi-$b" show bash -c "cargo clippy -p somalloc-capi -p somalloc-python --features $b --all-targets && cargo test -p somalloc-capi --features $b"
  cell "wheel-$b" quiet bash ci/wheel-check.sh "$b"
done
cell capi-header quiet bash ci/capi-header.sh
cell capi-install quiet bash ci/capi-install-check.sh # the C library installed by capi/install.sh, both backends in one prefix: SONAMEs, no collision, examples/c built through pkg-config and CMake and run
cell setup-concurrency quiet bash ci/setup-concurrency-check.sh
if [ "$only" = all ] || [ "$only" = cuda ]; then
  cell "check-cuda-12080" quiet bash -c 'cargo check --features cuda-12080 && test -z "$(cargo tree -q --features cuda-12080 -e normal -i cudarc 2>/dev/null)"' # deprecated alias of cuda: builds, and pulls in no cudarc (the tests' dev-dependency on cudarc is no normal edge)
  # The cache tier's unit tests (schedules replaying its races included)
  # and the trace recorder's (its rings) under AddressSanitizer: a use of
  # freed memory, or memory never freed, fails the cell.
  cell asan-cache quiet env RUSTC_BOOTSTRAP=1 RUSTFLAGS="$RUSTFLAGS -Zsanitizer=address" \
    CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/asan" \
    cargo test --target x86_64-unknown-linux-gnu --features cuda --lib -- cache trace::
  # (The property tests with failure injection are among them: the leak
  # check fails the cell on a stream cache or a block that a failure path
  # left behind.)
  # The model-checked tests of the lock, the stream cache, the credit and
  # the deferred-free queue (loom, bounded preemptions: ci/loom.sh).
  cell loom show bash ci/loom.sh
  cell "racecheck-probe" quiet bash ci/build-racecheck-probe.sh "${CARGO_TARGET_DIR:-target}/racecheck-probe"
  # The page-remap cost benchmark (run on a GPU machine) compiles.
  cell remap-cost quiet bash -c 'mkdir -p "${CARGO_TARGET_DIR:-target}" && "$SOMALLOC_NVCC" -O2 -c -Xcompiler -Wall,-Wextra,-Werror -o "${CARGO_TARGET_DIR:-target}/remap_cost.o" benches/remap_cost.cu'
fi
cell bench-plots quiet bash ci/bench-plot-check.sh
cell models-table quiet bash ci/models-table-check.sh
# The trace tool (a workspace member without a backend), and its page in
# headless Chromium on a synthetic trace of 1,000,000 events.
cell trace-tool show bash -c "cargo clippy -p somalloc-trace --all-targets && cargo test -p somalloc-trace"
cell trace-page quiet bash ci/trace-page-check.sh
cell package quiet bash ci/package-check.sh
# The hand-written bindings of both backends against the HIP and CUDA headers.
if [ "$only" = all ]; then
  cell bindgen-check quiet bash ci/bindgen-check.sh
fi
cell no-backend quiet must_fail_with "enable exactly one backend feature" cargo build
cell both-backends quiet must_fail_with "more than one backend is selected" cargo build --features cuda,rocm

# Interop. `cudarc` picks no CUDA version of cudarc: a build of the library
# alone names one (an application's own cudarc dependency does otherwise),
# and two applications with different versions and loading modes must build
# with it (ci/downstream, each in a target directory of its own).
if [ "$only" = all ] || [ "$only" = cuda ]; then
  source ci/setup.sh cuda >/dev/null 2>&1 || true
  cell check-cudarc quiet cargo check --features cuda,cudarc,cudarc/cuda-13000
  cell clippy-cudarc quiet cargo clippy --features cuda,cudarc,kernels --all-targets
  cell test-cudarc show bash -c 'cargo test --features cuda,cudarc,kernels --test cudarc && cargo test --features cuda,cudarc,kernels --doc -- interop guide::cudarc'
  cell doc-cudarc quiet cargo doc --no-deps --features cuda,cudarc,cudarc/cuda-13000,plan
  for v in 12080 13000; do
    cell "downstream-$v" quiet env CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/downstream/cudarc-$v" \
      cargo build --manifest-path "ci/downstream/cudarc-$v/Cargo.toml"
  done
fi
# hip-sys links libamdhip64 (from the apt ROCm that setup installs).
if [ "$only" = all ] || [ "$only" = rocm ]; then
  source ci/setup.sh rocm >/dev/null 2>&1 || true
  cell hip-sys show bash -c 'cargo clippy --features rocm,hip-sys --all-targets && cargo test --features rocm,hip-sys --lib && cargo test --features rocm,hip-sys --doc -- interop guide::hip_sys && cargo doc --no-deps --features rocm,hip-sys'
fi

echo
printf '%-18s %-6s %6s  %s\n' cell result secs notes
for i in "${!names[@]}"; do
  printf '%-18s %-6s %6s  %s\n' "${names[$i]}" "${results[$i]}" "${times[$i]}" "${notes[$i]}"
done
pass=0 fail=0
for r in "${results[@]}"; do [ "$r" = pass ] && pass=$((pass + 1)) || fail=$((fail + 1)); done
echo "ci cells: $pass passed, $fail failed"
exit "$failed"
