//! The allocators under test: one [`StreamAlloc`] per way of getting
//! stream-ordered memory, the [`Kind`] that names each, and [`with_alloc!`],
//! which runs a workload's body once per allocator type so its timed loops
//! make direct calls.
//!
//! Adding an allocator is a variant of [`Kind`] (with its entry in
//! `Kind::ALL`, name and description), a [`StreamAlloc`] impl here, and one
//! arm in [`with_alloc!`].

use std::ffi::c_void;
use std::sync::Arc;

use somalloc::testkit::{raw, RawRange, TestKernels};
use somalloc::{
    CacheConfig, CacheTier, DeviceBuffer, MemPool, MemoryResource, Stream, StreamCache, StreamCacheStats,
    VmmArena,
};

pub use cudarc_alloc::CudarcAlloc;

use crate::lent;
use crate::results::{CACHE, CACHE_BUF, RAW};
use crate::workloads::Sample;

/// One allocator under test, bound to a pool and a stream. Every
/// implementation's `alloc` and `free` are `#[inline(always)]`, so that the
/// timed loops (`workloads::pairs`, `run_ops`: a function of their own per
/// allocator) hold each allocator's calls inline, whatever the size of its
/// code.
pub trait StreamAlloc {
    /// What an allocation gives back.
    type Block;
    /// Allocates `bytes` (stream-ordered).
    fn alloc(&self, bytes: usize) -> somalloc::Result<Self::Block>;
    /// Frees a block (stream-ordered, on the same stream).
    fn free(&self, block: Self::Block) -> somalloc::Result<()>;
    /// The stream the allocator works on.
    fn stream(&self) -> &Stream;
    /// Enqueues the seeds' process kernel over `block` (of `bytes` bytes) on
    /// the allocator's stream.
    fn process(&self, k: &TestKernels, block: &Self::Block, bytes: usize) -> somalloc::Result<()>;
    /// The stream cache's counters, for the allocators that go through the
    /// cache tier.
    fn cache_stats(&self) -> Option<StreamCacheStats> {
        None
    }
    /// The most bytes the stream cache may keep ([`stream_cap`]).
    fn cache_cap(&self) -> Option<usize> {
        None
    }
    /// The arena the allocator's memory comes from (`crate::arena`).
    fn arena(&self) -> Option<&VmmArena> {
        None
    }
}

/// The vendor's calls with nothing on top: `cudaMallocFromPoolAsync` /
/// `cudaFreeAsync` (HIP: the same names) through `somalloc::testkit::raw`.
pub struct RawAlloc {
    pub pool: MemPool,
    pub stream: Stream,
}

impl StreamAlloc for RawAlloc {
    type Block = *mut c_void;
    #[inline(always)]
    fn alloc(&self, bytes: usize) -> somalloc::Result<*mut c_void> {
        raw::malloc_from_pool_async(bytes, &self.pool, &self.stream)
    }
    #[inline(always)]
    fn free(&self, block: *mut c_void) -> somalloc::Result<()> {
        // SAFETY: `block` came from `alloc` on this stream and is freed
        // once; the only work on it (the seed pipeline's kernel) was
        // enqueued on this stream before this free.
        unsafe { raw::free_async(block, &self.stream) }
    }
    fn stream(&self) -> &Stream {
        &self.stream
    }
    fn process(&self, k: &TestKernels, block: &*mut c_void, bytes: usize) -> somalloc::Result<()> {
        // SAFETY: `block` is a live allocation of `bytes` from `alloc` on
        // this stream, and its caller frees it with `free`, on this stream,
        // after this kernel.
        let range = unsafe { RawRange::new(*block, bytes, &self.stream) };
        k.process(&range, &self.stream)
    }
}

/// somalloc on the vendor pool: `DeviceBuffer::new_in` and its release.
pub struct SomallocAlloc {
    pub pool: MemPool,
    pub stream: Stream,
}

impl StreamAlloc for SomallocAlloc {
    type Block = DeviceBuffer<u8>;
    #[inline(always)]
    fn alloc(&self, bytes: usize) -> somalloc::Result<DeviceBuffer<u8>> {
        DeviceBuffer::new_in(bytes, &self.pool, &self.stream)
    }
    #[inline(always)]
    fn free(&self, block: DeviceBuffer<u8>) -> somalloc::Result<()> {
        block.release()
    }
    fn stream(&self) -> &Stream {
        &self.stream
    }
    fn process(&self, k: &TestKernels, block: &DeviceBuffer<u8>, _: usize) -> somalloc::Result<()> {
        k.process(block, &self.stream)
    }
}

/// The tier every cache allocator of a measurement uses: the default
/// configuration over the same pool as the other allocators.
pub fn new_tier(pool: &MemPool) -> somalloc::Result<CacheTier> {
    CacheTier::new(Arc::new(pool.clone()), CacheConfig::default())
}

/// The most bytes one stream may keep cached in a tier of [`new_tier`].
pub fn stream_cap(tier: &CacheTier) -> usize {
    let c = tier.config();
    c.per_stream_cap.min(c.total_cap)
}

/// A block of the cache tier used through the resource trait: the address
/// and the requested size (`deallocate` wants it back).
pub struct CacheBlock {
    pub ptr: *mut c_void,
    pub bytes: usize,
}

/// The stream cache tier through the resource trait: the workload stream's
/// [`StreamCache`], `allocate` / `deallocate` called on it directly (no
/// buffer, no dynamic dispatch).
pub struct CacheAlloc {
    pub cache: Arc<StreamCache>,
    pub cap: usize,
    pub stream: Stream,
}

impl CacheAlloc {
    pub fn new(tier: &CacheTier, stream: &Stream) -> somalloc::Result<CacheAlloc> {
        Ok(CacheAlloc {
            cache: tier.for_stream(stream)?,
            cap: stream_cap(tier),
            stream: stream.clone(),
        })
    }
}

impl StreamAlloc for CacheAlloc {
    type Block = CacheBlock;
    #[inline(always)]
    fn alloc(&self, bytes: usize) -> somalloc::Result<CacheBlock> {
        let ptr = self.cache.allocate(bytes, &self.stream)?;
        Ok(CacheBlock { ptr, bytes })
    }
    #[inline(always)]
    fn free(&self, block: CacheBlock) -> somalloc::Result<()> {
        // SAFETY: `block` came from `allocate` of this cache with these
        // bytes, on this stream, and is freed once; the only work on it
        // (the seed pipeline's kernel) was enqueued on this stream before
        // this free.
        unsafe { self.cache.deallocate(block.ptr, block.bytes, &self.stream) }
    }
    fn stream(&self) -> &Stream {
        &self.stream
    }
    fn process(&self, k: &TestKernels, block: &CacheBlock, _: usize) -> somalloc::Result<()> {
        // SAFETY: `block` is a live allocation of `block.bytes` from this
        // stream's cache, usable on this stream, and its caller frees it
        // with `free`, on this stream, after this kernel.
        let range = unsafe { RawRange::new(block.ptr, block.bytes, &self.stream) };
        k.process(&range, &self.stream)
    }
    fn cache_stats(&self) -> Option<StreamCacheStats> {
        Some(self.cache.stats())
    }
    fn cache_cap(&self) -> Option<usize> {
        Some(self.cap)
    }
}

/// The stream cache tier under a buffer: `DeviceBuffer::new_with` on the
/// workload stream's [`StreamCache`] as an `Arc<dyn MemoryResource>`, and
/// the buffer's release.
pub struct CacheBufAlloc {
    pub cache: Arc<StreamCache>,
    pub cap: usize,
    pub resource: Arc<dyn MemoryResource>,
    pub stream: Stream,
}

impl CacheBufAlloc {
    pub fn new(tier: &CacheTier, stream: &Stream) -> somalloc::Result<CacheBufAlloc> {
        let cache = tier.for_stream(stream)?;
        Ok(CacheBufAlloc {
            resource: cache.clone(),
            cache,
            cap: stream_cap(tier),
            stream: stream.clone(),
        })
    }
}

impl StreamAlloc for CacheBufAlloc {
    type Block = DeviceBuffer<u8>;
    #[inline(always)]
    fn alloc(&self, bytes: usize) -> somalloc::Result<DeviceBuffer<u8>> {
        DeviceBuffer::new_with(bytes, &self.resource, &self.stream)
    }
    #[inline(always)]
    fn free(&self, block: DeviceBuffer<u8>) -> somalloc::Result<()> {
        block.release()
    }
    fn stream(&self) -> &Stream {
        &self.stream
    }
    fn process(&self, k: &TestKernels, block: &DeviceBuffer<u8>, _: usize) -> somalloc::Result<()> {
        k.process(block, &self.stream)
    }
    fn cache_stats(&self) -> Option<StreamCacheStats> {
        Some(self.cache.stats())
    }
    fn cache_cap(&self) -> Option<usize> {
        Some(self.cap)
    }
}

/// A row's figures of a stream cache's (or a tier's) counters: hits and
/// misses since the tier was made, bytes cached now.
pub fn cache_extra(c: &StreamCacheStats) -> [(&'static str, f64); 3] {
    [
        ("cache_hits", c.hits as f64),
        ("cache_misses", c.misses as f64),
        ("cached_bytes", c.cached_bytes as f64),
    ]
}

/// `s` with the counters of `a`'s stream cache, for the allocators that
/// have one, and of its arena (the allocations the device's pool served
/// because the arena could not), for those on an arena.
pub fn with_cache_stats<A: StreamAlloc>(a: &A, mut s: Sample) -> Sample {
    if let Some(c) = a.cache_stats() {
        s.extra.extend(cache_extra(&c));
    }
    if let Some(arena) = a.arena() {
        s.extra
            .push(("arena_pool_allocations", arena.stats().pool_allocations as f64));
    }
    s
}

/// The allocators under test. A new one is a variant here, an entry in
/// `ALL`, name/describe arms, a [`StreamAlloc`] impl and one arm in
/// [`with_alloc!`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Raw,
    Somalloc,
    Cache,
    CacheBuf,
    /// cudarc's `CudaSlice` with its default event tracking.
    Cudarc,
    /// cudarc's `CudaSlice` with event tracking off.
    CudarcNoEvents,
    /// The raw calls on a borrowed stream ([`lent`]): the baseline of the
    /// borrowed-stream rows (the runtime's calls on a stream it did not
    /// make cost more than on one it made).
    RawBorrowed,
    /// `Somalloc`, `Cache` and `CacheBuf` on a borrowed stream: somalloc
    /// asks whether it is capturing.
    SomallocBorrowed,
    CacheBorrowed,
    CacheBufBorrowed,
    /// The same with the promise that the stream is captured only through
    /// somalloc (`Stream::assume_captured_only_by_somalloc`).
    SomallocPromised,
    CachePromised,
    CacheBufPromised,
    /// somalloc's virtual-memory arena, and the cache tier in front of it
    /// (`crate::arena`), on a stream somalloc made and on a borrowed one.
    Arena,
    CacheArena,
    ArenaBorrowed,
    CacheArenaBorrowed,
}

/// How an allocator's stream came to somalloc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Made by somalloc (`Stream::new`).
    Owned,
    /// Borrowed ([`lent`]), no promise.
    Borrowed,
    /// Borrowed, with the promise.
    Promised,
}

impl Kind {
    pub const ALL: [Kind; 17] = [
        Kind::Raw,
        Kind::Somalloc,
        Kind::Cache,
        Kind::CacheBuf,
        Kind::Cudarc,
        Kind::CudarcNoEvents,
        Kind::RawBorrowed,
        Kind::SomallocBorrowed,
        Kind::CacheBorrowed,
        Kind::CacheBufBorrowed,
        Kind::SomallocPromised,
        Kind::CachePromised,
        Kind::CacheBufPromised,
        Kind::Arena,
        Kind::CacheArena,
        Kind::ArenaBorrowed,
        Kind::CacheArenaBorrowed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Raw => RAW,
            Kind::Somalloc => "somalloc",
            Kind::Cache => CACHE,
            Kind::CacheBuf => CACHE_BUF,
            Kind::Cudarc => "cudarc",
            Kind::CudarcNoEvents => "cudarc-noev",
            Kind::RawBorrowed => "raw@borrowed",
            Kind::SomallocBorrowed => "somalloc@borrowed",
            Kind::CacheBorrowed => "cache@borrowed",
            Kind::CacheBufBorrowed => "cache+buf@borrowed",
            Kind::SomallocPromised => "somalloc@promised",
            Kind::CachePromised => "cache@promised",
            Kind::CacheBufPromised => "cache+buf@promised",
            Kind::Arena => crate::arena::ARENA,
            Kind::CacheArena => crate::arena::CACHE_ARENA,
            Kind::ArenaBorrowed => "arena@borrowed",
            Kind::CacheArenaBorrowed => "cache+arena@borrowed",
        }
    }

    /// The allocator on a stream somalloc made that this one repeats on a
    /// borrowed stream (itself for the others).
    pub fn base(self) -> Kind {
        match self {
            Kind::RawBorrowed => Kind::Raw,
            Kind::SomallocBorrowed | Kind::SomallocPromised => Kind::Somalloc,
            Kind::CacheBorrowed | Kind::CachePromised => Kind::Cache,
            Kind::CacheBufBorrowed | Kind::CacheBufPromised => Kind::CacheBuf,
            Kind::ArenaBorrowed => Kind::Arena,
            Kind::CacheArenaBorrowed => Kind::CacheArena,
            other => other,
        }
    }

    /// How this allocator's stream came to somalloc.
    pub fn origin(self) -> Origin {
        match self {
            Kind::RawBorrowed
            | Kind::SomallocBorrowed
            | Kind::CacheBorrowed
            | Kind::CacheBufBorrowed
            | Kind::ArenaBorrowed
            | Kind::CacheArenaBorrowed => Origin::Borrowed,
            Kind::SomallocPromised | Kind::CachePromised | Kind::CacheBufPromised => Origin::Promised,
            _ => Origin::Owned,
        }
    }

    /// A peer from another crate (cudarc): run in the pair, churn and
    /// threads workloads only, and only where this build has it (the cuda
    /// backend).
    pub fn peer(self) -> bool {
        matches!(self, Kind::Cudarc | Kind::CudarcNoEvents)
    }

    /// On somalloc's virtual-memory arena (`crate::arena`).
    pub fn on_arena(self) -> bool {
        matches!(self.base(), Kind::Arena | Kind::CacheArena)
    }

    /// Whether this allocator runs in `workload`. The borrowed-stream rows
    /// repeat the pair, churn and threads rows of their base; the arena's
    /// rows run only where an arena could be made (`arena::probe`).
    pub fn runs(self, workload: &str) -> bool {
        if self.on_arena() && !crate::arena::available() {
            return false;
        }
        if self.origin() != Origin::Owned {
            return matches!(workload, "pair" | "churn" | "threads");
        }
        match workload {
            "threshold" => self.runs_threshold(),
            "pair" | "churn" | "threads" => !self.peer() || cudarc_alloc::AVAILABLE,
            _ => !self.peer(),
        }
    }

    pub fn describe(self, vendor: &str) -> String {
        const TIER: &str = "CacheTier::new(Arc::new(pool), CacheConfig::default()), same pool; \
                            tier.for_stream(&stream) (threads: one tier, a StreamCache per thread's stream); \
                            a fresh tier per measurement";
        match self {
            Kind::Raw => format!(
                "{vendor}MallocFromPoolAsync / {vendor}FreeAsync on the device's default pool \
                 (somalloc::testkit::raw, the backend's FFI)"
            ),
            Kind::Somalloc => {
                "DeviceBuffer::<u8>::new_in(bytes, &pool, &stream) + release(), same pool".into()
            }
            Kind::Cache => {
                format!("StreamCache::allocate / deallocate (MemoryResource, static call); {TIER}")
            }
            Kind::CacheBuf => format!(
                "DeviceBuffer::<u8>::new_with(bytes, &Arc<dyn MemoryResource> (the StreamCache), &stream) \
                 + release(); {TIER}"
            ),
            Kind::Cudarc => "cudarc 0.19 CudaStream::alloc::<u8>(bytes) -> CudaSlice<u8>, dropped to free \
                 (cuMemAllocAsync / cuMemFreeAsync on the device's default pool), with cudarc's default \
                 event tracking (a read and a write event per slice); its own context and stream \
                 (ctx.new_stream()); pair, churn and threads only (cuda backend)"
                .into(),
            Kind::CudarcNoEvents => "as cudarc, with event tracking off \
                 (unsafe CudaContext::disable_event_tracking before the slices are made)"
                .into(),
            Kind::Arena | Kind::CacheArena => crate::arena::describe(self, TIER),
            Kind::RawBorrowed => format!(
                "as raw, on a borrowed stream: {}; the baseline of somalloc@borrowed; \
                 pair, churn and threads only",
                lent::HOW
            ),
            other => format!(
                "as {}, on a borrowed stream: {}{}; pair, churn and threads only",
                other.base().name(),
                lent::HOW,
                if other.origin() == Origin::Promised {
                    ", with the promise (unsafe Stream::assume_captured_only_by_somalloc)"
                } else {
                    ", no promise (somalloc asks whether it is capturing)"
                }
            ),
        }
    }

    /// Held to the targets (≤ 1.03× the raw pair, seed-pipeline
    /// speedup within 5% of raw's).
    pub fn checked(self) -> bool {
        matches!(self, Kind::Somalloc)
    }

    /// Goes through the cache tier.
    pub fn tiered(self) -> bool {
        matches!(self.base(), Kind::Cache | Kind::CacheBuf | Kind::CacheArena)
    }

    /// Held to the tier's targets ([`results::compute_tier_checks`]): the
    /// tier over the pool on a stream somalloc made (the tier over the
    /// arena has the arena's targets, `arena::checks`).
    pub fn tier_checked(self) -> bool {
        self.tiered() && !self.on_arena() && self.origin() == Origin::Owned
    }

    /// Runs the threshold workload. Not the tier: a freed block stays in
    /// the stream's cache, so the pool sees no free and its release
    /// threshold never applies; not the arena, which has no pool
    /// ([`THRESHOLD_NOTE`]).
    pub fn runs_threshold(self) -> bool {
        !self.tiered() && !self.peer() && !self.on_arena() && self.origin() == Origin::Owned
    }

    /// Gets a churn timeline panel (`cache+buf` would repeat `cache`'s: the
    /// same tier, the same blocks; the peers' would repeat raw's pool; the
    /// borrowed-stream rows their base's).
    pub fn has_timeline(self) -> bool {
        !matches!(self, Kind::CacheBuf) && !self.peer() && self.origin() == Origin::Owned
    }

    /// The stream this allocator works on: `owned` itself, or for the
    /// borrowed-stream rows a new borrowed `Stream` of lent stream `slot`
    /// (with the promise made where this kind makes it).
    pub fn stream(self, owned: &Stream, slot: usize) -> somalloc::Result<Stream> {
        match self.origin() {
            Origin::Owned => Ok(owned.clone()),
            Origin::Borrowed => lent::borrow(&owned.device(), slot),
            Origin::Promised => {
                let s = lent::borrow(&owned.device(), slot)?;
                // SAFETY: the bench captures no stream outside somalloc
                // (graph_pipeline captures somalloc's own stream through
                // `Stream::begin_capture`, and the lent streams never).
                unsafe { s.assume_captured_only_by_somalloc() };
                Ok(s)
            }
        }
    }
}

/// The borrowed-stream allocators, for their checks (not their baseline,
/// `raw@borrowed`).
pub fn borrowed() -> Vec<crate::results::Borrowed<'static>> {
    Kind::ALL
        .iter()
        .filter(|k| k.origin() != Origin::Owned && **k != Kind::RawBorrowed)
        .map(|k| crate::results::Borrowed {
            name: k.name(),
            base: k.base().name(),
            promised: k.origin() == Origin::Promised,
        })
        .collect()
}

/// Said on the threshold workload's raw rows.
pub const THRESHOLD_NOTE: &str =
    "cache, cache+buf not run: a freed block stays in the stream cache, the pool \
                                  sees no free, so its release threshold never applies (cudarc: pair, churn \
                                  and threads only; arena, cache+arena: no pool, idle chunks kept until trimmed)";

/// Runs `$body` with `$a` bound to the allocator of kind `$kind` on
/// (`$pool`, `$stream`); the body is compiled once per allocator type, so
/// the timed loops make direct calls (a borrowed-stream kind is its base's
/// type on the stream [`Kind::stream`] gives: the same code). The cache
/// allocators take their stream's cache from `$tier` (an
/// `Option<&CacheTier>`), or, given `None`, from a fresh tier over `$pool`
/// that is dropped (its cached blocks freed to the pool, stream-ordered)
/// after the body; `cache+arena` likewise, with a fresh tier over the run's
/// arena (`crate::arena`). `$slot` picks the lent stream of a borrowed-stream kind
/// (one per thread). Errors in making the allocator return from the
/// enclosing function with `?`.
macro_rules! with_alloc {
    ($kind:expr, $pool:expr, $stream:expr, |$a:ident| $body:expr) => {
        with_alloc!($kind, $pool, $stream, None, 0, |$a| $body)
    };
    ($kind:expr, $pool:expr, $stream:expr, $tier:expr, $slot:expr, |$a:ident| $body:expr) => {{
        let kind: $crate::alloc::Kind = $kind;
        let stream: somalloc::Stream = kind.stream(&$stream, $slot)?;
        match kind.base() {
            $crate::alloc::Kind::Raw => {
                let $a = $crate::alloc::RawAlloc {
                    pool: $pool.clone(),
                    stream,
                };
                $body
            }
            $crate::alloc::Kind::Somalloc => {
                let $a = $crate::alloc::SomallocAlloc {
                    pool: $pool.clone(),
                    stream,
                };
                $body
            }
            $crate::alloc::Kind::Cache => {
                let fresh;
                let tier: &somalloc::CacheTier = match $tier {
                    Some(t) => t,
                    None => {
                        fresh = $crate::alloc::new_tier(&$pool)?;
                        &fresh
                    }
                };
                let $a = $crate::alloc::CacheAlloc::new(tier, &stream)?;
                $body
            }
            $crate::alloc::Kind::CacheBuf => {
                let fresh;
                let tier: &somalloc::CacheTier = match $tier {
                    Some(t) => t,
                    None => {
                        fresh = $crate::alloc::new_tier(&$pool)?;
                        &fresh
                    }
                };
                let $a = $crate::alloc::CacheBufAlloc::new(tier, &stream)?;
                $body
            }
            $crate::alloc::Kind::Arena => {
                let $a = $crate::arena::ArenaAlloc::new(&stream)?;
                $body
            }
            $crate::alloc::Kind::CacheArena => {
                let $a = $crate::arena::CacheArenaAlloc::new($tier, &stream)?;
                $body
            }
            k @ ($crate::alloc::Kind::Cudarc | $crate::alloc::Kind::CudarcNoEvents) => {
                let $a = $crate::alloc::CudarcAlloc::new(&stream, k == $crate::alloc::Kind::Cudarc)?;
                $body
            }
            other => unreachable!("{other:?} is its own base"),
        }
    }};
}
pub(crate) use with_alloc;

/// cudarc's own allocation path, as a peer in the same run: a
/// `CudaStream::alloc::<u8>(bytes)` and the `CudaSlice`'s drop (cudarc 0.19,
/// the dev-dependency's CUDA 13.0 bindings, loaded at run time). Each
/// allocator makes its own cudarc stream on the workload stream's device, so
/// that threads keep their own streams; a somalloc `Stream` borrowed from it
/// serves for synchronising. The two cudarc contexts (event tracking on and
/// off) are the device's primary context, made once.
#[cfg(feature = "cuda")]
pub mod cudarc_alloc {
    use std::ffi::c_void;
    use std::sync::{Arc, OnceLock};

    use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, DriverError};
    use somalloc::testkit::{RawRange, TestKernels};
    use somalloc::{Error, Stream, VendorCode};

    use super::StreamAlloc;

    pub const AVAILABLE: bool = true;

    pub fn error(call: &'static str) -> impl Fn(DriverError) -> Error {
        move |e| Error::Vendor {
            call,
            code: VendorCode(e.0 as i32),
            name: format!("{:?}", e.0),
            message: e.to_string(),
        }
    }

    /// The device's primary context through cudarc: `tracked` with cudarc's
    /// default event tracking, else with it off. Made once per process; a
    /// cudarc that cannot load the driver (it panics then) is an error here.
    pub fn context(ordinal: usize, tracked: bool) -> somalloc::Result<Arc<CudaContext>> {
        static CONTEXTS: OnceLock<Result<[Arc<CudaContext>; 2], String>> = OnceLock::new();
        let made = CONTEXTS.get_or_init(|| {
            let make = || -> Result<[Arc<CudaContext>; 2], String> {
                let on = CudaContext::new(ordinal).map_err(|e| e.to_string())?;
                let off = CudaContext::new(ordinal).map_err(|e| e.to_string())?;
                // SAFETY: every slice of `off` is used on its own stream
                // only and dropped (freed in stream order) on that stream;
                // nothing synchronises across streams through cudarc.
                unsafe { off.disable_event_tracking() };
                Ok([on, off])
            };
            std::panic::catch_unwind(make).unwrap_or_else(|_| Err("cudarc could not load the driver".into()))
        });
        match made {
            Ok(pair) => Ok(Arc::clone(&pair[usize::from(!tracked)])),
            Err(why) => Err(Error::Unsupported {
                backend: somalloc::Vendor::Cuda,
                what: format!("cudarc peer: {why}"),
            }),
        }
    }

    pub struct CudarcAlloc {
        /// A borrowed handle of `cu`'s stream (declared first: dropped
        /// before `cu`).
        stream: Stream,
        cu: Arc<CudaStream>,
    }

    impl CudarcAlloc {
        /// A new cudarc stream on `like`'s device, in the tracked or the
        /// untracked context.
        pub fn new(like: &Stream, tracked: bool) -> somalloc::Result<CudarcAlloc> {
            let dev = like.device();
            let cu = context(dev.ordinal(), tracked)?
                .new_stream()
                .map_err(error("cuStreamCreate"))?;
            // SAFETY: `cu` is a live stream of `dev`, kept alive by this
            // struct until after `stream` is dropped; no buffer is ever
            // allocated on the borrowed handle.
            let stream = unsafe { Stream::from_raw(&dev, cu.cu_stream() as *mut c_void) }?;
            Ok(CudarcAlloc { stream, cu })
        }
    }

    impl StreamAlloc for CudarcAlloc {
        type Block = CudaSlice<u8>;
        #[inline(always)]
        fn alloc(&self, bytes: usize) -> somalloc::Result<CudaSlice<u8>> {
            // SAFETY: the bytes are never read before something writes
            // them (the workloads only allocate and free; the pipeline's
            // kernel writes before it reads).
            unsafe { self.cu.alloc::<u8>(bytes) }.map_err(error("CudaStream::alloc"))
        }
        #[inline(always)]
        fn free(&self, block: CudaSlice<u8>) -> somalloc::Result<()> {
            drop(block);
            Ok(())
        }
        fn stream(&self) -> &Stream {
            &self.stream
        }
        fn process(&self, k: &TestKernels, block: &CudaSlice<u8>, bytes: usize) -> somalloc::Result<()> {
            let (ptr, _sync) = block.device_ptr(&self.cu);
            // SAFETY: the slice's live allocation of `bytes`, made on this
            // stream, freed on it after this kernel (its drop).
            let range = unsafe { RawRange::new(ptr as *mut c_void, bytes, &self.stream) };
            k.process(&range, &self.stream)
        }
    }
}

/// Without the cuda backend there is no cudarc peer.
#[cfg(not(feature = "cuda"))]
pub mod cudarc_alloc {
    use somalloc::testkit::TestKernels;
    use somalloc::{Error, Stream};

    use super::StreamAlloc;

    pub const AVAILABLE: bool = false;

    pub enum CudarcAlloc {}

    /// No block is ever made.
    pub enum NoBlock {}

    impl CudarcAlloc {
        pub fn new(_: &Stream, _: bool) -> somalloc::Result<CudarcAlloc> {
            Err(Error::Unsupported {
                backend: somalloc::Vendor::Rocm,
                what: "the cudarc peer (cuda backend only)".into(),
            })
        }
    }

    impl StreamAlloc for CudarcAlloc {
        type Block = NoBlock;
        fn alloc(&self, _: usize) -> somalloc::Result<NoBlock> {
            match *self {}
        }
        fn free(&self, block: NoBlock) -> somalloc::Result<()> {
            match block {}
        }
        fn stream(&self) -> &Stream {
            match *self {}
        }
        fn process(&self, _: &TestKernels, block: &NoBlock, _: usize) -> somalloc::Result<()> {
            match *block {}
        }
    }
}
