//! Stress, bounded in operations and time.
//!
//! * N threads × M streams, random sizes, random cross-stream use through
//!   `use_on`; every buffer is filled by a kernel with a unique pattern and
//!   verified (on a stream that used it) before its free. Reports ops/s and
//!   the corruption count; passes only with zero corrupt bytes and the
//!   pool's used bytes back to their start.
//! * N threads sharing one stream's cache of a cache tier, taking turns in
//!   bursts long enough for each to be granted ownership of the cache's lock
//!   (and so for the next to take it away), then all at once; a host-side
//!   registry of live address ranges fails on any overlap, and every buffer
//!   is filled and verified on the GPU before its free.
//!
//! `SOMALLOC_STRESS_TRACE=FILE` records the first test's allocations into a
//! trace (a `RecordingAdaptor` over the pool) for the benchmark's replay
//! and the `somalloc-trace` tool; `SOMALLOC_STRESS_SEED` changes its random
//! choices.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use somalloc::adaptors::RecordingAdaptor;
use somalloc::testkit::TestKernels;
use somalloc::trace::RecordOptions;
use somalloc::{
    ArenaOptions, CacheConfig, CacheTier, Device, DeviceBuffer, Error, MemPool, MemoryResource,
    PoolProperties, Stream, VmmArena,
};

mod support;

const STREAMS_PER_THREAD: usize = 3;
const MAX_LIVE: usize = 12;

/// Threads, operations per thread and the time limit: SOMALLOC_STRESS_THREADS
/// (default 8), SOMALLOC_STRESS_OPS (default 20000) and
/// SOMALLOC_STRESS_SECONDS (default 60); the run ends at whichever comes first.
fn bounds() -> (usize, usize, Duration) {
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    (
        var("SOMALLOC_STRESS_THREADS", 8).max(1) as usize,
        var("SOMALLOC_STRESS_OPS", 20_000) as usize,
        Duration::from_secs(var("SOMALLOC_STRESS_SECONDS", 60)),
    )
}

fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// xorshift64*: small, seeded, repeatable.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn threads_streams_random_sizes_cross_stream_use() {
    stress("stress::threads_streams_random_sizes_cross_stream_use", false);
}

/// The same on a virtual-memory arena (the arena as the resource of every
/// buffer; skipped where the device has no virtual-memory management).
#[test]
fn threads_streams_random_sizes_cross_stream_use_on_the_arena() {
    stress(
        "stress::threads_streams_random_sizes_cross_stream_use_on_the_arena",
        true,
    );
}

fn stress(name: &str, on_arena: bool) {
    let dev = match Device::get(0) {
        Ok(d) => d,
        Err(e @ (Error::RuntimeNotFound { .. } | Error::NoDevice { .. })) => {
            say(&format!("SKIP {name}: no GPU ({e})"));
            return;
        }
        Err(e) => panic!("device 0: {e}"),
    };
    let k = Arc::new(TestKernels::load(&dev).unwrap());
    let pool = MemPool::create(&dev, PoolProperties::default()).unwrap();
    pool.set_release_threshold(usize::MAX).unwrap();
    let used_at_start = pool.stats().unwrap().used_current;
    // With SOMALLOC_STRESS_TRACE: every allocation through a recording
    // adaptor over the pool (else straight from the pool).
    let arena = if on_arena {
        match VmmArena::new(&dev, ArenaOptions::default()) {
            Ok(a) => Some(Arc::new(a)),
            Err(e @ Error::Unsupported { .. }) => {
                say(&format!("SKIP {name}: {e}"));
                return;
            }
            Err(e) => panic!("{name}: {e}"),
        }
    } else {
        None
    };
    let upstream: Arc<dyn MemoryResource> = match &arena {
        Some(a) => a.clone(),
        None => Arc::new(pool.clone()),
    };
    let recording: Option<Arc<RecordingAdaptor>> = std::env::var_os("SOMALLOC_STRESS_TRACE").map(|path| {
        let options = RecordOptions::default().buffer_events(1 << 16);
        Arc::new(RecordingAdaptor::to_file(upstream.clone(), path, options).unwrap())
    });
    // Every buffer through the recording adaptor, else the arena, else the
    // pool itself.
    let via: Option<Arc<dyn MemoryResource>> = match &recording {
        Some(r) => Some(r.clone()),
        None => arena.clone().map(|a| a as Arc<dyn MemoryResource>),
    };
    let seed_base: u64 = std::env::var("SOMALLOC_STRESS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let (threads, ops_per_thread, time_limit) = bounds();
    let seeds = Arc::new(AtomicU32::new(1));
    let corrupt = Arc::new(AtomicU64::new(0));
    let ops = Arc::new(AtomicU64::new(0));
    let cross = Arc::new(AtomicU64::new(0));
    // Streams of all threads, so a buffer can be used on another thread's stream.
    let streams: Arc<Vec<Stream>> = Arc::new(
        (0..threads * STREAMS_PER_THREAD)
            .map(|_| Stream::new(&dev).unwrap())
            .collect(),
    );
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let recording = via.clone();
            let (k, pool, seeds, corrupt, ops, cross, streams) = (
                k.clone(),
                pool.clone(),
                seeds.clone(),
                corrupt.clone(),
                ops.clone(),
                cross.clone(),
                streams.clone(),
            );
            std::thread::spawn(move || {
                let mut rng =
                    Rng(0x9E37_79B9_7F4A_7C15
                        ^ (t as u64 + 1 + seed_base).wrapping_mul(0xBF58_476D_1CE4_E5B9));
                let mine = &streams[t * STREAMS_PER_THREAD..(t + 1) * STREAMS_PER_THREAD];
                let mut live: Vec<(DeviceBuffer<u8>, u32, Stream)> = Vec::new();
                for _ in 0..ops_per_thread {
                    if start.elapsed() > time_limit {
                        break;
                    }
                    let free = !live.is_empty() && (live.len() >= MAX_LIVE || rng.below(2) == 0);
                    if free {
                        let i = rng.below(live.len() as u64) as usize;
                        let (buf, seed, checker) = live.swap_remove(i);
                        // Verify on a stream that used the buffer, then free.
                        corrupt.fetch_add(k.verify(&buf, seed, &checker).unwrap(), Ordering::Relaxed);
                        drop(buf);
                    } else {
                        let owner = &mine[rng.below(mine.len() as u64) as usize];
                        let bytes = 1usize << (8 + rng.below(15)); // 256 B .. 4 MiB
                        let bytes = bytes + rng.below(bytes as u64) as usize;
                        let seed = seeds.fetch_add(1, Ordering::Relaxed);
                        let mut buf = match &recording {
                            Some(r) => DeviceBuffer::<u8>::new_with(bytes, r, owner).unwrap(),
                            None => DeviceBuffer::<u8>::new_in(bytes, &pool, owner).unwrap(),
                        };
                        k.fill(&mut buf, seed, owner).unwrap();
                        // Half of the buffers are checked on another stream,
                        // possibly another thread's, through use_on.
                        let checker = if rng.below(2) == 0 {
                            let other = streams[rng.below(streams.len() as u64) as usize].clone();
                            buf.use_on(&other).unwrap();
                            cross.fetch_add(1, Ordering::Relaxed);
                            other
                        } else {
                            owner.clone()
                        };
                        live.push((buf, seed, checker));
                    }
                    ops.fetch_add(1, Ordering::Relaxed);
                }
                for (buf, seed, checker) in live {
                    corrupt.fetch_add(k.verify(&buf, seed, &checker).unwrap(), Ordering::Relaxed);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    for s in streams.iter() {
        s.synchronize().unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    let (ops, corrupt, cross) = (
        ops.load(Ordering::Relaxed),
        corrupt.load(Ordering::Relaxed),
        cross.load(Ordering::Relaxed),
    );
    let used = pool.stats().unwrap().used_current;
    if let Some(rec) = recording {
        let recorder = Arc::clone(rec.recorder());
        drop(rec);
        recorder.set_meta(
            "pool_reserved_peak",
            &pool.stats().unwrap().reserved_peak.to_string(),
        );
        recorder.set_meta(
            "workload",
            &format!("stress: {threads} threads x {STREAMS_PER_THREAD} streams"),
        );
        say(&format!("{name}: recorded {}", recorder.finish().unwrap()));
    }
    say(&format!(
        "{name}: {threads} threads x {STREAMS_PER_THREAD} streams, {ops} ops ({cross} cross-stream) in {secs:.2} s = {:.0} ops/s, corrupt bytes {corrupt}, pool used after {used} (start {used_at_start})",
        ops as f64 / secs
    ));
    assert_eq!(corrupt, 0, "corrupt bytes");
    assert_eq!(
        used, used_at_start,
        "pool used bytes did not return to their start"
    );
    if let Some(a) = &arena {
        let st = a.stats();
        say(&format!("{name}: arena {st}"));
        assert_eq!(st.live_bytes, 0, "arena blocks left live");
        a.trim(0);
        assert_eq!(a.stats().mapped_bytes, 0, "the arena gives everything back");
    }
    assert!(ops > 0);
}

/// Live address ranges `[start, end)` handed out; any overlap is a block
/// handed out twice.
#[derive(Default)]
struct Ranges(Mutex<BTreeMap<usize, usize>>);

impl Ranges {
    fn insert(&self, start: usize, len: usize) {
        let end = start + len.max(1);
        let mut map = self.0.lock().unwrap();
        if let Some((&s, &e)) = map.range(..end).next_back() {
            assert!(
                e <= start,
                "[{start:#x}, {end:#x}) overlaps the live range [{s:#x}, {e:#x}): a block handed out twice"
            );
        }
        map.insert(start, end);
    }

    fn remove(&self, start: usize) {
        assert!(
            self.0.lock().unwrap().remove(&start).is_some(),
            "{start:#x} was not live"
        );
    }
}

/// Threads share one stream's cache. In the first phase they take turns,
/// each a burst of allocations and frees long enough to be granted
/// ownership of the cache's lock (where the OS has the process-wide
/// barrier), so every turn takes ownership away from the previous thread;
/// in the second phase all threads run at once. Every block is checked
/// against the registry of live ranges, filled by a kernel and verified
/// before its free. Threads and operations per thread and phase:
/// SOMALLOC_SHARED_THREADS (default 8), SOMALLOC_SHARED_OPS (default 4000).
#[test]
fn threads_taking_turns_on_one_streams_cache() {
    let name = "stress::threads_taking_turns_on_one_streams_cache";
    let Some(dev) = support::device_or_skip(name) else {
        return;
    };
    let _device = support::exclusive();
    let var = |v: &str, default: usize| {
        std::env::var(v)
            .ok()
            .and_then(|x| x.parse().ok())
            .unwrap_or(default)
    };
    let threads = var("SOMALLOC_SHARED_THREADS", 8).max(2);
    let ops = var("SOMALLOC_SHARED_OPS", 4000).max(64);
    let k = TestKernels::load(&dev).unwrap();
    let pool = MemPool::create(&dev, PoolProperties::default()).unwrap();
    pool.set_release_threshold(usize::MAX).unwrap();
    let used_at_start = pool.stats().unwrap().used_current;
    let tier = CacheTier::new(Arc::new(pool.clone()), CacheConfig::default()).unwrap();
    let stream = Stream::new(&dev).unwrap();
    let cache: Arc<dyn MemoryResource> = tier.for_stream(&stream).unwrap();
    let ranges = Ranges::default();
    let turn = AtomicUsize::new(0);
    let seeds = AtomicU32::new(1);
    let corrupt = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    // Bursts of this many operations per turn: more than the takes in a
    // row that a grant asks for at first.
    let burst = 64;
    let start = Instant::now();
    let work = |rng: &mut Rng, n: usize, live: &mut Vec<(DeviceBuffer<u8>, u32)>| {
        for _ in 0..n {
            if !live.is_empty() && (live.len() >= MAX_LIVE || rng.below(2) == 0) {
                let (buf, seed) = live.swap_remove(rng.below(live.len() as u64) as usize);
                corrupt.fetch_add(k.verify(&buf, seed, &stream).unwrap(), Ordering::Relaxed);
                ranges.remove(buf.as_raw() as usize);
                drop(buf);
            } else {
                // 256 B .. 1 MiB, a few sizes so that blocks are reused.
                let bytes = 256usize << rng.below(13);
                let mut buf = DeviceBuffer::<u8>::new_with(bytes, &cache, &stream).unwrap();
                ranges.insert(buf.as_raw() as usize, bytes);
                let seed = seeds.fetch_add(1, Ordering::Relaxed);
                k.fill(&mut buf, seed, &stream).unwrap();
                live.push((buf, seed));
            }
            done.fetch_add(1, Ordering::Relaxed);
        }
    };
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (turn, work, k, stream, ranges, corrupt) = (&turn, &work, &k, &stream, &ranges, &corrupt);
            scope.spawn(move || {
                let mut rng = Rng(0x5EED ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                let mut live = Vec::new();
                // Phase 1: turns.
                let turns = ops / burst;
                for round in 0..turns {
                    let mine = round * threads + t;
                    while turn.load(Ordering::Acquire) != mine {
                        std::thread::yield_now();
                    }
                    work(&mut rng, burst, &mut live);
                    turn.store(mine + 1, Ordering::Release);
                }
                // Phase 2: all at once.
                work(&mut rng, ops, &mut live);
                for (buf, seed) in live {
                    corrupt.fetch_add(k.verify(&buf, seed, stream).unwrap(), Ordering::Relaxed);
                    ranges.remove(buf.as_raw() as usize);
                }
            });
        }
    });
    stream.synchronize().unwrap();
    let stats = tier.stats();
    drop(cache);
    drop(tier);
    stream.synchronize().unwrap();
    let used = pool.stats().unwrap().used_current;
    let (done, corrupt) = (done.load(Ordering::Relaxed), corrupt.load(Ordering::Relaxed));
    say(&format!(
        "{name}: {threads} threads on one stream, {done} ops in {:.2} s, {} hits, {} misses, \
         corrupt bytes {corrupt}, pool used after {used} (start {used_at_start})",
        start.elapsed().as_secs_f64(),
        stats.total.hits,
        stats.total.misses
    ));
    assert!(ranges.0.lock().unwrap().is_empty());
    assert_eq!(corrupt, 0, "corrupt bytes");
    assert!(stats.total.hits > 0, "the cache served nothing");
    assert_eq!(
        used, used_at_start,
        "pool used bytes did not return to their start"
    );
}
