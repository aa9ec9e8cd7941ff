#!/usr/bin/env bash
# Builds the HIP-on-CUDA shim (libamdhip64.so.5 + libamdhip64.so) into OUTDIR
# and checks it:
#
#   bash ci/hip-on-cuda/build.sh [OUTDIR]      # default: <this folder>/lib
#
# 1. finds CUDA's headers and libcudart: $HIP_ON_CUDA_CUDA_INCLUDE and
#    $HIP_ON_CUDA_CUDA_LIB if both are set, else the first of $CUDA_HOME,
#    $CUDA_PATH, /usr/local/cuda, the nvcc of $SOMALLOC_NVCC or PATH, and the
#    pip wheels of `ci/setup.sh cuda` (~/.cache/somalloc/venv-cuda13) that
#    has include/cuda_runtime_api.h and a libcudart.so*;
# 2. compiles hip_on_cuda.cpp and vmm.cpp with ${CXX:-g++} (-Werror if
#    HIP_ON_CUDA_WERROR=1), soname libamdhip64.so.5, symbol versions from
#    libamdhip64.map, linked against libcudart only (RUNPATH: its folder);
# 3. symbol check: every hip* function the rocm backend loads (the list in
#    $HIP_ON_CUDA_SYMBOLS, else required-symbols.txt next to this script, else
#    what required-symbols.sh reads from the backend sources) must be exported,
#    with a hip_* version; where ROCm's own libamdhip64.so.5 is installed
#    ($HIP_ON_CUDA_REAL_AMDHIP or /usr/lib/x86_64-linux-gnu, /opt/rocm/lib),
#    each must carry the same version as there, and so must every other
#    function the shim exports that the real library has;
# 4. ABI check, where ROCm's hip_runtime_api.h is installed ($HIP_INCLUDE or
#    /usr/include, /opt/rocm/include): the shim's error numbers, enum and
#    flag values and struct layouts (hip_on_cuda.h, and the ABI part of
#    vmm.cpp: hipMemAllocationProp in that ROCm's layout) are compiled
#    against ROCm's header;
# 5. smoke test: dlopen the result, check error names, version symbols and
#    the last-error rules, and print what hipGetDeviceCount says (and each
#    device's name); HIP_ON_CUDA_EXPECT_GPU=1 makes "no GPU" a failure,
#    HIP_ON_CUDA_EXPECT_GPU=0 makes "a GPU" one;
# 6. builds OUTDIR/vmm_check from vmm_check.cpp, the self-check of the
#    virtual memory calls that run-on-nvidia.sh (see run.sh) runs on the GPU.
# Exits non-zero if any step fails.
set -euo pipefail
export LC_ALL=C # sort and comm must agree on one order
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/lib}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cxx=${CXX:-g++}
say() { echo "hip-on-cuda: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

# --- 1. CUDA --------------------------------------------------------------
find_cudart() {  # prints the first libcudart.so* in the given folders
  local d f
  for d in "$@"; do
    for f in "$d/libcudart.so" "$d"/libcudart.so.[0-9]*; do
      [ -e "$f" ] && { echo "$f"; return 0; }
    done
  done
  return 1
}
cuda_inc="" cudart=""
if [ -n "${HIP_ON_CUDA_CUDA_INCLUDE:-}" ] && [ -n "${HIP_ON_CUDA_CUDA_LIB:-}" ]; then
  cuda_inc=$HIP_ON_CUDA_CUDA_INCLUDE
  cudart=$(find_cudart "$HIP_ON_CUDA_CUDA_LIB") || die "no libcudart.so* in $HIP_ON_CUDA_CUDA_LIB"
else
  roots=()
  [ -n "${CUDA_HOME:-}" ] && roots+=("$CUDA_HOME")
  [ -n "${CUDA_PATH:-}" ] && roots+=("$CUDA_PATH")
  roots+=(/usr/local/cuda)
  [ -n "${SOMALLOC_NVCC:-}" ] && roots+=("$(dirname "$(dirname "$SOMALLOC_NVCC")")")
  if command -v nvcc >/dev/null 2>&1; then roots+=("$(dirname "$(dirname "$(command -v nvcc)")")"); fi
  for r in "${SOMALLOC_TOOLS:-$HOME/.cache/somalloc}"/venv-cuda13/lib/python3*/site-packages/nvidia/cu13; do
    [ -d "$r" ] && roots+=("$r")
  done
  for r in "${roots[@]}"; do
    [ -f "$r/include/cuda_runtime_api.h" ] || continue
    if lib=$(find_cudart "$r/lib64" "$r/lib" "$r/targets/x86_64-linux/lib"); then
      cuda_inc=$r/include cudart=$lib
      break
    fi
  done
  [ -n "$cuda_inc" ] || die "no CUDA found (need include/cuda_runtime_api.h and libcudart.so*; looked in: ${roots[*]}). Set CUDA_HOME, or HIP_ON_CUDA_CUDA_INCLUDE and HIP_ON_CUDA_CUDA_LIB."
fi
cuda_lib=$(dirname "$cudart")
# The pip wheels ship only libcudart.so.13 (no unversioned link name).
if [ "$(basename "$cudart")" = libcudart.so ]; then link=-lcudart; else link=-l:$(basename "$cudart"); fi
say "CUDA headers $cuda_inc, runtime $cudart"

# --- 2. compile -----------------------------------------------------------
lib=$out/libamdhip64.so.5
werror=()
[ "${HIP_ON_CUDA_WERROR:-0}" = 1 ] && werror=(-Werror)  # run.sh sets it; other compilers may warn more
"$cxx" -std=c++17 -O2 -g -fPIC -shared -fvisibility=hidden -Wall -Wextra "${werror[@]}" \
  -I"$cuda_inc" -o "$lib" "$here/hip_on_cuda.cpp" "$here/vmm.cpp" \
  -Wl,-soname,libamdhip64.so.5 -Wl,--version-script="$here/libamdhip64.map" -Wl,--no-undefined \
  -L"$cuda_lib" "$link" -Wl,-rpath,"$cuda_lib"
ln -sf libamdhip64.so.5 "$out/libamdhip64.so"
say "built $lib"

# --- 3. symbols -----------------------------------------------------------
if [ -n "${HIP_ON_CUDA_SYMBOLS:-}" ]; then
  required=$(grep -oE '^hip[A-Za-z0-9_]+' "$HIP_ON_CUDA_SYMBOLS")
  from=$HIP_ON_CUDA_SYMBOLS
elif [ -f "$here/required-symbols.txt" ]; then
  required=$(grep -oE '^hip[A-Za-z0-9_]+' "$here/required-symbols.txt")
  from=$here/required-symbols.txt
elif [ -f "$here/../../backends/rocm/mod.rs" ]; then
  required=$(bash "$here/required-symbols.sh" "$here/../..")
  from="backends/rocm/*.rs and backends/shared.rs"
else
  die "no list of required symbols (set HIP_ON_CUDA_SYMBOLS)"
fi
required=$(echo "$required" | sort -u)
[ -n "$required" ] || die "the symbol list from $from is empty"
# name version, for defined functions
exported=$(objdump -T "$lib" | awk '$3 == "DF" && $4 == ".text" {print $NF, $(NF-1)}' | sort -u)
real=${HIP_ON_CUDA_REAL_AMDHIP:-}
if [ -z "$real" ]; then
  for c in /usr/lib/x86_64-linux-gnu/libamdhip64.so.5 /opt/rocm/lib/libamdhip64.so.5; do
    [ -e "$c" ] && { real=$c; break; }
  done
fi
real_versions=""
[ -n "$real" ] && real_versions=$(objdump -T "$real" | awk '$3 == "DF" && $4 == ".text" {print $NF, $(NF-1)}' | sort -u)
bad=0 n=0
for name in $required; do
  n=$((n + 1))
  ver=$(echo "$exported" | awk -v n="$name" '$1 == n {print $2}')
  if [ -z "$ver" ]; then
    say "MISSING: $name (loaded by the rocm backend, not exported by the shim)"; bad=1; continue
  fi
  case "$ver" in hip_*) ;; *) say "UNVERSIONED: $name ($ver)"; bad=1; continue ;; esac
  if [ -n "$real_versions" ]; then
    want=$(echo "$real_versions" | awk -v n="$name" '$1 == n {print $2}')
    if [ -n "$want" ] && [ "$want" != "$ver" ]; then
      say "VERSION: $name is $ver in the shim, $want in $real"; bad=1
    fi
  fi
done
extra=$(comm -13 <(echo "$required") <(echo "$exported" | awk '{print $1}'))
[ -z "$extra" ] || say "note: exported but not loaded by the backend: $(echo $extra)"
# Those too carry the real library's version where it has them.
if [ -n "$real_versions" ]; then
  for name in $extra; do
    ver=$(echo "$exported" | awk -v n="$name" '$1 == n {print $2}')
    want=$(echo "$real_versions" | awk -v n="$name" '$1 == n {print $2}')
    if [ -n "$want" ] && [ "$want" != "$ver" ]; then
      say "VERSION: $name is $ver in the shim, $want in $real"; bad=1
    fi
  done
fi
[ "$bad" -eq 0 ] || die "symbol check failed (list from $from)"
say "symbol check: all $n hip* functions of $from exported with their version${real:+ (same as $real)}"

# --- 4. ABI against ROCm's header (where installed) ------------------------
hip_inc=${HIP_INCLUDE:-}
if [ -z "$hip_inc" ]; then
  for c in /usr/include /opt/rocm/include; do
    [ -f "$c/hip/hip_runtime_api.h" ] && { hip_inc=$c; break; }
  done
fi
if [ -n "$hip_inc" ]; then
  check=$(mktemp -d)
  cat >"$check/abi.cpp" <<'CPP'
#include <hip/hip_runtime_api.h>
#include <hip/hip_version.h>
#include <cstddef>
// HIP #defines its flags: keep ROCm's values, then let the shim declare its own.
constexpr unsigned rocm_flags[] = {hipStreamDefault, hipStreamNonBlocking, hipEventDefault, hipEventBlockingSync,
                                   hipEventDisableTiming, hipEventInterprocess, hipEventReleaseToDevice,
                                   hipEventReleaseToSystem};
#undef hipStreamDefault
#undef hipStreamNonBlocking
#undef hipEventDefault
#undef hipEventBlockingSync
#undef hipEventDisableTiming
#undef hipEventInterprocess
#undef hipEventReleaseToDevice
#undef hipEventReleaseToSystem
constexpr unsigned rocm_host_malloc_flags[] = {hipHostMallocDefault, hipHostMallocPortable, hipHostMallocMapped,
                                               hipHostMallocWriteCombined, hipHostMallocNumaUser,
                                               hipHostMallocCoherent, hipHostMallocNonCoherent};
#undef hipHostMallocDefault
#undef hipHostMallocPortable
#undef hipHostMallocMapped
#undef hipHostMallocWriteCombined
#undef hipHostMallocNumaUser
#undef hipHostMallocCoherent
#undef hipHostMallocNonCoherent
#define HIP_ON_CUDA_ABI_ONLY
#include "hip_on_cuda.cpp"
#include "vmm.cpp"
namespace s = hip_abi;
#define X(name, value) static_assert(::name == value, #name " differs from ROCm's hip_runtime_api.h");
HIP_ON_CUDA_HIP_ERRORS(X)
#undef X
static_assert(::hipErrorMemoryAllocation == s::hipErrorOutOfMemory, "alias");
static_assert(::hipErrorInitializationError == s::hipErrorNotInitialized, "alias");
static_assert(::hipErrorMapBufferObjectFailed == s::hipErrorMapFailed, "alias");
static_assert(::hipErrorInvalidResourceHandle == s::hipErrorInvalidHandle, "alias");
constexpr unsigned shim_flags[] = {s::hipStreamDefault, s::hipStreamNonBlocking, s::hipEventDefault,
                                   s::hipEventBlockingSync, s::hipEventDisableTiming, s::hipEventInterprocess,
                                   s::hipEventReleaseToDevice, s::hipEventReleaseToSystem};
constexpr bool same_flags() {
  for (unsigned i = 0; i < sizeof rocm_flags / sizeof rocm_flags[0]; ++i)
    if (rocm_flags[i] != shim_flags[i]) return false;
  return true;
}
static_assert(same_flags(), "stream/event flags differ from ROCm's");
constexpr unsigned shim_host_malloc_flags[] = {s::hipHostMallocDefault, s::hipHostMallocPortable,
                                               s::hipHostMallocMapped, s::hipHostMallocWriteCombined,
                                               s::hipHostMallocNumaUser, s::hipHostMallocCoherent,
                                               s::hipHostMallocNonCoherent};
constexpr bool same_host_malloc_flags() {
  for (unsigned i = 0; i < sizeof rocm_host_malloc_flags / sizeof rocm_host_malloc_flags[0]; ++i)
    if (rocm_host_malloc_flags[i] != shim_host_malloc_flags[i]) return false;
  return true;
}
static_assert(same_host_malloc_flags(), "hipHostMalloc flags differ from ROCm's");
static_assert(sizeof(::hipPointerAttribute_t) == sizeof(s::hipPointerAttribute_t), "hipPointerAttribute_t size");
static_assert(offsetof(::hipPointerAttribute_t, device) == offsetof(s::hipPointerAttribute_t, device), "device");
static_assert(offsetof(::hipPointerAttribute_t, devicePointer) == offsetof(s::hipPointerAttribute_t, devicePointer),
              "devicePointer");
static_assert(offsetof(::hipPointerAttribute_t, hostPointer) == offsetof(s::hipPointerAttribute_t, hostPointer),
              "hostPointer");
static_assert(offsetof(::hipPointerAttribute_t, isManaged) == offsetof(s::hipPointerAttribute_t, isManaged),
              "isManaged");
static_assert(offsetof(::hipPointerAttribute_t, allocationFlags) ==
                  offsetof(s::hipPointerAttribute_t, allocationFlags), "allocationFlags");
#if HIP_VERSION < 60000000
static_assert(offsetof(::hipPointerAttribute_t, memoryType) == offsetof(s::hipPointerAttribute_t, memoryType),
              "memoryType");
static_assert(::hipMemoryTypeHost == s::hipMemoryTypeHost, "memory type (ROCm 5)");
static_assert(::hipMemoryTypeDevice == s::hipMemoryTypeDevice, "memory type (ROCm 5)");
static_assert(::hipMemoryTypeArray == s::hipMemoryTypeArray, "memory type (ROCm 5)");
static_assert(::hipMemoryTypeUnified == s::hipMemoryTypeUnified, "memory type (ROCm 5)");
#else
static_assert(offsetof(::hipPointerAttribute_t, type) == offsetof(s::hipPointerAttribute_t, memoryType), "type");
static_assert(::hipMemoryTypeUnregistered == s::HIP6_MEMORY_TYPE_UNREGISTERED, "memory type (ROCm 6)");
static_assert(::hipMemoryTypeHost == s::HIP6_MEMORY_TYPE_HOST, "memory type (ROCm 6)");
static_assert(::hipMemoryTypeDevice == s::HIP6_MEMORY_TYPE_DEVICE, "memory type (ROCm 6)");
static_assert(::hipMemoryTypeManaged == s::HIP6_MEMORY_TYPE_MANAGED, "memory type (ROCm 6)");
#endif
static_assert(::hipDeviceAttributeMemoryPoolsSupported == s::hipDeviceAttributeMemoryPoolsSupported, "attr");
static_assert(::hipMemcpyHostToHost == s::hipMemcpyHostToHost, "memcpy kind");
static_assert(::hipMemcpyHostToDevice == s::hipMemcpyHostToDevice, "memcpy kind");
static_assert(::hipMemcpyDeviceToHost == s::hipMemcpyDeviceToHost, "memcpy kind");
static_assert(::hipMemcpyDeviceToDevice == s::hipMemcpyDeviceToDevice, "memcpy kind");
static_assert(::hipMemcpyDefault == s::hipMemcpyDefault, "memcpy kind");
static_assert(::hipMemPoolReuseFollowEventDependencies == s::hipMemPoolReuseFollowEventDependencies, "pool attr");
static_assert(::hipMemPoolReuseAllowOpportunistic == s::hipMemPoolReuseAllowOpportunistic, "pool attr");
static_assert(::hipMemPoolReuseAllowInternalDependencies == s::hipMemPoolReuseAllowInternalDependencies, "pool attr");
static_assert(::hipMemPoolAttrReleaseThreshold == s::hipMemPoolAttrReleaseThreshold, "pool attr");
static_assert(::hipMemPoolAttrReservedMemCurrent == s::hipMemPoolAttrReservedMemCurrent, "pool attr");
static_assert(::hipMemPoolAttrReservedMemHigh == s::hipMemPoolAttrReservedMemHigh, "pool attr");
static_assert(::hipMemPoolAttrUsedMemCurrent == s::hipMemPoolAttrUsedMemCurrent, "pool attr");
static_assert(::hipMemPoolAttrUsedMemHigh == s::hipMemPoolAttrUsedMemHigh, "pool attr");
static_assert(::hipMemAllocationTypeInvalid == s::hipMemAllocationTypeInvalid, "alloc type");
static_assert(::hipMemAllocationTypePinned == s::hipMemAllocationTypePinned, "alloc type");
static_assert(::hipMemHandleTypeNone == s::hipMemHandleTypeNone, "handle type");
static_assert(::hipMemHandleTypePosixFileDescriptor == s::hipMemHandleTypePosixFileDescriptor, "handle type");
static_assert(::hipMemHandleTypeWin32 == s::hipMemHandleTypeWin32, "handle type");
static_assert(::hipMemHandleTypeWin32Kmt == s::hipMemHandleTypeWin32Kmt, "handle type");
static_assert(::hipMemLocationTypeInvalid == s::hipMemLocationTypeInvalid, "location type");
static_assert(::hipMemLocationTypeDevice == s::hipMemLocationTypeDevice, "location type");
static_assert(::hipMemAccessFlagsProtNone == s::hipMemAccessFlagsProtNone, "access flags");
static_assert(::hipMemAccessFlagsProtRead == s::hipMemAccessFlagsProtRead, "access flags");
static_assert(::hipMemAccessFlagsProtReadWrite == s::hipMemAccessFlagsProtReadWrite, "access flags");
static_assert(sizeof(::hipMemAccessDesc) == sizeof(s::hipMemAccessDesc), "hipMemAccessDesc size");
static_assert(offsetof(::hipMemAccessDesc, flags) == offsetof(s::hipMemAccessDesc, flags), "hipMemAccessDesc.flags");
static_assert(sizeof(::hipMemPoolPtrExportData) == sizeof(s::hipMemPoolPtrExportData), "export data size");
static_assert(sizeof(::hipMemLocation) == sizeof(s::hipMemLocation), "hipMemLocation size");
static_assert(offsetof(::hipMemLocation, id) == offsetof(s::hipMemLocation, id), "hipMemLocation.id");
static_assert(sizeof(::hipMemPoolProps) == sizeof(s::hipMemPoolProps), "hipMemPoolProps size");
static_assert(alignof(::hipMemPoolProps) == alignof(s::hipMemPoolProps), "hipMemPoolProps alignment");
static_assert(offsetof(::hipMemPoolProps, allocType) == offsetof(s::hipMemPoolProps, allocType), "allocType");
static_assert(offsetof(::hipMemPoolProps, handleTypes) == offsetof(s::hipMemPoolProps, handleTypes), "handleTypes");
static_assert(offsetof(::hipMemPoolProps, location) == offsetof(s::hipMemPoolProps, location), "location");
static_assert(offsetof(::hipMemPoolProps, win32SecurityAttributes) ==
                  offsetof(s::hipMemPoolProps, win32SecurityAttributes), "win32SecurityAttributes");
static_assert(::hipStreamCaptureStatusNone == s::hipStreamCaptureStatusNone, "capture status");
static_assert(::hipStreamCaptureStatusActive == s::hipStreamCaptureStatusActive, "capture status");
static_assert(::hipStreamCaptureStatusInvalidated == s::hipStreamCaptureStatusInvalidated, "capture status");
static_assert(::hipStreamCaptureModeGlobal == s::hipStreamCaptureModeGlobal, "capture mode");
static_assert(::hipStreamCaptureModeThreadLocal == s::hipStreamCaptureModeThreadLocal, "capture mode");
static_assert(::hipStreamCaptureModeRelaxed == s::hipStreamCaptureModeRelaxed, "capture mode");
static_assert(::hipGraphInstantiateFlagAutoFreeOnLaunch == s::hipGraphInstantiateFlagAutoFreeOnLaunch, "flag");
static_assert(sizeof(::hipStreamCaptureStatus) == sizeof(s::hipStreamCaptureStatus), "enum size");
static_assert(sizeof(::hipHostFn_t) == sizeof(s::hipHostFn_t), "host function pointer");
#if HIP_VERSION >= 50300000
// Declared from ROCm 5.3 on (not in 5.2.3's header).
static_assert(::hipGraphMemAttrUsedMemCurrent == s::hipGraphMemAttrUsedMemCurrent, "graph mem attr");
static_assert(::hipGraphMemAttrUsedMemHigh == s::hipGraphMemAttrUsedMemHigh, "graph mem attr");
static_assert(::hipGraphMemAttrReservedMemCurrent == s::hipGraphMemAttrReservedMemCurrent, "graph mem attr");
static_assert(::hipGraphMemAttrReservedMemHigh == s::hipGraphMemAttrReservedMemHigh, "graph mem attr");
static_assert(::hipUserObjectNoDestructorSync == s::hipUserObjectNoDestructorSync, "user object flag");
static_assert(::hipGraphUserObjectMove == s::hipGraphUserObjectMove, "retain flag");
#endif
#if HIP_VERSION >= 60200000
static_assert(offsetof(::hipMemPoolProps, maxSize) == offsetof(s::hipMemPoolProps, maxSize), "maxSize");
#else
static_assert(offsetof(::hipMemPoolProps, reserved) == offsetof(s::hipMemPoolProps, maxSize),
              "before ROCm 6.2, reserved[] starts where maxSize is");
#endif
// Virtual memory (vmm.cpp): hipMemAllocationProp in the layout of this
// header's ROCm (the shim picks it by the version it reports).
static_assert(sizeof(::hipMemGenericAllocationHandle_t) == sizeof(s::hipMemGenericAllocationHandle_t), "handle");
static_assert(::hipMemAllocationGranularityMinimum == s::hipMemAllocationGranularityMinimum, "granularity flag");
static_assert(::hipMemAllocationGranularityRecommended == s::hipMemAllocationGranularityRecommended, "granularity");
#if HIP_VERSION < 50300000
using OldProp = s::hipMemAllocationPropR0502;
static_assert(sizeof(::hipMemAllocationProp) == sizeof(OldProp), "hipMemAllocationProp size (ROCm 5.2)");
static_assert(offsetof(::hipMemAllocationProp, compressionType) == offsetof(OldProp, compressionType), "5.2 prop");
static_assert(offsetof(::hipMemAllocationProp, location) == offsetof(OldProp, location), "5.2 prop");
static_assert(offsetof(::hipMemAllocationProp, requestedHandleType) == offsetof(OldProp, requestedHandleType), "5.2");
static_assert(offsetof(::hipMemAllocationProp, type) == offsetof(OldProp, type), "5.2 prop");
static_assert(offsetof(::hipMemAllocationProp, usage) == offsetof(OldProp, usage), "5.2 prop");
static_assert(offsetof(::hipMemAllocationProp, win32HandleMetaData) == offsetof(OldProp, win32HandleMetaData), "5.2");
#else
using NewProp = s::hipMemAllocationPropR0503;
static_assert(sizeof(::hipMemAllocationProp) == sizeof(NewProp), "hipMemAllocationProp size (ROCm >= 5.3)");
static_assert(offsetof(::hipMemAllocationProp, type) == offsetof(NewProp, type), "5.3 prop");
static_assert(offsetof(::hipMemAllocationProp, requestedHandleType) == offsetof(NewProp, requestedHandleType), "5.3");
static_assert(offsetof(::hipMemAllocationProp, location) == offsetof(NewProp, location), "5.3 prop");
static_assert(offsetof(::hipMemAllocationProp, win32HandleMetaData) == offsetof(NewProp, win32HandleMetaData), "5.3");
static_assert(offsetof(::hipMemAllocationProp, allocFlags.compressionType) ==
                  offsetof(NewProp, allocFlags.compressionType), "5.3 prop");
static_assert(offsetof(::hipMemAllocationProp, allocFlags.gpuDirectRDMACapable) ==
                  offsetof(NewProp, allocFlags.gpuDirectRDMACapable), "5.3 prop");
static_assert(offsetof(::hipMemAllocationProp, allocFlags.usage) == offsetof(NewProp, allocFlags.usage), "5.3 prop");
static_assert(::hipDeviceAttributeVirtualMemoryManagementSupported ==
                  s::hipDeviceAttributeVirtualMemoryManagementSupported, "attr (ROCm >= 5.3)");
#endif
#if HIP_VERSION >= 60100000
static_assert(::hipDeviceAttributeMemoryPoolSupportedHandleTypes == s::hipDeviceAttributeMemoryPoolSupportedHandleTypes,
              "attr (ROCm >= 6.1)");
#endif
int hip_version_checked = HIP_VERSION;
CPP
  if "$cxx" -std=c++17 -fsyntax-only -D__HIP_PLATFORM_AMD__ -I"$hip_inc" -I"$here" "$check/abi.cpp"; then
    ver=$(sed -nE 's/^#define HIP_VERSION_(MAJOR|MINOR|PATCH) ([0-9]+).*/\2/p' "$hip_inc/hip/hip_version.h" | paste -sd.)
    say "ABI check: error numbers, flags, enum values and layouts match $hip_inc/hip (HIP $ver)"
  else
    rm -rf "$check"
    die "ABI check against $hip_inc/hip/hip_runtime_api.h failed"
  fi
  rm -rf "$check"
else
  say "ABI check skipped: no ROCm hip_runtime_api.h here (the shim's own static_asserts still ran)"
fi

# --- 5. smoke test -----------------------------------------------------------
smoke=$(mktemp -d)
cat >"$smoke/smoke.cpp" <<'CPP'
#include <dlfcn.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
static int failures = 0;
#define EXPECT(cond, ...) do { if (!(cond)) { std::fprintf(stderr, "hip-on-cuda smoke: FAILED: " __VA_ARGS__); std::fputc('\n', stderr); ++failures; } } while (0)
int main(int argc, char** argv) {
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { std::fprintf(stderr, "hip-on-cuda smoke: dlopen: %s\n", dlerror()); return 1; }
  auto name = reinterpret_cast<const char* (*)(int)>(dlsym(h, "hipGetErrorName"));
  auto text = reinterpret_cast<const char* (*)(int)>(dlsym(h, "hipGetErrorString"));
  auto last = reinterpret_cast<int (*)()>(dlsym(h, "hipGetLastError"));
  auto version = reinterpret_cast<int (*)(int*)>(dlsym(h, "hipRuntimeGetVersion"));
  auto count = reinterpret_cast<int (*)(int*)>(dlsym(h, "hipGetDeviceCount"));
  auto launch = reinterpret_cast<int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                         void*, void**, void**)>(dlsym(h, "hipModuleLaunchKernel"));
  if (!name || !text || !last || !version || !count || !launch) { std::fprintf(stderr, "hip-on-cuda smoke: dlsym failed\n"); return 1; }
  EXPECT(dlvsym(h, "hipMallocAsync", "hip_5.1") != nullptr, "hipMallocAsync@hip_5.1 not found");
  EXPECT(dlvsym(h, "hipMalloc", "hip_4.2") != nullptr, "hipMalloc@hip_4.2 not found");
  EXPECT(dlvsym(h, "hipStreamBeginCapture", "hip_4.3") != nullptr, "hipStreamBeginCapture@hip_4.3 not found");
  EXPECT(dlvsym(h, "hipStreamGetCaptureInfo_v2", "hip_4.5") != nullptr, "hipStreamGetCaptureInfo_v2@hip_4.5 not found");
  EXPECT(dlvsym(h, "hipDeviceGraphMemTrim", "hip_4.5") != nullptr, "hipDeviceGraphMemTrim@hip_4.5 not found");
  EXPECT(dlvsym(h, "hipGraphUpload", "hip_5.3") != nullptr, "hipGraphUpload@hip_5.3 not found");
  EXPECT(dlvsym(h, "hipUserObjectCreate", "hip_5.3") != nullptr, "hipUserObjectCreate@hip_5.3 not found");
  EXPECT(dlvsym(h, "hipPointerGetAttributes", "hip_4.2") != nullptr, "hipPointerGetAttributes@hip_4.2 not found");
  EXPECT(dlvsym(h, "hipHostMalloc", "hip_4.2") != nullptr, "hipHostMalloc@hip_4.2 not found");
  EXPECT(dlvsym(h, "hipHostFree", "hip_4.2") != nullptr, "hipHostFree@hip_4.2 not found");
  {
    // Host memory: rejections made by the shim itself (no GPU needed).
    auto host_malloc = reinterpret_cast<int (*)(void**, size_t, unsigned)>(dlsym(h, "hipHostMalloc"));
    auto attributes = reinterpret_cast<int (*)(void*, const void*)>(dlsym(h, "hipPointerGetAttributes"));
    void* p = nullptr;
    unsigned char attr[32];
    EXPECT(host_malloc && host_malloc(&p, 16, 0x8) == 1, "hipHostMalloc(flags 0x8) should be hipErrorInvalidValue");
    EXPECT(attributes && attributes(attr, nullptr) == 1, "hipPointerGetAttributes(NULL) should be hipErrorInvalidValue");
    EXPECT(last() == 1 && last() == 0, "last error after the rejected host-memory calls");
  }
  {
    // Rejections made by the shim itself, as ROCm's runtime makes them.
    auto begin = reinterpret_cast<int (*)(void*, int)>(dlsym(h, "hipStreamBeginCapture"));
    auto instantiate = reinterpret_cast<int (*)(void**, void*, unsigned long long)>(dlsym(h, "hipGraphInstantiateWithFlags"));
    auto user_object = reinterpret_cast<int (*)(void**, void*, void (*)(void*), unsigned, unsigned)>(dlsym(h, "hipUserObjectCreate"));
    void* out = nullptr;
    EXPECT(begin && begin(nullptr, 3) == 1, "hipStreamBeginCapture(mode 3) should be hipErrorInvalidValue");
    EXPECT(instantiate && instantiate(&out, reinterpret_cast<void*>(8), 2) == 1, "hipGraphInstantiateWithFlags(flags 2)");
    EXPECT(user_object && user_object(&out, nullptr, nullptr, 1, 1) == 1, "hipUserObjectCreate(no destructor)");
    EXPECT(last() == 1 && last() == 0, "last error after the rejected graph calls");
  }
  {
    // Virtual memory (vmm.cpp): the real library's version node, and
    // rejections made by the shim itself.
    const char* vmm[] = {"hipMemAddressReserve", "hipMemAddressFree", "hipMemCreate", "hipMemRelease", "hipMemMap",
                         "hipMemUnmap", "hipMemSetAccess", "hipMemGetAccess", "hipMemGetAllocationGranularity",
                         "hipMemRetainAllocationHandle", "hipMemExportToShareableHandle",
                         "hipMemImportFromShareableHandle"};
    for (const char* f : vmm) EXPECT(dlvsym(h, f, "hip_5.1") != nullptr, "%s@hip_5.1 not found", f);
    auto reserve = reinterpret_cast<int (*)(void**, size_t, size_t, void*, unsigned long long)>(dlsym(h, "hipMemAddressReserve"));
    auto create = reinterpret_cast<int (*)(void**, size_t, const void*, unsigned long long)>(dlsym(h, "hipMemCreate"));
    void* p = nullptr;
    unsigned char prop[32] = {0};  // allocation type 0 in both layouts
    EXPECT(reserve && reserve(&p, 1 << 21, 0, nullptr, 1) == 1, "hipMemAddressReserve(flags 1) should be hipErrorInvalidValue");
    EXPECT(create && create(&p, 1 << 21, prop, 0) == 1, "hipMemCreate(type 0) should be hipErrorInvalidValue");
    EXPECT(last() == 1 && last() == 0, "last error after the rejected virtual memory calls");
  }
  EXPECT(!std::strcmp(name(0), "hipSuccess"), "name(0) = %s", name(0));
  EXPECT(!std::strcmp(name(2), "hipErrorOutOfMemory"), "name(2) = %s", name(2));
  EXPECT(!std::strcmp(name(35), "hipErrorInsufficientDriver"), "name(35) = %s", name(35));
  EXPECT(!std::strcmp(name(100), "hipErrorNoDevice"), "name(100) = %s", name(100));
  EXPECT(!std::strcmp(name(400), "hipErrorInvalidHandle"), "name(400) = %s", name(400));
  EXPECT(!std::strcmp(name(801), "hipErrorNotSupported"), "name(801) = %s", name(801));
  EXPECT(!std::strcmp(name(123456), "hipErrorUnknown"), "name(123456) = %s", name(123456));
  EXPECT(!std::strcmp(text(2), "out of memory"), "text(2) = %s (CUDA's message expected)", text(2));
  int v = 0;
  EXPECT(version(&v) == 0 && v > 0, "hipRuntimeGetVersion");
  if (!std::getenv("HIP_ON_CUDA_VERSION")) EXPECT(v >= 60200000 && v < 60300000, "version %d is not HIP 6.2.x", v);
  // A rejection made by the shim itself is the thread's last error, once.
  int e = launch(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
  EXPECT(e == 400, "launch(NULL) = %d, want hipErrorInvalidHandle", e);
  EXPECT(last() == 400, "last error after launch(NULL)");
  EXPECT(last() == 0, "last error not reset");
  int n = -1;
  e = count(&n);
  std::printf("hipRuntimeGetVersion: %d; hipGetDeviceCount: %d (%s: %s), count %d\n", v, e, name(e), text(e), e == 0 ? n : 0);
  const char* expect = std::getenv("HIP_ON_CUDA_EXPECT_GPU");
  auto reserve = reinterpret_cast<int (*)(void**, size_t, size_t, void*, unsigned long long)>(dlsym(h, "hipMemAddressReserve"));
  if (e != 0) {
    EXPECT(e == 35 || e == 100, "no GPU should be hipErrorInsufficientDriver or hipErrorNoDevice, got %d", e);
    EXPECT(last() == e, "last error after hipGetDeviceCount");
    void* p = nullptr;
    int r = reserve(&p, 1 << 21, 0, nullptr, 0);  // through the driver entry points
    EXPECT(r == e, "hipMemAddressReserve without a GPU = %d, want %d as hipGetDeviceCount", r, e);
    EXPECT(last() == r, "last error after hipMemAddressReserve");
    EXPECT(!(expect && !std::strcmp(expect, "1")), "HIP_ON_CUDA_EXPECT_GPU=1 but the shim sees no GPU");
  } else {
    auto get = reinterpret_cast<int (*)(int*, int)>(dlsym(h, "hipDeviceGet"));
    auto dev_name = reinterpret_cast<int (*)(char*, int, int)>(dlsym(h, "hipDeviceGetName"));
    auto attr = reinterpret_cast<int (*)(int*, int, int)>(dlsym(h, "hipDeviceGetAttribute"));
    for (int i = 0; i < n; ++i) {
      int d = -1, pools = -1, vmm = -1;
      char buf[256] = {0};
      EXPECT(get(&d, i) == 0 && d == i, "hipDeviceGet(%d)", i);
      EXPECT(dev_name(buf, sizeof buf, d) == 0 && buf[0] != 0, "hipDeviceGetName(%d)", i);
      EXPECT(attr(&pools, 88, d) == 0, "hipDeviceGetAttribute(MemoryPoolsSupported, %d)", i);
      // VirtualMemoryManagementSupported (89) exists from ROCm 5.3 on.
      int want = v >= 10000000 && v < 50300000 ? 1 : 0;
      EXPECT(attr(&vmm, 89, d) == want, "hipDeviceGetAttribute(VirtualMemoryManagementSupported, %d)", i);
      (void)last();
      std::printf("device %d: %s, memory pools %s, virtual memory %s\n", i, buf,
                  pools == 1 ? "supported" : "NOT supported",
                  want != 0 ? "(no attribute before ROCm 5.3)" : vmm == 1 ? "supported" : "NOT supported");
    }
    int d = 0;
    EXPECT(get(&d, n) == 101, "hipDeviceGet(count) should be hipErrorInvalidDevice");
    EXPECT(last() == 101 && last() == 0, "last error after hipDeviceGet(count)");
    EXPECT(!(expect && !std::strcmp(expect, "0")), "HIP_ON_CUDA_EXPECT_GPU=0 but the shim sees %d GPU(s)", n);
  }
  return failures == 0 ? 0 : 1;
}
CPP
"$cxx" -std=c++17 -O1 -o "$smoke/smoke" "$smoke/smoke.cpp" -ldl
if ! "$smoke/smoke" "$lib" >&2; then
  rm -rf "$smoke"
  die "smoke test failed"
fi
rm -rf "$smoke"
say "smoke test passed"

# --- 6. the virtual memory self-check (run-on-nvidia.sh runs it) -------------
"$cxx" -std=c++17 -O1 -pthread -Wall -Wextra "${werror[@]}" -o "$out/vmm_check" "$here/vmm_check.cpp" -ldl
say "built $out/vmm_check (run: $out/vmm_check $lib)"
say "use: LD_LIBRARY_PATH=$out (or SOMALLOC_AMDHIP=$lib)"
