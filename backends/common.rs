//! What the vendor backends share: the symbol-table macro, the handle
//! newtype macro, and the mapping of runtime codes to [`Error`]. CUDA and HIP
//! use the same numbers for the codes that get their own `Error` variant.

use std::ffi::{c_char, c_int, CStr};

use crate::error::{Error, Result, VendorCode};

pub(crate) const SUCCESS: i32 = 0;
/// cudaErrorMemoryAllocation / hipErrorOutOfMemory.
pub(crate) const ERROR_OUT_OF_MEMORY: i32 = 2;
/// cudaErrorInsufficientDriver / hipErrorInsufficientDriver.
pub(crate) const ERROR_INSUFFICIENT_DRIVER: i32 = 35;
/// cudaErrorNoDevice / hipErrorNoDevice.
pub(crate) const ERROR_NO_DEVICE: i32 = 100;
/// cudaErrorNotSupported / hipErrorNotSupported.
pub(crate) const ERROR_NOT_SUPPORTED: i32 = 801;

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

pub(crate) fn ordinal(device: usize) -> Result<c_int> {
    c_int::try_from(device)
        .map_err(|_| Error::invalid(format!("device ordinal {device} does not fit in a C int")))
}

/// How a backend names its codes and clears the per-thread last error.
pub(crate) trait Codes {
    const BACKEND: &'static str;
    /// The runtime's name and version for messages, e.g. "CUDA 12.8".
    fn version_text(version: i32) -> String;
    /// The runtime's name and description of `code` (empty if unavailable).
    fn texts(code: i32) -> (String, String);
    /// Clears the per-thread "last error" a failed call left behind, so it
    /// does not resurface from `cudaGetLastError` / `hipGetLastError`.
    fn clear_last_error();
}

/// The `Error` for a failed call.
pub(crate) fn vendor<C: Codes>(call: &'static str, code: i32) -> Error {
    let (name, message) = C::texts(code);
    C::clear_last_error();
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
        ERROR_OUT_OF_MEMORY => {
            C::clear_last_error();
            Err(Error::OutOfMemory {
                requested: bytes,
                stats: None,
            })
        }
        _ => Err(vendor::<C>(call, code)),
    }
}
