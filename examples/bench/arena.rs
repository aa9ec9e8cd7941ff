//! somalloc's virtual-memory arena ([`VmmArena`]) under test: the arena
//! alone through the resource trait ([`ArenaAlloc`], rows `arena`), and the
//! cache tier in front of it ([`CacheArenaAlloc`], rows `cache+arena`), on
//! streams somalloc made and on borrowed ones; the arena they share; and
//! the checks of the arena's targets ([`checks`]).
//!
//! One arena per device serves the whole run, as one pool does: made once,
//! it keeps its idle chunks mapped (the default options: no release
//! threshold), as the pool keeps its memory with release threshold
//! `u64::MAX`. The churn timeline of an arena allocator starts from a
//! trimmed arena with its peaks reset and samples the arena's live and
//! mapped bytes where the others sample the pool's used and reserved bytes.
//! Where no arena can be made (the device or the runtime has no
//! virtual-memory management: `Error::Unsupported`), [`probe`] says so on
//! one line and the arena's rows are skipped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use somalloc::testkit::{RawRange, TestKernels};
use somalloc::{
    ArenaOptions, CacheConfig, CacheTier, Device, MemPool, MemoryResource, Stream, StreamCacheStats, VmmArena,
};

use crate::alloc::{new_tier as pool_tier, CacheAlloc, CacheBlock, Kind, StreamAlloc};
use crate::results::{Check, Row, Timeline, CACHE, RAW, RAW_BORROWED};

/// The arena through the resource trait.
pub const ARENA: &str = "arena";
/// The cache tier over the arena.
pub const CACHE_ARENA: &str = "cache+arena";

/// Set by [`probe`] when no arena could be made.
static SKIPPED: AtomicBool = AtomicBool::new(false);
/// (device ordinal, its arena), made on first use.
static ARENAS: Mutex<Vec<(usize, Arc<VmmArena>)>> = Mutex::new(Vec::new());

/// Whether the arena's rows run (no [`probe`] failed).
pub fn available() -> bool {
    !SKIPPED.load(Ordering::Relaxed)
}

/// Makes `dev`'s arena; where it cannot be made, says why on one line and
/// turns the arena's rows off ([`available`]).
pub fn probe(dev: &Device) {
    if let Err(e) = shared(dev) {
        SKIPPED.store(true, Ordering::Relaxed);
        println!("somalloc bench: no virtual-memory arena here, its rows are skipped: {e}");
    }
}

/// The arena of `dev` every arena allocator of the run uses.
pub fn shared(dev: &Device) -> somalloc::Result<Arc<VmmArena>> {
    let mut arenas = ARENAS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, a)) = arenas.iter().find(|(o, _)| *o == dev.ordinal()) {
        return Ok(Arc::clone(a));
    }
    let a = Arc::new(VmmArena::new(dev, ArenaOptions::default())?);
    arenas.push((dev.ordinal(), Arc::clone(&a)));
    Ok(a)
}

/// A cache tier of the default configuration over `arena`.
pub fn new_tier(arena: &Arc<VmmArena>) -> somalloc::Result<CacheTier> {
    let upstream: Arc<dyn MemoryResource> = arena.clone();
    CacheTier::new(upstream, CacheConfig::default())
}

/// The tier the threads of a tiered `kind` share: over the arena for the
/// arena's kinds, else over `pool`.
pub fn tier_for(kind: Kind, pool: &MemPool) -> somalloc::Result<CacheTier> {
    if kind.on_arena() {
        new_tier(&shared(&pool.device())?)
    } else {
        pool_tier(pool)
    }
}

/// After a measurement of the threads workload: the arena waits for the
/// frees of the threads' streams and forgets those streams (their parked
/// frees merge), keeping every idle chunk mapped.
pub fn settle(kind: Kind, dev: &Device) -> somalloc::Result<()> {
    if kind.on_arena() {
        shared(dev)?.trim(usize::MAX);
    }
    Ok(())
}

/// What the arena's allocators are.
pub fn describe(kind: Kind, tier: &str) -> String {
    const ARENA_HOW: &str = "VmmArena::new(&device, ArenaOptions::default()), one per device for the whole \
                             run (idle chunks kept mapped, as the pool keeps its memory)";
    match kind {
        Kind::Arena => format!("VmmArena allocate / deallocate (MemoryResource, static call); {ARENA_HOW}"),
        _ => format!(
            "StreamCache::allocate / deallocate (MemoryResource, static call) of \
             CacheTier::new(Arc::new(arena), CacheConfig::default()) over that arena ({ARENA_HOW}); {}",
            tier.replace(
                "CacheTier::new(Arc::new(pool), CacheConfig::default()), same pool; ",
                ""
            )
        ),
    }
}

/// The arena through the resource trait: `allocate` / `deallocate` called
/// on it directly (no buffer, no dynamic dispatch).
pub struct ArenaAlloc {
    pub arena: Arc<VmmArena>,
    pub stream: Stream,
}

impl ArenaAlloc {
    pub fn new(stream: &Stream) -> somalloc::Result<ArenaAlloc> {
        Ok(ArenaAlloc {
            arena: shared(&stream.device())?,
            stream: stream.clone(),
        })
    }
}

impl StreamAlloc for ArenaAlloc {
    type Block = CacheBlock;
    #[inline(always)]
    fn alloc(&self, bytes: usize) -> somalloc::Result<CacheBlock> {
        let ptr = self.arena.allocate(bytes, &self.stream)?;
        Ok(CacheBlock { ptr, bytes })
    }
    #[inline(always)]
    fn free(&self, block: CacheBlock) -> somalloc::Result<()> {
        // SAFETY: `block` came from `allocate` of this arena with these
        // bytes, on this stream, and is freed once; the only work on it
        // (the seed pipeline's kernel) was enqueued on this stream before
        // this free.
        unsafe { self.arena.deallocate(block.ptr, block.bytes, &self.stream) }
    }
    fn stream(&self) -> &Stream {
        &self.stream
    }
    fn process(&self, k: &TestKernels, block: &CacheBlock, _: usize) -> somalloc::Result<()> {
        // SAFETY: `block` is a live allocation of `block.bytes` from the
        // arena on this stream, and its caller frees it with `free`, on this
        // stream, after this kernel.
        let range = unsafe { RawRange::new(block.ptr, block.bytes, &self.stream) };
        k.process(&range, &self.stream)
    }
    fn arena(&self) -> Option<&VmmArena> {
        Some(&self.arena)
    }
}

/// The cache tier over the arena: the workload stream's `StreamCache` of a
/// tier over the shared arena, as [`CacheAlloc`] over the pool.
pub struct CacheArenaAlloc {
    inner: CacheAlloc,
    arena: Arc<VmmArena>,
    /// The tier made for this allocator when none was given: dropped after
    /// `inner` (its cached blocks freed to the arena, stream-ordered).
    _tier: Option<CacheTier>,
}

impl CacheArenaAlloc {
    /// On `tier` (a tier over the arena), or on a fresh one.
    pub fn new(tier: Option<&CacheTier>, stream: &Stream) -> somalloc::Result<CacheArenaAlloc> {
        let arena = shared(&stream.device())?;
        let fresh = match tier {
            Some(_) => None,
            None => Some(new_tier(&arena)?),
        };
        let inner = CacheAlloc::new(tier.or(fresh.as_ref()).expect("a tier given or made"), stream)?;
        Ok(CacheArenaAlloc {
            inner,
            arena,
            _tier: fresh,
        })
    }
}

impl StreamAlloc for CacheArenaAlloc {
    type Block = CacheBlock;
    #[inline(always)]
    fn alloc(&self, bytes: usize) -> somalloc::Result<CacheBlock> {
        self.inner.alloc(bytes)
    }
    #[inline(always)]
    fn free(&self, block: CacheBlock) -> somalloc::Result<()> {
        self.inner.free(block)
    }
    fn stream(&self) -> &Stream {
        self.inner.stream()
    }
    fn process(&self, k: &TestKernels, block: &CacheBlock, bytes: usize) -> somalloc::Result<()> {
        self.inner.process(k, block, bytes)
    }
    fn cache_stats(&self) -> Option<StreamCacheStats> {
        self.inner.cache_stats()
    }
    fn cache_cap(&self) -> Option<usize> {
        self.inner.cache_cap()
    }
    fn arena(&self) -> Option<&VmmArena> {
        Some(&self.arena)
    }
}

/// The arena's targets, and figures beside them:
///
/// * `arena` at most 0.25× the raw calls (`cudaMallocFromPoolAsync` /
///   `cudaFreeAsync`) at every pair size and on churn;
/// * `cache+arena` at most 2× the cache tier over the pool (`cache`) at
///   every pair size and on churn;
/// * for reference: the same ratios at every thread count, on borrowed
///   streams (against `raw@borrowed` and `cache@borrowed`), the seed
///   pipeline's speedup over raw's, the churn hit rate of `cache+arena`,
///   and from the churn timelines the arena's mapped peak over the pool's
///   reserved peak of `raw` (`cache` for `cache+arena`) and over the live
///   peak; `cache+arena`'s cached bytes never above its cap.
pub fn checks(rows: &[Row], timelines: &[Timeline]) -> Vec<Check> {
    let mut checks = Vec::new();
    let find = |w: &str, p: &str, alloc: &str| {
        rows.iter()
            .find(|r| r.workload == w && r.param == p && r.allocator == alloc)
    };
    for row in rows.iter().filter(|r| r.allocator.contains(ARENA)) {
        let (w, p, name) = (row.workload.as_str(), row.param.as_str(), row.allocator.as_str());
        let (base, limit) = match name {
            ARENA => (RAW, Some(0.25)),
            CACHE_ARENA => (CACHE, Some(2.0)),
            "arena@borrowed" => (RAW_BORROWED, None),
            "cache+arena@borrowed" => ("cache@borrowed", None),
            _ => continue,
        };
        let at = if w == "churn" {
            w.to_string()
        } else {
            format!("{w} {p}")
        };
        if let (true, Some(b)) = (matches!(w, "pair" | "churn" | "threads"), find(w, p, base)) {
            let label = format!("{at}: {name} / {base}");
            let q = row.ns_per_op / b.ns_per_op;
            checks.push(match limit {
                Some(l) if w != "threads" => Check::at_most(label, q, l, ""),
                _ => Check::info(label, q),
            });
        }
        if let (true, Some(h), Some(m)) = (
            w == "churn" && name == CACHE_ARENA,
            row.extra.get("cache_hits"),
            row.extra.get("cache_misses"),
        ) {
            checks.push(Check::info(
                format!("churn: {name} hit rate"),
                h / (h + m).max(1.0),
            ));
        }
    }
    let speedup = |alloc: &str| {
        find("seed_pipeline", &crate::workloads::pipeline_param(), alloc)
            .and_then(|r| r.extra.get("speedup").copied())
    };
    for name in [ARENA, CACHE_ARENA] {
        if let (Some(mine), Some(raw)) = (speedup(name), speedup(RAW)) {
            checks.push(Check::info(
                format!("seed_pipeline: {name} speedup / raw speedup"),
                mine / raw,
            ));
        }
    }
    let peaks = |name: &str| {
        timelines
            .iter()
            .find(|t| t.workload == "churn" && t.allocator == name)
            .and_then(|t| t.peaks)
    };
    for (name, base) in [(ARENA, RAW), (CACHE_ARENA, CACHE)] {
        let Some(p) = peaks(name) else { continue };
        if let Some(b) = peaks(base) {
            checks.push(Check::info(
                format!("churn {name}: mapped peak / {base}'s pool reserved peak"),
                p.pool_reserved as f64 / b.pool_reserved.max(1) as f64,
            ));
        }
        checks.push(Check::info(
            format!("churn {name}: mapped peak / live peak"),
            p.pool_reserved as f64 / p.live.max(1) as f64,
        ));
        checks.extend(crate::results::cached_under_cap(name, &p));
    }
    checks
}
