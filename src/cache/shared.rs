//! What every stream of a tier sees: the upstream resource, the
//! configuration, the total cap's lease counter and the registry of streams.
//! Written only on slow paths.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::class::class_index;
use super::lock;
use super::spin::CachePadded;
use super::stream_cache::StreamCache;
use super::CacheConfig;
use crate::device::Device;
use crate::error::Result;
use crate::resource::MemoryResource;

/// The total cap is leased to streams in granules of at most this.
pub(super) const MAX_GRANULE: usize = 16 * super::MIB;

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
}

impl Shared {
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
    /// (those busy right now are skipped).
    pub(super) fn reclaim_slack(&self, except: usize) {
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
    pub(super) fn release_others(&self, except: usize) -> Result<usize> {
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
