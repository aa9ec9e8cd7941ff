//! A byte cap.

use std::ffi::c_void;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::resource::MemoryResource;
use crate::stream::Stream;

/// Lets at most `limit` bytes be allocated through it at a time; beyond,
/// [`Error::OutOfMemory`] (`stats: None`) without calling the inner
/// resource.
///
/// ```no_run
/// use std::sync::Arc;
/// use somalloc::adaptors::LimitingAdaptor;
/// use somalloc::{Device, DeviceBuffer, Error, MemPool, MemoryResource, Stream};
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let stream = Stream::new(&dev)?;
/// let res: Arc<dyn MemoryResource> =
///     Arc::new(LimitingAdaptor::new(Arc::new(MemPool::default_for(&dev)?), 1 << 20));
/// let a = DeviceBuffer::<u8>::new_with(1 << 20, &res, &stream)?;
/// assert!(matches!(
///     DeviceBuffer::<u8>::new_with(1, &res, &stream),
///     Err(Error::OutOfMemory { requested: 1, .. })
/// ));
/// # drop(a);
/// # Ok(()) }
/// ```
pub struct LimitingAdaptor {
    inner: Arc<dyn MemoryResource>,
    limit: usize,
    allocated: AtomicUsize,
}

impl fmt::Debug for LimitingAdaptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitingAdaptor")
            .field("limit", &self.limit)
            .field("allocated", &self.allocated_bytes())
            .finish_non_exhaustive()
    }
}

impl LimitingAdaptor {
    /// At most `limit` bytes through to `inner` at a time.
    pub fn new(inner: Arc<dyn MemoryResource>, limit: usize) -> LimitingAdaptor {
        LimitingAdaptor {
            inner,
            limit,
            allocated: AtomicUsize::new(0),
        }
    }

    /// The cap in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes allocated through this adaptor and not yet freed.
    pub fn allocated_bytes(&self) -> usize {
        self.allocated.load(Ordering::Relaxed)
    }

    /// The wrapped resource.
    pub fn inner(&self) -> &Arc<dyn MemoryResource> {
        &self.inner
    }
}

// SAFETY: hands out exactly what `inner` (itself a `MemoryResource`)
// allocated, or nothing; returns it to `inner` on the same streams.
unsafe impl MemoryResource for LimitingAdaptor {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<*mut c_void> {
        // Reserve first, so that concurrent allocations never overshoot.
        let reserved = self
            .allocated
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                now.checked_add(bytes).filter(|n| *n <= self.limit)
            });
        if reserved.is_err() {
            return Err(Error::OutOfMemory {
                requested: bytes,
                stats: None,
                arena: None,
            });
        }
        let result = self.inner.allocate(bytes, stream);
        if result.is_err() {
            self.allocated.fetch_sub(bytes, Ordering::Relaxed);
        }
        result
    }

    unsafe fn deallocate(&self, ptr: *mut c_void, bytes: usize, stream: &Stream) -> Result<()> {
        // SAFETY: forwarded from the caller; this adaptor hands out exactly
        // what `inner` allocated.
        unsafe { self.inner.deallocate(ptr, bytes, stream)? };
        // Only a successful free gives the bytes back: after a failed one the
        // memory is still held.
        let _ = self
            .allocated
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(bytes))
            });
        Ok(())
    }

    fn device(&self) -> Device {
        self.inner.device()
    }

    fn placement(&self) -> crate::Placement {
        self.inner.placement()
    }
}
