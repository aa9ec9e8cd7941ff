//! Outstanding allocations and leak reports.

use std::backtrace::Backtrace;
use std::collections::HashMap;
use std::ffi::c_void;
use std::fmt::{self, Write as _};
use std::io::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::device::Device;
use crate::error::{InvalidReason, Result};
use crate::resource::MemoryResource;
use crate::stream::Stream;

struct Record {
    bytes: usize,
    stream: usize,
    backtrace: Option<Backtrace>,
}

/// One allocation that has not been freed; see [`TrackingAdaptor::outstanding`].
///
/// Read-only: fields may be added, so it is made only by somalloc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Outstanding {
    /// The device address.
    pub ptr: usize,
    /// Bytes requested.
    pub bytes: usize,
    /// The vendor handle of the stream it was allocated on, as an integer.
    pub stream: usize,
}

/// Whether a [`TrackingAdaptor`] keeps the backtrace of each allocation.
///
/// ```
/// use somalloc::adaptors::Backtraces;
/// assert_eq!(Backtraces::default(), Backtraces::Off);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Backtraces {
    /// Records hold the address, size and stream only (cheap).
    #[default]
    Off,
    /// Each record also keeps the allocation's backtrace, printed by the
    /// leak report (slow: for debugging).
    Capture,
}

/// Keeps a record of every allocation made through it until it is freed,
/// optionally with the backtrace of the allocation, and reports what is
/// outstanding: on demand ([`TrackingAdaptor::leak_report`]) and, if
/// anything is, on stderr when the adaptor is dropped.
///
/// A free of an address it does not track (a double free, a foreign
/// pointer) or with another size than was allocated is refused with
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) and does not reach the inner resource.
///
/// ```no_run
/// use std::sync::Arc;
/// use somalloc::adaptors::{Backtraces, TrackingAdaptor};
/// use somalloc::{Device, DeviceBuffer, MemPool, Stream};
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let stream = Stream::new(&dev)?;
/// let pool = Arc::new(MemPool::default_for(&dev)?);
/// let tracking = Arc::new(TrackingAdaptor::new(pool, Backtraces::Capture));
/// let buf = DeviceBuffer::<u8>::new_with(4096, &tracking, &stream)?;
/// assert_eq!(tracking.outstanding_bytes(), 4096);
/// eprint!("{}", tracking.leak_report()); // the allocation, with its backtrace
/// drop(buf);
/// assert!(tracking.outstanding().is_empty());
/// # Ok(()) }
/// ```
pub struct TrackingAdaptor {
    inner: Arc<dyn MemoryResource>,
    backtraces: Backtraces,
    records: Mutex<HashMap<usize, Record>>,
}

impl fmt::Debug for TrackingAdaptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrackingAdaptor")
            .field("backtraces", &self.backtraces)
            .field("outstanding", &self.records().len())
            .finish_non_exhaustive()
    }
}

impl TrackingAdaptor {
    /// Tracks what goes through to `inner`; with [`Backtraces::Capture`],
    /// each record keeps the allocation's backtrace (slow: for debugging).
    pub fn new(inner: Arc<dyn MemoryResource>, backtraces: Backtraces) -> TrackingAdaptor {
        TrackingAdaptor {
            inner,
            backtraces,
            records: Mutex::new(HashMap::new()),
        }
    }

    fn records(&self) -> MutexGuard<'_, HashMap<usize, Record>> {
        // No code panics while holding this lock; the map stays consistent.
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The wrapped resource.
    pub fn inner(&self) -> &Arc<dyn MemoryResource> {
        &self.inner
    }

    /// The allocations not yet freed, by address.
    pub fn outstanding(&self) -> Vec<Outstanding> {
        let mut all: Vec<Outstanding> = self
            .records()
            .iter()
            .map(|(&ptr, r)| Outstanding {
                ptr,
                bytes: r.bytes,
                stream: r.stream,
            })
            .collect();
        all.sort_by_key(|o| o.ptr);
        all
    }

    /// Bytes of the allocations not yet freed.
    pub fn outstanding_bytes(&self) -> usize {
        self.records().values().map(|r| r.bytes).sum()
    }

    /// A report of the allocations not yet freed (with their backtraces
    /// when captured); "no outstanding allocations" when there are none.
    pub fn leak_report(&self) -> String {
        let records = self.records();
        if records.is_empty() {
            return "somalloc: no outstanding allocations\n".into();
        }
        let mut sorted: Vec<(&usize, &Record)> = records.iter().collect();
        sorted.sort_by_key(|(ptr, _)| **ptr);
        let total: usize = sorted.iter().map(|(_, r)| r.bytes).sum();
        let mut out = format!(
            "somalloc: {} outstanding allocation(s), {total} bytes\n",
            sorted.len()
        );
        for (ptr, r) in sorted {
            // Writing to a String cannot fail.
            let _ = writeln!(out, "  {ptr:#x}: {} bytes on stream {:#x}", r.bytes, r.stream);
            if let Some(bt) = &r.backtrace {
                for line in bt.to_string().lines() {
                    let _ = writeln!(out, "      {line}");
                }
            }
        }
        out
    }
}

// SAFETY: hands out exactly what `inner` (itself a `MemoryResource`)
// allocated and returns it to `inner` on the same streams (refusing frees
// it cannot match, which only leaks).
unsafe impl MemoryResource for TrackingAdaptor {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<*mut c_void> {
        let ptr = self.inner.allocate(bytes, stream)?;
        let backtrace = (self.backtraces == Backtraces::Capture).then(Backtrace::force_capture);
        self.records().insert(
            ptr as usize,
            Record {
                bytes,
                stream: stream.as_raw() as usize,
                backtrace,
            },
        );
        Ok(ptr)
    }

    unsafe fn deallocate(&self, ptr: *mut c_void, bytes: usize, stream: &Stream) -> Result<()> {
        let record = {
            let mut records = self.records();
            match records.get(&(ptr as usize)) {
                None => {
                    return Err(InvalidReason::UnknownAllocation.error(format!(
                        "free of {ptr:p}, which is not outstanding here (a double free or a foreign pointer)"
                    )))
                }
                Some(r) if r.bytes != bytes => {
                    return Err(InvalidReason::UnknownAllocation.error(format!(
                        "free of {ptr:p} with {bytes} bytes; it was allocated with {}",
                        r.bytes
                    )))
                }
                Some(_) => records.remove(&(ptr as usize)),
            }
        };
        // SAFETY: forwarded from the caller; checked above that `ptr` is
        // outstanding here with this size.
        let result = unsafe { self.inner.deallocate(ptr, bytes, stream) };
        if let (Err(_), Some(record)) = (&result, record) {
            // The inner resource did not free it: it is still outstanding.
            self.records().insert(ptr as usize, record);
        }
        result
    }

    fn device(&self) -> Device {
        self.inner.device()
    }

    fn placement(&self) -> crate::Placement {
        self.inner.placement()
    }
}

impl Drop for TrackingAdaptor {
    fn drop(&mut self) {
        if !self.records().is_empty() {
            // Never panics: an error writing to stderr is ignored.
            let _ = std::io::stderr().lock().write_all(self.leak_report().as_bytes());
        }
    }
}
