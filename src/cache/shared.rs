//! What every stream of a tier sees: the upstream resource, the
//! configuration, the total cap's lease counter and the registry of streams.
//! Written only on slow paths.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use super::class::class_index;
use super::lock;
use super::lock::CachePadded;
use super::stream_cache::StreamCache;
use super::CacheConfig;
use crate::device::Device;
use crate::error::Result;
use crate::resource::MemoryResource;
use crate::sync::{AtomicUsize, Ordering};

/// The total cap is leased to streams in granules of at most this.
pub(super) const MAX_GRANULE: usize = 16 * super::MIB;

/// How often idle credit may be taken from streams that other threads own.
pub(super) const RECLAIM_EVERY: Duration = Duration::from_millis(1);

/// Whether this reclaim may take ownership away (at most once per
/// [`RECLAIM_EVERY`], process-wide).
fn reclaim_turn() -> bool {
    // The model takes the clock out: every reclaim may revoke.
    if cfg!(all(loom, test)) {
        return true;
    }
    static START: OnceLock<Instant> = OnceLock::new();
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = START.get_or_init(Instant::now).elapsed().as_micros() as u64 + 1;
    let last = LAST.load(Ordering::Relaxed);
    now.saturating_sub(last) >= RECLAIM_EVERY.as_micros() as u64
        && LAST
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
}

/// A hasher for block addresses (distinct multiples of 256): one
/// multiplication, no seed. The maps it serves are private to a stream and
/// keyed by addresses the upstream chose, so nobody steers the collisions.
#[derive(Default)]
pub(crate) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_usize(&mut self, addr: usize) {
        // The low 8 bits of a block address are 0. The product's high bits
        // mix all of the rest; the rotation brings them down to the bits
        // that pick the bucket.
        self.0 = ((addr as u64) >> 8)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(26);
    }
}

pub(crate) type BuildAddrHasher = BuildHasherDefault<AddrHasher>;

/// The parts of a tier that every stream sees. Written only on slow paths.
pub(super) struct Shared {
    pub(super) upstream: Arc<dyn MemoryResource>,
    pub(super) device: Device,
    pub(super) config: CacheConfig,
    /// Number of size classes (`class_index(max_block_bytes) + 1`).
    pub(super) classes: usize,
    /// Credit is leased from `leased` in multiples of this.
    pub(super) granule: usize,
    /// Bytes of `total_cap` leased to streams; never above the cap.
    pub(super) leased: CachePadded<AtomicUsize>,
    /// The streams' caches, by stream handle. Holds strong references (so a
    /// cycle with `StreamCache::shared`), broken when the tier is dropped.
    pub(super) registry: CachePadded<Mutex<HashMap<usize, Arc<StreamCache>>>>,
    /// Graph memory (address -> size asked upstream) that the cache of a
    /// removed stream handed out during a capture and that is not freed
    /// yet, by stream handle: the stream's next cache takes it over, so that
    /// such a block is never cached when it is freed through that cache.
    /// Lock order: `registry`, then this, then a stream's lock.
    pub(super) captured_of_removed: Mutex<HashMap<usize, HashMap<usize, usize>>>,
}

impl Shared {
    /// Graph memory that the cache of a removed stream (`key`) handed out
    /// and that comes back through that old cache: its entry, taken out of
    /// the stream's next cache if one took it over, else out of
    /// `captured_of_removed`; `None` when `addr` is no such block. The
    /// caller holds no stream lock (the lock order above).
    pub(super) fn take_removed_capture(&self, key: usize, addr: usize) -> Option<usize> {
        let registry = lock(&self.registry);
        if let Some(next) = registry.get(&key) {
            if let Some(size) = next.lock().captured.remove(&addr) {
                return Some(size);
            }
        }
        self.take_removed_capture_locked(&registry, key, addr)
    }

    /// `addr`'s entry in `captured_of_removed` for the stream `key`, if
    /// any, taken out; the caller holds the registry's lock (`_registry`),
    /// so no cache registered for the stream meanwhile takes it over.
    pub(super) fn take_removed_capture_locked(
        &self,
        _registry: &MutexGuard<'_, HashMap<usize, Arc<StreamCache>>>,
        key: usize,
        addr: usize,
    ) -> Option<usize> {
        let mut removed = lock(&self.captured_of_removed);
        let blocks = removed.get_mut(&key)?;
        let size = blocks.remove(&addr);
        if blocks.is_empty() {
            removed.remove(&key);
        }
        size
    }

    /// Puts back an entry that `take_removed_capture` gave, after its free
    /// failed (nothing was freed).
    pub(super) fn return_removed_capture(&self, key: usize, addr: usize, size: usize) {
        let registry = lock(&self.registry);
        match registry.get(&key) {
            Some(next) => {
                next.lock().captured.insert(addr, size);
            }
            None => {
                lock(&self.captured_of_removed)
                    .entry(key)
                    .or_default()
                    .insert(addr, size);
            }
        }
    }

    /// The class of a cacheable request, `None` above `max_block_bytes`.
    pub(super) fn class_of(&self, bytes: usize) -> Option<usize> {
        (bytes <= self.config.max_block_bytes).then(|| class_index(bytes))
    }

    /// Takes `amount` bytes of the total cap, if that many are free.
    pub(super) fn lease(&self, amount: usize) -> bool {
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

    /// Leases `amount` whatever the cap says (for blocks that could not be
    /// freed and stay cached, see `State::restore`).
    pub(super) fn lease_over_cap(&self, amount: usize) {
        self.leased.fetch_add(amount, Ordering::Relaxed);
    }

    pub(super) fn give_back(&self, amount: usize) {
        if amount > 0 {
            self.leased.fetch_sub(amount, Ordering::Relaxed);
        }
    }

    /// The registered caches, copied out so that no stream lock is ever
    /// taken while the registry lock is held.
    pub(super) fn snapshot(&self) -> Vec<Arc<StreamCache>> {
        lock(&self.registry).values().cloned().collect()
    }

    /// Other streams give back the credit they lease beyond what they cache
    /// (those busy right now are skipped). A stream that another thread
    /// owns (see `lock.rs`) is asked only once per [`RECLAIM_EVERY`] in the
    /// whole process: taking it away costs a process-wide barrier.
    pub(super) fn reclaim_slack(&self, except: usize) {
        let may_revoke = reclaim_turn();
        for cache in self.snapshot() {
            if cache.key == except {
                continue;
            }
            if let Some(mut state) = cache.state.try_lock(may_revoke) {
                state.return_slack(self, 0);
            }
        }
    }

    /// Every other stream returns its cached blocks; the bytes returned.
    pub(super) fn release_others(&self, except: usize) -> Result<usize> {
        let mut freed = 0;
        let mut first_error = None;
        for cache in self.snapshot() {
            if cache.key == except {
                continue;
            }
            match cache.release_all() {
                Ok(n) => freed += n,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(freed), Err)
    }
}
