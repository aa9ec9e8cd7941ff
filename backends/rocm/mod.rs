//! The ROCm backend: the HIP runtime API (`libamdhip64`), loaded at run time.
//!
//! # Loading
//!
//! The library is opened with `libloading` on first use: `$SOMALLOC_AMDHIP`
//! alone if set, else `libamdhip64.so.7`, `.so.6`, `.so.5` and `libamdhip64.so`.
//! The first one that opens is used; when none opens, or the one that opened
//! lacks a function used here, the result is [`Error::RuntimeNotFound`] (with
//! every reason), never a panic. Every function is declared to return a plain `i32`: crates such as
//! `hip-runtime-sys` declare `hipError_t` as a Rust enum, and a code that
//! another runtime version adds would then be an invalid enum value, which is
//! undefined behaviour. As an `i32` it is just data ([`VendorCode`](crate::VendorCode)). A
//! failed call leaves the runtime's last error (`hipGetLastError`) as the
//! failed runtime call set it; somalloc does not reset it (see `common.rs`).
//!
//! # Bindings: hand-written, not generated
//!
//! The types and constants live in `sys.rs`, written by hand as a small
//! `#[repr(C)]` set (opaque handle pointers, `hipMemLocation`,
//! `hipMemPoolProps`, the constants this file uses) with `const` layout
//! assertions checked against the ROCm 5.2.3 and ROCm 6.x/7.x headers. The
//! backend touches one struct and a dozen constants, all stable across ROCm
//! 5-7, so generated bindings would add a build-time or check-in dependency
//! on one ROCm version's headers for no gain. Above all, `cargo build
//! --features rocm` needs no HIP installation (no headers, no libclang): CI
//! and users without ROCm can build, and get `RuntimeNotFound` at run time.
//!
//! # Where HIP differs from CUDA, and how that is absorbed
//!
//! * `hipGetDeviceProperties` is `hipGetDevicePropertiesR0600` with another
//!   struct layout from ROCm 6 on; the name comes from `hipDeviceGetName`,
//!   whose signature has not changed.
//! * `hipMemPoolProps::maxSize` exists only from ROCm 6.2 (before, those bytes
//!   are reserved and must be zero). With an older runtime a non-zero
//!   `max_size` is [`Error::Unsupported`], never silently ignored.
//! * `hipMallocAsync(0)` and `hipFreeAsync(NULL)` fail before ROCm 5.6. The
//!   safe layer never passes either; here 0 bytes is `InvalidArgument` and a
//!   null free is a no-op, as on ROCm >= 5.6, without calling the runtime.
//! * `hipModuleLoadData` loads into the *current* device (CUDA's
//!   `cudaLibraryLoadData` is context-independent); the test kit makes the
//!   device current before loading, and launches go through
//!   `hipModuleLaunchKernel` with `kernelParams` (no `extra`).
//! * Pools: only device locations and pinned memory (every ROCm release's
//!   `hipMemPoolCreate`, 5.1 to 7.2, refuses host locations and managed
//!   memory), export handle types none or POSIX fd (no fabric handles);
//!   anything else is `Unsupported`, naming the runtime. HIP on NVIDIA (a
//!   runtime that reports a CUDA version) follows CUDA's table.
//! * `hipPointerGetAttributes`: ROCm 6.0 renumbered `hipMemoryType` (to
//!   CUDA's numbers) and answers "unregistered" for pageable memory, where
//!   ROCm 5 fails with `hipErrorInvalidValue`; both are decoded by version. Pool attributes 1..=8 have the same numbers and value
//!   types as CUDA's.
//! * Error codes 2, 35, 100 and 801 mean what CUDA's do; the mapping to
//!   [`Error`] is the same as the CUDA backend's. So do the capture errors
//!   900-908 (ordinary [`Error::Vendor`]s with the runtime's name).
//! * Stream capture and graphs: the capture calls, `hipGraphLaunch` and
//!   `hipGraphInstantiateWithFlags` exist since ROCm 4.5 and are required.
//!   User objects and the graph-memory attributes came in ROCm 5.3 and
//!   `hipGraphUpload` in 5.5 (table in `sys.rs`): they are optional symbols,
//!   so an older runtime still loads, and each of those calls answers
//!   [`Error::Unsupported`] naming the call, the ROCm that has it and the
//!   loaded runtime ("hipGraphUpload needs ROCm 5.5 or later; this runtime
//!   is HIP 5.2").
//! * Before ROCm 5.5, `hipMallocAsync`, `hipMallocFromPoolAsync` and
//!   `hipFreeAsync` on a capturing stream are not recorded into the graph:
//!   they allocate or free at once, which a replay cannot repeat. On such a
//!   runtime (and only there) the backend asks `hipStreamIsCapturing` first
//!   and refuses them during a capture with `Unsupported`; on newer runtimes
//!   the check is a comparison with the version read at load.
//! * `hipStreamGetCaptureInfo_v2` refuses the null stream (CUDA answers "not
//!   capturing"); for it the backend asks `hipStreamIsCapturing`.
//! * The virtual-memory API (`hipMemCreate`, `hipMemMap`, ...; `vmm.rs`):
//!   optional symbols, usable from ROCm 5.3, with two layouts of
//!   `hipMemAllocationProp` picked by version and faults of some releases
//!   that the arena works around (`vmm.rs` lists them with their sources).
//!
//! # What is written here and what is shared
//!
//! The functions both runtimes have, and the body of the `Backend` impl
//! that drives them alike, are written once in `backends/shared.rs`
//! (`shared_runtime_api!`, `backend_impl!`); this file holds the vendor's
//! name table, its own functions, and the hooks where the vendors differ.
//!
//! The file stays whole past 500 lines: this comment is a fifth of it, and
//! the `backend_impl!` call (about 230 lines) is one macro invocation whose
//! vendor hooks cannot be cut apart; the tests live in `tests.rs`.

#[path = "sys.rs"]
mod sys;
#[path = "vmm.rs"]
mod vmm;

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

use super::common::{self, backend_impl, handle, ordinal, shared_runtime_api};
use crate::backend::MemoryType;
use crate::backend::{CaptureInfo, DevicePtr, RawAlloc, RawLocation, RawPointerInfo, RawPoolProps};
use crate::error::{Error, InvalidReason, Result};

const BACKEND: crate::Vendor = crate::Vendor::Rocm;
const LIBRARY: &str = "libamdhip64";
/// `$SOMALLOC_AMDHIP` alone when set, else the runtimes of ROCm 7, 6 and 5.
const LIBRARY_ENV: &str = "SOMALLOC_AMDHIP";
const LIBRARY_NAMES: &[&str] = &[
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
    "libamdhip64.so",
];

/// Whether a runtime reporting `version` is at least the ROCm release
/// `since` (a `HIP_VERSION` number). HIP on NVIDIA reports the CUDA
/// runtime's version (below `HIP_VERSION_MAJOR_SCALE`), which has every call.
fn rocm_at_least(version: i32, since: i32) -> bool {
    !(sys::HIP_VERSION_MAJOR_SCALE..since).contains(&version)
}

shared_runtime_api! {
    prefix: "hip", version: version,
    stream: sys::hipStream_t, event: sys::hipEvent_t, pool: sys::hipMemPool_t,
    graph: sys::hipGraph_t, exec: sys::hipGraphExec_t, user_object: sys::hipUserObject_t,
    host_fn: sys::hipHostFn_t, location: sys::hipMemLocation, access_desc: sys::hipMemAccessDesc,
    pool_props: sys::hipMemPoolProps,
    // The shared graph calls newer than ROCm 5.2 (version table in sys.rs).
    // A runtime that reports an older version does without them even where
    // it exports the symbol (ROCm 5.3 and 5.4 export some as stubs).
    since: {
        graph_upload: "ROCm 5.5" if rocm_at_least(version, sys::HIP_VERSION_GRAPH_UPLOAD),
        graph_memory: "ROCm 5.3" if rocm_at_least(version, sys::HIP_VERSION_GRAPH_MEMORY),
        user_objects: "ROCm 5.3" if rocm_at_least(version, sys::HIP_VERSION_USER_OBJECTS)
    },
    required {
        fn device_get = "hipDeviceGet\0"; (*mut sys::hipDevice_t, c_int) -> i32;
        fn device_get_name = "hipDeviceGetName\0"; (*mut c_char, c_int, sys::hipDevice_t) -> i32;
        fn module_load_data = "hipModuleLoadData\0"; (*mut sys::hipModule_t, *const c_void) -> i32;
        fn module_unload = "hipModuleUnload\0"; (sys::hipModule_t) -> i32;
        fn module_get_function = "hipModuleGetFunction\0"; (
            *mut sys::hipFunction_t, sys::hipModule_t, *const c_char,
        ) -> i32;
        fn module_launch_kernel = "hipModuleLaunchKernel\0"; (
            sys::hipFunction_t,
            c_uint, c_uint, c_uint,
            c_uint, c_uint, c_uint,
            c_uint, sys::hipStream_t,
            *mut *mut c_void, *mut *mut c_void,
        ) -> i32;
        // Since ROCm 4.5 (node hip_4.5 of 5.2.3's libamdhip64).
        fn stream_get_capture_info_v2 = "hipStreamGetCaptureInfo_v2\0"; (
            sys::hipStream_t, *mut sys::hipStreamCaptureStatus, *mut u64, *mut sys::hipGraph_t,
            *mut *const sys::hipGraphNode_t, *mut usize,
        ) -> i32;
        // Host memory: pointer attributes, and the pinned-host baselines
        // (all since ROCm 4.2, node hip_4.2).
        fn pointer_get_attributes = "hipPointerGetAttributes\0"; (
            *mut sys::hipPointerAttribute_t, *const c_void,
        ) -> i32;
        fn host_malloc = "hipHostMalloc\0"; (*mut *mut c_void, usize, c_uint) -> i32;
        fn host_free = "hipHostFree\0"; (*mut c_void) -> i32;
    }
    optional {
        // The virtual-memory API (vmm.rs): exported from ROCm 5.1 (version
        // node hip_5.1), usable from 5.3 (vmm.rs says why). The allocation
        // properties are either layout of hipMemAllocationProp (sys.rs),
        // picked by version, hence `*const c_void`.
        optional(since "ROCm 5.1") fn mem_address_reserve = "hipMemAddressReserve\0"; (
            *mut *mut c_void, usize, usize, *mut c_void, u64,
        ) -> i32;
        optional(since "ROCm 5.1") fn mem_address_free = "hipMemAddressFree\0"; (*mut c_void, usize) -> i32;
        optional(since "ROCm 5.1") fn mem_create = "hipMemCreate\0"; (
            *mut sys::hipMemGenericAllocationHandle_t, usize, *const c_void, u64,
        ) -> i32;
        optional(since "ROCm 5.1") fn mem_release = "hipMemRelease\0"; (sys::hipMemGenericAllocationHandle_t) -> i32;
        optional(since "ROCm 5.1") fn mem_map = "hipMemMap\0"; (
            *mut c_void, usize, usize, sys::hipMemGenericAllocationHandle_t, u64,
        ) -> i32;
        optional(since "ROCm 5.1") fn mem_set_access = "hipMemSetAccess\0"; (
            *mut c_void, usize, *const sys::hipMemAccessDesc, usize,
        ) -> i32;
        optional(since "ROCm 5.1") fn mem_unmap = "hipMemUnmap\0"; (*mut c_void, usize) -> i32;
        optional(since "ROCm 5.1") fn mem_get_allocation_granularity = "hipMemGetAllocationGranularity\0"; (
            *mut usize, *const c_void, sys::hipMemAllocationGranularity_flags,
        ) -> i32;
        optional(since "ROCm 5.1") fn mem_retain_allocation_handle = "hipMemRetainAllocationHandle\0"; (
            *mut sys::hipMemGenericAllocationHandle_t, *mut c_void,
        ) -> i32;
        optional(since "ROCm 5.1") fn mem_export_to_shareable_handle = "hipMemExportToShareableHandle\0"; (
            *mut c_void, sys::hipMemGenericAllocationHandle_t, sys::hipMemAllocationHandleType, u64,
        ) -> i32;
        optional(since "ROCm 5.1") fn mem_import_from_shareable_handle = "hipMemImportFromShareableHandle\0"; (
            *mut sys::hipMemGenericAllocationHandle_t, *mut c_void, sys::hipMemAllocationHandleType,
        ) -> i32;
    }
}

handle!(
    RocmStream = hipStream_t,
    RocmEvent = hipEvent_t,
    RocmPool = hipMemPool_t,
    RocmGraph = hipGraph_t,
    RocmGraphExec = hipGraphExec_t,
);
// The test kit's code objects (feature `kernels`).
#[cfg(somalloc_kernels)]
handle!(RocmModule = hipModule_t, RocmFunction = hipFunction_t);

fn api() -> Result<&'static Api> {
    static API: OnceLock<Result<Api>> = OnceLock::new();
    API.get_or_init(|| {
        let searched = common::library_candidates(LIBRARY_ENV, LIBRARY_NAMES);
        // SAFETY: the candidates are HIP runtimes: hipRuntimeGetVersion is
        // `int f(int*)` in every release, and every function declared above
        // has had the same C signature from ROCm 5 to ROCm 7.
        unsafe { common::load_runtime(LIBRARY, searched, "hipRuntimeGetVersion\0", |_| None, Api::load) }
    })
    .as_ref()
    .map_err(Clone::clone)
}

fn unsupported(what: impl Into<String>) -> Error {
    Error::Unsupported {
        backend: BACKEND,
        what: what.into(),
    }
}

/// The first ROCm whose runtime reads `hipMemPoolProps::maxSize`.
const POOL_MAX_SIZE_SINCE: &str = "ROCm 6.2";

/// Whether a runtime reporting `version` (from `hipRuntimeGetVersion`) reads
/// `hipMemPoolProps::maxSize`.
fn pool_max_size_supported(version: i32) -> bool {
    if version >= sys::HIP_VERSION_MAJOR_SCALE {
        version >= sys::HIP_VERSION_POOL_MAX_SIZE
    } else {
        // Not a HIP_VERSION number: HIP on NVIDIA reports the CUDA version.
        version >= sys::CUDA_VERSION_POOL_MAX_SIZE
    }
}

/// Whether a runtime reporting `version` records stream-ordered allocations
/// and frees made during a capture as graph memory nodes (ROCm >= 5.5; CUDA,
/// under HIP on NVIDIA, always).
fn alloc_in_capture_supported(version: i32) -> bool {
    // Below the ROCm scale: a CUDA version (HIP on NVIDIA).
    !(sys::HIP_VERSION_MAJOR_SCALE..sys::HIP_VERSION_ALLOC_IN_CAPTURE).contains(&version)
}

/// On a runtime without stream-ordered allocation inside a capture, refuses
/// `call` on a capturing stream: there, hipMallocAsync and hipFreeAsync act
/// at once instead of being recorded, so a replay of the graph would use
/// memory that was freed, or free it again. Newer runtimes take no extra
/// call here.
#[inline]
fn refuse_alloc_in_capture(api: &Api, call: &str, stream: RocmStream) -> Result<()> {
    if alloc_in_capture_supported(api.version) {
        return Ok(());
    }
    refuse_alloc_in_capture_slow(api, call, stream)
}

#[cold]
fn refuse_alloc_in_capture_slow(api: &Api, call: &str, stream: RocmStream) -> Result<()> {
    let mut status = sys::hipStreamCaptureStatusNone;
    // SAFETY: valid out-pointer; the runtime validates the stream.
    check("hipStreamIsCapturing", unsafe {
        (api.stream_is_capturing)(stream.0, &mut status)
    })?;
    if status == sys::hipStreamCaptureStatusNone {
        return Ok(());
    }
    Err(unsupported(format!(
        "{call} inside a stream capture needs ROCm 5.5 or later; this runtime is {}",
        version_text(api.version)
    )))
}

/// `major.minor` of a `hipRuntimeGetVersion` number, for messages.
fn version_text(version: i32) -> String {
    if version >= sys::HIP_VERSION_MAJOR_SCALE {
        format!(
            "HIP {}.{}",
            version / sys::HIP_VERSION_MAJOR_SCALE,
            (version % sys::HIP_VERSION_MAJOR_SCALE) / 100_000
        )
    } else {
        format!("runtime version {version}")
    }
}

// The other vendor hooks of the shared body (see `backends/shared.rs`).

/// `hipMallocAsync(0)` fails before ROCm 5.6 (the safe layer never asks for
/// one); refused here on every runtime, without a runtime call.
#[inline]
fn refuse_zero_bytes(bytes: usize, what: &'static str) -> Result<()> {
    if bytes == 0 {
        return Err(InvalidReason::ZeroBytes.error(what));
    }
    Ok(())
}

/// `hipFreeAsync(NULL)` / `hipFree(NULL)` fail before ROCm 5.6 and do
/// nothing after: a no-op here, without a runtime call.
#[inline]
fn free_is_noop(ptr: DevicePtr) -> bool {
    ptr == DevicePtr::NULL
}

// ---------------------------------------------------------------------------
// Pool locations, allocation types and host memory.

const _: () = {
    assert!(sys::hipMemLocationTypeInvalid == common::LOCATION_NONE);
    assert!(sys::hipMemLocationTypeHost == common::LOCATION_HOST);
    assert!(sys::hipMemLocationTypeHostNuma == common::LOCATION_HOST_NUMA);
    assert!(sys::hipMemAllocationTypeManaged == common::ALLOC_MANAGED);
};

/// The locations and allocation types the runtime's pools take. Every ROCm
/// release's `hipMemPoolCreate` (5.1 to 7.2) takes only device locations
/// and pinned memory (ROCm's `hip_mempool.cpp` refuses anything else with
/// `hipErrorInvalidValue`): the rest is refused here, naming the runtime. HIP
/// on NVIDIA (a runtime that reports a CUDA version) follows CUDA's table.
fn refuse_pool_placement(version: i32, props: &RawPoolProps) -> Result<()> {
    if version < sys::HIP_VERSION_MAJOR_SCALE {
        return match common::cuda_pool_refusal(version, props.location, props.alloc, &version_text(version)) {
            Some(why) => Err(unsupported(why)),
            None => Ok(()),
        };
    }
    let what = match (props.location, props.alloc) {
        (RawLocation::Device(_), RawAlloc::Pinned) => return Ok(()),
        (_, RawAlloc::Managed) => "managed memory pools",
        (RawLocation::Host | RawLocation::HostNuma(_), _) => "pools of pinned host memory",
        (RawLocation::Unspecified, RawAlloc::Pinned) => "a pinned pool without a location",
    };
    Err(unsupported(format!(
        "{what}: hipMemPoolCreate takes device locations and pinned memory only (ROCm 5.1 to 7.2); \
         this runtime is {}",
        version_text(version)
    )))
}

/// Whether a runtime reporting `version` numbers `hipMemoryType` as CUDA
/// does (ROCm >= 6.0, or HIP on NVIDIA).
fn cuda_memory_types(version: i32) -> bool {
    !(sys::HIP_VERSION_MAJOR_SCALE..sys::HIP_VERSION_POINTER_TYPES_6).contains(&version)
}

/// `hipPointerAttribute_t` as somalloc's memory type, by the runtime's
/// numbering.
fn memory_type(version: i32, attr: &sys::hipPointerAttribute_t) -> MemoryType {
    if cuda_memory_types(version) {
        return match attr.memoryType {
            sys::HIP6_MEMORY_TYPE_UNREGISTERED => MemoryType::Pageable,
            sys::HIP6_MEMORY_TYPE_HOST => MemoryType::PinnedHost,
            sys::HIP6_MEMORY_TYPE_DEVICE => MemoryType::Device,
            sys::HIP6_MEMORY_TYPE_MANAGED => MemoryType::Managed,
            other => MemoryType::Other(other),
        };
    }
    if attr.isManaged != 0 {
        return MemoryType::Managed;
    }
    match attr.memoryType {
        sys::hipMemoryTypeHost => MemoryType::PinnedHost,
        sys::hipMemoryTypeDevice | sys::hipMemoryTypeArray => MemoryType::Device,
        sys::hipMemoryTypeUnified => MemoryType::Managed,
        other => MemoryType::Other(other),
    }
}

/// The device ordinal of a device location, for the per-device calls.
fn device_pinned(location: RawLocation, alloc: RawAlloc) -> Option<usize> {
    match (location, alloc) {
        (RawLocation::Device(id), RawAlloc::Pinned) => usize::try_from(id).ok(),
        _ => None,
    }
}

/// The by-location pool lookups somalloc makes only for device pools.
fn no_pool_by_location(call: &str) -> Error {
    let runtime = api().map_or_else(|_| "not loaded".to_string(), |a| version_text(a.version));
    unsupported(format!(
        "{call}: only the pinned pools of a device can be looked up on HIP (hipDeviceGetDefaultMemPool, \
         hipDeviceGetMemPool); this runtime is {runtime}"
    ))
}

/// The ROCm (HIP) backend.
#[derive(Debug)]
pub(crate) struct Rocm;

backend_impl! {
    backend: Rocm, codes: RocmCodes, prefix: "hip",
    stream: RocmStream = sys::hipStream_t,
    event: RocmEvent = sys::hipEvent_t,
    pool: RocmPool = sys::hipMemPool_t,
    module: RocmModule,
    function: RocmFunction,
    graph: RocmGraph = sys::hipGraph_t,
    exec: RocmGraphExec = sys::hipGraphExec_t,
    user_object: sys::hipUserObject_t,
    mem_location: sys::hipMemLocation,
    mem_access_desc: sys::hipMemAccessDesc,
    mem_pool_props: sys::hipMemPoolProps,
    constants: {
        success: sys::hipSuccess,
        out_of_memory: sys::hipErrorOutOfMemory,
        insufficient_driver: sys::hipErrorInsufficientDriver,
        no_device: sys::hipErrorNoDevice,
        not_supported: sys::hipErrorNotSupported,
        stream_non_blocking: sys::hipStreamNonBlocking,
        event_disable_timing: sys::hipEventDisableTiming,
        pools_supported: sys::hipDeviceAttributeMemoryPoolsSupported,
        memcpy_default: sys::hipMemcpyDefault,
        location_device: sys::hipMemLocationTypeDevice,
        alloc_pinned: sys::hipMemAllocationTypePinned,
        handle_none: sys::hipMemHandleTypeNone,
        handle_fd: sys::hipMemHandleTypePosixFileDescriptor,
        pool_attrs: [
            sys::hipMemPoolReuseFollowEventDependencies,
            sys::hipMemPoolReuseAllowOpportunistic,
            sys::hipMemPoolReuseAllowInternalDependencies,
            sys::hipMemPoolAttrReleaseThreshold,
            sys::hipMemPoolAttrReservedMemCurrent,
            sys::hipMemPoolAttrReservedMemHigh,
            sys::hipMemPoolAttrUsedMemCurrent,
            sys::hipMemPoolAttrUsedMemHigh,
        ],
        capture_status: [
            sys::hipStreamCaptureStatusNone,
            sys::hipStreamCaptureStatusActive,
            sys::hipStreamCaptureStatusInvalidated,
        ],
        capture_mode: [
            sys::hipStreamCaptureModeGlobal,
            sys::hipStreamCaptureModeThreadLocal,
            sys::hipStreamCaptureModeRelaxed,
        ],
        graph_mem_attrs: [
            sys::hipGraphMemAttrUsedMemCurrent,
            sys::hipGraphMemAttrUsedMemHigh,
            sys::hipGraphMemAttrReservedMemCurrent,
            sys::hipGraphMemAttrReservedMemHigh,
        ],
        auto_free_on_launch: sys::hipGraphInstantiateFlagAutoFreeOnLaunch,
        user_object_no_sync: sys::hipUserObjectNoDestructorSync,
        user_object_move: sys::hipGraphUserObjectMove,
    },
    specific {
        fn device_name(device: usize) -> Result<String> {
            let api = api()?;
            let mut dev: sys::hipDevice_t = 0;
            // SAFETY: valid out-pointer.
            check("hipDeviceGet", unsafe {
                (api.device_get)(&mut dev, ordinal(device)?)
            })?;
            // CUDA's and HIP's property structs both hold the name in 256 bytes.
            let mut name = [0 as c_char; 256];
            // SAFETY: the buffer is writable for `len` bytes; the runtime writes
            // at most `len` bytes including the terminating NUL.
            check("hipDeviceGetName", unsafe {
                (api.device_get_name)(name.as_mut_ptr(), name.len() as c_int, dev)
            })?;
            let bytes: Vec<u8> = name.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
            Ok(String::from_utf8_lossy(&bytes).into_owned())
        }

        fn stream_capture_status(stream: RocmStream) -> Result<crate::backend::CaptureStatus> {
            // HIP has no driver layer to ask: the runtime's call it is.
            let mut status = sys::hipStreamCaptureStatusNone;
            // SAFETY: valid out-pointer; the runtime validates the stream.
            check("hipStreamIsCapturing", unsafe {
                (api()?.stream_is_capturing)(stream.0, &mut status)
            })?;
            common::capture_status::<RocmCodes>("hipStreamIsCapturing", status)
        }

        fn stream_capture_info(stream: RocmStream) -> Result<CaptureInfo<RocmGraph>> {
            if stream.0.is_null() {
                // hipStreamGetCaptureInfo_v2 refuses the null stream (CUDA's
                // answers "not capturing"); hipStreamIsCapturing takes it.
                let status = Self::stream_capture_status(stream)?;
                return Ok(common::capture_info(status, 0, std::ptr::null_mut(), RocmGraph));
            }
            let mut status = sys::hipStreamCaptureStatusNone;
            let mut id = 0u64;
            let mut graph: sys::hipGraph_t = std::ptr::null_mut();
            // SAFETY: valid out-pointers for status, id and graph; the
            // dependency outputs are not asked for (null).
            check("hipStreamGetCaptureInfo_v2", unsafe {
                (api()?.stream_get_capture_info_v2)(
                    stream.0,
                    &mut status,
                    &mut id,
                    &mut graph,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            })?;
            let status = common::capture_status::<RocmCodes>("hipStreamGetCaptureInfo_v2", status)?;
            Ok(common::capture_info(status, id, graph, RocmGraph))
        }


        // -------------------------------------------------------------------
        // Pool locations, allocation types and host memory.

        fn default_pool_at(location: RawLocation, alloc: RawAlloc) -> Result<RocmPool> {
            match device_pinned(location, alloc) {
                Some(device) => Self::default_pool(device),
                None => Err(no_pool_by_location("the default pool of a location")),
            }
        }

        fn current_pool_at(location: RawLocation, alloc: RawAlloc) -> Result<RocmPool> {
            match device_pinned(location, alloc) {
                Some(device) => Self::current_pool(device),
                None => Err(no_pool_by_location("the current pool of a location")),
            }
        }

        fn set_current_pool_at(location: RawLocation, alloc: RawAlloc, pool: RocmPool) -> Result<()> {
            match device_pinned(location, alloc) {
                Some(device) => Self::set_current_pool(device, pool),
                None => Err(no_pool_by_location("setting the current pool of a location")),
            }
        }

        fn pointer_info(ptr: *const c_void) -> Result<RawPointerInfo> {
            let api = api()?;
            let mut attr = sys::hipPointerAttribute_t::zeroed();
            // SAFETY: valid out-pointer of the struct's size (the same in
            // every ROCm); the runtime only looks the address up.
            let code = unsafe { (api.pointer_get_attributes)(&mut attr, ptr) };
            if code == sys::hipErrorInvalidValue && !cuda_memory_types(api.version) && !ptr.is_null() {
                // Before ROCm 6.0 an address the runtime does not know (plain
                // host memory) is an error, not "unregistered".
                return Ok(RawPointerInfo {
                    kind: MemoryType::Pageable,
                    device: -1,
                    device_pointer: false,
                    host_pointer: false,
                });
            }
            check("hipPointerGetAttributes", code)?;
            Ok(RawPointerInfo {
                kind: memory_type(api.version, &attr),
                device: attr.device,
                device_pointer: !attr.devicePointer.is_null(),
                host_pointer: !attr.hostPointer.is_null(),
            })
        }
    }
    test_support {
        fn module_load(image: &[u8]) -> Result<RocmModule> {
            if image.is_empty() {
                return Err(Error::invalid("an empty code object"));
            }
            let mut module: sys::hipModule_t = std::ptr::null_mut();
            // SAFETY: `image` is a complete code object (or bundle) that outlives
            // the call; the runtime copies what it keeps. It is loaded into the
            // current device, which the caller has set.
            check("hipModuleLoadData", unsafe {
                (api()?.module_load_data)(&mut module, image.as_ptr().cast())
            })?;
            Ok(RocmModule(module))
        }

        fn module_unload(module: RocmModule) -> Result<()> {
            // SAFETY: the caller owns the module and unloads it once.
            check("hipModuleUnload", unsafe { (api()?.module_unload)(module.0) })
        }

        fn module_function(module: RocmModule, name: &std::ffi::CStr) -> Result<RocmFunction> {
            let mut f: sys::hipFunction_t = std::ptr::null_mut();
            // SAFETY: valid out-pointer and NUL-terminated name.
            check("hipModuleGetFunction", unsafe {
                (api()?.module_get_function)(&mut f, module.0, name.as_ptr())
            })?;
            Ok(RocmFunction(f))
        }

        fn host_alloc(bytes: usize, portable: bool) -> Result<*mut c_void> {
            let flags = if portable { sys::hipHostMallocPortable } else { sys::hipHostMallocDefault };
            let mut p: *mut c_void = std::ptr::null_mut();
            // SAFETY: valid out-pointer; a documented flag.
            let code = unsafe { (api()?.host_malloc)(&mut p, bytes, flags) };
            check_alloc("hipHostMalloc", code, bytes)?;
            Ok(p)
        }

        fn malloc_host(bytes: usize) -> Result<*mut c_void> {
            Self::host_alloc(bytes, false)
        }

        unsafe fn host_free(ptr: *mut c_void) -> Result<()> {
            // SAFETY: the caller guarantees `ptr` is a live pinned host
            // allocation of this runtime, freed once.
            check("hipHostFree", unsafe { (api()?.host_free)(ptr) })
        }

        unsafe fn launch(
            function: RocmFunction,
            grid: u32,
            block: u32,
            stream: RocmStream,
            args: &mut [*mut c_void],
        ) -> Result<()> {
            // SAFETY: the function handle came from this backend; the caller
            // guarantees the argument list matches the kernel. No dynamic shared
            // memory and no `extra` launch parameters.
            check("hipModuleLaunchKernel", unsafe {
                (api()?.module_launch_kernel)(
                    function.0,
                    grid,
                    1,
                    1,
                    block,
                    1,
                    1,
                    0,
                    stream.0,
                    args.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            })
        }
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
