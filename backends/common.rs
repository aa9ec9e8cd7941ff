//! What the vendor backends share: the symbol-table macro, the handle
//! newtype macro, the current-device guard, and the mapping of runtime codes
//! to [`Error`]. CUDA and HIP use the same numbers for the codes that get
//! their own `Error` variant.
//!
//! # The runtime's last error
//!
//! A somalloc call that fails leaves the thread's "last error" of the runtime
//! (what `cudaGetLastError` / `hipGetLastError` return) as the failed
//! runtime call set it, like any failed runtime call does. somalloc never
//! reads or resets it: resetting would also swallow a pending error of the
//! caller's own kernel launch. The error somalloc returns already carries the
//! code, its name and message.

use std::ffi::{c_char, c_int, CStr};
use std::marker::PhantomData;

use crate::backend::{CaptureInfo, CaptureStatus, GraphMemAttr, RawCaptureMode};
use crate::error::{record_drop_error, Error, Result, VendorCode};

pub(crate) const SUCCESS: i32 = 0;
/// cudaErrorMemoryAllocation / hipErrorOutOfMemory.
pub(crate) const ERROR_OUT_OF_MEMORY: i32 = 2;
/// cudaErrorInsufficientDriver / hipErrorInsufficientDriver.
pub(crate) const ERROR_INSUFFICIENT_DRIVER: i32 = 35;
/// cudaErrorNoDevice / hipErrorNoDevice.
pub(crate) const ERROR_NO_DEVICE: i32 = 100;
/// cudaErrorNotSupported / hipErrorNotSupported.
pub(crate) const ERROR_NOT_SUPPORTED: i32 = 801;

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
///     optional fn name = "symbol\0" since "ROCm 5.3"; (args) -> ret;  // may be missing
///     optional fn name = "symbol\0" since "CUDA 13.0" if v >= X; (args) -> ret;
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
        $( optional fn $oname:ident = $osym:literal since $since:literal $(if $cond:expr)?;
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
                    let wanted: bool = runtime_api!(@wanted $($cond)?);
                    let found = if wanted {
                        // SAFETY: as above; a symbol that is absent is `None`.
                        unsafe { lib.get::<unsafe extern "C" fn($($oty),*) -> $oret>($osym.as_bytes()) }
                            .ok()
                            .map(|f| *f)
                    } else {
                        None
                    };
                    let $oname = crate::common::Optional::new(found, $osym, $since, $version);
                )*
                Ok(Api { $($name,)* $($oname,)* version: $version, _lib: lib })
            }
        }
    };
}
pub(crate) use runtime_api;

/// A `Copy` newtype around a vendor handle.
macro_rules! handle {
    ($(#[$m:meta])* $name:ident, $raw:ty) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) struct $name(pub(crate) $raw);
        // SAFETY: CUDA and HIP handles are opaque pointers that the runtime
        // accepts from any host thread and synchronises internally.
        // Ownership (who destroys the handle) is tracked by the safe types.
        unsafe impl Send for $name {}
        // SAFETY: as above; nothing mutates through a shared handle on the
        // host side.
        unsafe impl Sync for $name {}
    };
}
pub(crate) use handle;

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
    const BACKEND: &'static str;
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
        }),
        _ => Err(vendor::<C>(call, code)),
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::c_long;

    use super::*;

    struct FakeCodes;

    impl Codes for FakeCodes {
        const BACKEND: &'static str = "fake";
        fn version_text(version: i32) -> String {
            format!("Fake {version}")
        }
        fn texts(_code: i32) -> (String, String) {
            (String::new(), String::new())
        }
    }

    extern "C" fn seven() -> c_int {
        7
    }

    #[test]
    fn a_missing_optional_call_is_unsupported_naming_both_runtimes() {
        let missing: Optional<extern "C" fn() -> c_int> = Optional::new(None, "fakeCall\0", "Fake 5", 4);
        match missing.get::<FakeCodes>() {
            Err(Error::Unsupported { backend, what }) => {
                assert_eq!(backend, "fake");
                assert_eq!(what, "fakeCall needs Fake 5 or later; this runtime is Fake 4");
            }
            other => panic!("unexpected {:?}", other.map(|_| ())),
        }
        let present = Optional::new(Some(seven as extern "C" fn() -> c_int), "fakeCall\0", "Fake 5", 6);
        assert_eq!(present.get::<FakeCodes>().map(|f| f()).ok(), Some(7));
    }

    // The C library stands in for a runtime: `runtime_api!` loads what it
    // has, leaves out what it lacks or what the version rules out, and fails
    // the load for a missing required symbol.
    mod libc_api {
        use super::*;

        runtime_api! {
            version: version;
            fn abs = "abs\0"; (c_int) -> c_int;
            fn length = if version >= 2 { "strlen\0" } else { "no_such_symbol_in_libc\0" }; (*const c_char) -> usize;
            optional fn labs = "labs\0" since "Fake 3" if version >= 3; (c_long) -> c_long;
            optional fn missing = "no_such_symbol_in_libc\0" since "Fake 9"; () -> c_int;
        }

        fn libc() -> libloading::Library {
            // SAFETY: the C library's initialisers have no preconditions.
            unsafe { libloading::Library::new("libc.so.6") }.expect("libc.so.6 loads")
        }

        #[test]
        fn symbols_are_picked_and_made_optional_by_version() {
            // SAFETY: `abs`, `strlen` and `labs` have these C signatures.
            let old = unsafe { Api::load(libc(), 1) };
            match old {
                Err(e) => assert!(e.contains("no_such_symbol_in_libc is missing"), "{e}"),
                Ok(_) => panic!("a missing required symbol must fail the load"),
            }
            // SAFETY: as above.
            let two = unsafe { Api::load(libc(), 2) }.expect("version 2 loads");
            assert_eq!(two.version, 2);
            // SAFETY: plain values and a NUL-terminated string.
            unsafe {
                assert_eq!((two.abs)(-5), 5);
                assert_eq!((two.length)(c"four".as_ptr()), 4);
            }
            let labs = two.labs.get::<FakeCodes>().map(|_| ());
            assert!(matches!(labs, Err(Error::Unsupported { what, .. })
                if what == "labs needs Fake 3 or later; this runtime is Fake 2"));
            // SAFETY: as above.
            let three = unsafe { Api::load(libc(), 3) }.expect("version 3 loads");
            let labs = three
                .labs
                .get::<FakeCodes>()
                .expect("labs is loaded from version 3");
            // SAFETY: a plain value.
            assert_eq!(unsafe { labs(-9) }, 9);
            let missing = three.missing.get::<FakeCodes>().map(|_| ());
            assert!(matches!(missing, Err(Error::Unsupported { what, .. })
                if what == "no_such_symbol_in_libc needs Fake 9 or later; this runtime is Fake 3"));
        }
    }

    // A fake runtime: one current device per thread, every call counted.
    struct FakeDevice;

    thread_local! {
        static CURRENT: std::cell::Cell<c_int> = const { std::cell::Cell::new(0) };
        static SETS: std::cell::RefCell<Vec<c_int>> = const { std::cell::RefCell::new(Vec::new()) };
    }

    impl CurrentDevice for FakeDevice {
        fn current() -> Result<c_int> {
            Ok(CURRENT.get())
        }
        fn make_current(device: c_int) -> Result<()> {
            if device >= 4 {
                return Err(Error::invalid("no such device"));
            }
            SETS.with_borrow_mut(|s| s.push(device));
            CURRENT.set(device);
            Ok(())
        }
    }

    fn sets() -> Vec<c_int> {
        SETS.with_borrow_mut(std::mem::take)
    }

    #[test]
    fn the_device_guard_restores_the_current_device() {
        CURRENT.set(1);
        sets();
        {
            let _g = DeviceGuard::<FakeDevice>::set(3).unwrap();
            assert_eq!(CURRENT.get(), 3);
            {
                // Nested, already current: no call at all.
                let _same = DeviceGuard::<FakeDevice>::set(3).unwrap();
                assert_eq!(sets(), [3]);
            }
            assert_eq!(CURRENT.get(), 3);
        }
        assert_eq!(CURRENT.get(), 1);
        assert_eq!(sets(), [1]);
        {
            let _g = DeviceGuard::<FakeDevice>::set(1).unwrap();
        }
        assert_eq!(
            sets(),
            [] as [c_int; 0],
            "the current device is neither set nor restored"
        );
        // A refused set leaves the thread as it was and restores nothing.
        assert!(DeviceGuard::<FakeDevice>::set(7).is_err());
        assert_eq!((CURRENT.get(), sets()), (1, vec![]));
        // So does an ordinal that is no C int.
        assert!(DeviceGuard::<FakeDevice>::set(usize::MAX).is_err());
        assert_eq!(sets(), [] as [c_int; 0]);
    }

    #[test]
    fn capture_values_map_both_ways() {
        assert_eq!(
            capture_status::<FakeCodes>("x", 0).ok(),
            Some(CaptureStatus::None)
        );
        assert_eq!(
            capture_status::<FakeCodes>("x", 1).ok(),
            Some(CaptureStatus::Active)
        );
        assert_eq!(
            capture_status::<FakeCodes>("x", 2).ok(),
            Some(CaptureStatus::Invalidated)
        );
        assert!(matches!(
            capture_status::<FakeCodes>("fakeIsCapturing", 3),
            Err(Error::Unsupported { what, .. }) if what.contains("fakeIsCapturing reported capture status 3")
        ));
        assert_eq!(capture_mode(RawCaptureMode::Relaxed), 2);
        assert_eq!(graph_mem_attr(GraphMemAttr::ReservedMemHigh), 3);
        let mut g = 0u8;
        let graph: *mut u8 = &mut g;
        let active = capture_info(CaptureStatus::Active, 42, graph, |p| p as usize);
        assert_eq!((active.id, active.graph), (42, Some(graph as usize)));
        // Outside a capture the runtimes leave id and graph unwritten.
        let none = capture_info(CaptureStatus::None, 42, graph, |p| p as usize);
        assert_eq!((none.id, none.graph), (0, None));
        let invalidated = capture_info(CaptureStatus::Invalidated, 42, graph, |p| p as usize);
        assert_eq!((invalidated.id, invalidated.graph), (42, None));
    }
}
