//! Recovery from out of memory, then one retry.

use std::ffi::c_void;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use crate::cache::CacheTier;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::pool::MemPool;
use crate::resource::MemoryResource;
use crate::stream::Stream;

/// A recovery step: gets the refused size and the allocation's stream.
type StepFn = dyn Fn(usize, &Stream) -> Result<()> + Send + Sync;

struct Step {
    name: String,
    run: Box<StepFn>,
}

/// Counters of a [`RetryAdaptor`].
///
/// Read-only: fields may be added, so it is made only by somalloc.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryStats {
    /// Allocations the inner resource refused with `OutOfMemory`.
    pub out_of_memory: u64,
    /// Of those, the ones the retry then served.
    pub recovered: u64,
    /// Recovery steps that returned an error (the others still ran).
    pub step_errors: u64,
}

/// On [`Error::OutOfMemory`] from the inner resource, runs its recovery
/// steps in the order they were added (flush a [`CacheTier`], trim a
/// [`MemPool`], any callback), then retries the allocation once. A step
/// that fails does not stop the others; other errors are not retried.
///
/// ```no_run
/// use std::sync::Arc;
/// use somalloc::adaptors::RetryAdaptor;
/// use somalloc::{CacheConfig, CacheTier, Device, MemPool, MemoryResource, Stream};
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let pool = MemPool::default_for(&dev)?;
/// let tier = Arc::new(CacheTier::new(Arc::new(pool.clone()), CacheConfig::default())?);
/// let res: Arc<dyn MemoryResource> = Arc::new(
///     RetryAdaptor::new(tier.clone())
///         .flush_on_oom(&tier)
///         .trim_on_oom(&pool)
///         .on_oom("log", |bytes, _stream| {
///             eprintln!("out of memory for {bytes} bytes: retrying");
///             Ok(())
///         }),
/// );
/// # Ok(()) }
/// ```
pub struct RetryAdaptor {
    inner: Arc<dyn MemoryResource>,
    steps: Vec<Step>,
    out_of_memory: AtomicU64,
    recovered: AtomicU64,
    step_errors: AtomicU64,
}

impl fmt::Debug for RetryAdaptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryAdaptor")
            .field(
                "steps",
                &self.steps.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            )
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl RetryAdaptor {
    /// Wraps `inner`, with no recovery steps yet (a retry without steps
    /// still helps when other threads free memory meanwhile).
    pub fn new(inner: Arc<dyn MemoryResource>) -> RetryAdaptor {
        RetryAdaptor {
            inner,
            steps: Vec::new(),
            out_of_memory: AtomicU64::new(0),
            recovered: AtomicU64::new(0),
            step_errors: AtomicU64::new(0),
        }
    }

    /// Adds a step: `f(bytes, stream)` runs on out of memory, with the
    /// refused size and the allocation's stream.
    pub fn on_oom(
        mut self,
        name: impl Into<String>,
        f: impl Fn(usize, &Stream) -> Result<()> + Send + Sync + 'static,
    ) -> RetryAdaptor {
        self.steps.push(Step {
            name: name.into(),
            run: Box::new(f),
        });
        self
    }

    /// Adds a step that flushes `tier` ([`CacheTier::flush`]): its cached
    /// blocks go back upstream, on their streams. The step holds the tier
    /// weakly (no cycle when the tier is also the inner resource); once the
    /// tier is gone it does nothing.
    pub fn flush_on_oom(self, tier: &Arc<CacheTier>) -> RetryAdaptor {
        let tier: Weak<CacheTier> = Arc::downgrade(tier);
        self.on_oom("flush cache tier", move |_, _| match tier.upgrade() {
            Some(tier) => tier.flush(),
            None => Ok(()),
        })
    }

    /// Adds a step that trims `pool` to 0 ([`MemPool::trim_to`]): unused
    /// memory whose frees have completed goes back to the device (for other
    /// pools and processes).
    ///
    /// Within one process the CUDA driver does this by itself: measured with
    /// driver 580, an allocation on a full device takes the unused memory of
    /// other pools whatever their release threshold, so on NVIDIA this step
    /// rarely finds anything left to do. It matters where the runtime does
    /// not reclaim by itself.
    pub fn trim_on_oom(self, pool: &MemPool) -> RetryAdaptor {
        let pool = pool.clone();
        self.on_oom("trim pool", move |_, _| pool.trim_to(0))
    }

    /// The names of the steps, in order.
    pub fn steps(&self) -> Vec<&str> {
        self.steps.iter().map(|s| s.name.as_str()).collect()
    }

    /// The counters.
    pub fn stats(&self) -> RetryStats {
        RetryStats {
            out_of_memory: self.out_of_memory.load(Ordering::Relaxed),
            recovered: self.recovered.load(Ordering::Relaxed),
            step_errors: self.step_errors.load(Ordering::Relaxed),
        }
    }

    /// The wrapped resource.
    pub fn inner(&self) -> &Arc<dyn MemoryResource> {
        &self.inner
    }
}

// SAFETY: hands out exactly what `inner` (itself a `MemoryResource`)
// allocated and returns it to `inner` on the same streams; its recovery
// steps free only through other resources' own safe methods.
unsafe impl MemoryResource for RetryAdaptor {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<*mut c_void> {
        match self.inner.allocate(bytes, stream) {
            Err(Error::OutOfMemory { .. }) => {
                self.out_of_memory.fetch_add(1, Ordering::Relaxed);
                for step in &self.steps {
                    if (step.run)(bytes, stream).is_err() {
                        self.step_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let retried = self.inner.allocate(bytes, stream);
                if retried.is_ok() {
                    self.recovered.fetch_add(1, Ordering::Relaxed);
                }
                retried
            }
            other => other,
        }
    }

    unsafe fn deallocate(&self, ptr: *mut c_void, bytes: usize, stream: &Stream) -> Result<()> {
        // SAFETY: forwarded from the caller; this adaptor hands out exactly
        // what `inner` allocated.
        unsafe { self.inner.deallocate(ptr, bytes, stream) }
    }

    fn device(&self) -> Device {
        self.inner.device()
    }

    fn placement(&self) -> crate::Placement {
        self.inner.placement()
    }
}
