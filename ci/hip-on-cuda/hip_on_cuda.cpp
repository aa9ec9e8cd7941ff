// HIP-on-CUDA shim: a libamdhip64.so.5 for NVIDIA GPUs, as a *test fixture*.
//
// It exports, with the ABI of Debian's ROCm 5.2.3 libamdhip64.so.5 (soname,
// symbol versions hip_4.2 ... hip_5.1, hipError_t numbers, struct layouts,
// enum and flag values), every hip* function that somalloc's rocm backend
// (backends/rocm/) loads, implemented over the CUDA runtime API (and,
// for the virtual memory calls of vmm.cpp, the CUDA driver API);
// the graph functions that ROCm added after 5.2 (5.3: user objects and the
// graph-memory attributes, 5.5: hipGraphUpload) have the ABI and version
// nodes of those later libamdhip64.so releases (see 15. and
// libamdhip64.map). The
// rocm test binaries, built unchanged, then run on an NVIDIA GPU with
// LD_LIBRARY_PATH / SOMALLOC_AMDHIP pointing at this library.
//
// It is written against CUDA's own headers (cuda_runtime_api.h) and defines
// the HIP side itself: HIP 5.2's nvidia_detail headers call APIs that CUDA 13
// removed (cudaBindTexture, ...) and do not compile against it. Only
// libcudart is linked (no libcuda at link time; the pip CUDA wheels have no
// driver stub to link against): modules go through cudaLibraryLoadData /
// cudaLibraryGetKernel / cudaLaunchKernel, which need no context handling
// (the runtime makes the primary context of the current device current
// itself). The virtual memory calls exist only in the driver API; vmm.cpp
// reaches the driver libcudart has loaded through the runtime's entry-point
// query and makes a context current itself (22.).
//
// The files: hip_on_cuda.h (the HIP ABI: numbers, flags, layouts; and the
// helpers the .cpp files share), this file (everything but virtual memory),
// vmm.cpp (virtual memory, 20. to 26.). build.sh builds and checks them.
//
// EVERY PLACE WHERE THE SHIM TRANSLATES SOMETHING
//  1. Error codes (translate(), table HIP_ON_CUDA_CUDA_TO_HIP below): each
//     cudaError_t that has a HIP 5.2 counterpart maps to it, following HIP's
//     own hipCUDAErrorTohipError (nvidia_detail) table; all of those keep
//     their number (checked by static_assert), several under another name:
//       cudaErrorMemoryAllocation 2     -> hipErrorOutOfMemory 2
//       cudaErrorInitializationError 3  -> hipErrorNotInitialized 3
//       cudaErrorCudartUnloading 4      -> hipErrorDeinitialized 4
//       cudaErrorInvalidKernelImage 200 -> hipErrorInvalidImage 200
//       cudaErrorDeviceUninitialized 201-> hipErrorInvalidContext 201
//       cudaErrorMapBufferObjectFailed 205 / Unmap.. 206 -> hipErrorMapFailed / UnmapFailed
//       cudaErrorNoKernelImageForDevice 209 -> hipErrorNoBinaryForGpu 209
//       cudaErrorECCUncorrectable 214   -> hipErrorECCNotCorrectable 214
//       cudaErrorDeviceAlreadyInUse 216 -> hipErrorContextAlreadyInUse 216
//       cudaErrorInvalidPtx 218         -> hipErrorInvalidKernelFile 218
//       cudaErrorInvalidResourceHandle 400 -> hipErrorInvalidHandle 400
//       cudaErrorSymbolNotFound 500     -> hipErrorNotFound 500
//       cudaErrorLaunchTimeout 702      -> hipErrorLaunchTimeOut 702
//     Every other cudaError_t of CUDA 13.0 (codes HIP 5.2 lacks: 16, 18-20,
//     22-28, 31, 32, 34, 36, 37, 43-46, 49, 65-69, 102, 103, 127, 220-226,
//     402, 703, 711, 714-718, 721, 800, 802-812, 909, 911-915, and any code
//     a later CUDA adds) becomes hipErrorUnknown 999, as in
//     HIP's table. They are NOT passed through: 911/912 mean other things in
//     ROCm 6 (hipErrorInvalidChannelDescriptor/InvalidTexture). The original
//     CUDA code is remembered per thread, and hipGetErrorString(999) names it.
//     Shim-made errors (a value HIP does not define) use HIP's usual code:
//     hipErrorInvalidValue 1, hipErrorInvalidMemcpyDirection 21,
//     hipErrorInvalidDevice 101, hipErrorInvalidHandle 400,
//     hipErrorNotSupported 801.
//  2. Error names and messages: hipGetErrorName gives HIP's names
//     ("hipErrorOutOfMemory"), hipGetErrorString CUDA's message text for the
//     matching cudaError_t (HIP-only codes 202/1052/1053: HIP's wording).
//  3. Last error: HIP's hipGetLastError returns (and resets) the last error
//     of *any* HIP call of the thread; the shim records that per thread (so
//     that its own rejections count too) and clears CUDA's last error, whose
//     value it does not use (cudaGetLastError keeps reporting a failed
//     initialisation, e.g. no driver, on every call).
//  4. Runtime version (hipRuntimeGetVersion): a HIP_VERSION-style number,
//     6.2 with the CUDA runtime version as the patch field: 60_200_000 +
//     cudaRuntimeGetVersion (60_213_000 on CUDA 13.0). The rocm backend then
//     takes its AMD branch (>= 10^7, ROCm >= 6.2: writes maxSize), which is
//     what this shim implements (cudaMemPoolProps has maxSize). Override with
//     HIP_ON_CUDA_VERSION=<n> (e.g. 50221153 to act as ROCm 5.2.3: the
//     backend then refuses max_size, and the shim treats the maxSize bytes
//     as reserved[0..8], which must be zero, as HIP < 6.2 does; below
//     50600000 hipMallocAsync/hipMallocFromPoolAsync of 0 bytes and
//     hipFreeAsync(NULL) also fail with hipErrorInvalidValue, as before
//     ROCm 5.6). HIP_ON_CUDA_VERSION=cuda reports the CUDA runtime's own
//     number (e.g. 13000), as HIP on NVIDIA does: the backend then takes its
//     HIP-on-NVIDIA branch, where pools of host and managed memory exist
//     (17.). The version also picks the pointer-type numbering (18.), the
//     hipMemAllocationProp layout (21.) and whether attribute 89 exists (25.).
//  5. hipMemPoolProps (88 bytes, HIP >= 6.2 shape) -> cudaMemPoolProps
//     (88 bytes, but `usage` and reserved[54] after maxSize): copied field by
//     field; allocType 0/1, handleTypes bits 1/2/4, location type 0/1 keep
//     their values; anything HIP 5.2 does not define, and non-zero reserved
//     bytes, are hipErrorInvalidValue; cudaMemPoolProps.usage = 0.
//  6. hipMemPoolAttr 1..8 -> cudaMemPoolAttr 1..8 (same numbers and value
//     types: int for the three reuse flags, uint64_t for the rest); others
//     are hipErrorInvalidValue.
//  7. hipDeviceAttribute_t: the HIP enum is numbered differently from CUDA's.
//     hipDeviceAttributeMemoryPoolsSupported (88) ->
//     cudaDevAttrMemoryPoolsSupported (115) here, the virtual memory,
//     handle-type and RDMA attributes in vmm.cpp (25.); any other id is
//     hipErrorInvalidValue.
//  8. hipMemcpyKind 0..4 -> cudaMemcpyKind 0..4 (same numbers); others are
//     hipErrorInvalidMemcpyDirection.
//  9. Flags: hipStreamDefault/NonBlocking 0/1 = CUDA's; hipEventDefault,
//     BlockingSync, DisableTiming, Interprocess 0/1/2/4 = CUDA's; the
//     AMD-only hipEventReleaseToDevice/ReleaseToSystem (0x40000000,
//     0x80000000: cache-coherence scope hints) are dropped; other bits are
//     hipErrorInvalidValue. hipStreamWaitEvent flags must be 0 (as in HIP).
// 10. Devices: hipDevice_t is the ordinal; hipDeviceGet checks it against
//     cudaGetDeviceCount (hipErrorInvalidDevice); hipDeviceGetName copies
//     cudaDeviceProp::name (truncated to len - 1 bytes, NUL-terminated).
// 11. Modules and launches: hipModule_t = cudaLibrary_t, hipFunction_t =
//     cudaKernel_t (cast, never dereferenced). hipModuleLaunchKernel's
//     (gridDimX..Z, blockDimX..Z, sharedMemBytes, stream, kernelParams) ->
//     cudaLaunchKernel(kernel, dim3 grid, dim3 block, kernelParams,
//     sharedMemBytes, stream). `extra` (packed argument buffer) is not
//     supported: hipErrorNotSupported (the backend always passes NULL). A
//     NULL function is hipErrorInvalidHandle, as in HIP. The image is a CUDA
//     fatbin/cubin/PTX (build.rs with SOMALLOC_HIP_KERNELS=nvcc), not an AMD
//     code object. CUDA loads lazily: a missing architecture shows up at
//     hipModuleGetFunction or launch, not at hipModuleLoadData as on AMD.
// 12. Handles: hipStream_t/hipEvent_t/hipMemPool_t are the CUDA handles,
//     cast; the NULL stream is CUDA's legacy default stream, as HIP's NULL
//     stream is the blocking default stream.
// 13. Pool access: hipMemAccessDesc[] (12 bytes each) is rebuilt element by
//     element as cudaMemAccessDesc[] (location as in 5., hipMemAccessFlags
//     0/1/3 = cudaMemAccessFlags 0/1/3, others hipErrorInvalidValue);
//     hipMemPoolGetAccess translates the location in and the flags out.
// 14. IPC: export/import handle types as in 5. (POSIX fd 1 = CUDA's 1; for
//     an fd the shareable handle is the fd itself on import and an int* on
//     export, in both APIs); hipMemPoolPtrExportData and
//     cudaMemPoolPtrExportData are both 64 opaque bytes, passed as they are.
//     hipDeviceCanAccessPeer = cudaDeviceCanAccessPeer (ordinals).
// 15. Stream capture and graphs: hipGraph_t, hipGraphExec_t, hipGraphNode_t
//     and hipUserObject_t are the CUDA handles, cast. hipStreamCaptureStatus
//     0..2, hipStreamCaptureMode 0..2 (others: hipErrorInvalidValue),
//     hipGraphMemAttributeType 0..3 (others: hipErrorInvalidValue) and the
//     flags hipGraphInstantiateFlagAutoFreeOnLaunch 1,
//     hipUserObjectNoDestructorSync 1, hipGraphUserObjectMove 1 keep CUDA's
//     numbers (static_assert). Calls, one to one:
//       hipStreamIsCapturing       -> cudaStreamIsCapturing
//       hipStreamGetCaptureInfo_v2 -> cudaStreamGetCaptureInfo (CUDA 13: the
//                                     7-parameter form, edge data not asked
//                                     for; CUDA 12 headers: the 6-parameter _v2)
//       hipStreamBeginCapture / EndCapture -> cudaStreamBeginCapture / EndCapture
//       hipGraphDestroy, hipGraphExecDestroy, hipGraphLaunch, hipGraphUpload
//                                  -> the cudaGraph* call of the same name
//       hipGraphInstantiateWithFlags -> cudaGraphInstantiateWithFlags; flags
//                                     0 or AutoFreeOnLaunch only, as in ROCm 5.x
//       hipDeviceGetGraphMemAttribute / hipDeviceGraphMemTrim
//                                  -> cudaDeviceGetGraphMemAttribute / Trim
//                                     (the value is a uint64_t on both sides)
//       hipUserObjectCreate        -> cudaUserObjectCreate (hipHostFn_t is
//                                     cudaHostFn_t; like ROCm, the only flag
//                                     accepted is NoDestructorSync, and a null
//                                     destructor or a 0 refcount is
//                                     hipErrorInvalidValue)
//       hipGraphRetainUserObject   -> cudaGraphRetainUserObject (flags 0 or Move)
//     The capture errors 900-908 keep their numbers (table in 1.). These
//     functions are exported whatever HIP_ON_CUDA_VERSION says: the version
//     only changes the two behaviours listed in 4.
// 16. hipGetDevice -> cudaGetDevice (the thread's current device ordinal).
// 17. Pool locations and allocation types (hipMemPoolCreate, 5.): the HIP
//     6.x/7.x values hipMemLocationTypeHost 2, hipMemLocationTypeHostNuma 3
//     and hipMemAllocationTypeManaged 2 keep CUDA's numbers. Acting as an
//     AMD ROCm (a reported version >= 10^7) the shim refuses them in
//     hipMemPoolCreate with hipErrorInvalidValue, as every ROCm release's
//     hip_mempool.cpp does; acting as HIP on NVIDIA (HIP_ON_CUDA_VERSION=cuda,
//     see 4.) it passes them to cudaMemPoolCreate (managed only with CUDA 13
//     headers).
// 18. hipPointerGetAttributes -> cudaPointerGetAttributes. The 32-byte
//     hipPointerAttribute_t is filled from cudaPointerAttributes: device,
//     devicePointer, hostPointer as they are; isManaged = (type == managed);
//     allocationFlags = 0. The memory type follows the numbering of the
//     ROCm the shim acts as: from ROCm 6.0 (and as HIP on NVIDIA) CUDA's
//     numbers (Unregistered 0, Host 1, Device 2, Managed 3); before 6.0 HIP's
//     old ones (Host 0, Device 1; managed memory is Host with isManaged 1, as
//     ROCm 5 reports fine-grained managed memory), and an address the
//     runtime does not know is hipErrorInvalidValue instead of Unregistered.
// 19. hipHostMalloc -> cudaHostAlloc: hipHostMallocDefault/Portable/Mapped/
//     WriteCombined 0/1/2/4 = cudaHostAllocDefault/Portable/Mapped/
//     WriteCombined; the AMD-only hipHostMallocNumaUser, Coherent and
//     NonCoherent (0x20000000, 0x40000000, 0x80000000: NUMA policy and
//     cache-coherence hints) are dropped; other bits are
//     hipErrorInvalidValue. hipHostFree -> cudaFreeHost.
//
// In vmm.cpp (virtual memory, over the CUDA driver API):
// 20. The calls, one to one: hipMemAddressReserve / hipMemAddressFree ->
//     cuMemAddressReserve / cuMemAddressFree, hipMemCreate / hipMemRelease
//     -> cuMemCreate / cuMemRelease, hipMemMap / hipMemUnmap -> cuMemMap /
//     cuMemUnmap, hipMemSetAccess / hipMemGetAccess -> cuMemSetAccess /
//     cuMemGetAccess, hipMemGetAllocationGranularity ->
//     cuMemGetAllocationGranularity, hipMemRetainAllocationHandle ->
//     cuMemRetainAllocationHandle, hipMemExportToShareableHandle /
//     hipMemImportFromShareableHandle -> cuMemExportToShareableHandle /
//     cuMemImportFromShareableHandle. A void* address is the CUdeviceptr of
//     the same value; hipMemGenericAllocationHandle_t (a pointer in HIP)
//     carries CUDA's 64-bit CUmemGenericAllocationHandle as its value and is
//     never dereferenced. Before the driver is asked, the shim refuses with
//     hipErrorInvalidValue what ROCm's own hip_vm.cpp refuses: null
//     out-pointers, handles and addresses, size 0 (create, map, set access,
//     address free), count 0 (set access), flags other than 0, a hipMemMap
//     offset other than 0. Version node hip_5.1, as in the real library;
//     exported whatever HIP_ON_CUDA_VERSION says (ROCm 5.2.3's own versions
//     of these calls are stubs: see README.md).
// 21. hipMemAllocationProp (32 bytes; hipMemCreate,
//     hipMemGetAllocationGranularity) -> CUmemAllocationProp, read in the
//     layout of the ROCm the shim acts as (4.), the way 5. treats maxSize:
//     from ROCm 5.3 on (the default 6.2), and as HIP on NVIDIA, CUDA's order
//     {type; requestedHandleType; location at 8; win32HandleMetaData at 16;
//     allocFlags {compressionType, gpuDirectRDMACapable, usage} at 24};
//     below 5.3 (HIP_ON_CUDA_VERSION=50221153) ROCm 5.2's {compressionType;
//     location at 4; requestedHandleType at 12; type at 16; usage at 20;
//     win32HandleMetaData at 24}. Fields: type hipMemAllocationTypePinned 1
//     -> CU_MEM_ALLOCATION_TYPE_PINNED (the only type any ROCm's hipMemCreate
//     takes); requestedHandleType bits hipMemHandleTypePosixFileDescriptor
//     1 / Win32 2 / Win32Kmt 4 -> CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR /
//     WIN32 / WIN32_KMT; location as in 23.; win32HandleMetaData as it is;
//     gpuDirectRDMACapable (5.3 layout only) as it is; compressionType and
//     usage, which mean nothing to an AMD GPU, are dropped (CUDA gets
//     CU_MEM_ALLOCATION_COMP_NONE and 0). Other values: hipErrorInvalidValue
//     (so the other layout's struct is refused: its type reads as 0).
//     hipMemAllocationGranularity_flags Minimum 0 / Recommended 1 ->
//     CU_MEM_ALLOC_GRANULARITY_MINIMUM / RECOMMENDED; others
//     hipErrorInvalidValue.
// 22. The driver: its functions come from cudaGetDriverEntryPointByVersion
//     (cudaGetDriverEntryPoint with CUDA < 12.5 headers), each at the ABI
//     version of its PFN type in cudaTypedefs.h, once per process. Without
//     a driver every call answers the runtime's error, translated as in 1.
//     (no GPU: hipErrorInsufficientDriver or hipErrorNoDevice, like
//     hipGetDeviceCount); a driver that lacks one makes them all
//     hipErrorNotSupported (said once on stderr). Context: a call that needs
//     one asks cuCtxGetCurrent and, on a thread with none, calls
//     cudaFree(NULL), which makes the primary context of the thread's
//     current device (hipSetDevice's) current.
// 23. Locations and access (hipMemCreate, hipMemSetAccess, hipMemGetAccess):
//     hipMemLocationTypeDevice 1 -> CU_MEM_LOCATION_TYPE_DEVICE with the
//     ordinal as id; Host 2 / HostNuma 3 -> CU_MEM_LOCATION_TYPE_HOST /
//     HOST_NUMA only as HIP on NVIDIA (as in 17.), else, like any other type,
//     hipErrorInvalidValue. hipMemAccessFlags ProtNone 0 / ProtRead 1 /
//     ProtReadWrite 3 -> CU_MEM_ACCESS_FLAGS_PROT_NONE / READ / READWRITE
//     (others hipErrorInvalidValue), and back for hipMemGetAccess.
//     hipMemAccessDesc[] is rebuilt element by element as CUmemAccessDesc[].
// 24. CUresult -> hipError_t (table HIP_ON_CUDA_CU_TO_HIP in vmm.cpp),
//     following HIP's own hipCUResultTohipError (nvidia_detail); every pair
//     keeps its number (static_assert), e.g. CUDA_ERROR_INVALID_VALUE 1 ->
//     hipErrorInvalidValue, CUDA_ERROR_OUT_OF_MEMORY 2 -> hipErrorOutOfMemory,
//     CUDA_ERROR_INVALID_CONTEXT 201 -> hipErrorInvalidContext,
//     CUDA_ERROR_ALREADY_MAPPED 208, CUDA_ERROR_NOT_MAPPED 211,
//     CUDA_ERROR_INVALID_HANDLE 400 -> hipErrorInvalidHandle,
//     CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE 708 -> hipErrorSetOnActiveProcess,
//     CUDA_ERROR_NOT_SUPPORTED 801 -> hipErrorNotSupported. Every other
//     CUresult (CUDA_ERROR_NOT_PERMITTED 800, CUDA_ERROR_INVALID_ADDRESS_SPACE
//     717, ...) is hipErrorUnknown 999, as in HIP's table; the CUresult is
//     remembered per thread (3.) and hipGetErrorString(999) gives the
//     driver's own name and message for it.
// 25. hipDeviceGetAttribute (7.): VirtualMemoryManagementSupported 89 ->
//     CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED (102, through
//     the driver), from ROCm 5.3 on only: acting as ROCm 5.2, whose enum
//     lacks it, hipErrorInvalidValue; MemoryPoolSupportedHandleTypes 91
//     (ROCm >= 6.1) -> cudaDevAttrMemoryPoolSupportedHandleTypes (119),
//     keeping HIP's bits 1/2/4 (CUDA's fabric bit 8 has no stable HIP
//     number); GPUDirectRDMAWithHipVMMSupported 94 ->
//     CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED (110);
//     HandleTypeFabricSupported 95 -> 0 (the shim translates no fabric
//     handle type). 94 and 95 are answered whatever the version says.
// 26. Sharing (hipMemExportToShareableHandle /
//     hipMemImportFromShareableHandle): handle type one of Posix fd 1, Win32
//     2, Win32Kmt 4, as in 21. (hipMemHandleTypeNone and masks are
//     hipErrorInvalidValue). For a POSIX fd both APIs write an int through
//     shareableHandle on export and take the descriptor itself, cast to
//     void*, on import; a null osHandle (which is also descriptor 0) is
//     hipErrorInvalidValue, as in ROCm.

// The HIP ABI (numbers, flags, layouts) is in hip_on_cuda.h; the virtual
// memory calls (20. to 26.) are in vmm.cpp.
#include "hip_on_cuda.h"

#ifndef HIP_ON_CUDA_ABI_ONLY

// ---------------------------------------------------------------------------
// The implementation, over the CUDA runtime.

static_assert(sizeof(cudaMemPoolProps) == sizeof(hip_abi::hipMemPoolProps),
              "cudaMemPoolProps and hipMemPoolProps are both 88 bytes");
static_assert(sizeof(cudaMemPoolPtrExportData) == sizeof(hip_abi::hipMemPoolPtrExportData),
              "pointer export data is 64 opaque bytes on both sides");
static_assert(sizeof(void*) == 8, "ROCm is 64-bit only");

// cudaError_t -> hipError_t for every CUDA code with a HIP 5.2 counterpart
// (HIP's hipCUDAErrorTohipError); everything else is hipErrorUnknown.
#define HIP_ON_CUDA_CUDA_TO_HIP(X)                                              \
    X(cudaSuccess, hipSuccess)                                                  \
    X(cudaErrorInvalidValue, hipErrorInvalidValue)                              \
    X(cudaErrorMemoryAllocation, hipErrorOutOfMemory)                           \
    X(cudaErrorInitializationError, hipErrorNotInitialized)                     \
    X(cudaErrorCudartUnloading, hipErrorDeinitialized)                          \
    X(cudaErrorProfilerDisabled, hipErrorProfilerDisabled)                      \
    X(cudaErrorProfilerNotInitialized, hipErrorProfilerNotInitialized)          \
    X(cudaErrorProfilerAlreadyStarted, hipErrorProfilerAlreadyStarted)          \
    X(cudaErrorProfilerAlreadyStopped, hipErrorProfilerAlreadyStopped)          \
    X(cudaErrorInvalidConfiguration, hipErrorInvalidConfiguration)              \
    X(cudaErrorInvalidPitchValue, hipErrorInvalidPitchValue)                    \
    X(cudaErrorInvalidSymbol, hipErrorInvalidSymbol)                            \
    X(cudaErrorInvalidDevicePointer, hipErrorInvalidDevicePointer)              \
    X(cudaErrorInvalidMemcpyDirection, hipErrorInvalidMemcpyDirection)          \
    X(cudaErrorInsufficientDriver, hipErrorInsufficientDriver)                  \
    X(cudaErrorMissingConfiguration, hipErrorMissingConfiguration)              \
    X(cudaErrorPriorLaunchFailure, hipErrorPriorLaunchFailure)                  \
    X(cudaErrorInvalidDeviceFunction, hipErrorInvalidDeviceFunction)            \
    X(cudaErrorNoDevice, hipErrorNoDevice)                                      \
    X(cudaErrorInvalidDevice, hipErrorInvalidDevice)                            \
    X(cudaErrorInvalidKernelImage, hipErrorInvalidImage)                        \
    X(cudaErrorDeviceUninitialized, hipErrorInvalidContext)                     \
    X(cudaErrorMapBufferObjectFailed, hipErrorMapFailed)                        \
    X(cudaErrorUnmapBufferObjectFailed, hipErrorUnmapFailed)                    \
    X(cudaErrorArrayIsMapped, hipErrorArrayIsMapped)                            \
    X(cudaErrorAlreadyMapped, hipErrorAlreadyMapped)                            \
    X(cudaErrorNoKernelImageForDevice, hipErrorNoBinaryForGpu)                  \
    X(cudaErrorAlreadyAcquired, hipErrorAlreadyAcquired)                        \
    X(cudaErrorNotMapped, hipErrorNotMapped)                                    \
    X(cudaErrorNotMappedAsArray, hipErrorNotMappedAsArray)                      \
    X(cudaErrorNotMappedAsPointer, hipErrorNotMappedAsPointer)                  \
    X(cudaErrorECCUncorrectable, hipErrorECCNotCorrectable)                     \
    X(cudaErrorUnsupportedLimit, hipErrorUnsupportedLimit)                      \
    X(cudaErrorDeviceAlreadyInUse, hipErrorContextAlreadyInUse)                 \
    X(cudaErrorPeerAccessUnsupported, hipErrorPeerAccessUnsupported)            \
    X(cudaErrorInvalidPtx, hipErrorInvalidKernelFile)                           \
    X(cudaErrorInvalidGraphicsContext, hipErrorInvalidGraphicsContext)          \
    X(cudaErrorInvalidSource, hipErrorInvalidSource)                            \
    X(cudaErrorFileNotFound, hipErrorFileNotFound)                              \
    X(cudaErrorSharedObjectSymbolNotFound, hipErrorSharedObjectSymbolNotFound)  \
    X(cudaErrorSharedObjectInitFailed, hipErrorSharedObjectInitFailed)          \
    X(cudaErrorOperatingSystem, hipErrorOperatingSystem)                        \
    X(cudaErrorInvalidResourceHandle, hipErrorInvalidHandle)                    \
    X(cudaErrorIllegalState, hipErrorIllegalState)                              \
    X(cudaErrorSymbolNotFound, hipErrorNotFound)                                \
    X(cudaErrorNotReady, hipErrorNotReady)                                      \
    X(cudaErrorIllegalAddress, hipErrorIllegalAddress)                          \
    X(cudaErrorLaunchOutOfResources, hipErrorLaunchOutOfResources)              \
    X(cudaErrorLaunchTimeout, hipErrorLaunchTimeOut)                            \
    X(cudaErrorPeerAccessAlreadyEnabled, hipErrorPeerAccessAlreadyEnabled)      \
    X(cudaErrorPeerAccessNotEnabled, hipErrorPeerAccessNotEnabled)              \
    X(cudaErrorSetOnActiveProcess, hipErrorSetOnActiveProcess)                  \
    X(cudaErrorContextIsDestroyed, hipErrorContextIsDestroyed)                  \
    X(cudaErrorAssert, hipErrorAssert)                                          \
    X(cudaErrorHostMemoryAlreadyRegistered, hipErrorHostMemoryAlreadyRegistered) \
    X(cudaErrorHostMemoryNotRegistered, hipErrorHostMemoryNotRegistered)        \
    X(cudaErrorLaunchFailure, hipErrorLaunchFailure)                            \
    X(cudaErrorCooperativeLaunchTooLarge, hipErrorCooperativeLaunchTooLarge)    \
    X(cudaErrorNotSupported, hipErrorNotSupported)                              \
    X(cudaErrorStreamCaptureUnsupported, hipErrorStreamCaptureUnsupported)      \
    X(cudaErrorStreamCaptureInvalidated, hipErrorStreamCaptureInvalidated)      \
    X(cudaErrorStreamCaptureMerge, hipErrorStreamCaptureMerge)                  \
    X(cudaErrorStreamCaptureUnmatched, hipErrorStreamCaptureUnmatched)          \
    X(cudaErrorStreamCaptureUnjoined, hipErrorStreamCaptureUnjoined)            \
    X(cudaErrorStreamCaptureIsolation, hipErrorStreamCaptureIsolation)          \
    X(cudaErrorStreamCaptureImplicit, hipErrorStreamCaptureImplicit)            \
    X(cudaErrorCapturedEvent, hipErrorCapturedEvent)                            \
    X(cudaErrorStreamCaptureWrongThread, hipErrorStreamCaptureWrongThread)      \
    X(cudaErrorGraphExecUpdateFailure, hipErrorGraphExecUpdateFailure)          \
    X(cudaErrorUnknown, hipErrorUnknown)

// Every mapped pair keeps its number (so a HIP code maps back to exactly one
// CUDA code for its message). If a CUDA release renumbers one, this fails.
#define X(c, h) static_assert(static_cast<int>(c) == hip_abi::h, #c " and " #h " differ");
HIP_ON_CUDA_CUDA_TO_HIP(X)
#undef X

// Translated values that keep their numbers.
static_assert(cudaStreamNonBlocking == hip_abi::hipStreamNonBlocking, "stream flag");
static_assert(cudaEventBlockingSync == hip_abi::hipEventBlockingSync, "event flag");
static_assert(cudaEventDisableTiming == hip_abi::hipEventDisableTiming, "event flag");
static_assert(cudaEventInterprocess == hip_abi::hipEventInterprocess, "event flag");
static_assert(cudaMemcpyDefault == hip_abi::hipMemcpyDefault, "memcpy kind");
static_assert(cudaMemPoolAttrUsedMemHigh == hip_abi::hipMemPoolAttrUsedMemHigh, "pool attr");
static_assert(cudaStreamCaptureStatusNone == hip_abi::hipStreamCaptureStatusNone, "capture status");
static_assert(cudaStreamCaptureStatusActive == hip_abi::hipStreamCaptureStatusActive, "capture status");
static_assert(cudaStreamCaptureStatusInvalidated == hip_abi::hipStreamCaptureStatusInvalidated, "capture status");
static_assert(cudaStreamCaptureModeGlobal == hip_abi::hipStreamCaptureModeGlobal, "capture mode");
static_assert(cudaStreamCaptureModeThreadLocal == hip_abi::hipStreamCaptureModeThreadLocal, "capture mode");
static_assert(cudaStreamCaptureModeRelaxed == hip_abi::hipStreamCaptureModeRelaxed, "capture mode");
static_assert(cudaGraphInstantiateFlagAutoFreeOnLaunch == hip_abi::hipGraphInstantiateFlagAutoFreeOnLaunch,
              "instantiate flag");
static_assert(cudaGraphMemAttrUsedMemCurrent == hip_abi::hipGraphMemAttrUsedMemCurrent, "graph mem attr");
static_assert(cudaGraphMemAttrUsedMemHigh == hip_abi::hipGraphMemAttrUsedMemHigh, "graph mem attr");
static_assert(cudaGraphMemAttrReservedMemCurrent == hip_abi::hipGraphMemAttrReservedMemCurrent, "graph mem attr");
static_assert(cudaGraphMemAttrReservedMemHigh == hip_abi::hipGraphMemAttrReservedMemHigh, "graph mem attr");
static_assert(cudaUserObjectNoDestructorSync == hip_abi::hipUserObjectNoDestructorSync, "user object flag");
static_assert(cudaGraphUserObjectMove == hip_abi::hipGraphUserObjectMove, "retain flag");
static_assert(cudaMemLocationTypeHost == static_cast<int>(hip_abi::hipMemLocationTypeHost), "location type");
static_assert(cudaMemLocationTypeHostNuma == static_cast<int>(hip_abi::hipMemLocationTypeHostNuma), "location type");
static_assert(cudaMemoryTypeUnregistered == hip_abi::HIP6_MEMORY_TYPE_UNREGISTERED, "memory type");
static_assert(cudaMemoryTypeHost == hip_abi::HIP6_MEMORY_TYPE_HOST, "memory type");
static_assert(cudaMemoryTypeDevice == hip_abi::HIP6_MEMORY_TYPE_DEVICE, "memory type");
static_assert(cudaMemoryTypeManaged == hip_abi::HIP6_MEMORY_TYPE_MANAGED, "memory type");
static_assert(cudaHostAllocDefault == hip_abi::hipHostMallocDefault, "host alloc flag");
static_assert(cudaHostAllocPortable == hip_abi::hipHostMallocPortable, "host alloc flag");
static_assert(cudaHostAllocMapped == hip_abi::hipHostMallocMapped, "host alloc flag");
static_assert(cudaHostAllocWriteCombined == hip_abi::hipHostMallocWriteCombined, "host alloc flag");
#if CUDART_VERSION >= 13000
static_assert(cudaMemAllocationTypeManaged == static_cast<int>(hip_abi::hipMemAllocationTypeManaged), "alloc type");
#endif

using namespace hip_abi;

// The helpers: those hip_on_cuda.h declares are vmm.cpp's too.
namespace shim {

// The last error of any hip* call on this thread (HIP's hipGetLastError).
thread_local hipError_t tl_last_error = hipSuccess;
// The last cudaError_t (or, with tl_untranslated_driver, CUresult) that had
// no HIP 5.2 code (0: none), for the message of hipErrorUnknown, and the
// buffer that message is built in.
thread_local int tl_untranslated = 0;
thread_local bool tl_untranslated_driver = false;
thread_local char tl_message[320];

hipError_t translate(cudaError_t e) {
    switch (e) {
#define X(c, h) \
    case c:     \
        return h;
        HIP_ON_CUDA_CUDA_TO_HIP(X)
#undef X
        default:
            remember_untranslated(static_cast<int>(e), false);
            return hipErrorUnknown;
    }
}

void remember_untranslated(int code, bool driver) {
    tl_untranslated = code;
    tl_untranslated_driver = driver;
}

/// Records a non-success result as the thread's last error and returns it.
hipError_t done(hipError_t h) {
    if (h != hipSuccess) {
        tl_last_error = h;
    }
    return h;
}

/// A CUDA call's result, translated and recorded.
hipError_t cuda(cudaError_t e) {
    if (e == cudaErrorUnknown) {
        tl_untranslated = 0;  // a genuine cudaErrorUnknown
    }
    return done(translate(e));
}

/// The cudaError_t a HIP code came from (the numbers are the same), or -1
/// for codes that exist only in HIP.
int cuda_code_of(hipError_t h) {
    switch (h) {
#define X(c, hh) \
    case hh:     \
        return static_cast<int>(c);
        HIP_ON_CUDA_CUDA_TO_HIP(X)
#undef X
        default:
            return -1;
    }
}

const char* hip_only_message(hipError_t h) {
    switch (h) {
        case hipErrorContextAlreadyCurrent:
            return "context is already current";
        case hipErrorRuntimeMemory:
            return "HSA runtime memory call returned error";
        case hipErrorRuntimeOther:
            return "HSA runtime call other than memory returned error";
        default:
            return nullptr;
    }
}

/// The CUDA runtime's version number (0 if it cannot be read).
int cuda_runtime_version() {
    int cuda_version = 0;
    if (cudaRuntimeGetVersion(&cuda_version) != cudaSuccess || cuda_version < 0 || cuda_version > 99999) {
        (void)cudaGetLastError();
        cuda_version = 0;
    }
    return cuda_version;
}

int env_version() {
    const char* s = std::getenv("HIP_ON_CUDA_VERSION");
    if (s == nullptr || *s == '\0') {
        return 0;
    }
    if (std::strcmp(s, "cuda") == 0) {
        return cuda_runtime_version();  // HIP on NVIDIA reports CUDA's number
    }
    char* end = nullptr;
    long v = std::strtol(s, &end, 10);
    if (*end != '\0' || v <= 0 || v > INT_MAX) {
        std::fprintf(stderr, "hip_on_cuda: ignoring HIP_ON_CUDA_VERSION=%s (not a positive integer)\n", s);
        return 0;
    }
    return static_cast<int>(v);
}

/// What hipRuntimeGetVersion reports (see translation 4 at the top).
int reported_version() {
    static const int version = [] {
        int v = env_version();
        if (v != 0) {
            return v;
        }
        return HIP_VERSION_POOL_MAX_SIZE + cuda_runtime_version();
    }();
    return version;
}

/// Whether the HIP runtime we pretend to be reads hipMemPoolProps::maxSize
/// (the same rule as the rocm backend's pool_max_size_supported).
bool reads_max_size() {
    int v = reported_version();
    return v >= HIP_VERSION_MAJOR_SCALE ? v >= HIP_VERSION_POOL_MAX_SIZE : v >= CUDA_VERSION_POOL_MAX_SIZE;
}

/// Whether we act as a ROCm before 5.6, where hipMallocAsync(0) and
/// hipFreeAsync(NULL) fail (only when HIP_ON_CUDA_VERSION says so).
bool before_rocm_5_6() {
    int v = reported_version();
    return v >= HIP_VERSION_MAJOR_SCALE && v < 50600000;
}

/// Whether we act as HIP on NVIDIA (a reported CUDA version) rather than
/// an AMD ROCm.
bool as_hip_on_nvidia() { return reported_version() < HIP_VERSION_MAJOR_SCALE; }

/// Whether hipMemoryType has CUDA's numbers (ROCm >= 6.0, HIP on NVIDIA).
bool cuda_memory_types() {
    int v = reported_version();
    return v < HIP_VERSION_MAJOR_SCALE || v >= HIP_VERSION_POINTER_TYPES_6;
}

cudaStream_t cu(hipStream_t s) { return reinterpret_cast<cudaStream_t>(s); }
cudaEvent_t cu(hipEvent_t e) { return reinterpret_cast<cudaEvent_t>(e); }
cudaMemPool_t cu(hipMemPool_t p) { return reinterpret_cast<cudaMemPool_t>(p); }
cudaLibrary_t cu(hipModule_t m) { return reinterpret_cast<cudaLibrary_t>(m); }
cudaKernel_t cu(hipFunction_t f) { return reinterpret_cast<cudaKernel_t>(f); }
cudaGraph_t cu(hipGraph_t g) { return reinterpret_cast<cudaGraph_t>(g); }
cudaGraphExec_t cu(hipGraphExec_t g) { return reinterpret_cast<cudaGraphExec_t>(g); }
cudaUserObject_t cu(hipUserObject_t o) { return reinterpret_cast<cudaUserObject_t>(o); }

bool capture_mode(hipStreamCaptureMode m, cudaStreamCaptureMode* out) {
    switch (m) {
        case hipStreamCaptureModeGlobal:
            *out = cudaStreamCaptureModeGlobal;
            return true;
        case hipStreamCaptureModeThreadLocal:
            *out = cudaStreamCaptureModeThreadLocal;
            return true;
        case hipStreamCaptureModeRelaxed:
            *out = cudaStreamCaptureModeRelaxed;
            return true;
        default:
            return false;
    }
}

bool graph_mem_attr(hipGraphMemAttributeType a, cudaGraphMemAttributeType* out) {
    switch (a) {
        case hipGraphMemAttrUsedMemCurrent:
            *out = cudaGraphMemAttrUsedMemCurrent;
            return true;
        case hipGraphMemAttrUsedMemHigh:
            *out = cudaGraphMemAttrUsedMemHigh;
            return true;
        case hipGraphMemAttrReservedMemCurrent:
            *out = cudaGraphMemAttrReservedMemCurrent;
            return true;
        case hipGraphMemAttrReservedMemHigh:
            *out = cudaGraphMemAttrReservedMemHigh;
            return true;
        default:
            return false;
    }
}

bool pool_attr(hipMemPoolAttr a, cudaMemPoolAttr* out) {
    switch (a) {
        case hipMemPoolReuseFollowEventDependencies:
            *out = cudaMemPoolReuseFollowEventDependencies;
            return true;
        case hipMemPoolReuseAllowOpportunistic:
            *out = cudaMemPoolReuseAllowOpportunistic;
            return true;
        case hipMemPoolReuseAllowInternalDependencies:
            *out = cudaMemPoolReuseAllowInternalDependencies;
            return true;
        case hipMemPoolAttrReleaseThreshold:
            *out = cudaMemPoolAttrReleaseThreshold;
            return true;
        case hipMemPoolAttrReservedMemCurrent:
            *out = cudaMemPoolAttrReservedMemCurrent;
            return true;
        case hipMemPoolAttrReservedMemHigh:
            *out = cudaMemPoolAttrReservedMemHigh;
            return true;
        case hipMemPoolAttrUsedMemCurrent:
            *out = cudaMemPoolAttrUsedMemCurrent;
            return true;
        case hipMemPoolAttrUsedMemHigh:
            *out = cudaMemPoolAttrUsedMemHigh;
            return true;
        default:
            return false;
    }
}

bool location(const hipMemLocation& h, cudaMemLocation* out) {
    switch (h.type) {
        case hipMemLocationTypeInvalid:
            out->type = cudaMemLocationTypeInvalid;
            break;
        case hipMemLocationTypeDevice:
            out->type = cudaMemLocationTypeDevice;
            break;
        default:
            return false;  // HIP 5.2 has no host / NUMA locations
    }
    out->id = h.id;
    return true;
}

/// A pool's location (17.): the device locations of every HIP, and, as HIP
/// on NVIDIA only, the host ones (no ROCm release's hipMemPoolCreate takes
/// them).
bool pool_location(const hipMemLocation& h, cudaMemLocation* out) {
    if (location(h, out)) {
        return true;
    }
    if (!as_hip_on_nvidia()) {
        return false;
    }
    switch (h.type) {
        case hipMemLocationTypeHost:
            out->type = cudaMemLocationTypeHost;
            break;
        case hipMemLocationTypeHostNuma:
            out->type = cudaMemLocationTypeHostNuma;
            break;
        default:
            return false;
    }
    out->id = h.id;
    return true;
}

bool access_flags(unsigned h, cudaMemAccessFlags* out) {
    switch (h) {
        case hipMemAccessFlagsProtNone:
            *out = cudaMemAccessFlagsProtNone;
            return true;
        case hipMemAccessFlagsProtRead:
            *out = cudaMemAccessFlagsProtRead;
            return true;
        case hipMemAccessFlagsProtReadWrite:
            *out = cudaMemAccessFlagsProtReadWrite;
            return true;
        default:
            return false;
    }
}

unsigned hip_access_flags(cudaMemAccessFlags c) {
    switch (c) {
        case cudaMemAccessFlagsProtRead:
            return hipMemAccessFlagsProtRead;
        case cudaMemAccessFlagsProtReadWrite:
            return hipMemAccessFlagsProtReadWrite;
        default:
            return hipMemAccessFlagsProtNone;
    }
}

/// A hipMemAllocationHandleType bit mask (HIP 5.2: Posix fd 1, Win32 2,
/// Win32Kmt 4; CUDA's Fabric 8 has no HIP value).
bool handle_types(unsigned h, cudaMemAllocationHandleType* out) {
    const unsigned known = hipMemHandleTypePosixFileDescriptor | hipMemHandleTypeWin32 | hipMemHandleTypeWin32Kmt;
    if ((h & ~known) != 0) {
        return false;
    }
    unsigned c = cudaMemHandleTypeNone;
    if (h & hipMemHandleTypePosixFileDescriptor) c |= cudaMemHandleTypePosixFileDescriptor;
    if (h & hipMemHandleTypeWin32) c |= cudaMemHandleTypeWin32;
    if (h & hipMemHandleTypeWin32Kmt) c |= cudaMemHandleTypeWin32Kmt;
    *out = static_cast<cudaMemAllocationHandleType>(c);
    return true;
}

bool memcpy_kind(hipMemcpyKind k, cudaMemcpyKind* out) {
    switch (k) {
        case hipMemcpyHostToHost:
            *out = cudaMemcpyHostToHost;
            return true;
        case hipMemcpyHostToDevice:
            *out = cudaMemcpyHostToDevice;
            return true;
        case hipMemcpyDeviceToHost:
            *out = cudaMemcpyDeviceToHost;
            return true;
        case hipMemcpyDeviceToDevice:
            *out = cudaMemcpyDeviceToDevice;
            return true;
        case hipMemcpyDefault:
            *out = cudaMemcpyDefault;
            return true;
        default:
            return false;
    }
}

}  // namespace shim

using namespace shim;

// ---------------------------------------------------------------------------
// Errors and versions.

HIP_ON_CUDA_EXPORT const char* hipGetErrorName(hipError_t code) {
    switch (code) {
#define X(name, value) \
    case value:        \
        return #name;
        HIP_ON_CUDA_HIP_ERRORS(X)
#undef X
        default:
            return "hipErrorUnknown";
    }
}

HIP_ON_CUDA_EXPORT const char* hipGetErrorString(hipError_t code) {
    if (code == hipErrorUnknown && tl_untranslated != 0 && tl_untranslated_driver) {
        const char* cu_name = "an unnamed CUresult";
        const char* cu_text = "unknown CUDA driver error";
        driver_error_strings(tl_untranslated, &cu_name, &cu_text);
        std::snprintf(tl_message, sizeof tl_message, "%s (CUDA driver %s = %d, which has no HIP 5.2 code)", cu_text,
                      cu_name, tl_untranslated);
        return tl_message;
    }
    if (code == hipErrorUnknown && tl_untranslated != 0) {
        cudaError_t e = static_cast<cudaError_t>(tl_untranslated);
        std::snprintf(tl_message, sizeof tl_message, "%s (CUDA %s = %d, which has no HIP 5.2 code)",
                      cudaGetErrorString(e), cudaGetErrorName(e), tl_untranslated);
        return tl_message;
    }
    int c = cuda_code_of(code);
    if (c >= 0) {
        return cudaGetErrorString(static_cast<cudaError_t>(c));
    }
    if (const char* m = hip_only_message(code)) {
        return m;
    }
    return "unknown error";
}

HIP_ON_CUDA_EXPORT hipError_t hipGetLastError(void) {
    // Every failing hip* call has recorded its result in tl_last_error, so
    // CUDA's own last error adds nothing; it is only cleared. (Without a
    // driver, cudaGetLastError keeps returning the initialisation error,
    // while HIP's must read hipSuccess once it has been fetched.)
    hipError_t last = tl_last_error;
    tl_last_error = hipSuccess;
    (void)cudaGetLastError();
    return last;
}

HIP_ON_CUDA_EXPORT hipError_t hipPeekAtLastError(void) {
    // The same record as hipGetLastError's, left as it is.
    return tl_last_error;
}

HIP_ON_CUDA_EXPORT hipError_t hipRuntimeGetVersion(int* runtimeVersion) {
    if (runtimeVersion == nullptr) {
        return done(hipErrorInvalidValue);
    }
    *runtimeVersion = reported_version();
    return hipSuccess;
}

// ---------------------------------------------------------------------------
// Devices.

HIP_ON_CUDA_EXPORT hipError_t hipGetDeviceCount(int* count) {
    if (count == nullptr) {
        return done(hipErrorInvalidValue);
    }
    return cuda(cudaGetDeviceCount(count));
}

HIP_ON_CUDA_EXPORT hipError_t hipSetDevice(int deviceId) { return cuda(cudaSetDevice(deviceId)); }

HIP_ON_CUDA_EXPORT hipError_t hipGetDevice(int* deviceId) {
    if (deviceId == nullptr) {
        return done(hipErrorInvalidValue);
    }
    return cuda(cudaGetDevice(deviceId));
}

HIP_ON_CUDA_EXPORT hipError_t hipDeviceGet(hipDevice_t* device, int ordinal) {
    if (device == nullptr) {
        return done(hipErrorInvalidValue);
    }
    int count = 0;
    hipError_t e = cuda(cudaGetDeviceCount(&count));
    if (e != hipSuccess) {
        return e;
    }
    if (ordinal < 0 || ordinal >= count) {
        return done(hipErrorInvalidDevice);
    }
    *device = ordinal;
    return hipSuccess;
}

HIP_ON_CUDA_EXPORT hipError_t hipDeviceGetName(char* name, int len, hipDevice_t device) {
    if (name == nullptr || len <= 0) {
        return done(hipErrorInvalidValue);
    }
    cudaDeviceProp prop;
    std::memset(&prop, 0, sizeof prop);
    hipError_t e = cuda(cudaGetDeviceProperties(&prop, device));
    if (e != hipSuccess) {
        return e;
    }
    size_t n = strnlen(prop.name, sizeof prop.name);
    if (n > static_cast<size_t>(len) - 1) {
        n = static_cast<size_t>(len) - 1;
    }
    std::memcpy(name, prop.name, n);
    name[n] = '\0';
    return hipSuccess;
}

HIP_ON_CUDA_EXPORT hipError_t hipDeviceGetAttribute(int* pi, hipDeviceAttribute_t attr, int deviceId) {
    if (pi == nullptr) {
        return done(hipErrorInvalidValue);
    }
    cudaDeviceAttr a;
    switch (attr) {
        case hipDeviceAttributeMemoryPoolsSupported:
            a = cudaDevAttrMemoryPoolsSupported;
            break;
        default: {
            hipError_t e = hipErrorInvalidValue;
            if (vmm_device_attribute(pi, attr, deviceId, &e)) {
                return e;  // virtual memory, handle types, RDMA (25.)
            }
            return done(hipErrorInvalidValue);  // not translated by this shim
        }
    }
    return cuda(cudaDeviceGetAttribute(pi, a, deviceId));
}

HIP_ON_CUDA_EXPORT hipError_t hipDeviceCanAccessPeer(int* canAccessPeer, int deviceId, int peerDeviceId) {
    return cuda(cudaDeviceCanAccessPeer(canAccessPeer, deviceId, peerDeviceId));
}

HIP_ON_CUDA_EXPORT hipError_t hipMemGetInfo(size_t* free, size_t* total) {
    return cuda(cudaMemGetInfo(free, total));
}

// ---------------------------------------------------------------------------
// Streams and events.

HIP_ON_CUDA_EXPORT hipError_t hipStreamCreateWithFlags(hipStream_t* stream, unsigned int flags) {
    if (stream == nullptr) {
        return done(hipErrorInvalidValue);
    }
    unsigned cuda_flags;
    switch (flags) {
        case hipStreamDefault:
            cuda_flags = cudaStreamDefault;
            break;
        case hipStreamNonBlocking:
            cuda_flags = cudaStreamNonBlocking;
            break;
        default:
            return done(hipErrorInvalidValue);
    }
    cudaStream_t s = nullptr;
    hipError_t e = cuda(cudaStreamCreateWithFlags(&s, cuda_flags));
    if (e == hipSuccess) {
        *stream = reinterpret_cast<hipStream_t>(s);
    }
    return e;
}

HIP_ON_CUDA_EXPORT hipError_t hipStreamDestroy(hipStream_t stream) { return cuda(cudaStreamDestroy(cu(stream))); }

HIP_ON_CUDA_EXPORT hipError_t hipStreamSynchronize(hipStream_t stream) {
    return cuda(cudaStreamSynchronize(cu(stream)));
}

HIP_ON_CUDA_EXPORT hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int flags) {
    if (flags != 0) {
        return done(hipErrorInvalidValue);  // HIP: "flags must be 0"
    }
    return cuda(cudaStreamWaitEvent(cu(stream), cu(event), 0));
}

HIP_ON_CUDA_EXPORT hipError_t hipEventCreateWithFlags(hipEvent_t* event, unsigned flags) {
    if (event == nullptr) {
        return done(hipErrorInvalidValue);
    }
    const unsigned amd_only = hipEventReleaseToDevice | hipEventReleaseToSystem;
    const unsigned shared = hipEventBlockingSync | hipEventDisableTiming | hipEventInterprocess;
    if ((flags & ~(amd_only | shared)) != 0) {
        return done(hipErrorInvalidValue);
    }
    unsigned cuda_flags = cudaEventDefault;
    if (flags & hipEventBlockingSync) cuda_flags |= cudaEventBlockingSync;
    if (flags & hipEventDisableTiming) cuda_flags |= cudaEventDisableTiming;
    if (flags & hipEventInterprocess) cuda_flags |= cudaEventInterprocess;
    cudaEvent_t ev = nullptr;
    hipError_t e = cuda(cudaEventCreateWithFlags(&ev, cuda_flags));
    if (e == hipSuccess) {
        *event = reinterpret_cast<hipEvent_t>(ev);
    }
    return e;
}

HIP_ON_CUDA_EXPORT hipError_t hipEventDestroy(hipEvent_t event) { return cuda(cudaEventDestroy(cu(event))); }

HIP_ON_CUDA_EXPORT hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream) {
    return cuda(cudaEventRecord(cu(event), cu(stream)));
}

HIP_ON_CUDA_EXPORT hipError_t hipEventSynchronize(hipEvent_t event) { return cuda(cudaEventSynchronize(cu(event))); }

HIP_ON_CUDA_EXPORT hipError_t hipEventQuery(hipEvent_t event) { return cuda(cudaEventQuery(cu(event))); }

HIP_ON_CUDA_EXPORT hipError_t hipEventElapsedTime(float* ms, hipEvent_t start, hipEvent_t stop) {
    return cuda(cudaEventElapsedTime(ms, cu(start), cu(stop)));
}

// ---------------------------------------------------------------------------
// Pools.

HIP_ON_CUDA_EXPORT hipError_t hipDeviceGetDefaultMemPool(hipMemPool_t* mem_pool, int device) {
    return cuda(cudaDeviceGetDefaultMemPool(reinterpret_cast<cudaMemPool_t*>(mem_pool), device));
}

HIP_ON_CUDA_EXPORT hipError_t hipDeviceGetMemPool(hipMemPool_t* mem_pool, int device) {
    return cuda(cudaDeviceGetMemPool(reinterpret_cast<cudaMemPool_t*>(mem_pool), device));
}

HIP_ON_CUDA_EXPORT hipError_t hipDeviceSetMemPool(int device, hipMemPool_t mem_pool) {
    return cuda(cudaDeviceSetMemPool(device, cu(mem_pool)));
}

HIP_ON_CUDA_EXPORT hipError_t hipMemPoolCreate(hipMemPool_t* mem_pool, const hipMemPoolProps* props) {
    if (mem_pool == nullptr || props == nullptr) {
        return done(hipErrorInvalidValue);
    }
    cudaMemPoolProps c;
    std::memset(&c, 0, sizeof c);
    switch (props->allocType) {
        case hipMemAllocationTypeInvalid:
            c.allocType = cudaMemAllocationTypeInvalid;
            break;
        case hipMemAllocationTypePinned:
            c.allocType = cudaMemAllocationTypePinned;
            break;
#if CUDART_VERSION >= 13000
        case hipMemAllocationTypeManaged:
            if (!as_hip_on_nvidia()) {
                return done(hipErrorInvalidValue);  // no ROCm release takes it (17.)
            }
            c.allocType = cudaMemAllocationTypeManaged;
            break;
#endif
        default:
            return done(hipErrorInvalidValue);
    }
    if (!handle_types(props->handleTypes, &c.handleTypes) || !pool_location(props->location, &c.location)) {
        return done(hipErrorInvalidValue);
    }
    c.win32SecurityAttributes = props->win32SecurityAttributes;
    if (reads_max_size()) {
        c.maxSize = props->maxSize;
    } else if (props->maxSize != 0) {
        return done(hipErrorInvalidValue);  // reserved[0..8] before ROCm 6.2
    }
    for (unsigned char b : props->reserved) {
        if (b != 0) {
            return done(hipErrorInvalidValue);  // "reserved, must be 0"
        }
    }
    c.usage = 0;
    cudaMemPool_t pool = nullptr;
    hipError_t e = cuda(cudaMemPoolCreate(&pool, &c));
    if (e == hipSuccess) {
        *mem_pool = reinterpret_cast<hipMemPool_t>(pool);
    }
    return e;
}

HIP_ON_CUDA_EXPORT hipError_t hipMemPoolDestroy(hipMemPool_t mem_pool) { return cuda(cudaMemPoolDestroy(cu(mem_pool))); }

HIP_ON_CUDA_EXPORT hipError_t hipMemPoolSetAttribute(hipMemPool_t mem_pool, hipMemPoolAttr attr, void* value) {
    cudaMemPoolAttr a;
    if (!pool_attr(attr, &a)) {
        return done(hipErrorInvalidValue);
    }
    return cuda(cudaMemPoolSetAttribute(cu(mem_pool), a, value));
}

HIP_ON_CUDA_EXPORT hipError_t hipMemPoolGetAttribute(hipMemPool_t mem_pool, hipMemPoolAttr attr, void* value) {
    cudaMemPoolAttr a;
    if (!pool_attr(attr, &a)) {
        return done(hipErrorInvalidValue);
    }
    return cuda(cudaMemPoolGetAttribute(cu(mem_pool), a, value));
}

HIP_ON_CUDA_EXPORT hipError_t hipMemPoolSetAccess(hipMemPool_t mem_pool, const hipMemAccessDesc* desc_list,
                                                  size_t count) {
    if (count != 0 && desc_list == nullptr) {
        return done(hipErrorInvalidValue);
    }
    cudaMemAccessDesc small[8];
    cudaMemAccessDesc* descs = count <= 8 ? small : static_cast<cudaMemAccessDesc*>(std::calloc(count, sizeof *descs));
    if (descs == nullptr) {
        return done(hipErrorOutOfMemory);
    }
    hipError_t e = hipSuccess;
    for (size_t i = 0; i < count && e == hipSuccess; ++i) {
        std::memset(&descs[i], 0, sizeof descs[i]);
        if (!location(desc_list[i].location, &descs[i].location) || !access_flags(desc_list[i].flags, &descs[i].flags)) {
            e = done(hipErrorInvalidValue);
        }
    }
    if (e == hipSuccess) {
        e = cuda(cudaMemPoolSetAccess(cu(mem_pool), descs, count));
    }
    if (descs != small) {
        std::free(descs);
    }
    return e;
}

HIP_ON_CUDA_EXPORT hipError_t hipMemPoolGetAccess(unsigned* flags, hipMemPool_t mem_pool, hipMemLocation* loc) {
    if (flags == nullptr || loc == nullptr) {
        return done(hipErrorInvalidValue);
    }
    cudaMemLocation c;
    std::memset(&c, 0, sizeof c);
    if (!location(*loc, &c)) {
        return done(hipErrorInvalidValue);
    }
    cudaMemAccessFlags f = cudaMemAccessFlagsProtNone;
    hipError_t e = cuda(cudaMemPoolGetAccess(&f, cu(mem_pool), &c));
    if (e == hipSuccess) {
        *flags = hip_access_flags(f);
    }
    return e;
}

HIP_ON_CUDA_EXPORT hipError_t hipMemPoolExportToShareableHandle(void* shared_handle, hipMemPool_t mem_pool,
                                                                unsigned handle_type, unsigned int flags) {
    cudaMemAllocationHandleType t;
    if (!handle_types(handle_type, &t)) {
        return done(hipErrorInvalidValue);
    }
    return cuda(cudaMemPoolExportToShareableHandle(shared_handle, cu(mem_pool), t, flags));
}

HIP_ON_CUDA_EXPORT hipError_t hipMemPoolImportFromShareableHandle(hipMemPool_t* mem_pool, void* shared_handle,
                                                                  unsigned handle_type, unsigned int flags) {
    cudaMemAllocationHandleType t;
    if (!handle_types(handle_type, &t)) {
        return done(hipErrorInvalidValue);
    }
    return cuda(cudaMemPoolImportFromShareableHandle(reinterpret_cast<cudaMemPool_t*>(mem_pool), shared_handle, t,
                                                     flags));
}

HIP_ON_CUDA_EXPORT hipError_t hipMemPoolExportPointer(hipMemPoolPtrExportData* export_data, void* dev_ptr) {
    return cuda(cudaMemPoolExportPointer(reinterpret_cast<cudaMemPoolPtrExportData*>(export_data), dev_ptr));
}

HIP_ON_CUDA_EXPORT hipError_t hipMemPoolImportPointer(void** dev_ptr, hipMemPool_t mem_pool,
                                                      hipMemPoolPtrExportData* export_data) {
    return cuda(cudaMemPoolImportPointer(dev_ptr, cu(mem_pool),
                                         reinterpret_cast<cudaMemPoolPtrExportData*>(export_data)));
}

HIP_ON_CUDA_EXPORT hipError_t hipMemPoolTrimTo(hipMemPool_t mem_pool, size_t min_bytes_to_hold) {
    return cuda(cudaMemPoolTrimTo(cu(mem_pool), min_bytes_to_hold));
}

// ---------------------------------------------------------------------------
// Memory.

HIP_ON_CUDA_EXPORT hipError_t hipMallocAsync(void** dev_ptr, size_t size, hipStream_t stream) {
    if (size == 0 && before_rocm_5_6()) {
        return done(hipErrorInvalidValue);
    }
    return cuda(cudaMallocAsync(dev_ptr, size, cu(stream)));
}

HIP_ON_CUDA_EXPORT hipError_t hipMallocFromPoolAsync(void** dev_ptr, size_t size, hipMemPool_t mem_pool,
                                                     hipStream_t stream) {
    if (size == 0 && before_rocm_5_6()) {
        return done(hipErrorInvalidValue);
    }
    return cuda(cudaMallocFromPoolAsync(dev_ptr, size, cu(mem_pool), cu(stream)));
}

HIP_ON_CUDA_EXPORT hipError_t hipFreeAsync(void* dev_ptr, hipStream_t stream) {
    if (dev_ptr == nullptr && before_rocm_5_6()) {
        return done(hipErrorInvalidValue);
    }
    return cuda(cudaFreeAsync(dev_ptr, cu(stream)));
}

HIP_ON_CUDA_EXPORT hipError_t hipMalloc(void** ptr, size_t size) { return cuda(cudaMalloc(ptr, size)); }

HIP_ON_CUDA_EXPORT hipError_t hipFree(void* ptr) { return cuda(cudaFree(ptr)); }

// Pinned host memory and pointer attributes (18., 19.).

HIP_ON_CUDA_EXPORT hipError_t hipHostMalloc(void** ptr, size_t size, unsigned int flags) {
    if (ptr == nullptr) {
        return done(hipErrorInvalidValue);
    }
    const unsigned amd_only = hipHostMallocNumaUser | hipHostMallocCoherent | hipHostMallocNonCoherent;
    const unsigned shared = hipHostMallocPortable | hipHostMallocMapped | hipHostMallocWriteCombined;
    if ((flags & ~(amd_only | shared)) != 0) {
        return done(hipErrorInvalidValue);
    }
    return cuda(cudaHostAlloc(ptr, size, flags & shared));  // the shared bits keep their numbers
}

HIP_ON_CUDA_EXPORT hipError_t hipHostFree(void* ptr) { return cuda(cudaFreeHost(ptr)); }

HIP_ON_CUDA_EXPORT hipError_t hipPointerGetAttributes(hipPointerAttribute_t* attributes, const void* ptr) {
    if (attributes == nullptr || ptr == nullptr) {
        return done(hipErrorInvalidValue);
    }
    cudaPointerAttributes c;
    std::memset(&c, 0, sizeof c);
    hipError_t e = cuda(cudaPointerGetAttributes(&c, ptr));
    if (e != hipSuccess) {
        return e;
    }
    std::memset(attributes, 0, sizeof *attributes);
    attributes->device = c.device;
    attributes->devicePointer = c.devicePointer;
    attributes->hostPointer = c.hostPointer;
    attributes->isManaged = c.type == cudaMemoryTypeManaged ? 1 : 0;
    if (cuda_memory_types()) {
        attributes->memoryType = static_cast<int>(c.type);  // the same numbers (static_assert)
        return hipSuccess;
    }
    switch (c.type) {
        case cudaMemoryTypeUnregistered:
            return done(hipErrorInvalidValue);  // before ROCm 6.0: an unknown address is an error
        case cudaMemoryTypeDevice:
            attributes->memoryType = hipMemoryTypeDevice;
            break;
        default:  // pinned host, and managed memory (fine-grained: reported as host)
            attributes->memoryType = hipMemoryTypeHost;
            break;
    }
    return hipSuccess;
}

HIP_ON_CUDA_EXPORT hipError_t hipMemcpyAsync(void* dst, const void* src, size_t sizeBytes, hipMemcpyKind kind,
                                             hipStream_t stream) {
    cudaMemcpyKind k;
    if (!memcpy_kind(kind, &k)) {
        return done(hipErrorInvalidMemcpyDirection);
    }
    return cuda(cudaMemcpyAsync(dst, src, sizeBytes, k, cu(stream)));
}

HIP_ON_CUDA_EXPORT hipError_t hipMemsetAsync(void* dst, int value, size_t sizeBytes, hipStream_t stream) {
    return cuda(cudaMemsetAsync(dst, value, sizeBytes, cu(stream)));
}

// ---------------------------------------------------------------------------
// Stream capture and graphs.

HIP_ON_CUDA_EXPORT hipError_t hipStreamIsCapturing(hipStream_t stream, hipStreamCaptureStatus* pCaptureStatus) {
    if (pCaptureStatus == nullptr) {
        return done(hipErrorInvalidValue);
    }
    cudaStreamCaptureStatus c = cudaStreamCaptureStatusNone;
    hipError_t e = cuda(cudaStreamIsCapturing(cu(stream), &c));
    if (e == hipSuccess) {
        *pCaptureStatus = static_cast<hipStreamCaptureStatus>(c);  // same numbers
    }
    return e;
}

HIP_ON_CUDA_EXPORT hipError_t hipStreamGetCaptureInfo_v2(hipStream_t stream, hipStreamCaptureStatus* captureStatus_out,
                                                         unsigned long long* id_out, hipGraph_t* graph_out,
                                                         const hipGraphNode_t** dependencies_out,
                                                         size_t* numDependencies_out) {
    if (captureStatus_out == nullptr) {
        return done(hipErrorInvalidValue);
    }
    cudaStreamCaptureStatus c = cudaStreamCaptureStatusNone;
    auto graph = reinterpret_cast<cudaGraph_t*>(graph_out);
    auto deps = reinterpret_cast<const cudaGraphNode_t**>(dependencies_out);
#if CUDART_VERSION >= 13000
    // CUDA 13: the plain name, with edge data (not asked for).
    hipError_t e = cuda(cudaStreamGetCaptureInfo(cu(stream), &c, id_out, graph, deps, nullptr, numDependencies_out));
#else
    // CUDA 12: the headers map the plain name to the 6-parameter _v2.
    hipError_t e = cuda(cudaStreamGetCaptureInfo(cu(stream), &c, id_out, graph, deps, numDependencies_out));
#endif
    if (e == hipSuccess) {
        *captureStatus_out = static_cast<hipStreamCaptureStatus>(c);
    }
    return e;
}

HIP_ON_CUDA_EXPORT hipError_t hipStreamBeginCapture(hipStream_t stream, hipStreamCaptureMode mode) {
    cudaStreamCaptureMode m;
    if (!capture_mode(mode, &m)) {
        return done(hipErrorInvalidValue);
    }
    return cuda(cudaStreamBeginCapture(cu(stream), m));
}

HIP_ON_CUDA_EXPORT hipError_t hipStreamEndCapture(hipStream_t stream, hipGraph_t* pGraph) {
    if (pGraph == nullptr) {
        return done(hipErrorInvalidValue);
    }
    return cuda(cudaStreamEndCapture(cu(stream), reinterpret_cast<cudaGraph_t*>(pGraph)));
}

HIP_ON_CUDA_EXPORT hipError_t hipGraphDestroy(hipGraph_t graph) {
    if (graph == nullptr) {
        return done(hipErrorInvalidValue);
    }
    return cuda(cudaGraphDestroy(cu(graph)));
}

HIP_ON_CUDA_EXPORT hipError_t hipGraphInstantiateWithFlags(hipGraphExec_t* pGraphExec, hipGraph_t graph,
                                                           unsigned long long flags) {
    if (pGraphExec == nullptr || graph == nullptr) {
        return done(hipErrorInvalidValue);
    }
    if (flags != 0 && flags != hipGraphInstantiateFlagAutoFreeOnLaunch) {
        return done(hipErrorInvalidValue);  // the only flag ROCm 5.x accepts
    }
    const unsigned long long cuda_flags = flags == 0 ? 0 : cudaGraphInstantiateFlagAutoFreeOnLaunch;
    return cuda(cudaGraphInstantiateWithFlags(reinterpret_cast<cudaGraphExec_t*>(pGraphExec), cu(graph), cuda_flags));
}

HIP_ON_CUDA_EXPORT hipError_t hipGraphExecDestroy(hipGraphExec_t graphExec) {
    if (graphExec == nullptr) {
        return done(hipErrorInvalidValue);
    }
    return cuda(cudaGraphExecDestroy(cu(graphExec)));
}

HIP_ON_CUDA_EXPORT hipError_t hipGraphLaunch(hipGraphExec_t graphExec, hipStream_t stream) {
    if (graphExec == nullptr) {
        return done(hipErrorInvalidValue);
    }
    return cuda(cudaGraphLaunch(cu(graphExec), cu(stream)));
}

HIP_ON_CUDA_EXPORT hipError_t hipGraphUpload(hipGraphExec_t graphExec, hipStream_t stream) {
    if (graphExec == nullptr) {
        return done(hipErrorInvalidValue);
    }
    return cuda(cudaGraphUpload(cu(graphExec), cu(stream)));
}

HIP_ON_CUDA_EXPORT hipError_t hipDeviceGetGraphMemAttribute(int device, hipGraphMemAttributeType attr, void* value) {
    cudaGraphMemAttributeType a;
    if (value == nullptr || !graph_mem_attr(attr, &a)) {
        return done(hipErrorInvalidValue);
    }
    return cuda(cudaDeviceGetGraphMemAttribute(device, a, value));  // uint64_t on both sides
}

HIP_ON_CUDA_EXPORT hipError_t hipDeviceGraphMemTrim(int device) { return cuda(cudaDeviceGraphMemTrim(device)); }

HIP_ON_CUDA_EXPORT hipError_t hipUserObjectCreate(hipUserObject_t* object_out, void* ptr, hipHostFn_t destroy,
                                                  unsigned int initialRefcount, unsigned int flags) {
    // The checks of ROCm's own implementation (the flag is required there).
    if (object_out == nullptr || destroy == nullptr || initialRefcount == 0 || initialRefcount > INT_MAX ||
        flags != hipUserObjectNoDestructorSync) {
        return done(hipErrorInvalidValue);
    }
    return cuda(cudaUserObjectCreate(reinterpret_cast<cudaUserObject_t*>(object_out), ptr, destroy, initialRefcount,
                                     cudaUserObjectNoDestructorSync));
}

HIP_ON_CUDA_EXPORT hipError_t hipGraphRetainUserObject(hipGraph_t graph, hipUserObject_t object, unsigned int count,
                                                       unsigned int flags) {
    if (graph == nullptr || object == nullptr || count == 0 || count > INT_MAX ||
        (flags != 0 && flags != hipGraphUserObjectMove)) {
        return done(hipErrorInvalidValue);
    }
    return cuda(cudaGraphRetainUserObject(cu(graph), cu(object), count, flags));
}

// ---------------------------------------------------------------------------
// Modules and launches (CUDA runtime "library" API: context-independent).

HIP_ON_CUDA_EXPORT hipError_t hipModuleLoadData(hipModule_t* module, const void* image) {
    if (module == nullptr || image == nullptr) {
        return done(hipErrorInvalidValue);
    }
    cudaLibrary_t lib = nullptr;
    hipError_t e = cuda(cudaLibraryLoadData(&lib, image, nullptr, nullptr, 0, nullptr, nullptr, 0));
    if (e == hipSuccess) {
        *module = reinterpret_cast<hipModule_t>(lib);
    }
    return e;
}

HIP_ON_CUDA_EXPORT hipError_t hipModuleUnload(hipModule_t module) {
    if (module == nullptr) {
        return done(hipErrorInvalidHandle);
    }
    return cuda(cudaLibraryUnload(cu(module)));
}

HIP_ON_CUDA_EXPORT hipError_t hipModuleGetFunction(hipFunction_t* function, hipModule_t module, const char* kname) {
    if (function == nullptr || kname == nullptr) {
        return done(hipErrorInvalidValue);
    }
    if (module == nullptr) {
        return done(hipErrorInvalidHandle);
    }
    cudaKernel_t k = nullptr;
    hipError_t e = cuda(cudaLibraryGetKernel(&k, cu(module), kname));
    if (e == hipSuccess) {
        *function = reinterpret_cast<hipFunction_t>(k);
    }
    return e;
}

HIP_ON_CUDA_EXPORT hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY,
                                                    unsigned int gridDimZ, unsigned int blockDimX,
                                                    unsigned int blockDimY, unsigned int blockDimZ,
                                                    unsigned int sharedMemBytes, hipStream_t stream,
                                                    void** kernelParams, void** extra) {
    if (f == nullptr) {
        return done(hipErrorInvalidHandle);
    }
    if (extra != nullptr) {
        return done(hipErrorNotSupported);  // packed `extra` arguments: not in this shim
    }
    // A cudaKernel_t cast to const void* is accepted by cudaLaunchKernel.
    return cuda(cudaLaunchKernel(reinterpret_cast<const void*>(cu(f)), dim3(gridDimX, gridDimY, gridDimZ),
                                 dim3(blockDimX, blockDimY, blockDimZ), kernelParams, sharedMemBytes, cu(stream)));
}

#endif  // HIP_ON_CUDA_ABI_ONLY
