#!/usr/bin/env bash
# The rocm backend's test suite on an NVIDIA GPU, through the HIP-on-CUDA
# shim (see README.md next to this file).
#
# On the build machine (cargo, hipcc headers, nvcc; no GPU needed):
#
#   bash ci/hip-on-cuda/run.sh [--reuse-bundle] [--no-local-run]
#
#   1. builds dist/gpu-rocm/ with `SOMALLOC_HIP_KERNELS=nvcc ci/gpu-bundle.sh
#      rocm` (rocm test binaries whose embedded kernels are an NVIDIA fatbin);
#      --reuse-bundle keeps an existing dist/gpu-rocm/bin instead;
#   2. adds dist/gpu-rocm/hip-on-cuda/ (the shim's sources, build.sh, the
#      virtual memory self-check vmm_check.cpp, and the list of hip* functions
#      the backend loads, from required-symbols.sh) and
#      dist/gpu-rocm/run-on-nvidia.sh;
#   3. unless --no-local-run: builds the shim *from the bundle's copy*
#      against the CUDA found here (the pip wheels of `ci/setup.sh cuda`) and
#      runs the bundle through it: with no GPU every GPU test must print its
#      SKIP line with the shim's NoDevice error, and nothing may fail.
#
# Then, on the GPU machine (g++, CUDA 13 headers + libcudart; no Rust):
#
#   bash gpu-rocm/run-on-nvidia.sh
#
# which builds the shim there, checks that it sees the GPU, runs the shim's
# virtual memory self-check (vmm_check, in both hipMemAllocationProp
# layouts), and runs gpu-rocm/run.sh with LD_LIBRARY_PATH and
# SOMALLOC_AMDHIP pointing at it.
set -euo pipefail
cd "$(dirname "$0")/../.."
reuse=0 local_run=1
for a in "$@"; do
  case "$a" in
    --reuse-bundle) reuse=1 ;;
    --no-local-run) local_run=0 ;;
    *) echo "usage: $0 [--reuse-bundle] [--no-local-run]" >&2; exit 2 ;;
  esac
done
out=dist/gpu-rocm
say() { echo "hip-on-cuda: $*" >&2; }

# --- 1. the rocm bundle, kernels by nvcc -----------------------------------
if [ "$reuse" -eq 1 ] && [ -d "$out/bin" ]; then
  say "reusing $out/bin"
else
  # build.rs takes nvcc from SOMALLOC_NVCC (or finds this install itself);
  # gpu-bundle.sh then sources `ci/setup.sh rocm` for its own checks.
  # shellcheck source=ci/setup.sh
  source ci/setup.sh cuda
  SOMALLOC_HIP_KERNELS=nvcc bash ci/gpu-bundle.sh rocm
fi

# --- 2. make the bundle self-contained --------------------------------------
mkdir -p "$out/hip-on-cuda"
cp ci/hip-on-cuda/hip_on_cuda.cpp ci/hip-on-cuda/hip_on_cuda.h ci/hip-on-cuda/vmm.cpp \
  ci/hip-on-cuda/vmm_check.cpp ci/hip-on-cuda/libamdhip64.map ci/hip-on-cuda/build.sh \
  ci/hip-on-cuda/README.md "$out/hip-on-cuda/"
bash ci/hip-on-cuda/required-symbols.sh >"$out/hip-on-cuda/required-symbols.txt"
rm -rf "$out/hip-on-cuda/lib"
cat >"$out/run-on-nvidia.sh" <<'RUN'
#!/usr/bin/env bash
# Runs this rocm test bundle on an NVIDIA GPU through the HIP-on-CUDA shim:
# builds hip-on-cuda/libamdhip64.so.5 with the local CUDA (CUDA_HOME,
# /usr/local/cuda, or nvcc on PATH; see hip-on-cuda/build.sh), checks that it
# exports every function the rocm backend loads and that it sees a GPU, runs
# the self-check of its virtual memory calls (hip-on-cuda/vmm_check.cpp:
# reserve, create, map, access, fill, read back, retain, share, free) twice,
# as the ROCm the shim reports and as ROCm 5.2.3, whose hipMemAllocationProp
# has the older layout, then runs run.sh with the shim as the HIP runtime
# (a failed self-check fails the run, after the suite). Arguments go to
# nothing; TEST_THREADS is honoured by run.sh.
#   HIP_ON_CUDA_LIB_DIR      where to build the shim (default hip-on-cuda/lib)
#   HIP_ON_CUDA_EXPECT_GPU   1 (default): fail if the shim sees no GPU
#   HIP_ON_CUDA_VERSION      what hipRuntimeGetVersion reports (default HIP 6.2)
# Then it runs bin/host once more with HIP_ON_CUDA_VERSION=cuda: acting as
# HIP on NVIDIA, the shim passes host locations and managed memory to
# cudaMemPoolCreate (no ROCm release's hipMemPoolCreate takes them), so the
# rocm backend's host-pool, HostBuffer and pointer-attribute paths run too.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lib=${HIP_ON_CUDA_LIB_DIR:-$here/hip-on-cuda/lib}
HIP_ON_CUDA_EXPECT_GPU=${HIP_ON_CUDA_EXPECT_GPU:-1} bash "$here/hip-on-cuda/build.sh" "$lib" || exit 1
vmm_rc=0
echo "run-on-nvidia: the shim's virtual memory self-check" >&2
HIP_ON_CUDA_EXPECT_GPU=${HIP_ON_CUDA_EXPECT_GPU:-1} "$lib/vmm_check" "$lib/libamdhip64.so.5" || vmm_rc=1
HIP_ON_CUDA_EXPECT_GPU=${HIP_ON_CUDA_EXPECT_GPU:-1} HIP_ON_CUDA_VERSION=50221153 \
  "$lib/vmm_check" "$lib/libamdhip64.so.5" || vmm_rc=1
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SOMALLOC_AMDHIP="$lib/libamdhip64.so.5"
echo "run-on-nvidia: rocm suite with SOMALLOC_AMDHIP=$SOMALLOC_AMDHIP" >&2
bash "$here/run.sh"
rc=$?
if [ -x "$here/bin/host" ]; then
  echo "run-on-nvidia: bin/host again as HIP on NVIDIA (HIP_ON_CUDA_VERSION=cuda)" >&2
  log=$(mktemp)
  HIP_ON_CUDA_VERSION=cuda "$here/bin/host" --test-threads="${TEST_THREADS:-4}" >"$log" 2>&1
  host_rc=$?
  grep -E '^(test result:|SKIP |host::)' "$log" || true
  if [ "$host_rc" -ne 0 ]; then
    grep -vE '^test .* \.\.\. ok$' "$log" | tail -n 60
    rc=1
  fi
  rm -f "$log"
fi
# The arena as the default allocator: it serves under the ROCm the shim
# reports, and steps aside under ROCm 6.4.0, whose hipMemRelease leaks.
if [ -x "$here/bin/arena" ]; then
  for want in serve:0 aside:60400000; do
    v=${want#*:}
    [ "$v" = 0 ] && v=
    echo "run-on-nvidia: the default arena, expected to ${want%%:*}${v:+ (HIP_ON_CUDA_VERSION=$v)}" >&2
    log=$(mktemp)
    env ${v:+HIP_ON_CUDA_VERSION=$v} SOMALLOC_EXPECT_DEFAULT_ARENA="${want%%:*}" \
      "$here/bin/arena" the_default_arena --test-threads=1 >"$log" 2>&1 || rc=1
    grep -E '^(test result:|the_default_arena|SKIP )' "$log" || true
    grep -q '^test result: ok. 1 passed' "$log" || { tail -n 30 "$log"; rc=1; }
    rm -f "$log"
  done
fi
if [ "$vmm_rc" -ne 0 ]; then
  echo "run-on-nvidia: FAILED: the virtual memory self-check (its FAIL lines are above the suite's output)" >&2
  rc=1
fi
exit "$rc"
RUN
chmod +x "$out/run-on-nvidia.sh"
say "bundle ready: $out (on the GPU machine: bash gpu-rocm/run-on-nvidia.sh)"

[ "$local_run" -eq 1 ] || exit 0

# --- 3. here: the shim from the bundle, and the bundle through it -------------
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source ci/setup.sh cuda >/dev/null  # lets build.sh find the pip CUDA via SOMALLOC_NVCC
if nvidia-smi -L >/dev/null 2>&1; then expect=1; else expect=0; fi
say "running the bundle here through the shim (GPU here: $expect)"
HIP_ON_CUDA_WERROR=1 HIP_ON_CUDA_EXPECT_GPU=$expect HIP_ON_CUDA_LIB_DIR="$tmp/lib" bash "$out/run-on-nvidia.sh"
[ "$expect" -eq 0 ] || exit 0

# No GPU: every SKIP must come from the shim's NoDevice answer (not from a
# missing or unloadable runtime), and every binary must exit 0.
export SOMALLOC_AMDHIP="$tmp/lib/libamdhip64.so.5" LD_LIBRARY_PATH="$tmp/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bad=0
shim_nodev='SKIP [A-Za-z0-9_:]+: no GPU \(.*rocm: hipGetDeviceCount: (hipErrorInsufficientDriver|hipErrorNoDevice):'
# tests: run by the binary; SKIPs: GPU tests that skipped; via-shim: those
# whose reason is the shim's NoDevice answer; the rest ran without a GPU.
printf '%-16s %6s %6s %9s %5s\n' binary tests SKIPs via-shim exit >&2
for bin in "$out"/bin/*; do
  name=$(basename "$bin")
  case "$name" in example-*) continue ;; esac
  rc=0
  # SKIP lines go to stderr, libtest's lines to stdout: kept apart, both stay whole.
  "$bin" --test-threads=2 >"$tmp/log" 2>"$tmp/err" || rc=$?
  tests=$(sed -nE 's/^test result: .* ([0-9]+) passed; ([0-9]+) failed; ([0-9]+) ignored.*/\1 \2 \3/p' "$tmp/log" |
    awk '{s += $1 + $2 + $3} END {print s + 0}')
  skips=$( { grep -E '^SKIP ' "$tmp/err" || true; } | wc -l)
  via=$( { grep -E "^$shim_nodev" "$tmp/err" || true; } | wc -l)
  printf '%-16s %6s %6s %9s %5s\n' "$name" "$tests" "$skips" "$via" "$rc" >&2
  if [ "$rc" -ne 0 ] || [ "$skips" -ne "$via" ]; then
    bad=1
    { grep -E '^SKIP ' "$tmp/err" || true; } | { grep -vE "^$shim_nodev" || true; } | head -5 >&2
    tail -n 20 "$tmp/log" "$tmp/err" >&2
  fi
done
if [ "$bad" -ne 0 ]; then
  say "FAILED: a binary failed, or skipped for another reason than the shim's NoDevice"
  exit 1
fi
say "here: every GPU test skipped with the shim's NoDevice error; nothing failed"
