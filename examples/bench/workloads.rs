//! The workloads of the benchmark (see the project's workload table), the
//! measurement loop that runs each on every allocator, and the labels of
//! their parameters.

use std::collections::BTreeMap;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use somalloc::testkit::{SyncBuffer, TestKernels};
use somalloc::{Device, Event, MemPool, Stream};

use crate::alloc::{cache_extra, with_alloc, with_cache_stats, Kind, StreamAlloc, THRESHOLD_NOTE};
use crate::cli::Plan;
use crate::results::{self, Peaks, Row, Timeline, TimelinePoint, SYNC};

pub const KIB: usize = 1 << 10;
pub const MIB: usize = 1 << 20;
/// The pair workload's sizes (and the synchronous one's).
pub const PAIR_SIZES: [usize; 4] = [256, 64 * KIB, MIB, 64 * MIB];
/// The threads workload's thread counts.
pub const THREADS: [usize; 3] = [1, 4, 8];
/// The seeds' pipeline: 100 iterations over 1<<20 floats (4 MiB).
pub const PIPELINE_ITERS: usize = 100;
pub const PIPELINE_FLOATS: usize = 1 << 20;
/// Churn: at most this many live buffers.
pub const CHURN_MAX_LIVE: usize = 1000;
/// Every workload, in the order they run.
pub const WORKLOADS: [&str; 11] = [
    "seed_pipeline",
    "graph_pipeline",
    "pair",
    "churn",
    "threads",
    "threshold",
    "synchronous",
    "host_pair",
    "h2d",
    "replay",
    "recording",
];

// ---------------------------------------------------------------------------
// The run

pub struct Ctx {
    pub dev: Device,
    pub pool: MemPool,
    pub stream: Stream,
    pub kernels: TestKernels,
    pub plan: Plan,
    pub seed: u64,
    pub pb: ProgressBar,
}

/// One repeat's figure and the row's other numbers.
pub struct Sample {
    pub ns_per_op: f64,
    pub ops: u64,
    pub extra: Vec<(&'static str, f64)>,
}

impl Sample {
    pub fn timed(elapsed: Duration, ops: u64) -> Sample {
        Sample {
            ns_per_op: elapsed.as_nanos() as f64 / ops as f64,
            ops,
            extra: Vec::new(),
        }
    }
    fn with(mut self, key: &'static str, v: f64) -> Sample {
        self.extra.push((key, v));
        self
    }
}

/// Who runs a measurement: an allocator under test, or the synchronous
/// baseline (`SyncBuffer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    Alloc(Kind),
    Sync,
}

impl Who {
    fn name(self) -> &'static str {
        match self {
            Who::Alloc(k) => k.name(),
            Who::Sync => SYNC,
        }
    }
}

/// Runs `f` for every parameter and allocator, `plan.repeats` times,
/// alternating the allocators' order between repeats, and reduces each
/// (parameter, allocator) to a row: the median of its repeats.
pub fn measure<P: Copy>(
    ctx: &Ctx,
    workload: &str,
    params: &[(String, P)],
    who: &[Who],
    note: impl Fn(Who) -> Option<&'static str>,
    mut f: impl FnMut(&Ctx, P, Who) -> somalloc::Result<Sample>,
) -> somalloc::Result<Vec<Row>> {
    let mut samples: Vec<Vec<Vec<Sample>>> = (0..params.len())
        .map(|_| (0..who.len()).map(|_| Vec::new()).collect())
        .collect();
    for rep in 0..ctx.plan.repeats {
        for (pi, (label, p)) in params.iter().enumerate() {
            let mut order: Vec<usize> = (0..who.len()).collect();
            if rep % 2 == 1 {
                order.reverse();
            }
            for wi in order {
                ctx.pb.set_message(format!(
                    "{workload} {label} {} (repeat {})",
                    who[wi].name(),
                    rep + 1
                ));
                samples[pi][wi].push(f(ctx, *p, who[wi])?);
                ctx.pb.inc(1);
            }
        }
    }
    let mut rows = Vec::new();
    for (pi, (label, _)) in params.iter().enumerate() {
        for (wi, w) in who.iter().enumerate() {
            let s = &samples[pi][wi];
            let ns: Vec<f64> = s.iter().map(|x| x.ns_per_op).collect();
            let mut extra: BTreeMap<String, Vec<f64>> = BTreeMap::new();
            for x in s {
                for (k, v) in &x.extra {
                    extra.entry(k.to_string()).or_default().push(*v);
                }
            }
            rows.push(Row {
                workload: workload.into(),
                param: label.clone(),
                allocator: w.name().into(),
                ns_per_op: results::median(&ns),
                ratio_to_raw: None,
                ops: s.last().map_or(0, |x| x.ops),
                samples: ns,
                extra: extra.into_iter().map(|(k, v)| (k, results::median(&v))).collect(),
                note: note(*w).map(String::from),
            });
        }
    }
    Ok(rows)
}

pub fn size_param(bytes: usize) -> String {
    results::fmt_bytes(bytes as f64)
}
pub fn pipeline_param() -> String {
    format!("{PIPELINE_ITERS} x 4 MiB")
}
pub fn churn_param() -> String {
    format!("<={CHURN_MAX_LIVE} live, 2^U(8,22) B")
}
pub fn threads_param(t: usize) -> String {
    format!("{t} thread{}, 64 KiB", if t == 1 { "" } else { "s" })
}
pub fn threshold_param(th: u64) -> String {
    if th == u64::MAX {
        "u64::MAX, 64 MiB".into()
    } else {
        format!("{th}, 64 MiB")
    }
}

// ---------------------------------------------------------------------------
// Workloads

/// `n` untimed pairs of `bytes`, then a sync: the pool (or the cache) holds
/// the size.
pub fn warm<A: StreamAlloc>(a: &A, bytes: usize, n: usize) -> somalloc::Result<()> {
    for _ in 0..n {
        let b = a.alloc(bytes)?;
        a.free(b)?;
    }
    a.stream().synchronize()
}

/// `n` allocate + free pairs of `bytes`, untimed here. A function of its own
/// for each allocator (never inlined into a workload's larger body), so
/// that the compiler gives every allocator's calls the same chance to be
/// inlined into the loop.
#[inline(never)]
pub fn pairs<A: StreamAlloc>(a: &A, bytes: usize, n: u64) -> somalloc::Result<()> {
    for _ in 0..n {
        let b = a.alloc(bytes)?;
        a.free(b)?;
    }
    Ok(())
}

pub fn pair<A: StreamAlloc>(a: &A, bytes: usize, n: u64) -> somalloc::Result<Sample> {
    warm(a, bytes, 64)?;
    let t0 = Instant::now();
    pairs(a, bytes, n)?;
    a.stream().synchronize()?;
    let s = Sample::timed(t0.elapsed(), n).with("bytes", bytes as f64);
    Ok(with_cache_stats(a, s))
}

#[derive(Clone, Copy, Debug)]
pub enum ChurnOp {
    Alloc(usize),
    /// Free the live block at this index (`swap_remove`).
    Free(usize),
}

/// The churn sequence: `steps` random steps (allocate a size 2^U(8,22), or
/// free a random live block; at most `max_live` live), then frees of
/// everything still live. Made before timing, so the timed loop draws no
/// random numbers.
pub fn churn_ops(seed: u64, steps: u64, max_live: usize) -> Vec<ChurnOp> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut live = 0usize;
    let mut ops = Vec::with_capacity(steps as usize + max_live);
    for _ in 0..steps {
        let alloc = match live {
            0 => true,
            n if n >= max_live => false,
            _ => rng.bool(),
        };
        if alloc {
            let exp = 8.0 + 14.0 * rng.f64();
            ops.push(ChurnOp::Alloc(exp.exp2() as usize));
            live += 1;
        } else {
            ops.push(ChurnOp::Free(rng.usize(..live)));
            live -= 1;
        }
    }
    while live > 0 {
        live -= 1;
        ops.push(ChurnOp::Free(live));
    }
    ops
}

/// The most bytes (requested sizes) the churn sequence holds live at once,
/// after any operation: the same for every allocator.
pub fn churn_live_peak(ops: &[ChurnOp]) -> u64 {
    let mut live: Vec<usize> = Vec::with_capacity(CHURN_MAX_LIVE);
    let (mut now, mut peak) = (0usize, 0usize);
    for op in ops {
        match *op {
            ChurnOp::Alloc(bytes) => {
                live.push(bytes);
                now += bytes;
                peak = peak.max(now);
            }
            ChurnOp::Free(idx) => now -= live.swap_remove(idx),
        }
    }
    peak as u64
}

/// The churn sequence's operations, timed by the caller: a function of its
/// own for each allocator, as [`pairs`].
#[inline(never)]
fn run_ops<A: StreamAlloc>(a: &A, ops: &[ChurnOp], live: &mut Vec<A::Block>) -> somalloc::Result<()> {
    for op in ops {
        match *op {
            ChurnOp::Alloc(bytes) => live.push(a.alloc(bytes)?),
            ChurnOp::Free(idx) => a.free(live.swap_remove(idx))?,
        }
    }
    Ok(())
}

/// One run of the churn sequence: the timing, and for a timeline run its
/// samples and peaks.
pub struct ChurnRun {
    pub sample: Sample,
    pub points: Vec<TimelinePoint>,
    pub peaks: Option<Peaks>,
}

/// Runs the churn sequence. With `sample_every`, it starts from a trimmed
/// pool with its peaks reset, records (time, used, reserved,
/// and the tier's cached bytes) every that many operations, and reports
/// the peaks (the timeline; the time then includes the sampling). On an
/// arena, the arena's instead of the pool's: trimmed, its peaks reset, its
/// live bytes as used and its mapped bytes as reserved.
pub fn churn<A: StreamAlloc>(
    a: &A,
    pool: &MemPool,
    ops: &[ChurnOp],
    sample_every: Option<u64>,
) -> somalloc::Result<ChurnRun> {
    let mut live: Vec<A::Block> = Vec::with_capacity(CHURN_MAX_LIVE);
    let mut points = Vec::new();
    if sample_every.is_some() {
        a.stream().synchronize()?;
        pool.trim_to(0)?;
        pool.reset_peaks()?;
        if let Some(arena) = a.arena() {
            arena.trim(0);
            arena.reset_peaks();
        }
    } else {
        warm(a, 4 * MIB, 16)?;
    }
    let t0 = Instant::now();
    let sample = |i: u64, points: &mut Vec<TimelinePoint>| -> somalloc::Result<()> {
        let (used, reserved) = match a.arena() {
            Some(arena) => {
                let s = arena.stats();
                (s.live_bytes, s.mapped_bytes)
            }
            None => {
                let s = pool.stats()?;
                (s.used_current, s.reserved_current)
            }
        };
        points.push(TimelinePoint {
            t_ns: t0.elapsed().as_nanos() as u64,
            ops: i,
            used: used as u64,
            reserved: reserved as u64,
            cached: a.cache_stats().map(|c| c.cached_bytes as u64),
        });
        Ok(())
    };
    if sample_every.is_some() {
        sample(0, &mut points)?;
    }
    match sample_every {
        None => run_ops(a, ops, &mut live)?,
        Some(every) => {
            for (i, op) in ops.iter().enumerate() {
                match *op {
                    ChurnOp::Alloc(bytes) => live.push(a.alloc(bytes)?),
                    ChurnOp::Free(idx) => a.free(live.swap_remove(idx))?,
                }
                if (i as u64 + 1).is_multiple_of(every) {
                    sample(i as u64 + 1, &mut points)?;
                }
            }
        }
    }
    debug_assert!(live.is_empty());
    a.stream().synchronize()?;
    let elapsed = t0.elapsed();
    let mut peaks = None;
    if sample_every.is_some() {
        sample(ops.len() as u64, &mut points)?;
        let (used, reserved) = match a.arena() {
            Some(arena) => {
                let s = arena.stats();
                (s.peak_live, s.peak_mapped)
            }
            None => {
                let s = pool.stats()?;
                (s.used_peak, s.reserved_peak)
            }
        };
        peaks = Some(Peaks {
            pool_used: used as u64,
            pool_reserved: reserved as u64,
            live: churn_live_peak(ops),
            cached: points.iter().filter_map(|p| p.cached).max(),
            cache_cap: a.cache_cap().map(|c| c as u64),
        });
    }
    Ok(ChurnRun {
        sample: with_cache_stats(a, Sample::timed(elapsed, ops.len() as u64)),
        points,
        peaks,
    })
}

/// `threads` threads, each with its own non-blocking stream (a borrowed-stream
/// kind: its own lent stream), `plan.thread_pairs` 64 KiB pairs each; aggregate ns per pair = wall / all pairs, the wall
/// from the common start to the last thread's stream sync. The cache
/// allocators share one tier, each thread with its stream's own cache
/// (over the arena for `cache+arena`).
pub fn threads(ctx: &Ctx, kind: Kind, threads: usize) -> somalloc::Result<Sample> {
    const BYTES: usize = 64 * KIB;
    let n = ctx.plan.thread_pairs;
    let start = Barrier::new(threads + 1);
    let (dev, pool) = (ctx.dev, &ctx.pool);
    let made = if kind.tiered() {
        Some(crate::arena::tier_for(kind, pool)?)
    } else {
        None
    };
    let tier = made.as_ref();
    let (t0, ends) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|slot| {
                let start = &start;
                s.spawn(move || -> somalloc::Result<Instant> {
                    // Set up, then meet the others at the barrier whatever
                    // happened, so that a failure cannot leave them waiting.
                    let mut met = false;
                    let mut go = || -> somalloc::Result<Instant> {
                        dev.bind_to_thread()?;
                        let stream = Stream::new(&dev)?;
                        with_alloc!(kind, pool, stream, tier, slot, |a| {
                            let warmed = warm(&a, BYTES, 64);
                            start.wait();
                            met = true;
                            warmed?;
                            pairs(&a, BYTES, n)?;
                            a.stream().synchronize()?;
                            Ok(Instant::now())
                        })
                    };
                    let ended = go();
                    if !met {
                        start.wait();
                    }
                    ended
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        let ends: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("a bench thread panicked"))
            .collect();
        (t0, ends)
    });
    let mut last = t0;
    for end in ends {
        last = last.max(end?);
    }
    let mut s = Sample::timed(last - t0, n * threads as u64).with("threads", threads as f64);
    if let Some(tier) = tier {
        // The sums over the threads' streams.
        s.extra.extend(cache_extra(&tier.stats().total));
    }
    // The tier's cached blocks back to the arena before it settles.
    drop(made);
    crate::arena::settle(kind, &dev)?;
    Ok(s)
}

/// 64 MiB allocate + free + stream sync, with release threshold `th`;
/// also the pool's reserved bytes afterwards.
pub fn threshold<A: StreamAlloc>(ctx: &Ctx, a: &A, th: u64) -> somalloc::Result<Sample> {
    const BYTES: usize = 64 * MIB;
    let n = if th == u64::MAX {
        ctx.plan.threshold_iters_keep
    } else {
        ctx.plan.threshold_iters_release
    };
    ctx.pool
        .set_release_threshold(usize::try_from(th).unwrap_or(usize::MAX))?;
    a.stream().synchronize()?;
    ctx.pool.trim_to(0)?;
    for _ in 0..2 {
        let b = a.alloc(BYTES)?;
        a.free(b)?;
        a.stream().synchronize()?;
    }
    let t0 = Instant::now();
    for _ in 0..n {
        let b = a.alloc(BYTES)?;
        a.free(b)?;
        a.stream().synchronize()?;
    }
    let elapsed = t0.elapsed();
    let reserved = ctx.pool.stats()?.reserved_current;
    Ok(Sample::timed(elapsed, n)
        .with("threshold", th as f64)
        .with("reserved_after_bytes", reserved as f64))
}

/// Synchronous `cudaMalloc` / `cudaFree` (`hipMalloc` / `hipFree`) pairs.
pub fn synchronous(ctx: &Ctx, bytes: usize) -> somalloc::Result<Sample> {
    let n = ctx.plan.sync_iters;
    for _ in 0..4 {
        drop(SyncBuffer::new(&ctx.dev, bytes)?);
    }
    let t0 = Instant::now();
    for _ in 0..n {
        drop(SyncBuffer::new(&ctx.dev, bytes)?);
    }
    Ok(Sample::timed(t0.elapsed(), n).with("bytes", bytes as f64))
}

/// The seeds' pipeline, one loop: 100 × (allocate 4 MiB, process kernel on
/// that allocation, free), timed with events around the loop (and on the
/// host clock).
pub fn seed_pipeline(ctx: &Ctx, who: Who) -> somalloc::Result<Sample> {
    let bytes = PIPELINE_FLOATS * std::mem::size_of::<f32>();
    let (dev, stream, k) = (&ctx.dev, &ctx.stream, &ctx.kernels);
    let start = Event::with_timing(dev)?;
    let stop = Event::with_timing(dev)?;
    let (ms, host, cache) = match who {
        Who::Sync => {
            let once = || -> somalloc::Result<()> {
                let data = SyncBuffer::new(dev, bytes)?; // synchronises
                k.process(&data, stream)?;
                drop(data); // synchronises
                Ok(())
            };
            for _ in 0..3 {
                once()?;
            }
            stream.synchronize()?;
            let t0 = Instant::now();
            start.record(stream)?;
            for _ in 0..PIPELINE_ITERS {
                once()?;
            }
            stop.record(stream)?;
            stop.synchronize()?;
            (start.elapsed_ms(&stop)?, t0.elapsed(), None)
        }
        Who::Alloc(kind) => with_alloc!(kind, ctx.pool, ctx.stream, |a| {
            let once = || -> somalloc::Result<()> {
                let data = a.alloc(bytes)?; // enqueued, no sync
                a.process(k, &data, bytes)?;
                a.free(data) // enqueued after the kernel
            };
            for _ in 0..3 {
                once()?;
            }
            stream.synchronize()?;
            let t0 = Instant::now();
            start.record(stream)?;
            for _ in 0..PIPELINE_ITERS {
                once()?;
            }
            stop.record(stream)?;
            stop.synchronize()?;
            (start.elapsed_ms(&stop)?, t0.elapsed(), a.cache_stats())
        }),
    };
    let ns = f64::from(ms) * 1e6 / PIPELINE_ITERS as f64;
    let mut extra = vec![
        ("loop_ms", f64::from(ms)),
        ("host_loop_ms", host.as_secs_f64() * 1e3),
    ];
    if let Some(c) = cache {
        extra.extend(cache_extra(&c));
    }
    Ok(Sample {
        ns_per_op: ns,
        ops: PIPELINE_ITERS as u64,
        extra,
    })
}

/// Runs one workload on every allocator it applies to, adding its rows
/// (and, for churn, its timelines).
pub fn run_workload(
    ctx: &Ctx,
    workload: &str,
    rows: &mut Vec<Row>,
    timelines: &mut Vec<Timeline>,
) -> somalloc::Result<()> {
    // The allocators that run this workload (the cudarc peers run pair,
    // churn and threads only).
    let all: Vec<Who> = Kind::ALL
        .iter()
        .filter(|k| k.runs(workload))
        .map(|&k| Who::Alloc(k))
        .collect();
    let note_none = |_: Who| None;
    match workload {
        "graph_pipeline" => crate::graph::run(ctx, rows)?,
        "seed_pipeline" => {
            let mut who = vec![Who::Sync];
            who.extend(&all);
            let params = [(pipeline_param(), ())];
            let mut r = measure(ctx, "seed_pipeline", &params, &who, note_none, |c, (), w| {
                seed_pipeline(c, w)
            })?;
            // Speedup: the synchronous loop over each stream-ordered one.
            let sync_ms = r
                .iter()
                .find(|x| x.allocator == SYNC)
                .and_then(|x| x.extra.get("loop_ms").copied());
            for row in &mut r {
                if let (Some(s), Some(&mine)) = (sync_ms, row.extra.get("loop_ms")) {
                    row.extra.insert("speedup".into(), s / mine);
                }
            }
            rows.extend(r);
        }
        "pair" => {
            let params: Vec<(String, usize)> = PAIR_SIZES.iter().map(|&b| (size_param(b), b)).collect();
            rows.extend(measure(ctx, "pair", &params, &all, note_none, |c, bytes, w| {
                let Who::Alloc(k) = w else { unreachable!() };
                with_alloc!(k, c.pool, c.stream, |a| pair(&a, bytes, c.plan.pair_iters))
            })?);
        }
        "churn" => {
            let ops = churn_ops(ctx.seed, ctx.plan.churn_steps, CHURN_MAX_LIVE);
            let params = [(churn_param(), ())];
            rows.extend(measure(ctx, "churn", &params, &all, note_none, |c, (), w| {
                let Who::Alloc(k) = w else { unreachable!() };
                with_alloc!(k, c.pool, c.stream, |a| churn(&a, &c.pool, &ops, None)
                    .map(|r| r.sample))
            })?);
            // The timeline: the same sequence once more per allocator
            // (but `cache+buf`: the same tier as `cache`), untimed, from
            // a trimmed pool, sampling the pool's stats (and the tier's
            // cached bytes).
            let every = (ops.len() as u64 / ctx.plan.timeline_points).max(1);
            for k in Kind::ALL.into_iter().filter(|k| k.has_timeline()) {
                ctx.pb.set_message(format!("churn timeline {}", k.name()));
                let run = with_alloc!(k, ctx.pool, ctx.stream, |a| churn(
                    &a,
                    &ctx.pool,
                    &ops,
                    Some(every)
                ))?;
                timelines.push(Timeline {
                    workload: "churn".into(),
                    allocator: k.name().into(),
                    every_ops: every,
                    points: run.points,
                    peaks: run.peaks,
                });
                ctx.pb.inc(1);
            }
        }
        "threads" => {
            let params: Vec<(String, usize)> = THREADS.iter().map(|&t| (threads_param(t), t)).collect();
            rows.extend(measure(ctx, "threads", &params, &all, note_none, |c, t, w| {
                let Who::Alloc(k) = w else { unreachable!() };
                threads(c, k, t)
            })?);
        }
        "threshold" => {
            let params: Vec<(String, u64)> = [0, u64::MAX].iter().map(|&t| (threshold_param(t), t)).collect();
            let who: Vec<Who> = Kind::ALL
                .into_iter()
                .filter(|k| k.runs_threshold())
                .map(Who::Alloc)
                .collect();
            let skipped = Kind::ALL.iter().any(|k| !k.runs_threshold());
            let note = |w: Who| (skipped && w == Who::Alloc(Kind::Raw)).then_some(THRESHOLD_NOTE);
            rows.extend(measure(ctx, "threshold", &params, &who, note, |c, th, w| {
                let Who::Alloc(k) = w else { unreachable!() };
                let r = with_alloc!(k, c.pool, c.stream, |a| threshold(c, &a, th));
                // Back to the bench's setting even when it failed.
                c.pool.set_release_threshold(usize::MAX)?;
                r
            })?);
        }
        "synchronous" => {
            let params: Vec<(String, usize)> = PAIR_SIZES.iter().map(|&b| (size_param(b), b)).collect();
            rows.extend(measure(
                ctx,
                "synchronous",
                &params,
                &[Who::Sync],
                note_none,
                |c, bytes, _| synchronous(c, bytes),
            )?);
        }
        // Pinned host memory (examples/bench/host.rs).
        "host_pair" => crate::host::host_pair(ctx, rows)?,
        "h2d" => crate::host::h2d(ctx, rows)?,
        // Recorded traces (examples/bench/replay.rs).
        "replay" => crate::replay::run(ctx, rows)?,
        "recording" => crate::replay::recording(ctx, rows)?,
        _ => unreachable!("checked when parsing --only"),
    }
    Ok(())
}
