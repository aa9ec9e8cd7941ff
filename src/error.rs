//! One error type for every backend.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::pool_stats::PoolStats;

/// The GPU vendor whose runtime this crate was built for; see
/// [`Device::backend`](crate::Device::backend).
///
/// More vendors may be added, so a `match` needs a `_` arm.
///
/// ```
/// use somalloc::Vendor;
/// assert_eq!(Vendor::Rocm.as_str(), "rocm");
/// assert_eq!(Vendor::Cuda.to_string(), "cuda");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Vendor {
    /// NVIDIA, through the CUDA runtime (`libcudart`; feature `cuda`).
    Cuda,
    /// AMD, through the HIP runtime (`libamdhip64`; feature `rocm`).
    Rocm,
}

impl Vendor {
    /// The feature's name: `"cuda"` or `"rocm"` (also how
    /// [`Error::NoDevice`] and [`Error::Unsupported`] show their `backend`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Vendor::Cuda => "cuda",
            Vendor::Rocm => "rocm",
        }
    }
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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
        /// Why the search failed: every library tried, and why each was not
        /// used.
        reason: String,
        /// The error of the last library tried, as the loader or the version
        /// check gave it; also what [`source()`](std::error::Error::source)
        /// returns.
        #[source]
        cause: Option<Arc<dyn std::error::Error + Send + Sync>>,
    },
    /// The runtime loaded but reports no usable device.
    #[error("no GPU device is available ({backend}: {detail})")]
    NoDevice {
        /// The backend this crate was built for ([`Device::backend`](crate::Device::backend)).
        backend: Vendor,
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
    #[error("out of memory: {requested} bytes requested{}{}", match stats { Some(s) => format!(" (pool: {s})"), None => String::new() }, match arena { Some(a) => format!(" (arena: {a})"), None => String::new() })]
    OutOfMemory {
        /// Bytes asked for.
        requested: usize,
        /// The statistics of the pool that refused, when they could be read.
        stats: Option<PoolStats>,
        /// For a [`VmmArena`](crate::VmmArena)'s refusal, after its recovery
        /// steps: what it held (live, mapped, reserved, the largest free
        /// range, fragmentation).
        arena: Option<Box<crate::pool_stats::ArenaStats>>,
    },
    /// An argument is outside what the call accepts. Nothing was enqueued.
    ///
    /// `reason` is for code that reacts to some causes (see
    /// [`InvalidReason`]); `why` says what exactly was wrong, for people.
    ///
    /// ```
    /// use somalloc::{Error, InvalidReason};
    /// # fn wrong_stream() -> Error {
    /// #     Error::InvalidArgument { reason: InvalidReason::WrongStream, why: String::new() }
    /// # }
    /// match wrong_stream() {
    ///     Error::InvalidArgument { reason: InvalidReason::WrongStream, why } => {
    ///         eprintln!("forgot a use_on: {why}")
    ///     }
    ///     other => panic!("{other}"),
    /// }
    /// ```
    #[error("invalid argument: {why}")]
    InvalidArgument {
        /// Which kind of mistake it is.
        reason: InvalidReason,
        /// What was wrong.
        why: String,
    },
    /// The selected vendor or the installed runtime does not have this.
    #[error("unsupported on {backend}: {what}")]
    Unsupported {
        /// The backend this crate was built for ([`Device::backend`](crate::Device::backend)).
        backend: Vendor,
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
    /// A file could not be created, read or written (a trace file, say).
    #[error("{what}: {message}")]
    Io {
        /// What was being done, with the path.
        what: String,
        /// The operating system's kind of error.
        kind: std::io::ErrorKind,
        /// The operating system's message.
        message: String,
    },
}

/// Why an argument was refused ([`Error::InvalidArgument`]).
///
/// New reasons may be added (a refusal that is [`Other`](InvalidReason::Other)
/// today may get a reason of its own), so a `match` needs a `_` arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InvalidReason {
    /// A size in bytes does not fit: `len × size_of::<T>()` overflows
    /// `usize`, or an exported size does not fit this platform's `usize`.
    SizeOverflow,
    /// 0 bytes where memory is needed: a 0-byte allocation or free through
    /// [`MemoryResource`](crate::MemoryResource) (buffers of 0 elements never
    /// call a resource), or the export of an empty buffer.
    ZeroBytes,
    /// Objects of two devices used together: a pool, resource, cache tier or
    /// graph of one device with a stream of another, an import on a stream
    /// of another device than the pool's, or cudarc memory of another
    /// device or context.
    WrongDevice,
    /// A buffer given to a stream of another device
    /// ([`DeviceBuffer::use_on`](crate::DeviceBuffer::use_on)) without access:
    /// its pool does not grant that device access
    /// ([`MemPool::set_access`](crate::MemPool::set_access)), or it is not
    /// from an explicit pool at all.
    NoPeerAccess,
    /// Memory used on a stream it was not given to: a buffer that needs
    /// [`DeviceBuffer::use_on`](crate::DeviceBuffer::use_on) first (a copy
    /// source, a kernel argument), or a [`StreamCache`](crate::StreamCache)
    /// used with another stream than its own.
    WrongStream,
    /// A raw stream handle that is not one stream: null (the legacy default
    /// stream), `0x1` (`cudaStreamLegacy`), `0x2` (the per-thread default
    /// stream), or cudarc's default and per-thread streams.
    SpecialStreamHandle,
    /// The two sides of a copy (or of a two-buffer operation) have
    /// different lengths.
    LengthMismatch,
    /// A range outside the buffer or view it was asked of
    /// ([`DeviceBuffer::slice`](crate::DeviceBuffer::slice),
    /// [`DeviceView::split_at`](crate::DeviceView::split_at), ...).
    OutOfBounds,
    /// A free of an address that the resource did not hand out, or with
    /// another size than it was allocated with (a double free, a foreign
    /// pointer): what [`TrackingAdaptor`](crate::adaptors::TrackingAdaptor)
    /// catches.
    UnknownAllocation,
    /// Anything else; `why` says what.
    Other,
}

impl InvalidReason {
    /// An [`Error::InvalidArgument`] of this reason.
    pub(crate) fn error(self, why: impl Into<String>) -> Error {
        Error::InvalidArgument {
            reason: self,
            why: why.into(),
        }
    }
}

impl Error {
    /// An [`Error::InvalidArgument`] of reason [`InvalidReason::Other`].
    pub(crate) fn invalid(why: impl Into<String>) -> Self {
        InvalidReason::Other.error(why)
    }

    /// The reason of an [`Error::InvalidArgument`]; `None` for every other
    /// error.
    ///
    /// ```
    /// use somalloc::{Error, InvalidReason};
    /// let e = Error::InvalidArgument { reason: InvalidReason::LengthMismatch, why: "3 != 4".into() };
    /// assert_eq!(e.invalid_reason(), Some(InvalidReason::LengthMismatch));
    /// let oom = Error::OutOfMemory { requested: 1, stats: None, arena: None };
    /// assert_eq!(oom.invalid_reason(), None);
    /// ```
    pub fn invalid_reason(&self) -> Option<InvalidReason> {
        match self {
            Error::InvalidArgument { reason, .. } => Some(*reason),
            _ => None,
        }
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
/// So are failures of work that somalloc does on its own initiative inside a
/// call that itself succeeded: e.g. a cache tier's allocation that frees
/// cached blocks to make room, and whose frees fail (the blocks then stay
/// cached and are freed again later, and the allocation goes on).
///
/// Read-only: fields may be added, so it is made only by somalloc.
#[derive(Debug, Clone)]
#[non_exhaustive]
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

#[cfg(test)]
thread_local! {
    /// Unit tests: the drop errors recorded on this thread (the process's
    /// count is shared by the tests that run at the same time).
    static DROP_ERRORS_HERE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Unit tests: the drop errors recorded on this thread so far.
#[cfg(test)]
pub(crate) fn drop_errors_here() -> u64 {
    DROP_ERRORS_HERE.with(|n| n.get())
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
    #[cfg(test)]
    DROP_ERRORS_HERE.with(|n| n.set(n.get() + 1));
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

    /// Every reason that can be provoked without a GPU, through the public
    /// calls, on fake streams (of made-up devices) and a fake resource.
    #[test]
    fn invalid_reasons_are_set_where_users_match_them() {
        use std::ffi::c_void;
        use std::sync::Arc;

        use crate::adaptors::{Backtraces, TrackingAdaptor};
        use crate::device::Device;
        use crate::resource::MemoryResource;
        use crate::stream::Stream;
        use crate::testing::FakeResource;
        use crate::DeviceBuffer;

        fn reason<T: std::fmt::Debug>(r: Result<T>) -> InvalidReason {
            match r {
                Err(Error::InvalidArgument { reason, why }) => {
                    assert!(!why.is_empty());
                    reason
                }
                other => panic!("not an invalid argument: {other:?}"),
            }
        }

        let fake = FakeResource::new(None);
        let res: Arc<dyn MemoryResource> = fake.clone();
        let (s0, s0b, s1) = (
            Stream::fake(0x100, 0),
            Stream::fake(0x200, 0),
            Stream::fake(0x300, 1),
        );

        assert_eq!(
            reason(DeviceBuffer::<u64>::new_with(usize::MAX / 4, &res, &s0)),
            InvalidReason::SizeOverflow
        );
        assert_eq!(
            reason(DeviceBuffer::<u8>::new_with(16, &res, &s1)),
            InvalidReason::WrongDevice
        );
        let mut a = DeviceBuffer::<u8>::new_with(16, &res, &s0).unwrap();
        let mut b = DeviceBuffer::<u8>::new_with(16, &res, &s0b).unwrap();
        let mut short = DeviceBuffer::<u8>::new_with(8, &res, &s0b).unwrap();
        // Buffers of a resource never go to another device.
        assert_eq!(reason(a.use_on(&s1)), InvalidReason::NoPeerAccess);
        // `a` was not given to `b`'s stream.
        assert_eq!(reason(b.copy_from_device(&a)), InvalidReason::WrongStream);
        assert_eq!(reason(short.copy_from_device(&a)), InvalidReason::LengthMismatch);
        let empty = DeviceBuffer::<u8>::new_with(0, &res, &s0).unwrap();
        assert_eq!(reason(empty.export()), InvalidReason::ZeroBytes);
        // SAFETY: refused before the handle is used.
        let special = unsafe { Stream::from_raw(&Device::fake(0), 0x2 as *mut c_void) };
        assert_eq!(reason(special), InvalidReason::SpecialStreamHandle);
        drop((a, b, short, empty));

        let tier = crate::CacheTier::new(res.clone(), crate::CacheConfig::default()).unwrap();
        assert_eq!(reason(tier.for_stream(&s1)), InvalidReason::WrongDevice);
        let cache = tier.for_stream(&s0).unwrap();
        assert_eq!(reason(cache.allocate(64, &s0b)), InvalidReason::WrongStream);
        assert_eq!(reason(cache.allocate(0, &s0)), InvalidReason::ZeroBytes);
        drop((cache, tier));

        let tracking = TrackingAdaptor::new(res, Backtraces::Off);
        let p = tracking.allocate(64, &s0).unwrap();
        // SAFETY: allocated above, freed once; the second free is refused
        // before the fake resource sees it.
        unsafe {
            tracking.deallocate(p, 64, &s0).unwrap();
            assert_eq!(
                reason(tracking.deallocate(p, 64, &s0)),
                InvalidReason::UnknownAllocation
            );
        }
        fake.assert_clean();

        let e = InvalidReason::WrongStream.error("w");
        assert_eq!(e.invalid_reason(), Some(InvalidReason::WrongStream));
        assert_eq!(e.to_string(), "invalid argument: w");
        assert_eq!(Error::invalid("x").invalid_reason(), Some(InvalidReason::Other));
        assert_eq!(Error::capture("c").invalid_reason(), None);
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
            arena: None,
        };
        assert_eq!(e.to_string(), "out of memory: 10 bytes requested");
    }
}
