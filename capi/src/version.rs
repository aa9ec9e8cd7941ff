//! The library's version and the text of its status codes
//! (`somalloc_status_string`).
//!
//! The version macros of the header come from the constants below, which
//! the build checks against the crate's version (`Cargo.toml`): a version
//! bump that does not update them does not compile, and a header that is
//! not regenerated after it fails `ci/capi-header.sh`.

use std::ffi::{c_char, c_int, CStr};

use crate::error::Status;

/// The major version of this header: somalloc's version is
/// `SOMALLOC_VERSION_MAJOR.SOMALLOC_VERSION_MINOR.SOMALLOC_VERSION_PATCH`
/// (from the crate's, so they never differ). `somalloc_version()` is the
/// loaded library's, e.g. `"0.1.0"`, for a program to compare at run time.
/// The number at the end of the library's SONAME (`libsomalloc-cuda.so.0`)
/// is this major version.
pub const SOMALLOC_VERSION_MAJOR: u32 = 0;
/// The minor version of the header.
pub const SOMALLOC_VERSION_MINOR: u32 = 1;
/// The patch version of the header.
pub const SOMALLOC_VERSION_PATCH: u32 = 0;

/// A decimal number of `Cargo.toml`'s version, at compile time.
const fn number(text: &str) -> u32 {
    let bytes = text.as_bytes();
    assert!(!bytes.is_empty(), "an empty version number");
    let mut n = 0u32;
    let mut i = 0;
    while i < bytes.len() {
        assert!(bytes[i].is_ascii_digit(), "a version number that is not decimal");
        n = n * 10 + (bytes[i] - b'0') as u32;
        i += 1;
    }
    n
}

const _: () = {
    assert!(
        number(env!("CARGO_PKG_VERSION_MAJOR")) == SOMALLOC_VERSION_MAJOR,
        "SOMALLOC_VERSION_MAJOR is not Cargo.toml's: update capi/src/version.rs and regenerate the header"
    );
    assert!(
        number(env!("CARGO_PKG_VERSION_MINOR")) == SOMALLOC_VERSION_MINOR,
        "SOMALLOC_VERSION_MINOR is not Cargo.toml's: update capi/src/version.rs and regenerate the header"
    );
    assert!(
        number(env!("CARGO_PKG_VERSION_PATCH")) == SOMALLOC_VERSION_PATCH,
        "SOMALLOC_VERSION_PATCH is not Cargo.toml's: update capi/src/version.rs and regenerate the header"
    );
};

/// Every status, in the order of their values (0, 1, ...).
const ALL: [Status; 15] = [
    Status::Ok,
    Status::RuntimeNotFound,
    Status::NoDevice,
    Status::InvalidDevice,
    Status::OutOfMemory,
    Status::InvalidArgument,
    Status::UnknownPointer,
    Status::WrongSize,
    Status::WrongDevice,
    Status::Capture,
    Status::Unsupported,
    Status::Vendor,
    Status::Config,
    Status::Busy,
    Status::Internal,
];

/// The status of a value, if it is one.
fn status_of(code: c_int) -> Option<Status> {
    ALL.iter().copied().find(|s| *s as c_int == code)
}

/// The constant's name and what it means. The match has no catch-all: a
/// new status does not compile without its text.
fn text(status: Status) -> &'static CStr {
    match status {
        Status::Ok => c"SOMALLOC_STATUS_OK: success",
        Status::RuntimeNotFound => {
            c"SOMALLOC_STATUS_RUNTIME_NOT_FOUND: the vendor runtime library (libcudart or libamdhip64) could not be loaded"
        }
        Status::NoDevice => c"SOMALLOC_STATUS_NO_DEVICE: the runtime reports no usable device",
        Status::InvalidDevice => c"SOMALLOC_STATUS_INVALID_DEVICE: a device ordinal the runtime does not have",
        Status::OutOfMemory => c"SOMALLOC_STATUS_OUT_OF_MEMORY: the allocation could not be satisfied",
        Status::InvalidArgument => {
            c"SOMALLOC_STATUS_INVALID_ARGUMENT: an argument the call does not accept (nothing was done)"
        }
        Status::UnknownPointer => {
            c"SOMALLOC_STATUS_UNKNOWN_POINTER: a free of an address somalloc did not hand out, or freed already"
        }
        Status::WrongSize => {
            c"SOMALLOC_STATUS_WRONG_SIZE: a free with another size than the allocation's (nothing was freed)"
        }
        Status::WrongDevice => {
            c"SOMALLOC_STATUS_WRONG_DEVICE: another device than the allocation's, or objects of two devices used together (nothing was freed)"
        }
        Status::Capture => c"SOMALLOC_STATUS_CAPTURE: refused because a stream is capturing into a graph",
        Status::Unsupported => {
            c"SOMALLOC_STATUS_UNSUPPORTED: not supported by this vendor or the installed runtime"
        }
        Status::Vendor => c"SOMALLOC_STATUS_VENDOR: an error of the vendor runtime",
        Status::Config => c"SOMALLOC_STATUS_CONFIG: a configuration string that does not parse",
        Status::Busy => {
            c"SOMALLOC_STATUS_BUSY: a configuration given after the first use, differing from the one in force"
        }
        Status::Internal => c"SOMALLOC_STATUS_INTERNAL: a bug in somalloc (the last error's message says what)",
    }
}

/// What a status code means: a static NUL-terminated string, the name of
/// the constant then a description, e.g. `"SOMALLOC_STATUS_NO_DEVICE: the
/// runtime reports no usable device"`; for a value that is no status,
/// `"unknown somalloc status"`. Never NULL, never freed, the same for every
/// thread; it does not touch the GPU or the calling thread's last error,
/// so it may be called at any time. The text of the failure itself (which
/// device, which size) is `somalloc_last_error_message()`.
#[no_mangle]
pub extern "C" fn somalloc_status_string(status: c_int) -> *const c_char {
    status_of(status)
        .map_or(c"unknown somalloc status", text)
        .as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(code: c_int) -> String {
        // SAFETY: the entry point returns a static NUL-terminated string.
        unsafe { CStr::from_ptr(somalloc_status_string(code)) }
            .to_str()
            .unwrap()
            .to_string()
    }

    #[test]
    fn every_status_has_its_value_and_its_name() {
        for (i, s) in ALL.iter().enumerate() {
            assert_eq!(*s as usize, i, "ALL is in the order of the values");
        }
        // The header's enum, as generated, names every status with its
        // value: each text begins with the name its value has there.
        let header = include_str!("../include/somalloc.h");
        let mut seen = 0;
        for line in header.lines() {
            let Some((name, value)) = line.trim().trim_end_matches(',').split_once(" = ") else {
                continue;
            };
            if !name.starts_with("SOMALLOC_STATUS_") {
                continue;
            }
            let code: c_int = value.parse().unwrap();
            assert!(
                string(code).starts_with(&format!("{name}: ")),
                "{name} = {code}: {}",
                string(code)
            );
            seen += 1;
        }
        assert_eq!(seen, ALL.len(), "the header's statuses are ALL");
    }

    #[test]
    fn a_value_that_is_no_status_is_unknown() {
        for code in [-1, ALL.len() as c_int, 1000, c_int::MIN, c_int::MAX] {
            assert_eq!(string(code), "unknown somalloc status");
        }
    }

    #[test]
    fn the_version_is_the_crates() {
        let v = format!("{SOMALLOC_VERSION_MAJOR}.{SOMALLOC_VERSION_MINOR}.{SOMALLOC_VERSION_PATCH}");
        assert_eq!(v, env!("CARGO_PKG_VERSION"));
        // SAFETY: a static NUL-terminated string.
        let lib = unsafe { CStr::from_ptr(crate::somalloc_version()) };
        assert_eq!(lib.to_str().unwrap(), v, "somalloc_version() says the same");
    }
}
