// HIP-on-CUDA shim: what its source files share. What the shim is, and the
// list of every translation it makes, are at the top of hip_on_cuda.cpp.
//
// Part 1, the HIP ABI (namespace hip_abi): HIP's error numbers, enum and flag
// values and struct layouts, defined here without any HIP header. build.sh
// compiles it (HIP_ON_CUDA_ABI_ONLY, together with the ABI part of vmm.cpp)
// next to ROCm's own hip_runtime_api.h when that is installed, and checks
// every number and offset against it.
//
// Part 2 (left out with HIP_ON_CUDA_ABI_ONLY): the helpers hip_on_cuda.cpp
// defines and vmm.cpp uses too (recording errors, the version the shim
// reports), and the two hooks by which hip_on_cuda.cpp asks vmm.cpp.

#ifndef HIP_ON_CUDA_H
#define HIP_ON_CUDA_H

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hip_abi {

using hipError_t = int;  // C enum, int-sized, in every ROCm
using hipDevice_t = int;
using hipDeviceAttribute_t = int;
using hipMemPoolAttr = int;
using hipMemcpyKind = int;

struct ihipStream_t;
struct ihipEvent_t;
struct ihipMemPoolHandle_t;
struct ihipModule_t;
struct ihipModuleSymbol_t;
using hipStream_t = ihipStream_t*;
using hipEvent_t = ihipEvent_t*;
using hipMemPool_t = ihipMemPoolHandle_t*;
using hipModule_t = ihipModule_t*;
using hipFunction_t = ihipModuleSymbol_t*;
struct ihipGraph;
struct hipGraphExec;
struct hipGraphNode;
struct hipUserObject;
using hipGraph_t = ihipGraph*;
using hipGraphExec_t = hipGraphExec*;
using hipGraphNode_t = hipGraphNode*;
using hipUserObject_t = hipUserObject*;  // ROCm >= 5.3
using hipHostFn_t = void (*)(void* userData);
using hipStreamCaptureStatus = int;
using hipStreamCaptureMode = int;
using hipGraphMemAttributeType = int;  // ROCm >= 5.3

// hipError_t of ROCm 5.2.3 (hip_runtime_api.h), primary names only (the
// aliases hipErrorMemoryAllocation 2, hipErrorInitializationError 3,
// hipErrorMapBufferObjectFailed 205, hipErrorInvalidResourceHandle 400 are
// the same numbers; HIP's hipGetErrorName reports the names below).
#define HIP_ON_CUDA_HIP_ERRORS(X)                 \
    X(hipSuccess, 0)                              \
    X(hipErrorInvalidValue, 1)                    \
    X(hipErrorOutOfMemory, 2)                     \
    X(hipErrorNotInitialized, 3)                  \
    X(hipErrorDeinitialized, 4)                   \
    X(hipErrorProfilerDisabled, 5)                \
    X(hipErrorProfilerNotInitialized, 6)          \
    X(hipErrorProfilerAlreadyStarted, 7)          \
    X(hipErrorProfilerAlreadyStopped, 8)          \
    X(hipErrorInvalidConfiguration, 9)            \
    X(hipErrorInvalidPitchValue, 12)              \
    X(hipErrorInvalidSymbol, 13)                  \
    X(hipErrorInvalidDevicePointer, 17)           \
    X(hipErrorInvalidMemcpyDirection, 21)         \
    X(hipErrorInsufficientDriver, 35)             \
    X(hipErrorMissingConfiguration, 52)           \
    X(hipErrorPriorLaunchFailure, 53)             \
    X(hipErrorInvalidDeviceFunction, 98)          \
    X(hipErrorNoDevice, 100)                      \
    X(hipErrorInvalidDevice, 101)                 \
    X(hipErrorInvalidImage, 200)                  \
    X(hipErrorInvalidContext, 201)                \
    X(hipErrorContextAlreadyCurrent, 202)         \
    X(hipErrorMapFailed, 205)                     \
    X(hipErrorUnmapFailed, 206)                   \
    X(hipErrorArrayIsMapped, 207)                 \
    X(hipErrorAlreadyMapped, 208)                 \
    X(hipErrorNoBinaryForGpu, 209)                \
    X(hipErrorAlreadyAcquired, 210)               \
    X(hipErrorNotMapped, 211)                     \
    X(hipErrorNotMappedAsArray, 212)              \
    X(hipErrorNotMappedAsPointer, 213)            \
    X(hipErrorECCNotCorrectable, 214)             \
    X(hipErrorUnsupportedLimit, 215)              \
    X(hipErrorContextAlreadyInUse, 216)           \
    X(hipErrorPeerAccessUnsupported, 217)         \
    X(hipErrorInvalidKernelFile, 218)             \
    X(hipErrorInvalidGraphicsContext, 219)        \
    X(hipErrorInvalidSource, 300)                 \
    X(hipErrorFileNotFound, 301)                  \
    X(hipErrorSharedObjectSymbolNotFound, 302)    \
    X(hipErrorSharedObjectInitFailed, 303)        \
    X(hipErrorOperatingSystem, 304)               \
    X(hipErrorInvalidHandle, 400)                 \
    X(hipErrorIllegalState, 401)                  \
    X(hipErrorNotFound, 500)                      \
    X(hipErrorNotReady, 600)                      \
    X(hipErrorIllegalAddress, 700)                \
    X(hipErrorLaunchOutOfResources, 701)          \
    X(hipErrorLaunchTimeOut, 702)                 \
    X(hipErrorPeerAccessAlreadyEnabled, 704)      \
    X(hipErrorPeerAccessNotEnabled, 705)          \
    X(hipErrorSetOnActiveProcess, 708)            \
    X(hipErrorContextIsDestroyed, 709)            \
    X(hipErrorAssert, 710)                        \
    X(hipErrorHostMemoryAlreadyRegistered, 712)   \
    X(hipErrorHostMemoryNotRegistered, 713)       \
    X(hipErrorLaunchFailure, 719)                 \
    X(hipErrorCooperativeLaunchTooLarge, 720)     \
    X(hipErrorNotSupported, 801)                  \
    X(hipErrorStreamCaptureUnsupported, 900)      \
    X(hipErrorStreamCaptureInvalidated, 901)      \
    X(hipErrorStreamCaptureMerge, 902)            \
    X(hipErrorStreamCaptureUnmatched, 903)        \
    X(hipErrorStreamCaptureUnjoined, 904)         \
    X(hipErrorStreamCaptureIsolation, 905)        \
    X(hipErrorStreamCaptureImplicit, 906)         \
    X(hipErrorCapturedEvent, 907)                 \
    X(hipErrorStreamCaptureWrongThread, 908)      \
    X(hipErrorGraphExecUpdateFailure, 910)        \
    X(hipErrorUnknown, 999)                       \
    X(hipErrorRuntimeMemory, 1052)                \
    X(hipErrorRuntimeOther, 1053)

#define X(name, value) constexpr hipError_t name = value;
HIP_ON_CUDA_HIP_ERRORS(X)
#undef X

// Flags (#defines in HIP).
constexpr unsigned hipStreamDefault = 0x0;
constexpr unsigned hipStreamNonBlocking = 0x1;
constexpr unsigned hipEventDefault = 0x0;
constexpr unsigned hipEventBlockingSync = 0x1;
constexpr unsigned hipEventDisableTiming = 0x2;
constexpr unsigned hipEventInterprocess = 0x4;
constexpr unsigned hipEventReleaseToDevice = 0x40000000u;
constexpr unsigned hipEventReleaseToSystem = 0x80000000u;

// Enum values.
constexpr hipDeviceAttribute_t hipDeviceAttributeMemoryPoolsSupported = 88;

constexpr hipMemcpyKind hipMemcpyHostToHost = 0;
constexpr hipMemcpyKind hipMemcpyHostToDevice = 1;
constexpr hipMemcpyKind hipMemcpyDeviceToHost = 2;
constexpr hipMemcpyKind hipMemcpyDeviceToDevice = 3;
constexpr hipMemcpyKind hipMemcpyDefault = 4;

constexpr hipMemPoolAttr hipMemPoolReuseFollowEventDependencies = 0x1;
constexpr hipMemPoolAttr hipMemPoolReuseAllowOpportunistic = 0x2;
constexpr hipMemPoolAttr hipMemPoolReuseAllowInternalDependencies = 0x3;
constexpr hipMemPoolAttr hipMemPoolAttrReleaseThreshold = 0x4;
constexpr hipMemPoolAttr hipMemPoolAttrReservedMemCurrent = 0x5;
constexpr hipMemPoolAttr hipMemPoolAttrReservedMemHigh = 0x6;
constexpr hipMemPoolAttr hipMemPoolAttrUsedMemCurrent = 0x7;
constexpr hipMemPoolAttr hipMemPoolAttrUsedMemHigh = 0x8;

constexpr unsigned hipMemAllocationTypeInvalid = 0x0;
constexpr unsigned hipMemAllocationTypePinned = 0x1;
constexpr unsigned hipMemHandleTypeNone = 0x0;
constexpr unsigned hipMemHandleTypePosixFileDescriptor = 0x1;
constexpr unsigned hipMemHandleTypeWin32 = 0x2;
constexpr unsigned hipMemHandleTypeWin32Kmt = 0x4;
constexpr unsigned hipMemLocationTypeInvalid = 0;
constexpr unsigned hipMemLocationTypeDevice = 1;
// ROCm 6.x/7.x headers (not in 5.2.3's): CUDA's numbers.
constexpr unsigned hipMemLocationTypeHost = 2;
constexpr unsigned hipMemLocationTypeHostNuma = 3;
constexpr unsigned hipMemAllocationTypeManaged = 0x2;  // ROCm development headers after 7.2

// hipMemoryType up to ROCm 5.x, and from ROCm 6.0 (CUDA's numbers).
constexpr int hipMemoryTypeHost = 0;
constexpr int hipMemoryTypeDevice = 1;
constexpr int hipMemoryTypeArray = 2;
constexpr int hipMemoryTypeUnified = 3;
constexpr int HIP6_MEMORY_TYPE_UNREGISTERED = 0;
constexpr int HIP6_MEMORY_TYPE_HOST = 1;
constexpr int HIP6_MEMORY_TYPE_DEVICE = 2;
constexpr int HIP6_MEMORY_TYPE_MANAGED = 3;
constexpr int HIP_VERSION_POINTER_TYPES_6 = 60000000;

// hipHostMalloc flags (#defines in HIP).
constexpr unsigned hipHostMallocDefault = 0x0;
constexpr unsigned hipHostMallocPortable = 0x1;
constexpr unsigned hipHostMallocMapped = 0x2;
constexpr unsigned hipHostMallocWriteCombined = 0x4;
constexpr unsigned hipHostMallocNumaUser = 0x20000000u;
constexpr unsigned hipHostMallocCoherent = 0x40000000u;
constexpr unsigned hipHostMallocNonCoherent = 0x80000000u;
constexpr unsigned hipMemAccessFlagsProtNone = 0;
constexpr unsigned hipMemAccessFlagsProtRead = 1;
constexpr unsigned hipMemAccessFlagsProtReadWrite = 3;

// Stream capture and graphs (ROCm 5.2.3's header; the last four from ROCm 5.3).
constexpr hipStreamCaptureStatus hipStreamCaptureStatusNone = 0;
constexpr hipStreamCaptureStatus hipStreamCaptureStatusActive = 1;
constexpr hipStreamCaptureStatus hipStreamCaptureStatusInvalidated = 2;
constexpr hipStreamCaptureMode hipStreamCaptureModeGlobal = 0;
constexpr hipStreamCaptureMode hipStreamCaptureModeThreadLocal = 1;
constexpr hipStreamCaptureMode hipStreamCaptureModeRelaxed = 2;
constexpr unsigned long long hipGraphInstantiateFlagAutoFreeOnLaunch = 1;
constexpr hipGraphMemAttributeType hipGraphMemAttrUsedMemCurrent = 0;
constexpr hipGraphMemAttributeType hipGraphMemAttrUsedMemHigh = 1;
constexpr hipGraphMemAttributeType hipGraphMemAttrReservedMemCurrent = 2;
constexpr hipGraphMemAttributeType hipGraphMemAttrReservedMemHigh = 3;
constexpr unsigned hipUserObjectNoDestructorSync = 0x1;
constexpr unsigned hipGraphUserObjectMove = 0x1;

/// Versions (HIP_VERSION = major * 10^7 + minor * 10^5 + patch).
constexpr int HIP_VERSION_MAJOR_SCALE = 10000000;
constexpr int HIP_VERSION_POOL_MAX_SIZE = 60200000;  // ROCm 6.2 reads maxSize
constexpr int CUDA_VERSION_POOL_MAX_SIZE = 12020;    // HIP-on-NVIDIA style numbers

struct hipMemLocation {
    unsigned type;  // hipMemLocationType
    int id;
};

struct hipMemAccessDesc {
    hipMemLocation location;
    unsigned flags;  // hipMemAccessFlags
};

/// hipPointerAttribute_t: the same 32 bytes in every ROCm (the first
/// field is `memoryType` up to 5.x, `type` from 6.0).
struct hipPointerAttribute_t {
    int memoryType;  // hipMemoryType
    int device;
    void* devicePointer;
    void* hostPointer;
    int isManaged;
    unsigned allocationFlags;
};

/// Opaque 64 bytes, copied between processes as they are.
struct hipMemPoolPtrExportData {
    unsigned char reserved[64];
};

/// hipMemPoolProps in its ROCm >= 6.2 shape; before 6.2 `maxSize` is
/// reserved[0..8] of `unsigned char reserved[64]` (same offsets, same size).
struct hipMemPoolProps {
    unsigned allocType;    // hipMemAllocationType
    unsigned handleTypes;  // hipMemAllocationHandleType (bit mask)
    hipMemLocation location;
    void* win32SecurityAttributes;
    size_t maxSize;
    unsigned char reserved[56];
};

static_assert(sizeof(hipMemLocation) == 8, "hipMemLocation is 8 bytes");
static_assert(sizeof(hipMemAccessDesc) == 12, "hipMemAccessDesc is 12 bytes");
static_assert(offsetof(hipMemAccessDesc, flags) == 8, "hipMemAccessDesc.flags at 8");
static_assert(sizeof(hipMemPoolPtrExportData) == 64, "hipMemPoolPtrExportData is 64 bytes");
static_assert(sizeof(hipMemPoolProps) == 88, "hipMemPoolProps is 88 bytes");
static_assert(alignof(hipMemPoolProps) == 8, "hipMemPoolProps is 8-aligned");
static_assert(offsetof(hipMemPoolProps, allocType) == 0, "allocType at 0");
static_assert(offsetof(hipMemPoolProps, handleTypes) == 4, "handleTypes at 4");
static_assert(offsetof(hipMemPoolProps, location) == 8, "location at 8");
static_assert(offsetof(hipMemLocation, id) == 4, "location.id at 4");
static_assert(offsetof(hipMemPoolProps, win32SecurityAttributes) == 16, "win32SecurityAttributes at 16");
static_assert(offsetof(hipMemPoolProps, maxSize) == 24, "maxSize at 24 (reserved[0] before ROCm 6.2)");
static_assert(offsetof(hipMemPoolProps, reserved) == 32, "reserved at 32");
static_assert(sizeof(hipPointerAttribute_t) == 32, "hipPointerAttribute_t is 32 bytes");
static_assert(offsetof(hipPointerAttribute_t, devicePointer) == 8, "devicePointer at 8");
static_assert(offsetof(hipPointerAttribute_t, hostPointer) == 16, "hostPointer at 16");
static_assert(offsetof(hipPointerAttribute_t, isManaged) == 24, "isManaged at 24");

}  // namespace hip_abi

#ifndef HIP_ON_CUDA_ABI_ONLY

#include <cuda_runtime_api.h>

#define HIP_ON_CUDA_EXPORT extern "C" __attribute__((visibility("default")))

// Shared by the shim's files; hidden (-fvisibility=hidden and the version
// script keep everything but the hip* functions local).
namespace shim {

// hip_on_cuda.cpp

/// Records a non-success result as the thread's last error and returns it.
hip_abi::hipError_t done(hip_abi::hipError_t h);
/// A CUDA runtime call's result, translated (translation 1.) and recorded.
hip_abi::hipError_t cuda(cudaError_t e);
/// Remembers a CUDA code that became hipErrorUnknown, for the message
/// hipGetErrorString(hipErrorUnknown) gives: a cudaError_t, or with
/// `driver` a CUresult.
void remember_untranslated(int code, bool driver);
/// What hipRuntimeGetVersion reports (translation 4.).
int reported_version();
/// Whether the shim acts as HIP on NVIDIA (a CUDA version number) rather
/// than as an AMD ROCm.
bool as_hip_on_nvidia();

// vmm.cpp

/// hipDeviceGetAttribute for the attributes vmm.cpp answers (translation
/// 25.): false if `attr` is not one of them, else true with the call's
/// result in *result.
bool vmm_device_attribute(int* pi, hip_abi::hipDeviceAttribute_t attr, int device, hip_abi::hipError_t* result);
/// The CUDA driver's name and message of a CUresult; false (both left as
/// they are) when the driver cannot be asked.
bool driver_error_strings(int code, const char** name, const char** text);

}  // namespace shim

#endif  // HIP_ON_CUDA_ABI_ONLY

#endif  // HIP_ON_CUDA_H
