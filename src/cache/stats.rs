//! The counters: one stream's ([`StreamCacheStats`]) and a tier's
//! ([`CacheStats`]).

use std::fmt;

/// Counters of one stream's cache; see [`StreamCache::stats`](crate::StreamCache::stats).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
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
    pub live_peak: usize,
    /// Allocations served from the cache (no upstream call).
    pub hits: u64,
    /// Of those, the ones served by a larger cached block because the
    /// stream's footprint was above its budget (see
    /// [`CacheConfig::reuse_larger`](crate::CacheConfig::reuse_larger)).
    pub reused_larger: u64,
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
    pub(super) fn add(&mut self, other: &StreamCacheStats) {
        self.cached_bytes += other.cached_bytes;
        self.cached_blocks += other.cached_blocks;
        self.credit_bytes += other.credit_bytes;
        self.live_bytes += other.live_bytes;
        self.live_peak += other.live_peak;
        self.hits += other.hits;
        self.reused_larger += other.reused_larger;
        self.misses += other.misses;
        self.bypassed += other.bypassed;
        self.spilled += other.spilled;
        self.released += other.released;
        self.captured += other.captured;
        self.captured_live += other.captured_live;
    }
}

/// Counters of a whole tier; see [`CacheTier::stats`](crate::CacheTier::stats).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheStats {
    /// The sums over the streams below (`stream` is 0; `live_peak` is the
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
            "cached {} B in {} blocks over {} streams; hits {} ({} by a larger block), misses {} \
             ({:.1} % hits), bypassed {}, spilled {}, released {}, captured {}",
            t.cached_bytes,
            t.cached_blocks,
            self.streams.len(),
            t.hits,
            t.reused_larger,
            t.misses,
            100.0 * self.hit_rate(),
            t.bypassed,
            t.spilled,
            t.released,
            t.captured
        )
    }
}
