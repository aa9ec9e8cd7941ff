//! The CUDA backend: the CUDA runtime API, loaded at run time.
//!
//! Types and constants come from `cudarc::runtime::sys` (generated from the
//! CUDA headers of the selected version). The functions are loaded here from
//! `libcudart` with one difference from cudarc's own wrappers: every function
//! is declared to return a plain `i32`. cudarc declares `cudaError_t` as a
//! Rust enum, and a code that a newer runtime adds would then be an invalid
//! enum value, which is undefined behaviour. As an `i32` it is just data
//! ([`VendorCode`](crate::VendorCode)). Loading ourselves also turns a missing library or symbol
//! into [`Error::RuntimeNotFound`] instead of a panic.

#[path = "sys.rs"]
mod sys;

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::mem::MaybeUninit;
use std::sync::OnceLock;

use cudarc::runtime::sys as rt;

use super::common::{self, c_str, handle, ordinal, runtime_api, Codes, SUCCESS};
use crate::backend::{
    Backend, CaptureInfo, CaptureStatus, DevicePtr, GraphMemAttr, GraphRelease, PoolAttr, RawCaptureMode,
    RawPoolProps,
};
use crate::error::{Error, Result};

/// CUDA major version of the bindings this crate was built with. The runtime
/// that is loaded must have the same major version: struct layouts differ
/// between majors.
const BUILT_MAJOR: i32 = if cfg!(any(
    feature = "cuda-12060",
    feature = "cuda-12080",
    feature = "cuda-12090"
)) {
    12
} else {
    13
};

/// In CUDA 12 headers `cudaGetDeviceProperties` is a macro for the `_v2`
/// symbol; CUDA 13 exports the current layout under the plain name.
const GET_PROPS_SYMBOL: &str = if BUILT_MAJOR >= 13 {
    "cudaGetDeviceProperties\0"
} else {
    "cudaGetDeviceProperties_v2\0"
};

runtime_api! {
    fn get_error_name = "cudaGetErrorName\0"; (i32) -> *const c_char;
    fn get_error_string = "cudaGetErrorString\0"; (i32) -> *const c_char;
    fn get_last_error = "cudaGetLastError\0"; () -> i32;
    fn runtime_get_version = "cudaRuntimeGetVersion\0"; (*mut c_int) -> i32;
    fn get_device_count = "cudaGetDeviceCount\0"; (*mut c_int) -> i32;
    fn set_device = "cudaSetDevice\0"; (c_int) -> i32;
    fn get_device_properties = GET_PROPS_SYMBOL; (*mut rt::cudaDeviceProp, c_int) -> i32;
    fn device_get_attribute = "cudaDeviceGetAttribute\0"; (*mut c_int, rt::cudaDeviceAttr, c_int) -> i32;
    fn mem_get_info = "cudaMemGetInfo\0"; (*mut usize, *mut usize) -> i32;
    fn stream_create_with_flags = "cudaStreamCreateWithFlags\0"; (*mut rt::cudaStream_t, c_uint) -> i32;
    fn stream_destroy = "cudaStreamDestroy\0"; (rt::cudaStream_t) -> i32;
    fn stream_synchronize = "cudaStreamSynchronize\0"; (rt::cudaStream_t) -> i32;
    fn stream_wait_event = "cudaStreamWaitEvent\0"; (rt::cudaStream_t, rt::cudaEvent_t, c_uint) -> i32;
    fn event_create_with_flags = "cudaEventCreateWithFlags\0"; (*mut rt::cudaEvent_t, c_uint) -> i32;
    fn event_destroy = "cudaEventDestroy\0"; (rt::cudaEvent_t) -> i32;
    fn event_record = "cudaEventRecord\0"; (rt::cudaEvent_t, rt::cudaStream_t) -> i32;
    fn event_synchronize = "cudaEventSynchronize\0"; (rt::cudaEvent_t) -> i32;
    fn event_elapsed_time = "cudaEventElapsedTime\0"; (*mut f32, rt::cudaEvent_t, rt::cudaEvent_t) -> i32;
    fn device_get_default_mem_pool = "cudaDeviceGetDefaultMemPool\0"; (*mut rt::cudaMemPool_t, c_int) -> i32;
    fn device_get_mem_pool = "cudaDeviceGetMemPool\0"; (*mut rt::cudaMemPool_t, c_int) -> i32;
    fn device_set_mem_pool = "cudaDeviceSetMemPool\0"; (c_int, rt::cudaMemPool_t) -> i32;
    fn mem_pool_create = "cudaMemPoolCreate\0"; (*mut rt::cudaMemPool_t, *const rt::cudaMemPoolProps) -> i32;
    fn mem_pool_destroy = "cudaMemPoolDestroy\0"; (rt::cudaMemPool_t) -> i32;
    fn mem_pool_set_attribute = "cudaMemPoolSetAttribute\0"; (rt::cudaMemPool_t, rt::cudaMemPoolAttr, *mut c_void) -> i32;
    fn mem_pool_get_attribute = "cudaMemPoolGetAttribute\0"; (rt::cudaMemPool_t, rt::cudaMemPoolAttr, *mut c_void) -> i32;
    fn mem_pool_trim_to = "cudaMemPoolTrimTo\0"; (rt::cudaMemPool_t, usize) -> i32;
    fn device_can_access_peer = "cudaDeviceCanAccessPeer\0"; (*mut c_int, c_int, c_int) -> i32;
    fn mem_pool_set_access = "cudaMemPoolSetAccess\0"; (rt::cudaMemPool_t, *const AccessDesc, usize) -> i32;
    // The flags out-parameter is written by the runtime: a plain u32 here, so
    // an unexpected value is data, not an invalid enum.
    fn mem_pool_get_access = "cudaMemPoolGetAccess\0"; (*mut u32, rt::cudaMemPool_t, *mut AccessLocation) -> i32;
    fn mem_pool_export_to_shareable_handle = "cudaMemPoolExportToShareableHandle\0"; (
        *mut c_void, rt::cudaMemPool_t, rt::cudaMemAllocationHandleType, c_uint,
    ) -> i32;
    fn mem_pool_import_from_shareable_handle = "cudaMemPoolImportFromShareableHandle\0"; (
        *mut rt::cudaMemPool_t, *mut c_void, rt::cudaMemAllocationHandleType, c_uint,
    ) -> i32;
    fn mem_pool_export_pointer = "cudaMemPoolExportPointer\0"; (*mut [u8; 64], *mut c_void) -> i32;
    fn mem_pool_import_pointer = "cudaMemPoolImportPointer\0"; (*mut *mut c_void, rt::cudaMemPool_t, *mut [u8; 64]) -> i32;
    fn malloc_async = "cudaMallocAsync\0"; (*mut *mut c_void, usize, rt::cudaStream_t) -> i32;
    fn malloc_from_pool_async = "cudaMallocFromPoolAsync\0"; (*mut *mut c_void, usize, rt::cudaMemPool_t, rt::cudaStream_t) -> i32;
    fn free_async = "cudaFreeAsync\0"; (*mut c_void, rt::cudaStream_t) -> i32;
    fn malloc = "cudaMalloc\0"; (*mut *mut c_void, usize) -> i32;
    fn free = "cudaFree\0"; (*mut c_void) -> i32;
    fn memcpy_async = "cudaMemcpyAsync\0"; (*mut c_void, *const c_void, usize, rt::cudaMemcpyKind, rt::cudaStream_t) -> i32;
    fn memset_async = "cudaMemsetAsync\0"; (*mut c_void, c_int, usize, rt::cudaStream_t) -> i32;
    fn library_load_data = "cudaLibraryLoadData\0"; (
        *mut rt::cudaLibrary_t, *const c_void,
        *mut rt::cudaJitOption, *mut *mut c_void, c_uint,
        *mut rt::cudaLibraryOption, *mut *mut c_void, c_uint,
    ) -> i32;
    fn library_unload = "cudaLibraryUnload\0"; (rt::cudaLibrary_t) -> i32;
    fn library_get_kernel = "cudaLibraryGetKernel\0"; (*mut rt::cudaKernel_t, rt::cudaLibrary_t, *const c_char) -> i32;
    fn launch_kernel = "cudaLaunchKernel\0"; (*const c_void, rt::dim3, rt::dim3, *mut *mut c_void, usize, rt::cudaStream_t) -> i32;
}

/// `cudaMemLocation` as the access calls use it (type, id); laid out like
/// cudarc's type, with integers instead of enums.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct AccessLocation {
    type_: u32,
    id: c_int,
}

/// `cudaMemAccessDesc` with integer fields.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct AccessDesc {
    location: AccessLocation,
    flags: u32,
}

const _: () = {
    assert!(std::mem::size_of::<AccessLocation>() == std::mem::size_of::<rt::cudaMemLocation>());
    assert!(std::mem::size_of::<AccessDesc>() == std::mem::size_of::<rt::cudaMemAccessDesc>());
    assert!(std::mem::size_of::<[u8; 64]>() == std::mem::size_of::<rt::cudaMemPoolPtrExportData>());
};

fn device_location(device: usize) -> Result<AccessLocation> {
    Ok(AccessLocation {
        type_: rt::cudaMemLocationType::cudaMemLocationTypeDevice as u32,
        id: ordinal(device)?,
    })
}

/// `$SOMALLOC_CUDART` alone when it is set (so a deployment, or a test, can
/// pin the exact library), else the runtime of the bindings' major version.
fn library_candidates() -> Vec<String> {
    match std::env::var("SOMALLOC_CUDART") {
        Ok(explicit) if !explicit.is_empty() => vec![explicit],
        _ => vec![format!("libcudart.so.{BUILT_MAJOR}"), "libcudart.so".to_string()],
    }
}

fn load_api() -> Result<Api> {
    let searched = library_candidates();
    let not_found = |reason: String| Error::RuntimeNotFound {
        library: "libcudart",
        searched: searched.clone(),
        reason,
    };
    let mut last_error = String::from("no candidate");
    for name in &searched {
        // SAFETY: loading libcudart runs its initialisers, which have no
        // preconditions on the caller.
        match unsafe { libloading::Library::new(name) } {
            Ok(lib) => {
                // SAFETY: the major version is checked right below, before any
                // other symbol is used; cudaRuntimeGetVersion has had the same
                // signature in every CUDA version.
                let api = unsafe { Api::load(lib) }.map_err(|e| not_found(format!("{name}: {e}")))?;
                let mut version = 0;
                // SAFETY: valid out-pointer.
                let code = unsafe { (api.runtime_get_version)(&mut version) };
                if code != SUCCESS {
                    return Err(not_found(format!(
                        "{name}: cudaRuntimeGetVersion returned {code}"
                    )));
                }
                if version / 1000 != BUILT_MAJOR {
                    return Err(not_found(format!(
                        "{name} is CUDA {}.{}, but somalloc was built with CUDA {BUILT_MAJOR}.x bindings",
                        version / 1000,
                        (version % 1000) / 10
                    )));
                }
                return Ok(api);
            }
            Err(e) => last_error = e.to_string(),
        }
    }
    Err(not_found(last_error))
}

fn api() -> Result<&'static Api> {
    static API: OnceLock<std::result::Result<Api, Error>> = OnceLock::new();
    API.get_or_init(load_api).as_ref().map_err(Clone::clone)
}

/// Error texts of the CUDA runtime.
struct CudaCodes;

impl Codes for CudaCodes {
    const BACKEND: &'static str = "cuda";

    fn texts(code: i32) -> (String, String) {
        match api() {
            // SAFETY: both functions accept any code and return a static
            // string (or an "unrecognized error code" string).
            Ok(a) => unsafe { (c_str((a.get_error_name)(code)), c_str((a.get_error_string)(code))) },
            Err(_) => (String::new(), String::new()),
        }
    }

    fn clear_last_error() {
        if let Ok(a) = api() {
            // SAFETY: no arguments.
            unsafe { (a.get_last_error)() };
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
    rt::cudaStream_t
);
handle!(
    /// `cudaEvent_t`.
    CudaEvent,
    rt::cudaEvent_t
);
handle!(
    /// `cudaMemPool_t`.
    CudaPool,
    rt::cudaMemPool_t
);
handle!(
    /// `cudaLibrary_t`.
    CudaModule,
    rt::cudaLibrary_t
);
handle!(
    /// `cudaKernel_t`.
    CudaFunction,
    rt::cudaKernel_t
);

fn attr(a: PoolAttr) -> rt::cudaMemPoolAttr {
    use rt::cudaMemPoolAttr as A;
    match a {
        PoolAttr::ReuseFollowEventDependencies => A::cudaMemPoolReuseFollowEventDependencies,
        PoolAttr::ReuseAllowOpportunistic => A::cudaMemPoolReuseAllowOpportunistic,
        PoolAttr::ReuseAllowInternalDependencies => A::cudaMemPoolReuseAllowInternalDependencies,
        PoolAttr::ReleaseThreshold => A::cudaMemPoolAttrReleaseThreshold,
        PoolAttr::ReservedMemCurrent => A::cudaMemPoolAttrReservedMemCurrent,
        PoolAttr::ReservedMemHigh => A::cudaMemPoolAttrReservedMemHigh,
        PoolAttr::UsedMemCurrent => A::cudaMemPoolAttrUsedMemCurrent,
        PoolAttr::UsedMemHigh => A::cudaMemPoolAttrUsedMemHigh,
    }
}

handle!(
    /// A graph handle (not yet implemented by this backend).
    GraphHandle,
    *mut c_void
);
handle!(
    /// An executable graph handle (not yet implemented by this backend).
    GraphExecHandle,
    *mut c_void
);

/// The CUDA backend.
#[derive(Debug)]
pub(crate) struct Cuda;

impl Backend for Cuda {
    type Stream = CudaStream;
    type Event = CudaEvent;
    type Pool = CudaPool;
    type Module = CudaModule;
    type Function = CudaFunction;
    type Graph = GraphHandle;
    type GraphExec = GraphExecHandle;

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
        // SAFETY: plain value argument.
        check("cudaSetDevice", unsafe { (api()?.set_device)(ordinal(device)?) })
    }

    fn device_name(device: usize) -> Result<String> {
        let mut props = MaybeUninit::<rt::cudaDeviceProp>::zeroed();
        // SAFETY: the out-pointer covers a whole cudaDeviceProp of the
        // runtime's major version (checked at load).
        check("cudaGetDeviceProperties", unsafe {
            (api()?.get_device_properties)(props.as_mut_ptr(), ordinal(device)?)
        })?;
        // SAFETY: the call succeeded and filled the struct; an all-zero
        // cudaDeviceProp is valid too (it is plain integers and arrays).
        let props = unsafe { props.assume_init() };
        let bytes: Vec<u8> = props
            .name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    fn mem_info(device: usize) -> Result<(usize, usize)> {
        Self::set_device(device)?;
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
            (api()?.device_get_attribute)(
                &mut v,
                rt::cudaDeviceAttr::cudaDevAttrMemoryPoolsSupported,
                ordinal(device)?,
            )
        })?;
        Ok(v != 0)
    }

    fn stream_create(device: usize) -> Result<CudaStream> {
        Self::set_device(device)?;
        let mut s: rt::cudaStream_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the flag is a documented constant.
        check("cudaStreamCreateWithFlags", unsafe {
            (api()?.stream_create_with_flags)(&mut s, rt::cudaStreamNonBlocking)
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
        Self::set_device(device)?;
        let flags = if timing { 0 } else { rt::cudaEventDisableTiming };
        let mut e: rt::cudaEvent_t = std::ptr::null_mut();
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
        let mut p: rt::cudaMemPool_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("cudaDeviceGetDefaultMemPool", unsafe {
            (api()?.device_get_default_mem_pool)(&mut p, ordinal(device)?)
        })?;
        Ok(CudaPool(p))
    }

    fn current_pool(device: usize) -> Result<CudaPool> {
        let mut p: rt::cudaMemPool_t = std::ptr::null_mut();
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
        use rt::cudaMemAllocationHandleType as H;
        let handle_types = match props.handle_types {
            0 => H::cudaMemHandleTypeNone,
            1 => H::cudaMemHandleTypePosixFileDescriptor,
            other => {
                return Err(Error::Unsupported {
                    backend: "cuda",
                    what: format!("export handle type mask {other:#x}"),
                })
            }
        };
        // SAFETY: cudaMemPoolProps is plain data (integers, C enums whose
        // zero value exists, a pointer and bytes); all-zero is a valid value
        // and is what the runtime expects for unused fields.
        let mut p: rt::cudaMemPoolProps = unsafe { std::mem::zeroed() };
        p.allocType = rt::cudaMemAllocationType::cudaMemAllocationTypePinned;
        p.handleTypes = handle_types;
        p.location.type_ = rt::cudaMemLocationType::cudaMemLocationTypeDevice;
        p.location.id = props.device;
        p.maxSize = props.max_size;
        let mut pool: rt::cudaMemPool_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer and a fully initialised props struct.
        check("cudaMemPoolCreate", unsafe {
            (api()?.mem_pool_create)(&mut pool, &p)
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
        let desc = AccessDesc {
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
                rt::cudaMemAllocationHandleType::cudaMemHandleTypePosixFileDescriptor,
                0,
            )
        })?;
        Ok(fd)
    }

    fn pool_import_fd(fd: i32) -> Result<CudaPool> {
        let mut pool: rt::cudaMemPool_t = std::ptr::null_mut();
        // SAFETY: for the POSIX fd handle type the handle argument is the
        // descriptor's value itself; the runtime does not take ownership.
        check("cudaMemPoolImportFromShareableHandle", unsafe {
            (api()?.mem_pool_import_from_shareable_handle)(
                &mut pool,
                fd as isize as *mut c_void,
                rt::cudaMemAllocationHandleType::cudaMemHandleTypePosixFileDescriptor,
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
        Self::set_device(device)?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let code = unsafe { (api()?.malloc)(&mut p, bytes) };
        check_alloc("cudaMalloc", code, bytes)?;
        Ok(DevicePtr(p as usize))
    }

    unsafe fn free_sync(device: usize, ptr: DevicePtr) -> Result<()> {
        Self::set_device(device)?;
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
            (api()?.memcpy_async)(dst, src, bytes, rt::cudaMemcpyKind::cudaMemcpyDefault, stream.0)
        })
    }

    unsafe fn memset_async(dst: DevicePtr, value: u8, bytes: usize, stream: CudaStream) -> Result<()> {
        // SAFETY: the caller guarantees the range (see the trait).
        check("cudaMemsetAsync", unsafe {
            (api()?.memset_async)(dst.as_mut_ptr(), c_int::from(value), bytes, stream.0)
        })
    }

    fn module_load(image: &[u8]) -> Result<CudaModule> {
        let mut lib: rt::cudaLibrary_t = std::ptr::null_mut();
        // SAFETY: `image` is a complete fatbin/cubin/PTX image that outlives
        // the call (the runtime copies what it keeps); no JIT or library
        // options are passed.
        check("cudaLibraryLoadData", unsafe {
            (api()?.library_load_data)(
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
        check("cudaLibraryUnload", unsafe { (api()?.library_unload)(module.0) })
    }

    fn module_function(module: CudaModule, name: &CStr) -> Result<CudaFunction> {
        let mut k: rt::cudaKernel_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer and NUL-terminated name.
        check("cudaLibraryGetKernel", unsafe {
            (api()?.library_get_kernel)(&mut k, module.0, name.as_ptr())
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
        let grid = rt::dim3 { x: grid, y: 1, z: 1 };
        let block = rt::dim3 { x: block, y: 1, z: 1 };
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

    // Capture and graphs: the calls are wired in a following change.
    fn stream_capture_status(_stream: Self::Stream) -> Result<CaptureStatus> {
        Ok(CaptureStatus::None)
    }
    fn stream_capture_info(_stream: Self::Stream) -> Result<CaptureInfo<GraphHandle>> {
        Ok(CaptureInfo {
            status: CaptureStatus::None,
            id: 0,
            graph: None,
        })
    }
    fn stream_begin_capture(_stream: Self::Stream, _mode: RawCaptureMode) -> Result<()> {
        Err(not_wired())
    }
    fn stream_end_capture(_stream: Self::Stream) -> Result<GraphHandle> {
        Err(not_wired())
    }
    fn graph_destroy(_graph: GraphHandle) -> Result<()> {
        Err(not_wired())
    }
    fn graph_instantiate(_graph: GraphHandle, _auto_free_on_launch: bool) -> Result<GraphExecHandle> {
        Err(not_wired())
    }
    fn graph_exec_destroy(_exec: GraphExecHandle) -> Result<()> {
        Err(not_wired())
    }
    fn graph_launch(_exec: GraphExecHandle, _stream: Self::Stream) -> Result<()> {
        Err(not_wired())
    }
    fn graph_upload(_exec: GraphExecHandle, _stream: Self::Stream) -> Result<()> {
        Err(not_wired())
    }
    fn graph_mem_get(_device: usize, _attr: GraphMemAttr) -> Result<u64> {
        Err(not_wired())
    }
    fn graph_mem_trim(_device: usize) -> Result<()> {
        Err(not_wired())
    }
    unsafe fn graph_retain_release(
        _graph: GraphHandle,
        _release: GraphRelease,
        _data: *mut c_void,
    ) -> Result<()> {
        Err(not_wired())
    }
}

fn not_wired() -> Error {
    Error::Unsupported {
        backend: "cuda",
        what: "stream capture and graphs in this build".into(),
    }
}
