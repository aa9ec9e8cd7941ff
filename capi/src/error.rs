//! Status codes, the error of the entry points, and the calling thread's
//! last error.

use std::cell::RefCell;
use std::ffi::{c_char, CString};

use somalloc_rs::{Error, InvalidReason};

/// What an entry point returns: `SOMALLOC_STATUS_OK` (0) or why it failed.
/// The text of the last failure on the calling thread is
/// `somalloc_last_error_message()`. Values are stable; new ones may be
/// added.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SomallocStatus {
    /// Success.
    Ok = 0,
    /// The vendor runtime library (`libcudart`, `libamdhip64`) could not be
    /// loaded.
    RuntimeNotFound = 1,
    /// The runtime loaded but reports no usable device.
    NoDevice = 2,
    /// A device ordinal the runtime does not have.
    InvalidDevice = 3,
    /// The allocation could not be satisfied.
    OutOfMemory = 4,
    /// An argument the call does not accept (nothing was done).
    InvalidArgument = 5,
    /// A free of an address somalloc did not hand out, or freed already.
    UnknownPointer = 6,
    /// A free with another size than the allocation's (nothing was freed).
    WrongSize = 7,
    /// A free naming another device than the allocation's, or objects of
    /// two devices used together (nothing was freed).
    WrongDevice = 8,
    /// Refused because a stream is capturing into a graph.
    Capture = 9,
    /// Not supported by this vendor or the installed runtime.
    Unsupported = 10,
    /// Any other error code of the vendor runtime.
    Vendor = 11,
    /// A configuration string that does not parse.
    Config = 12,
    /// A configuration given after the first use, differing from the one
    /// in force.
    Busy = 13,
    /// A bug in somalloc (a caught panic, a broken invariant): the message
    /// says what.
    Internal = 14,
}

pub use SomallocStatus as Status;

/// An error of an entry point: a status and its text.
#[derive(Clone, Debug)]
pub struct CapiError {
    pub status: Status,
    pub text: String,
}

impl CapiError {
    pub fn new(status: Status, text: impl Into<String>) -> CapiError {
        CapiError {
            status,
            text: text.into(),
        }
    }
}

impl std::fmt::Display for CapiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for CapiError {}

impl From<Error> for CapiError {
    fn from(e: Error) -> CapiError {
        let status = match &e {
            Error::RuntimeNotFound { .. } => Status::RuntimeNotFound,
            Error::NoDevice { .. } => Status::NoDevice,
            Error::InvalidDevice { .. } => Status::InvalidDevice,
            Error::OutOfMemory { .. } => Status::OutOfMemory,
            Error::InvalidArgument {
                reason: InvalidReason::WrongDevice,
                ..
            } => Status::WrongDevice,
            Error::InvalidArgument {
                reason: InvalidReason::UnknownAllocation,
                ..
            } => Status::UnknownPointer,
            Error::InvalidArgument { .. } => Status::InvalidArgument,
            Error::Unsupported { .. } => Status::Unsupported,
            Error::Capture { .. } | Error::CaptureInvalidated { .. } => Status::Capture,
            Error::Vendor { .. } => Status::Vendor,
            _ => Status::Internal,
        };
        CapiError::new(status, e.to_string())
    }
}

struct Last {
    status: Status,
    /// The text, made on demand from `pending`.
    text: Option<CString>,
    pending: String,
}

thread_local! {
    static LAST: RefCell<Last> = const {
        RefCell::new(Last { status: Status::Ok, text: None, pending: String::new() })
    };
}

/// Records the outcome of an entry point as the calling thread's last
/// error (success clears it). Quiet during thread teardown.
pub fn set_last(result: &Result<(), CapiError>) {
    let _ = LAST.try_with(|l| {
        let mut l = l.borrow_mut();
        match result {
            Ok(()) => {
                if l.status != Status::Ok {
                    l.status = Status::Ok;
                    l.text = None;
                    l.pending.clear();
                }
            }
            Err(e) => {
                l.status = e.status;
                l.text = None;
                l.pending.clear();
                l.pending.push_str(&e.text);
            }
        }
    });
}

pub fn last_status() -> Status {
    LAST.try_with(|l| l.borrow().status).unwrap_or(Status::Ok)
}

/// The text of the last error, valid until the next somalloc call on this
/// thread; "" when the last call succeeded.
pub fn last_text_ptr() -> *const c_char {
    LAST.try_with(|l| {
        let mut l = l.borrow_mut();
        if l.text.is_none() {
            // Interior NULs cannot come from somalloc's messages; drop any.
            let bytes: Vec<u8> = l.pending.bytes().filter(|&b| b != 0).collect();
            l.text = Some(CString::new(bytes).unwrap_or_default());
        }
        l.text.as_ref().map_or(c"".as_ptr(), |t| t.as_ptr())
    })
    .unwrap_or(c"".as_ptr())
}

pub fn last_text() -> String {
    LAST.try_with(|l| l.borrow().pending.clone()).unwrap_or_default()
}
