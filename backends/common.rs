//! What the vendor backends share: the symbol-table macro, the handle
//! newtype macro, the current-device guard, and the mapping of runtime codes
//! to [`Error`]. CUDA and HIP use the same numbers for the codes that get
//! their own `Error` variant. Pool locations and allocation types are in
//! `locations.rs`, the shared backend body in `shared.rs`, the tests in
//! `common_tests.rs`.
//!
//! # The runtime's last error
//!
//! A somalloc call that fails leaves the thread's "last error" of the runtime
//! (what `cudaGetLastError` / `hipGetLastError` return) as the failed
//! runtime call set it, like any failed runtime call does. somalloc never
//! reads or resets it: resetting would also swallow a pending error of the
//! caller's own kernel launch. The error somalloc returns already carries the
//! code, its name and message. The one exception is not an error: a query
//! of an event that answers `NotReady` (the work is still pending) takes that
//! answer back out of the last error if the runtime left it there, and only
//! that answer.

use std::ffi::{c_char, c_int, CStr};
use std::marker::PhantomData;
use std::sync::Arc;

use crate::backend::{CaptureInfo, CaptureStatus, GraphMemAttr, PoolAttr, RawCaptureMode};
use crate::error::{record_drop_error, Error, Result, VendorCode};

pub(crate) const SUCCESS: i32 = 0;
/// cudaErrorNotReady / hipErrorNotReady: a query's "still pending", not a
/// failure.
pub(crate) const NOT_READY: i32 = 600;
/// cudaErrorMemoryAllocation / hipErrorOutOfMemory.
pub(crate) const ERROR_OUT_OF_MEMORY: i32 = 2;
/// cudaErrorInsufficientDriver / hipErrorInsufficientDriver.
pub(crate) const ERROR_INSUFFICIENT_DRIVER: i32 = 35;
/// cudaErrorNoDevice / hipErrorNoDevice.
pub(crate) const ERROR_NO_DEVICE: i32 = 100;
/// cudaErrorNotSupported / hipErrorNotSupported.
pub(crate) const ERROR_NOT_SUPPORTED: i32 = 801;

#[path = "shared.rs"]
mod shared;
pub(crate) use shared::{backend_impl, shared_runtime_api};

#[path = "locations.rs"]
mod locations;
pub(crate) use locations::*;

/// `cudaMemPoolAttr` / `hipMemPoolAttr`, in `PoolAttr`'s order: the same
/// numbers on both (the backends assert theirs against these).
pub(crate) const POOL_ATTRS: [c_int; 8] = [1, 2, 3, 4, 5, 6, 7, 8];

pub(crate) fn pool_attr(a: PoolAttr) -> c_int {
    let index = match a {
        PoolAttr::ReuseFollowEventDependencies => 0,
        PoolAttr::ReuseAllowOpportunistic => 1,
        PoolAttr::ReuseAllowInternalDependencies => 2,
        PoolAttr::ReleaseThreshold => 3,
        PoolAttr::ReservedMemCurrent => 4,
        PoolAttr::ReservedMemHigh => 5,
        PoolAttr::UsedMemCurrent => 6,
        PoolAttr::UsedMemHigh => 7,
    };
    POOL_ATTRS[index]
}

// Stream capture and graph memory: CUDA and HIP number these the same (each
// backend asserts its own constants against these).
/// `cudaStreamCaptureStatus` / `hipStreamCaptureStatus`.
pub(crate) const CAPTURE_STATUS_NONE: c_int = 0;
pub(crate) const CAPTURE_STATUS_ACTIVE: c_int = 1;
pub(crate) const CAPTURE_STATUS_INVALIDATED: c_int = 2;
/// `cudaStreamCaptureMode` / `hipStreamCaptureMode`.
pub(crate) const CAPTURE_MODE_GLOBAL: c_int = 0;
pub(crate) const CAPTURE_MODE_THREAD_LOCAL: c_int = 1;
pub(crate) const CAPTURE_MODE_RELAXED: c_int = 2;
/// `cudaGraphMemAttributeType` / `hipGraphMemAttributeType`.
pub(crate) const GRAPH_MEM_USED_CURRENT: c_int = 0;
pub(crate) const GRAPH_MEM_USED_HIGH: c_int = 1;
pub(crate) const GRAPH_MEM_RESERVED_CURRENT: c_int = 2;
pub(crate) const GRAPH_MEM_RESERVED_HIGH: c_int = 3;

/// Declares the runtime functions a backend uses and loads them from a
/// library. Every function returns the vendor code as a plain `i32`, so a code
/// the bindings do not know is data, not an invalid enum value.
///
/// ```text
/// runtime_api! {
///     version: v;                       // names the runtime version in the expressions below
///     fn name = "symbol\0"; (args) -> ret;          // required: loading fails without it
///     fn name = if v >= X { "a\0" } else { "b\0" }; (args) -> ret;   // picked by version
///     optional(since "ROCm 5.3") fn name = "symbol\0"; (args) -> ret;  // may be missing
///     optional(since "CUDA 13.0", if v >= X) fn name = "symbol\0"; (args) -> ret;
/// }
/// ```
///
/// The runtime version is read first (with the symbol the backend names, see
/// [`library_version`]) and passed to `Api::load`, so a declaration can pick
/// the symbol whose ABI matches the loaded runtime. A missing optional symbol
/// (or one whose `if` is false) does not fail the load: the field is an
/// [`Optional`] whose `get` answers [`Error::Unsupported`] naming the call,
/// the runtime that has it and the runtime that is loaded.
macro_rules! runtime_api {
    (@wanted) => { true };
    (@wanted $cond:expr) => { $cond };
    (
        version: $version:ident;
        $( fn $name:ident = $sym:expr; ($($ty:ty),* $(,)?) -> $ret:ty; )*
        $( optional(since $since:expr $(, if $cond:expr)?) fn $oname:ident = $osym:expr;
            ($($oty:ty),* $(,)?) -> $oret:ty; )*
    ) => {
        #[cfg_attr(not(somalloc_kernels), allow(dead_code))]
        struct Api {
            $( $name: unsafe extern "C" fn($($ty),*) -> $ret, )*
            $( $oname: crate::common::Optional<unsafe extern "C" fn($($oty),*) -> $oret>, )*
            /// What the runtime reported before the symbols were loaded.
            version: i32,
            /// Keeps the library mapped for as long as the pointers above live.
            _lib: libloading::Library,
        }

        impl Api {
            /// # Safety
            /// `lib` is the vendor runtime these declarations describe, and
            /// `version` is what it reports, so each symbol picked for that
            /// version has the signature declared for it here.
            unsafe fn load(lib: libloading::Library, $version: i32) -> std::result::Result<Api, String> {
                $(
                    let symbol: &'static str = $sym;
                    // SAFETY: the signature matches the runtime's declaration
                    // of this symbol (the caller's contract); the pointer is
                    // copied out and stays valid while `lib`, stored next to
                    // it, stays loaded.
                    let $name = *unsafe { lib.get::<unsafe extern "C" fn($($ty),*) -> $ret>(symbol.as_bytes()) }
                        .map_err(|e| format!("symbol {} is missing: {e}", symbol.trim_end_matches('\0')))?;
                )*
                $(
                    let symbol: &'static str = $osym;
                    let wanted: bool = crate::common::runtime_api!(@wanted $($cond)?);
                    let found = if wanted {
                        // SAFETY: as above; a symbol that is absent is `None`.
                        unsafe { lib.get::<unsafe extern "C" fn($($oty),*) -> $oret>(symbol.as_bytes()) }
                            .ok()
                            .map(|f| *f)
                    } else {
                        None
                    };
                    let $oname = crate::common::Optional::new(found, symbol, $since, $version);
                )*
                Ok(Api { $($name,)* $($oname,)* version: $version, _lib: lib })
            }
        }
    };
}
pub(crate) use runtime_api;

/// `Copy` newtypes around vendor handles: `handle!(CudaStream = cudaStream_t, ...)`.
macro_rules! handle {
    ($($name:ident = $raw:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($raw), "`.")]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) struct $name(pub(crate) sys::$raw);
        // SAFETY: CUDA and HIP handles are opaque pointers that the runtime
        // accepts from any host thread and synchronises internally.
        // Ownership (who destroys the handle) is tracked by the safe types.
        unsafe impl Send for $name {}
        // SAFETY: as above; nothing mutates through a shared handle on the
        // host side.
        unsafe impl Sync for $name {}
    )*};
}
pub(crate) use handle;

/// Declares C structs that the headers leave incomplete (handles point to
/// them; they are never dereferenced).
macro_rules! opaque {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`struct ", stringify!($name), "` (never dereferenced).")]
        #[repr(C)]
        pub(crate) struct $name {
            _opaque: [u8; 0],
        }
    )*};
}
pub(crate) use opaque;

/// A static NUL-terminated string from the runtime, or "" for null.
pub(crate) fn c_str(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the runtimes return static NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A runtime function that older runtimes lack: present, or an
/// `Unsupported` error that says which runtime has it.
pub(crate) struct Optional<F> {
    f: Option<F>,
    /// The symbol (without the NUL).
    symbol: &'static str,
    /// The first runtime that has it, e.g. "ROCm 5.3".
    since: &'static str,
    /// The loaded runtime's version number.
    version: i32,
}

impl<F: Copy> Optional<F> {
    pub(crate) fn new(f: Option<F>, symbol: &'static str, since: &'static str, version: i32) -> Self {
        Optional {
            f,
            symbol: symbol.trim_end_matches('\0'),
            since,
            version,
        }
    }

    /// The function, or `Unsupported` naming the call and both runtimes.
    #[inline]
    pub(crate) fn get<C: Codes>(&self) -> Result<F> {
        match self.f {
            Some(f) => Ok(f),
            None => Err(self.missing::<C>()),
        }
    }

    #[cold]
    fn missing<C: Codes>(&self) -> Error {
        Error::Unsupported {
            backend: C::BACKEND,
            what: format!(
                "{} needs {} or later; this runtime is {}",
                self.symbol,
                self.since,
                C::version_text(self.version)
            ),
        }
    }
}

/// `$env` alone when it is set (so a deployment, or a test, can pin the exact
/// library), else the usual names of the runtime, newest first.
pub(crate) fn library_candidates(env: &str, names: &[&str]) -> Vec<String> {
    match std::env::var(env) {
        Ok(explicit) if !explicit.is_empty() => vec![explicit],
        _ => names.iter().map(|n| n.to_string()).collect(),
    }
}

/// Opens the first candidate that opens, reads its version, lets `refuse`
/// turn it down, and loads its symbols. The first library that opens is the
/// one used: one of an unusable version or without a required function is
/// an error, not a reason to fall back to another runtime. Every failure is
/// [`Error::RuntimeNotFound`] with all the reasons, never a panic.
///
/// # Safety
/// Each candidate is a runtime whose `version_symbol` is `int f(int*)` and
/// for which `load` is sound with the version it reports.
pub(crate) unsafe fn load_runtime<A>(
    library: &'static str,
    searched: Vec<String>,
    version_symbol: &str,
    refuse: impl Fn(i32) -> Option<String>,
    load: unsafe fn(libloading::Library, i32) -> std::result::Result<A, String>,
) -> Result<A> {
    let mut failures = Vec::new();
    let mut cause: Option<Arc<dyn std::error::Error + Send + Sync>> = None;
    for name in &searched {
        // SAFETY: loading a runtime runs its initialisers, which have no
        // preconditions on the caller.
        match unsafe { libloading::Library::new(name) } {
            Ok(lib) => {
                // SAFETY: the caller's contract.
                let loaded = unsafe { library_version(&lib, version_symbol) }.and_then(|version| {
                    match refuse(version) {
                        Some(why) => Err(why),
                        // SAFETY: the caller's contract, with this library's
                        // own version.
                        None => unsafe { load(lib, version) },
                    }
                });
                return loaded.map_err(|e| {
                    failures.push(format!("{name}: {e}"));
                    Error::RuntimeNotFound {
                        library,
                        searched: searched.clone(),
                        reason: failures.join("; "),
                        cause: Some(Arc::from(Box::<dyn std::error::Error + Send + Sync>::from(
                            format!("{name}: {e}"),
                        ))),
                    }
                });
            }
            Err(e) => {
                failures.push(e.to_string());
                cause = Some(Arc::new(e));
            }
        }
    }
    Err(Error::RuntimeNotFound {
        library,
        reason: if failures.is_empty() {
            "no candidate".to_string()
        } else {
            failures.join("; ")
        },
        searched,
        cause,
    })
}

/// The version a runtime library reports through `symbol`
/// (`cudaRuntimeGetVersion` / `hipRuntimeGetVersion`, `int f(int*)` in every
/// release), read before anything else is loaded from it.
///
/// # Safety
/// `lib` is a runtime whose `symbol` has that signature.
pub(crate) unsafe fn library_version(
    lib: &libloading::Library,
    symbol: &str,
) -> std::result::Result<i32, String> {
    // SAFETY: the caller's contract; the pointer is used only while `lib`
    // is borrowed.
    let get = unsafe { lib.get::<unsafe extern "C" fn(*mut c_int) -> i32>(symbol.as_bytes()) }
        .map_err(|e| format!("symbol {} is missing: {e}", symbol.trim_end_matches('\0')))?;
    let mut version: c_int = 0;
    // SAFETY: a valid out-pointer.
    let code = unsafe { get(&mut version) };
    if code != SUCCESS {
        return Err(format!("{} returned {code}", symbol.trim_end_matches('\0')));
    }
    Ok(version)
}

/// A capture status written by `call`; a value no known runtime uses is an
/// error, not a guess.
pub(crate) fn capture_status<C: Codes>(call: &'static str, raw: c_int) -> Result<CaptureStatus> {
    match raw {
        CAPTURE_STATUS_NONE => Ok(CaptureStatus::None),
        CAPTURE_STATUS_ACTIVE => Ok(CaptureStatus::Active),
        CAPTURE_STATUS_INVALIDATED => Ok(CaptureStatus::Invalidated),
        other => Err(Error::Unsupported {
            backend: C::BACKEND,
            what: format!("{call} reported capture status {other}, which somalloc does not know"),
        }),
    }
}

/// The `CaptureInfo` of a query: the id is kept only while capturing (the
/// runtimes leave it unwritten otherwise), the graph only while `Active`.
pub(crate) fn capture_info<G, R>(
    status: CaptureStatus,
    id: u64,
    graph: *mut R,
    wrap: impl FnOnce(*mut R) -> G,
) -> CaptureInfo<G> {
    CaptureInfo {
        status,
        id: if status == CaptureStatus::None { 0 } else { id },
        graph: (status == CaptureStatus::Active && !graph.is_null()).then(|| wrap(graph)),
    }
}

pub(crate) fn capture_mode(mode: RawCaptureMode) -> c_int {
    match mode {
        RawCaptureMode::Global => CAPTURE_MODE_GLOBAL,
        RawCaptureMode::ThreadLocal => CAPTURE_MODE_THREAD_LOCAL,
        RawCaptureMode::Relaxed => CAPTURE_MODE_RELAXED,
    }
}

pub(crate) fn graph_mem_attr(attr: GraphMemAttr) -> c_int {
    match attr {
        GraphMemAttr::UsedMemCurrent => GRAPH_MEM_USED_CURRENT,
        GraphMemAttr::UsedMemHigh => GRAPH_MEM_USED_HIGH,
        GraphMemAttr::ReservedMemCurrent => GRAPH_MEM_RESERVED_CURRENT,
        GraphMemAttr::ReservedMemHigh => GRAPH_MEM_RESERVED_HIGH,
    }
}

pub(crate) fn ordinal(device: usize) -> Result<c_int> {
    c_int::try_from(device)
        .map_err(|_| Error::invalid(format!("device ordinal {device} does not fit in a C int")))
}

/// The calling thread's current device, as a runtime gets and sets it
/// (`cudaGetDevice`/`cudaSetDevice`, `hipGetDevice`/`hipSetDevice`).
pub(crate) trait CurrentDevice {
    fn current() -> Result<c_int>;
    fn make_current(device: c_int) -> Result<()>;
}

/// Makes a device current on the calling thread for as long as it lives,
/// then makes the thread's previous device current again: the user owns the
/// thread's current device, and a backend call that needs another one (to
/// create a stream or an event on it, to ask its free memory, ...) leaves it
/// as it found it. When the wanted device is already current, nothing is set
/// and nothing is restored.
#[must_use = "the device is restored when the guard is dropped"]
pub(crate) struct DeviceGuard<D: CurrentDevice> {
    previous: Option<c_int>,
    _runtime: PhantomData<fn() -> D>,
}

impl<D: CurrentDevice> DeviceGuard<D> {
    pub(crate) fn set(device: usize) -> Result<Self> {
        let wanted = ordinal(device)?;
        let current = D::current()?;
        let previous = if current == wanted {
            None
        } else {
            D::make_current(wanted)?;
            Some(current)
        };
        Ok(DeviceGuard {
            previous,
            _runtime: PhantomData,
        })
    }
}

impl<D: CurrentDevice> Drop for DeviceGuard<D> {
    fn drop(&mut self) {
        if let Some(previous) = self.previous {
            // A device that was current a moment ago can be made current
            // again; should the runtime still refuse, it is recorded.
            record_drop_error(D::make_current(previous));
        }
    }
}

/// How a backend names its codes and its runtime.
pub(crate) trait Codes {
    const BACKEND: crate::Vendor;
    /// The runtime's name and version for messages, e.g. "CUDA 12.8".
    fn version_text(version: i32) -> String;
    /// The runtime's name and description of `code` (empty if unavailable).
    fn texts(code: i32) -> (String, String);
}

/// The `Error` for a failed call.
pub(crate) fn vendor<C: Codes>(call: &'static str, code: i32) -> Error {
    let (name, message) = C::texts(code);
    match code {
        ERROR_NO_DEVICE | ERROR_INSUFFICIENT_DRIVER => Error::NoDevice {
            backend: C::BACKEND,
            detail: format!("{call}: {name}: {message}"),
        },
        ERROR_NOT_SUPPORTED => Error::Unsupported {
            backend: C::BACKEND,
            what: format!("{call}: {message}"),
        },
        _ => Error::Vendor {
            call,
            code: VendorCode(code),
            name,
            message,
        },
    }
}

#[inline]
pub(crate) fn check<C: Codes>(call: &'static str, code: i32) -> Result<()> {
    if code == SUCCESS {
        Ok(())
    } else {
        Err(vendor::<C>(call, code))
    }
}

/// Like `check`, with out-of-memory reported as `OutOfMemory { requested }`.
#[inline]
pub(crate) fn check_alloc<C: Codes>(call: &'static str, code: i32, bytes: usize) -> Result<()> {
    match code {
        SUCCESS => Ok(()),
        ERROR_OUT_OF_MEMORY => Err(Error::OutOfMemory {
            requested: bytes,
            stats: None,
            arena: None,
        }),
        _ => Err(vendor::<C>(call, code)),
    }
}

/// The virtual-memory round trip both backends' tests run on a GPU: on a
/// thread of its own (no context current yet), reserve, create, map, grant
/// access, fill and read back, retain, export and import where the device
/// offers POSIX handles, unmap, release, free; and an impossible
/// `vmm_create` is `OutOfMemory`. Panics on a failure; `Some(reason)` where
/// it cannot run (no GPU, no virtual-memory management).
#[cfg(test)]
pub(crate) fn vmm_round_trip<B: crate::backend::Backend>() -> Option<String> {
    use crate::backend::{DevicePtr, PhysProps};
    match B::device_count() {
        Ok(0) => return Some("no GPU".to_string()),
        Err(e) => return Some(format!("no GPU ({e})")),
        Ok(_) => {}
    }
    let support = B::vmm_support(0).expect("vmm_support");
    if !support.supported {
        return Some(format!(
            "no virtual memory management: {}",
            support.why_not.unwrap_or("?")
        ));
    }
    assert!(support.granularity > 0 && support.recommended % support.granularity == 0);
    let run = move || {
        let g = support.granularity;
        let (bytes, span) = (2 * g, 4 * g);
        let props = PhysProps {
            device: 0,
            posix_fd: support.posix_fd,
            rdma: support.rdma,
        };
        let base = B::vmm_reserve(span, g).expect("vmm_reserve");
        assert!(base != DevicePtr::NULL && base.0 % g == 0);
        let at = DevicePtr(base.0 + g);
        let handle = B::vmm_create(bytes, props).expect("vmm_create");
        // SAFETY: the range lies in the reservation, unmapped, the handle's
        // size; nothing else uses it.
        unsafe {
            B::vmm_map(at, bytes, handle).expect("vmm_map");
            B::vmm_set_access(at, bytes, 0, true).expect("vmm_set_access");
        }
        let stream = B::stream_create(0).expect("stream_create");
        let mut host = vec![0u8; bytes];
        // SAFETY: the mapped range, read-write for device 0; `host` outlives
        // the copy (synchronised below).
        unsafe {
            B::memset_async(at, 0xA5, bytes, stream).expect("memset_async");
            B::copy_async(host.as_mut_ptr().cast(), at.as_mut_ptr(), bytes, stream).expect("copy_async");
        }
        B::stream_synchronize(stream).expect("stream_synchronize");
        B::stream_destroy(stream).expect("stream_destroy");
        assert!(host.iter().all(|&b| b == 0xA5));
        let retained = B::vmm_retain(DevicePtr(at.0 + 100)).expect("vmm_retain");
        // SAFETY: retained just above, released once.
        unsafe { B::vmm_release(retained) }.expect("vmm_release of the retained handle");
        if support.posix_fd {
            use std::os::fd::FromRawFd;
            let fd = B::vmm_export_fd(handle).expect("vmm_export_fd");
            assert!(fd >= 0);
            // SAFETY: a new descriptor that this test owns (closed on drop).
            let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
            let imported = B::vmm_import_fd(std::os::fd::AsRawFd::as_raw_fd(&fd)).expect("vmm_import_fd");
            // SAFETY: imported just above, released once.
            unsafe { B::vmm_release(imported) }.expect("vmm_release of the imported handle");
        }
        // SAFETY: the whole mapping, no work in flight (synchronised); then
        // the handle made above, once; then the whole, empty reservation.
        unsafe {
            B::vmm_unmap(at, bytes).expect("vmm_unmap");
            B::vmm_release(handle).expect("vmm_release");
            B::vmm_free_reservation(base, span).expect("vmm_free_reservation");
        }
        // More than the device has: OutOfMemory with the request.
        let (_, total) = B::mem_info(0).expect("mem_info");
        let huge = total.div_ceil(g) * g + g;
        match B::vmm_create(huge, props) {
            Err(Error::OutOfMemory { requested, .. }) => assert_eq!(requested, huge),
            Ok(h) => {
                // SAFETY: made just above, released once.
                let _ = unsafe { B::vmm_release(h) };
                panic!("vmm_create of {huge} bytes succeeded");
            }
            Err(e) => panic!("vmm_create of {huge} bytes: {e}"),
        }
    };
    std::thread::spawn(run).join().expect("the round trip panicked");
    None
}

#[cfg(test)]
#[path = "common_tests.rs"]
mod tests;
