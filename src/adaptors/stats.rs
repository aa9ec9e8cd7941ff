//! Allocation statistics.

use std::ffi::c_void;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::device::Device;
use crate::error::Result;
use crate::resource::MemoryResource;
use crate::stream::Stream;

/// Buckets of the size histogram: one per power of two of `usize`.
const BUCKETS: usize = usize::BITS as usize;

/// A snapshot of a [`StatisticsAdaptor`]'s counters.
///
/// Read-only: fields may be added, so it is made only by somalloc.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResourceStats {
    /// Successful allocations.
    pub allocations: u64,
    /// Successful frees.
    pub deallocations: u64,
    /// Allocations the inner resource refused.
    pub failed_allocations: u64,
    /// Bytes allocated and not yet freed.
    pub bytes_current: usize,
    /// Highest `bytes_current` since creation or [`StatisticsAdaptor::reset_peaks`].
    pub bytes_peak: usize,
    /// Bytes of all successful allocations so far.
    pub bytes_total: usize,
    /// Allocations not yet freed.
    pub outstanding: usize,
    /// Highest `outstanding` since creation or the last reset.
    pub outstanding_peak: usize,
    /// `histogram[i]`: successful allocations of `2^i ..= 2^(i+1) - 1` bytes.
    pub histogram: [u64; BUCKETS],
}

impl Default for ResourceStats {
    fn default() -> Self {
        ResourceStats {
            allocations: 0,
            deallocations: 0,
            failed_allocations: 0,
            bytes_current: 0,
            bytes_peak: 0,
            bytes_total: 0,
            outstanding: 0,
            outstanding_peak: 0,
            histogram: [0; BUCKETS],
        }
    }
}

impl ResourceStats {
    /// The histogram's non-empty buckets as `(smallest size, largest size,
    /// allocations)`.
    pub fn buckets(&self) -> impl Iterator<Item = (usize, usize, u64)> + '_ {
        self.histogram
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, n)| (1usize << i, (1usize << i) - 1 + (1usize << i), *n))
    }
}

impl fmt::Display for ResourceStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "allocations {} (failed {}), frees {}, outstanding {} (peak {}), bytes {} (peak {}, total {})",
            self.allocations,
            self.failed_allocations,
            self.deallocations,
            self.outstanding,
            self.outstanding_peak,
            self.bytes_current,
            self.bytes_peak,
            self.bytes_total
        )?;
        for (low, high, n) in self.buckets() {
            writeln!(f, "  {low:>14} ..= {high:<14} {n}")?;
        }
        Ok(())
    }
}

/// Counts allocations, frees and bytes of the resource it wraps (lock-free
/// atomics), with peaks and a power-of-two size histogram.
///
/// ```no_run
/// use std::sync::Arc;
/// use somalloc::adaptors::StatisticsAdaptor;
/// use somalloc::{Device, DeviceBuffer, MemPool, MemoryResource, Stream};
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let stream = Stream::new(&dev)?;
/// let stats = Arc::new(StatisticsAdaptor::new(Arc::new(MemPool::default_for(&dev)?)));
/// let res: Arc<dyn MemoryResource> = stats.clone();
/// drop(DeviceBuffer::<u8>::new_with(3000, &res, &stream)?);
/// let s = stats.stats();
/// assert_eq!((s.allocations, s.bytes_peak, s.histogram[11]), (1, 3000, 1));
/// # Ok(()) }
/// ```
pub struct StatisticsAdaptor {
    inner: Arc<dyn MemoryResource>,
    allocations: AtomicU64,
    deallocations: AtomicU64,
    failed: AtomicU64,
    bytes_current: AtomicUsize,
    bytes_peak: AtomicUsize,
    bytes_total: AtomicUsize,
    outstanding: AtomicUsize,
    outstanding_peak: AtomicUsize,
    histogram: [AtomicU64; BUCKETS],
}

impl fmt::Debug for StatisticsAdaptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StatisticsAdaptor")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl StatisticsAdaptor {
    /// Counts what goes through to `inner`.
    pub fn new(inner: Arc<dyn MemoryResource>) -> StatisticsAdaptor {
        StatisticsAdaptor {
            inner,
            allocations: AtomicU64::new(0),
            deallocations: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            bytes_current: AtomicUsize::new(0),
            bytes_peak: AtomicUsize::new(0),
            bytes_total: AtomicUsize::new(0),
            outstanding: AtomicUsize::new(0),
            outstanding_peak: AtomicUsize::new(0),
            histogram: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// The wrapped resource.
    pub fn inner(&self) -> &Arc<dyn MemoryResource> {
        &self.inner
    }

    /// A snapshot of the counters (each read atomically; the set is not a
    /// single atomic snapshot while other threads allocate).
    pub fn stats(&self) -> ResourceStats {
        let r = Ordering::Relaxed;
        ResourceStats {
            allocations: self.allocations.load(r),
            deallocations: self.deallocations.load(r),
            failed_allocations: self.failed.load(r),
            bytes_current: self.bytes_current.load(r),
            bytes_peak: self.bytes_peak.load(r),
            bytes_total: self.bytes_total.load(r),
            outstanding: self.outstanding.load(r),
            outstanding_peak: self.outstanding_peak.load(r),
            histogram: std::array::from_fn(|i| self.histogram[i].load(r)),
        }
    }

    /// Sets both peaks to the current values.
    pub fn reset_peaks(&self) {
        let r = Ordering::Relaxed;
        self.bytes_peak.store(self.bytes_current.load(r), r);
        self.outstanding_peak.store(self.outstanding.load(r), r);
    }
}

// SAFETY: hands out exactly what `inner` (itself a `MemoryResource`)
// allocated and returns it to `inner`, on the same streams: the contract
// carries over.
unsafe impl MemoryResource for StatisticsAdaptor {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<*mut c_void> {
        let r = Ordering::Relaxed;
        match self.inner.allocate(bytes, stream) {
            Ok(ptr) => {
                self.allocations.fetch_add(1, r);
                self.bytes_total.fetch_add(bytes, r);
                let now = self.bytes_current.fetch_add(bytes, r).saturating_add(bytes);
                self.bytes_peak.fetch_max(now, r);
                let count = self.outstanding.fetch_add(1, r).saturating_add(1);
                self.outstanding_peak.fetch_max(count, r);
                // bytes > 0, so the bucket is floor(log2 bytes) < BUCKETS.
                let bucket = (usize::BITS - 1).saturating_sub(bytes.leading_zeros()) as usize;
                if let Some(slot) = self.histogram.get(bucket) {
                    slot.fetch_add(1, r);
                }
                Ok(ptr)
            }
            Err(e) => {
                self.failed.fetch_add(1, r);
                Err(e)
            }
        }
    }

    unsafe fn deallocate(&self, ptr: *mut c_void, bytes: usize, stream: &Stream) -> Result<()> {
        // SAFETY: forwarded from the caller; this adaptor hands out exactly
        // what `inner` allocated.
        unsafe { self.inner.deallocate(ptr, bytes, stream)? };
        let r = Ordering::Relaxed;
        self.deallocations.fetch_add(1, r);
        // Saturating: a free of memory allocated before some other layer
        // cannot drive the counters below zero.
        let _ = self
            .bytes_current
            .fetch_update(r, r, |b| Some(b.saturating_sub(bytes)));
        let _ = self.outstanding.fetch_update(r, r, |n| Some(n.saturating_sub(1)));
        Ok(())
    }

    fn device(&self) -> Device {
        self.inner.device()
    }

    fn placement(&self) -> crate::Placement {
        self.inner.placement()
    }
}
