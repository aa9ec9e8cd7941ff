//! One error type for every backend.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::pool_stats::PoolStats;

/// A result whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A code returned by the vendor runtime (`cudaError_t` or `hipError_t`),
/// kept as plain data: a code that a newer runtime invented is still just a
/// number here, never undefined behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct VendorCode(pub i32);

impl fmt::Display for VendorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Everything that can go wrong in somalloc.
///
/// Environment problems (no runtime library, no device) and bad input are
/// errors, never panics.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The vendor runtime library could not be loaded (or is of another
    /// major version than the bindings this crate was built with).
    #[error("{library} could not be loaded ({reason}); searched: {}", searched.join(", "))]
    RuntimeNotFound {
        /// The library that was looked for, e.g. `libcudart`.
        library: &'static str,
        /// The file names that were tried, in order.
        searched: Vec<String>,
        /// Why the search failed.
        reason: String,
    },
    /// The runtime loaded but reports no usable device.
    #[error("no GPU device is available ({backend}: {detail})")]
    NoDevice {
        /// `cuda` or `rocm`.
        backend: &'static str,
        /// What the runtime said.
        detail: String,
    },
    /// A device ordinal that does not exist, or a handle of the wrong device.
    #[error("invalid device {ordinal} (the runtime sees {count} device(s))")]
    InvalidDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the runtime reports.
        count: usize,
    },
    /// An allocation could not be satisfied.
    #[error("out of memory: {requested} bytes requested{}", match stats { Some(s) => format!(" (pool: {s})"), None => String::new() })]
    OutOfMemory {
        /// Bytes asked for.
        requested: usize,
        /// The statistics of the pool that refused, when they could be read.
        stats: Option<PoolStats>,
    },
    /// An argument is outside what the call accepts.
    #[error("invalid argument: {why}")]
    InvalidArgument {
        /// What was wrong.
        why: String,
    },
    /// The selected vendor or the installed runtime does not have this.
    #[error("unsupported on {backend}: {what}")]
    Unsupported {
        /// `cuda` or `rocm`.
        backend: &'static str,
        /// What is missing.
        what: String,
    },
    /// An operation that would break a stream capture: it mixes a capturing
    /// stream with work outside that capture (which the runtime answers by
    /// silently pulling the other stream into the capture, or by
    /// invalidating the capture), or it cannot be recorded into a graph
    /// (synchronising a capturing stream). Nothing was enqueued and the
    /// capture is still valid.
    #[error("not allowed during stream capture: {why}")]
    Capture {
        /// What was refused, and why.
        why: String,
    },
    /// The stream capture was invalidated by an operation the capture does
    /// not allow (made through a raw handle or by another library). Ending
    /// it produced no graph; the stream is out of capture mode and usable
    /// again.
    #[error("the stream capture was invalidated and produced no graph ({detail})")]
    CaptureInvalidated {
        /// What the runtime said when the capture was ended.
        detail: String,
    },
    /// Any other error code from the vendor runtime.
    #[error("{call} failed: {name} ({code}): {message}")]
    Vendor {
        /// The runtime function that returned the code.
        call: &'static str,
        /// The raw code.
        code: VendorCode,
        /// The runtime's name for the code, e.g. `cudaErrorInvalidValue`.
        name: String,
        /// The runtime's description of the code.
        message: String,
    },
}

impl Error {
    pub(crate) fn invalid(why: impl Into<String>) -> Self {
        Error::InvalidArgument { why: why.into() }
    }

    pub(crate) fn capture(why: impl Into<String>) -> Self {
        Error::Capture { why: why.into() }
    }
}

static DROP_ERRORS: AtomicU64 = AtomicU64::new(0);
static LAST_DROP_ERROR: Mutex<Option<Error>> = Mutex::new(None);

/// What went wrong inside `Drop` implementations so far.
///
/// `Drop` cannot return an error, and somalloc never panics in `Drop`. Instead
/// each failure (a stream-ordered free the runtime refused, a stream that could
/// not be destroyed, ...) is counted here and the most recent one is kept.
#[derive(Debug, Clone)]
pub struct DropErrors {
    /// Failures since the process started.
    pub count: u64,
    /// The most recent failure, if any.
    pub last: Option<Error>,
}

/// Reports the errors that `Drop` implementations recorded; see [`DropErrors`].
pub fn drop_errors() -> DropErrors {
    let last = match LAST_DROP_ERROR.lock() {
        Ok(g) => g.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    };
    DropErrors {
        count: DROP_ERRORS.load(Ordering::Relaxed),
        last,
    }
}

/// Records a failure inside `Drop`. Never panics.
#[inline]
pub(crate) fn record_drop_error(result: Result<()>) {
    if let Err(e) = result {
        record_drop_error_slow(e);
    }
}

#[cold]
fn record_drop_error_slow(e: Error) {
    DROP_ERRORS.fetch_add(1, Ordering::Relaxed);
    match LAST_DROP_ERROR.lock() {
        Ok(mut g) => *g = Some(e),
        Err(poisoned) => *poisoned.into_inner() = Some(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_errors_are_counted_and_kept() {
        let before = drop_errors().count;
        record_drop_error(Ok(()));
        record_drop_error(Err(Error::invalid("first")));
        record_drop_error(Err(Error::invalid("second")));
        let after = drop_errors();
        // Other tests may record too; this one added exactly two.
        assert!(after.count >= before + 2);
        assert!(after.last.is_some());
    }

    #[test]
    fn messages_name_the_problem() {
        let e = Error::Vendor {
            call: "cudaMallocAsync",
            code: VendorCode(1),
            name: "cudaErrorInvalidValue".into(),
            message: "invalid argument".into(),
        };
        assert_eq!(
            e.to_string(),
            "cudaMallocAsync failed: cudaErrorInvalidValue (1): invalid argument"
        );
        let e = Error::OutOfMemory {
            requested: 10,
            stats: None,
        };
        assert_eq!(e.to_string(), "out of memory: 10 bytes requested");
    }
}
