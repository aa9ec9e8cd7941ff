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

mod plan;
mod recording;
mod replayers;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex, OnceLock};
use std::time::Instant;

use somalloc::trace::Trace;
use somalloc::{Error, Stream};

use crate::alloc::{new_tier, CudarcAlloc, Kind};
use crate::results::Row;
use crate::workloads::{measure, Ctx, Sample, Who};

pub use plan::{Op, Plan, Slot};
pub use recording::{checks, recording};
pub use replayers::{CacheReplay, CudarcReplay, RawReplay, Replayer, SomallocReplay};

/// The allocators a trace is replayed on.
pub const REPLAY_KINDS: [Kind; 4] = [Kind::Raw, Kind::Somalloc, Kind::Cache, Kind::Cudarc];
/// The recording workload's allocator with the recorder in front.
pub const CACHE_REC: &str = "cache+rec";

fn kinds() -> impl Iterator<Item = Kind> {
    REPLAY_KINDS.into_iter().filter(|k| !k.peer() || k.runs("pair"))
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
