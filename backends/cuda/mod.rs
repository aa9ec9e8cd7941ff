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

#[path = "sys.rs"]
mod sys;

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

use super::common::{self, c_str, handle, ordinal, runtime_api, Codes, CurrentDevice, DeviceGuard};
use crate::backend::{
    Backend, CaptureInfo, CaptureStatus, DevicePtr, GraphMemAttr, GraphRelease, PoolAttr, RawCaptureMode,
    RawPoolProps,
};
use crate::error::{Error, Result};

const BACKEND: &str = "cuda";
const LIBRARY: &str = "libcudart";

runtime_api! {
    version: version;
    fn get_error_name = "cudaGetErrorName\0"; (i32) -> *const c_char;
    fn get_error_string = "cudaGetErrorString\0"; (i32) -> *const c_char;
    fn runtime_get_version = "cudaRuntimeGetVersion\0"; (*mut c_int) -> i32;
    fn get_device_count = "cudaGetDeviceCount\0"; (*mut c_int) -> i32;
    fn set_device = "cudaSetDevice\0"; (c_int) -> i32;
    fn get_device = "cudaGetDevice\0"; (*mut c_int) -> i32;
    fn get_device_properties = if version >= sys::CUDA_VERSION_13 {
        "cudaGetDeviceProperties\0"
    } else {
        "cudaGetDeviceProperties_v2\0"
    }; (*mut sys::cudaDevicePropStorage, c_int) -> i32;
    fn device_get_attribute = "cudaDeviceGetAttribute\0"; (*mut c_int, sys::cudaDeviceAttr, c_int) -> i32;
    fn mem_get_info = "cudaMemGetInfo\0"; (*mut usize, *mut usize) -> i32;
    fn stream_create_with_flags = "cudaStreamCreateWithFlags\0"; (*mut sys::cudaStream_t, c_uint) -> i32;
    fn stream_destroy = "cudaStreamDestroy\0"; (sys::cudaStream_t) -> i32;
    fn stream_synchronize = "cudaStreamSynchronize\0"; (sys::cudaStream_t) -> i32;
    fn stream_wait_event = "cudaStreamWaitEvent\0"; (sys::cudaStream_t, sys::cudaEvent_t, c_uint) -> i32;
    fn event_create_with_flags = "cudaEventCreateWithFlags\0"; (*mut sys::cudaEvent_t, c_uint) -> i32;
    fn event_destroy = "cudaEventDestroy\0"; (sys::cudaEvent_t) -> i32;
    fn event_record = "cudaEventRecord\0"; (sys::cudaEvent_t, sys::cudaStream_t) -> i32;
    fn event_synchronize = "cudaEventSynchronize\0"; (sys::cudaEvent_t) -> i32;
    fn event_elapsed_time = "cudaEventElapsedTime\0"; (*mut f32, sys::cudaEvent_t, sys::cudaEvent_t) -> i32;
    fn device_get_default_mem_pool = "cudaDeviceGetDefaultMemPool\0"; (*mut sys::cudaMemPool_t, c_int) -> i32;
    fn device_get_mem_pool = "cudaDeviceGetMemPool\0"; (*mut sys::cudaMemPool_t, c_int) -> i32;
    fn device_set_mem_pool = "cudaDeviceSetMemPool\0"; (c_int, sys::cudaMemPool_t) -> i32;
    fn mem_pool_create = "cudaMemPoolCreate\0"; (*mut sys::cudaMemPool_t, *const sys::cudaMemPoolProps) -> i32;
    fn mem_pool_destroy = "cudaMemPoolDestroy\0"; (sys::cudaMemPool_t) -> i32;
    fn mem_pool_set_attribute = "cudaMemPoolSetAttribute\0"; (sys::cudaMemPool_t, sys::cudaMemPoolAttr, *mut c_void) -> i32;
    fn mem_pool_get_attribute = "cudaMemPoolGetAttribute\0"; (sys::cudaMemPool_t, sys::cudaMemPoolAttr, *mut c_void) -> i32;
    fn mem_pool_trim_to = "cudaMemPoolTrimTo\0"; (sys::cudaMemPool_t, usize) -> i32;
    fn device_can_access_peer = "cudaDeviceCanAccessPeer\0"; (*mut c_int, c_int, c_int) -> i32;
    fn mem_pool_set_access = "cudaMemPoolSetAccess\0"; (sys::cudaMemPool_t, *const sys::cudaMemAccessDesc, usize) -> i32;
    // The flags out-parameter is written by the runtime: a plain integer
    // here, so an unexpected value is data, not an invalid enum.
    fn mem_pool_get_access = "cudaMemPoolGetAccess\0"; (*mut c_uint, sys::cudaMemPool_t, *mut sys::cudaMemLocation) -> i32;
    fn mem_pool_export_to_shareable_handle = "cudaMemPoolExportToShareableHandle\0"; (
        *mut c_void, sys::cudaMemPool_t, sys::cudaMemAllocationHandleType, c_uint,
    ) -> i32;
    fn mem_pool_import_from_shareable_handle = "cudaMemPoolImportFromShareableHandle\0"; (
        *mut sys::cudaMemPool_t, *mut c_void, sys::cudaMemAllocationHandleType, c_uint,
    ) -> i32;
    fn mem_pool_export_pointer = "cudaMemPoolExportPointer\0"; (*mut sys::cudaMemPoolPtrExportData, *mut c_void) -> i32;
    fn mem_pool_import_pointer = "cudaMemPoolImportPointer\0"; (
        *mut *mut c_void, sys::cudaMemPool_t, *mut sys::cudaMemPoolPtrExportData,
    ) -> i32;
    fn malloc_async = "cudaMallocAsync\0"; (*mut *mut c_void, usize, sys::cudaStream_t) -> i32;
    fn malloc_from_pool_async = "cudaMallocFromPoolAsync\0"; (
        *mut *mut c_void, usize, sys::cudaMemPool_t, sys::cudaStream_t,
    ) -> i32;
    fn free_async = "cudaFreeAsync\0"; (*mut c_void, sys::cudaStream_t) -> i32;
    fn malloc = "cudaMalloc\0"; (*mut *mut c_void, usize) -> i32;
    fn free = "cudaFree\0"; (*mut c_void) -> i32;
    fn memcpy_async = "cudaMemcpyAsync\0"; (
        *mut c_void, *const c_void, usize, sys::cudaMemcpyKind, sys::cudaStream_t,
    ) -> i32;
    fn memset_async = "cudaMemsetAsync\0"; (*mut c_void, c_int, usize, sys::cudaStream_t) -> i32;
    fn launch_kernel = "cudaLaunchKernel\0"; (
        *const c_void, sys::dim3, sys::dim3, *mut *mut c_void, usize, sys::cudaStream_t,
    ) -> i32;
    fn stream_is_capturing = "cudaStreamIsCapturing\0"; (sys::cudaStream_t, *mut sys::cudaStreamCaptureStatus) -> i32;
    fn stream_begin_capture = "cudaStreamBeginCapture\0"; (sys::cudaStream_t, sys::cudaStreamCaptureMode) -> i32;
    fn stream_end_capture = "cudaStreamEndCapture\0"; (sys::cudaStream_t, *mut sys::cudaGraph_t) -> i32;
    fn graph_destroy = "cudaGraphDestroy\0"; (sys::cudaGraph_t) -> i32;
    fn graph_instantiate_with_flags = "cudaGraphInstantiateWithFlags\0"; (
        *mut sys::cudaGraphExec_t, sys::cudaGraph_t, u64,
    ) -> i32;
    fn graph_exec_destroy = "cudaGraphExecDestroy\0"; (sys::cudaGraphExec_t) -> i32;
    fn graph_launch = "cudaGraphLaunch\0"; (sys::cudaGraphExec_t, sys::cudaStream_t) -> i32;
    fn graph_upload = "cudaGraphUpload\0"; (sys::cudaGraphExec_t, sys::cudaStream_t) -> i32;
    fn device_get_graph_mem_attribute = "cudaDeviceGetGraphMemAttribute\0"; (
        c_int, sys::cudaGraphMemAttributeType, *mut c_void,
    ) -> i32;
    fn device_graph_mem_trim = "cudaDeviceGraphMemTrim\0"; (c_int) -> i32;
    fn user_object_create = "cudaUserObjectCreate\0"; (
        *mut sys::cudaUserObject_t, *mut c_void, sys::cudaHostFn_t, c_uint, c_uint,
    ) -> i32;
    fn graph_retain_user_object = "cudaGraphRetainUserObject\0"; (
        sys::cudaGraph_t, sys::cudaUserObject_t, c_uint, c_uint,
    ) -> i32;
    // cudaStreamGetCaptureInfo: the headers of each major map the name to a
    // different symbol and signature (see sys.rs); exactly one is loaded.
    optional fn stream_get_capture_info_v2 = "cudaStreamGetCaptureInfo_v2\0" since "CUDA 11.3"
        if version < sys::CUDA_VERSION_13; (
        sys::cudaStream_t, *mut sys::cudaStreamCaptureStatus, *mut u64, *mut sys::cudaGraph_t,
        *mut *const sys::cudaGraphNode_t, *mut usize,
    ) -> i32;
    optional fn stream_get_capture_info = "cudaStreamGetCaptureInfo\0" since "CUDA 13.0"
        if version >= sys::CUDA_VERSION_13; (
        sys::cudaStream_t, *mut sys::cudaStreamCaptureStatus, *mut u64, *mut sys::cudaGraph_t,
        *mut *const sys::cudaGraphNode_t, *mut *const sys::cudaGraphEdgeData, *mut usize,
    ) -> i32;
    // Only the test kernels are loaded this way; the JIT and library option
    // arrays are always null (their element types are C enums).
    optional fn library_load_data = "cudaLibraryLoadData\0" since "CUDA 12.8"; (
        *mut sys::cudaLibrary_t, *const c_void,
        *mut c_int, *mut *mut c_void, c_uint,
        *mut c_int, *mut *mut c_void, c_uint,
    ) -> i32;
    optional fn library_unload = "cudaLibraryUnload\0" since "CUDA 12.8"; (sys::cudaLibrary_t) -> i32;
    optional fn library_get_kernel = "cudaLibraryGetKernel\0" since "CUDA 12.8"; (
        *mut sys::cudaKernel_t, sys::cudaLibrary_t, *const c_char,
    ) -> i32;
}

fn device_location(device: usize) -> Result<sys::cudaMemLocation> {
    Ok(sys::cudaMemLocation {
        type_: sys::cudaMemLocationTypeDevice,
        id: ordinal(device)?,
    })
}

/// `$SOMALLOC_CUDART` alone when it is set (so a deployment, or a test, can
/// pin the exact library), else the CUDA 13 and 12 runtimes.
fn library_candidates() -> Vec<String> {
    match std::env::var("SOMALLOC_CUDART") {
        Ok(explicit) if !explicit.is_empty() => vec![explicit],
        _ => ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
            .iter()
            .map(|n| n.to_string())
            .collect(),
    }
}

/// Why a runtime reporting `version` cannot be used, if it cannot.
fn unsupported_major(version: i32) -> Option<String> {
    let major = version / 1000;
    if (sys::CUDA_MAJOR_MIN..=sys::CUDA_MAJOR_MAX).contains(&major) {
        None
    } else {
        Some(format!(
            "it is {}, and somalloc has declarations for the CUDA {} and {} runtimes only",
            CudaCodes::version_text(version),
            sys::CUDA_MAJOR_MIN,
            sys::CUDA_MAJOR_MAX
        ))
    }
}

fn load_api() -> Result<Api> {
    let searched = library_candidates();
    let not_found = |reason: String| Error::RuntimeNotFound {
        library: LIBRARY,
        searched: searched.clone(),
        reason,
    };
    let mut failures = Vec::new();
    for name in &searched {
        // SAFETY: loading libcudart runs its initialisers, which have no
        // preconditions on the caller.
        match unsafe { libloading::Library::new(name) } {
            // The first library that opens is the one used: one of another
            // major or without a required function is an error, not a
            // reason to fall back to another runtime.
            Ok(lib) => {
                // SAFETY: a library found under these names is a CUDA
                // runtime, whose cudaRuntimeGetVersion is `int f(int*)`.
                let version = unsafe { common::library_version(&lib, "cudaRuntimeGetVersion\0") }
                    .map_err(|e| not_found(format!("{name}: {e}")))?;
                if let Some(why) = unsupported_major(version) {
                    return Err(not_found(format!("{name}: {why}")));
                }
                // SAFETY: `version` is this library's own; every declaration
                // above is the CUDA 12/13 signature of its symbol, and the
                // symbols that differ between the two are picked by it.
                return unsafe { Api::load(lib, version) }.map_err(|e| not_found(format!("{name}: {e}")));
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    Err(not_found(if failures.is_empty() {
        "no candidate".to_string()
    } else {
        failures.join("; ")
    }))
}

fn api() -> Result<&'static Api> {
    static API: OnceLock<std::result::Result<Api, Error>> = OnceLock::new();
    API.get_or_init(load_api).as_ref().map_err(Clone::clone)
}

// The codes with their own `Error` variant, as the shared mapping in
// `common` numbers them.
const _: () = {
    assert!(sys::cudaSuccess == common::SUCCESS);
    assert!(sys::cudaErrorMemoryAllocation == common::ERROR_OUT_OF_MEMORY);
    assert!(sys::cudaErrorInsufficientDriver == common::ERROR_INSUFFICIENT_DRIVER);
    assert!(sys::cudaErrorNoDevice == common::ERROR_NO_DEVICE);
    assert!(sys::cudaErrorNotSupported == common::ERROR_NOT_SUPPORTED);
    assert!(sys::cudaStreamCaptureStatusNone == common::CAPTURE_STATUS_NONE);
    assert!(sys::cudaStreamCaptureStatusActive == common::CAPTURE_STATUS_ACTIVE);
    assert!(sys::cudaStreamCaptureStatusInvalidated == common::CAPTURE_STATUS_INVALIDATED);
    assert!(sys::cudaStreamCaptureModeGlobal == common::CAPTURE_MODE_GLOBAL);
    assert!(sys::cudaStreamCaptureModeThreadLocal == common::CAPTURE_MODE_THREAD_LOCAL);
    assert!(sys::cudaStreamCaptureModeRelaxed == common::CAPTURE_MODE_RELAXED);
    assert!(sys::cudaGraphMemAttrUsedMemCurrent == common::GRAPH_MEM_USED_CURRENT);
    assert!(sys::cudaGraphMemAttrUsedMemHigh == common::GRAPH_MEM_USED_HIGH);
    assert!(sys::cudaGraphMemAttrReservedMemCurrent == common::GRAPH_MEM_RESERVED_CURRENT);
    assert!(sys::cudaGraphMemAttrReservedMemHigh == common::GRAPH_MEM_RESERVED_HIGH);
};

fn unsupported(what: impl Into<String>) -> Error {
    Error::Unsupported {
        backend: BACKEND,
        what: what.into(),
    }
}

/// Error texts of the CUDA runtime.
struct CudaCodes;

impl Codes for CudaCodes {
    const BACKEND: &'static str = BACKEND;

    fn version_text(version: i32) -> String {
        format!("CUDA {}.{}", version / 1000, (version % 1000) / 10)
    }

    fn texts(code: i32) -> (String, String) {
        match api() {
            // SAFETY: both functions accept any code and return a static
            // string (or an "unrecognized error code" string).
            Ok(a) => unsafe { (c_str((a.get_error_name)(code)), c_str((a.get_error_string)(code))) },
            Err(_) => (String::new(), String::new()),
        }
    }
}

#[inline]
fn check(call: &'static str, code: i32) -> Result<()> {
    common::check::<CudaCodes>(call, code)
}

#[inline]
fn check_alloc(call: &'static str, code: i32, bytes: usize) -> Result<()> {
    common::check_alloc::<CudaCodes>(call, code, bytes)
}

handle!(
    /// `cudaStream_t`.
    CudaStream,
    sys::cudaStream_t
);
handle!(
    /// `cudaEvent_t`.
    CudaEvent,
    sys::cudaEvent_t
);
handle!(
    /// `cudaMemPool_t`.
    CudaPool,
    sys::cudaMemPool_t
);
handle!(
    /// `cudaLibrary_t`.
    CudaModule,
    sys::cudaLibrary_t
);
handle!(
    /// `cudaKernel_t`.
    CudaFunction,
    sys::cudaKernel_t
);

fn attr(a: PoolAttr) -> sys::cudaMemPoolAttr {
    match a {
        PoolAttr::ReuseFollowEventDependencies => sys::cudaMemPoolReuseFollowEventDependencies,
        PoolAttr::ReuseAllowOpportunistic => sys::cudaMemPoolReuseAllowOpportunistic,
        PoolAttr::ReuseAllowInternalDependencies => sys::cudaMemPoolReuseAllowInternalDependencies,
        PoolAttr::ReleaseThreshold => sys::cudaMemPoolAttrReleaseThreshold,
        PoolAttr::ReservedMemCurrent => sys::cudaMemPoolAttrReservedMemCurrent,
        PoolAttr::ReservedMemHigh => sys::cudaMemPoolAttrReservedMemHigh,
        PoolAttr::UsedMemCurrent => sys::cudaMemPoolAttrUsedMemCurrent,
        PoolAttr::UsedMemHigh => sys::cudaMemPoolAttrUsedMemHigh,
    }
}

handle!(
    /// `cudaGraph_t`.
    CudaGraph,
    sys::cudaGraph_t
);
handle!(
    /// `cudaGraphExec_t`.
    CudaGraphExec,
    sys::cudaGraphExec_t
);

/// The CUDA backend.
#[derive(Debug)]
pub(crate) struct Cuda;

impl CurrentDevice for Cuda {
    fn current() -> Result<c_int> {
        let mut device: c_int = 0;
        // SAFETY: valid out-pointer.
        check("cudaGetDevice", unsafe { (api()?.get_device)(&mut device) })?;
        Ok(device)
    }

    fn make_current(device: c_int) -> Result<()> {
        // SAFETY: plain value argument.
        check("cudaSetDevice", unsafe { (api()?.set_device)(device) })
    }
}

impl Backend for Cuda {
    type Stream = CudaStream;
    type Event = CudaEvent;
    type Pool = CudaPool;
    type Module = CudaModule;
    type Function = CudaFunction;
    type Graph = CudaGraph;
    type GraphExec = CudaGraphExec;

    const NAME: &'static str = "cuda";

    fn init() -> Result<()> {
        api().map(|_| ())
    }

    fn runtime_version() -> Result<i32> {
        let mut v = 0;
        // SAFETY: valid out-pointer.
        check("cudaRuntimeGetVersion", unsafe {
            (api()?.runtime_get_version)(&mut v)
        })?;
        Ok(v)
    }

    fn device_count() -> Result<usize> {
        let mut n: c_int = 0;
        // SAFETY: valid out-pointer.
        check("cudaGetDeviceCount", unsafe { (api()?.get_device_count)(&mut n) })?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    fn set_device(device: usize) -> Result<()> {
        Self::make_current(ordinal(device)?)
    }

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

    fn mem_info(device: usize) -> Result<(usize, usize)> {
        let _device = DeviceGuard::<Cuda>::set(device)?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        check("cudaMemGetInfo", unsafe {
            (api()?.mem_get_info)(&mut free, &mut total)
        })?;
        Ok((free, total))
    }

    fn pools_supported(device: usize) -> Result<bool> {
        let mut v: c_int = 0;
        // SAFETY: valid out-pointer; the attribute is a constant of the enum.
        check("cudaDeviceGetAttribute", unsafe {
            (api()?.device_get_attribute)(&mut v, sys::cudaDevAttrMemoryPoolsSupported, ordinal(device)?)
        })?;
        Ok(v != 0)
    }

    fn stream_create(device: usize) -> Result<CudaStream> {
        let _device = DeviceGuard::<Cuda>::set(device)?;
        let mut s: sys::cudaStream_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the flag is a documented constant.
        check("cudaStreamCreateWithFlags", unsafe {
            (api()?.stream_create_with_flags)(&mut s, sys::cudaStreamNonBlocking)
        })?;
        Ok(CudaStream(s))
    }

    fn stream_destroy(stream: CudaStream) -> Result<()> {
        // SAFETY: the caller owns the stream and destroys it once.
        check("cudaStreamDestroy", unsafe { (api()?.stream_destroy)(stream.0) })
    }

    fn stream_synchronize(stream: CudaStream) -> Result<()> {
        // SAFETY: the runtime validates the handle.
        check("cudaStreamSynchronize", unsafe {
            (api()?.stream_synchronize)(stream.0)
        })
    }

    fn stream_wait_event(stream: CudaStream, event: CudaEvent) -> Result<()> {
        // SAFETY: handles made by this backend; flags 0.
        check("cudaStreamWaitEvent", unsafe {
            (api()?.stream_wait_event)(stream.0, event.0, 0)
        })
    }

    fn stream_from_raw(raw: *mut c_void) -> CudaStream {
        CudaStream(raw.cast())
    }

    fn stream_as_raw(stream: CudaStream) -> *mut c_void {
        stream.0.cast()
    }

    fn event_create(device: usize, timing: bool) -> Result<CudaEvent> {
        let _device = DeviceGuard::<Cuda>::set(device)?;
        let flags = if timing { 0 } else { sys::cudaEventDisableTiming };
        let mut e: sys::cudaEvent_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; documented flags.
        check("cudaEventCreateWithFlags", unsafe {
            (api()?.event_create_with_flags)(&mut e, flags)
        })?;
        Ok(CudaEvent(e))
    }

    fn event_destroy(event: CudaEvent) -> Result<()> {
        // SAFETY: the caller owns the event and destroys it once.
        check("cudaEventDestroy", unsafe { (api()?.event_destroy)(event.0) })
    }

    fn event_record(event: CudaEvent, stream: CudaStream) -> Result<()> {
        // SAFETY: handles made by this backend.
        check("cudaEventRecord", unsafe {
            (api()?.event_record)(event.0, stream.0)
        })
    }

    fn event_synchronize(event: CudaEvent) -> Result<()> {
        // SAFETY: handle made by this backend.
        check("cudaEventSynchronize", unsafe {
            (api()?.event_synchronize)(event.0)
        })
    }

    fn event_elapsed_ms(start: CudaEvent, end: CudaEvent) -> Result<f32> {
        let mut ms = 0f32;
        // SAFETY: valid out-pointer; handles made by this backend.
        check("cudaEventElapsedTime", unsafe {
            (api()?.event_elapsed_time)(&mut ms, start.0, end.0)
        })?;
        Ok(ms)
    }

    fn event_as_raw(event: CudaEvent) -> *mut c_void {
        event.0.cast()
    }

    fn default_pool(device: usize) -> Result<CudaPool> {
        let mut p: sys::cudaMemPool_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("cudaDeviceGetDefaultMemPool", unsafe {
            (api()?.device_get_default_mem_pool)(&mut p, ordinal(device)?)
        })?;
        Ok(CudaPool(p))
    }

    fn current_pool(device: usize) -> Result<CudaPool> {
        let mut p: sys::cudaMemPool_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("cudaDeviceGetMemPool", unsafe {
            (api()?.device_get_mem_pool)(&mut p, ordinal(device)?)
        })?;
        Ok(CudaPool(p))
    }

    fn set_current_pool(device: usize, pool: CudaPool) -> Result<()> {
        // SAFETY: pool handle made by this backend.
        check("cudaDeviceSetMemPool", unsafe {
            (api()?.device_set_mem_pool)(ordinal(device)?, pool.0)
        })
    }

    fn pool_create(props: &RawPoolProps) -> Result<CudaPool> {
        let handle_types = match props.handle_types {
            0 => sys::cudaMemHandleTypeNone,
            1 => sys::cudaMemHandleTypePosixFileDescriptor,
            other => return Err(unsupported(format!("export handle type mask {other:#x}"))),
        };
        let api = api()?;
        let mut p = sys::cudaMemPoolProps::zeroed();
        p.allocType = sys::cudaMemAllocationTypePinned;
        p.handleTypes = handle_types;
        p.location.type_ = sys::cudaMemLocationTypeDevice;
        p.location.id = props.device;
        if props.max_size != 0 {
            if api.version < sys::CUDA_VERSION_POOL_MAX_SIZE {
                return Err(unsupported(format!(
                    "a pool max_size needs CUDA 12.2 or later (the loaded runtime is {})",
                    CudaCodes::version_text(api.version)
                )));
            }
            p.maxSize = props.max_size;
        }
        let mut pool: sys::cudaMemPool_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer and a fully initialised props struct of
        // the headers' layout (maxSize stays 0, i.e. reserved, on runtimes
        // that do not read it; `usage` and `reserved` stay 0).
        check("cudaMemPoolCreate", unsafe {
            (api.mem_pool_create)(&mut pool, &p)
        })?;
        Ok(CudaPool(pool))
    }

    fn pool_destroy(pool: CudaPool) -> Result<()> {
        // SAFETY: the caller owns the pool and destroys it once; allocations
        // still outstanding keep the pool's memory alive inside the driver.
        check("cudaMemPoolDestroy", unsafe { (api()?.mem_pool_destroy)(pool.0) })
    }

    fn pool_get(pool: CudaPool, a: PoolAttr) -> Result<u64> {
        let api = api()?;
        if a.is_flag() {
            let mut v: c_int = 0;
            // SAFETY: flag attributes are `int`.
            check("cudaMemPoolGetAttribute", unsafe {
                (api.mem_pool_get_attribute)(pool.0, attr(a), (&mut v as *mut c_int).cast())
            })?;
            Ok(u64::from(v != 0))
        } else {
            let mut v: u64 = 0;
            // SAFETY: the other attributes are `cuuint64_t`.
            check("cudaMemPoolGetAttribute", unsafe {
                (api.mem_pool_get_attribute)(pool.0, attr(a), (&mut v as *mut u64).cast())
            })?;
            Ok(v)
        }
    }

    fn pool_set(pool: CudaPool, a: PoolAttr, value: u64) -> Result<()> {
        let api = api()?;
        if a.is_flag() {
            let mut v: c_int = c_int::from(value != 0);
            // SAFETY: flag attributes are `int`.
            check("cudaMemPoolSetAttribute", unsafe {
                (api.mem_pool_set_attribute)(pool.0, attr(a), (&mut v as *mut c_int).cast())
            })
        } else {
            let mut v: u64 = value;
            // SAFETY: the other attributes are `cuuint64_t`.
            check("cudaMemPoolSetAttribute", unsafe {
                (api.mem_pool_set_attribute)(pool.0, attr(a), (&mut v as *mut u64).cast())
            })
        }
    }

    fn pool_trim_to(pool: CudaPool, keep_bytes: usize) -> Result<()> {
        // SAFETY: pool handle made by this backend.
        check("cudaMemPoolTrimTo", unsafe {
            (api()?.mem_pool_trim_to)(pool.0, keep_bytes)
        })
    }

    fn pool_as_raw(pool: CudaPool) -> *mut c_void {
        pool.0.cast()
    }

    fn can_access_peer(device: usize, peer: usize) -> Result<bool> {
        let mut v: c_int = 0;
        // SAFETY: valid out-pointer.
        check("cudaDeviceCanAccessPeer", unsafe {
            (api()?.device_can_access_peer)(&mut v, ordinal(device)?, ordinal(peer)?)
        })?;
        Ok(v != 0)
    }

    fn pool_set_access(pool: CudaPool, device: usize, access: u32) -> Result<()> {
        let desc = sys::cudaMemAccessDesc {
            location: device_location(device)?,
            flags: access,
        };
        // SAFETY: one valid descriptor; the runtime validates the values.
        check("cudaMemPoolSetAccess", unsafe {
            (api()?.mem_pool_set_access)(pool.0, &desc, 1)
        })
    }

    fn pool_get_access(pool: CudaPool, device: usize) -> Result<u32> {
        let mut location = device_location(device)?;
        let mut flags = 0u32;
        // SAFETY: valid out-pointer and location.
        check("cudaMemPoolGetAccess", unsafe {
            (api()?.mem_pool_get_access)(&mut flags, pool.0, &mut location)
        })?;
        Ok(flags)
    }

    fn pool_export_fd(pool: CudaPool) -> Result<i32> {
        let mut fd: c_int = -1;
        // SAFETY: for the POSIX fd handle type the runtime writes an int.
        check("cudaMemPoolExportToShareableHandle", unsafe {
            (api()?.mem_pool_export_to_shareable_handle)(
                (&mut fd as *mut c_int).cast(),
                pool.0,
                sys::cudaMemHandleTypePosixFileDescriptor,
                0,
            )
        })?;
        Ok(fd)
    }

    fn pool_import_fd(fd: i32) -> Result<CudaPool> {
        let mut pool: sys::cudaMemPool_t = std::ptr::null_mut();
        // SAFETY: for the POSIX fd handle type the handle argument is the
        // descriptor's value itself; the runtime does not take ownership.
        check("cudaMemPoolImportFromShareableHandle", unsafe {
            (api()?.mem_pool_import_from_shareable_handle)(
                &mut pool,
                fd as isize as *mut c_void,
                sys::cudaMemHandleTypePosixFileDescriptor,
                0,
            )
        })?;
        Ok(CudaPool(pool))
    }

    fn pool_export_pointer(ptr: DevicePtr) -> Result<[u8; 64]> {
        let mut data = [0u8; 64];
        // SAFETY: 64 writable bytes; the runtime validates the address.
        check("cudaMemPoolExportPointer", unsafe {
            (api()?.mem_pool_export_pointer)(&mut data, ptr.as_mut_ptr())
        })?;
        Ok(data)
    }

    fn pool_import_pointer(pool: CudaPool, data: &[u8; 64]) -> Result<DevicePtr> {
        let mut copy = *data;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the runtime only reads the 64 bytes.
        check("cudaMemPoolImportPointer", unsafe {
            (api()?.mem_pool_import_pointer)(&mut p, pool.0, &mut copy)
        })?;
        Ok(DevicePtr(p as usize))
    }

    #[inline]
    fn malloc_async(bytes: usize, stream: CudaStream) -> Result<DevicePtr> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the runtime validates the stream.
        let code = unsafe { (api()?.malloc_async)(&mut p, bytes, stream.0) };
        check_alloc("cudaMallocAsync", code, bytes)?;
        Ok(DevicePtr(p as usize))
    }

    #[inline]
    fn malloc_from_pool_async(bytes: usize, pool: CudaPool, stream: CudaStream) -> Result<DevicePtr> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the runtime validates pool and stream.
        let code = unsafe { (api()?.malloc_from_pool_async)(&mut p, bytes, pool.0, stream.0) };
        check_alloc("cudaMallocFromPoolAsync", code, bytes)?;
        Ok(DevicePtr(p as usize))
    }

    #[inline]
    unsafe fn free_async(ptr: DevicePtr, stream: CudaStream) -> Result<()> {
        // SAFETY: the caller guarantees `ptr` is a live stream-ordered
        // allocation that nothing uses after this point in stream order.
        check("cudaFreeAsync", unsafe {
            (api()?.free_async)(ptr.as_mut_ptr(), stream.0)
        })
    }

    fn malloc_sync(device: usize, bytes: usize) -> Result<DevicePtr> {
        let _device = DeviceGuard::<Cuda>::set(device)?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let code = unsafe { (api()?.malloc)(&mut p, bytes) };
        check_alloc("cudaMalloc", code, bytes)?;
        Ok(DevicePtr(p as usize))
    }

    unsafe fn free_sync(device: usize, ptr: DevicePtr) -> Result<()> {
        let _device = DeviceGuard::<Cuda>::set(device)?;
        // SAFETY: the caller guarantees `ptr` came from cudaMalloc and is
        // live; cudaFree waits for the device before releasing it.
        check("cudaFree", unsafe { (api()?.free)(ptr.as_mut_ptr()) })
    }

    unsafe fn copy_async(
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        stream: CudaStream,
    ) -> Result<()> {
        // SAFETY: the caller guarantees both ranges (see the trait); the
        // default kind lets the runtime infer the direction.
        check("cudaMemcpyAsync", unsafe {
            (api()?.memcpy_async)(dst, src, bytes, sys::cudaMemcpyDefault, stream.0)
        })
    }

    unsafe fn memset_async(dst: DevicePtr, value: u8, bytes: usize, stream: CudaStream) -> Result<()> {
        // SAFETY: the caller guarantees the range (see the trait).
        check("cudaMemsetAsync", unsafe {
            (api()?.memset_async)(dst.as_mut_ptr(), c_int::from(value), bytes, stream.0)
        })
    }

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

    fn module_function(module: CudaModule, name: &CStr) -> Result<CudaFunction> {
        let get_kernel = api()?.library_get_kernel.get::<CudaCodes>()?;
        let mut k: sys::cudaKernel_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer and NUL-terminated name.
        check("cudaLibraryGetKernel", unsafe {
            get_kernel(&mut k, module.0, name.as_ptr())
        })?;
        Ok(CudaFunction(k))
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

    fn stream_capture_status(stream: CudaStream) -> Result<CaptureStatus> {
        let mut status = sys::cudaStreamCaptureStatusNone;
        // SAFETY: valid out-pointer; the runtime validates the stream.
        check("cudaStreamIsCapturing", unsafe {
            (api()?.stream_is_capturing)(stream.0, &mut status)
        })?;
        common::capture_status::<CudaCodes>("cudaStreamIsCapturing", status)
    }

    fn stream_capture_info(stream: CudaStream) -> Result<CaptureInfo<CudaGraph>> {
        let api = api()?;
        let mut status = sys::cudaStreamCaptureStatusNone;
        let mut id = 0u64;
        let mut graph: sys::cudaGraph_t = std::ptr::null_mut();
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

    fn stream_begin_capture(stream: CudaStream, mode: RawCaptureMode) -> Result<()> {
        // SAFETY: the runtime validates the stream; the mode is one of the
        // three enum values.
        check("cudaStreamBeginCapture", unsafe {
            (api()?.stream_begin_capture)(stream.0, common::capture_mode(mode))
        })
    }

    fn stream_end_capture(stream: CudaStream) -> Result<CudaGraph> {
        let api = api()?;
        let mut graph: sys::cudaGraph_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the runtime validates the stream.
        let code = unsafe { (api.stream_end_capture)(stream.0, &mut graph) };
        if code != common::SUCCESS {
            // An invalidated capture ends too (901, no graph). Should a
            // runtime still hand one out with the error, it is not leaked.
            if !graph.is_null() {
                // SAFETY: the graph came from the runtime just now and is
                // owned by nobody else.
                unsafe { (api.graph_destroy)(graph) };
            }
            return Err(common::vendor::<CudaCodes>("cudaStreamEndCapture", code));
        }
        Ok(CudaGraph(graph))
    }

    fn graph_destroy(graph: CudaGraph) -> Result<()> {
        // SAFETY: the caller owns the graph and destroys it once.
        check("cudaGraphDestroy", unsafe { (api()?.graph_destroy)(graph.0) })
    }

    fn graph_instantiate(graph: CudaGraph, auto_free_on_launch: bool) -> Result<CudaGraphExec> {
        let flags = if auto_free_on_launch {
            sys::cudaGraphInstantiateFlagAutoFreeOnLaunch
        } else {
            0
        };
        let mut exec: sys::cudaGraphExec_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; a graph made by this backend; a
        // documented flag.
        check("cudaGraphInstantiateWithFlags", unsafe {
            (api()?.graph_instantiate_with_flags)(&mut exec, graph.0, flags)
        })?;
        Ok(CudaGraphExec(exec))
    }

    fn graph_exec_destroy(exec: CudaGraphExec) -> Result<()> {
        // SAFETY: the caller owns the executable graph and destroys it once.
        check("cudaGraphExecDestroy", unsafe {
            (api()?.graph_exec_destroy)(exec.0)
        })
    }

    fn graph_launch(exec: CudaGraphExec, stream: CudaStream) -> Result<()> {
        // SAFETY: handles made by this backend; the runtime validates them.
        check("cudaGraphLaunch", unsafe {
            (api()?.graph_launch)(exec.0, stream.0)
        })
    }

    fn graph_upload(exec: CudaGraphExec, stream: CudaStream) -> Result<()> {
        // SAFETY: handles made by this backend; the runtime validates them.
        check("cudaGraphUpload", unsafe {
            (api()?.graph_upload)(exec.0, stream.0)
        })
    }

    fn graph_mem_get(device: usize, attr: GraphMemAttr) -> Result<u64> {
        let mut value = 0u64;
        // SAFETY: every graph-memory attribute is a `cuuint64_t`.
        check("cudaDeviceGetGraphMemAttribute", unsafe {
            (api()?.device_get_graph_mem_attribute)(
                ordinal(device)?,
                common::graph_mem_attr(attr),
                (&mut value as *mut u64).cast(),
            )
        })?;
        Ok(value)
    }

    fn graph_mem_trim(device: usize) -> Result<()> {
        // SAFETY: plain value argument.
        check("cudaDeviceGraphMemTrim", unsafe {
            (api()?.device_graph_mem_trim)(ordinal(device)?)
        })
    }

    unsafe fn graph_retain_release(graph: CudaGraph, release: GraphRelease, data: *mut c_void) -> Result<()> {
        let api = api()?;
        let mut object: sys::cudaUserObject_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the caller guarantees `release(data)`
        // may run once, later, on a runtime thread (see the trait).
        check("cudaUserObjectCreate", unsafe {
            (api.user_object_create)(
                &mut object,
                data,
                Some(release),
                1,
                sys::cudaUserObjectNoDestructorSync,
            )
        })?;
        // SAFETY: both handles are live; with the Move flag the graph takes
        // over the one reference made above. Should this fail, the object
        // keeps that reference: it leaks and `release` is never called, so
        // the caller still owns `data` (the trait's error contract).
        check("cudaGraphRetainUserObject", unsafe {
            (api.graph_retain_user_object)(graph.0, object, 1, sys::cudaGraphUserObjectMove)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::VendorCode;

    #[test]
    fn init_and_device_count_fail_cleanly_without_gpu() {
        match Cuda::init() {
            Ok(()) => match Cuda::device_count() {
                Ok(_) => {}
                Err(Error::NoDevice { backend, .. }) => assert_eq!(backend, "cuda"),
                Err(e) => panic!("device_count: unexpected error {e}"),
            },
            Err(Error::RuntimeNotFound {
                library, searched, ..
            }) => {
                assert_eq!(library, "libcudart");
                if std::env::var_os("SOMALLOC_CUDART").is_none() {
                    assert_eq!(searched, ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]);
                }
            }
            Err(e) => panic!("init: unexpected error {e}"),
        }
    }

    #[test]
    fn only_cuda_12_and_13_runtimes_are_used() {
        assert!(unsupported_major(11_080).is_some_and(|why| why.contains("CUDA 11.8")));
        assert!(unsupported_major(12_000).is_none());
        assert!(unsupported_major(12_080).is_none());
        assert!(unsupported_major(13_000).is_none());
        assert!(unsupported_major(13_010).is_none());
        assert!(unsupported_major(14_000).is_some_and(|why| why.contains("CUDA 14.0")));
        assert!(unsupported_major(0).is_some());
        assert_eq!(CudaCodes::version_text(12_080), "CUDA 12.8");
        assert_eq!(CudaCodes::version_text(13_000), "CUDA 13.0");
    }

    #[test]
    fn error_codes_map_to_errors() {
        assert!(matches!(
            common::vendor::<CudaCodes>("cudaGetDeviceCount", 100),
            Error::NoDevice { backend: "cuda", .. }
        ));
        assert!(matches!(
            common::vendor::<CudaCodes>("cudaGetDeviceCount", 35),
            Error::NoDevice { backend: "cuda", .. }
        ));
        assert!(matches!(
            common::vendor::<CudaCodes>("cudaMemPoolCreate", 801),
            Error::Unsupported { backend: "cuda", .. }
        ));
        // The capture errors are ordinary vendor errors with their code.
        for code in [
            sys::cudaErrorStreamCaptureUnsupported,
            sys::cudaErrorStreamCaptureInvalidated,
        ] {
            match common::vendor::<CudaCodes>("cudaStreamEndCapture", code) {
                Error::Vendor { call, code: c, .. } => {
                    assert_eq!(call, "cudaStreamEndCapture");
                    assert_eq!(c, VendorCode(code));
                }
                e => panic!("unexpected {e}"),
            }
        }
        assert!(matches!(
            check_alloc("cudaMallocAsync", 2, 64),
            Err(Error::OutOfMemory {
                requested: 64,
                stats: None
            })
        ));
        assert!(matches!(check("cudaMemPoolCreate", 2), Err(Error::Vendor { .. })));
    }

    #[test]
    fn bad_input_is_refused_before_the_runtime() {
        let props = RawPoolProps {
            device: 0,
            max_size: 0,
            handle_types: 2,
        };
        assert!(matches!(
            Cuda::pool_create(&props),
            Err(Error::Unsupported { backend: "cuda", .. })
        ));
    }
}
