// HIP-on-CUDA shim: the virtual memory management calls (hipMemAddressReserve,
// hipMemCreate, hipMemMap, ...) over the CUDA *driver* API, and the device
// attributes that go with them. Translations 20. to 26. in the list at the
// top of hip_on_cuda.cpp; the HIP ABI they share with the rest of the shim
// is in hip_on_cuda.h.
//
// Why the driver API, reached through the runtime's entry-point query:
// CUDA's runtime has no virtual-memory calls (cuMemCreate, cuMemMap, ... exist
// only in libcuda). Linking libcuda is not possible where the shim is built
// from the pip CUDA wheels (no libcuda.so stub; the build machine has no
// driver), and dlopen("libcuda.so.1") could pick a different driver than
// the one libcudart uses. cudaGetDriverEntryPointByVersion (CUDA >= 12.5
// headers; cudaGetDriverEntryPoint with older ones) asks libcudart for the
// very driver it has loaded, with the ABI version named here, so the shim
// keeps linking libcudart only. The PFN_* types are cudaTypedefs.h's.
//
// Driver calls need a current context, which the runtime makes current only
// inside its own calls: before each driver call that needs one, the shim asks
// cuCtxGetCurrent and, on a thread with none, calls cudaFree(NULL), which
// makes the primary context of the thread's current device (hipSetDevice's)
// current, as any runtime call that needs a context does.

#include "hip_on_cuda.h"

// ---------------------------------------------------------------------------
// The HIP ABI of the virtual memory calls. build.sh compiles this part with
// HIP_ON_CUDA_ABI_ONLY next to ROCm's hip_runtime_api.h.

namespace hip_abi {

struct ihipMemGenericAllocationHandle;
/// A pointer in HIP; the shim carries CUDA's 64-bit handle in it (20.).
using hipMemGenericAllocationHandle_t = ihipMemGenericAllocationHandle*;
using hipMemAllocationGranularity_flags = int;
/// hipMemAllocationProp: 32 bytes, in one of two layouts (see below).
struct hipMemAllocationProp;

constexpr hipMemAllocationGranularity_flags hipMemAllocationGranularityMinimum = 0x0;
constexpr hipMemAllocationGranularity_flags hipMemAllocationGranularityRecommended = 0x1;

// hipDeviceAttribute_t values after hipDeviceAttributeMemoryPoolsSupported
// (88): 89 from ROCm 5.3, 91 from ROCm 6.1, 94 and 95 in later 7.x headers
// (94 in HIP 7.13's). 90, 92 and 93 (host register, host NUMA id, DMA-buf)
// are not virtual memory and are not translated.
constexpr hipDeviceAttribute_t hipDeviceAttributeVirtualMemoryManagementSupported = 89;
constexpr hipDeviceAttribute_t hipDeviceAttributeMemoryPoolSupportedHandleTypes = 91;
constexpr hipDeviceAttribute_t hipDeviceAttributeGPUDirectRDMAWithHipVMMSupported = 94;
constexpr hipDeviceAttribute_t hipDeviceAttributeHandleTypeFabricSupported = 95;

/// The first ROCm whose hipMemAllocationProp has CUDA's field order, and
/// whose hipDeviceGetAttribute knows VirtualMemoryManagementSupported.
constexpr int HIP_VERSION_ALLOC_PROP_CUDA_ORDER = 50300000;

/// hipMemAllocationProp up to ROCm 5.2 (5.2.3's header).
struct hipMemAllocationPropR0502 {
    unsigned char compressionType;
    hipMemLocation location;       // at 4
    unsigned requestedHandleType;  // hipMemAllocationHandleType, at 12
    unsigned type;                 // hipMemAllocationType, at 16
    unsigned short usage;          // at 20
    void* win32HandleMetaData;     // at 24
};

/// hipMemAllocationProp from ROCm 5.3 on: CUDA's CUmemAllocationProp order
/// (HIP names the flag bytes like CUDA, without CUDA's reserved[4], which
/// falls in the padding: the same 32 bytes).
struct hipMemAllocationPropR0503 {
    unsigned type;                 // hipMemAllocationType
    unsigned requestedHandleType;  // hipMemAllocationHandleType (a mask)
    hipMemLocation location;       // at 8
    void* win32HandleMetaData;     // at 16
    struct {
        unsigned char compressionType;       // at 24
        unsigned char gpuDirectRDMACapable;  // at 25
        unsigned short usage;                // at 26
    } allocFlags;
};

static_assert(sizeof(hipMemAllocationPropR0502) == 32, "hipMemAllocationProp (ROCm 5.2) is 32 bytes");
static_assert(offsetof(hipMemAllocationPropR0502, location) == 4, "5.2: location at 4");
static_assert(offsetof(hipMemAllocationPropR0502, requestedHandleType) == 12, "5.2: requestedHandleType at 12");
static_assert(offsetof(hipMemAllocationPropR0502, type) == 16, "5.2: type at 16");
static_assert(offsetof(hipMemAllocationPropR0502, usage) == 20, "5.2: usage at 20");
static_assert(offsetof(hipMemAllocationPropR0502, win32HandleMetaData) == 24, "5.2: win32HandleMetaData at 24");
static_assert(sizeof(hipMemAllocationPropR0503) == 32, "hipMemAllocationProp (ROCm >= 5.3) is 32 bytes");
static_assert(offsetof(hipMemAllocationPropR0503, requestedHandleType) == 4, "5.3: requestedHandleType at 4");
static_assert(offsetof(hipMemAllocationPropR0503, location) == 8, "5.3: location at 8");
static_assert(offsetof(hipMemAllocationPropR0503, win32HandleMetaData) == 16, "5.3: win32HandleMetaData at 16");
static_assert(offsetof(hipMemAllocationPropR0503, allocFlags) == 24, "5.3: allocFlags at 24");

}  // namespace hip_abi

#ifndef HIP_ON_CUDA_ABI_ONLY

// ---------------------------------------------------------------------------
// The implementation, over the CUDA driver.

#include <cuda.h>
#include <cudaTypedefs.h>

using namespace hip_abi;
using namespace shim;

static_assert(sizeof(CUmemAllocationProp) == sizeof(hipMemAllocationPropR0503), "CUmemAllocationProp is 32 bytes");
static_assert(sizeof(CUmemGenericAllocationHandle) <= sizeof(hipMemGenericAllocationHandle_t),
              "CUDA's handle fits in HIP's pointer");
static_assert(sizeof(CUdeviceptr) == sizeof(void*), "CUdeviceptr is a 64-bit address");
static_assert(sizeof(CUmemAccessDesc) == sizeof(hipMemAccessDesc), "access descriptors are 12 bytes on both sides");
// Values that keep their numbers (the translations below still name each).
static_assert(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR == hipMemHandleTypePosixFileDescriptor, "handle type");
static_assert(CU_MEM_ACCESS_FLAGS_PROT_READWRITE == hipMemAccessFlagsProtReadWrite, "access flags");
static_assert(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED == hipMemAllocationGranularityRecommended, "granularity flag");

// CUresult -> hipError_t, following HIP's own hipCUResultTohipError (HIP's
// NVIDIA headers); every other CUresult is hipErrorUnknown (24.).
#define HIP_ON_CUDA_CU_TO_HIP(X)                                                    \
    X(CUDA_SUCCESS, hipSuccess)                                                     \
    X(CUDA_ERROR_INVALID_VALUE, hipErrorInvalidValue)                               \
    X(CUDA_ERROR_OUT_OF_MEMORY, hipErrorOutOfMemory)                                \
    X(CUDA_ERROR_NOT_INITIALIZED, hipErrorNotInitialized)                           \
    X(CUDA_ERROR_DEINITIALIZED, hipErrorDeinitialized)                              \
    X(CUDA_ERROR_PROFILER_DISABLED, hipErrorProfilerDisabled)                       \
    X(CUDA_ERROR_PROFILER_NOT_INITIALIZED, hipErrorProfilerNotInitialized)          \
    X(CUDA_ERROR_PROFILER_ALREADY_STARTED, hipErrorProfilerAlreadyStarted)          \
    X(CUDA_ERROR_PROFILER_ALREADY_STOPPED, hipErrorProfilerAlreadyStopped)          \
    X(CUDA_ERROR_NO_DEVICE, hipErrorNoDevice)                                       \
    X(CUDA_ERROR_INVALID_DEVICE, hipErrorInvalidDevice)                             \
    X(CUDA_ERROR_INVALID_IMAGE, hipErrorInvalidImage)                               \
    X(CUDA_ERROR_INVALID_CONTEXT, hipErrorInvalidContext)                           \
    X(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, hipErrorContextAlreadyCurrent)            \
    X(CUDA_ERROR_MAP_FAILED, hipErrorMapFailed)                                     \
    X(CUDA_ERROR_UNMAP_FAILED, hipErrorUnmapFailed)                                 \
    X(CUDA_ERROR_ARRAY_IS_MAPPED, hipErrorArrayIsMapped)                            \
    X(CUDA_ERROR_ALREADY_MAPPED, hipErrorAlreadyMapped)                             \
    X(CUDA_ERROR_NO_BINARY_FOR_GPU, hipErrorNoBinaryForGpu)                         \
    X(CUDA_ERROR_ALREADY_ACQUIRED, hipErrorAlreadyAcquired)                         \
    X(CUDA_ERROR_NOT_MAPPED, hipErrorNotMapped)                                     \
    X(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, hipErrorNotMappedAsArray)                     \
    X(CUDA_ERROR_NOT_MAPPED_AS_POINTER, hipErrorNotMappedAsPointer)                 \
    X(CUDA_ERROR_ECC_UNCORRECTABLE, hipErrorECCNotCorrectable)                      \
    X(CUDA_ERROR_UNSUPPORTED_LIMIT, hipErrorUnsupportedLimit)                       \
    X(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, hipErrorContextAlreadyInUse)               \
    X(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, hipErrorPeerAccessUnsupported)            \
    X(CUDA_ERROR_INVALID_PTX, hipErrorInvalidKernelFile)                            \
    X(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, hipErrorInvalidGraphicsContext)          \
    X(CUDA_ERROR_INVALID_SOURCE, hipErrorInvalidSource)                             \
    X(CUDA_ERROR_FILE_NOT_FOUND, hipErrorFileNotFound)                              \
    X(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, hipErrorSharedObjectSymbolNotFound) \
    X(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, hipErrorSharedObjectInitFailed)         \
    X(CUDA_ERROR_OPERATING_SYSTEM, hipErrorOperatingSystem)                         \
    X(CUDA_ERROR_INVALID_HANDLE, hipErrorInvalidHandle)                             \
    X(CUDA_ERROR_ILLEGAL_STATE, hipErrorIllegalState)                               \
    X(CUDA_ERROR_NOT_FOUND, hipErrorNotFound)                                       \
    X(CUDA_ERROR_NOT_READY, hipErrorNotReady)                                       \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, hipErrorIllegalAddress)                           \
    X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, hipErrorLaunchOutOfResources)             \
    X(CUDA_ERROR_LAUNCH_TIMEOUT, hipErrorLaunchTimeOut)                             \
    X(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, hipErrorPeerAccessAlreadyEnabled)     \
    X(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, hipErrorPeerAccessNotEnabled)             \
    X(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, hipErrorSetOnActiveProcess)                \
    X(CUDA_ERROR_CONTEXT_IS_DESTROYED, hipErrorContextIsDestroyed)                  \
    X(CUDA_ERROR_ASSERT, hipErrorAssert)                                            \
    X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, hipErrorHostMemoryAlreadyRegistered) \
    X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, hipErrorHostMemoryNotRegistered)       \
    X(CUDA_ERROR_LAUNCH_FAILED, hipErrorLaunchFailure)                              \
    X(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, hipErrorCooperativeLaunchTooLarge)   \
    X(CUDA_ERROR_NOT_SUPPORTED, hipErrorNotSupported)                               \
    X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, hipErrorStreamCaptureUnsupported)      \
    X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, hipErrorStreamCaptureInvalidated)      \
    X(CUDA_ERROR_STREAM_CAPTURE_MERGE, hipErrorStreamCaptureMerge)                  \
    X(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, hipErrorStreamCaptureUnmatched)          \
    X(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, hipErrorStreamCaptureUnjoined)            \
    X(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, hipErrorStreamCaptureIsolation)          \
    X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, hipErrorStreamCaptureImplicit)            \
    X(CUDA_ERROR_CAPTURED_EVENT, hipErrorCapturedEvent)                             \
    X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, hipErrorStreamCaptureWrongThread)     \
    X(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, hipErrorGraphExecUpdateFailure)         \
    X(CUDA_ERROR_UNKNOWN, hipErrorUnknown)

// Each pair keeps its number, so hipGetErrorString's message (CUDA's text of
// the cudaError_t of that number, or HIP's wording for 202) fits.
#define X(c, h) static_assert(static_cast<int>(c) == hip_abi::h, #c " and " #h " differ");
HIP_ON_CUDA_CU_TO_HIP(X)
#undef X

namespace {

// --- the driver's functions ------------------------------------------------

struct Driver {
    PFN_cuGetErrorName_v6000 get_error_name = nullptr;
    PFN_cuGetErrorString_v6000 get_error_string = nullptr;
    PFN_cuCtxGetCurrent_v4000 ctx_get_current = nullptr;
    PFN_cuDeviceGet_v2000 device_get = nullptr;
    PFN_cuDeviceGetAttribute_v2000 device_get_attribute = nullptr;
    PFN_cuMemAddressReserve_v10020 address_reserve = nullptr;
    PFN_cuMemAddressFree_v10020 address_free = nullptr;
    PFN_cuMemCreate_v10020 create = nullptr;
    PFN_cuMemRelease_v10020 release = nullptr;
    PFN_cuMemMap_v10020 map = nullptr;
    PFN_cuMemUnmap_v10020 unmap = nullptr;
    PFN_cuMemSetAccess_v10020 set_access = nullptr;
    PFN_cuMemGetAccess_v10020 get_access = nullptr;
    PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
    PFN_cuMemRetainAllocationHandle_v11000 retain = nullptr;
    PFN_cuMemExportToShareableHandle_v10020 export_handle = nullptr;
    PFN_cuMemImportFromShareableHandle_v10020 import_handle = nullptr;
    /// cudaSuccess once every function was found; else the runtime's error
    /// (no driver: cudaErrorInsufficientDriver), or cudaErrorNotSupported
    /// for a driver that lacks one (`missing` names it).
    cudaError_t status = cudaSuccess;
    const char* missing = nullptr;
};

/// One driver function, in the ABI version of the PFN type it is stored in.
template <typename F>
void find_entry(Driver& d, const char* name, unsigned version, F* out) {
    if (d.status != cudaSuccess) {
        return;
    }
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found);
#else
    (void)version;  // older headers: the driver's newest version (these have one)
    cudaError_t e = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &found);
#endif
    if (e != cudaSuccess) {
        d.status = e;
    } else if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
        d.status = cudaErrorNotSupported;
        d.missing = name;
    } else {
        *out = reinterpret_cast<F>(fn);
    }
}

Driver load_driver() {
    Driver d;
    find_entry(d, "cuGetErrorName", 6000, &d.get_error_name);
    find_entry(d, "cuGetErrorString", 6000, &d.get_error_string);
    find_entry(d, "cuCtxGetCurrent", 4000, &d.ctx_get_current);
    find_entry(d, "cuDeviceGet", 2000, &d.device_get);
    find_entry(d, "cuDeviceGetAttribute", 2000, &d.device_get_attribute);
    find_entry(d, "cuMemAddressReserve", 10020, &d.address_reserve);
    find_entry(d, "cuMemAddressFree", 10020, &d.address_free);
    find_entry(d, "cuMemCreate", 10020, &d.create);
    find_entry(d, "cuMemRelease", 10020, &d.release);
    find_entry(d, "cuMemMap", 10020, &d.map);
    find_entry(d, "cuMemUnmap", 10020, &d.unmap);
    find_entry(d, "cuMemSetAccess", 10020, &d.set_access);
    find_entry(d, "cuMemGetAccess", 10020, &d.get_access);
    find_entry(d, "cuMemGetAllocationGranularity", 10020, &d.granularity);
    find_entry(d, "cuMemRetainAllocationHandle", 11000, &d.retain);
    find_entry(d, "cuMemExportToShareableHandle", 10020, &d.export_handle);
    find_entry(d, "cuMemImportFromShareableHandle", 10020, &d.import_handle);
    if (d.status != cudaSuccess) {
        (void)cudaGetLastError();  // the error is reported by each call (22.)
    }
    if (d.missing != nullptr) {
        std::fprintf(stderr, "hip_on_cuda: the CUDA driver has no %s: the virtual memory calls are hipErrorNotSupported\n",
                     d.missing);
    }
    return d;
}

const Driver& driver() {
    static const Driver d = load_driver();
    return d;
}

/// The driver, ready for a call: found, and (with `context`) a context
/// current on this thread. Else the HIP error, recorded.
hipError_t ready(const Driver** out, bool context) {
    const Driver& d = driver();
    if (d.status != cudaSuccess) {
        return cuda(d.status);
    }
    if (context) {
        CUcontext c = nullptr;
        if (d.ctx_get_current(&c) != CUDA_SUCCESS || c == nullptr) {
            hipError_t e = cuda(cudaFree(nullptr));  // current device's primary context
            if (e != hipSuccess) {
                return e;
            }
        }
    }
    *out = &d;
    return hipSuccess;
}

// --- translations ------------------------------------------------------------

/// A CUresult, translated (24.) and recorded as the thread's last error.
hipError_t drv(CUresult r) {
    if (r == CUDA_ERROR_UNKNOWN) {
        remember_untranslated(0, false);  // a genuine unknown error: no CUresult to name
    }
    switch (r) {
#define X(c, h) \
    case c:     \
        return done(h);
        HIP_ON_CUDA_CU_TO_HIP(X)
#undef X
        default:
            remember_untranslated(static_cast<int>(r), true);
            return done(hipErrorUnknown);
    }
}

CUdeviceptr dptr(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)); }

CUmemGenericAllocationHandle cu_handle(hipMemGenericAllocationHandle_t h) {
    return static_cast<CUmemGenericAllocationHandle>(reinterpret_cast<uintptr_t>(h));
}

hipMemGenericAllocationHandle_t hip_handle(CUmemGenericAllocationHandle h) {
    return reinterpret_cast<hipMemGenericAllocationHandle_t>(static_cast<uintptr_t>(h));
}

/// Whether hipMemAllocationProp is in CUDA's order (21.): from ROCm 5.3, and
/// as HIP on NVIDIA (where it is CUDA's struct).
bool alloc_prop_in_cuda_order() {
    int v = reported_version();
    return as_hip_on_nvidia() || v >= HIP_VERSION_ALLOC_PROP_CUDA_ORDER;
}

/// A location (device; host ones only as HIP on NVIDIA, as in 17.).
bool cu_location(const hipMemLocation& h, CUmemLocation* out) {
    switch (h.type) {
        case hipMemLocationTypeDevice:
            out->type = CU_MEM_LOCATION_TYPE_DEVICE;
            break;
        case hipMemLocationTypeHost:
            if (!as_hip_on_nvidia()) {
                return false;
            }
            out->type = CU_MEM_LOCATION_TYPE_HOST;
            break;
        case hipMemLocationTypeHostNuma:
            if (!as_hip_on_nvidia()) {
                return false;
            }
            out->type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
            break;
        default:
            return false;
    }
    out->id = h.id;
    return true;
}

/// A hipMemAllocationHandleType mask (Posix fd 1, Win32 2, Win32Kmt 4).
bool cu_handle_types(unsigned h, CUmemAllocationHandleType* out) {
    const unsigned known = hipMemHandleTypePosixFileDescriptor | hipMemHandleTypeWin32 | hipMemHandleTypeWin32Kmt;
    if ((h & ~known) != 0) {
        return false;
    }
    unsigned c = CU_MEM_HANDLE_TYPE_NONE;
    if (h & hipMemHandleTypePosixFileDescriptor) c |= CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if (h & hipMemHandleTypeWin32) c |= CU_MEM_HANDLE_TYPE_WIN32;
    if (h & hipMemHandleTypeWin32Kmt) c |= CU_MEM_HANDLE_TYPE_WIN32_KMT;
    *out = static_cast<CUmemAllocationHandleType>(c);
    return true;
}

/// One handle type, for export and import (none is not one).
bool cu_handle_type(unsigned h, CUmemAllocationHandleType* out) {
    if (h != hipMemHandleTypePosixFileDescriptor && h != hipMemHandleTypeWin32 && h != hipMemHandleTypeWin32Kmt) {
        return false;
    }
    return cu_handle_types(h, out);
}

bool cu_access_flags(unsigned h, CUmemAccess_flags* out) {
    switch (h) {
        case hipMemAccessFlagsProtNone:
            *out = CU_MEM_ACCESS_FLAGS_PROT_NONE;
            return true;
        case hipMemAccessFlagsProtRead:
            *out = CU_MEM_ACCESS_FLAGS_PROT_READ;
            return true;
        case hipMemAccessFlagsProtReadWrite:
            *out = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
            return true;
        default:
            return false;
    }
}

unsigned long long hip_vmm_access_flags(unsigned long long c) {
    switch (c) {
        case CU_MEM_ACCESS_FLAGS_PROT_READ:
            return hipMemAccessFlagsProtRead;
        case CU_MEM_ACCESS_FLAGS_PROT_READWRITE:
            return hipMemAccessFlagsProtReadWrite;
        default:
            return hipMemAccessFlagsProtNone;
    }
}

/// hipMemAllocationProp -> CUmemAllocationProp (21.), read in the layout of
/// the ROCm the shim acts as. false: a value HIP does not define there.
bool cu_alloc_prop(const hipMemAllocationProp* p, CUmemAllocationProp* out) {
    unsigned type = 0, handle_types = 0;
    hipMemLocation loc{};
    void* win32 = nullptr;
    unsigned char rdma = 0;
    if (alloc_prop_in_cuda_order()) {
        hipMemAllocationPropR0503 h;
        std::memcpy(&h, p, sizeof h);
        type = h.type;
        handle_types = h.requestedHandleType;
        loc = h.location;
        win32 = h.win32HandleMetaData;
        rdma = h.allocFlags.gpuDirectRDMACapable;
    } else {
        hipMemAllocationPropR0502 h;
        std::memcpy(&h, p, sizeof h);
        type = h.type;
        handle_types = h.requestedHandleType;
        loc = h.location;
        win32 = h.win32HandleMetaData;
    }
    std::memset(out, 0, sizeof *out);
    if (type != hipMemAllocationTypePinned) {
        return false;  // the only type of every ROCm's hipMemCreate
    }
    out->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    if (!cu_handle_types(handle_types, &out->requestedHandleTypes) || !cu_location(loc, &out->location)) {
        return false;
    }
    out->win32HandleMetaData = win32;
    // compressionType and usage have no AMD meaning: CUDA gets none / 0.
    out->allocFlags.compressionType = CU_MEM_ALLOCATION_COMP_NONE;
    out->allocFlags.gpuDirectRDMACapable = rdma != 0 ? 1 : 0;
    out->allocFlags.usage = 0;
    return true;
}

/// A driver device attribute of a device ordinal.
hipError_t cu_device_attribute(int* pi, CUdevice_attribute a, int ordinal) {
    int count = 0;
    hipError_t e = cuda(cudaGetDeviceCount(&count));  // initialises the driver
    if (e != hipSuccess) {
        return e;
    }
    if (ordinal < 0 || ordinal >= count) {
        return done(hipErrorInvalidDevice);
    }
    const Driver* d = nullptr;
    if ((e = ready(&d, false)) != hipSuccess) {
        return e;
    }
    CUdevice dev = 0;
    if ((e = drv(d->device_get(&dev, ordinal))) != hipSuccess) {
        return e;
    }
    return drv(d->device_get_attribute(pi, a, dev));
}

}  // namespace

// ---------------------------------------------------------------------------
// The hooks of hip_on_cuda.h.

namespace shim {

bool vmm_device_attribute(int* pi, hipDeviceAttribute_t attr, int device, hipError_t* result) {
    switch (attr) {
        case hipDeviceAttributeVirtualMemoryManagementSupported:
            if (!alloc_prop_in_cuda_order()) {
                return false;  // ROCm 5.2 has no such attribute: hipErrorInvalidValue
            }
            *result = cu_device_attribute(pi, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device);
            return true;
        case hipDeviceAttributeGPUDirectRDMAWithHipVMMSupported:
            *result = cu_device_attribute(pi, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, device);
            return true;
        case hipDeviceAttributeMemoryPoolSupportedHandleTypes: {
            int mask = 0;
            *result = cuda(cudaDeviceGetAttribute(&mask, cudaDevAttrMemoryPoolSupportedHandleTypes, device));
            if (*result == hipSuccess) {
                // Posix fd / Win32 / Win32Kmt keep their bits; CUDA's fabric
                // (8) has no stable HIP number and is left out.
                *pi = mask & static_cast<int>(hipMemHandleTypePosixFileDescriptor | hipMemHandleTypeWin32 |
                                              hipMemHandleTypeWin32Kmt);
            }
            return true;
        }
        case hipDeviceAttributeHandleTypeFabricSupported: {
            // The shim has no fabric handle type (HIP's number for it is not
            // the same in every ROCm): 0 for a valid device.
            int count = 0;
            *result = cuda(cudaGetDeviceCount(&count));
            if (*result == hipSuccess && (device < 0 || device >= count)) {
                *result = done(hipErrorInvalidDevice);
            }
            if (*result == hipSuccess) {
                *pi = 0;
            }
            return true;
        }
        default:
            return false;
    }
}

bool driver_error_strings(int code, const char** name, const char** text) {
    const Driver& d = driver();
    if (d.get_error_name == nullptr || d.get_error_string == nullptr) {
        return false;
    }
    const char* n = nullptr;
    const char* t = nullptr;
    CUresult r = static_cast<CUresult>(code);
    if (d.get_error_name(r, &n) == CUDA_SUCCESS && n != nullptr) *name = n;
    if (d.get_error_string(r, &t) == CUDA_SUCCESS && t != nullptr) *text = t;
    return true;
}

}  // namespace shim

// ---------------------------------------------------------------------------
// Address ranges (20.). The argument checks are those of ROCm's own
// hip_vm.cpp (5.2 to 6.x): they answer hipErrorInvalidValue before the
// driver is asked.

HIP_ON_CUDA_EXPORT hipError_t hipMemAddressReserve(void** ptr, size_t size, size_t alignment, void* addr,
                                                   unsigned long long flags) {
    if (ptr == nullptr || flags != 0) {
        return done(hipErrorInvalidValue);
    }
    const Driver* d = nullptr;
    hipError_t e = ready(&d, true);
    if (e != hipSuccess) {
        return e;
    }
    CUdeviceptr p = 0;
    e = drv(d->address_reserve(&p, size, alignment, dptr(addr), 0));
    if (e == hipSuccess) {
        *ptr = reinterpret_cast<void*>(static_cast<uintptr_t>(p));
    }
    return e;
}

HIP_ON_CUDA_EXPORT hipError_t hipMemAddressFree(void* devPtr, size_t size) {
    if (devPtr == nullptr || size == 0) {
        return done(hipErrorInvalidValue);
    }
    const Driver* d = nullptr;
    hipError_t e = ready(&d, true);
    return e != hipSuccess ? e : drv(d->address_free(dptr(devPtr), size));
}

// ---------------------------------------------------------------------------
// Physical allocations (20., 21.).

HIP_ON_CUDA_EXPORT hipError_t hipMemCreate(hipMemGenericAllocationHandle_t* handle, size_t size,
                                           const hipMemAllocationProp* prop, unsigned long long flags) {
    CUmemAllocationProp c;
    if (handle == nullptr || prop == nullptr || size == 0 || flags != 0 || !cu_alloc_prop(prop, &c)) {
        return done(hipErrorInvalidValue);
    }
    const Driver* d = nullptr;
    hipError_t e = ready(&d, true);
    if (e != hipSuccess) {
        return e;
    }
    CUmemGenericAllocationHandle h = 0;
    e = drv(d->create(&h, size, &c, 0));
    if (e == hipSuccess) {
        *handle = hip_handle(h);
    }
    return e;
}

HIP_ON_CUDA_EXPORT hipError_t hipMemRelease(hipMemGenericAllocationHandle_t handle) {
    if (handle == nullptr) {
        return done(hipErrorInvalidValue);
    }
    const Driver* d = nullptr;
    hipError_t e = ready(&d, true);
    return e != hipSuccess ? e : drv(d->release(cu_handle(handle)));
}

HIP_ON_CUDA_EXPORT hipError_t hipMemGetAllocationGranularity(size_t* granularity, const hipMemAllocationProp* prop,
                                                             hipMemAllocationGranularity_flags option) {
    CUmemAllocationProp c;
    if (granularity == nullptr || prop == nullptr || !cu_alloc_prop(prop, &c)) {
        return done(hipErrorInvalidValue);
    }
    CUmemAllocationGranularity_flags o;
    switch (option) {
        case hipMemAllocationGranularityMinimum:
            o = CU_MEM_ALLOC_GRANULARITY_MINIMUM;
            break;
        case hipMemAllocationGranularityRecommended:
            o = CU_MEM_ALLOC_GRANULARITY_RECOMMENDED;
            break;
        default:
            return done(hipErrorInvalidValue);
    }
    const Driver* d = nullptr;
    hipError_t e = ready(&d, true);
    return e != hipSuccess ? e : drv(d->granularity(granularity, &c, o));
}

HIP_ON_CUDA_EXPORT hipError_t hipMemRetainAllocationHandle(hipMemGenericAllocationHandle_t* handle, void* addr) {
    if (handle == nullptr || addr == nullptr) {
        return done(hipErrorInvalidValue);
    }
    const Driver* d = nullptr;
    hipError_t e = ready(&d, true);
    if (e != hipSuccess) {
        return e;
    }
    CUmemGenericAllocationHandle h = 0;
    e = drv(d->retain(&h, addr));
    if (e == hipSuccess) {
        *handle = hip_handle(h);
    }
    return e;
}

// ---------------------------------------------------------------------------
// Mappings and access (20., 23.).

HIP_ON_CUDA_EXPORT hipError_t hipMemMap(void* ptr, size_t size, size_t offset, hipMemGenericAllocationHandle_t handle,
                                        unsigned long long flags) {
    if (ptr == nullptr || handle == nullptr || size == 0 || offset != 0 || flags != 0) {
        return done(hipErrorInvalidValue);
    }
    const Driver* d = nullptr;
    hipError_t e = ready(&d, true);
    return e != hipSuccess ? e : drv(d->map(dptr(ptr), size, 0, cu_handle(handle), 0));
}

HIP_ON_CUDA_EXPORT hipError_t hipMemUnmap(void* ptr, size_t size) {
    if (ptr == nullptr) {
        return done(hipErrorInvalidValue);
    }
    const Driver* d = nullptr;
    hipError_t e = ready(&d, true);
    return e != hipSuccess ? e : drv(d->unmap(dptr(ptr), size));
}

HIP_ON_CUDA_EXPORT hipError_t hipMemSetAccess(void* ptr, size_t size, const hipMemAccessDesc* desc, size_t count) {
    if (ptr == nullptr || size == 0 || desc == nullptr || count == 0) {
        return done(hipErrorInvalidValue);
    }
    CUmemAccessDesc small[8];
    CUmemAccessDesc* descs = count <= 8 ? small : static_cast<CUmemAccessDesc*>(std::calloc(count, sizeof *descs));
    if (descs == nullptr) {
        return done(hipErrorOutOfMemory);
    }
    hipError_t e = hipSuccess;
    for (size_t i = 0; i < count && e == hipSuccess; ++i) {
        std::memset(&descs[i], 0, sizeof descs[i]);
        if (!cu_location(desc[i].location, &descs[i].location) || !cu_access_flags(desc[i].flags, &descs[i].flags)) {
            e = done(hipErrorInvalidValue);
        }
    }
    const Driver* d = nullptr;
    if (e == hipSuccess) {
        e = ready(&d, true);
    }
    if (e == hipSuccess) {
        e = drv(d->set_access(dptr(ptr), size, descs, count));
    }
    if (descs != small) {
        std::free(descs);
    }
    return e;
}

HIP_ON_CUDA_EXPORT hipError_t hipMemGetAccess(unsigned long long* flags, const hipMemLocation* location, void* ptr) {
    CUmemLocation c;
    std::memset(&c, 0, sizeof c);
    if (flags == nullptr || location == nullptr || ptr == nullptr || !cu_location(*location, &c)) {
        return done(hipErrorInvalidValue);
    }
    const Driver* d = nullptr;
    hipError_t e = ready(&d, true);
    if (e != hipSuccess) {
        return e;
    }
    unsigned long long f = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    e = drv(d->get_access(&f, &c, dptr(ptr)));
    if (e == hipSuccess) {
        *flags = hip_vmm_access_flags(f);
    }
    return e;
}

// ---------------------------------------------------------------------------
// Sharing between processes (20.): for a POSIX file descriptor both APIs
// write an int on export and take the descriptor itself, cast to void*, on
// import.

HIP_ON_CUDA_EXPORT hipError_t hipMemExportToShareableHandle(void* shareableHandle,
                                                            hipMemGenericAllocationHandle_t handle,
                                                            unsigned handleType, unsigned long long flags) {
    CUmemAllocationHandleType t;
    if (shareableHandle == nullptr || handle == nullptr || flags != 0 || !cu_handle_type(handleType, &t)) {
        return done(hipErrorInvalidValue);
    }
    const Driver* d = nullptr;
    hipError_t e = ready(&d, true);
    return e != hipSuccess ? e : drv(d->export_handle(shareableHandle, cu_handle(handle), t, 0));
}

HIP_ON_CUDA_EXPORT hipError_t hipMemImportFromShareableHandle(hipMemGenericAllocationHandle_t* handle, void* osHandle,
                                                              unsigned shHandleType) {
    CUmemAllocationHandleType t;
    // As in ROCm, a null osHandle (which is also descriptor 0) is refused.
    if (handle == nullptr || osHandle == nullptr || !cu_handle_type(shHandleType, &t)) {
        return done(hipErrorInvalidValue);
    }
    const Driver* d = nullptr;
    hipError_t e = ready(&d, true);
    if (e != hipSuccess) {
        return e;
    }
    CUmemGenericAllocationHandle h = 0;
    e = drv(d->import_handle(&h, osHandle, t));
    if (e == hipSuccess) {
        *handle = hip_handle(h);
    }
    return e;
}

#endif  // HIP_ON_CUDA_ABI_ONLY
