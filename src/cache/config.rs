//! How a tier behaves: [`CacheConfig`] and the footprint guard's
//! [`Headroom`].

use super::MIB;

/// How a [`CacheTier`](crate::CacheTier) behaves; see the
/// [stream cache tier docs](crate#the-stream-cache-tier).
///
/// Start from [`CacheConfig::default()`] (or [`CacheConfig::new()`], the
/// same in a `const`) and change what you need with the builder methods;
/// the fields can be read directly.
///
/// ```
/// use somalloc::{CacheConfig, Headroom};
/// let config = CacheConfig::default().per_stream_cap(64 << 20);
/// assert_eq!(config.per_stream_cap, 64 << 20);
/// assert_eq!(config.max_block_bytes, 64 << 20);
/// let guarded = config.headroom(Headroom::default());
/// assert_eq!(guarded.headroom, Some(Headroom::default()));
/// assert_eq!(guarded.headroom(None).headroom, None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
    /// the caps bound the cache. See [the footprint guard](crate#caps-the-footprint-budget-and-the-footprint-guard) for why
    /// it is off by default on the vendor pools.
    pub headroom: Option<Headroom>,
    /// The footprint budget for reusing larger blocks: when a miss would
    /// take the stream's footprint (live + cached bytes) above its live
    /// peak plus this headroom, it takes a cached block of up to twice the
    /// class size (the next eight classes) instead of asking the upstream,
    /// if one is there. Nothing is returned upstream for it, so the
    /// upstream sees fewer allocations and no extra frees (unlike the
    /// [`headroom`](CacheConfig::headroom) guard). `None`: a miss always
    /// asks the upstream. Default: 12.5 % of the live peak (no minimum).
    /// Allocations through the tier itself
    /// ([`CacheTier`](crate::CacheTier) as the resource) never get a larger
    /// block.
    pub reuse_larger: Option<Headroom>,
    /// Lets the thread that keeps using a stream's cache in and out of it
    /// without an atomic read-modify-write (its lock is biased to that
    /// thread; see the [crate docs](crate#the-hot-path)). Has an
    /// effect only where the OS has a process-wide memory barrier (Linux);
    /// elsewhere every access takes the lock. Default `true`.
    pub thread_bias: bool,
}

impl CacheConfig {
    /// The default configuration (as [`Default`]), usable in a `const`.
    pub const fn new() -> CacheConfig {
        CacheConfig {
            max_block_bytes: 64 * MIB,
            per_stream_cap: 256 * MIB,
            total_cap: 1024 * MIB,
            headroom: None,
            reuse_larger: Some(Headroom::new(0, 125)),
            thread_bias: true,
        }
    }

    /// Sets [`max_block_bytes`](CacheConfig::max_block_bytes) (checked by
    /// [`CacheTier::new`](crate::CacheTier::new)).
    pub const fn max_block_bytes(mut self, bytes: usize) -> CacheConfig {
        self.max_block_bytes = bytes;
        self
    }

    /// Sets [`per_stream_cap`](CacheConfig::per_stream_cap); 0 turns
    /// caching off.
    pub const fn per_stream_cap(mut self, bytes: usize) -> CacheConfig {
        self.per_stream_cap = bytes;
        self
    }

    /// Sets [`total_cap`](CacheConfig::total_cap); 0 turns caching off.
    pub const fn total_cap(mut self, bytes: usize) -> CacheConfig {
        self.total_cap = bytes;
        self
    }

    /// Sets the footprint guard ([`headroom`](CacheConfig::headroom)):
    /// a [`Headroom`] turns it on, `None` off.
    pub fn headroom(mut self, headroom: impl Into<Option<Headroom>>) -> CacheConfig {
        self.headroom = headroom.into();
        self
    }
}

impl CacheConfig {
    /// Sets the budget for reusing larger blocks
    /// ([`reuse_larger`](CacheConfig::reuse_larger)); `None` turns it off.
    pub fn reuse_larger(mut self, budget: impl Into<Option<Headroom>>) -> CacheConfig {
        self.reuse_larger = budget.into();
        self
    }

    /// Sets [`thread_bias`](CacheConfig::thread_bias).
    pub const fn thread_bias(mut self, on: bool) -> CacheConfig {
        self.thread_bias = on;
        self
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig::new()
    }
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
/// let guarded = CacheConfig::default().headroom(Headroom::default());
/// assert_eq!(Headroom::default().above(1 << 30), 34_359_738); // 3.2 % of 1 GiB
/// assert_eq!(Headroom::default().above(1 << 20), 4 << 20); // at least 4 MiB
/// let tight = Headroom::new(0, 10); // 1 % of the peak, no minimum
/// assert_eq!(tight.above(1000), 10);
/// assert_eq!(Headroom::default().min_bytes(0), Headroom::new(0, 32));
/// # let _ = guarded;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Headroom {
    /// At least this many bytes. Default 4 MiB.
    pub min_bytes: usize,
    /// At least this many thousandths of the stream's live peak. Default 32.
    pub peak_per_mille: u32,
}

impl Headroom {
    /// The larger of `min_bytes` and `peak_per_mille` thousandths of the
    /// live peak.
    pub const fn new(min_bytes: usize, peak_per_mille: u32) -> Headroom {
        Headroom {
            min_bytes,
            peak_per_mille,
        }
    }

    /// Sets [`min_bytes`](Headroom::min_bytes).
    pub const fn min_bytes(mut self, bytes: usize) -> Headroom {
        self.min_bytes = bytes;
        self
    }

    /// Sets [`peak_per_mille`](Headroom::peak_per_mille).
    pub const fn peak_per_mille(mut self, per_mille: u32) -> Headroom {
        self.peak_per_mille = per_mille;
        self
    }

    /// The headroom above a live peak of `peak` bytes.
    pub fn above(&self, peak: usize) -> usize {
        let share = (peak as u128 * u128::from(self.peak_per_mille) / 1000).min(usize::MAX as u128) as usize;
        share.max(self.min_bytes)
    }
}

impl Default for Headroom {
    fn default() -> Self {
        Headroom::new(4 * MIB, 32)
    }
}
