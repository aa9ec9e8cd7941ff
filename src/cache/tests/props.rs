//! Property tests with failure injection: random sequences of allocations,
//! frees, buffers (`new_with`, `use_on`, drop, `release`), flush, trim,
//! stream removal and capture begin / invalidation / end over one cache tier,
//! its stream caches and a stack of adaptors (statistics, tracking, retry
//! with a flush step, a limit), all over the fake pool and fake streams,
//! where any call into the fake runtime may fail: an allocation (out of
//! memory, invalid value, a vendor error), a free (also inside `Drop`), a
//! capture query, an event, a graph's retain of a deferred free.
//!
//! After every step:
//! * no block is live twice: the blocks the test holds and the blocks in the
//!   caches' bins are distinct, and all are live in the fake pool;
//! * the adaptors' counters equal the reference model's, exactly;
//! * each cache's books match its bins, the caps and the credit hold, and
//!   its live and captured counts equal the model's (exactly after a step
//!   without an injected failure; a failure may stop a call anywhere, so the
//!   model then takes the counters as they are and checks the next step);
//! * an allocation that finds a block of its class in the bins is a hit,
//!   one that finds none is a miss (or a larger block, counted as such);
//! * every failure is a typed error that the step returned, a drop error
//!   counted on this thread, or a recovery step's error counted by the
//!   retry adaptor; a step without an injected failure fails only where the
//!   model says (out of memory under a limit, `use_on` across captures);
//! * nothing panics.
//!
//! At teardown (every capture ended, its graph destroyed, every buffer and
//! block freed, the tier dropped): every byte is back in the fake pool but
//! for the blocks whose free failed by injection (the caller was told, and
//! the memory is leaked rather than freed twice) and those whose deferred
//! free could not be registered (a step that reported it).
//!
//! `SOMALLOC_PROPTEST_CASES` (default 96) and `SOMALLOC_PROPTEST_SEED`
//! (default fixed) set the run, `SOMALLOC_PROPTEST_SHRINK` the shrinking
//! steps (default 400); a failure prints the shrunk sequence, and
//! `SOMALLOC_PROPTEST_TRACE=1` prints every step with the caches' books.

use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

use super::*;
use crate::adaptors::{Backtraces, LimitingAdaptor, RetryAdaptor, StatisticsAdaptor, TrackingAdaptor};
use crate::error::{drop_errors_here, Result};
use crate::graph::{reclaim_graph_frees, CaptureStatus};
use crate::stream::capture_flag;
use crate::testing::{self, Fault};

const STREAMS: usize = 3;

/// What a step's fake runtime does wrong: after `skip` calls of the test's
/// domain, the next fails with `fault` (and with `persistent`, every later
/// one too).
#[derive(Clone, Copy, Debug)]
struct Failure {
    skip: u32,
    fault: Fault,
    persistent: bool,
}

/// How an allocation is made.
#[derive(Clone, Copy, Debug)]
enum Via {
    /// Through the adaptor stack over the tier (the tier as a resource).
    Stack,
    /// Through the stream's cache handle, as a raw allocation.
    Cache,
    /// A `DeviceBuffer` from the stream's cache handle (`new_with`: the
    /// block is pinned, the buffer holds no reference).
    Buffer,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Alloc {
        via: Via,
        stream: usize,
        bytes: usize,
    },
    /// Frees (or drops) the held allocation at this index (modulo).
    Free {
        pick: usize,
    },
    /// `release` instead of drop (a buffer) or the same free (a raw block).
    Release {
        pick: usize,
    },
    UseOn {
        pick: usize,
        stream: usize,
    },
    FlushTier,
    TrimTier {
        keep: usize,
    },
    FlushCache {
        stream: usize,
    },
    TrimCache {
        stream: usize,
        keep: usize,
    },
    RemoveStream {
        stream: usize,
    },
    /// Takes a fresh handle from the tier (registering the stream again).
    Renew {
        stream: usize,
    },
    BeginCapture {
        stream: usize,
    },
    Invalidate {
        stream: usize,
    },
    EndCapture {
        stream: usize,
    },
}

#[derive(Clone, Debug)]
struct Step {
    op: Op,
    failure: Option<Failure>,
}

#[derive(Clone, Debug)]
struct Setup {
    config: CacheConfig,
    /// The fake pool's size, if limited.
    pool_limit: Option<usize>,
    /// A limiting adaptor between the tier and the pool.
    stack_limit: Option<usize>,
    /// Streams somalloc does not ask about capture (owned-like): the hot
    /// paths and the biased lock run on them.
    quiet: [bool; STREAMS],
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        Just(Fault::OutOfMemory),
        Just(Fault::InvalidValue),
        Just(Fault::Vendor)
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let s = 0..STREAMS;
    let bytes = prop_oneof![
        4 => 1usize..4096,
        3 => 4096usize..(1 << 20),
        1 => (1usize << 20)..(3 << 20),
    ];
    let via = prop_oneof![Just(Via::Stack), Just(Via::Cache), Just(Via::Buffer)];
    let op = prop_oneof![
        14 => (via, s.clone(), bytes).prop_map(|(via, stream, bytes)| Op::Alloc { via, stream, bytes }),
        10 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        2 => any::<usize>().prop_map(|pick| Op::Release { pick }),
        2 => (any::<usize>(), s.clone()).prop_map(|(pick, stream)| Op::UseOn { pick, stream }),
        1 => Just(Op::FlushTier),
        1 => (0usize..(2 << 20)).prop_map(|keep| Op::TrimTier { keep }),
        1 => s.clone().prop_map(|stream| Op::FlushCache { stream }),
        1 => (s.clone(), 0usize..(1 << 20)).prop_map(|(stream, keep)| Op::TrimCache { stream, keep }),
        1 => s.clone().prop_map(|stream| Op::RemoveStream { stream }),
        1 => s.clone().prop_map(|stream| Op::Renew { stream }),
        1 => s.clone().prop_map(|stream| Op::BeginCapture { stream }),
        1 => s.clone().prop_map(|stream| Op::Invalidate { stream }),
        2 => s.prop_map(|stream| Op::EndCapture { stream }),
    ];
    let failure = prop_oneof![
        3 => Just(None),
        1 => (0u32..6, fault(), prop::bool::weighted(0.2))
            .prop_map(|(skip, fault, persistent)| Some(Failure { skip, fault, persistent })),
    ];
    (op, failure).prop_map(|(op, failure)| Step { op, failure })
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        prop_oneof![Just(64 * KIB), Just(1usize << 20), Just(4usize << 20)],
        prop_oneof![
            Just(0usize),
            Just(256 * KIB),
            Just(2usize << 20),
            Just(64usize << 20)
        ],
        prop_oneof![Just(512 * KIB), Just(4usize << 20), Just(1usize << 30)],
        prop_oneof![
            Just(None),
            Just(Some(Headroom::new(0, 0))),
            Just(Some(Headroom::default()))
        ],
        prop_oneof![
            Just(None),
            Just(Some(Headroom::new(0, 125))),
            Just(Some(Headroom::new(0, 0)))
        ],
        any::<bool>(),
        prop_oneof![Just(None), Just(Some(6usize << 20)), Just(Some(24usize << 20))],
        prop_oneof![Just(None), Just(Some(8usize << 20))],
        any::<[bool; STREAMS]>(),
    )
        .prop_map(
            |(max_block, per_stream, total, headroom, reuse, bias, pool_limit, stack_limit, quiet)| Setup {
                config: CacheConfig::default()
                    .max_block_bytes(max_block)
                    .per_stream_cap(per_stream)
                    .total_cap(total)
                    .headroom(headroom)
                    .reuse_larger(reuse)
                    .thread_bias(bias),
                pool_limit,
                stack_limit,
                quiet,
            },
        )
}

/// What the run covered (summed over its cases, shrinking included).
#[derive(Default)]
struct Coverage {
    steps: AtomicU64,
    injected: AtomicU64,
    reported: AtomicU64,
    deferred: AtomicU64,
    hits: AtomicU64,
    removed: AtomicU64,
    captured: AtomicU64,
    leaked: AtomicU64,
}

static COVERAGE: Coverage = Coverage {
    steps: AtomicU64::new(0),
    injected: AtomicU64::new(0),
    reported: AtomicU64::new(0),
    deferred: AtomicU64::new(0),
    hits: AtomicU64::new(0),
    removed: AtomicU64::new(0),
    captured: AtomicU64::new(0),
    leaked: AtomicU64::new(0),
};

fn count(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Failure domains and capture ids no other test uses.
static NEXT_DOMAIN: AtomicU64 = AtomicU64::new(0x5050_0000);
static NEXT_CAPTURE: AtomicU64 = AtomicU64::new(0x7070_0000_0000);

/// A block the test holds.
struct Held {
    addr: usize,
    bytes: usize,
    stream: usize,
    via: Via,
    /// The cache that served it (`None`: the stack, which asks the tier).
    cache: Option<Arc<StreamCache>>,
    /// The capture it was allocated in (0: none).
    capture: u64,
    buffer: Option<DeviceBuffer<u8>>,
    /// Streams it was used on (`use_on`).
    users: Vec<usize>,
}

/// What the model expects of a stream cache (keyed by its address); its
/// captured blocks are the model's `captured` entries that name it.
#[derive(Clone, Debug, Default, PartialEq)]
struct CacheBooks {
    live: usize,
}

/// Who remembers a block of graph memory (allocated during a capture):
/// the cache that handed it out, or, after that cache's stream was removed,
/// the tier for the stream's next cache.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Owner {
    Cache(usize),
    Removed(usize),
}

/// The adaptors' counters as the model expects them.
#[derive(Clone, Debug, Default, PartialEq)]
struct StackBooks {
    allocations: u64,
    failed: u64,
    deallocations: u64,
    bytes_current: usize,
    outstanding: usize,
}

struct World {
    domain: u64,
    setup: Setup,
    fake: Arc<FakeResource>,
    tier: Arc<CacheTier>,
    limit: Option<Arc<LimitingAdaptor>>,
    retry: Arc<RetryAdaptor>,
    tracking: Arc<TrackingAdaptor>,
    stats: Arc<StatisticsAdaptor>,
    res: Arc<dyn MemoryResource>,
    streams: Vec<Stream>,
    handles: Vec<Arc<StreamCache>>,
    /// The stream's capture: (status, id) as the test set it.
    capture: Vec<(CaptureStatus, u64)>,
    /// Captures whose fake graph is not destroyed yet.
    graphs: Vec<u64>,
    held: Vec<Held>,
    /// Streams registered in the tier now (the model's view).
    registered: [bool; STREAMS],
    books: HashMap<usize, CacheBooks>,
    /// Every cache the test ever had a handle to (for the books; kept alive
    /// by the test so that the address keys stay unique).
    caches: Vec<Arc<StreamCache>>,
    stack: StackBooks,
    /// Blocks that may stay live at teardown, each because a step reported
    /// an error: a deferred free that could not be registered.
    may_leak: HashSet<usize>,
    /// Buffers dropped whose free waits for a graph or a capture's end:
    /// their addresses, and the change to their cache's books when done.
    deferred: HashMap<usize, (usize, Option<usize>)>,
    /// Graph memory not freed through the cache that remembers it.
    captured: HashMap<usize, Owner>,
    /// What each deferred free waits for: its streams' captures to end and
    /// these graphs to be destroyed.
    waits: HashMap<usize, (Vec<usize>, Vec<u64>)>,
    /// Blocks allocated during a capture (graph memory).
    graph_blocks: HashSet<usize>,
    /// The block the step freed, if it freed one.
    freed: Option<usize>,
    /// Whether the step's allocation succeeded.
    allocated: bool,
    /// Failures injected by the step outside its own plan's count (the
    /// end of a capture disarms its plan after its first reclaim).
    injected_extra: u32,
}

fn key(cache: &Arc<StreamCache>) -> usize {
    Arc::as_ptr(cache) as usize
}

fn typed(e: &Error) -> bool {
    matches!(
        e,
        Error::OutOfMemory { .. }
            | Error::InvalidArgument { .. }
            | Error::Capture { .. }
            | Error::CaptureInvalidated { .. }
            | Error::Vendor { .. }
    )
}

/// Cached blocks of one cache: (addr, class size).
fn bins_of(cache: &StreamCache) -> Vec<(usize, usize)> {
    let state = cache.lock();
    let mut out = Vec::new();
    for (idx, bin) in state.bins.iter().enumerate() {
        for &addr in bin {
            out.push((addr, class_size(idx)));
        }
    }
    out
}

fn nonempty_classes(cache: &StreamCache) -> Vec<bool> {
    cache.lock().bins.iter().map(|b| !b.is_empty()).collect()
}

impl World {
    fn new(setup: Setup) -> World {
        let domain = NEXT_DOMAIN.fetch_add(1, Ordering::Relaxed);
        let fake = FakeResource::in_domain(setup.pool_limit, domain);
        let limit = setup
            .stack_limit
            .map(|l| Arc::new(LimitingAdaptor::new(fake.clone(), l)));
        let upstream: Arc<dyn MemoryResource> = match &limit {
            Some(l) => l.clone(),
            None => fake.clone(),
        };
        let tier = Arc::new(CacheTier::new(upstream, setup.config).unwrap());
        let retry = Arc::new(RetryAdaptor::new(tier.clone()).flush_on_oom(&tier));
        let tracking = Arc::new(TrackingAdaptor::new(retry.clone(), Backtraces::Off));
        let stats = Arc::new(StatisticsAdaptor::new(tracking.clone()));
        let res: Arc<dyn MemoryResource> = stats.clone();
        let streams: Vec<Stream> = (0..STREAMS)
            .map(|i| {
                let s = Stream::fake_in(0x6000_0000 + (domain as usize & 0xFFFF) * 64 + 16 * i, 0, domain);
                if setup.quiet[i] {
                    s.clear_capture_flag(capture_flag::ALWAYS_ASK);
                }
                s
            })
            .collect();
        let handles: Vec<Arc<StreamCache>> = streams.iter().map(|s| tier.for_stream(s).unwrap()).collect();
        let mut books = HashMap::new();
        for h in &handles {
            books.insert(key(h), CacheBooks::default());
        }
        World {
            domain,
            fake,
            tier,
            limit,
            retry,
            tracking,
            stats,
            res,
            caches: handles.clone(),
            handles,
            streams,
            capture: vec![(CaptureStatus::None, 0); STREAMS],
            graphs: Vec::new(),
            held: Vec::new(),
            registered: [true; STREAMS],
            books,
            stack: StackBooks::default(),
            may_leak: HashSet::new(),
            deferred: HashMap::new(),
            captured: HashMap::new(),
            waits: HashMap::new(),
            graph_blocks: HashSet::new(),
            freed: None,
            allocated: false,
            injected_extra: 0,
            setup,
        }
    }

    fn capturing(&self, stream: usize) -> bool {
        self.capture[stream].0 != CaptureStatus::None
    }

    /// Sets a stream's fake capture state; a quiet stream is asked about
    /// capture while it captures (as `begin_capture` would make it).
    fn set_capture(&mut self, stream: usize, status: CaptureStatus, id: u64) {
        let s = &self.streams[stream];
        s.set_fake_capture(status, id);
        if self.setup.quiet[stream] {
            if status == CaptureStatus::None {
                s.clear_capture_flag(capture_flag::ALWAYS_ASK);
            } else {
                s.set_capture_flag(capture_flag::ALWAYS_ASK);
            }
        }
        self.capture[stream] = (status, id);
    }

    /// The cache the tier would route a stack call on `stream` to.
    fn registered_cache(&self, stream: usize) -> Option<Arc<StreamCache>> {
        let key = self.streams[stream].as_raw() as usize;
        lock(&self.tier.shared.registry).get(&key).cloned()
    }

    fn cacheable(&self, bytes: usize) -> bool {
        bytes <= self.setup.config.max_block_bytes
    }

    /// Runs one step; its outcome as the model sees it.
    fn run(&mut self, step: &Step) -> std::result::Result<(), TestCaseError> {
        let drop_errors = drop_errors_here();
        let retry = self.retry.stats();
        if let Some(f) = step.failure {
            testing::arm(self.domain, f.skip, f.fault, f.persistent);
        }
        let before = self.snapshot();
        let bins_before: HashMap<usize, HashSet<usize>> = self
            .caches
            .iter()
            .map(|c| (key(c), bins_of(c).into_iter().map(|b| b.0).collect()))
            .collect();
        self.freed = None;
        self.allocated = false;
        self.injected_extra = 0;
        let outcome = self.apply(step.op);
        let (injected, _) = testing::disarm();
        let injected = injected + self.injected_extra;
        let dropped = drop_errors_here() - drop_errors;
        let retry_now = self.retry.stats();
        let recovery = retry_now.step_errors - retry.step_errors;
        let (result, expect_err) = outcome?;
        if std::env::var("SOMALLOC_PROPTEST_TRACE").is_ok() {
            eprintln!("step {step:?} -> {result:?} injected {injected} dropped {dropped}");
            for c in &self.caches {
                let st = c.stats();
                eprintln!(
                    "   cache {:#x}: live {} cached {} pinned {} books {:?}",
                    st.stream,
                    st.live_bytes,
                    st.cached_blocks,
                    c.lock().pinned,
                    self.books.get(&key(c))
                );
            }
            eprintln!("   deferred {:x?}", self.deferred);
        }
        self.adopt_registered();
        self.settle_deferred();
        if let Err(e) = &result {
            prop_assert!(typed(e), "untyped error {e:?}");
        }
        let reported = result.is_err() || dropped > 0 || recovery > 0;
        count(&COVERAGE.steps, 1);
        count(&COVERAGE.injected, u64::from(injected));
        count(&COVERAGE.reported, u64::from(reported));
        if let (Some(addr), true) = (self.freed, reported) {
            // A free that reported an error may have left its block live
            // (never freed twice): allowed at teardown. (If it was deferred,
            // the end of its capture waits for it only a little.)
            self.may_leak.insert(addr);
        }
        let fault = step.failure.map(|f| f.fault);
        if injected > 0 {
            // An injected out-of-memory may be recovered from (the retry, or
            // the cache's release of its blocks); any other failure shows.
            if fault != Some(Fault::OutOfMemory) {
                prop_assert!(reported, "an injected failure ({injected}) vanished: {result:?}");
            }
            self.resync();
        } else {
            prop_assert_eq!(dropped, 0, "a drop error without an injected failure");
            prop_assert_eq!(recovery, 0, "a recovery step failed without an injected failure");
            let limited = self.setup.pool_limit.is_some() || self.setup.stack_limit.is_some();
            match &result {
                Ok(()) => {}
                Err(Error::OutOfMemory { .. }) if limited => {}
                Err(e) => prop_assert!(expect_err, "a step without an injected failure failed: {e:?}"),
            }
            let oom = retry_now.out_of_memory != retry.out_of_memory;
            self.check_exact(step.op, &before, oom)?;
        }
        self.check_books(&bins_before)
    }

    /// Takes into the books the caches the tier made by itself (a stack
    /// allocation on a removed stream registers it again).
    fn adopt_registered(&mut self) {
        for s in 0..STREAMS {
            if let Some(c) = self.registered_cache(s) {
                self.registered[s] = true;
                self.adopt(&c);
            }
        }
    }

    /// Starts the books of a cache the model has not seen yet: a stream's
    /// next cache takes over the graph memory of its removed one.
    fn adopt(&mut self, c: &Arc<StreamCache>) {
        if let std::collections::hash_map::Entry::Vacant(e) = self.books.entry(key(c)) {
            e.insert(CacheBooks::default());
            self.caches.push(c.clone());
            if let Some(s) = self.streams.iter().position(|x| x.as_raw() == c.stream.as_raw()) {
                for owner in self.captured.values_mut() {
                    if *owner == Owner::Removed(s) {
                        *owner = Owner::Cache(key(c));
                    }
                }
            }
        }
    }

    /// A free reached cache `cache` (also when the upstream free then
    /// failed): graph memory it remembers is forgotten, any other block
    /// comes off its live bytes (`size`, for a cacheable request).
    fn reached(&mut self, cache: usize, addr: usize, size: Option<usize>) {
        if self.captured.get(&addr) == Some(&Owner::Cache(cache)) || self.removed_capture_of(cache, addr) {
            self.captured.remove(&addr);
        } else if let Some(size) = size {
            let books = self.books.entry(cache).or_default();
            books.live = books.live.saturating_sub(size);
        }
    }

    /// Whether `addr` is graph memory that `cache`, detached since, handed
    /// out before its stream was removed: remembered for the stream (or
    /// taken over by the stream's next cache), and forgotten when it comes
    /// back through the old cache.
    fn removed_capture_of(&self, cache: usize, addr: usize) -> bool {
        let Some(c) = self.caches.iter().find(|c| key(c) == cache) else {
            return false;
        };
        if !c.lock().detached {
            return false;
        }
        let raw = c.stream.as_raw();
        match self.captured.get(&addr) {
            Some(Owner::Removed(s)) => self.streams[*s].as_raw() == raw,
            Some(Owner::Cache(other)) => self
                .caches
                .iter()
                .any(|n| key(n) == *other && n.stream.as_raw() == raw && !n.lock().detached),
            None => false,
        }
    }

    /// Deferred frees that were done (or refused by the pool) change their
    /// cache's books now.
    fn settle_deferred(&mut self) {
        if self.deferred.is_empty() {
            return;
        }
        // Done: back in the pool or in a cache's bins. A free that the pool
        // refused did nothing: it stays queued and is tried again.
        let cached: HashSet<usize> = self.caches.iter().flat_map(|c| bins_of(c)).map(|b| b.0).collect();
        let done: Vec<usize> = {
            let fake = self.fake.state();
            self.deferred
                .keys()
                .copied()
                .filter(|a| !fake.live.contains_key(a) || cached.contains(a))
                .inspect(|a| {
                    if std::env::var("SOMALLOC_PROPTEST_TRACE").is_ok() {
                        eprintln!(
                            "   done {a:x}: live {} failed {} cached {}",
                            fake.live.contains_key(a),
                            fake.failed_frees.contains(a),
                            cached.contains(a)
                        )
                    }
                })
                .collect()
        };
        for addr in done {
            self.waits.remove(&addr);
            if let Some((cache, size)) = self.deferred.remove(&addr) {
                self.reached(cache, addr, size);
            }
        }
    }

    /// What the per-step checks compare against.
    fn snapshot(&self) -> HashMap<usize, (StreamCacheStats, Vec<bool>)> {
        self.caches
            .iter()
            .map(|c| (key(c), (c.stats(), nonempty_classes(c))))
            .collect()
    }

    /// Takes the counters as they are (after a step that a failure may have
    /// cut short anywhere).
    fn resync(&mut self) {
        for c in &self.caches {
            let st = c.stats();
            self.books.insert(key(c), CacheBooks { live: st.live_bytes });
        }
        // Who remembers which graph memory, as the caches and the tier say.
        self.captured.clear();
        for c in &self.caches {
            for &addr in c.lock().captured.keys() {
                self.captured.insert(addr, Owner::Cache(key(c)));
            }
        }
        for (stream, blocks) in lock(&self.tier.shared.captured_of_removed).iter() {
            if let Some(s) = self.streams.iter().position(|x| x.as_raw() as usize == *stream) {
                for &addr in blocks.keys() {
                    self.captured.insert(addr, Owner::Removed(s));
                }
            }
        }
        let st = self.stats.stats();
        self.stack = StackBooks {
            allocations: st.allocations,
            failed: st.failed_allocations,
            deallocations: st.deallocations,
            bytes_current: st.bytes_current,
            outstanding: st.outstanding,
        };
    }

    /// The step's result, and whether an error is what the model expects
    /// without a failure (`use_on` across captures).
    #[allow(clippy::type_complexity)]
    fn apply(&mut self, op: Op) -> std::result::Result<(Result<()>, bool), TestCaseError> {
        Ok(match op {
            Op::Alloc { via, stream, bytes } => (self.alloc(via, stream, bytes), false),
            Op::Free { pick } | Op::Release { pick } if !self.held.is_empty() => {
                let held = self.held.swap_remove(pick % self.held.len());
                (self.free(held, matches!(op, Op::Release { .. })), false)
            }
            Op::UseOn { pick, stream } if !self.held.is_empty() => {
                let i = pick % self.held.len();
                let (own, capture) = (self.held[i].stream, self.capture.clone());
                let other = self.streams[stream].clone();
                let Some(buf) = self.held[i].buffer.as_mut() else {
                    return Ok((Ok(()), false));
                };
                let r = buf.use_on(&other);
                let across = own != stream && capture[own].1 != capture[stream].1;
                if r.is_ok() && own != stream && !self.held[i].users.contains(&stream) {
                    self.held[i].users.push(stream);
                }
                (r, across)
            }
            Op::FlushTier => (self.tier.flush(), false),
            Op::TrimTier { keep } => (self.tier.trim(keep), false),
            Op::FlushCache { stream } => (self.handles[stream].flush(), false),
            Op::TrimCache { stream, keep } => (self.handles[stream].trim(keep), false),
            Op::RemoveStream { stream } => {
                let removed = self.registered_cache(stream);
                let bins = removed.as_ref().map(|c| bins_of(c)).unwrap_or_default();
                let r = self.tier.remove_stream(&self.streams[stream]);
                if let Some(c) = &removed {
                    // Its graph memory goes to the stream's next cache.
                    for owner in self.captured.values_mut() {
                        if *owner == Owner::Cache(key(c)) {
                            *owner = Owner::Removed(stream);
                        }
                    }
                    // A capturing stream's cached blocks wait in the
                    // deferred-free queue for the capture's end.
                    let now: HashSet<usize> = bins_of(c).into_iter().map(|b| b.0).collect();
                    let live: HashSet<usize> = self.fake.state().live.keys().copied().collect();
                    for (addr, _) in bins {
                        if !now.contains(&addr) && live.contains(&addr) {
                            count(&COVERAGE.deferred, 1);
                            self.waits.insert(addr, (vec![stream], Vec::new()));
                            self.deferred.insert(addr, (key(c), None));
                        }
                    }
                }
                let was = self.registered[stream];
                count(&COVERAGE.removed, u64::from(was));
                self.registered[stream] = false;
                (
                    r.map(|removed| assert_eq!(removed, was, "remove_stream's answer")),
                    false,
                )
            }
            Op::Renew { stream } => match self.tier.for_stream(&self.streams[stream]) {
                Ok(h) => {
                    self.registered[stream] = true;
                    self.adopt(&h);
                    self.handles[stream] = h;
                    (Ok(()), false)
                }
                Err(e) => (Err(e), false),
            },
            Op::BeginCapture { stream } if !self.capturing(stream) => {
                let id = NEXT_CAPTURE.fetch_add(1, Ordering::Relaxed);
                testing::fake_graph_begin(id, self.domain);
                self.graphs.push(id);
                self.set_capture(stream, CaptureStatus::Active, id);
                (Ok(()), false)
            }
            Op::Invalidate { stream } if self.capture[stream].0 == CaptureStatus::Active => {
                let id = self.capture[stream].1;
                self.set_capture(stream, CaptureStatus::Invalidated, id);
                (Ok(()), false)
            }
            Op::EndCapture { stream } if self.capturing(stream) => (self.end_capture(stream), false),
            _ => (Ok(()), false),
        })
    }

    fn alloc(&mut self, via: Via, stream: usize, bytes: usize) -> Result<()> {
        self.adopt_registered();
        let s = self.streams[stream].clone();
        let capture = self.capture[stream].1;
        let (addr, cache, buffer) = match via {
            Via::Stack => {
                let r = self.res.allocate(bytes, &s);
                match r {
                    Ok(p) => {
                        self.stack.allocations += 1;
                        self.stack.bytes_current += bytes;
                        self.stack.outstanding += 1;
                        (p as usize, None, None)
                    }
                    Err(e) => {
                        self.stack.failed += 1;
                        return Err(e);
                    }
                }
            }
            Via::Cache => {
                let h = self.handles[stream].clone();
                (h.allocate(bytes, &s)? as usize, Some(h), None)
            }
            Via::Buffer => {
                let h = self.handles[stream].clone();
                let res: Arc<dyn MemoryResource> = h.clone();
                let buf = DeviceBuffer::<u8>::new_with(bytes, &res, &s)?;
                (buf.as_raw() as usize, Some(h), Some(buf))
            }
        };
        // The cache that counts it as live: the handle's, or for the stack
        // the one the tier registered for the stream (made now if need be).
        let counted = match &cache {
            Some(h) => Some(h.clone()),
            None => self.registered_cache(stream),
        };
        if let Some(c) = &counted {
            self.adopt(c);
            self.registered[stream] |= cache.is_none();
            let real = self.fake.state().live.get(&addr).map_or(0, |b| b.0);
            let books = self.books.get_mut(&key(c)).unwrap();
            if capture == 0 && bytes <= self.setup.config.max_block_bytes {
                books.live += real;
            }
            if capture != 0 {
                self.captured.insert(addr, Owner::Cache(key(c)));
            }
        }
        if capture != 0 {
            count(&COVERAGE.captured, 1);
            self.graph_blocks.insert(addr);
        }
        self.allocated = true;
        self.held.push(Held {
            addr,
            bytes,
            stream,
            via,
            cache: counted,
            capture,
            buffer,
            users: Vec::new(),
        });
        Ok(())
    }

    /// Whether dropping this buffer now defers its free (the rules of
    /// `DeviceBuffer::free_under_capture`).
    fn defers(&self, held: &Held) -> bool {
        let mine = self.capture[held.stream];
        let theirs: Vec<(CaptureStatus, u64)> = held.users.iter().map(|&u| self.capture[u]).collect();
        match mine {
            (CaptureStatus::None, _) => theirs.iter().any(|t| t.0 != CaptureStatus::None),
            (CaptureStatus::Invalidated, id) if id == held.capture => false,
            (CaptureStatus::Active, id) if id == held.capture => !theirs.iter().all(|t| t.1 == id),
            _ => true,
        }
    }

    fn free(&mut self, mut held: Held, release: bool) -> Result<()> {
        let s = self.streams[held.stream].clone();
        let ptr = held.addr as *mut c_void;
        let deferred = held.buffer.is_some() && self.defers(&held);
        // The cache the free reaches: a buffer's or raw block's own cache,
        // or for the stack the one registered now (none: straight upstream).
        let reaches = match held.via {
            Via::Stack => self.registered_cache(held.stream),
            _ => held.cache.clone(),
        };
        // The size it takes off the live bytes of a cache that does not
        // remember it as graph memory.
        let size = self.cacheable(held.bytes).then(|| self.real_size(&held));
        self.freed = Some(held.addr);
        let result = match held.buffer.take() {
            Some(buf) if release => buf.release(),
            Some(buf) => {
                drop(buf);
                Ok(())
            }
            // SAFETY: fake addresses, from this path, freed once.
            None => unsafe {
                match held.via {
                    Via::Stack => self.res.deallocate(ptr, held.bytes, &s),
                    _ => held.cache.as_ref().unwrap().deallocate(ptr, held.bytes, &s),
                }
            },
        };
        if held.via == Via::Stack && result.is_ok() {
            self.stack.deallocations += 1;
            self.stack.bytes_current -= held.bytes;
            self.stack.outstanding -= 1;
        }
        match (&reaches, deferred) {
            (Some(c), true) => {
                count(&COVERAGE.deferred, 1);
                let streams: Vec<usize> = std::iter::once(held.stream)
                    .chain(held.users.iter().copied())
                    .collect();
                let graphs = streams
                    .iter()
                    .filter(|&&s| self.capture[s].0 == CaptureStatus::Active)
                    .map(|&s| self.capture[s].1)
                    .collect();
                self.waits.insert(held.addr, (streams, graphs));
                self.deferred.insert(held.addr, (key(c), size));
            }
            (Some(c), false) => self.reached(key(c), held.addr, size),
            // Through the tier to a removed stream that has no cache now:
            // its graph memory comes out of the tier's record.
            (None, _) => {
                if result.is_ok() && self.captured.get(&held.addr) == Some(&Owner::Removed(held.stream)) {
                    self.captured.remove(&held.addr);
                }
            }
        }
        result
    }

    /// The size the upstream allocated for a held block (its class, or the
    /// larger one it was handed out in).
    fn real_size(&self, held: &Held) -> usize {
        self.fake
            .state()
            .live
            .get(&held.addr)
            .map_or(self.tier.block_size(held.bytes), |b| b.0)
    }

    fn end_capture(&mut self, stream: usize) -> Result<()> {
        let id = self.capture[stream].1;
        self.set_capture(stream, CaptureStatus::None, 0);
        if let Some(i) = self.graphs.iter().position(|&g| g == id) {
            self.graphs.swap_remove(i);
            testing::fake_graph_destroy(id);
        }
        self.drain_deferred()
    }

    /// Reclaims until the deferred frees whose captures are all over are
    /// done (here, or by another test's reclaim); the first error.
    fn drain_deferred(&mut self) -> Result<()> {
        let mut first_error = None;
        let start = Instant::now();
        let mut plan = true;
        let mut failed = false;
        let drop_errors = drop_errors_here();
        loop {
            if let Err(e) = reclaim_graph_frees() {
                first_error.get_or_insert(e);
            }
            if std::mem::take(&mut plan) {
                // The runtime works again after the first attempt.
                let injected = testing::disarm().0;
                self.injected_extra += injected;
                failed = injected > 0 && (first_error.is_some() || drop_errors_here() > drop_errors);
            }
            self.settle_deferred();
            let waiting = self.deferred_waiting();
            if waiting.is_empty() {
                break;
            }
            if start.elapsed() > Duration::from_millis(200) {
                // A free that failed (and reported it) under an injected
                // failure, here or when it was deferred, is never done: its
                // block stays live.
                let mut left = Vec::new();
                for &addr in &waiting {
                    if failed || self.may_leak.contains(&addr) {
                        self.deferred.remove(&addr);
                        self.waits.remove(&addr);
                        self.may_leak.insert(addr);
                    } else {
                        left.push(addr);
                    }
                }
                if left.is_empty() {
                    break;
                }
            }
            if start.elapsed() > Duration::from_secs(1) {
                panic!("deferred frees {waiting:x?} were not done after their captures ended (pending {}, live {:?}, capture {:?})", crate::graph::pending_graph_frees(), waiting.iter().map(|a| self.fake.state().live.get(a).copied()).collect::<Vec<_>>(), self.capture);
            }
            std::thread::yield_now();
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Deferred frees that should be done (no capture left that they wait
    /// for) but are not.
    fn deferred_waiting(&self) -> Vec<usize> {
        self.deferred
            .keys()
            .copied()
            .filter(|a| {
                self.waits.get(a).is_none_or(|(streams, graphs)| {
                    streams.iter().all(|&s| !self.capturing(s))
                        && graphs.iter().all(|g| !self.graphs.contains(g))
                })
            })
            .collect()
    }

    /// Exact checks after a step without an injected failure.
    fn check_exact(
        &mut self,
        op: Op,
        before: &HashMap<usize, (StreamCacheStats, Vec<bool>)>,
        oom: bool,
    ) -> std::result::Result<(), TestCaseError> {
        // Hits and misses: an allocation from a cache outside a capture hits
        // exactly when its class (or, under the footprint budget, a larger
        // one) had a block.
        if let Op::Alloc { via, stream, bytes } = op {
            let target = match via {
                Via::Stack => self.registered_cache(stream),
                _ => Some(self.handles[stream].clone()),
            };
            // (Out of memory on the way: the retry allocates again.)
            if let (Some(c), false, true, false) = (target, self.capturing(stream), self.allocated, oom) {
                if let Some((old, classes)) = before.get(&key(&c)) {
                    let new = c.stats();
                    let hits = new.hits - old.hits;
                    let misses = new.misses - old.misses;
                    let larger = new.reused_larger - old.reused_larger;
                    let bypassed = new.bypassed - old.bypassed;
                    if !self.cacheable(bytes) {
                        prop_assert_eq!((hits, misses, bypassed), (0, 0, 1));
                    } else {
                        let idx = class_index(bytes);
                        let had = classes.get(idx).copied().unwrap_or(false);
                        let detached = c.lock().detached;
                        count(&COVERAGE.hits, hits);
                        if detached {
                            prop_assert_eq!(
                                (hits, misses, larger),
                                (0, 0, 0),
                                "a detached cache handed out a block or counted a miss"
                            );
                        } else if had {
                            prop_assert_eq!(
                                (hits, misses, larger),
                                (1, 0, 0),
                                "a block of the class was cached"
                            );
                        } else if larger == 1 {
                            prop_assert!(hits == 1 && misses == 0 && !detached);
                            prop_assert!(
                                classes.iter().skip(idx + 1).take(8).any(|b| *b),
                                "a larger block that was not cached"
                            );
                        } else {
                            prop_assert_eq!((hits, misses), (0, u64::from(!detached)), "a miss");
                        }
                    }
                }
            }
        }
        // Live and captured bytes of every cache, and the adaptors.
        for c in &self.caches {
            let st = c.stats();
            let books = &self.books[&key(c)];
            let captured = self
                .captured
                .values()
                .filter(|o| **o == Owner::Cache(key(c)))
                .count();
            prop_assert_eq!(
                (st.live_bytes, st.captured_live),
                (books.live, captured),
                "the books of the cache of stream {:#x}",
                st.stream
            );
        }
        let st = self.stats.stats();
        let want = &self.stack;
        prop_assert_eq!(
            (
                st.allocations,
                st.failed_allocations,
                st.deallocations,
                st.bytes_current,
                st.outstanding
            ),
            (
                want.allocations,
                want.failed,
                want.deallocations,
                want.bytes_current,
                want.outstanding
            ),
            "the statistics adaptor"
        );
        Ok(())
    }

    /// The checks after every step.
    fn check_books(
        &self,
        bins_before: &HashMap<usize, HashSet<usize>>,
    ) -> std::result::Result<(), TestCaseError> {
        let fake = self.fake.state();
        prop_assert!(fake.errors.is_empty(), "the fake pool saw: {:?}", fake.errors);
        // No block live twice.
        let mut seen = HashSet::new();
        for h in &self.held {
            prop_assert!(seen.insert(h.addr), "{:#x} held twice", h.addr);
            prop_assert!(fake.live.contains_key(&h.addr), "{:#x} held but not live", h.addr);
        }
        let mut credit = 0;
        let mut cached = HashSet::new();
        for c in &self.caches {
            let bins = bins_of(c);
            for &(addr, size) in &bins {
                cached.insert(addr);
                prop_assert!(seen.insert(addr), "{addr:#x} cached and held, or cached twice");
                let live = fake.live.get(&addr).map(|b| b.0);
                prop_assert_eq!(live, Some(size), "a cached block of another size, or not live");
            }
            let st = c.stats();
            prop_assert_eq!(st.cached_blocks, bins.len());
            prop_assert_eq!(st.cached_bytes, bins.iter().map(|b| b.1).sum::<usize>());
            prop_assert!(
                st.cached_bytes <= st.credit_bytes && st.cached_bytes <= self.setup.config.per_stream_cap
            );
            credit += st.credit_bytes;
            // A detached cache takes no block: it keeps only its own whose
            // return failed, to try them again later (and never hands them
            // out: see the hits).
            if c.lock().detached {
                let had = bins_before.get(&key(c));
                prop_assert!(
                    bins.iter().all(|b| had.is_some_and(|h| h.contains(&b.0))),
                    "a detached cache took blocks: {:x?}",
                    bins
                );
            }
        }
        let leased = self.tier.stats().leased_bytes;
        prop_assert_eq!(credit, leased, "the credit of the caches and the tier's lease");
        prop_assert!(leased <= self.setup.config.total_cap);
        // The limit counts exactly what the pool holds.
        if let Some(l) = &self.limit {
            prop_assert_eq!(l.allocated_bytes(), fake.used, "the limiting adaptor");
        }
        // Graph memory never enters a cache.
        for &addr in &self.graph_blocks {
            prop_assert!(!cached.contains(&addr), "graph memory {addr:#x} was cached");
        }
        // Tracking and statistics agree.
        let st = self.stats.stats();
        prop_assert_eq!(st.outstanding, self.tracking.outstanding().len());
        prop_assert_eq!(st.bytes_current, self.tracking.outstanding_bytes());
        Ok(())
    }

    /// Ends every capture, frees everything (the failure plan, if any, also
    /// fails frees inside `Drop`), drops the tier; then every byte must be
    /// back but for the reported failures.
    fn teardown(mut self, failure: Option<Failure>) -> std::result::Result<(), TestCaseError> {
        for s in 0..STREAMS {
            if self.capturing(s) {
                let _ = self.end_capture(s);
            }
        }
        let _ = self.drain_deferred();
        prop_assert!(
            self.deferred.is_empty(),
            "deferred frees left: {:x?}",
            self.deferred
        );
        if let Some(f) = failure {
            testing::arm(self.domain, f.skip, f.fault, f.persistent);
        }
        let mut errors = 0u64;
        while let Some(held) = self.held.pop() {
            let addr = held.addr;
            let dropped = drop_errors_here();
            if self.free(held, false).is_err() || drop_errors_here() > dropped {
                errors += 1;
                self.may_leak.insert(addr);
            }
        }
        let drop_errors = drop_errors_here();
        let fake = self.fake.clone();
        let mut may_leak = std::mem::take(&mut self.may_leak);
        // Cached blocks whose return fails inside the drops below stay
        // live, each reported as a drop error.
        let cached: Vec<usize> = self.caches.iter().flat_map(|c| bins_of(c)).map(|b| b.0).collect();
        // The adaptors and the handles hold the tier: the last reference
        // goes with the world.
        drop(self);
        let (injected, _) = testing::disarm();
        errors += drop_errors_here() - drop_errors;
        // A deferred free whose attempt failed waits for the next safe
        // point: this is the last one.
        if let Err(e) = reclaim_graph_frees() {
            prop_assert!(typed(&e));
        }
        if errors > 0 {
            may_leak.extend(cached);
        }
        let fake = fake.state();
        count(&COVERAGE.leaked, fake.live.len() as u64);
        prop_assert!(fake.errors.is_empty(), "the fake pool saw: {:?}", fake.errors);
        for addr in fake.live.keys() {
            prop_assert!(
                fake.failed_frees.contains(addr) || may_leak.contains(addr),
                "{addr:#x} was never given back ({} live, {} refused frees)",
                fake.live.len(),
                fake.failed_frees.len()
            );
        }
        if injected == 0 {
            prop_assert_eq!(errors, 0, "teardown failed without an injected failure");
        } else if !fake.failed_frees.is_empty() {
            prop_assert!(errors > 0, "frees failed at teardown unreported");
        }
        Ok(())
    }
}

impl PartialEq for Via {
    fn eq(&self, other: &Via) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

fn run_case(setup: Setup, steps: Vec<Step>, last: Option<Failure>) -> std::result::Result<(), TestCaseError> {
    let mut world = World::new(setup);
    for step in &steps {
        world.run(step)?;
    }
    world.teardown(last)
}

fn cases() -> u32 {
    std::env::var("SOMALLOC_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(96)
}

fn seed() -> [u8; 32] {
    let n: u64 = std::env::var("SOMALLOC_PROPTEST_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5EED_0022);
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&n.to_le_bytes());
    seed
}

#[test]
fn random_sequences_with_failures_keep_every_block_once_and_every_byte() {
    // In a process of its own: its deferred frees go through the process's
    // queue, which every allocation through somalloc drains (on a GPU,
    // other tests of this binary allocate all the time), and its failure
    // injection and coverage counters are process-wide too.
    if !crate::testing::in_own_process(
        "cache::tests::props::random_sequences_with_failures_keep_every_block_once_and_every_byte",
    ) {
        return;
    }
    let config = Config {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: std::env::var("SOMALLOC_PROPTEST_SHRINK")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(400),
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed()));
    let failure = prop_oneof![
        2 => Just(None),
        1 => (0u32..4, fault(), any::<bool>())
            .prop_map(|(skip, fault, persistent)| Some(Failure { skip, fault, persistent })),
    ];
    let strategy = (setup(), prop::collection::vec(step(), 1..80), failure);
    let result = runner.run(&strategy, |(setup, steps, last)| run_case(setup, steps, last));
    if let Err(e) = result {
        panic!("{e}");
    }
    let c = &COVERAGE;
    let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
    eprintln!(
        "property run: {} cases, {} steps, {} injected failures, {} steps that reported an error, \
         {} deferred frees, {} cached hits checked, {} streams removed, {} captured allocations, \
         {} blocks leaked at teardown (each after a reported failure)",
        cases(),
        n(&c.steps),
        n(&c.injected),
        n(&c.reported),
        n(&c.deferred),
        n(&c.hits),
        n(&c.removed),
        n(&c.captured),
        n(&c.leaked)
    );
    // The run exercised what it claims to check.
    for (what, v) in [
        ("injected failures", &c.injected),
        ("reported errors", &c.reported),
        ("deferred frees", &c.deferred),
        ("hits", &c.hits),
        ("removed streams", &c.removed),
        ("captured allocations", &c.captured),
    ] {
        assert!(n(v) > 0, "the run had no {what}");
    }
}
