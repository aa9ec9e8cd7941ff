//! The few HIP runtime types and constants the ROCm backend uses, written by
//! hand (see the module doc of `backends/rocm/mod.rs` for why).
//!
//! Every value and layout here was checked against the HIP headers of ROCm
//! 5.2.3 (`/usr/include/hip/hip_runtime_api.h`, `driver_types.h`) and of the
//! current ROCm development tree (ROCm 6.x/7.x `hip_runtime_api.h`); where the
//! two differ, the comment says so. The `const` assertions at the bottom make
//! the compiler re-check the struct layouts on every build.

#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

use std::ffi::{c_int, c_uint, c_void};
use std::mem::{align_of, offset_of, size_of};

// ---------------------------------------------------------------------------
// Opaque handles. HIP declares each as a pointer to an incomplete struct.

use crate::common::opaque;

opaque!(
    ihipStream_t,
    ihipEvent_t,
    ihipMemPoolHandle_t,
    ihipModule_t,
    ihipModuleSymbol_t,
    ihipGraph,
    hipGraphExec,
    hipGraphNode,
    hipUserObject,
    ihipMemGenericAllocationHandle,
);

pub(crate) type hipStream_t = *mut ihipStream_t;
pub(crate) type hipEvent_t = *mut ihipEvent_t;
pub(crate) type hipMemPool_t = *mut ihipMemPoolHandle_t;
pub(crate) type hipModule_t = *mut ihipModule_t;
pub(crate) type hipFunction_t = *mut ihipModuleSymbol_t;
pub(crate) type hipGraph_t = *mut ihipGraph;
pub(crate) type hipGraphExec_t = *mut hipGraphExec;
pub(crate) type hipGraphNode_t = *mut hipGraphNode;
// header-check hip<5.3: hipUserObject absent; hipUserObject_t absent
pub(crate) type hipUserObject_t = *mut hipUserObject;
/// `hipHostFn_t`: `void (*)(void* userData)`.
pub(crate) type hipHostFn_t = Option<unsafe extern "C" fn(*mut c_void)>;
/// `hipDevice_t` is a plain `int`.
pub(crate) type hipDevice_t = c_int;

/// C enums are passed as `int`-sized values (all of HIP's fit in 32 bits).
pub(crate) type hipDeviceAttribute_t = c_int;
pub(crate) type hipMemPoolAttr = c_int;
pub(crate) type hipMemcpyKind = c_int;
pub(crate) type hipStreamCaptureMode = c_int;
// header-check hip<5.3: hipGraphMemAttributeType absent
pub(crate) type hipGraphMemAttributeType = c_int;
/// `hipStreamCaptureStatus`, written by the runtime: an integer, so a value
/// another runtime adds is data.
pub(crate) type hipStreamCaptureStatus = c_int;

// ---------------------------------------------------------------------------
// hipError_t: kept as a plain i32 (see mod.rs). Same values in 5.x, 6.x, 7.x.

pub(crate) const hipSuccess: i32 = 0;
pub(crate) const hipErrorOutOfMemory: i32 = 2;
pub(crate) const hipErrorInsufficientDriver: i32 = 35;
pub(crate) const hipErrorNoDevice: i32 = 100;
pub(crate) const hipErrorNotSupported: i32 = 801;
// The capture errors run from 900 (hipErrorStreamCaptureUnsupported) to 908
// (hipErrorStreamCaptureWrongThread), with CUDA's numbers; they reach the
// caller as ordinary vendor errors with the runtime's name.

// ---------------------------------------------------------------------------
// Flags and enum values.

/// `hipStreamNonBlocking` (`#define`, 0x01; same as CUDA).
pub(crate) const hipStreamNonBlocking: c_uint = 0x01;
/// `hipEventDisableTiming` (`#define`, 0x2; same as CUDA).
pub(crate) const hipEventDisableTiming: c_uint = 0x2;

/// `hipDeviceAttributeMemoryPoolsSupported`: 88 in ROCm 5.2.3 and in the
/// ROCm 6.x/7.x headers. Entries of the CUDA-compatible block were renamed
/// (`Name` -> `Unused1`, `Uuid` -> `Unused2`) and a `PciDomainID` alias was
/// added, but nothing was inserted before it, so no run-time choice is needed.
pub(crate) const hipDeviceAttributeMemoryPoolsSupported: hipDeviceAttribute_t = 88;

/// `hipMemcpyDefault`: direction inferred from the addresses (as CUDA's 4).
pub(crate) const hipMemcpyDefault: hipMemcpyKind = 4;

// hipMemPoolAttr: 1..=8, the same numbering as cudaMemPoolAttr. The three
// reuse flags take an `int`, the rest a `uint64_t`.
pub(crate) const hipMemPoolReuseFollowEventDependencies: hipMemPoolAttr = 0x1;
pub(crate) const hipMemPoolReuseAllowOpportunistic: hipMemPoolAttr = 0x2;
pub(crate) const hipMemPoolReuseAllowInternalDependencies: hipMemPoolAttr = 0x3;
pub(crate) const hipMemPoolAttrReleaseThreshold: hipMemPoolAttr = 0x4;
pub(crate) const hipMemPoolAttrReservedMemCurrent: hipMemPoolAttr = 0x5;
pub(crate) const hipMemPoolAttrReservedMemHigh: hipMemPoolAttr = 0x6;
pub(crate) const hipMemPoolAttrUsedMemCurrent: hipMemPoolAttr = 0x7;
pub(crate) const hipMemPoolAttrUsedMemHigh: hipMemPoolAttr = 0x8;

/// `hipMemAllocationTypePinned`.
pub(crate) const hipMemAllocationTypePinned: u32 = 0x1;
/// `hipMemHandleTypeNone`.
pub(crate) const hipMemHandleTypeNone: u32 = 0x0;
/// `hipMemHandleTypePosixFileDescriptor`.
pub(crate) const hipMemHandleTypePosixFileDescriptor: u32 = 0x1;
/// `hipMemLocationTypeDevice` (5.x has only Invalid = 0 and Device = 1).
pub(crate) const hipMemLocationTypeDevice: u32 = 1;

// Stream capture and graphs (the same values in ROCm 5.2.3 and the 6.x/7.x
// headers, and the same as CUDA's).
pub(crate) const hipStreamCaptureStatusNone: hipStreamCaptureStatus = 0;
pub(crate) const hipStreamCaptureStatusActive: hipStreamCaptureStatus = 1;
pub(crate) const hipStreamCaptureStatusInvalidated: hipStreamCaptureStatus = 2;
pub(crate) const hipStreamCaptureModeGlobal: hipStreamCaptureMode = 0;
pub(crate) const hipStreamCaptureModeThreadLocal: hipStreamCaptureMode = 1;
pub(crate) const hipStreamCaptureModeRelaxed: hipStreamCaptureMode = 2;
/// `hipGraphInstantiateFlagAutoFreeOnLaunch` (flags are `unsigned long long`).
pub(crate) const hipGraphInstantiateFlagAutoFreeOnLaunch: u64 = 1;
// hipGraphMemAttributeType (ROCm >= 5.3 headers); values are `uint64_t`
// bytes (ROCm 5.3 and 5.4 write a 32-bit 0 for every one of them).
// header-check hip<5.3: hipGraphMemAttrUsedMemCurrent absent; hipGraphMemAttrUsedMemHigh absent; hipGraphMemAttrReservedMemCurrent absent; hipGraphMemAttrReservedMemHigh absent; hipUserObjectNoDestructorSync absent; hipGraphUserObjectMove absent
pub(crate) const hipGraphMemAttrUsedMemCurrent: hipGraphMemAttributeType = 0;
pub(crate) const hipGraphMemAttrUsedMemHigh: hipGraphMemAttributeType = 1;
pub(crate) const hipGraphMemAttrReservedMemCurrent: hipGraphMemAttributeType = 2;
pub(crate) const hipGraphMemAttrReservedMemHigh: hipGraphMemAttributeType = 3;
/// `hipUserObjectNoDestructorSync` (ROCm >= 5.3; the only flag accepted).
pub(crate) const hipUserObjectNoDestructorSync: c_uint = 0x1;
/// `hipGraphUserObjectMove` (ROCm >= 5.3).
pub(crate) const hipGraphUserObjectMove: c_uint = 0x1;

// ---------------------------------------------------------------------------
// Pool locations, allocation types and host memory (pointer attributes, the
// pinned-host baselines).

/// `hipErrorInvalidValue`: what `hipPointerGetAttributes` answers for an
/// address the runtime does not know before ROCm 6.0.
pub(crate) const hipErrorInvalidValue: i32 = 1;
// The HIP 5.2 header has only Invalid and Device; the host types (CUDA's
// numbers) are in the ROCm 6.x/7.x headers, and no ROCm release's
// hipMemPoolCreate takes them.
// header-check hip<6: hipMemLocationTypeHost absent; hipMemLocationTypeHostNuma absent
pub(crate) const hipMemLocationTypeInvalid: u32 = 0;
pub(crate) const hipMemLocationTypeHost: u32 = 2;
pub(crate) const hipMemLocationTypeHostNuma: u32 = 3;
// In the ROCm development headers after 7.2, not in any release's pool
// creation.
// header-check hip<7: hipMemAllocationTypeManaged absent
pub(crate) const hipMemAllocationTypeManaged: u32 = 0x2;

/// `hipPointerAttribute_t`: the same 32 bytes in every ROCm; the first
/// field is `memoryType` up to ROCm 5.x and `type` from ROCm 6.0, whose
/// `hipMemoryType` numbers changed too (see below).
// header-check hip>=6: hipPointerAttribute_t.memoryType absent
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct hipPointerAttribute_t {
    /// `enum hipMemoryType`, written by the runtime: kept as an integer.
    pub memoryType: c_int,
    pub device: c_int,
    pub devicePointer: *mut c_void,
    pub hostPointer: *mut c_void,
    pub isManaged: c_int,
    pub allocationFlags: c_uint,
}

impl hipPointerAttribute_t {
    pub(crate) const fn zeroed() -> Self {
        hipPointerAttribute_t {
            memoryType: 0,
            device: 0,
            devicePointer: std::ptr::null_mut(),
            hostPointer: std::ptr::null_mut(),
            isManaged: 0,
            allocationFlags: 0,
        }
    }
}

/// `hipMemoryType` up to ROCm 5.x (managed memory is flagged by
/// `isManaged`); ROCm 6.0 renumbered it as CUDA's `cudaMemoryType`.
// header-check hip>=6: hipMemoryTypeHost = 1; hipMemoryTypeDevice = 2; hipMemoryTypeArray = 10; hipMemoryTypeUnified = 11
pub(crate) const hipMemoryTypeHost: c_int = 0;
pub(crate) const hipMemoryTypeDevice: c_int = 1;
pub(crate) const hipMemoryTypeArray: c_int = 2;
pub(crate) const hipMemoryTypeUnified: c_int = 3;
// header-check hip: HIP6_MEMORY_TYPE_UNREGISTERED absent; HIP6_MEMORY_TYPE_HOST absent; HIP6_MEMORY_TYPE_DEVICE absent; HIP6_MEMORY_TYPE_MANAGED absent
/// `hipMemoryType` from ROCm 6.0 (and HIP on NVIDIA): CUDA's numbers.
pub(crate) const HIP6_MEMORY_TYPE_UNREGISTERED: c_int = 0;
pub(crate) const HIP6_MEMORY_TYPE_HOST: c_int = 1;
pub(crate) const HIP6_MEMORY_TYPE_DEVICE: c_int = 2;
pub(crate) const HIP6_MEMORY_TYPE_MANAGED: c_int = 3;
/// `hipHostMallocDefault` / `hipHostMallocPortable` (`#define`s).
#[allow(dead_code)] // the test kit's baselines only (feature `kernels`)
pub(crate) const hipHostMallocDefault: c_uint = 0x0;
#[allow(dead_code)] // the test kit's baselines only (feature `kernels`)
pub(crate) const hipHostMallocPortable: c_uint = 0x1;

// ---------------------------------------------------------------------------
// Versions.

// The library's own numbers, in no header:
// header-check hip: HIP_VERSION_POINTER_TYPES_6 absent
// header-check hip: HIP_VERSION_ALLOC_IN_CAPTURE absent; HIP_VERSION_GRAPH_UPLOAD absent; HIP_VERSION_GRAPH_MEMORY absent; HIP_VERSION_USER_OBJECTS absent
// header-check hip: HIP_VERSION_MAJOR_SCALE absent; HIP_VERSION_POOL_MAX_SIZE absent; CUDA_VERSION_POOL_MAX_SIZE absent

/// `HIP_VERSION` = major * 10_000_000 + minor * 100_000 + patch; this is what
/// `hipRuntimeGetVersion` reports on AMD (e.g. 50_221_153 for ROCm 5.2.3).
pub(crate) const HIP_VERSION_MAJOR_SCALE: i32 = 10_000_000;
/// ROCm 6.2: the first runtime that reads `hipMemPoolProps::maxSize`.
pub(crate) const HIP_VERSION_POOL_MAX_SIZE: i32 = 60_200_000;
/// HIP on NVIDIA forwards `hipRuntimeGetVersion` to `cudaRuntimeGetVersion`
/// (e.g. 12_080), and `hipMemPoolProps` is `cudaMemPoolProps`, whose `maxSize`
/// (same offset) exists from CUDA 12.2.
pub(crate) const CUDA_VERSION_POOL_MAX_SIZE: i32 = 12_020;

// What each ROCm release added for graphs, from the exported symbols and the
// sources of ROCm's HIP runtime (hipamd, tags rocm-5.2.3 ... rocm-5.6.0):
//
// | ROCm | what is new                                                     |
// |------|-----------------------------------------------------------------|
// | 4.3  | hipStreamBeginCapture/EndCapture/IsCapturing, hipGraphLaunch,    |
// |      | hipGraphDestroy, hipGraphExecDestroy                             |
// | 4.5  | hipStreamGetCaptureInfo(_v2), hipGraphInstantiateWithFlags       |
// | 5.1  | the stream-ordered allocator (hipMallocAsync, pools); under a    |
// |      | capture it still allocates at once, outside the graph            |
// | 5.3  | hipUserObjectCreate, hipGraphRetainUserObject,                   |
// |      | hipDeviceGetGraphMemAttribute (answers 0), hipDeviceGraphMemTrim |
// |      | (does nothing)                                                   |
// | 5.5  | hipGraphUpload; hipMallocAsync / hipMallocFromPoolAsync /        |
// |      | hipFreeAsync inside a capture become graph memory nodes          |
// |      | (hipGraphAddMemAllocNode, hipGraphAddMemFreeNode)                |
// | 5.6  | a graph memory pool per device: the graph-memory attributes and  |
// |      | hipDeviceGraphMemTrim report and release real memory             |

/// ROCm 5.5: stream-ordered allocation and free inside a capture are
/// recorded as graph memory nodes. Before, they act at once (outside the
/// graph), which a replay cannot repeat.
pub(crate) const HIP_VERSION_ALLOC_IN_CAPTURE: i32 = 50_500_000;
/// ROCm 5.5: `hipGraphUpload`.
pub(crate) const HIP_VERSION_GRAPH_UPLOAD: i32 = 50_500_000;
/// ROCm 5.3: the graph-memory attributes and trim.
pub(crate) const HIP_VERSION_GRAPH_MEMORY: i32 = 50_300_000;
/// ROCm 5.3: user objects.
pub(crate) const HIP_VERSION_USER_OBJECTS: i32 = 50_300_000;
/// ROCm 6.0: `hipMemoryType` takes CUDA's numbers and
/// `hipPointerGetAttributes` answers `hipMemoryTypeUnregistered` for an
/// address it does not know (before: `hipErrorInvalidValue`).
pub(crate) const HIP_VERSION_POINTER_TYPES_6: i32 = 60_000_000;

// ---------------------------------------------------------------------------
// Structs.

/// `hipMemLocation`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct hipMemLocation {
    /// `hipMemLocationType`.
    pub type_: u32,
    pub id: c_int,
}

/// `hipMemAccessDesc`; `flags` is `hipMemAccessFlags` (0 none, 1 read,
/// 3 read-write).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct hipMemAccessDesc {
    pub location: hipMemLocation,
    pub flags: u32,
}

const _: () = assert!(std::mem::size_of::<hipMemAccessDesc>() == 12);

/// `hipMemPoolProps`, in its ROCm >= 6.2 shape. In ROCm < 6.2 the eight bytes
/// of `maxSize` are the start of `unsigned char reserved[64]`, which must be
/// zero: the backend writes `maxSize` only when the runtime reads it.
// header-check hip<6.2: hipMemPoolProps.maxSize absent; hipMemPoolProps.reserved offset 24; hipMemPoolProps.reserved size 64
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct hipMemPoolProps {
    /// `hipMemAllocationType`.
    pub allocType: u32,
    /// `hipMemAllocationHandleType` (a bit mask).
    pub handleTypes: u32,
    pub location: hipMemLocation,
    pub win32SecurityAttributes: *mut c_void,
    pub maxSize: usize,
    pub reserved: [u8; 56],
}

impl hipMemPoolProps {
    /// All fields zero / null, as the runtime expects for unused fields.
    pub(crate) const fn zeroed() -> Self {
        hipMemPoolProps {
            allocType: 0,
            handleTypes: 0,
            location: hipMemLocation { type_: 0, id: 0 },
            win32SecurityAttributes: std::ptr::null_mut(),
            maxSize: 0,
            reserved: [0; 56],
        }
    }
}

// ---------------------------------------------------------------------------
// The virtual-memory API (hipMem*, backends/rocm/vmm.rs). Its functions have
// kept their signatures from ROCm 5.1, where they appeared, to 7.x;
// `hipMemAllocationProp` has not (below).

/// `hipMemGenericAllocationHandle_t`: a pointer to an incomplete struct (the
/// backend carries it as an integer, `PhysHandle`).
pub(crate) type hipMemGenericAllocationHandle_t = *mut ihipMemGenericAllocationHandle;
// The C enums the calls take, as integers of their size.
pub(crate) type hipMemAllocationHandleType = u32;
pub(crate) type hipMemAllocationGranularity_flags = u32;
pub(crate) const hipMemAllocationGranularityMinimum: hipMemAllocationGranularity_flags = 0x0;
pub(crate) const hipMemAllocationGranularityRecommended: hipMemAllocationGranularity_flags = 0x1;
/// `hipMemAccessFlags` (CUDA's numbers).
pub(crate) const hipMemAccessFlagsProtNone: u32 = 0;
pub(crate) const hipMemAccessFlagsProtReadWrite: u32 = 3;
/// 89 from ROCm 5.3 (the next after `MemoryPoolsSupported`, 88) to 7.x;
/// ROCm 5.2 has no such attribute.
// header-check hip<5.3: hipDeviceAttributeVirtualMemoryManagementSupported absent
pub(crate) const hipDeviceAttributeVirtualMemoryManagementSupported: hipDeviceAttribute_t = 89;
/// 94, new in HIP 7.13 (its release notes; rocm-systems#4806): CUDA's
/// CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED. Checked only
/// as far as this comment goes: no header set of the checker is that recent.
// header-check hip<7.13: hipDeviceAttributeGPUDirectRDMAWithHipVMMSupported absent
pub(crate) const hipDeviceAttributeGPUDirectRDMAWithHipVMMSupported: hipDeviceAttribute_t = 94;

// `hipMemAllocationProp` has had two layouts, both 32 bytes: ROCm 5.1 and 5.2
// order the fields their own way; ROCm 5.3 took CUDA's order and flag bytes
// (`CUmemAllocationProp`), without CUDA's `reserved[4]` (trailing padding
// in HIP). The first release with the new layout is ROCm 5.3.0: the
// declaration in include/hip/hip_runtime_api.h of the ROCm/HIP repository
// differs between its tags rocm-5.2.3 and rocm-5.3.0, and is the same from
// there to the repository's last tags (rocm-6.2.x); later headers keep its
// offsets and size (one names the handle-type field `requestedHandleTypes`
// too, through a union). The backend picks the layout by the runtime's
// version (vmm.rs).
//
// The checker compares `hipMemAllocationProp_5_2` with the installed ROCm
// 5.2.3 header. `hipMemAllocationProp_5_3` is checked against no HIP
// header in ci/bindgen-check.sh (it has none newer than 5.2, and a ROCm
// >= 6 header set cannot be installed there): it mirrors CUDA's
// `CUmemAllocationProp`, which the checker compares with every CUDA header
// (backends/cuda/sys.rs), and the `const` assertions below pin its offsets
// to CUDA's. The lines below say how a ROCm >= 5.3 header set checks it;
// run once by hand on the ROCm 6.2.0 headers (include/ of ROCm/HIP and
// hipamd/include of ROCm/clr at their tags rocm-6.2.0, with a written
// hip_version.h), every item of this section passed.
// header-check hip<5.3: hipMemAllocationProp_5_2 is hipMemAllocationProp; hipMemAllocationProp_5_3 absent; hipMemAllocationProp_allocFlags absent
// header-check hip>=5.3: hipMemAllocationProp_5_2 absent; hipMemAllocationProp_5_3 is hipMemAllocationProp

/// `hipMemAllocationProp` of ROCm 5.1 and 5.2.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct hipMemAllocationProp_5_2 {
    pub compressionType: u8,
    pub location: hipMemLocation,
    pub requestedHandleType: hipMemAllocationHandleType,
    /// `hipMemAllocationType`.
    pub type_: u32,
    pub usage: u16,
    pub win32HandleMetaData: *mut c_void,
}

/// `hipMemAllocationProp` from ROCm 5.3 (and of HIP on NVIDIA, which is
/// CUDA's struct).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct hipMemAllocationProp_5_3 {
    /// `hipMemAllocationType`.
    pub type_: u32,
    pub requestedHandleType: hipMemAllocationHandleType,
    pub location: hipMemLocation,
    pub win32HandleMetaData: *mut c_void,
    pub allocFlags: hipMemAllocationProp_allocFlags,
}

/// The anonymous `allocFlags` struct of the ROCm >= 5.3 layout.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct hipMemAllocationProp_allocFlags {
    pub compressionType: u8,
    pub gpuDirectRDMACapable: u8,
    pub usage: u16,
}

const _: () = assert!(size_of::<hipMemAllocationProp_5_2>() == 32);
const _: () = assert!(offset_of!(hipMemAllocationProp_5_2, location) == 4);
const _: () = assert!(offset_of!(hipMemAllocationProp_5_2, requestedHandleType) == 12);
const _: () = assert!(offset_of!(hipMemAllocationProp_5_2, type_) == 16);
const _: () = assert!(offset_of!(hipMemAllocationProp_5_2, usage) == 20);
const _: () = assert!(offset_of!(hipMemAllocationProp_5_2, win32HandleMetaData) == 24);
// The ROCm >= 5.3 layout is CUDA's (CUmemAllocationProp: 32 bytes, the
// handle type at 4, the location at 8, the Win32 data at 16, the flag bytes
// from 24: compression, RDMA, usage at 26).
const _: () = assert!(size_of::<hipMemAllocationProp_5_3>() == 32);
const _: () = assert!(align_of::<hipMemAllocationProp_5_3>() == 8);
const _: () = assert!(offset_of!(hipMemAllocationProp_5_3, requestedHandleType) == 4);
const _: () = assert!(offset_of!(hipMemAllocationProp_5_3, location) == 8);
const _: () = assert!(offset_of!(hipMemAllocationProp_5_3, win32HandleMetaData) == 16);
const _: () = assert!(offset_of!(hipMemAllocationProp_5_3, allocFlags) == 24);
const _: () = assert!(offset_of!(hipMemAllocationProp_allocFlags, gpuDirectRDMACapable) == 1);
const _: () = assert!(offset_of!(hipMemAllocationProp_allocFlags, usage) == 2);

// Layouts as in the headers (checked with offsetof/sizeof against ROCm 5.2.3:
// sizeof(hipMemPoolProps) == 88, location at 8, win32SecurityAttributes at 16,
// reserved[64] at 24; and against the ROCm >= 6.2 declaration with maxSize).
// ROCm is 64-bit only.
const _: () = assert!(size_of::<hipMemLocation>() == 8);
const _: () = assert!(
    size_of::<hipMemPoolProps>() == 88,
    "hipMemPoolProps must be 88 bytes"
);
const _: () = assert!(align_of::<hipMemPoolProps>() == 8);
const _: () = assert!(offset_of!(hipMemPoolProps, allocType) == 0);
const _: () = assert!(offset_of!(hipMemPoolProps, handleTypes) == 4);
const _: () = assert!(offset_of!(hipMemPoolProps, location) == 8);
const _: () = assert!(offset_of!(hipMemPoolProps, win32SecurityAttributes) == 16);
const _: () = assert!(offset_of!(hipMemPoolProps, maxSize) == 24);
const _: () = assert!(offset_of!(hipMemPoolProps, reserved) == 32);
const _: () = assert!(size_of::<hipStream_t>() == size_of::<*mut c_void>());
const _: () = assert!(size_of::<hipHostFn_t>() == size_of::<*mut c_void>());
const _: () = assert!(size_of::<hipPointerAttribute_t>() == 32);
const _: () = assert!(offset_of!(hipPointerAttribute_t, devicePointer) == 8);
const _: () = assert!(offset_of!(hipPointerAttribute_t, isManaged) == 24);
