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
//! undefined behaviour. As an `i32` it is just data ([`VendorCode`]). A
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
//! * Pools: only device locations (no host/NUMA locations in HIP 5.x), export
//!   handle types none or POSIX fd (no fabric handles); anything else is
//!   `Unsupported`. Pool attributes 1..=8 have the same numbers and value
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

const BACKEND: &str = "rocm";
const LIBRARY: &str = "libamdhip64";

runtime_api! {
    version: version;
    fn get_error_name = "hipGetErrorName\0"; (i32) -> *const c_char;
    fn get_error_string = "hipGetErrorString\0"; (i32) -> *const c_char;
    fn runtime_get_version = "hipRuntimeGetVersion\0"; (*mut c_int) -> i32;
    fn get_device_count = "hipGetDeviceCount\0"; (*mut c_int) -> i32;
    fn set_device = "hipSetDevice\0"; (c_int) -> i32;
    fn get_device = "hipGetDevice\0"; (*mut c_int) -> i32;
    fn device_get = "hipDeviceGet\0"; (*mut sys::hipDevice_t, c_int) -> i32;
    fn device_get_name = "hipDeviceGetName\0"; (*mut c_char, c_int, sys::hipDevice_t) -> i32;
    fn device_get_attribute = "hipDeviceGetAttribute\0"; (*mut c_int, sys::hipDeviceAttribute_t, c_int) -> i32;
    fn mem_get_info = "hipMemGetInfo\0"; (*mut usize, *mut usize) -> i32;
    fn stream_create_with_flags = "hipStreamCreateWithFlags\0"; (*mut sys::hipStream_t, c_uint) -> i32;
    fn stream_destroy = "hipStreamDestroy\0"; (sys::hipStream_t) -> i32;
    fn stream_synchronize = "hipStreamSynchronize\0"; (sys::hipStream_t) -> i32;
    fn stream_wait_event = "hipStreamWaitEvent\0"; (sys::hipStream_t, sys::hipEvent_t, c_uint) -> i32;
    fn event_create_with_flags = "hipEventCreateWithFlags\0"; (*mut sys::hipEvent_t, c_uint) -> i32;
    fn event_destroy = "hipEventDestroy\0"; (sys::hipEvent_t) -> i32;
    fn event_record = "hipEventRecord\0"; (sys::hipEvent_t, sys::hipStream_t) -> i32;
    fn event_synchronize = "hipEventSynchronize\0"; (sys::hipEvent_t) -> i32;
    fn event_elapsed_time = "hipEventElapsedTime\0"; (*mut f32, sys::hipEvent_t, sys::hipEvent_t) -> i32;
    fn device_get_default_mem_pool = "hipDeviceGetDefaultMemPool\0"; (*mut sys::hipMemPool_t, c_int) -> i32;
    fn device_get_mem_pool = "hipDeviceGetMemPool\0"; (*mut sys::hipMemPool_t, c_int) -> i32;
    fn device_set_mem_pool = "hipDeviceSetMemPool\0"; (c_int, sys::hipMemPool_t) -> i32;
    fn mem_pool_create = "hipMemPoolCreate\0"; (*mut sys::hipMemPool_t, *const sys::hipMemPoolProps) -> i32;
    fn mem_pool_destroy = "hipMemPoolDestroy\0"; (sys::hipMemPool_t) -> i32;
    fn mem_pool_set_attribute = "hipMemPoolSetAttribute\0"; (sys::hipMemPool_t, sys::hipMemPoolAttr, *mut c_void) -> i32;
    fn mem_pool_get_attribute = "hipMemPoolGetAttribute\0"; (sys::hipMemPool_t, sys::hipMemPoolAttr, *mut c_void) -> i32;
    fn device_can_access_peer = "hipDeviceCanAccessPeer\0"; (*mut c_int, c_int, c_int) -> i32;
    fn mem_pool_set_access = "hipMemPoolSetAccess\0"; (sys::hipMemPool_t, *const sys::hipMemAccessDesc, usize) -> i32;
    fn mem_pool_get_access = "hipMemPoolGetAccess\0"; (*mut u32, sys::hipMemPool_t, *mut sys::hipMemLocation) -> i32;
    fn mem_pool_export_to_shareable_handle = "hipMemPoolExportToShareableHandle\0"; (*mut c_void, sys::hipMemPool_t, u32, c_uint) -> i32;
    fn mem_pool_import_from_shareable_handle = "hipMemPoolImportFromShareableHandle\0"; (*mut sys::hipMemPool_t, *mut c_void, u32, c_uint) -> i32;
    fn mem_pool_export_pointer = "hipMemPoolExportPointer\0"; (*mut [u8; 64], *mut c_void) -> i32;
    fn mem_pool_import_pointer = "hipMemPoolImportPointer\0"; (*mut *mut c_void, sys::hipMemPool_t, *mut [u8; 64]) -> i32;
    fn mem_pool_trim_to = "hipMemPoolTrimTo\0"; (sys::hipMemPool_t, usize) -> i32;
    fn malloc_async = "hipMallocAsync\0"; (*mut *mut c_void, usize, sys::hipStream_t) -> i32;
    fn malloc_from_pool_async = "hipMallocFromPoolAsync\0"; (*mut *mut c_void, usize, sys::hipMemPool_t, sys::hipStream_t) -> i32;
    fn free_async = "hipFreeAsync\0"; (*mut c_void, sys::hipStream_t) -> i32;
    fn malloc = "hipMalloc\0"; (*mut *mut c_void, usize) -> i32;
    fn free = "hipFree\0"; (*mut c_void) -> i32;
    fn memcpy_async = "hipMemcpyAsync\0"; (*mut c_void, *const c_void, usize, sys::hipMemcpyKind, sys::hipStream_t) -> i32;
    fn memset_async = "hipMemsetAsync\0"; (*mut c_void, c_int, usize, sys::hipStream_t) -> i32;
    fn module_load_data = "hipModuleLoadData\0"; (*mut sys::hipModule_t, *const c_void) -> i32;
    fn module_unload = "hipModuleUnload\0"; (sys::hipModule_t) -> i32;
    fn module_get_function = "hipModuleGetFunction\0"; (*mut sys::hipFunction_t, sys::hipModule_t, *const c_char) -> i32;
    fn module_launch_kernel = "hipModuleLaunchKernel\0"; (
        sys::hipFunction_t,
        c_uint, c_uint, c_uint,
        c_uint, c_uint, c_uint,
        c_uint, sys::hipStream_t,
        *mut *mut c_void, *mut *mut c_void,
    ) -> i32;
    // Capture and graphs: in every HIP runtime since ROCm 4.5 (5.2.3's
    // libamdhip64 exports them in nodes hip_4.3 and hip_4.5).
    fn stream_is_capturing = "hipStreamIsCapturing\0"; (sys::hipStream_t, *mut sys::hipStreamCaptureStatus) -> i32;
    fn stream_get_capture_info_v2 = "hipStreamGetCaptureInfo_v2\0"; (
        sys::hipStream_t, *mut sys::hipStreamCaptureStatus, *mut u64, *mut sys::hipGraph_t,
        *mut *const sys::hipGraphNode_t, *mut usize,
    ) -> i32;
    fn stream_begin_capture = "hipStreamBeginCapture\0"; (sys::hipStream_t, sys::hipStreamCaptureMode) -> i32;
    fn stream_end_capture = "hipStreamEndCapture\0"; (sys::hipStream_t, *mut sys::hipGraph_t) -> i32;
    fn graph_destroy = "hipGraphDestroy\0"; (sys::hipGraph_t) -> i32;
    fn graph_instantiate_with_flags = "hipGraphInstantiateWithFlags\0"; (
        *mut sys::hipGraphExec_t, sys::hipGraph_t, u64,
    ) -> i32;
    fn graph_exec_destroy = "hipGraphExecDestroy\0"; (sys::hipGraphExec_t) -> i32;
    fn graph_launch = "hipGraphLaunch\0"; (sys::hipGraphExec_t, sys::hipStream_t) -> i32;
    // Newer than ROCm 5.2 (see the version table in sys.rs).
    optional fn graph_upload = "hipGraphUpload\0" since "ROCm 5.5"; (sys::hipGraphExec_t, sys::hipStream_t) -> i32;
    optional fn device_get_graph_mem_attribute = "hipDeviceGetGraphMemAttribute\0" since "ROCm 5.3"; (
        c_int, sys::hipGraphMemAttributeType, *mut c_void,
    ) -> i32;
    optional fn device_graph_mem_trim = "hipDeviceGraphMemTrim\0" since "ROCm 5.3"; (c_int) -> i32;
    optional fn user_object_create = "hipUserObjectCreate\0" since "ROCm 5.3"; (
        *mut sys::hipUserObject_t, *mut c_void, sys::hipHostFn_t, c_uint, c_uint,
    ) -> i32;
    optional fn graph_retain_user_object = "hipGraphRetainUserObject\0" since "ROCm 5.3"; (
        sys::hipGraph_t, sys::hipUserObject_t, c_uint, c_uint,
    ) -> i32;
}

/// `$SOMALLOC_AMDHIP` alone when it is set (so a deployment, or a test, can
/// pin the exact library), else the HIP runtimes of ROCm 7, 6 and 5.
fn library_candidates() -> Vec<String> {
    match std::env::var("SOMALLOC_AMDHIP") {
        Ok(explicit) if !explicit.is_empty() => vec![explicit],
        _ => [
            "libamdhip64.so.7",
            "libamdhip64.so.6",
            "libamdhip64.so.5",
            "libamdhip64.so",
        ]
        .iter()
        .map(|n| n.to_string())
        .collect(),
    }
}

fn load_api() -> Result<Api> {
    let searched = library_candidates();
    let mut failures = Vec::new();
    for name in &searched {
        // SAFETY: loading libamdhip64 runs its initialisers, which have no
        // preconditions on the caller.
        match unsafe { libloading::Library::new(name) } {
            // As in the CUDA backend, the first library that opens is the one
            // used: one that lacks a function (an older ROCm, a wrong
            // $SOMALLOC_AMDHIP) is an error, not a reason to fall back to
            // another runtime.
            Ok(lib) => {
                // SAFETY: a library found under these names is a HIP runtime;
                // hipRuntimeGetVersion is `int f(int*)` in every release, and
                // every function declared above has had the same C signature
                // from ROCm 5 to ROCm 7.
                let loaded = match unsafe { common::library_version(&lib, "hipRuntimeGetVersion\0") } {
                    // SAFETY: as above, and `version` is this library's own.
                    Ok(version) => unsafe { Api::load(lib, version) },
                    Err(e) => Err(e),
                };
                return loaded.map_err(|e| {
                    failures.push(format!("{name}: {e}"));
                    Error::RuntimeNotFound {
                        library: LIBRARY,
                        searched: searched.clone(),
                        reason: failures.join("; "),
                    }
                });
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    Err(Error::RuntimeNotFound {
        library: LIBRARY,
        searched,
        reason: if failures.is_empty() {
            "no candidate".to_string()
        } else {
            failures.join("; ")
        },
    })
}

fn api() -> Result<&'static Api> {
    static API: OnceLock<std::result::Result<Api, Error>> = OnceLock::new();
    API.get_or_init(load_api).as_ref().map_err(Clone::clone)
}

// The codes with their own `Error` variant have CUDA's numbers in HIP too;
// the shared mapping in `common` relies on it.
const _: () = {
    assert!(sys::hipSuccess == common::SUCCESS);
    assert!(sys::hipErrorOutOfMemory == common::ERROR_OUT_OF_MEMORY);
    assert!(sys::hipErrorInsufficientDriver == common::ERROR_INSUFFICIENT_DRIVER);
    assert!(sys::hipErrorNoDevice == common::ERROR_NO_DEVICE);
    assert!(sys::hipErrorNotSupported == common::ERROR_NOT_SUPPORTED);
    assert!(sys::hipStreamCaptureStatusNone == common::CAPTURE_STATUS_NONE);
    assert!(sys::hipStreamCaptureStatusActive == common::CAPTURE_STATUS_ACTIVE);
    assert!(sys::hipStreamCaptureStatusInvalidated == common::CAPTURE_STATUS_INVALIDATED);
    assert!(sys::hipStreamCaptureModeGlobal == common::CAPTURE_MODE_GLOBAL);
    assert!(sys::hipStreamCaptureModeThreadLocal == common::CAPTURE_MODE_THREAD_LOCAL);
    assert!(sys::hipStreamCaptureModeRelaxed == common::CAPTURE_MODE_RELAXED);
    assert!(sys::hipGraphMemAttrUsedMemCurrent == common::GRAPH_MEM_USED_CURRENT);
    assert!(sys::hipGraphMemAttrUsedMemHigh == common::GRAPH_MEM_USED_HIGH);
    assert!(sys::hipGraphMemAttrReservedMemCurrent == common::GRAPH_MEM_RESERVED_CURRENT);
    assert!(sys::hipGraphMemAttrReservedMemHigh == common::GRAPH_MEM_RESERVED_HIGH);
};

/// Error texts of the HIP runtime.
struct RocmCodes;

impl Codes for RocmCodes {
    const BACKEND: &'static str = BACKEND;

    fn version_text(version: i32) -> String {
        version_text(version)
    }

    fn texts(code: i32) -> (String, String) {
        match api() {
            // SAFETY: both functions accept any code and return a static
            // string ("hipErrorUnknown" for codes they do not know).
            Ok(a) => unsafe { (c_str((a.get_error_name)(code)), c_str((a.get_error_string)(code))) },
            Err(_) => (String::new(), String::new()),
        }
    }
}

#[inline]
fn check(call: &'static str, code: i32) -> Result<()> {
    common::check::<RocmCodes>(call, code)
}

#[inline]
fn check_alloc(call: &'static str, code: i32, bytes: usize) -> Result<()> {
    common::check_alloc::<RocmCodes>(call, code, bytes)
}

fn unsupported(what: impl Into<String>) -> Error {
    Error::Unsupported {
        backend: BACKEND,
        what: what.into(),
    }
}

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

handle!(
    /// `hipStream_t`.
    RocmStream,
    sys::hipStream_t
);
handle!(
    /// `hipEvent_t`.
    RocmEvent,
    sys::hipEvent_t
);
handle!(
    /// `hipMemPool_t`.
    RocmPool,
    sys::hipMemPool_t
);
handle!(
    /// `hipModule_t`.
    RocmModule,
    sys::hipModule_t
);
handle!(
    /// `hipFunction_t`.
    RocmFunction,
    sys::hipFunction_t
);

fn attr(a: PoolAttr) -> sys::hipMemPoolAttr {
    match a {
        PoolAttr::ReuseFollowEventDependencies => sys::hipMemPoolReuseFollowEventDependencies,
        PoolAttr::ReuseAllowOpportunistic => sys::hipMemPoolReuseAllowOpportunistic,
        PoolAttr::ReuseAllowInternalDependencies => sys::hipMemPoolReuseAllowInternalDependencies,
        PoolAttr::ReleaseThreshold => sys::hipMemPoolAttrReleaseThreshold,
        PoolAttr::ReservedMemCurrent => sys::hipMemPoolAttrReservedMemCurrent,
        PoolAttr::ReservedMemHigh => sys::hipMemPoolAttrReservedMemHigh,
        PoolAttr::UsedMemCurrent => sys::hipMemPoolAttrUsedMemCurrent,
        PoolAttr::UsedMemHigh => sys::hipMemPoolAttrUsedMemHigh,
    }
}

handle!(
    /// `hipGraph_t`.
    RocmGraph,
    sys::hipGraph_t
);
handle!(
    /// `hipGraphExec_t`.
    RocmGraphExec,
    sys::hipGraphExec_t
);

/// The ROCm (HIP) backend.
#[derive(Debug)]
pub(crate) struct Rocm;

impl CurrentDevice for Rocm {
    fn current() -> Result<c_int> {
        let mut device: c_int = 0;
        // SAFETY: valid out-pointer.
        check("hipGetDevice", unsafe { (api()?.get_device)(&mut device) })?;
        Ok(device)
    }

    fn make_current(device: c_int) -> Result<()> {
        // SAFETY: plain value argument.
        check("hipSetDevice", unsafe { (api()?.set_device)(device) })
    }
}

impl Backend for Rocm {
    type Stream = RocmStream;
    type Event = RocmEvent;
    type Pool = RocmPool;
    type Module = RocmModule;
    type Function = RocmFunction;
    type Graph = RocmGraph;
    type GraphExec = RocmGraphExec;

    const NAME: &'static str = BACKEND;

    fn init() -> Result<()> {
        api().map(|_| ())
    }

    fn runtime_version() -> Result<i32> {
        let mut v = 0;
        // SAFETY: valid out-pointer.
        check("hipRuntimeGetVersion", unsafe {
            (api()?.runtime_get_version)(&mut v)
        })?;
        Ok(v)
    }

    fn device_count() -> Result<usize> {
        let mut n: c_int = 0;
        // SAFETY: valid out-pointer.
        check("hipGetDeviceCount", unsafe { (api()?.get_device_count)(&mut n) })?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    fn set_device(device: usize) -> Result<()> {
        Self::make_current(ordinal(device)?)
    }

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

    fn mem_info(device: usize) -> Result<(usize, usize)> {
        let _device = DeviceGuard::<Rocm>::set(device)?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        check("hipMemGetInfo", unsafe {
            (api()?.mem_get_info)(&mut free, &mut total)
        })?;
        Ok((free, total))
    }

    fn pools_supported(device: usize) -> Result<bool> {
        let mut v: c_int = 0;
        // SAFETY: valid out-pointer; the attribute is a constant of the enum.
        check("hipDeviceGetAttribute", unsafe {
            (api()?.device_get_attribute)(
                &mut v,
                sys::hipDeviceAttributeMemoryPoolsSupported,
                ordinal(device)?,
            )
        })?;
        Ok(v != 0)
    }

    fn stream_create(device: usize) -> Result<RocmStream> {
        let _device = DeviceGuard::<Rocm>::set(device)?;
        let mut s: sys::hipStream_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the flag is a documented constant.
        check("hipStreamCreateWithFlags", unsafe {
            (api()?.stream_create_with_flags)(&mut s, sys::hipStreamNonBlocking)
        })?;
        Ok(RocmStream(s))
    }

    fn stream_destroy(stream: RocmStream) -> Result<()> {
        // SAFETY: the caller owns the stream and destroys it once.
        check("hipStreamDestroy", unsafe { (api()?.stream_destroy)(stream.0) })
    }

    fn stream_synchronize(stream: RocmStream) -> Result<()> {
        // SAFETY: the runtime validates the handle.
        check("hipStreamSynchronize", unsafe {
            (api()?.stream_synchronize)(stream.0)
        })
    }

    fn stream_wait_event(stream: RocmStream, event: RocmEvent) -> Result<()> {
        // SAFETY: handles made by this backend; flags 0.
        check("hipStreamWaitEvent", unsafe {
            (api()?.stream_wait_event)(stream.0, event.0, 0)
        })
    }

    fn stream_from_raw(raw: *mut c_void) -> RocmStream {
        RocmStream(raw.cast())
    }

    fn stream_as_raw(stream: RocmStream) -> *mut c_void {
        stream.0.cast()
    }

    fn event_create(device: usize, timing: bool) -> Result<RocmEvent> {
        let _device = DeviceGuard::<Rocm>::set(device)?;
        let flags = if timing { 0 } else { sys::hipEventDisableTiming };
        let mut e: sys::hipEvent_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; documented flags.
        check("hipEventCreateWithFlags", unsafe {
            (api()?.event_create_with_flags)(&mut e, flags)
        })?;
        Ok(RocmEvent(e))
    }

    fn event_destroy(event: RocmEvent) -> Result<()> {
        // SAFETY: the caller owns the event and destroys it once.
        check("hipEventDestroy", unsafe { (api()?.event_destroy)(event.0) })
    }

    fn event_record(event: RocmEvent, stream: RocmStream) -> Result<()> {
        // SAFETY: handles made by this backend.
        check("hipEventRecord", unsafe {
            (api()?.event_record)(event.0, stream.0)
        })
    }

    fn event_synchronize(event: RocmEvent) -> Result<()> {
        // SAFETY: handle made by this backend.
        check("hipEventSynchronize", unsafe {
            (api()?.event_synchronize)(event.0)
        })
    }

    fn event_elapsed_ms(start: RocmEvent, end: RocmEvent) -> Result<f32> {
        let mut ms = 0f32;
        // SAFETY: valid out-pointer; handles made by this backend.
        check("hipEventElapsedTime", unsafe {
            (api()?.event_elapsed_time)(&mut ms, start.0, end.0)
        })?;
        Ok(ms)
    }

    fn event_as_raw(event: RocmEvent) -> *mut c_void {
        event.0.cast()
    }

    fn default_pool(device: usize) -> Result<RocmPool> {
        let mut p: sys::hipMemPool_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("hipDeviceGetDefaultMemPool", unsafe {
            (api()?.device_get_default_mem_pool)(&mut p, ordinal(device)?)
        })?;
        Ok(RocmPool(p))
    }

    fn current_pool(device: usize) -> Result<RocmPool> {
        let mut p: sys::hipMemPool_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("hipDeviceGetMemPool", unsafe {
            (api()?.device_get_mem_pool)(&mut p, ordinal(device)?)
        })?;
        Ok(RocmPool(p))
    }

    fn set_current_pool(device: usize, pool: RocmPool) -> Result<()> {
        // SAFETY: pool handle made by this backend.
        check("hipDeviceSetMemPool", unsafe {
            (api()?.device_set_mem_pool)(ordinal(device)?, pool.0)
        })
    }

    fn pool_create(props: &RawPoolProps) -> Result<RocmPool> {
        let handle_types = match props.handle_types {
            0 => sys::hipMemHandleTypeNone,
            1 => sys::hipMemHandleTypePosixFileDescriptor,
            other => return Err(unsupported(format!("export handle type mask {other:#x}"))),
        };
        let api = api()?;
        let mut p = sys::hipMemPoolProps::zeroed();
        p.allocType = sys::hipMemAllocationTypePinned;
        p.handleTypes = handle_types;
        p.location.type_ = sys::hipMemLocationTypeDevice;
        p.location.id = props.device;
        if props.max_size != 0 {
            let version = Self::runtime_version()?;
            if !pool_max_size_supported(version) {
                return Err(unsupported(format!(
                    "a pool max_size needs ROCm 6.2 or later (the loaded runtime is {})",
                    version_text(version)
                )));
            }
            p.maxSize = props.max_size;
        }
        let mut pool: sys::hipMemPool_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer and a fully initialised props struct of
        // the header's layout (maxSize stays 0, i.e. reserved, on runtimes
        // that do not read it).
        check("hipMemPoolCreate", unsafe {
            (api.mem_pool_create)(&mut pool, &p)
        })?;
        Ok(RocmPool(pool))
    }

    fn pool_destroy(pool: RocmPool) -> Result<()> {
        // SAFETY: the caller owns the pool and destroys it once; allocations
        // still outstanding keep the pool's memory alive inside the runtime.
        check("hipMemPoolDestroy", unsafe { (api()?.mem_pool_destroy)(pool.0) })
    }

    fn pool_get(pool: RocmPool, a: PoolAttr) -> Result<u64> {
        let api = api()?;
        if a.is_flag() {
            let mut v: c_int = 0;
            // SAFETY: flag attributes are `int`.
            check("hipMemPoolGetAttribute", unsafe {
                (api.mem_pool_get_attribute)(pool.0, attr(a), (&mut v as *mut c_int).cast())
            })?;
            Ok(u64::from(v != 0))
        } else {
            let mut v: u64 = 0;
            // SAFETY: the other attributes are `uint64_t`.
            check("hipMemPoolGetAttribute", unsafe {
                (api.mem_pool_get_attribute)(pool.0, attr(a), (&mut v as *mut u64).cast())
            })?;
            Ok(v)
        }
    }

    fn pool_set(pool: RocmPool, a: PoolAttr, value: u64) -> Result<()> {
        let api = api()?;
        if a.is_flag() {
            let mut v: c_int = c_int::from(value != 0);
            // SAFETY: flag attributes are `int`.
            check("hipMemPoolSetAttribute", unsafe {
                (api.mem_pool_set_attribute)(pool.0, attr(a), (&mut v as *mut c_int).cast())
            })
        } else {
            let mut v: u64 = value;
            // SAFETY: the other attributes are `uint64_t`.
            check("hipMemPoolSetAttribute", unsafe {
                (api.mem_pool_set_attribute)(pool.0, attr(a), (&mut v as *mut u64).cast())
            })
        }
    }

    fn pool_trim_to(pool: RocmPool, keep_bytes: usize) -> Result<()> {
        // SAFETY: pool handle made by this backend.
        check("hipMemPoolTrimTo", unsafe {
            (api()?.mem_pool_trim_to)(pool.0, keep_bytes)
        })
    }

    fn pool_as_raw(pool: RocmPool) -> *mut c_void {
        pool.0.cast()
    }

    fn can_access_peer(device: usize, peer: usize) -> Result<bool> {
        let mut v: c_int = 0;
        // SAFETY: valid out-pointer.
        check("hipDeviceCanAccessPeer", unsafe {
            (api()?.device_can_access_peer)(&mut v, ordinal(device)?, ordinal(peer)?)
        })?;
        Ok(v != 0)
    }

    fn pool_set_access(pool: RocmPool, device: usize, access: u32) -> Result<()> {
        let desc = sys::hipMemAccessDesc {
            location: sys::hipMemLocation {
                type_: sys::hipMemLocationTypeDevice,
                id: ordinal(device)?,
            },
            flags: access,
        };
        // SAFETY: one valid descriptor; the runtime validates the values.
        check("hipMemPoolSetAccess", unsafe {
            (api()?.mem_pool_set_access)(pool.0, &desc, 1)
        })
    }

    fn pool_get_access(pool: RocmPool, device: usize) -> Result<u32> {
        let mut location = sys::hipMemLocation {
            type_: sys::hipMemLocationTypeDevice,
            id: ordinal(device)?,
        };
        let mut flags = 0u32;
        // SAFETY: valid out-pointer and location.
        check("hipMemPoolGetAccess", unsafe {
            (api()?.mem_pool_get_access)(&mut flags, pool.0, &mut location)
        })?;
        Ok(flags)
    }

    fn pool_export_fd(pool: RocmPool) -> Result<i32> {
        let mut fd: c_int = -1;
        // SAFETY: for the POSIX fd handle type the runtime writes an int.
        check("hipMemPoolExportToShareableHandle", unsafe {
            (api()?.mem_pool_export_to_shareable_handle)(
                (&mut fd as *mut c_int).cast(),
                pool.0,
                sys::hipMemHandleTypePosixFileDescriptor,
                0,
            )
        })?;
        Ok(fd)
    }

    fn pool_import_fd(fd: i32) -> Result<RocmPool> {
        let mut pool: sys::hipMemPool_t = std::ptr::null_mut();
        // SAFETY: for the POSIX fd handle type the handle argument is the
        // descriptor's value itself; the runtime does not take ownership.
        check("hipMemPoolImportFromShareableHandle", unsafe {
            (api()?.mem_pool_import_from_shareable_handle)(
                &mut pool,
                fd as isize as *mut c_void,
                sys::hipMemHandleTypePosixFileDescriptor,
                0,
            )
        })?;
        Ok(RocmPool(pool))
    }

    fn pool_export_pointer(ptr: DevicePtr) -> Result<[u8; 64]> {
        let mut data = [0u8; 64];
        // SAFETY: 64 writable bytes (hipMemPoolPtrExportData); the runtime
        // validates the address.
        check("hipMemPoolExportPointer", unsafe {
            (api()?.mem_pool_export_pointer)(&mut data, ptr.as_mut_ptr())
        })?;
        Ok(data)
    }

    fn pool_import_pointer(pool: RocmPool, data: &[u8; 64]) -> Result<DevicePtr> {
        let mut copy = *data;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the runtime only reads the 64 bytes.
        check("hipMemPoolImportPointer", unsafe {
            (api()?.mem_pool_import_pointer)(&mut p, pool.0, &mut copy)
        })?;
        Ok(DevicePtr(p as usize))
    }

    #[inline]
    fn malloc_async(bytes: usize, stream: RocmStream) -> Result<DevicePtr> {
        if bytes == 0 {
            // ROCm < 5.6 fails a 0-byte hipMallocAsync; the safe layer never
            // asks for one.
            return Err(Error::invalid("a stream-ordered allocation of 0 bytes"));
        }
        let api = api()?;
        refuse_alloc_in_capture(api, "hipMallocAsync", stream)?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the runtime validates the stream.
        let code = unsafe { (api.malloc_async)(&mut p, bytes, stream.0) };
        check_alloc("hipMallocAsync", code, bytes)?;
        Ok(DevicePtr(p as usize))
    }

    #[inline]
    fn malloc_from_pool_async(bytes: usize, pool: RocmPool, stream: RocmStream) -> Result<DevicePtr> {
        if bytes == 0 {
            return Err(Error::invalid("a stream-ordered allocation of 0 bytes"));
        }
        let api = api()?;
        refuse_alloc_in_capture(api, "hipMallocFromPoolAsync", stream)?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the runtime validates pool and stream.
        let code = unsafe { (api.malloc_from_pool_async)(&mut p, bytes, pool.0, stream.0) };
        check_alloc("hipMallocFromPoolAsync", code, bytes)?;
        Ok(DevicePtr(p as usize))
    }

    #[inline]
    unsafe fn free_async(ptr: DevicePtr, stream: RocmStream) -> Result<()> {
        if ptr == DevicePtr::NULL {
            // hipFreeAsync(NULL) fails before ROCm 5.6 and is a no-op after.
            return Ok(());
        }
        let api = api()?;
        refuse_alloc_in_capture(api, "hipFreeAsync", stream)?;
        // SAFETY: the caller guarantees `ptr` is a live stream-ordered
        // allocation that nothing uses after this point in stream order.
        check("hipFreeAsync", unsafe {
            (api.free_async)(ptr.as_mut_ptr(), stream.0)
        })
    }

    fn malloc_sync(device: usize, bytes: usize) -> Result<DevicePtr> {
        if bytes == 0 {
            return Err(Error::invalid("a synchronous allocation of 0 bytes"));
        }
        let _device = DeviceGuard::<Rocm>::set(device)?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let code = unsafe { (api()?.malloc)(&mut p, bytes) };
        check_alloc("hipMalloc", code, bytes)?;
        Ok(DevicePtr(p as usize))
    }

    unsafe fn free_sync(device: usize, ptr: DevicePtr) -> Result<()> {
        if ptr == DevicePtr::NULL {
            return Ok(());
        }
        let _device = DeviceGuard::<Rocm>::set(device)?;
        // SAFETY: the caller guarantees `ptr` came from hipMalloc and is
        // live; hipFree waits for the device before releasing it.
        check("hipFree", unsafe { (api()?.free)(ptr.as_mut_ptr()) })
    }

    unsafe fn copy_async(
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        stream: RocmStream,
    ) -> Result<()> {
        // SAFETY: the caller guarantees both ranges (see the trait); the
        // default kind lets the runtime infer the direction.
        check("hipMemcpyAsync", unsafe {
            (api()?.memcpy_async)(dst, src, bytes, sys::hipMemcpyDefault, stream.0)
        })
    }

    unsafe fn memset_async(dst: DevicePtr, value: u8, bytes: usize, stream: RocmStream) -> Result<()> {
        // SAFETY: the caller guarantees the range (see the trait).
        check("hipMemsetAsync", unsafe {
            (api()?.memset_async)(dst.as_mut_ptr(), c_int::from(value), bytes, stream.0)
        })
    }

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

    fn module_function(module: RocmModule, name: &CStr) -> Result<RocmFunction> {
        let mut f: sys::hipFunction_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer and NUL-terminated name.
        check("hipModuleGetFunction", unsafe {
            (api()?.module_get_function)(&mut f, module.0, name.as_ptr())
        })?;
        Ok(RocmFunction(f))
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
    fn stream_capture_status(stream: RocmStream) -> Result<CaptureStatus> {
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

    fn stream_begin_capture(stream: RocmStream, mode: RawCaptureMode) -> Result<()> {
        // SAFETY: the runtime validates the stream; the mode is one of the
        // three enum values.
        check("hipStreamBeginCapture", unsafe {
            (api()?.stream_begin_capture)(stream.0, common::capture_mode(mode))
        })
    }

    fn stream_end_capture(stream: RocmStream) -> Result<RocmGraph> {
        let api = api()?;
        let mut graph: sys::hipGraph_t = std::ptr::null_mut();
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
            return Err(common::vendor::<RocmCodes>("hipStreamEndCapture", code));
        }
        Ok(RocmGraph(graph))
    }

    fn graph_destroy(graph: RocmGraph) -> Result<()> {
        // SAFETY: the caller owns the graph and destroys it once.
        check("hipGraphDestroy", unsafe { (api()?.graph_destroy)(graph.0) })
    }

    fn graph_instantiate(graph: RocmGraph, auto_free_on_launch: bool) -> Result<RocmGraphExec> {
        let flags = if auto_free_on_launch {
            sys::hipGraphInstantiateFlagAutoFreeOnLaunch
        } else {
            0
        };
        let mut exec: sys::hipGraphExec_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; a graph made by this backend; a
        // documented flag (accepted since ROCm 4.5).
        check("hipGraphInstantiateWithFlags", unsafe {
            (api()?.graph_instantiate_with_flags)(&mut exec, graph.0, flags)
        })?;
        Ok(RocmGraphExec(exec))
    }

    fn graph_exec_destroy(exec: RocmGraphExec) -> Result<()> {
        // SAFETY: the caller owns the executable graph and destroys it once.
        check("hipGraphExecDestroy", unsafe {
            (api()?.graph_exec_destroy)(exec.0)
        })
    }

    fn graph_launch(exec: RocmGraphExec, stream: RocmStream) -> Result<()> {
        // SAFETY: handles made by this backend; the runtime validates them.
        check("hipGraphLaunch", unsafe {
            (api()?.graph_launch)(exec.0, stream.0)
        })
    }

    fn graph_upload(exec: RocmGraphExec, stream: RocmStream) -> Result<()> {
        let upload = api()?.graph_upload.get::<RocmCodes>()?;
        // SAFETY: handles made by this backend; the runtime validates them.
        check("hipGraphUpload", unsafe { upload(exec.0, stream.0) })
    }

    fn graph_mem_get(device: usize, attr: GraphMemAttr) -> Result<u64> {
        let get = api()?.device_get_graph_mem_attribute.get::<RocmCodes>()?;
        // Zeroed: ROCm 5.3/5.4 write only 32 bits (a 0) into it.
        let mut value = 0u64;
        // SAFETY: every graph-memory attribute is a `uint64_t`.
        check("hipDeviceGetGraphMemAttribute", unsafe {
            get(
                ordinal(device)?,
                common::graph_mem_attr(attr),
                (&mut value as *mut u64).cast(),
            )
        })?;
        Ok(value)
    }

    fn graph_mem_trim(device: usize) -> Result<()> {
        let trim = api()?.device_graph_mem_trim.get::<RocmCodes>()?;
        // SAFETY: plain value argument.
        check("hipDeviceGraphMemTrim", unsafe { trim(ordinal(device)?) })
    }

    unsafe fn graph_retain_release(graph: RocmGraph, release: GraphRelease, data: *mut c_void) -> Result<()> {
        let api = api()?;
        let create = api.user_object_create.get::<RocmCodes>()?;
        let retain = api.graph_retain_user_object.get::<RocmCodes>()?;
        let mut object: sys::hipUserObject_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the caller guarantees `release(data)`
        // may run once, later, on a runtime thread (see the trait).
        check("hipUserObjectCreate", unsafe {
            create(
                &mut object,
                data,
                Some(release),
                1,
                sys::hipUserObjectNoDestructorSync,
            )
        })?;
        // SAFETY: both handles are live; with the Move flag the graph takes
        // over the one reference made above. Should this fail, the object
        // keeps that reference: it leaks and `release` is never called, so
        // the caller still owns `data` (the trait's error contract).
        check("hipGraphRetainUserObject", unsafe {
            retain(graph.0, object, 1, sys::hipGraphUserObjectMove)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::VendorCode;

    #[test]
    fn init_and_device_count_fail_cleanly_without_gpu() {
        match Rocm::init() {
            Ok(()) => match Rocm::device_count() {
                Ok(_) => {}
                Err(Error::NoDevice { backend, .. }) => assert_eq!(backend, "rocm"),
                Err(e) => panic!("device_count: unexpected error {e}"),
            },
            Err(Error::RuntimeNotFound {
                library, searched, ..
            }) => {
                assert_eq!(library, "libamdhip64");
                assert!(searched.iter().any(|s| s == "libamdhip64.so"));
            }
            Err(e) => panic!("init: unexpected error {e}"),
        }
    }

    #[test]
    fn error_codes_map_like_cuda() {
        assert!(matches!(
            common::vendor::<RocmCodes>("hipGetDeviceCount", 100),
            Error::NoDevice { backend: "rocm", .. }
        ));
        assert!(matches!(
            common::vendor::<RocmCodes>("hipGetDeviceCount", 35),
            Error::NoDevice { backend: "rocm", .. }
        ));
        assert!(matches!(
            common::vendor::<RocmCodes>("hipMemPoolCreate", 801),
            Error::Unsupported { backend: "rocm", .. }
        ));
        match common::vendor::<RocmCodes>("hipStreamSynchronize", 1) {
            Error::Vendor { call, code, .. } => {
                assert_eq!(call, "hipStreamSynchronize");
                assert_eq!(code, VendorCode(1));
            }
            e => panic!("unexpected {e}"),
        }
        // A code no runtime knows is still just data.
        assert!(matches!(
            common::vendor::<RocmCodes>("hipFoo", 123_456),
            Error::Vendor { .. }
        ));
        assert!(matches!(
            check_alloc("hipMallocAsync", 2, 64),
            Err(Error::OutOfMemory {
                requested: 64,
                stats: None
            })
        ));
        assert!(check_alloc("hipMallocAsync", 0, 64).is_ok());
        // Outside the malloc calls, 2 is an ordinary vendor error.
        assert!(matches!(check("hipMemPoolCreate", 2), Err(Error::Vendor { .. })));
    }

    #[test]
    fn max_size_needs_rocm_6_2() {
        assert!(!pool_max_size_supported(50_221_153)); // ROCm 5.2.3
        assert!(!pool_max_size_supported(60_140_091)); // ROCm 6.1
        assert!(pool_max_size_supported(60_200_000)); // ROCm 6.2.0
        assert!(pool_max_size_supported(70_000_000)); // ROCm 7.0
        assert!(!pool_max_size_supported(12_010)); // HIP on CUDA 12.1
        assert!(pool_max_size_supported(12_080)); // HIP on CUDA 12.8
        assert_eq!(version_text(50_221_153), "HIP 5.2");
        assert_eq!(version_text(60_203_000), "HIP 6.2");
    }

    #[test]
    fn hip_gaps_are_errors_not_no_ops() {
        // Checked before any runtime call, so these hold with or without one.
        let props = RawPoolProps {
            device: 0,
            max_size: 0,
            handle_types: 2,
        };
        assert!(matches!(
            Rocm::pool_create(&props),
            Err(Error::Unsupported { backend: "rocm", .. })
        ));
        let null_stream = Rocm::stream_from_raw(std::ptr::null_mut());
        assert!(matches!(
            Rocm::malloc_async(0, null_stream),
            Err(Error::InvalidArgument { .. })
        ));
        let null_pool = RocmPool(std::ptr::null_mut());
        assert!(matches!(
            Rocm::malloc_from_pool_async(0, null_pool, null_stream),
            Err(Error::InvalidArgument { .. })
        ));
        // SAFETY: a null pointer is never passed to the runtime.
        assert!(unsafe { Rocm::free_async(DevicePtr::NULL, null_stream) }.is_ok());
    }

    #[test]
    fn alloc_in_capture_needs_rocm_5_5() {
        assert!(!alloc_in_capture_supported(50_221_153)); // ROCm 5.2.3
        assert!(!alloc_in_capture_supported(50_403_000)); // ROCm 5.4
        assert!(alloc_in_capture_supported(50_500_000)); // ROCm 5.5.0
        assert!(alloc_in_capture_supported(60_213_000)); // the HIP-on-CUDA shim
        assert!(alloc_in_capture_supported(70_000_000));
        assert!(alloc_in_capture_supported(12_080)); // HIP on NVIDIA: CUDA
    }

    unsafe extern "C" fn never_called(_: *mut c_void) {
        unreachable!("no graph exists in this test")
    }

    #[test]
    fn graph_calls_an_old_runtime_lacks_are_unsupported_with_both_versions() {
        let Ok(version) = Rocm::init().and_then(|()| Rocm::runtime_version()) else {
            return; // no runtime here
        };
        if !(sys::HIP_VERSION_MAJOR_SCALE..50_300_000).contains(&version) {
            return; // a runtime that has them; needs a device to go on
        }
        let text = version_text(version);
        let expect = |r: Result<()>, call: &str, since: &str| match r {
            Err(Error::Unsupported {
                backend: "rocm",
                what,
            }) => {
                assert_eq!(
                    what,
                    format!("{call} needs {since} or later; this runtime is {text}")
                )
            }
            other => panic!("{call}: expected Unsupported, got {other:?}"),
        };
        let (exec, stream) = (
            RocmGraphExec(std::ptr::null_mut()),
            RocmStream(std::ptr::null_mut()),
        );
        expect(Rocm::graph_upload(exec, stream), "hipGraphUpload", "ROCm 5.5");
        let used = Rocm::graph_mem_get(0, GraphMemAttr::UsedMemCurrent).map(|_| ());
        expect(used, "hipDeviceGetGraphMemAttribute", "ROCm 5.3");
        expect(Rocm::graph_mem_trim(0), "hipDeviceGraphMemTrim", "ROCm 5.3");
        // SAFETY: refused before any runtime call; `never_called` is not
        // handed to the runtime.
        let retained = unsafe {
            Rocm::graph_retain_release(
                RocmGraph(std::ptr::null_mut()),
                never_called,
                std::ptr::null_mut(),
            )
        };
        expect(retained, "hipUserObjectCreate", "ROCm 5.3");
    }

    #[test]
    fn a_failed_call_leaves_the_runtimes_last_error() {
        if Rocm::init().is_err() {
            return; // no runtime here
        }
        if Rocm::device_count().is_ok() {
            return; // a GPU: hipGetDeviceCount does not fail
        }
        // The same library again (dlopen hands back the loaded one).
        let lib = library_candidates()
            .into_iter()
            // SAFETY: the runtime is loaded already; opening it again runs
            // no initialiser.
            .find_map(|name| unsafe { libloading::Library::new(name) }.ok())
            .expect("the loaded runtime opens again");
        // SAFETY: `hipError_t hipGetLastError(void)` in every HIP.
        let last = unsafe { lib.get::<unsafe extern "C" fn() -> i32>(b"hipGetLastError\0") }
            .expect("hipGetLastError");
        // SAFETY: no arguments.
        let code = unsafe { last() };
        // Not cleared by somalloc. (Which code it is varies: ROCm 5.2
        // without a GPU reports hipErrorInvalidDevice from its own
        // initialisation; the HIP-on-CUDA shim reports hipGetDeviceCount's.)
        assert_ne!(code, sys::hipSuccess, "the failed call's last error was cleared");
    }

    #[test]
    fn max_size_on_an_old_runtime_is_unsupported() {
        let Ok(version) = Rocm::init().and_then(|()| Rocm::runtime_version()) else {
            return; // no runtime here
        };
        if pool_max_size_supported(version) {
            return; // a runtime that reads maxSize; needs a device to go on
        }
        let props = RawPoolProps {
            device: 0,
            max_size: 1 << 20,
            handle_types: 0,
        };
        assert!(matches!(
            Rocm::pool_create(&props),
            Err(Error::Unsupported { backend: "rocm", .. })
        ));
    }
}
