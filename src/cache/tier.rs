//! The tier: [`CacheTier`], the registry of per-stream caches over one
//! upstream resource, and a resource itself for any stream.

use crate::sync::{AtomicUsize, Ordering};
use std::collections::HashMap;
use std::ffi::c_void;
use std::fmt;
use std::sync::{Arc, Mutex};

use super::class::{class_index, class_size, MAX_BLOCK_LIMIT, MIN_BLOCK};
use super::hot::Ask;
use super::lock;
use super::lock::CachePadded;
use super::shared::{Shared, MAX_GRANULE};
use super::stream_cache::StreamCache;
use super::{CacheConfig, CacheStats};
use crate::device::Device;
use crate::error::{record_drop_error, Error, InvalidReason, Result};
use crate::resource::MemoryResource;
use crate::stream::{Asked, Stream};

/// Per-stream caches of freed blocks in front of an upstream
/// [`MemoryResource`]; see [the stream cache tier](crate#the-stream-cache-tier) for the design.
///
/// The fast way in is [`CacheTier::for_stream`], once per stream: its
/// [`StreamCache`] serves that stream without touching anything shared.
/// The tier is itself a [`MemoryResource`] too, for any stream: each call
/// then finds the stream's cache under one lock shared by all threads
/// (registering the stream on its first allocation) — simpler, but slower
/// and contended across threads.
///
/// The tier keeps every stream it has a cache for alive until
/// [`CacheTier::remove_stream`] or its drop. Dropping it returns every
/// cached block to the upstream resource; as during
/// [`remove_stream`](CacheTier::remove_stream), no capture of its streams
/// may begin meanwhile (see [under stream
/// capture](crate#under-stream-capture)).
///
/// ```no_run
/// use std::sync::Arc;
/// use somalloc::{CacheConfig, CacheTier, Device, DeviceBuffer, MemPool, MemoryResource, Stream};
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let pool = MemPool::default_for(&dev)?;
/// let tier = Arc::new(CacheTier::new(
///     Arc::new(pool.clone()),
///     CacheConfig::default().total_cap(4 << 30),
/// )?);
/// std::thread::scope(|s| {
///     for _ in 0..8 {
///         let tier = tier.clone();
///         s.spawn(move || -> somalloc::Result<()> {
///             let stream = Stream::new(&dev)?;
///             let res: Arc<dyn MemoryResource> = tier.for_stream(&stream)?;
///             for _ in 0..1000 {
///                 drop(DeviceBuffer::<u8>::new_with(64 << 10, &res, &stream)?);
///             }
///             stream.synchronize()
///         });
///     }
/// });
/// println!("{}", tier.stats());
/// tier.flush()?;
/// # Ok(()) }
/// ```
pub struct CacheTier {
    pub(super) shared: Arc<Shared>,
}

impl fmt::Debug for CacheTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheTier")
            .field("config", &self.shared.config)
            .field("stats", &self.stats())
            .finish()
    }
}

impl CacheTier {
    /// The smallest size class: requests below it get blocks of this size.
    pub const MIN_BLOCK: usize = MIN_BLOCK;

    /// A tier over `upstream`. `max_block_bytes` must be in 256 B ..= 1 TiB
    /// ([`Error::InvalidArgument`] otherwise); caps of 0 turn caching off.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use somalloc::{CacheConfig, CacheTier, Device, MemPool};
    /// # fn main() -> somalloc::Result<()> {
    /// let pool = MemPool::default_for(&Device::get(0)?)?;
    /// let tier = CacheTier::new(Arc::new(pool), CacheConfig::default().total_cap(4 << 30))?;
    /// assert_eq!(tier.config().total_cap, 4 << 30);
    /// # Ok(()) }
    /// ```
    pub fn new(upstream: Arc<dyn MemoryResource>, config: CacheConfig) -> Result<CacheTier> {
        if !(Self::MIN_BLOCK..=MAX_BLOCK_LIMIT).contains(&config.max_block_bytes) {
            return Err(Error::invalid(format!(
                "max_block_bytes {} is outside {}..={MAX_BLOCK_LIMIT}",
                config.max_block_bytes,
                Self::MIN_BLOCK
            )));
        }
        let classes = class_index(config.max_block_bytes) + 1;
        let granule = (config.total_cap / 64).clamp(Self::MIN_BLOCK, MAX_GRANULE);
        Ok(CacheTier {
            shared: Arc::new(Shared {
                device: upstream.device(),
                upstream,
                config,
                classes,
                granule,
                leased: CachePadded(AtomicUsize::new(0)),
                registry: CachePadded(Mutex::new(HashMap::new())),
                captured_of_removed: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The cache of `stream`, made on first use. Keep the handle and use it
    /// for every allocation on that stream: that is the uncontended path.
    /// The stream must belong to the upstream's device. The per-thread
    /// default stream ([`Stream::per_thread_default`]) is refused with
    /// [`InvalidReason::SpecialStreamHandle`]: its handle names another
    /// stream on every thread, so it cannot key a cache.
    pub fn for_stream(&self, stream: &Stream) -> Result<Arc<StreamCache>> {
        if stream.is_per_thread_default() {
            return Err(InvalidReason::SpecialStreamHandle.error(
                "the per-thread default stream has no cache: its handle names another stream on \
                 every thread; allocate on it from the upstream resource",
            ));
        }
        if stream.device() != self.shared.device {
            return Err(InvalidReason::WrongDevice.error(format!(
                "a cache tier of device {} used with a stream of device {}",
                self.shared.device.ordinal(),
                stream.device().ordinal()
            )));
        }
        let key = stream.as_raw() as usize;
        let mut registry = lock(&self.shared.registry);
        let cache = registry.entry(key).or_insert_with(|| {
            let cache = StreamCache::new(stream, self.shared.clone());
            if let Some(captured) = lock(&self.shared.captured_of_removed).remove(&key) {
                cache.lock().captured = captured;
            }
            Arc::new(cache)
        });
        Ok(Arc::clone(cache))
    }

    /// Returns `stream`'s cached blocks and forgets the stream (so the tier
    /// no longer keeps it alive). Handles to its [`StreamCache`] that are
    /// still held (by buffers, say) keep working as a pass-through to the
    /// upstream resource. `false` if the stream had no cache.
    ///
    /// A capture of `stream` must not begin, on any thread, while this
    /// runs: the stream is asked once whether it captures, before its
    /// blocks are freed on it (or queued until a capture they found ends),
    /// and a capture begun in between would receive the frees as its own
    /// work (recorded into its graph, or refused by the runtime). See
    /// [under stream capture](crate#under-stream-capture).
    pub fn remove_stream(&self, stream: &Stream) -> Result<bool> {
        let key = stream.as_raw() as usize;
        let removed = {
            let mut registry = lock(&self.shared.registry);
            let removed = registry.remove(&key);
            if let Some(cache) = &removed {
                // Its graph memory still out goes to the stream's next
                // cache, decided before another cache can be registered.
                let captured = std::mem::take(&mut cache.lock().captured);
                if !captured.is_empty() {
                    lock(&self.shared.captured_of_removed)
                        .entry(key)
                        .or_default()
                        .extend(captured);
                }
            }
            removed
        };
        match removed {
            Some(cache) => cache.detach().map(|_| true),
            None => Ok(false),
        }
    }

    /// Returns every cached block of every stream to the upstream resource,
    /// each through a stream-ordered free on its own stream. Synchronise the
    /// streams (or wait for the frees otherwise) before expecting the
    /// upstream pool's used bytes to drop. Tries every stream and reports
    /// the first error. A stream that is capturing keeps its cached blocks
    /// (its frees would be recorded into the graph).
    ///
    /// A capture of any of the tier's streams must not begin, on any
    /// thread, while this runs: each stream is asked once whether it
    /// captures, before its frees, and a capture begun in between would
    /// receive them as its own work (recorded into its graph, or refused by
    /// the runtime).
    pub fn flush(&self) -> Result<()> {
        crate::trace::note(crate::trace::Action::Flush, self.shared.device.ordinal(), None, 0);
        let mut first_error = None;
        for cache in self.shared.snapshot() {
            if let Err(e) = cache.release_all() {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Returns cached blocks (largest first, from every stream in proportion
    /// to what it caches) until at most `bytes_to_keep` stay cached in all.
    /// Capturing streams are skipped; as for [`flush`](CacheTier::flush), a
    /// capture of any of the tier's streams must not begin while this runs.
    pub fn trim(&self, bytes_to_keep: usize) -> Result<()> {
        let caches = self.shared.snapshot();
        let amounts: Vec<usize> = caches.iter().map(|c| c.cached_bytes()).collect();
        let total: usize = amounts.iter().sum();
        if total <= bytes_to_keep {
            return Ok(());
        }
        let mut first_error = None;
        for (cache, amount) in caches.iter().zip(amounts) {
            // floor(keep * amount / total) in u128: the shares sum to at most `keep`.
            let share = (bytes_to_keep as u128 * amount as u128 / total.max(1) as u128) as usize;
            if let Err(e) = cache.trim(share) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Counters of every registered stream, and their sums.
    pub fn stats(&self) -> CacheStats {
        let mut stats = CacheStats {
            leased_bytes: self.shared.leased.load(Ordering::Relaxed),
            ..CacheStats::default()
        };
        for cache in self.shared.snapshot() {
            let s = cache.stats();
            stats.total.add(&s);
            stats.streams.push(s);
        }
        stats.streams.sort_by_key(|s| s.stream);
        stats
    }

    /// Bytes sitting in all caches now.
    pub fn cached_bytes(&self) -> usize {
        self.shared.snapshot().iter().map(|c| c.cached_bytes()).sum()
    }

    /// The configuration.
    pub fn config(&self) -> &CacheConfig {
        &self.shared.config
    }

    /// The upstream resource.
    pub fn upstream(&self) -> &Arc<dyn MemoryResource> {
        &self.shared.upstream
    }

    /// The bytes the tier asks the upstream for when `bytes` are requested:
    /// the size class (at least `bytes`, less than `bytes × 9/8` from 256 B
    /// on, 256 below) up to `max_block_bytes`, `bytes` itself above.
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use somalloc::{CacheConfig, CacheTier, Device, MemPool};
    /// # fn main() -> somalloc::Result<()> {
    /// let pool = MemPool::default_for(&Device::get(0)?)?;
    /// let tier = CacheTier::new(Arc::new(pool), CacheConfig::default())?;
    /// assert_eq!(tier.block_size(1), 256);
    /// assert_eq!(tier.block_size(1000), 1024);
    /// assert_eq!(tier.block_size(1025), 1152);
    /// assert_eq!(tier.block_size(100 << 20), 100 << 20); // above max_block_bytes
    /// # Ok(()) }
    /// ```
    pub fn block_size(&self, bytes: usize) -> usize {
        match self.shared.class_of(bytes) {
            Some(idx) if bytes > 0 => class_size(idx),
            _ => bytes,
        }
    }
}

// SAFETY: every call goes to a `StreamCache` (see its impl) or, for a
// stream removed since the allocation, straight to the upstream resource in
// the size it was allocated with.
unsafe impl MemoryResource for CacheTier {
    /// Through the stream's cache (registering the stream on first use).
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<*mut c_void> {
        // Always a block of the request's class (see `deallocate`).
        let cache = self.for_stream(stream)?;
        match cache.try_hit(bytes, stream, false) {
            Some(ptr) => Ok(ptr),
            None => cache
                .take_slow(bytes, stream, Ask::TIER, Asked::NOT_YET)
                .map(|(ptr, _)| ptr),
        }
    }

    /// Through the stream's cache; for a stream removed since the
    /// allocation, straight to the upstream resource.
    unsafe fn deallocate(&self, ptr: *mut c_void, bytes: usize, stream: &Stream) -> Result<()> {
        let key = stream.as_raw() as usize;
        let addr = ptr as usize;
        let (cache, graph) = {
            let registry = lock(&self.shared.registry);
            match registry.get(&key) {
                Some(cache) => (Some(Arc::clone(cache)), None),
                // Graph memory of the removed stream's cache comes out of
                // the tier's record for the stream, in the same access to
                // the registry: a cache registered for the stream afterwards
                // does not take the entry over.
                None => (
                    None,
                    self.shared.take_removed_capture_locked(&registry, key, addr),
                ),
            }
        };
        if let Some(cache) = cache {
            // SAFETY: forwarded from the caller; the stream's cache frees
            // the block in its class size, as it was allocated.
            return unsafe { cache.deallocate(ptr, bytes, stream) };
        }
        // SAFETY: forwarded from the caller; the block was allocated
        // upstream with `block_size(bytes)` bytes on this stream (graph
        // memory in the size its cache remembered, which is the same).
        let r = unsafe {
            self.shared
                .upstream
                .deallocate(ptr, graph.unwrap_or_else(|| self.block_size(bytes)), stream)
        };
        if let (Err(_), Some(size)) = (&r, graph) {
            // Nothing was freed: the record as it was, for a later attempt.
            self.shared.return_removed_capture(key, addr, size);
        }
        r
    }

    fn device(&self) -> Device {
        self.shared.device
    }

    fn placement(&self) -> crate::Placement {
        self.shared.upstream.placement()
    }

    fn cache_for(
        &self,
        stream: &Stream,
        _: super::Sealed,
    ) -> Option<Result<Arc<dyn std::any::Any + Send + Sync>>> {
        Some(
            self.for_stream(stream)
                .map(|c| c as Arc<dyn std::any::Any + Send + Sync>),
        )
    }
}

/// Returns every cached block to the upstream resource, freed on its
/// stream (or queued until the stream leaves a capture it is in). A
/// capture of any of the tier's streams must not begin, on any thread,
/// while the drop runs: each stream is asked once whether it captures,
/// before its frees, and a capture begun in between would receive them.
impl Drop for CacheTier {
    fn drop(&mut self) {
        let caches = std::mem::take(&mut *lock(&self.shared.registry));
        for cache in caches.into_values() {
            // Detached: a handle that a buffer still holds passes its free
            // straight upstream.
            record_drop_error(cache.detach().map(|_| ()));
        }
    }
}
