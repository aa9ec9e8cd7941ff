//! The stream cache tier. Its design is documented for users in the crate
//! docs (lib.rs, "The stream cache tier").

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::device::Device;
use crate::error::{record_drop_error, Error, InvalidReason, Result};
use crate::resource::MemoryResource;
use crate::stream::Stream;

const MIB: usize = 1 << 20;
/// log2 of the smallest class.
const MIN_SHIFT: usize = 8;
/// log2 of the classes per power of two.
const SUB_BITS: usize = 3;
const SUBS: usize = 1 << SUB_BITS;
/// The largest `max_block_bytes` accepted (keeps the class table small).
const MAX_BLOCK_LIMIT: usize = 1 << 40;
/// The total cap is leased to streams in granules of at most this.
const MAX_GRANULE: usize = 16 * MIB;

/// The size-class index of a request of `bytes` (at least 1).
pub(crate) fn class_index(bytes: usize) -> usize {
    if bytes <= CacheTier::MIN_BLOCK {
        return 0;
    }
    let n = bytes - 1;
    // floor(log2 n) >= MIN_SHIFT since n >= 256.
    let k = (usize::BITS - 1 - n.leading_zeros()) as usize;
    let top = n >> (k - SUB_BITS); // in SUBS..2 * SUBS
    (k - MIN_SHIFT) * SUBS + (top - SUBS) + 1
}

/// The block size of size class `index`.
pub(crate) fn class_size(index: usize) -> usize {
    if index == 0 {
        return CacheTier::MIN_BLOCK;
    }
    let j = index - 1;
    let k = MIN_SHIFT + j / SUBS;
    let top = SUBS + j % SUBS;
    (top + 1) << (k - SUB_BITS)
}

/// Aligns its contents to their own cache lines (two, for the adjacent-line
/// prefetcher), so that per-stream state never shares a line.
#[repr(align(128))]
struct CachePadded<T>(T);

impl<T> Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// The lock of one stream's state. Uncontended, taking it is one
/// compare-and-swap and releasing it one plain store (a `std::sync::Mutex`
/// pays a second atomic read-modify-write to release): on the hit path
/// these are the only atomic operations. Critical sections are a few dozen
/// instructions and never call the upstream resource, so a waiter spins
/// briefly, then yields. No code panics while holding it; there is no
/// poisoning.
struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands `value` to one thread at a time (acquire on lock,
// release on unlock), as a Mutex does; moving it to another thread needs
// only `T: Send`.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    fn new(value: T) -> SpinLock<T> {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    fn lock(&self) -> SpinGuard<'_, T> {
        loop {
            if let Some(guard) = self.try_lock() {
                return guard;
            }
            let mut spins = 0u32;
            while self.locked.load(Ordering::Relaxed) {
                if spins < 100 {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }

    fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        self.locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| SpinGuard { lock: self })
    }
}

struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock, so no other reference to the
        // value exists until it is dropped.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only use of
        // the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

/// How a [`CacheTier`] behaves; see [the stream cache tier](crate#the-stream-cache-tier).
///
/// ```
/// use somalloc::CacheConfig;
/// let config = CacheConfig { per_stream_cap: 64 << 20, ..CacheConfig::default() };
/// assert_eq!(config.max_block_bytes, 64 << 20);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    /// Largest request that is rounded to a size class and cached; larger
    /// ones go straight to the upstream resource. At least 256 bytes, at
    /// most 1 TiB. Default 64 MiB.
    pub max_block_bytes: usize,
    /// Most bytes one stream may keep cached. Default 256 MiB.
    pub per_stream_cap: usize,
    /// Most bytes all streams together may keep cached. Default 1 GiB.
    pub total_cap: usize,
    /// The footprint guard: a stream holds at most its live peak plus this
    /// headroom from the upstream resource (live + cached), returning
    /// cached blocks on a miss to stay within. `None` (the default): only
    /// the caps bound the cache. See [the footprint guard](crate#caps-and-the-footprint-guard) for why
    /// it is off by default on the vendor pools.
    pub headroom: Option<Headroom>,
}

/// How far above its live peak a stream's footprint (live + cached bytes)
/// may go before a miss returns cached blocks: the larger of `min_bytes`
/// and `peak_per_mille` thousandths of the peak. See [`CacheConfig::headroom`].
///
/// A small headroom keeps the upstream's peak close to the live peak; a
/// larger one serves more misses from a mix of sizes without returning
/// blocks (with one live buffer at a time alternating between sizes, the
/// blocks stay cached only while they fit in the headroom).
///
/// ```
/// use somalloc::{CacheConfig, Headroom};
/// let guarded = CacheConfig { headroom: Some(Headroom::default()), ..CacheConfig::default() };
/// assert_eq!(Headroom::default().above(1 << 30), 34_359_738); // 3.2 % of 1 GiB
/// assert_eq!(Headroom::default().above(1 << 20), 4 << 20); // at least 4 MiB
/// # let _ = guarded;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Headroom {
    /// At least this many bytes. Default 4 MiB.
    pub min_bytes: usize,
    /// At least this many thousandths of the stream's live peak. Default 32.
    pub peak_per_mille: u32,
}

impl Default for Headroom {
    fn default() -> Self {
        Headroom {
            min_bytes: 4 * MIB,
            peak_per_mille: 32,
        }
    }
}

impl Headroom {
    /// The headroom above a live peak of `peak` bytes.
    pub fn above(&self, peak: usize) -> usize {
        let share = (peak as u128 * u128::from(self.peak_per_mille) / 1000).min(usize::MAX as u128) as usize;
        share.max(self.min_bytes)
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_block_bytes: 64 * MIB,
            per_stream_cap: 256 * MIB,
            total_cap: 1024 * MIB,
            headroom: None,
        }
    }
}

/// Counters of one stream's cache; see [`StreamCache::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamCacheStats {
    /// The stream's vendor handle, as an integer.
    pub stream: usize,
    /// Bytes of the blocks in the cache now.
    pub cached_bytes: usize,
    /// Blocks in the cache now.
    pub cached_blocks: usize,
    /// Bytes of the total cap leased to this stream (at least `cached_bytes`).
    pub credit_bytes: usize,
    /// Bytes (in class sizes) handed out through this cache and not yet
    /// freed.
    pub live_bytes: usize,
    /// Highest `live_bytes` so far.
    pub live_high: usize,
    /// Allocations served from the cache (no upstream call).
    pub hits: u64,
    /// Allocations of a cacheable size that went to the upstream resource.
    pub misses: u64,
    /// Allocations above `max_block_bytes` (never cached).
    pub bypassed: u64,
    /// Frees that went to the upstream resource because of a cap (or a
    /// detached cache) instead of into the cache.
    pub spilled: u64,
    /// Cached blocks returned to the upstream resource by the footprint
    /// guard, trim, flush or out-of-memory recovery.
    pub released: u64,
    /// Allocations made while the stream was capturing: served by the
    /// upstream resource (graph memory), never from or into the cache.
    pub captured: u64,
    /// Of those, the blocks not freed yet (graph outputs, or captures still
    /// in progress).
    pub captured_live: usize,
}

impl StreamCacheStats {
    fn add(&mut self, other: &StreamCacheStats) {
        self.cached_bytes += other.cached_bytes;
        self.cached_blocks += other.cached_blocks;
        self.credit_bytes += other.credit_bytes;
        self.live_bytes += other.live_bytes;
        self.live_high += other.live_high;
        self.hits += other.hits;
        self.misses += other.misses;
        self.bypassed += other.bypassed;
        self.spilled += other.spilled;
        self.released += other.released;
        self.captured += other.captured;
        self.captured_live += other.captured_live;
    }
}

/// Counters of a whole tier; see [`CacheTier::stats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// The sums over the streams below (`stream` is 0; `live_high` is the
    /// sum of the streams' peaks).
    pub total: StreamCacheStats,
    /// Bytes of the total cap leased to streams now (at least
    /// `total.cached_bytes`, at most the cap).
    pub leased_bytes: usize,
    /// One entry per registered stream.
    pub streams: Vec<StreamCacheStats>,
}

impl CacheStats {
    /// Bytes sitting in all caches now.
    pub fn cached_bytes(&self) -> usize {
        self.total.cached_bytes
    }

    /// Fraction of cacheable allocations served from a cache.
    pub fn hit_rate(&self) -> f64 {
        let all = self.total.hits + self.total.misses;
        if all == 0 {
            0.0
        } else {
            self.total.hits as f64 / all as f64
        }
    }
}

impl fmt::Display for CacheStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.total;
        write!(
            f,
            "cached {} B in {} blocks over {} streams; hits {}, misses {} ({:.1} % hits), \
             bypassed {}, spilled {}, released {}, captured {}",
            t.cached_bytes,
            t.cached_blocks,
            self.streams.len(),
            t.hits,
            t.misses,
            100.0 * self.hit_rate(),
            t.bypassed,
            t.spilled,
            t.released,
            t.captured
        )
    }
}

/// The parts of a tier that every stream sees. Written only on slow paths.
struct Shared {
    upstream: Arc<dyn MemoryResource>,
    device: Device,
    config: CacheConfig,
    /// Number of size classes (`class_index(max_block_bytes) + 1`).
    classes: usize,
    /// Credit is leased from `leased` in multiples of this.
    granule: usize,
    /// Bytes of `total_cap` leased to streams; never above the cap.
    leased: CachePadded<AtomicUsize>,
    /// The streams' caches, by stream handle. Holds strong references (so a
    /// cycle with `StreamCache::shared`), broken when the tier is dropped.
    registry: CachePadded<Mutex<HashMap<usize, Arc<StreamCache>>>>,
}

impl Shared {
    /// The class of a cacheable request, `None` above `max_block_bytes`.
    fn class_of(&self, bytes: usize) -> Option<usize> {
        (bytes <= self.config.max_block_bytes).then(|| class_index(bytes))
    }

    /// Takes `amount` bytes of the total cap, if that many are free.
    fn lease(&self, amount: usize) -> bool {
        let cap = self.config.total_cap;
        let mut current = self.leased.load(Ordering::Relaxed);
        loop {
            let Some(next) = current.checked_add(amount).filter(|n| *n <= cap) else {
                return false;
            };
            // Relaxed: the counter only bounds a sum; it publishes no data.
            match self
                .leased
                .compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => current = now,
            }
        }
    }

    fn give_back(&self, amount: usize) {
        if amount > 0 {
            self.leased.fetch_sub(amount, Ordering::Relaxed);
        }
    }

    /// The registered caches, copied out so that no stream lock is ever
    /// taken while the registry lock is held.
    fn snapshot(&self) -> Vec<Arc<StreamCache>> {
        lock(&self.registry).values().cloned().collect()
    }

    /// Other streams give back the credit they lease beyond what they cache
    /// (those busy right now are skipped).
    fn reclaim_slack(&self, except: usize) {
        for cache in self.snapshot() {
            if cache.key == except {
                continue;
            }
            if let Some(mut state) = cache.state.try_lock() {
                state.return_slack(self, 0);
            }
        }
    }

    /// Every other stream returns its cached blocks; the bytes returned.
    fn release_others(&self, except: usize) -> Result<usize> {
        let mut freed = 0;
        let mut first_error = None;
        for cache in self.snapshot() {
            if cache.key == except {
                continue;
            }
            match cache.release_all(false) {
                Ok(n) => freed += n,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(freed), Err)
    }
}

/// One stream's cache, behind its lock.
struct State {
    /// Free blocks (addresses) per size class; the last pushed is reused
    /// first (the warmest).
    bins: Vec<Vec<usize>>,
    /// One bit per class: its bin is not empty.
    nonempty: Vec<u64>,
    cached: usize,
    blocks: usize,
    /// Bytes of the total cap leased to this stream; `cached <= credit`.
    credit: usize,
    live: usize,
    live_high: usize,
    /// The tier dropped this cache (or `remove_stream`): pass everything
    /// through to upstream.
    detached: bool,
    hits: u64,
    misses: u64,
    bypassed: u64,
    spilled: u64,
    released: u64,
    /// Blocks allocated while the stream was capturing (graph memory) and
    /// not freed yet: address -> the size asked of the upstream.
    captured: HashMap<usize, usize>,
    captured_allocs: u64,
}

/// What a free did with the block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Put {
    Cached,
    /// Return it upstream.
    Spill,
    /// The total cap has no room left for this stream right now.
    NoCredit,
}

impl State {
    fn new(classes: usize) -> State {
        State {
            bins: (0..classes).map(|_| Vec::new()).collect(),
            nonempty: vec![0; classes.div_ceil(64)],
            cached: 0,
            blocks: 0,
            credit: 0,
            live: 0,
            live_high: 0,
            detached: false,
            hits: 0,
            misses: 0,
            bypassed: 0,
            spilled: 0,
            released: 0,
            captured: HashMap::new(),
            captured_allocs: 0,
        }
    }

    fn pop(&mut self, idx: usize) -> Option<usize> {
        let bin = self.bins.get_mut(idx)?;
        let addr = bin.pop()?;
        if bin.is_empty() {
            if let Some(word) = self.nonempty.get_mut(idx / 64) {
                *word &= !(1u64 << (idx % 64));
            }
        }
        // Never below zero: `cached` and `blocks` count exactly the bins.
        self.cached = self.cached.saturating_sub(class_size(idx));
        self.blocks = self.blocks.saturating_sub(1);
        Some(addr)
    }

    /// Puts a block into its bin; `false` (nothing changed) for a class the
    /// table does not have.
    fn push(&mut self, idx: usize, addr: usize) -> bool {
        let (Some(bin), Some(word)) = (self.bins.get_mut(idx), self.nonempty.get_mut(idx / 64)) else {
            return false;
        };
        bin.push(addr);
        *word |= 1u64 << (idx % 64);
        self.cached += class_size(idx);
        self.blocks += 1;
        true
    }

    /// The largest class with a cached block.
    fn largest(&self) -> Option<usize> {
        self.nonempty
            .iter()
            .enumerate()
            .rev()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i * 64 + 63 - w.leading_zeros() as usize)
    }

    /// Takes cached blocks, largest first, until at most `keep` bytes stay.
    fn take_down_to(&mut self, keep: usize, out: &mut Vec<(usize, usize)>) {
        while self.cached > keep {
            let Some(idx) = self.largest() else { break };
            let Some(addr) = self.pop(idx) else { break };
            out.push((addr, class_size(idx)));
            self.released += 1;
        }
    }

    /// Gives back leased credit beyond `cached + keep_slack`.
    fn return_slack(&mut self, shared: &Shared, keep_slack: usize) {
        let keep = self.cached.saturating_add(keep_slack);
        if self.credit > keep {
            shared.give_back(self.credit - keep);
            self.credit = keep;
        }
    }

    /// Leases credit until `cached` bytes are covered.
    fn cover(&mut self, cached: usize, shared: &Shared) -> bool {
        if cached <= self.credit {
            return true;
        }
        let need = cached - self.credit;
        let rounded = need.div_ceil(shared.granule).saturating_mul(shared.granule);
        for amount in [rounded, need] {
            if shared.lease(amount) {
                self.credit += amount;
                return true;
            }
        }
        false
    }

    /// Caches a freed block if the caps allow.
    fn put(&mut self, idx: usize, size: usize, addr: usize, shared: &Shared) -> Put {
        if self.detached {
            return Put::Spill;
        }
        let Some(cached) = self.cached.checked_add(size) else {
            return Put::Spill;
        };
        if cached > shared.config.per_stream_cap {
            return Put::Spill;
        }
        if !self.cover(cached, shared) {
            return Put::NoCredit;
        }
        if self.push(idx, addr) {
            Put::Cached
        } else {
            Put::Spill
        }
    }

    fn stats(&self, stream: usize) -> StreamCacheStats {
        StreamCacheStats {
            stream,
            cached_bytes: self.cached,
            cached_blocks: self.blocks,
            credit_bytes: self.credit,
            live_bytes: self.live,
            live_high: self.live_high,
            hits: self.hits,
            misses: self.misses,
            bypassed: self.bypassed,
            spilled: self.spilled,
            released: self.released,
            captured: self.captured_allocs,
            captured_live: self.captured.len(),
        }
    }
}

/// Locks a mutex whether or not a panic poisoned it: no code here panics
/// while holding one, so the data is consistent either way.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The cache of one stream: a [`MemoryResource`] that serves allocations
/// and frees on that stream only. Get it from [`CacheTier::for_stream`] and
/// use it as the resource of [`DeviceBuffer::new_with`](crate::DeviceBuffer::new_with)
/// (or call it directly).
///
/// It is `Sync`: any thread may use it, through a lock of its own that is
/// uncontended when one thread at a time drives the stream. An allocation or
/// a free on another stream is refused with [`Error::InvalidArgument`] (and
/// such a free leaves the block allocated). It keeps its stream alive.
///
/// ```no_run
/// use std::sync::Arc;
/// use somalloc::{CacheConfig, CacheTier, Device, MemPool, MemoryResource, Stream};
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let tier = CacheTier::new(Arc::new(MemPool::default_for(&dev)?), CacheConfig::default())?;
/// let stream = Stream::new(&dev)?;
/// let cache = tier.for_stream(&stream)?;
/// let ptr = cache.allocate(1000, &stream)?; // a 1024-byte block from the pool
/// // SAFETY: from this cache, freed once, unused after this point of `stream`.
/// unsafe { cache.deallocate(ptr, 1000, &stream)? }; // into the cache
/// assert_eq!(cache.allocate(1000, &stream)?, ptr); // the same block, no driver call
/// # Ok(()) }
/// ```
pub struct StreamCache {
    state: CachePadded<SpinLock<State>>,
    stream: Stream,
    key: usize,
    shared: Arc<Shared>,
}

impl fmt::Debug for StreamCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamCache")
            .field("stream", &format_args!("{:#x}", self.key))
            .field("stats", &self.stats())
            .finish()
    }
}

impl StreamCache {
    fn new(stream: &Stream, shared: Arc<Shared>) -> StreamCache {
        StreamCache {
            state: CachePadded(SpinLock::new(State::new(shared.classes))),
            stream: stream.clone(),
            key: stream.as_raw() as usize,
            shared,
        }
    }

    fn lock(&self) -> SpinGuard<'_, State> {
        self.state.lock()
    }

    /// The stream this cache serves.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Bytes cached for this stream now.
    pub fn cached_bytes(&self) -> usize {
        self.lock().cached
    }

    /// This stream's counters.
    pub fn stats(&self) -> StreamCacheStats {
        self.lock().stats(self.key)
    }

    /// Returns every cached block of this stream to the upstream resource
    /// (stream-ordered frees on this stream). Does nothing while the stream
    /// is capturing (the frees would be recorded into the graph).
    pub fn flush(&self) -> Result<()> {
        self.release_all(false).map(|_| ())
    }

    /// Returns cached blocks, largest first, until at most `bytes_to_keep`
    /// stay cached for this stream. Does nothing while the stream is
    /// capturing.
    pub fn trim(&self, bytes_to_keep: usize) -> Result<()> {
        if self.stream.capturing()?.is_some() {
            return Ok(());
        }
        let mut blocks = Vec::new();
        {
            let mut state = self.lock();
            state.take_down_to(bytes_to_keep, &mut blocks);
            state.return_slack(&self.shared, self.shared.granule);
        }
        // SAFETY: cached blocks of this stream (see `free_upstream`).
        unsafe { self.free_upstream(&blocks) }
    }

    /// Returns every cached block; with `detach`, also turns the cache into
    /// a pass-through. The bytes returned. While the stream captures, the
    /// blocks stay (or, with `detach`, wait in the deferred-free queue until
    /// the stream leaves the capture) and 0 is returned.
    fn release_all(&self, detach: bool) -> Result<usize> {
        if self.stream.capturing()?.is_some() {
            if detach {
                self.park_all();
            }
            return Ok(0);
        }
        let mut blocks = Vec::new();
        {
            let mut state = self.lock();
            state.detached |= detach;
            state.take_down_to(0, &mut blocks);
            state.return_slack(&self.shared, 0);
        }
        // SAFETY: cached blocks of this stream (see `free_upstream`).
        unsafe { self.free_upstream(&blocks)? };
        Ok(blocks.iter().map(|b| b.1).sum())
    }

    /// Detaches the cache of a capturing stream: its cached blocks wait in
    /// the deferred-free queue until the stream leaves the capture, then go
    /// upstream on it.
    #[cold]
    fn park_all(&self) {
        let mut blocks = Vec::new();
        {
            let mut state = self.lock();
            state.detached = true;
            state.take_down_to(0, &mut blocks);
            state.return_slack(&self.shared, 0);
        }
        for (addr, size) in blocks {
            let upstream = Arc::clone(&self.shared.upstream);
            let item = crate::graph::Deferred {
                stream: self.stream.clone(),
                users: Vec::new(),
                // SAFETY (of the call inside): a block taken out of this
                // cache's bins (see `free_upstream`), freed on its stream
                // once the stream no longer captures.
                free: Box::new(move |stream: &Stream| unsafe {
                    upstream.deallocate(addr as *mut c_void, size, stream)
                }),
            };
            // No capture is named: the free waits only for the stream to
            // leave its capture, so this cannot fail.
            record_drop_error(crate::graph::defer(item, &[]));
        }
    }

    /// Frees blocks taken out of this cache through the upstream resource,
    /// on this stream; tries all and reports the first error.
    ///
    /// # Safety
    /// Each `(addr, size)` is a block that this cache took out of its bins
    /// (so it came from `upstream.allocate(size, stream)` and it is in no
    /// bin and no buffer any more).
    unsafe fn free_upstream(&self, blocks: &[(usize, usize)]) -> Result<()> {
        let mut first_error = None;
        for &(addr, size) in blocks {
            // SAFETY: the block came from `upstream.allocate(size, stream)`
            // (the class size, on this stream); it entered the cache through
            // `deallocate` on this stream, whose caller ordered every use
            // before that point of the stream, and this free is enqueued
            // after that point; the caller took it out of the bins, so it is
            // freed once.
            let r = unsafe {
                self.shared
                    .upstream
                    .deallocate(addr as *mut c_void, size, &self.stream)
            };
            if let Err(e) = r {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn check_stream(&self, stream: &Stream) -> Result<()> {
        if stream.as_raw() as usize != self.key {
            return Err(InvalidReason::WrongStream.error(format!(
                "the cache of stream {:#x} was used with stream {:#x}: \
                 get that stream's cache from CacheTier::for_stream",
                self.key,
                stream.as_raw() as usize
            )));
        }
        Ok(())
    }

    /// An allocation while the stream captures: upstream (graph memory), in
    /// the class size, remembered so that it never enters the cache.
    #[cold]
    fn allocate_captured(&self, bytes: usize) -> Result<*mut c_void> {
        let size = self.shared.class_of(bytes).map_or(bytes, class_size);
        // Out-of-memory recovery skips this (capturing) stream's cache.
        let ptr = self.allocate_upstream(bytes, size)?;
        let mut state = self.lock();
        state.captured_allocs += 1;
        state.captured.insert(ptr as usize, size);
        Ok(ptr)
    }

    /// A free while the stream captures: straight upstream, never cached.
    ///
    /// # Safety
    /// As for `deallocate`.
    #[cold]
    unsafe fn deallocate_captured(&self, ptr: *mut c_void, bytes: usize) -> Result<()> {
        let shared = &*self.shared;
        let class = shared.class_of(bytes);
        let size = {
            let mut state = self.lock();
            match state.captured.remove(&(ptr as usize)) {
                Some(size) => size,
                None => {
                    // Allocated before the capture: it counted as live.
                    let size = class.map_or(bytes, class_size);
                    if class.is_some() {
                        state.live = state.live.saturating_sub(size);
                    }
                    size
                }
            }
        };
        // SAFETY: the block came from `upstream.allocate(size, stream)` (a
        // captured allocation in the size remembered, an ordinary one in its
        // class size, or one above the classes unrounded); the caller's
        // guarantees carry over; it is not cached.
        unsafe { shared.upstream.deallocate(ptr, size, &self.stream) }
    }

    /// A miss: upstream, with recovery from out of memory.
    fn allocate_upstream(&self, bytes: usize, size: usize) -> Result<*mut c_void> {
        let upstream = &self.shared.upstream;
        let mut result = upstream.allocate(size, &self.stream);
        // Out of memory: first this stream's cached blocks (freed on this
        // stream, so the upstream can reuse them for this allocation at
        // once), then every other stream's; retry after each that freed any.
        for others in [false, true] {
            if !matches!(result, Err(Error::OutOfMemory { .. })) {
                break;
            }
            let freed = if others {
                self.shared.release_others(self.key)?
            } else {
                self.release_all(false)?
            };
            if freed > 0 {
                result = upstream.allocate(size, &self.stream);
            }
        }
        match result {
            Err(Error::OutOfMemory { stats, .. }) => Err(Error::OutOfMemory {
                requested: bytes,
                stats,
            }),
            other => other,
        }
    }
}

// SAFETY: every block it hands out came from the upstream resource (a
// `MemoryResource`) on this stream and is handed out once: a cached block
// re-enters a bin only through `deallocate` on this stream, whose caller
// orders every use before that point, and leaves it for one allocation on
// the same stream (see "Why a cached block is safe to reuse" in the module
// docs). Under capture it passes allocations and frees through to the
// upstream and never caches a block allocated or freed during a capture.
unsafe impl MemoryResource for StreamCache {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<*mut c_void> {
        self.check_stream(stream)?;
        if bytes == 0 {
            return Err(InvalidReason::ZeroBytes.error("0-byte allocation from a stream cache"));
        }
        if self.stream.may_capture() && self.stream.capturing()?.is_some() {
            return self.allocate_captured(bytes);
        }
        let shared = &*self.shared;
        let Some(idx) = shared.class_of(bytes) else {
            let ptr = shared.upstream.allocate(bytes, &self.stream)?;
            self.lock().bypassed += 1;
            return Ok(ptr);
        };
        let size = class_size(idx);
        let mut victims = Vec::new();
        {
            let mut state = self.lock();
            if !state.detached {
                if let Some(addr) = state.pop(idx) {
                    state.hits += 1;
                    state.live += size;
                    state.live_high = state.live_high.max(state.live);
                    // The credit stays: the next free reuses it without
                    // touching the shared counter. Other streams take idle
                    // credit back when they need it (`reclaim_slack`).
                    return Ok(addr as *mut c_void);
                }
                state.misses += 1;
                // A miss costs an upstream call anyway: give back slack
                // beyond two granules here rather than on hits.
                if state.credit.saturating_sub(state.cached) > 2 * shared.granule {
                    state.return_slack(shared, shared.granule);
                }
                if let Some(headroom) = shared.config.headroom {
                    let want = state.live + size;
                    let peak = state.live_high.max(want);
                    let budget = peak.saturating_add(headroom.above(peak));
                    let keep = budget.saturating_sub(want);
                    state.take_down_to(keep, &mut victims);
                    if !victims.is_empty() {
                        state.return_slack(shared, shared.granule);
                    }
                }
            }
        }
        // SAFETY: blocks taken out of this stream's bins just above.
        unsafe { self.free_upstream(&victims)? };
        let ptr = self.allocate_upstream(bytes, size)?;
        let mut state = self.lock();
        state.live += size;
        state.live_high = state.live_high.max(state.live);
        Ok(ptr)
    }

    unsafe fn deallocate(&self, ptr: *mut c_void, bytes: usize, stream: &Stream) -> Result<()> {
        self.check_stream(stream)?;
        if bytes == 0 {
            return Err(InvalidReason::ZeroBytes.error("0-byte free to a stream cache"));
        }
        if self.stream.may_capture() && self.stream.capturing()?.is_some() {
            // SAFETY: forwarded from the caller.
            return unsafe { self.deallocate_captured(ptr, bytes) };
        }
        let shared = &*self.shared;
        let addr = ptr as usize;
        let Some(idx) = shared.class_of(bytes) else {
            // A block allocated during a capture is not remembered any more.
            self.lock().captured.remove(&addr);
            // SAFETY: a request above max_block_bytes went to
            // `upstream.allocate(bytes, stream)` unrounded; the caller's
            // guarantees (freed once, uses ordered before this point of this
            // stream) carry over.
            return unsafe { shared.upstream.deallocate(ptr, bytes, &self.stream) };
        };
        let size = class_size(idx);
        let mut put = {
            let mut state = self.lock();
            if !state.captured.is_empty() && state.captured.remove(&addr).is_some() {
                // Graph memory from a capture: upstream, never cached.
                drop(state);
                // SAFETY: allocated upstream in its class size (see
                // `allocate_captured`); the caller's guarantees carry over.
                return unsafe { shared.upstream.deallocate(ptr, size, &self.stream) };
            }
            state.live = state.live.saturating_sub(size);
            state.put(idx, size, addr, shared)
        };
        if put == Put::NoCredit {
            shared.reclaim_slack(self.key);
            let mut state = self.lock();
            put = match state.put(idx, size, addr, shared) {
                Put::NoCredit => Put::Spill,
                other => other,
            };
        }
        if put == Put::Cached {
            return Ok(());
        }
        self.lock().spilled += 1;
        // SAFETY: the block came from `upstream.allocate(size, stream)` (the
        // class size is a function of `bytes`); the caller frees it once and
        // ordered every use before this point of this stream; it was not
        // cached.
        unsafe { shared.upstream.deallocate(ptr, size, &self.stream) }
    }

    fn device(&self) -> Device {
        self.shared.device
    }

    fn placement(&self) -> crate::Placement {
        self.shared.upstream.placement()
    }
}

impl Drop for StreamCache {
    fn drop(&mut self) {
        // Normally empty by now: the tier detached it when it let it go.
        record_drop_error(self.release_all(true).map(|_| ()));
    }
}

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
/// cached block to the upstream resource.
///
/// ```no_run
/// use std::sync::Arc;
/// use somalloc::{CacheConfig, CacheTier, Device, DeviceBuffer, MemPool, MemoryResource, Stream};
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let pool = MemPool::default_for(&dev)?;
/// let tier = Arc::new(CacheTier::new(
///     Arc::new(pool.clone()),
///     CacheConfig { total_cap: 4 << 30, ..CacheConfig::default() },
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
    shared: Arc<Shared>,
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
    pub const MIN_BLOCK: usize = 1 << MIN_SHIFT;

    /// A tier over `upstream`. `max_block_bytes` must be in 256 B ..= 1 TiB
    /// ([`Error::InvalidArgument`] otherwise); caps of 0 turn caching off.
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
            }),
        })
    }

    /// The cache of `stream`, made on first use. Keep the handle and use it
    /// for every allocation on that stream: that is the uncontended path.
    /// The stream must belong to the upstream's device.
    pub fn for_stream(&self, stream: &Stream) -> Result<Arc<StreamCache>> {
        if stream.device() != self.shared.device {
            return Err(InvalidReason::WrongDevice.error(format!(
                "a cache tier of device {} used with a stream of device {}",
                self.shared.device.ordinal(),
                stream.device().ordinal()
            )));
        }
        let key = stream.as_raw() as usize;
        let mut registry = lock(&self.shared.registry);
        let cache = registry
            .entry(key)
            .or_insert_with(|| Arc::new(StreamCache::new(stream, self.shared.clone())));
        Ok(Arc::clone(cache))
    }

    /// Returns `stream`'s cached blocks and forgets the stream (so the tier
    /// no longer keeps it alive). Handles to its [`StreamCache`] that are
    /// still held (by buffers, say) keep working as a pass-through to the
    /// upstream resource. `false` if the stream had no cache.
    pub fn remove_stream(&self, stream: &Stream) -> Result<bool> {
        let removed = lock(&self.shared.registry).remove(&(stream.as_raw() as usize));
        match removed {
            Some(cache) => cache.release_all(true).map(|_| true),
            None => Ok(false),
        }
    }

    /// Returns every cached block of every stream to the upstream resource,
    /// each through a stream-ordered free on its own stream. Synchronise the
    /// streams (or wait for the frees otherwise) before expecting the
    /// upstream pool's used bytes to drop. Tries every stream and reports
    /// the first error. A stream that is capturing keeps its cached blocks
    /// (its frees would be recorded into the graph).
    pub fn flush(&self) -> Result<()> {
        let mut first_error = None;
        for cache in self.shared.snapshot() {
            if let Err(e) = cache.release_all(false) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Returns cached blocks (largest first, from every stream in proportion
    /// to what it caches) until at most `bytes_to_keep` stay cached in all.
    /// Capturing streams are skipped.
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
        self.for_stream(stream)?.allocate(bytes, stream)
    }

    /// Through the stream's cache; for a stream removed since the
    /// allocation, straight to the upstream resource.
    unsafe fn deallocate(&self, ptr: *mut c_void, bytes: usize, stream: &Stream) -> Result<()> {
        let cache = lock(&self.shared.registry)
            .get(&(stream.as_raw() as usize))
            .cloned();
        match cache {
            // SAFETY: forwarded from the caller; the stream's cache frees
            // the block in its class size, as it was allocated.
            Some(cache) => unsafe { cache.deallocate(ptr, bytes, stream) },
            // SAFETY: forwarded from the caller; the block was allocated
            // upstream with `block_size(bytes)` bytes on this stream.
            None => unsafe {
                self.shared
                    .upstream
                    .deallocate(ptr, self.block_size(bytes), stream)
            },
        }
    }

    fn device(&self) -> Device {
        self.shared.device
    }

    fn placement(&self) -> crate::Placement {
        self.shared.upstream.placement()
    }
}

impl Drop for CacheTier {
    fn drop(&mut self) {
        let caches = std::mem::take(&mut *lock(&self.shared.registry));
        for cache in caches.into_values() {
            // Detached: a handle that a buffer still holds passes its free
            // straight upstream.
            record_drop_error(cache.release_all(true).map(|_| ()));
        }
    }
}

#[cfg(test)]
mod tests;
