//! The CUDA backend: the CUDA runtime API (`libcudart`), loaded at run time.
//!
//! # Loading
//!
//! The library is opened with `libloading` on first use: `$SOMALLOC_CUDART`
//! alone if set, else `libcudart.so.13`, `libcudart.so.12` and `libcudart.so`.
//! The first one that opens is used. Its version (`cudaRuntimeGetVersion`)
//! is read before anything else; a major other than 12 or 13 is
//! [`Error::RuntimeNotFound`] with that reason, and so is a missing library or
//! a missing required function, never a panic. The version is kept, and the
//! few calls whose symbol or signature differs between CUDA 12 and 13 pick
//! theirs by it (see `sys.rs`). Every function is declared to return a plain
//! `i32`: a `cudaError_t` declared as a Rust enum (as in cudarc) would make a
//! code that a newer runtime adds an invalid enum value, which is undefined
//! behaviour; as an `i32` it is just data ([`VendorCode`](crate::VendorCode)).
//! A failed call leaves the runtime's last error (`cudaGetLastError`) as the
//! failed runtime call set it; somalloc does not reset it (see `common.rs`).
//!
//! # Bindings: hand-written, not generated, no cudarc
//!
//! The types and constants live in `sys.rs`: opaque handle pointers, the
//! four structs the backend passes (`cudaMemPoolProps`, `cudaMemLocation`,
//! `cudaMemAccessDesc`, `dim3`), and integer constants, with `const` layout
//! assertions checked against the CUDA 12.1 to 13.1 headers. So the crate
//! needs no CUDA installation to build, and it does not depend on cudarc's
//! version features: cudarc's `cuda-XXYY0` features unify across a whole
//! dependency graph, and a library that picked one would break every
//! application that picked another. One build runs on CUDA 12 and CUDA 13
//! runtimes alike.
//!
//! # Calls that differ between runtimes
//!
//! * `cudaGetDeviceProperties`: `_v2` on CUDA 12 (the plain symbol there is
//!   the CUDA 11 layout), the plain symbol on CUDA 13; the backend reads only
//!   the name, the first field in every layout, into room for any of them.
//! * `cudaStreamGetCaptureInfo`: `_v2` with 6 parameters on CUDA 12, the
//!   plain symbol with 7 (`edgeData`) on CUDA 13.
//! * `cudaMemPoolProps::maxSize` exists from CUDA 12.2; on 12.0/12.1 a
//!   non-zero `max_size` is [`Error::Unsupported`].
//! * The library API (`cudaLibraryLoadData`, used only to load the test
//!   kernels) exists from CUDA 12.8; before, loading a module is
//!   `Unsupported` while everything else works.
//! * Pools of pinned host memory: on a host NUMA node from CUDA 12.6, on the
//!   host without a node from CUDA 13.0; managed pools and the lookups of
//!   default and current pools by location (`cudaMemGetDefaultMemPool`,
//!   `cudaMemGetMemPool`, `cudaMemSetMemPool`) from CUDA 13.0. An older
//!   runtime answers [`Error::Unsupported`] naming itself (the table is
//!   `common::cuda_pool_refusal`'s).
//! * `cudaPointerAttributes` is 24 bytes on CUDA 12 and 88 on CUDA 13
//!   (`reserved[8]`); the backend passes room for the larger, zeroed.
//! * The virtual-memory API is the driver's (`cuMemCreate`, ...), found
//!   through the runtime like the capture queries below (`vmm.rs`).
//!
//! # What is written here and what is shared
//!
//! The functions both runtimes have, and the body of the `Backend` impl
//! that drives them alike, are written once in `backends/shared.rs`
//! (`shared_runtime_api!`, `backend_impl!`); this file holds the vendor's
//! name table, its own functions, and the hooks where the vendors differ.
//!
//! The file stays whole past 500 lines: this comment is a seventh of it, and
//! the `backend_impl!` call (about half) is one macro invocation whose vendor
//! hooks cannot be cut apart; the tests live in `tests.rs`.

#[path = "sys.rs"]
mod sys;
#[path = "vmm.rs"]
mod vmm;

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr};
use std::sync::OnceLock;

use super::common::{self, backend_impl, handle, ordinal, shared_runtime_api};
use crate::backend::MemoryType;
use crate::backend::{CaptureInfo, DevicePtr, RawAlloc, RawLocation, RawPointerInfo, RawPoolProps};
use crate::error::{Error, Result};

const BACKEND: crate::Vendor = crate::Vendor::Cuda;
const LIBRARY: &str = "libcudart";
/// `$SOMALLOC_CUDART` alone when set, else these, newest first.
const LIBRARY_ENV: &str = "SOMALLOC_CUDART";
const LIBRARY_NAMES: &[&str] = &["libcudart.so.13", "libcudart.so.12", "libcudart.so"];

shared_runtime_api! {
    prefix: "cuda", version: version,
    stream: sys::cudaStream_t, event: sys::cudaEvent_t, pool: sys::cudaMemPool_t,
    graph: sys::cudaGraph_t, exec: sys::cudaGraphExec_t, user_object: sys::cudaUserObject_t,
    host_fn: sys::cudaHostFn_t, location: sys::cudaMemLocation, access_desc: sys::cudaMemAccessDesc,
    pool_props: sys::cudaMemPoolProps,
    // Every CUDA 12 and 13 runtime has them; the CUDA 11 release that added
    // each is named for the shared body's sake.
    since: { graph_upload: "CUDA 11.1", graph_memory: "CUDA 11.4", user_objects: "CUDA 11.3" },
    required {
        fn get_device_properties = if version >= sys::CUDA_VERSION_13 {
            "cudaGetDeviceProperties\0"
        } else {
            "cudaGetDeviceProperties_v2\0"
        }; (*mut sys::cudaDevicePropStorage, c_int) -> i32;
        fn launch_kernel = "cudaLaunchKernel\0"; (
            *const c_void, sys::dim3, sys::dim3, *mut *mut c_void, usize, sys::cudaStream_t,
        ) -> i32;
        // Host memory: pointer attributes, and the pinned-host baselines.
        fn pointer_get_attributes = "cudaPointerGetAttributes\0"; (
            *mut sys::cudaPointerAttributesStorage, *const c_void,
        ) -> i32;
        fn host_alloc = "cudaHostAlloc\0"; (*mut *mut c_void, usize, c_uint) -> i32;
        fn malloc_host = "cudaMallocHost\0"; (*mut *mut c_void, usize) -> i32;
        fn free_host = "cudaFreeHost\0"; (*mut c_void) -> i32;
    }
    optional {
        // Default and current pools by location and allocation type.
        optional(since "CUDA 13.0") fn mem_get_default_mem_pool = "cudaMemGetDefaultMemPool\0"; (
            *mut sys::cudaMemPool_t, *mut sys::cudaMemLocation, sys::cudaMemAllocationType,
        ) -> i32;
        optional(since "CUDA 13.0") fn mem_get_mem_pool = "cudaMemGetMemPool\0"; (
            *mut sys::cudaMemPool_t, *mut sys::cudaMemLocation, sys::cudaMemAllocationType,
        ) -> i32;
        optional(since "CUDA 13.0") fn mem_set_mem_pool = "cudaMemSetMemPool\0"; (
            *mut sys::cudaMemLocation, sys::cudaMemAllocationType, sys::cudaMemPool_t,
        ) -> i32;
        // cudaStreamGetCaptureInfo: the headers of each major map the name
        // to a different symbol and signature (see sys.rs); exactly one is
        // loaded.
        optional(since "CUDA 11.3", if version < sys::CUDA_VERSION_13)
        fn stream_get_capture_info_v2 = "cudaStreamGetCaptureInfo_v2\0"; (
            sys::cudaStream_t, *mut sys::cudaStreamCaptureStatus, *mut u64, *mut sys::cudaGraph_t,
            *mut *const sys::cudaGraphNode_t, *mut usize,
        ) -> i32;
        optional(since "CUDA 13.0", if version >= sys::CUDA_VERSION_13)
        fn stream_get_capture_info = "cudaStreamGetCaptureInfo\0"; (
            sys::cudaStream_t, *mut sys::cudaStreamCaptureStatus, *mut u64, *mut sys::cudaGraph_t,
            *mut *const sys::cudaGraphNode_t, *mut *const sys::cudaGraphEdgeData, *mut usize,
        ) -> i32;
        // The driver's capture queries are found through these (see
        // `driver_capture`), so that somalloc never names libcuda.
        optional(since "CUDA 12.0") fn get_driver_entry_point = "cudaGetDriverEntryPoint\0"; (
            *const c_char, *mut *mut c_void, c_ulonglong, *mut sys::cudaDriverEntryPointQueryResult,
        ) -> i32;
        optional(since sys::CUDA_VERSION_DRIVER_BY_VERSION)
        fn get_driver_entry_point_by_version = "cudaGetDriverEntryPointByVersion\0"; (
            *const c_char, *mut *mut c_void, c_uint, c_ulonglong, *mut sys::cudaDriverEntryPointQueryResult,
        ) -> i32;
        // Only the test kernels are loaded this way; the JIT and library
        // option arrays are always null (their element types are C enums).
        optional(since sys::CUDA_LIBRARY_API) fn library_load_data = "cudaLibraryLoadData\0"; (
            *mut sys::cudaLibrary_t, *const c_void,
            *mut c_int, *mut *mut c_void, c_uint,
            *mut c_int, *mut *mut c_void, c_uint,
        ) -> i32;
        optional(since sys::CUDA_LIBRARY_API) fn library_unload = "cudaLibraryUnload\0"; (sys::cudaLibrary_t) -> i32;
        optional(since sys::CUDA_LIBRARY_API) fn library_get_kernel = "cudaLibraryGetKernel\0"; (
            *mut sys::cudaKernel_t, sys::cudaLibrary_t, *const c_char,
        ) -> i32;
    }
}

handle!(
    CudaStream = cudaStream_t,
    CudaEvent = cudaEvent_t,
    CudaPool = cudaMemPool_t,
    CudaGraph = cudaGraph_t,
    CudaGraphExec = cudaGraphExec_t,
);
// The test kit's code objects (feature `kernels`).
#[cfg(somalloc_kernels)]
handle!(CudaModule = cudaLibrary_t, CudaFunction = cudaKernel_t);

/// Why a runtime reporting `version` cannot be used, if it cannot.
fn unsupported_major(version: i32) -> Option<String> {
    let major = version / 1000;
    if (sys::CUDA_MAJOR_MIN..=sys::CUDA_MAJOR_MAX).contains(&major) {
        None
    } else {
        Some(format!(
            "it is {}, and somalloc has declarations for the CUDA {} and {} runtimes only",
            version_text(version),
            sys::CUDA_MAJOR_MIN,
            sys::CUDA_MAJOR_MAX
        ))
    }
}

fn api() -> Result<&'static Api> {
    static API: OnceLock<Result<Api>> = OnceLock::new();
    API.get_or_init(|| {
        let searched = common::library_candidates(LIBRARY_ENV, LIBRARY_NAMES);
        // SAFETY: the candidates are CUDA runtimes, whose
        // cudaRuntimeGetVersion is `int f(int*)`; a major other than 12 or
        // 13 is refused before anything else is loaded, and every
        // declaration above is the CUDA 12/13 signature of its symbol, the
        // symbols that differ between the two being picked by the version.
        unsafe {
            common::load_runtime(
                LIBRARY,
                searched,
                "cudaRuntimeGetVersion\0",
                unsupported_major,
                Api::load,
            )
        }
    })
    .as_ref()
    .map_err(Clone::clone)
}

fn version_text(version: i32) -> String {
    format!("CUDA {}.{}", version / 1000, (version % 1000) / 10)
}

fn unsupported(what: impl Into<String>) -> Error {
    Error::Unsupported {
        backend: BACKEND,
        what: what.into(),
    }
}

// The vendor hooks of the shared body (see `backends/shared.rs`): CUDA
// accepts 0-byte allocations and null frees, and records stream-ordered
// allocation inside a capture in every supported release.

#[inline(always)]
fn refuse_zero_bytes(_bytes: usize, _what: &str) -> Result<()> {
    Ok(())
}

#[inline(always)]
fn refuse_alloc_in_capture(_api: &Api, _call: &str, _stream: CudaStream) -> Result<()> {
    Ok(())
}

#[inline(always)]
fn free_is_noop(_ptr: DevicePtr) -> bool {
    false
}

// ---------------------------------------------------------------------------
// The driver's capture queries.

/// `cuStreamIsCapturing` and `cuStreamGetCaptureInfo` of the driver, for the
/// capture question somalloc asks on borrowed streams (see `Stream`'s docs):
/// the runtime's `cudaStreamIsCapturing` / `cudaStreamGetCaptureInfo` go
/// through a lock that every thread shares (on an H200: about 90 ns alone,
/// 700 to 1000 ns each with 8 threads asking about their own streams); the
/// driver's do not (about 25 ns, the same with 8 threads).
///
/// Found once, through the loaded runtime, so that somalloc never loads or
/// names libcuda itself: `cudaGetDriverEntryPointByVersion` (CUDA 12.5+)
/// gives each at the CUDA 12.0 ABI, the one the types in `sys.rs` declare;
/// an older runtime's `cudaGetDriverEntryPoint` gives the ABI of the
/// runtime's own version, which is the same for `cuStreamIsCapturing` but
/// not for `cuStreamGetCaptureInfo` (12.3 added a parameter), so there only
/// the first is taken. What is not found is asked of the runtime, as is
/// every question the driver answers with an error (the runtime then
/// reports it with its own code, and makes the device's primary context
/// current on the thread, which a driver call without one lacks).
struct DriverCapture {
    is_capturing: sys::PFN_cuStreamIsCapturing_v10000,
    get_capture_info: sys::PFN_cuStreamGetCaptureInfo_v11030,
}

fn driver_capture() -> &'static DriverCapture {
    static DRIVER: OnceLock<DriverCapture> = OnceLock::new();
    DRIVER.get_or_init(|| {
        let Ok(api) = api() else {
            return DriverCapture {
                is_capturing: None,
                get_capture_info: None,
            };
        };
        // SAFETY: each symbol is asked for at an ABI whose signature the
        // type it is read as declares: `cuStreamIsCapturing` has one ABI
        // (10000) in every version; `cuStreamGetCaptureInfo` only by version
        // 12000, which is the `_v11030` ABI.
        unsafe {
            DriverCapture {
                is_capturing: driver_entry_point(api, c"cuStreamIsCapturing", true)
                    .map(|f| std::mem::transmute::<*mut c_void, unsafe extern "C" fn(_, _) -> i32>(f)),
                get_capture_info: driver_entry_point(api, c"cuStreamGetCaptureInfo", false).map(|f| {
                    std::mem::transmute::<*mut c_void, unsafe extern "C" fn(_, _, _, _, _, _) -> i32>(f)
                }),
            }
        }
    })
}

/// The driver's entry point of `symbol` at [`sys::DRIVER_ABI_VERSION`]
/// (`cudaGetDriverEntryPointByVersion`); with `any_version`, on a runtime
/// without that call, the one `cudaGetDriverEntryPoint` gives (the ABI of
/// the runtime's own version). Legacy-stream entry points (see
/// [`sys::cudaEnableLegacyStream`]).
///
/// # Safety
/// With `any_version`, the caller reads the result as a type that is right
/// for every ABI version of `symbol` since CUDA 12.0.
unsafe fn driver_entry_point(api: &Api, symbol: &CStr, any_version: bool) -> Option<*mut c_void> {
    let mut f: *mut c_void = std::ptr::null_mut();
    let mut found: sys::cudaDriverEntryPointQueryResult = -1;
    let code = match api.get_driver_entry_point_by_version.get::<CudaCodes>() {
        // SAFETY: a NUL-terminated name and valid out-pointers; the runtime
        // only writes them.
        Ok(by_version) => unsafe {
            by_version(
                symbol.as_ptr(),
                &mut f,
                sys::DRIVER_ABI_VERSION,
                sys::cudaEnableLegacyStream,
                &mut found,
            )
        },
        Err(_) if any_version => match api.get_driver_entry_point.get::<CudaCodes>() {
            // SAFETY: as above.
            Ok(get) => unsafe { get(symbol.as_ptr(), &mut f, sys::cudaEnableLegacyStream, &mut found) },
            Err(_) => return None,
        },
        Err(_) => return None,
    };
    (code == sys::cudaSuccess && found == sys::cudaDriverEntryPointSuccess && !f.is_null()).then_some(f)
}

/// `cudaMemPoolProps::maxSize` is read from CUDA 12.2 on.
const POOL_MAX_SIZE_SINCE: &str = "CUDA 12.2";

fn pool_max_size_supported(version: i32) -> bool {
    version >= sys::CUDA_VERSION_POOL_MAX_SIZE
}

// ---------------------------------------------------------------------------
// Pool locations, allocation types and host memory.

const _: () = {
    assert!(sys::cudaMemLocationTypeInvalid == common::LOCATION_NONE);
    assert!(sys::cudaMemLocationTypeHost == common::LOCATION_HOST);
    assert!(sys::cudaMemLocationTypeHostNuma == common::LOCATION_HOST_NUMA);
    assert!(sys::cudaMemAllocationTypeManaged == common::ALLOC_MANAGED);
};

/// The locations and allocation types the loaded runtime's pools take (the
/// version table is `common::cuda_pool_refusal`'s).
fn refuse_pool_placement(version: i32, props: &RawPoolProps) -> Result<()> {
    match common::cuda_pool_refusal(version, props.location, props.alloc, &version_text(version)) {
        Some(why) => Err(unsupported(why)),
        None => Ok(()),
    }
}

fn mem_location(location: RawLocation) -> sys::cudaMemLocation {
    let (type_, id) = common::location_parts(location);
    sys::cudaMemLocation { type_, id }
}

/// The device ordinal of a device location, for the classic per-device calls.
fn device_pinned(location: RawLocation, alloc: RawAlloc) -> Option<usize> {
    match (location, alloc) {
        (RawLocation::Device(id), RawAlloc::Pinned) => usize::try_from(id).ok(),
        _ => None,
    }
}

/// `cudaPointerAttributes::type` as somalloc's memory type.
fn memory_type(raw: c_int) -> MemoryType {
    match raw {
        sys::cudaMemoryTypeUnregistered => MemoryType::Pageable,
        sys::cudaMemoryTypeHost => MemoryType::PinnedHost,
        sys::cudaMemoryTypeDevice => MemoryType::Device,
        sys::cudaMemoryTypeManaged => MemoryType::Managed,
        other => MemoryType::Other(other),
    }
}

/// The CUDA backend.
#[derive(Debug)]
pub(crate) struct Cuda;

backend_impl! {
    backend: Cuda, codes: CudaCodes, prefix: "cuda",
    stream: CudaStream = sys::cudaStream_t,
    event: CudaEvent = sys::cudaEvent_t,
    pool: CudaPool = sys::cudaMemPool_t,
    module: CudaModule,
    function: CudaFunction,
    graph: CudaGraph = sys::cudaGraph_t,
    exec: CudaGraphExec = sys::cudaGraphExec_t,
    user_object: sys::cudaUserObject_t,
    mem_location: sys::cudaMemLocation,
    mem_access_desc: sys::cudaMemAccessDesc,
    mem_pool_props: sys::cudaMemPoolProps,
    constants: {
        success: sys::cudaSuccess,
        out_of_memory: sys::cudaErrorMemoryAllocation,
        insufficient_driver: sys::cudaErrorInsufficientDriver,
        no_device: sys::cudaErrorNoDevice,
        not_supported: sys::cudaErrorNotSupported,
        stream_non_blocking: sys::cudaStreamNonBlocking,
        event_disable_timing: sys::cudaEventDisableTiming,
        pools_supported: sys::cudaDevAttrMemoryPoolsSupported,
        memcpy_default: sys::cudaMemcpyDefault,
        location_device: sys::cudaMemLocationTypeDevice,
        alloc_pinned: sys::cudaMemAllocationTypePinned,
        handle_none: sys::cudaMemHandleTypeNone,
        handle_fd: sys::cudaMemHandleTypePosixFileDescriptor,
        pool_attrs: [
            sys::cudaMemPoolReuseFollowEventDependencies,
            sys::cudaMemPoolReuseAllowOpportunistic,
            sys::cudaMemPoolReuseAllowInternalDependencies,
            sys::cudaMemPoolAttrReleaseThreshold,
            sys::cudaMemPoolAttrReservedMemCurrent,
            sys::cudaMemPoolAttrReservedMemHigh,
            sys::cudaMemPoolAttrUsedMemCurrent,
            sys::cudaMemPoolAttrUsedMemHigh,
        ],
        capture_status: [
            sys::cudaStreamCaptureStatusNone,
            sys::cudaStreamCaptureStatusActive,
            sys::cudaStreamCaptureStatusInvalidated,
        ],
        capture_mode: [
            sys::cudaStreamCaptureModeGlobal,
            sys::cudaStreamCaptureModeThreadLocal,
            sys::cudaStreamCaptureModeRelaxed,
        ],
        graph_mem_attrs: [
            sys::cudaGraphMemAttrUsedMemCurrent,
            sys::cudaGraphMemAttrUsedMemHigh,
            sys::cudaGraphMemAttrReservedMemCurrent,
            sys::cudaGraphMemAttrReservedMemHigh,
        ],
        auto_free_on_launch: sys::cudaGraphInstantiateFlagAutoFreeOnLaunch,
        user_object_no_sync: sys::cudaUserObjectNoDestructorSync,
        user_object_move: sys::cudaGraphUserObjectMove,
    },
    specific {
        fn device_name(device: usize) -> Result<String> {
            // Room for the runtime's whole cudaDeviceProp (see sys.rs); only
            // the name, at offset 0 in every layout, is read.
            let mut props = Box::new(sys::cudaDevicePropStorage::zeroed());
            // SAFETY: the symbol was picked for the loaded runtime's major
            // (`_v2` on 12, plain on 13) and the storage is larger than that
            // major's struct.
            check("cudaGetDeviceProperties", unsafe {
                (api()?.get_device_properties)(&mut *props, ordinal(device)?)
            })?;
            let len = props
                .name
                .iter()
                .position(|&c| c == 0)
                .unwrap_or(props.name.len());
            Ok(String::from_utf8_lossy(&props.name[..len]).into_owned())
        }

        fn stream_capture_status(stream: CudaStream) -> Result<crate::backend::CaptureStatus> {
            if let Some(is_capturing) = driver_capture().is_capturing {
                let mut status = sys::CU_STREAM_CAPTURE_STATUS_NONE;
                // SAFETY: the driver's entry point of this signature (see
                // `driver_capture`); a valid out-pointer; the driver
                // validates the stream.
                if unsafe { is_capturing(stream.0, &mut status) } == sys::CUDA_SUCCESS {
                    return common::capture_status::<CudaCodes>("cuStreamIsCapturing", status);
                }
            }
            let mut status = sys::cudaStreamCaptureStatusNone;
            // SAFETY: valid out-pointer; the runtime validates the stream.
            check("cudaStreamIsCapturing", unsafe {
                (api()?.stream_is_capturing)(stream.0, &mut status)
            })?;
            common::capture_status::<CudaCodes>("cudaStreamIsCapturing", status)
        }

        fn stream_capture_info(stream: CudaStream) -> Result<CaptureInfo<CudaGraph>> {
            let mut status = sys::cudaStreamCaptureStatusNone;
            let mut id = 0u64;
            let mut graph: sys::cudaGraph_t = std::ptr::null_mut();
            if let Some(get) = driver_capture().get_capture_info {
                // SAFETY: the driver's entry point of this signature (see
                // `driver_capture`); valid out-pointers for status, id and
                // graph; the dependency outputs are not asked for (null).
                let code = unsafe {
                    get(
                        stream.0,
                        &mut status,
                        &mut id,
                        &mut graph,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    )
                };
                if code == sys::CUDA_SUCCESS {
                    let status = common::capture_status::<CudaCodes>("cuStreamGetCaptureInfo", status)?;
                    return Ok(common::capture_info(status, id, graph, CudaGraph));
                }
            }
            let api = api()?;
            let code = if api.version >= sys::CUDA_VERSION_13 {
                let get = api.stream_get_capture_info.get::<CudaCodes>()?;
                // SAFETY: CUDA 13's 7-parameter signature; valid out-pointers
                // for status, id and graph; the dependency, edge-data and count
                // outputs are not asked for (null).
                unsafe {
                    get(
                        stream.0,
                        &mut status,
                        &mut id,
                        &mut graph,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    )
                }
            } else {
                let get = api.stream_get_capture_info_v2.get::<CudaCodes>()?;
                // SAFETY: CUDA 12's 6-parameter `_v2`; as above.
                unsafe {
                    get(
                        stream.0,
                        &mut status,
                        &mut id,
                        &mut graph,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    )
                }
            };
            check("cudaStreamGetCaptureInfo", code)?;
            let status = common::capture_status::<CudaCodes>("cudaStreamGetCaptureInfo", status)?;
            Ok(common::capture_info(status, id, graph, CudaGraph))
        }


        // -------------------------------------------------------------------
        // Pool locations, allocation types and host memory.

        fn default_pool_at(location: RawLocation, alloc: RawAlloc) -> Result<CudaPool> {
            if let Some(device) = device_pinned(location, alloc) {
                return Self::default_pool(device);
            }
            let get = api()?.mem_get_default_mem_pool.get::<CudaCodes>()?;
            let mut loc = mem_location(location);
            let mut pool: sys::cudaMemPool_t = std::ptr::null_mut();
            // SAFETY: valid out-pointer and location; the runtime validates
            // the location and type.
            check("cudaMemGetDefaultMemPool", unsafe {
                get(&mut pool, &mut loc, common::alloc_type(alloc))
            })?;
            Ok(CudaPool(pool))
        }

        fn current_pool_at(location: RawLocation, alloc: RawAlloc) -> Result<CudaPool> {
            if let Some(device) = device_pinned(location, alloc) {
                return Self::current_pool(device);
            }
            let get = api()?.mem_get_mem_pool.get::<CudaCodes>()?;
            let mut loc = mem_location(location);
            let mut pool: sys::cudaMemPool_t = std::ptr::null_mut();
            // SAFETY: as above.
            check("cudaMemGetMemPool", unsafe { get(&mut pool, &mut loc, common::alloc_type(alloc)) })?;
            Ok(CudaPool(pool))
        }

        fn set_current_pool_at(location: RawLocation, alloc: RawAlloc, pool: CudaPool) -> Result<()> {
            if let Some(device) = device_pinned(location, alloc) {
                return Self::set_current_pool(device, pool);
            }
            let set = api()?.mem_set_mem_pool.get::<CudaCodes>()?;
            let mut loc = mem_location(location);
            // SAFETY: valid location; a pool handle of this backend; the
            // runtime checks that the pool's location and type match.
            check("cudaMemSetMemPool", unsafe { set(&mut loc, common::alloc_type(alloc), pool.0) })
        }

        fn pointer_info(ptr: *const c_void) -> Result<RawPointerInfo> {
            // Room for the CUDA 13 struct, zeroed (a CUDA 12 runtime writes
            // the first 24 bytes).
            let mut attr = sys::cudaPointerAttributesStorage::zeroed();
            // SAFETY: valid, large enough out-pointer; the runtime only
            // looks the address up, it does not access the memory.
            check("cudaPointerGetAttributes", unsafe {
                (api()?.pointer_get_attributes)(&mut attr, ptr)
            })?;
            Ok(RawPointerInfo {
                kind: memory_type(attr.type_),
                device: attr.device,
                device_pointer: !attr.devicePointer.is_null(),
                host_pointer: !attr.hostPointer.is_null(),
            })
        }
    }
    test_support {
        fn module_load(image: &[u8]) -> Result<CudaModule> {
            let load = api()?.library_load_data.get::<CudaCodes>()?;
            let mut lib: sys::cudaLibrary_t = std::ptr::null_mut();
            // SAFETY: `image` is a complete fatbin/cubin/PTX image that outlives
            // the call (the runtime copies what it keeps); no JIT or library
            // options are passed.
            check("cudaLibraryLoadData", unsafe {
                load(
                    &mut lib,
                    image.as_ptr().cast(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                )
            })?;
            Ok(CudaModule(lib))
        }

        fn module_unload(module: CudaModule) -> Result<()> {
            // SAFETY: the caller owns the module and unloads it once.
            let unload = api()?.library_unload.get::<CudaCodes>()?;
            // SAFETY: the caller owns the module and unloads it once.
            check("cudaLibraryUnload", unsafe { unload(module.0) })
        }

        fn module_function(module: CudaModule, name: &std::ffi::CStr) -> Result<CudaFunction> {
            let get_kernel = api()?.library_get_kernel.get::<CudaCodes>()?;
            let mut k: sys::cudaKernel_t = std::ptr::null_mut();
            // SAFETY: valid out-pointer and NUL-terminated name.
            check("cudaLibraryGetKernel", unsafe {
                get_kernel(&mut k, module.0, name.as_ptr())
            })?;
            Ok(CudaFunction(k))
        }

        fn host_alloc(bytes: usize, portable: bool) -> Result<*mut c_void> {
            let flags = if portable { sys::cudaHostAllocPortable } else { sys::cudaHostAllocDefault };
            let mut p: *mut c_void = std::ptr::null_mut();
            // SAFETY: valid out-pointer; a documented flag.
            let code = unsafe { (api()?.host_alloc)(&mut p, bytes, flags) };
            check_alloc("cudaHostAlloc", code, bytes)?;
            Ok(p)
        }

        fn malloc_host(bytes: usize) -> Result<*mut c_void> {
            let mut p: *mut c_void = std::ptr::null_mut();
            // SAFETY: valid out-pointer.
            let code = unsafe { (api()?.malloc_host)(&mut p, bytes) };
            check_alloc("cudaMallocHost", code, bytes)?;
            Ok(p)
        }

        unsafe fn host_free(ptr: *mut c_void) -> Result<()> {
            // SAFETY: the caller guarantees `ptr` is a live pinned host
            // allocation of this runtime, freed once.
            check("cudaFreeHost", unsafe { (api()?.free_host)(ptr) })
        }

        unsafe fn launch(
            function: CudaFunction,
            grid: u32,
            block: u32,
            stream: CudaStream,
            args: &mut [*mut c_void],
        ) -> Result<()> {
            let grid = sys::dim3 { x: grid, y: 1, z: 1 };
            let block = sys::dim3 { x: block, y: 1, z: 1 };
            // SAFETY: a cudaKernel_t may stand in for the function symbol; the
            // caller guarantees the argument list matches the kernel.
            check("cudaLaunchKernel", unsafe {
                (api()?.launch_kernel)(
                    function.0 as *const c_void,
                    grid,
                    block,
                    args.as_mut_ptr(),
                    0,
                    stream.0,
                )
            })
        }
    }
}

#[cfg(test)]
mod tests;
