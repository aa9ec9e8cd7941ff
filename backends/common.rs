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
macro_rules! runtime_api {
    ($( fn $name:ident = $sym:expr; ($($ty:ty),* $(,)?) -> $ret:ty; )*) => {
        #[cfg_attr(not(somalloc_kernels), allow(dead_code))]
        struct Api {
            $( $name: unsafe extern "C" fn($($ty),*) -> $ret, )*
            /// Keeps the library mapped for as long as the pointers above live.
            _lib: libloading::Library,
        }

        impl Api {
            /// # Safety
            /// `lib` is the vendor runtime these declarations describe, so
            /// each symbol has the signature declared for it here.
            unsafe fn load(lib: libloading::Library) -> std::result::Result<Api, String> {
                $(
                    // SAFETY: the signature matches the runtime's declaration
                    // of this symbol (the caller's contract); the pointer is
                    // copied out and stays valid while `lib`, stored next to
                    // it, stays loaded.
                    let $name = *unsafe { lib.get::<unsafe extern "C" fn($($ty),*) -> $ret>($sym.as_bytes()) }
                        .map_err(|e| format!("symbol {} is missing: {e}", $sym.trim_end_matches('\0')))?;
                )*
                Ok(Api { $($name,)* _lib: lib })
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

pub(crate) fn ordinal(device: usize) -> Result<c_int> {
    c_int::try_from(device)
        .map_err(|_| Error::invalid(format!("device ordinal {device} does not fit in a C int")))
}

/// How a backend names its codes and clears the per-thread last error.
pub(crate) trait Codes {
    const BACKEND: &'static str;
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
