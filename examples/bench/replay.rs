//! Recorded memory histories in the benchmark.
//!
//! * `replay`: each trace (somalloc's format or RMM's logging CSV; by
//!   default the ones shipped in `benches/data`) replayed against the raw
//!   pool, somalloc's buffer on the pool, the cache tier and cudarc, with
//!   its threads (a thread of its own for each recorded thread), its
//!   streams (a stream of its own for each recorded stream), its sizes and
//!   its order. Each row gives the time per operation, the pool's reserved
//!   peak, the trace's live peak (the requested sizes, in the recorded
//!   order) and the fragmentation: reserved peak / live peak.
//! * `recording`: what recording costs: 64 KiB allocate + free pairs on the
//!   cache tier, without and with a `RecordingAdaptor` in front (its file
//!   written by the recorder's thread meanwhile), in the same run.
//!
//! Each thread replays its own events in their recorded order. A block
//! freed by another thread than the one that allocated it goes through a
//! slot of its own: the freeing thread waits until the allocating thread
//! has put the block there. Recorded times are causal (a free's time is
//! taken before the free, an allocation's after it), so every wait is for
//! an event recorded earlier and the waits cannot form a cycle. Frees of
//! addresses the trace never allocated (allocated before the recording
//! began, or dropped) are left out, failed allocations are not retried,
//! and blocks still live at the end of the trace are freed at the end of
//! their thread. Every block is freed on the stream it was allocated on.

use std::collections::HashMap;
use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::time::Instant;

use somalloc::adaptors::RecordingAdaptor;
use somalloc::testkit::{raw, TestKernels};
use somalloc::trace::{Action, RecordOptions, Recorder, Trace};
use somalloc::{DeviceBuffer, Error, MemPool, MemoryResource, Stream, StreamCache};

use crate::alloc::{new_tier, CacheBlock, CudarcAlloc, Kind, StreamAlloc};
use crate::results::{self, Check, Row, CACHE};
use crate::workloads::{measure, pair, Ctx, Sample, Who, KIB};

/// The allocators a trace is replayed on.
pub const REPLAY_KINDS: [Kind; 4] = [Kind::Raw, Kind::Somalloc, Kind::Cache, Kind::Cudarc];
/// The recording workload's allocator with the recorder in front.
pub const CACHE_REC: &str = "cache+rec";

fn kinds() -> impl Iterator<Item = Kind> {
    REPLAY_KINDS.into_iter().filter(|k| !k.peer() || k.runs("pair"))
}

// ---------------------------------------------------------------------------
// The plan: a trace turned into each thread's operations

/// Where a block waits between its allocation and its free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// In the thread's own slots (allocated and freed by one thread).
    Local(u32),
    /// In a shared slot (freed by another thread).
    Shared(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Alloc { bytes: usize, stream: u32, slot: Slot },
    Free { slot: Slot },
}

/// A trace ready to replay.
#[derive(Debug)]
pub struct Plan {
    /// The trace's file name.
    pub name: String,
    /// Each replay thread's operations, in order.
    pub threads: Vec<Vec<Op>>,
    /// Local slots each thread needs.
    pub locals: Vec<u32>,
    /// Shared slots.
    pub shared: u32,
    /// Streams to make.
    pub streams: u32,
    /// Allocations and frees replayed.
    pub ops: u64,
    /// The most bytes live at once in the recorded order (requested sizes).
    pub live_peak: u64,
    /// Frees of addresses not live in the trace, and failed allocations:
    /// left out.
    pub left_out: u64,
    /// The recorded run's pool reserved peak, when the trace says it.
    pub recorded_reserved: Option<u64>,
    /// Devices the trace names (all are replayed on the bench's device).
    pub devices: usize,
}

struct Draft {
    thread: usize,
    stream: u32,
    bytes: u64,
    /// The thread and position of its free, if any.
    free: Option<(usize, usize)>,
}

impl Plan {
    pub fn of(name: &str, t: &Trace) -> Plan {
        #[derive(Clone, Copy)]
        enum D {
            Alloc(usize),
            Free(usize),
        }
        let mut threads: HashMap<u32, usize> = HashMap::new();
        let mut streams: HashMap<Option<u32>, u32> = HashMap::new();
        let mut devices: HashMap<u32, ()> = HashMap::new();
        let mut live: HashMap<(u32, u64), usize> = HashMap::new();
        let mut drafts: Vec<Draft> = Vec::new();
        let mut ops: Vec<Vec<D>> = Vec::new();
        let (mut now, mut peak, mut left_out) = (0u64, 0u64, 0u64);
        for e in &t.events {
            if !matches!(e.action, Action::Allocate | Action::Free | Action::FailedAllocate) {
                continue;
            }
            if e.action == Action::FailedAllocate {
                left_out += 1;
                continue;
            }
            let next = threads.len();
            let th = *threads.entry(e.thread).or_insert(next);
            if th == ops.len() {
                ops.push(Vec::new());
            }
            devices.insert(e.device, ());
            match e.action {
                Action::Allocate => {
                    let next = streams.len() as u32;
                    let stream = *streams.entry(e.stream).or_insert(next);
                    if let Some(old) = live.insert((e.device, e.addr), drafts.len()) {
                        // Its free was not recorded (dropped): it ends here.
                        now -= drafts[old].bytes;
                        drafts[old].free = Some((th, ops[th].len()));
                        ops[th].push(D::Free(old));
                    }
                    now += e.bytes;
                    peak = peak.max(now);
                    ops[th].push(D::Alloc(drafts.len()));
                    drafts.push(Draft {
                        thread: th,
                        stream,
                        bytes: e.bytes,
                        free: None,
                    });
                }
                _ => match live.remove(&(e.device, e.addr)) {
                    Some(id) => {
                        now -= drafts[id].bytes;
                        drafts[id].free = Some((th, ops[th].len()));
                        ops[th].push(D::Free(id));
                    }
                    None => left_out += 1,
                },
            }
        }
        // Blocks live at the end: freed at the end of their thread.
        let mut at_end: Vec<usize> = live.into_values().collect();
        at_end.sort_unstable();
        for id in at_end {
            let th = drafts[id].thread;
            drafts[id].free = Some((th, ops[th].len()));
            ops[th].push(D::Free(id));
        }
        // Slots: shared for blocks another thread frees, else the thread's
        // own, reused as they are freed.
        let mut slot: Vec<Option<Slot>> = vec![None; drafts.len()];
        let mut shared = 0u32;
        let mut locals = vec![0u32; ops.len()];
        for (id, d) in drafts.iter().enumerate() {
            if d.free.is_some_and(|(th, _)| th != d.thread) {
                slot[id] = Some(Slot::Shared(shared));
                shared += 1;
            }
        }
        let mut plan_threads = Vec::with_capacity(ops.len());
        let mut n_ops = 0u64;
        for (th, list) in ops.iter().enumerate() {
            let mut spare: Vec<u32> = Vec::new();
            let mut out = Vec::with_capacity(list.len());
            for d in list {
                match *d {
                    D::Alloc(id) => {
                        let s = *slot[id].get_or_insert_with(|| {
                            Slot::Local(spare.pop().unwrap_or_else(|| {
                                locals[th] += 1;
                                locals[th] - 1
                            }))
                        });
                        out.push(Op::Alloc {
                            bytes: drafts[id].bytes as usize,
                            stream: drafts[id].stream,
                            slot: s,
                        });
                    }
                    D::Free(id) => {
                        // Every free's allocation came first (in time, and
                        // a local one in this thread's order).
                        let s = slot[id].expect("a free after its allocation");
                        if let Slot::Local(i) = s {
                            spare.push(i);
                        }
                        out.push(Op::Free { slot: s });
                    }
                }
            }
            n_ops += out.len() as u64;
            plan_threads.push(out);
        }
        Plan {
            name: name.to_string(),
            threads: plan_threads,
            locals,
            shared,
            streams: streams.len() as u32,
            ops: n_ops,
            live_peak: peak,
            left_out,
            recorded_reserved: t.meta("pool_reserved_peak").and_then(|v| v.parse().ok()),
            devices: devices.len(),
        }
    }

    /// The row's parameter: the file and its size.
    pub fn param(&self) -> String {
        format!(
            "{} ({} ops, {} thr, {} str)",
            self.name,
            self.ops,
            self.threads.len(),
            self.streams
        )
    }
}

// ---------------------------------------------------------------------------
// Which traces

static PLANS: OnceLock<Vec<Plan>> = OnceLock::new();

/// The traces shipped with the benchmark: `benches/data` from the working
/// directory, beside the binary (`../traces`, the GPU bundle's layout), or
/// in the source tree.
pub fn default_traces() -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from("benches/data")];
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
    {
        dirs.push(dir.join("../traces"));
    }
    dirs.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/data"));
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "trace" || x == "csv"))
            .collect();
        if !found.is_empty() {
            found.sort();
            return found;
        }
    }
    Vec::new()
}

/// Reads the traces (`given`, or the shipped ones) into plans, once; the
/// number of plans.
pub fn prepare(given: &[PathBuf]) -> somalloc::Result<usize> {
    if let Some(p) = PLANS.get() {
        return Ok(p.len());
    }
    let files = if given.is_empty() {
        default_traces()
    } else {
        given.to_vec()
    };
    let mut plans = Vec::new();
    for f in &files {
        let t = Trace::read(f)?;
        let name = f
            .file_name()
            .map_or_else(|| f.display().to_string(), |n| n.to_string_lossy().into_owned());
        plans.push(Plan::of(&name, &t));
    }
    if plans.is_empty() {
        println!(
            "replay: no traces given (--trace) and none in benches/data: nothing to replay \
             (record some with ci/record-traces.sh on a GPU machine)"
        );
    }
    let n = plans.len();
    let _ = PLANS.set(plans);
    Ok(n)
}

/// Progress units of the replay workload.
pub fn replay_units() -> u64 {
    PLANS.get().map_or(0, |p| p.len() as u64) * kinds().count() as u64
}

// ---------------------------------------------------------------------------
// The allocators, on many streams

/// An allocator on every stream of a plan.
pub trait Replayer: Sync {
    type Block: Send;
    fn alloc(&self, stream: u32, bytes: usize) -> somalloc::Result<Self::Block>;
    fn free(&self, block: Self::Block) -> somalloc::Result<()>;
    fn streams(&self) -> Vec<&Stream>;
}

/// A raw block: the address (a plain number) and its stream.
pub struct RawBlock(usize, u32);

pub struct RawReplay {
    pool: MemPool,
    streams: Vec<Stream>,
}

impl Replayer for RawReplay {
    type Block = RawBlock;
    fn alloc(&self, stream: u32, bytes: usize) -> somalloc::Result<RawBlock> {
        raw::malloc_from_pool_async(bytes, &self.pool, &self.streams[stream as usize])
            .map(|p| RawBlock(p as usize, stream))
    }
    fn free(&self, b: RawBlock) -> somalloc::Result<()> {
        // SAFETY: from `alloc` on that stream, freed once, on it; nothing
        // used the block.
        unsafe { raw::free_async(b.0 as *mut c_void, &self.streams[b.1 as usize]) }
    }
    fn streams(&self) -> Vec<&Stream> {
        self.streams.iter().collect()
    }
}

pub struct SomallocReplay {
    pool: MemPool,
    streams: Vec<Stream>,
}

impl Replayer for SomallocReplay {
    type Block = DeviceBuffer<u8>;
    fn alloc(&self, stream: u32, bytes: usize) -> somalloc::Result<DeviceBuffer<u8>> {
        DeviceBuffer::new_in(bytes, &self.pool, &self.streams[stream as usize])
    }
    fn free(&self, b: DeviceBuffer<u8>) -> somalloc::Result<()> {
        b.release()
    }
    fn streams(&self) -> Vec<&Stream> {
        self.streams.iter().collect()
    }
}

/// A cache block: address, requested size, stream.
pub struct CachedBlock(usize, usize, u32);

pub struct CacheReplay {
    caches: Vec<Arc<StreamCache>>,
    streams: Vec<Stream>,
}

impl Replayer for CacheReplay {
    type Block = CachedBlock;
    fn alloc(&self, stream: u32, bytes: usize) -> somalloc::Result<CachedBlock> {
        let s = stream as usize;
        self.caches[s]
            .allocate(bytes, &self.streams[s])
            .map(|p| CachedBlock(p as usize, bytes, stream))
    }
    fn free(&self, b: CachedBlock) -> somalloc::Result<()> {
        let s = b.2 as usize;
        // SAFETY: from `allocate` of this stream's cache with these bytes,
        // freed once, on that stream; nothing used the block.
        unsafe { self.caches[s].deallocate(b.0 as *mut c_void, b.1, &self.streams[s]) }
    }
    fn streams(&self) -> Vec<&Stream> {
        self.streams.iter().collect()
    }
}

pub struct CudarcReplay {
    allocs: Vec<CudarcAlloc>,
}

impl Replayer for CudarcReplay {
    type Block = (<CudarcAlloc as StreamAlloc>::Block, u32);
    fn alloc(&self, stream: u32, bytes: usize) -> somalloc::Result<Self::Block> {
        self.allocs[stream as usize].alloc(bytes).map(|b| (b, stream))
    }
    fn free(&self, b: Self::Block) -> somalloc::Result<()> {
        self.allocs[b.1 as usize].free(b.0)
    }
    fn streams(&self) -> Vec<&Stream> {
        self.allocs.iter().map(|a| a.stream()).collect()
    }
}

// ---------------------------------------------------------------------------
// Replaying

/// A shared slot's state.
enum Held<B> {
    Empty,
    Block(B),
    /// The allocation failed (out of memory): its free is skipped.
    Failed,
}

/// What one replay measured.
struct Replayed {
    elapsed: std::time::Duration,
    failed: u64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Replays one thread's operations; the allocations that ran out of
/// memory, or `None` when another thread failed first.
fn replay_thread<R: Replayer>(
    r: &R,
    ops: &[Op],
    locals: usize,
    shared: &[Mutex<Held<R::Block>>],
    abort: &AtomicBool,
) -> somalloc::Result<Option<u64>> {
    let mut mine: Vec<Option<R::Block>> = (0..locals).map(|_| None).collect();
    let mut failed = 0;
    for op in ops {
        match *op {
            Op::Alloc { bytes, stream, slot } => {
                let got = match r.alloc(stream, bytes) {
                    Ok(b) => Some(b),
                    Err(Error::OutOfMemory { .. }) => {
                        failed += 1;
                        None
                    }
                    Err(e) => return Err(e),
                };
                match slot {
                    Slot::Local(i) => mine[i as usize] = got,
                    Slot::Shared(i) => {
                        *lock(&shared[i as usize]) = got.map_or(Held::Failed, Held::Block);
                    }
                }
            }
            Op::Free { slot } => {
                let block = match slot {
                    Slot::Local(i) => mine[i as usize].take(),
                    Slot::Shared(i) => loop {
                        match std::mem::replace(&mut *lock(&shared[i as usize]), Held::Empty) {
                            Held::Block(b) => break Some(b),
                            Held::Failed => break None,
                            Held::Empty => {
                                if abort.load(Ordering::Relaxed) {
                                    return Ok(None);
                                }
                                std::thread::yield_now();
                            }
                        }
                    },
                };
                if let Some(b) = block {
                    r.free(b)?;
                }
            }
        }
    }
    Ok(Some(failed))
}

/// Replays `plan` on `r` from a common start, each thread first running
/// `setup` (binding the device); the time until every thread is done and
/// every stream has finished.
fn replay<R: Replayer>(
    plan: &Plan,
    r: &R,
    setup: &(dyn Fn() -> somalloc::Result<()> + Sync),
) -> somalloc::Result<Replayed> {
    let shared: Vec<Mutex<Held<R::Block>>> = (0..plan.shared).map(|_| Mutex::new(Held::Empty)).collect();
    let abort = AtomicBool::new(false);
    let start = Barrier::new(plan.threads.len() + 1);
    let (t0, results) = std::thread::scope(|s| {
        let handles: Vec<_> = plan
            .threads
            .iter()
            .zip(&plan.locals)
            .map(|(ops, &locals)| {
                let (shared, abort, start) = (&shared, &abort, &start);
                s.spawn(move || {
                    let ready = setup();
                    start.wait();
                    let r = ready.and_then(|()| replay_thread(r, ops, locals as usize, shared, abort));
                    if !matches!(r, Ok(Some(_))) {
                        abort.store(true, Ordering::Relaxed);
                    }
                    r
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("a replay thread panicked"))
            .collect();
        (t0, results)
    });
    // The first error is the cause; threads that stopped for it say `None`.
    let mut failed = 0;
    for r in results {
        failed += r?.unwrap_or(0);
    }
    for s in r.streams() {
        s.synchronize()?;
    }
    Ok(Replayed {
        elapsed: t0.elapsed(),
        failed,
    })
}

/// One replay of `plan` on `kind`, from a trimmed pool with its high-water
/// marks reset.
fn replay_on(ctx: &Ctx, plan: &Plan, kind: Kind) -> somalloc::Result<Sample> {
    let make_streams =
        || -> somalloc::Result<Vec<Stream>> { (0..plan.streams).map(|_| Stream::new(&ctx.dev)).collect() };
    ctx.stream.synchronize()?;
    let dev = ctx.dev;
    let bind = move || dev.bind_to_thread();
    let run = |measure: &dyn Fn() -> somalloc::Result<Replayed>| -> somalloc::Result<Replayed> {
        ctx.pool.trim_to(0)?;
        ctx.pool.reset_peaks()?;
        measure()
    };
    let (done, tier_extra) = match kind {
        Kind::Raw => {
            let r = RawReplay {
                pool: ctx.pool.clone(),
                streams: make_streams()?,
            };
            (run(&|| replay(plan, &r, &bind))?, None)
        }
        Kind::Somalloc => {
            let r = SomallocReplay {
                pool: ctx.pool.clone(),
                streams: make_streams()?,
            };
            (run(&|| replay(plan, &r, &bind))?, None)
        }
        Kind::Cache | Kind::CacheBuf => {
            let tier = new_tier(&ctx.pool)?;
            let streams = make_streams()?;
            let caches = streams
                .iter()
                .map(|s| tier.for_stream(s))
                .collect::<somalloc::Result<_>>()?;
            let r = CacheReplay { caches, streams };
            let done = run(&|| replay(plan, &r, &bind))?;
            let t = tier.stats().total;
            (done, Some(crate::alloc::cache_extra(&t)))
        }
        Kind::Cudarc | Kind::CudarcNoEvents => {
            let allocs = (0..plan.streams)
                .map(|_| CudarcAlloc::new(&ctx.stream, kind == Kind::Cudarc))
                .collect::<somalloc::Result<_>>()?;
            let r = CudarcReplay { allocs };
            (run(&|| replay(plan, &r, &bind))?, None)
        }
        other => unreachable!("{} is not a replay allocator (REPLAY_KINDS)", other.name()),
    };
    let stats = ctx.pool.stats()?;
    let reserved = stats.reserved_peak as f64;
    let mut s = Sample::timed(done.elapsed, plan.ops.max(1));
    s.extra.push(("peak_reserved_bytes", reserved));
    s.extra.push(("live_peak_bytes", plan.live_peak as f64));
    s.extra
        .push(("fragmentation", reserved / plan.live_peak.max(1) as f64));
    s.extra.push(("failed_allocations", done.failed as f64));
    if let Some(r) = plan.recorded_reserved {
        s.extra.push(("reserved_vs_recorded", reserved / r.max(1) as f64));
    }
    if let Some(t) = tier_extra {
        s.extra.extend(t);
    }
    Ok(s)
}

/// The replay workload: every prepared trace on every replay allocator.
pub fn run(ctx: &Ctx, rows: &mut Vec<Row>) -> somalloc::Result<()> {
    let Some(plans) = PLANS.get() else { return Ok(()) };
    if plans.is_empty() {
        return Ok(());
    }
    let params: Vec<(String, usize)> = plans.iter().enumerate().map(|(i, p)| (p.param(), i)).collect();
    let who: Vec<Who> = kinds().map(Who::Alloc).collect();
    let notes: Vec<String> = plans
        .iter()
        .map(|p| {
            let mut n = Vec::new();
            if p.left_out > 0 {
                n.push(format!(
                    "{} frees of unknown addresses and failed allocations left out",
                    p.left_out
                ));
            }
            if p.devices > 1 {
                n.push(format!("{} devices in the trace, replayed on one", p.devices));
            }
            n.join("; ")
        })
        .collect();
    let mut r = measure(
        ctx,
        "replay",
        &params,
        &who,
        |_| None,
        |c, i, w| {
            let Who::Alloc(k) = w else {
                unreachable!("only allocators replay")
            };
            replay_on(c, &plans[i], k)
        },
    )?;
    for row in &mut r {
        if let Some((_, i)) = params.iter().find(|(p, _)| *p == row.param) {
            if !notes[*i].is_empty() {
                row.note = Some(notes[*i].clone());
            }
            if let Some(rec) = plans[*i].recorded_reserved {
                row.extra.insert("recorded_reserved_bytes".into(), rec as f64);
            }
        }
    }
    rows.extend(r);
    Ok(())
}

// ---------------------------------------------------------------------------
// The cost of recording

/// The cache tier behind a `RecordingAdaptor`: `allocate` / `deallocate`
/// on the adaptor (a static call; the adaptor calls the stream's cache
/// through the resource trait).
pub struct RecAlloc {
    rec: RecordingAdaptor,
    stream: Stream,
}

impl StreamAlloc for RecAlloc {
    type Block = CacheBlock;
    #[inline(always)]
    fn alloc(&self, bytes: usize) -> somalloc::Result<CacheBlock> {
        let ptr = self.rec.allocate(bytes, &self.stream)?;
        Ok(CacheBlock { ptr, bytes })
    }
    #[inline(always)]
    fn free(&self, block: CacheBlock) -> somalloc::Result<()> {
        // SAFETY: from `allocate` of this adaptor with these bytes, on this
        // stream, freed once; nothing used the block.
        unsafe { self.rec.deallocate(block.ptr, block.bytes, &self.stream) }
    }
    fn stream(&self) -> &Stream {
        &self.stream
    }
    fn process(&self, k: &TestKernels, block: &CacheBlock, _: usize) -> somalloc::Result<()> {
        // SAFETY: a live block of `block.bytes` usable on this stream,
        // freed by its caller on this stream after the kernel.
        let range = unsafe { somalloc::testkit::RawRange::new(block.ptr, block.bytes, &self.stream) };
        k.process(&range, &self.stream)
    }
}

/// Where the recording workload's trace goes (removed afterwards).
fn recording_file() -> PathBuf {
    std::env::temp_dir().join(format!("somalloc-bench-recording-{}.trace", std::process::id()))
}

/// One measurement: `n` 64 KiB pairs on a fresh tier, recorded or not.
fn recording_sample(ctx: &Ctx, recorded: bool) -> somalloc::Result<Sample> {
    const BYTES: usize = 64 * KIB;
    let n = ctx.plan.pair_iters;
    let tier = new_tier(&ctx.pool)?;
    let cache = tier.for_stream(&ctx.stream)?;
    if !recorded {
        let a = crate::alloc::CacheAlloc::new(&tier, &ctx.stream)?;
        return pair(&a, BYTES, n);
    }
    // Room for every event of the measurement, so that none is dropped
    // (a dropped event would cost less than a recorded one).
    let events = (2 * n as usize + 1024).next_power_of_two();
    let options = RecordOptions::default().buffer_events(events).markers(false);
    let recorder = Recorder::to_file(recording_file(), options)?;
    let a = RecAlloc {
        rec: RecordingAdaptor::new(cache, Arc::clone(&recorder)),
        stream: ctx.stream.clone(),
    };
    let mut s = pair(&a, BYTES, n)?;
    drop(a);
    let stats = recorder.finish()?;
    let _ = std::fs::remove_file(recording_file());
    s.extra.push(("events_written", stats.events as f64));
    s.extra.push(("events_dropped", stats.dropped as f64));
    Ok(s)
}

/// The recording workload: `cache` and `cache+rec` rows, each repeat in
/// alternating order, the median of each.
pub fn recording(ctx: &Ctx, rows: &mut Vec<Row>) -> somalloc::Result<()> {
    let param = "64 KiB pairs".to_string();
    let names = [CACHE, CACHE_REC];
    let mut samples: [Vec<Sample>; 2] = [Vec::new(), Vec::new()];
    for rep in 0..ctx.plan.repeats {
        let order: [usize; 2] = if rep % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            ctx.pb
                .set_message(format!("recording {param} {} (repeat {})", names[i], rep + 1));
            samples[i].push(recording_sample(ctx, i == 1)?);
            ctx.pb.inc(1);
        }
    }
    let mut out: Vec<Row> = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        let ns: Vec<f64> = s.iter().map(|x| x.ns_per_op).collect();
        let mut extra: std::collections::BTreeMap<String, Vec<f64>> = std::collections::BTreeMap::new();
        for x in s {
            for (k, v) in &x.extra {
                extra.entry(k.to_string()).or_default().push(*v);
            }
        }
        out.push(Row {
            workload: "recording".into(),
            param: param.clone(),
            allocator: names[i].into(),
            ns_per_op: results::median(&ns),
            ratio_to_raw: None,
            ops: s.last().map_or(0, |x| x.ops),
            samples: ns,
            extra: extra.into_iter().map(|(k, v)| (k, results::median(&v))).collect(),
            note: None,
        });
    }
    // Two events (an allocation and a free) per pair.
    let per_event = (out[1].ns_per_op - out[0].ns_per_op) / 2.0;
    out[1].extra.insert("ns_per_event_over_cache".into(), per_event);
    rows.extend(out);
    Ok(())
}

/// The recording target: at most 50 ns per event over the cache tier.
pub fn checks(rows: &[Row]) -> Vec<Check> {
    rows.iter()
        .filter(|r| r.workload == "recording" && r.allocator == CACHE_REC)
        .filter_map(|r| r.extra.get("ns_per_event_over_cache").map(|v| (r, *v)))
        .map(|(r, v)| {
            Check::at_most(
                format!("recording {}: ns per event over the cache tier", r.param),
                v,
                50.0,
                " ns",
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Thread 1 allocates a (stream 0x10) that thread 2 frees; thread 1
    /// allocates and frees b twice (its slot reused); thread 2 allocates c
    /// and never frees it; a free of an unknown address and a failed
    /// allocation are left out; d's free was dropped and its address
    /// allocated again.
    const CSV: &str = "Thread,Time,Action,Pointer,Size,Stream
1,00:00:00.000001,allocate,0x1000,100,0x10
1,00:00:00.000002,allocate,0x2000,50,0x10
1,00:00:00.000003,free,0x2000,50,0x10
1,00:00:00.000004,allocate,0x2000,60,0x10
2,00:00:00.000005,free,0x1000,100,0x20
1,00:00:00.000006,free,0x2000,60,0x10
2,00:00:00.000007,allocate,0x3000,300,0x20
2,00:00:00.000008,free,0x9999,1,0x20
2,00:00:00.000009,allocate failure,0x0,99999,0x20
1,00:00:00.000010,allocate,0x4000,40,0x10
1,00:00:00.000011,allocate,0x4000,40,0x10
1,00:00:00.000012,free,0x4000,40,0x10
";

    fn plan() -> Plan {
        Plan::of("t.csv", &Trace::parse(CSV.as_bytes()).unwrap())
    }

    #[test]
    fn a_plan_keeps_threads_streams_order_and_slots() {
        let p = plan();
        use Op::*;
        use Slot::*;
        assert_eq!(
            p.threads[0],
            [
                Alloc {
                    bytes: 100,
                    stream: 0,
                    slot: Shared(0)
                },
                Alloc {
                    bytes: 50,
                    stream: 0,
                    slot: Local(0)
                },
                Free { slot: Local(0) },
                Alloc {
                    bytes: 60,
                    stream: 0,
                    slot: Local(0)
                },
                Free { slot: Local(0) },
                Alloc {
                    bytes: 40,
                    stream: 0,
                    slot: Local(0)
                },
                Free { slot: Local(0) },
                Alloc {
                    bytes: 40,
                    stream: 0,
                    slot: Local(0)
                },
                Free { slot: Local(0) },
            ]
        );
        assert_eq!(
            p.threads[1],
            [
                Free { slot: Shared(0) },
                Alloc {
                    bytes: 300,
                    stream: 1,
                    slot: Local(0)
                },
                Free { slot: Local(0) },
            ]
        );
        assert_eq!((p.shared, p.locals.clone(), p.streams), (1, vec![1, 1], 2));
        assert_eq!((p.ops, p.left_out, p.live_peak, p.devices), (12, 2, 340, 1));
        assert!(p.param().starts_with("t.csv (12 ops, 2 thr, 2 str)"));
    }

    /// A host allocator that checks every free: made-up addresses, a set of
    /// the live ones.
    struct Checked {
        next: AtomicUsize,
        live: Mutex<HashSet<usize>>,
        errors: Mutex<Vec<String>>,
        fail_above: usize,
    }

    impl Replayer for Checked {
        type Block = (usize, usize);
        fn alloc(&self, _: u32, bytes: usize) -> somalloc::Result<(usize, usize)> {
            if bytes > self.fail_above {
                return Err(Error::OutOfMemory {
                    requested: bytes,
                    stats: None,
                    arena: None,
                });
            }
            let a = self.next.fetch_add(1, Ordering::Relaxed);
            lock(&self.live).insert(a);
            Ok((a, bytes))
        }
        fn free(&self, b: (usize, usize)) -> somalloc::Result<()> {
            if !lock(&self.live).remove(&b.0) {
                lock(&self.errors).push(format!("free of {} not live", b.0));
            }
            Ok(())
        }
        fn streams(&self) -> Vec<&Stream> {
            Vec::new()
        }
    }

    #[test]
    fn a_replay_frees_every_block_once_across_threads() {
        // Many cross-thread frees: thread t allocates, thread t+1 frees.
        let mut csv = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
        let mut t = 0u64;
        for i in 0..2000u64 {
            let (a, f) = (i % 4, (i + 1) % 4);
            t += 1;
            csv += &format!(
                "{a},00:00:{:02}.{:06},allocate,{:#x},{},0x{a}\n",
                t / 1_000_000,
                t % 1_000_000,
                0x1000 + i * 0x100,
                256 + i
            );
            t += 1;
            csv += &format!(
                "{f},00:00:{:02}.{:06},free,{:#x},{},0x{a}\n",
                t / 1_000_000,
                t % 1_000_000,
                0x1000 + i * 0x100,
                256 + i
            );
        }
        let p = Plan::of("x", &Trace::parse(csv.as_bytes()).unwrap());
        assert_eq!((p.threads.len(), p.shared), (4, 2000));
        let r = Checked {
            next: AtomicUsize::new(1),
            live: Mutex::new(HashSet::new()),
            errors: Mutex::new(Vec::new()),
            fail_above: usize::MAX,
        };
        let done = replay(&p, &r, &|| Ok(())).unwrap();
        assert_eq!(done.failed, 0);
        assert!(lock(&r.live).is_empty(), "every block freed");
        assert!(lock(&r.errors).is_empty(), "{:?}", lock(&r.errors));
        assert_eq!(r.next.load(Ordering::Relaxed), 2001);
        // Out of memory: counted, its free skipped, also across threads.
        let r = Checked {
            next: AtomicUsize::new(1),
            live: Mutex::new(HashSet::new()),
            errors: Mutex::new(Vec::new()),
            fail_above: 1000,
        };
        let done = replay(&p, &r, &|| Ok(())).unwrap();
        assert_eq!(done.failed, 1255); // sizes 256 + i above 1000: i from 745
        assert!(lock(&r.live).is_empty() && lock(&r.errors).is_empty());
        // A thread that cannot start stops the others (none waits forever).
        let err = replay(&plan(), &r, &|| {
            Err(Error::OutOfMemory {
                requested: 7,
                stats: None,
                arena: None,
            })
        });
        assert!(matches!(err, Err(Error::OutOfMemory { requested: 7, .. })));
    }
}
