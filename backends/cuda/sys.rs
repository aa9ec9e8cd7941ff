//! The few CUDA runtime types and constants the CUDA backend uses, written by
//! hand (see the module doc of `backends/cuda/mod.rs` for why).
//!
//! Every value and layout here was checked against the CUDA runtime headers
//! (`cuda_runtime_api.h`, `driver_types.h`, `vector_types.h`; for the driver
//! entry points `cuda.h` and `cudaTypedefs.h`) of CUDA 12.1,
//! 12.2, 12.4, 12.6, 12.8, 13.0 and 13.1, by compiling a C program that prints
//! each `sizeof`, `offsetof` and enum value against each set of headers. All
//! of them agree on everything below except where a comment says otherwise
//! (`cudaMemPoolProps`: `maxSize` from 12.2, `usage` from 12.6; the size of
//! `cudaDeviceProp`; the capture-info and device-property symbols, which the
//! backend picks by the major version of the runtime it loaded). The `const`
//! assertions at the bottom make the compiler re-check the layouts on every
//! build. Enum values are plain integer constants, never Rust enums: a value
//! a newer runtime hands back is data, not undefined behaviour.

// The bindings checker compares every item here with the headers, used or
// not, so items the backend does not use yet stay.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals, dead_code)]

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use std::mem::{align_of, offset_of, size_of};

// ---------------------------------------------------------------------------
// Opaque handles: each is a pointer to an incomplete struct in the headers.

use crate::common::opaque;

opaque!(
    CUstream_st,
    CUevent_st,
    CUmemPoolHandle_st,
    CUlib_st,
    CUkern_st,
    CUgraph_st,
    CUgraphExec_st,
    CUgraphNode_st,
    CUuserObject_st,
    cudaGraphEdgeData_st,
    CUctx_st,
);

// The runtime's cudaLibrary_t is 12.8's (cuda.h declares CUlib_st from 12.0).
// header-check cuda<12.8: cudaLibrary_t absent
// header-check cuda<12.3: cudaGraphEdgeData_st absent; cudaGraphEdgeData absent

pub(crate) type cudaStream_t = *mut CUstream_st;
pub(crate) type cudaEvent_t = *mut CUevent_st;
pub(crate) type cudaMemPool_t = *mut CUmemPoolHandle_st;
pub(crate) type cudaLibrary_t = *mut CUlib_st;
pub(crate) type cudaKernel_t = *mut CUkern_st;
pub(crate) type cudaGraph_t = *mut CUgraph_st;
pub(crate) type cudaGraphExec_t = *mut CUgraphExec_st;
pub(crate) type cudaGraphNode_t = *mut CUgraphNode_st;
pub(crate) type cudaUserObject_t = *mut CUuserObject_st;
/// `cudaGraphEdgeData` (12.3+): only ever received as a pointer that the
/// backend passes as null, so it stays opaque here.
pub(crate) type cudaGraphEdgeData = cudaGraphEdgeData_st;
/// `cudaHostFn_t`: `void (*)(void *userData)`.
pub(crate) type cudaHostFn_t = Option<unsafe extern "C" fn(*mut c_void)>;

/// C enums travel as `int`-sized values (every CUDA enum used here fits).
pub(crate) type cudaDeviceAttr = c_int;
pub(crate) type cudaMemPoolAttr = c_int;
pub(crate) type cudaMemcpyKind = c_int;
pub(crate) type cudaMemAllocationHandleType = c_uint;
pub(crate) type cudaStreamCaptureMode = c_int;
pub(crate) type cudaGraphMemAttributeType = c_int;
/// `enum cudaStreamCaptureStatus`, written by the runtime: kept as an
/// integer so that a value a later runtime adds is data.
pub(crate) type cudaStreamCaptureStatus = c_int;

// ---------------------------------------------------------------------------
// cudaError_t values the backend names (the rest are data, see common.rs).

pub(crate) const cudaSuccess: i32 = 0;
pub(crate) const cudaErrorMemoryAllocation: i32 = 2;
pub(crate) const cudaErrorInsufficientDriver: i32 = 35;
pub(crate) const cudaErrorNoDevice: i32 = 100;
pub(crate) const cudaErrorNotSupported: i32 = 801;
/// The capture errors (900 Unsupported ... 908 WrongThread); they reach the
/// caller as ordinary vendor errors with the runtime's name.
pub(crate) const cudaErrorStreamCaptureUnsupported: i32 = 900;
pub(crate) const cudaErrorStreamCaptureInvalidated: i32 = 901;

// ---------------------------------------------------------------------------
// Flags (#defines in the headers).

pub(crate) const cudaStreamNonBlocking: c_uint = 0x01;
pub(crate) const cudaEventDisableTiming: c_uint = 0x02;

// ---------------------------------------------------------------------------
// Enum values.

/// `cudaDevAttrMemoryPoolsSupported`.
pub(crate) const cudaDevAttrMemoryPoolsSupported: cudaDeviceAttr = 115;
/// `cudaMemcpyDefault`: direction inferred from the addresses.
pub(crate) const cudaMemcpyDefault: cudaMemcpyKind = 4;

// cudaMemPoolAttr 1..=8. The three reuse flags take an `int`, the rest a
// `cuuint64_t`.
pub(crate) const cudaMemPoolReuseFollowEventDependencies: cudaMemPoolAttr = 0x1;
pub(crate) const cudaMemPoolReuseAllowOpportunistic: cudaMemPoolAttr = 0x2;
pub(crate) const cudaMemPoolReuseAllowInternalDependencies: cudaMemPoolAttr = 0x3;
pub(crate) const cudaMemPoolAttrReleaseThreshold: cudaMemPoolAttr = 0x4;
pub(crate) const cudaMemPoolAttrReservedMemCurrent: cudaMemPoolAttr = 0x5;
pub(crate) const cudaMemPoolAttrReservedMemHigh: cudaMemPoolAttr = 0x6;
pub(crate) const cudaMemPoolAttrUsedMemCurrent: cudaMemPoolAttr = 0x7;
pub(crate) const cudaMemPoolAttrUsedMemHigh: cudaMemPoolAttr = 0x8;

/// `cudaMemAllocationTypePinned`.
pub(crate) const cudaMemAllocationTypePinned: c_uint = 0x1;
/// `cudaMemHandleTypeNone`.
pub(crate) const cudaMemHandleTypeNone: cudaMemAllocationHandleType = 0x0;
/// `cudaMemHandleTypePosixFileDescriptor`.
pub(crate) const cudaMemHandleTypePosixFileDescriptor: cudaMemAllocationHandleType = 0x1;
/// `cudaMemLocationTypeDevice`.
pub(crate) const cudaMemLocationTypeDevice: c_uint = 1;

// cudaStreamCaptureStatus.
pub(crate) const cudaStreamCaptureStatusNone: cudaStreamCaptureStatus = 0;
pub(crate) const cudaStreamCaptureStatusActive: cudaStreamCaptureStatus = 1;
pub(crate) const cudaStreamCaptureStatusInvalidated: cudaStreamCaptureStatus = 2;

// cudaStreamCaptureMode.
pub(crate) const cudaStreamCaptureModeGlobal: cudaStreamCaptureMode = 0;
pub(crate) const cudaStreamCaptureModeThreadLocal: cudaStreamCaptureMode = 1;
pub(crate) const cudaStreamCaptureModeRelaxed: cudaStreamCaptureMode = 2;

// cudaGraphMemAttributeType (values are `cuuint64_t` bytes).
pub(crate) const cudaGraphMemAttrUsedMemCurrent: cudaGraphMemAttributeType = 0;
pub(crate) const cudaGraphMemAttrUsedMemHigh: cudaGraphMemAttributeType = 1;
pub(crate) const cudaGraphMemAttrReservedMemCurrent: cudaGraphMemAttributeType = 2;
pub(crate) const cudaGraphMemAttrReservedMemHigh: cudaGraphMemAttributeType = 3;

/// `cudaGraphInstantiateFlagAutoFreeOnLaunch` (flags are `unsigned long long`).
pub(crate) const cudaGraphInstantiateFlagAutoFreeOnLaunch: u64 = 1;
/// `cudaUserObjectNoDestructorSync` (the only flag `cudaUserObjectCreate` takes).
pub(crate) const cudaUserObjectNoDestructorSync: c_uint = 0x1;
/// `cudaGraphUserObjectMove`: the graph takes over the caller's reference.
pub(crate) const cudaGraphUserObjectMove: c_uint = 0x1;

// ---------------------------------------------------------------------------
// Pool locations, allocation types and host memory (pinned host pools,
// pointer attributes, the pinned-host baselines).

/// `enum cudaMemLocationType`; `cudaMemLocationTypeNone` (13.0+) is the
/// same 0 as `Invalid` and marks a managed pool without a preferred location.
pub(crate) type cudaMemLocationType = c_uint;
// header-check cuda<12.2: cudaMemLocationTypeHost absent; cudaMemLocationTypeHostNuma absent
pub(crate) const cudaMemLocationTypeInvalid: cudaMemLocationType = 0;
pub(crate) const cudaMemLocationTypeHost: cudaMemLocationType = 2;
pub(crate) const cudaMemLocationTypeHostNuma: cudaMemLocationType = 3;
/// `enum cudaMemAllocationType`.
pub(crate) type cudaMemAllocationType = c_uint;
// header-check cuda<13: cudaMemAllocationTypeManaged absent
pub(crate) const cudaMemAllocationTypeManaged: cudaMemAllocationType = 0x2;
/// `enum cudaMemoryType` (the `type` of `cudaPointerAttributes`).
pub(crate) const cudaMemoryTypeUnregistered: c_int = 0;
pub(crate) const cudaMemoryTypeHost: c_int = 1;
pub(crate) const cudaMemoryTypeDevice: c_int = 2;
pub(crate) const cudaMemoryTypeManaged: c_int = 3;
/// `cudaHostAllocDefault` / `cudaHostAllocPortable` (`#define`s).
pub(crate) const cudaHostAllocDefault: c_uint = 0x00;
pub(crate) const cudaHostAllocPortable: c_uint = 0x01;

// ---------------------------------------------------------------------------
// The driver's capture queries, reached through the runtime
// (`cudaGetDriverEntryPoint[ByVersion]`): the lookup's types and flags
// (driver_types.h), the driver's values (cuda.h) and the entry points'
// types, named as cudaTypedefs.h names them (`_vNNNNN`: the CUDA version
// that introduced that ABI of the function).

/// `enum cudaDriverEntryPointQueryResult`, written by the runtime.
pub(crate) type cudaDriverEntryPointQueryResult = c_int;
pub(crate) const cudaDriverEntryPointSuccess: cudaDriverEntryPointQueryResult = 0;
/// `cudaEnableLegacyStream` (`enum cudaGetDriverEntryPointFlags`, passed as
/// `unsigned long long`): the entry points whose null stream is the legacy
/// default stream, as in the runtime calls somalloc makes.
pub(crate) const cudaEnableLegacyStream: c_ulonglong = 0x1;
/// `CUDA_SUCCESS` (`CUresult`).
pub(crate) const CUDA_SUCCESS: i32 = 0;
// CUstreamCaptureStatus: the runtime's values (asserted below).
pub(crate) const CU_STREAM_CAPTURE_STATUS_NONE: c_int = 0;
pub(crate) const CU_STREAM_CAPTURE_STATUS_ACTIVE: c_int = 1;
pub(crate) const CU_STREAM_CAPTURE_STATUS_INVALIDATED: c_int = 2;
/// `cuStreamIsCapturing` (one ABI since CUDA 10.0). `CUstream` is the
/// runtime's `cudaStream_t`, `CUstreamCaptureStatus` a C enum.
pub(crate) type PFN_cuStreamIsCapturing_v10000 =
    Option<unsafe extern "C" fn(cudaStream_t, *mut cudaStreamCaptureStatus) -> i32>;
/// `cuStreamGetCaptureInfo` as of CUDA 11.3 to 12.2 (6 parameters; what
/// `cudaGetDriverEntryPointByVersion` gives for version
/// [`DRIVER_ABI_VERSION`]). `CUgraph` is `cudaGraph_t`, `CUgraphNode`
/// `cudaGraphNode_t`.
pub(crate) type PFN_cuStreamGetCaptureInfo_v11030 = Option<
    unsafe extern "C" fn(
        cudaStream_t,
        *mut cudaStreamCaptureStatus,
        *mut u64,
        *mut cudaGraph_t,
        *mut *const cudaGraphNode_t,
        *mut usize,
    ) -> i32,
>;

// header-check cuda: DRIVER_ABI_VERSION absent; CUDA_VERSION_DRIVER_BY_VERSION absent
/// The driver ABI asked for by version: CUDA 12.0, the oldest runtime this
/// backend loads (its `cuStreamGetCaptureInfo` is the `_v11030` above).
pub(crate) const DRIVER_ABI_VERSION: c_uint = 12_000;
/// `cudaGetDriverEntryPointByVersion` exists from CUDA 12.5.
pub(crate) const CUDA_VERSION_DRIVER_BY_VERSION: &str = "CUDA 12.5";

// ---------------------------------------------------------------------------
// The driver's virtual-memory API (`cuMem*`, backends/cuda/vmm.rs), reached
// through the runtime as the capture queries are: cuda.h's types, values and
// structs, and the entry points' types under cudaTypedefs.h's names. Each of
// these functions has had one ABI since it appeared (10.2, 11.0 for
// cuMemRetainAllocationHandle), the same in every header checked.

/// `CUdevice`: the driver's device, an `int`.
pub(crate) type CUdevice = c_int;
/// `CUdeviceptr`: a device address (`unsigned long long` on 64-bit hosts).
pub(crate) type CUdeviceptr = c_ulonglong;
/// `CUmemGenericAllocationHandle`: a physical allocation.
pub(crate) type CUmemGenericAllocationHandle = c_ulonglong;
/// `CUcontext`: a pointer to the incomplete `struct CUctx_st`.
pub(crate) type CUcontext = *mut CUctx_st;
// The C enums the calls take, as integers of their size.
pub(crate) type CUdevice_attribute = c_int;
pub(crate) type CUmemAllocationType = c_uint;
pub(crate) type CUmemAllocationHandleType = c_uint;
pub(crate) type CUmemLocationType = c_uint;
pub(crate) type CUmemAccess_flags = c_uint;
pub(crate) type CUmemAllocationGranularity_flags = c_uint;

/// `CUresult` codes the backend names: the same numbers as the runtime's
/// codes that get an `Error` variant of their own (asserted in vmm.rs).
pub(crate) const CUDA_ERROR_OUT_OF_MEMORY: i32 = 2;
pub(crate) const CUDA_ERROR_NO_DEVICE: i32 = 100;
pub(crate) const CUDA_ERROR_NOT_SUPPORTED: i32 = 801;
/// `CU_DEVICE_ATTRIBUTE_*` of the virtual-memory API (the runtime's
/// `cudaDeviceAttr` has no names for them: they are asked of the driver).
pub(crate) const CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: CUdevice_attribute = 102;
pub(crate) const CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: CUdevice_attribute = 103;
pub(crate) const CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: CUdevice_attribute = 110;
pub(crate) const CU_MEM_ALLOCATION_TYPE_PINNED: CUmemAllocationType = 0x1;
pub(crate) const CU_MEM_LOCATION_TYPE_DEVICE: CUmemLocationType = 0x1;
pub(crate) const CU_MEM_HANDLE_TYPE_NONE: CUmemAllocationHandleType = 0x0;
pub(crate) const CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: CUmemAllocationHandleType = 0x1;
pub(crate) const CU_MEM_ACCESS_FLAGS_PROT_NONE: CUmemAccess_flags = 0x0;
pub(crate) const CU_MEM_ACCESS_FLAGS_PROT_READWRITE: CUmemAccess_flags = 0x3;
pub(crate) const CU_MEM_ALLOC_GRANULARITY_MINIMUM: CUmemAllocationGranularity_flags = 0x0;
pub(crate) const CU_MEM_ALLOC_GRANULARITY_RECOMMENDED: CUmemAllocationGranularity_flags = 0x1;

/// `struct CUmemLocation_st` (`CUmemLocation`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct CUmemLocation_st {
    pub type_: CUmemLocationType,
    pub id: c_int,
}
pub(crate) type CUmemLocation = CUmemLocation_st;

/// `struct CUmemAccessDesc_st` (`CUmemAccessDesc`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct CUmemAccessDesc_st {
    pub location: CUmemLocation,
    pub flags: CUmemAccess_flags,
}
pub(crate) type CUmemAccessDesc = CUmemAccessDesc_st;

/// The anonymous `allocFlags` struct of `CUmemAllocationProp` (the checker
/// names an anonymous member type `STRUCT_FIELD`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct CUmemAllocationProp_st_allocFlags {
    pub compressionType: u8,
    pub gpuDirectRDMACapable: u8,
    pub usage: u16,
    pub reserved: [u8; 4],
}

/// `struct CUmemAllocationProp_st` (`CUmemAllocationProp`, the `_v1` of
/// every header since 10.2): 32 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct CUmemAllocationProp_st {
    pub type_: CUmemAllocationType,
    pub requestedHandleTypes: CUmemAllocationHandleType,
    pub location: CUmemLocation,
    /// Windows only; null elsewhere.
    pub win32HandleMetaData: *mut c_void,
    pub allocFlags: CUmemAllocationProp_st_allocFlags,
}
pub(crate) type CUmemAllocationProp = CUmemAllocationProp_st;

pub(crate) type PFN_cuGetErrorName_v6000 = Option<unsafe extern "C" fn(i32, *mut *const c_char) -> i32>;
pub(crate) type PFN_cuGetErrorString_v6000 = Option<unsafe extern "C" fn(i32, *mut *const c_char) -> i32>;
pub(crate) type PFN_cuCtxGetCurrent_v4000 = Option<unsafe extern "C" fn(*mut CUcontext) -> i32>;
pub(crate) type PFN_cuDeviceGet_v2000 = Option<unsafe extern "C" fn(*mut CUdevice, c_int) -> i32>;
pub(crate) type PFN_cuDeviceGetAttribute_v2000 =
    Option<unsafe extern "C" fn(*mut c_int, CUdevice_attribute, CUdevice) -> i32>;
pub(crate) type PFN_cuMemAddressReserve_v10020 =
    Option<unsafe extern "C" fn(*mut CUdeviceptr, usize, usize, CUdeviceptr, c_ulonglong) -> i32>;
pub(crate) type PFN_cuMemAddressFree_v10020 = Option<unsafe extern "C" fn(CUdeviceptr, usize) -> i32>;
pub(crate) type PFN_cuMemCreate_v10020 = Option<
    unsafe extern "C" fn(
        *mut CUmemGenericAllocationHandle,
        usize,
        *const CUmemAllocationProp,
        c_ulonglong,
    ) -> i32,
>;
pub(crate) type PFN_cuMemRelease_v10020 = Option<unsafe extern "C" fn(CUmemGenericAllocationHandle) -> i32>;
pub(crate) type PFN_cuMemMap_v10020 =
    Option<unsafe extern "C" fn(CUdeviceptr, usize, usize, CUmemGenericAllocationHandle, c_ulonglong) -> i32>;
pub(crate) type PFN_cuMemUnmap_v10020 = Option<unsafe extern "C" fn(CUdeviceptr, usize) -> i32>;
pub(crate) type PFN_cuMemSetAccess_v10020 =
    Option<unsafe extern "C" fn(CUdeviceptr, usize, *const CUmemAccessDesc, usize) -> i32>;
pub(crate) type PFN_cuMemGetAllocationGranularity_v10020 = Option<
    unsafe extern "C" fn(*mut usize, *const CUmemAllocationProp, CUmemAllocationGranularity_flags) -> i32,
>;
pub(crate) type PFN_cuMemRetainAllocationHandle_v11000 =
    Option<unsafe extern "C" fn(*mut CUmemGenericAllocationHandle, *mut c_void) -> i32>;
pub(crate) type PFN_cuMemExportToShareableHandle_v10020 = Option<
    unsafe extern "C" fn(
        *mut c_void,
        CUmemGenericAllocationHandle,
        CUmemAllocationHandleType,
        c_ulonglong,
    ) -> i32,
>;
pub(crate) type PFN_cuMemImportFromShareableHandle_v10020 = Option<
    unsafe extern "C" fn(*mut CUmemGenericAllocationHandle, *mut c_void, CUmemAllocationHandleType) -> i32,
>;

// ---------------------------------------------------------------------------
// Versions (`cudaRuntimeGetVersion`: major * 1000 + minor * 10).

// The library's own numbers, in no header:
// header-check cuda: CUDA_MAJOR_MIN absent; CUDA_MAJOR_MAX absent; CUDA_VERSION_13 absent; CUDA_VERSION_POOL_MAX_SIZE absent

/// The majors this backend has declarations for.
pub(crate) const CUDA_MAJOR_MIN: i32 = 12;
pub(crate) const CUDA_MAJOR_MAX: i32 = 13;
/// CUDA 13 exports `cudaStreamGetCaptureInfo` with the edge-data parameter
/// (7 parameters) and `cudaGetDeviceProperties` with the current layout under
/// the plain names; CUDA 12's plain names are older ABIs kept for old
/// binaries (3 parameters; the CUDA 11 `cudaDeviceProp`), and its headers map
/// the names to `cudaStreamGetCaptureInfo_v2` (6 parameters) and
/// `cudaGetDeviceProperties_v2`. libcudart.so.13 has no `_v2` symbols.
pub(crate) const CUDA_VERSION_13: i32 = 13_000;
/// `cudaMemPoolProps::maxSize` exists from CUDA 12.2 (before, those bytes are
/// `reserved` and must be zero).
pub(crate) const CUDA_VERSION_POOL_MAX_SIZE: i32 = 12_020;
/// `cudaLibraryLoadData` / `cudaLibraryGetKernel` / `cudaLibraryUnload`: not
/// in libcudart 12.6, present in 12.8 (there is no 12.7 runtime).
pub(crate) const CUDA_LIBRARY_API: &str = "CUDA 12.8";

// ---------------------------------------------------------------------------
// Structs.

/// `struct cudaMemLocation`; `type_` is `enum cudaMemLocationType`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct cudaMemLocation {
    pub type_: c_uint,
    pub id: c_int,
}

/// `struct cudaMemAccessDesc`; `flags` is `enum cudaMemAccessFlags` (0 none,
/// 1 read, 3 read-write).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct cudaMemAccessDesc {
    pub location: cudaMemLocation,
    pub flags: c_uint,
}

/// `struct cudaMemPoolProps`, in its CUDA >= 12.6 shape (the same in 13.x).
/// CUDA 12.2-12.5 have `unsigned char reserved[56]` where `usage` and
/// `reserved[54]` are; CUDA 12.0/12.1 have `reserved[64]` from `maxSize` on.
/// The size (88) and every earlier offset are the same in all of them, and
/// reserved bytes must be zero: the backend never writes `usage`, and writes
/// `maxSize` only on a runtime that reads it.
// header-check cuda<12.6: cudaMemPoolProps.usage absent; cudaMemPoolProps.reserved offset 32; cudaMemPoolProps.reserved size 56
// header-check cuda<12.2: cudaMemPoolProps.maxSize absent; cudaMemPoolProps.reserved offset 24; cudaMemPoolProps.reserved size 64
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct cudaMemPoolProps {
    /// `enum cudaMemAllocationType`.
    pub allocType: c_uint,
    /// `enum cudaMemAllocationHandleType` (a bit mask).
    pub handleTypes: cudaMemAllocationHandleType,
    pub location: cudaMemLocation,
    pub win32SecurityAttributes: *mut c_void,
    pub maxSize: usize,
    pub usage: u16,
    pub reserved: [u8; 54],
}

impl cudaMemPoolProps {
    /// All fields zero / null, as the runtime expects for unused fields.
    pub(crate) const fn zeroed() -> Self {
        cudaMemPoolProps {
            allocType: 0,
            handleTypes: 0,
            location: cudaMemLocation { type_: 0, id: 0 },
            win32SecurityAttributes: std::ptr::null_mut(),
            maxSize: 0,
            usage: 0,
            reserved: [0; 54],
        }
    }
}

/// `struct cudaMemPoolPtrExportData`: 64 opaque bytes.
pub(crate) type cudaMemPoolPtrExportData = [u8; 64];

/// Room for `struct cudaPointerAttributes` of either major: CUDA 12's has no
/// `reserved` (24 bytes), CUDA 13 adds `long reserved[8]` (88 bytes). The
/// backend passes room for the larger one, zeroed, and reads only the
/// first four fields, at the same offsets in both.
// header-check cuda: cudaPointerAttributesStorage holds cudaPointerAttributes
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct cudaPointerAttributesStorage {
    /// `enum cudaMemoryType`, written by the runtime: kept as an integer.
    pub type_: c_int,
    pub device: c_int,
    pub devicePointer: *mut c_void,
    pub hostPointer: *mut c_void,
    pub reserved: [i64; 8],
}

impl cudaPointerAttributesStorage {
    pub(crate) const fn zeroed() -> Self {
        cudaPointerAttributesStorage {
            type_: 0,
            device: 0,
            devicePointer: std::ptr::null_mut(),
            hostPointer: std::ptr::null_mut(),
            reserved: [0; 8],
        }
    }
}

/// `struct dim3` (`vector_types.h`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct dim3 {
    pub x: c_uint,
    pub y: c_uint,
    pub z: c_uint,
}

/// Room for a `struct cudaDeviceProp` of either major: 1032 bytes in CUDA
/// 12.x (`_v2`), 1008 in 13.0/13.1 (and less for the CUDA 11 layout behind
/// CUDA 12's plain symbol). The backend reads only `char name[256]`, the
/// first field in every version, and never the rest; the spare room makes a
/// runtime that grew the struct harmless.
// header-check cuda: cudaDevicePropStorage holds cudaDeviceProp
#[repr(C, align(8))]
pub(crate) struct cudaDevicePropStorage {
    pub name: [u8; 256],
    pub rest: [u8; 4096 - 256],
}

impl cudaDevicePropStorage {
    pub(crate) const fn zeroed() -> Self {
        cudaDevicePropStorage {
            name: [0; 256],
            rest: [0; 4096 - 256],
        }
    }
}

// Layouts as in the headers (x86-64 and aarch64 Linux; checked with
// offsetof/sizeof against every header version listed at the top).
const _: () = assert!(size_of::<cudaMemLocation>() == 8);
const _: () = assert!(offset_of!(cudaMemLocation, id) == 4);
const _: () = assert!(size_of::<cudaMemAccessDesc>() == 12);
const _: () = assert!(offset_of!(cudaMemAccessDesc, flags) == 8);
const _: () = assert!(size_of::<cudaMemPoolProps>() == 88);
const _: () = assert!(align_of::<cudaMemPoolProps>() == 8);
const _: () = assert!(offset_of!(cudaMemPoolProps, allocType) == 0);
const _: () = assert!(offset_of!(cudaMemPoolProps, handleTypes) == 4);
const _: () = assert!(offset_of!(cudaMemPoolProps, location) == 8);
const _: () = assert!(offset_of!(cudaMemPoolProps, win32SecurityAttributes) == 16);
const _: () = assert!(offset_of!(cudaMemPoolProps, maxSize) == 24);
const _: () = assert!(offset_of!(cudaMemPoolProps, usage) == 32);
const _: () = assert!(offset_of!(cudaMemPoolProps, reserved) == 34);
const _: () = assert!(size_of::<cudaMemPoolPtrExportData>() == 64);
const _: () = assert!(size_of::<dim3>() == 12);
const _: () = assert!(size_of::<cudaDevicePropStorage>() >= 1032);
const _: () = assert!(offset_of!(cudaDevicePropStorage, name) == 0);
const _: () = assert!(size_of::<cudaStream_t>() == size_of::<*mut c_void>());
const _: () = assert!(size_of::<cudaHostFn_t>() == size_of::<*mut c_void>());
const _: () = assert!(size_of::<cudaPointerAttributesStorage>() == 88);
const _: () = assert!(offset_of!(cudaPointerAttributesStorage, device) == 4);
const _: () = assert!(offset_of!(cudaPointerAttributesStorage, devicePointer) == 8);
const _: () = assert!(offset_of!(cudaPointerAttributesStorage, hostPointer) == 16);
// The driver's capture status values are the runtime's (the backend reads
// either with the same table), and an entry point fits in a pointer.
const _: () = assert!(CU_STREAM_CAPTURE_STATUS_NONE == cudaStreamCaptureStatusNone);
const _: () = assert!(CU_STREAM_CAPTURE_STATUS_ACTIVE == cudaStreamCaptureStatusActive);
const _: () = assert!(CU_STREAM_CAPTURE_STATUS_INVALIDATED == cudaStreamCaptureStatusInvalidated);
const _: () = assert!(CUDA_SUCCESS == cudaSuccess);
const _: () = assert!(size_of::<PFN_cuStreamIsCapturing_v10000>() == size_of::<*mut c_void>());
const _: () = assert!(size_of::<PFN_cuStreamGetCaptureInfo_v11030>() == size_of::<*mut c_void>());
// The virtual-memory structs (the same in every header since 10.2).
const _: () = assert!(size_of::<CUmemLocation>() == 8);
const _: () = assert!(size_of::<CUmemAccessDesc>() == 12);
const _: () = assert!(offset_of!(CUmemAccessDesc_st, flags) == 8);
const _: () = assert!(size_of::<CUmemAllocationProp>() == 32);
const _: () = assert!(align_of::<CUmemAllocationProp>() == 8);
const _: () = assert!(offset_of!(CUmemAllocationProp_st, requestedHandleTypes) == 4);
const _: () = assert!(offset_of!(CUmemAllocationProp_st, location) == 8);
const _: () = assert!(offset_of!(CUmemAllocationProp_st, win32HandleMetaData) == 16);
const _: () = assert!(offset_of!(CUmemAllocationProp_st, allocFlags) == 24);
const _: () = assert!(offset_of!(CUmemAllocationProp_st_allocFlags, gpuDirectRDMACapable) == 1);
const _: () = assert!(offset_of!(CUmemAllocationProp_st_allocFlags, usage) == 2);
const _: () = assert!(size_of::<CUdeviceptr>() == size_of::<*mut c_void>());
const _: () = assert!(size_of::<PFN_cuMemCreate_v10020>() == size_of::<*mut c_void>());
