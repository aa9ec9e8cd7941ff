//! Stress, bounded in operations and time: N threads × M streams, random
//! sizes, random cross-stream use through `use_on`; every buffer is filled
//! by a kernel with a unique pattern and verified (on a stream that used it)
//! before its free. Reports ops/s and the corruption count; passes only with
//! zero corrupt bytes and the pool's used bytes back to their start.
//!
//! `SOMALLOC_STRESS_TRACE=FILE` records the run's allocations into a trace
//! (a `RecordingAdaptor` over the pool) for the benchmark's replay and the
//! `somalloc-trace` tool; `SOMALLOC_STRESS_SEED` changes the random choices.

use std::io::Write;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use somalloc::adaptors::RecordingAdaptor;
use somalloc::testkit::TestKernels;
use somalloc::trace::RecordOptions;
use somalloc::{Device, DeviceBuffer, Error, MemPool, MemoryResource, PoolProperties, Stream};

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
    let name = "stress::threads_streams_random_sizes_cross_stream_use";
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
    let recording: Option<Arc<RecordingAdaptor>> = std::env::var_os("SOMALLOC_STRESS_TRACE").map(|path| {
        let options = RecordOptions::default().buffer_events(1 << 16);
        Arc::new(RecordingAdaptor::to_file(Arc::new(pool.clone()), path, options).unwrap())
    });
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
            let recording: Option<Arc<dyn MemoryResource>> =
                recording.clone().map(|r| r as Arc<dyn MemoryResource>);
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
    assert!(ops > 0);
}
