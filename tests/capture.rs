//! Every allocation path under stream capture, checked by kernels on the
//! device: the vendor pool (`new`, `new_in`, the pool as a resource), the
//! cache tier (warm and cold), a buffer from before a capture dropped inside
//! it, graph outputs, `use_on` across a capture's edge, an invalidated
//! capture, the adaptors, a capture begun by another library on a borrowed
//! stream, and a borrowed stream with the promise that only somalloc
//! captures it.
//!
//! The per-replay pattern: each graph writes `i * mul + add` into memory it
//! allocates and adds it into an accumulator allocated outside the capture,
//! so after `k` launches the accumulator holds `k` times the sum; a graph
//! that used memory somebody else also uses, or memory that was freed,
//! shows up as wrong words there or in the other buffer.
//!
//! The tests hold one lock: a capture must not see other tests' work.

mod support;

use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};
use support::say;

use somalloc::adaptors::{Backtraces, LimitingAdaptor, RetryAdaptor, StatisticsAdaptor, TrackingAdaptor};
use somalloc::testkit::{iota_word, raw, TestKernels};
use somalloc::{
    CacheConfig, CacheTier, CaptureMode, CaptureStatus, Device, DeviceBuffer, Error, Event, MemPool,
    MemoryResource, PoolProperties, Stream,
};

/// 1,048,576 words: 4 MiB, the size of the corruption report.
const N: usize = 1 << 20;
/// Replays of each graph: 1000, or `SOMALLOC_CAPTURE_REPLAYS` (the
/// sanitizer runs use fewer: instrumented replays are slow).
fn replays() -> u32 {
    std::env::var("SOMALLOC_CAPTURE_REPLAYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &u32| n >= 3)
        .unwrap_or(1000)
}

struct Gpu {
    dev: Device,
    k: TestKernels,
    pool: MemPool,
    stream: Stream,
    errors_at_start: u64,
    _exclusive: MutexGuard<'static, ()>,
}

/// Device 0, its kernels, a pool of its own and a stream; `None` after one
/// SKIP line when there is no GPU or the runtime cannot capture.
fn setup(test: &str) -> Option<Gpu> {
    let exclusive = support::exclusive();
    let dev = support::device_or_skip(test)?;
    let stream = Stream::new(&dev).unwrap();
    // Can this runtime capture at all, and allocate inside a capture? (HIP
    // before ROCm 5.5 allocates at once, outside the graph: somalloc refuses
    // that with Unsupported.)
    match stream.begin_capture(CaptureMode::ThreadLocal) {
        Ok(()) => {
            let inside = DeviceBuffer::<u8>::new(256, &stream).map(drop);
            drop(stream.end_capture().unwrap());
            if let Err(e @ Error::Unsupported { .. }) = inside {
                say(&format!(
                    "SKIP {test}: this runtime cannot allocate inside a capture ({e})"
                ));
                return None;
            }
            inside.unwrap();
        }
        Err(e @ Error::Unsupported { .. }) => {
            say(&format!("SKIP {test}: this runtime cannot capture ({e})"));
            return None;
        }
        Err(e) => panic!("begin_capture: {e}"),
    }
    let pool = MemPool::create(&dev, PoolProperties::default()).unwrap();
    pool.set_release_threshold(usize::MAX).unwrap();
    somalloc::reclaim_graph_frees().unwrap();
    Some(Gpu {
        k: TestKernels::load(&dev).unwrap(),
        pool,
        stream,
        errors_at_start: somalloc::drop_errors().count,
        dev,
        _exclusive: exclusive,
    })
}

impl Gpu {
    fn used(&self) -> usize {
        self.pool.stats().unwrap().used_current
    }

    /// A zeroed accumulator of N words from the pool (allocated outside any
    /// capture).
    fn accumulator(&self) -> DeviceBuffer<u32> {
        let mut acc = DeviceBuffer::<u32>::new_in(N, &self.pool, &self.stream).unwrap();
        acc.memset(0).unwrap();
        acc
    }

    fn no_new_drop_errors(&self) {
        let now = somalloc::drop_errors();
        assert_eq!(
            now.count, self.errors_at_start,
            "errors were recorded in Drop: last {:?}",
            now.last
        );
    }
}

/// Checks `acc[i] == times * sum(a * (i * mul + add))` over `terms`.
fn check_accumulated(acc: &DeviceBuffer<u32>, times: u32, terms: &[(u32, u32, u32)]) {
    let host = acc.to_vec().unwrap();
    let mut bad = 0usize;
    let mut first = None;
    for (i, &got) in host.iter().enumerate() {
        let one = terms.iter().fold(0u32, |s, &(a, mul, add)| {
            s.wrapping_add(a.wrapping_mul(iota_word(i as u64, mul, add)))
        });
        let want = one.wrapping_mul(times);
        if got != want {
            bad += 1;
            first.get_or_insert((i, got, want));
        }
    }
    assert_eq!(
        bad,
        0,
        "{bad} of {} words wrong; first (index, got, want): {first:?}",
        host.len()
    );
}

/// Calls `reclaim_graph_frees` until `done` holds (the runtime lets go of a
/// destroyed graph a few milliseconds later, on a thread of its own).
fn reclaim_until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    loop {
        somalloc::reclaim_graph_frees().unwrap();
        if done() {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: still waiting after 10 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `new`, `new_in` and the pool as a resource, each allocated, written, read
/// and freed inside the capture: graph memory nodes, replayed 1000 times.
#[test]
fn vendor_pool_allocations_inside_a_capture_are_graph_memory() {
    let Some(g) = setup("capture::vendor_pool_allocations_inside_a_capture_are_graph_memory") else {
        return;
    };
    let mut acc = g.accumulator();
    let pool_res: Arc<dyn MemoryResource> = Arc::new(g.pool.clone());
    g.stream.synchronize().unwrap();
    let used_before = g.used();
    let terms = [(1, 3, 1), (2, 5, 2), (3, 7, 11)];

    g.stream.begin_capture(CaptureMode::Global).unwrap();
    let mut a = DeviceBuffer::<u32>::new(N, &g.stream).unwrap();
    let mut b = DeviceBuffer::<u32>::new_in(N, &g.pool, &g.stream).unwrap();
    let mut c = DeviceBuffer::<u32>::new_with(N, &pool_res, &g.stream).unwrap();
    for (buf, &(x, mul, add)) in [&mut a, &mut b, &mut c].into_iter().zip(&terms) {
        g.k.iota_u32(buf, mul, add, &g.stream).unwrap();
        g.k.axpy_u32(&mut acc, buf, x, &g.stream).unwrap();
    }
    drop((a, b, c)); // graph free nodes
    let graph = g.stream.end_capture().unwrap();
    assert_eq!(g.stream.capture_status().unwrap(), CaptureStatus::None);
    assert_eq!(g.used(), used_before, "captured allocations touched the pool");

    let exec = graph.instantiate().unwrap();
    exec.upload(&g.stream).unwrap();
    exec.launch(&g.stream).unwrap();
    check_accumulated(&acc, 1, &terms);
    for _ in 1..replays() {
        exec.launch(&g.stream).unwrap();
    }
    check_accumulated(&acc, replays(), &terms);
    assert_eq!(g.used(), used_before, "graph memory is not the pool's");
    let graph_mem = g.dev.graph_mem_stats().unwrap();
    assert!(graph_mem.reserved_peak >= 3 * N * 4, "{graph_mem}");
    drop((exec, graph));
    drop(acc);
    g.stream.synchronize().unwrap();
    assert_eq!(somalloc::pending_graph_frees(), 0);
    g.no_new_drop_errors();
}

/// The corruption report: a warm cache must not hand its cached block to a
/// captured allocation (nor take it back at the captured free), so the
/// ordinary allocation that gets the block after the capture keeps its
/// contents while the graph replays. Through a StreamCache and through the
/// tier itself as the resource. Flush and trim during the capture leave the
/// capturing stream alone.
#[test]
fn a_warm_cache_is_not_handed_into_a_capture() {
    let Some(g) = setup("capture::a_warm_cache_is_not_handed_into_a_capture") else {
        return;
    };
    let start = g.used();
    for through_tier in [false, true] {
        let tier = Arc::new(CacheTier::new(Arc::new(g.pool.clone()), CacheConfig::default()).unwrap());
        let cache = tier.for_stream(&g.stream).unwrap();
        let res: Arc<dyn MemoryResource> = if through_tier { tier.clone() } else { cache.clone() };
        let mut acc = g.accumulator();
        // Warm: one 4 MiB block cached.
        drop(DeviceBuffer::<u32>::new_with(N, &res, &g.stream).unwrap());
        assert_eq!(cache.stats().cached_blocks, 1);
        let warm_hits = cache.stats().hits;

        g.stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
        let mut captured = DeviceBuffer::<u32>::new_with(N, &res, &g.stream).unwrap();
        g.k.iota_u32(&mut captured, 9, 4, &g.stream).unwrap();
        g.k.axpy_u32(&mut acc, &captured, 1, &g.stream).unwrap();
        let graph_addr = captured.as_raw();
        drop(captured);
        // Flush and trim skip the capturing stream (its frees would land in
        // the graph); the capture stays valid.
        tier.flush().unwrap();
        tier.trim(0).unwrap();
        assert_eq!(g.stream.capture_status().unwrap(), CaptureStatus::Active);
        let graph = g.stream.end_capture().unwrap();
        let st = cache.stats();
        assert_eq!((st.hits, st.captured, st.captured_live), (warm_hits, 1, 0));
        assert_eq!(st.cached_blocks, 1, "the captured free entered the cache");

        // The ordinary allocation after the capture takes the cached block.
        let mut ordinary = DeviceBuffer::<u32>::new_with(N, &res, &g.stream).unwrap();
        assert_eq!(cache.stats().hits, warm_hits + 1);
        assert_ne!(ordinary.as_raw(), graph_addr);
        g.k.fill(&mut ordinary, 77, &g.stream).unwrap();
        let exec = graph.instantiate().unwrap();
        for _ in 0..replays() {
            exec.launch(&g.stream).unwrap();
        }
        assert_eq!(
            g.k.verify(&ordinary, 77, &g.stream).unwrap(),
            0,
            "the graph wrote into the cached block (through_tier {through_tier})"
        );
        check_accumulated(&acc, replays(), &[(1, 9, 4)]);
        drop((exec, graph, ordinary, acc));
        tier.flush().unwrap();
        g.stream.synchronize().unwrap();
        drop((res, cache, tier));
        assert_eq!(g.used(), start, "through_tier {through_tier}");
    }
    g.no_new_drop_errors();
}

/// Cold cache: the graph's address never enters the cache, relaunching
/// works, and later ordinary allocations never get the graph's address.
#[test]
fn a_cold_cache_keeps_graph_addresses_out() {
    let Some(g) = setup("capture::a_cold_cache_keeps_graph_addresses_out") else {
        return;
    };
    let start = g.used();
    let tier = CacheTier::new(Arc::new(g.pool.clone()), CacheConfig::default()).unwrap();
    let cache = tier.for_stream(&g.stream).unwrap();
    let res: Arc<dyn MemoryResource> = cache.clone();
    let mut acc = g.accumulator();

    g.stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    let mut captured = DeviceBuffer::<u32>::new_with(N, &res, &g.stream).unwrap();
    let graph_addr = captured.as_raw() as usize;
    g.k.iota_u32(&mut captured, 2, 1, &g.stream).unwrap();
    g.k.axpy_u32(&mut acc, &captured, 3, &g.stream).unwrap();
    drop(captured);
    let graph = g.stream.end_capture().unwrap();
    assert_eq!(cache.stats().cached_blocks, 0, "a graph address was cached");

    let exec = graph.instantiate().unwrap();
    exec.launch(&g.stream).unwrap();
    exec.launch(&g.stream).unwrap(); // the second launch failed when the graph address was cached
    let mut ordinary = Vec::new();
    for seed in 0..4u32 {
        let mut buf = DeviceBuffer::<u32>::new_with(N, &res, &g.stream).unwrap();
        let (lo, hi) = (buf.as_raw() as usize, buf.as_raw() as usize + N * 4);
        assert!(
            !(lo..hi).contains(&graph_addr),
            "an ordinary allocation got the graph's memory"
        );
        g.k.fill(&mut buf, 100 + seed, &g.stream).unwrap();
        ordinary.push(buf);
    }
    for _ in 2..replays() {
        exec.launch(&g.stream).unwrap();
    }
    for (seed, buf) in ordinary.iter().enumerate() {
        assert_eq!(g.k.verify(buf, 100 + seed as u32, &g.stream).unwrap(), 0);
    }
    check_accumulated(&acc, replays(), &[(3, 2, 1)]);
    drop((exec, graph, ordinary, acc));
    tier.flush().unwrap();
    g.stream.synchronize().unwrap();
    drop((res, cache, tier));
    assert_eq!(g.used(), start);
    g.no_new_drop_errors();
}

/// A buffer allocated before the capture, used on another stream, and
/// dropped inside the capture that reads it: no leak and no drop error; the
/// memory stays allocated while the graph (or its executable) exists and
/// returns to the pool after both are dropped. The same for the pool as a
/// resource called directly, and for a cache tier buffer.
#[test]
fn a_buffer_dropped_inside_a_capture_is_freed_after_the_graph() {
    let Some(g) = setup("capture::a_buffer_dropped_inside_a_capture_is_freed_after_the_graph") else {
        return;
    };
    let other = Stream::new(&g.dev).unwrap();
    let start = g.used();
    let mut acc = g.accumulator();
    let mut x = DeviceBuffer::<u32>::new_in(N, &g.pool, &g.stream).unwrap();
    g.k.iota_u32(&mut x, 7, 3, &g.stream).unwrap();
    x.use_on(&other).unwrap();
    g.k.add_u32(&mut x, 0, &other).unwrap(); // a use on the other stream

    // The pool as a resource, called directly.
    let direct = g.pool.allocate(N * 4, &g.stream).unwrap();
    // A buffer through a cache tier.
    let tier = CacheTier::new(Arc::new(g.pool.clone()), CacheConfig::default()).unwrap();
    let res: Arc<dyn MemoryResource> = tier.for_stream(&g.stream).unwrap();
    let mut y = DeviceBuffer::<u32>::new_with(N, &res, &g.stream).unwrap();
    g.k.iota_u32(&mut y, 5, 6, &g.stream).unwrap();
    g.stream.synchronize().unwrap();
    other.synchronize().unwrap();
    let with_all = g.used();
    let pending = somalloc::pending_graph_frees();

    g.stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    g.k.axpy_u32(&mut acc, &x, 1, &g.stream).unwrap();
    g.k.axpy_u32(&mut acc, &y, 2, &g.stream).unwrap();
    drop(x); // deferred: the graph reads it on every replay
    drop(y);
    // SAFETY: from this pool's allocate, freed once; nothing uses it.
    unsafe { g.pool.deallocate(direct, N * 4, &g.stream).unwrap() };
    assert_eq!(somalloc::pending_graph_frees(), pending + 3);
    let graph = g.stream.end_capture().unwrap();
    let exec = graph.instantiate().unwrap();
    for _ in 0..5 {
        exec.launch(&g.stream).unwrap();
    }
    check_accumulated(&acc, 5, &[(1, 7, 3), (2, 5, 6)]);
    drop(graph); // the executable still holds the memory
    for _ in 0..5 {
        exec.launch(&g.stream).unwrap();
    }
    check_accumulated(&acc, 10, &[(1, 7, 3), (2, 5, 6)]);
    std::thread::sleep(Duration::from_millis(20));
    somalloc::reclaim_graph_frees().unwrap();
    g.stream.synchronize().unwrap();
    assert_eq!(g.used(), with_all, "freed while an executable graph may use it");
    assert_eq!(somalloc::pending_graph_frees(), pending + 3);
    drop(exec);
    reclaim_until("deferred frees", || somalloc::pending_graph_frees() == pending);
    g.stream.synchronize().unwrap();
    // The cache took its block back (a legitimate cached free now).
    tier.flush().unwrap();
    drop(acc);
    g.stream.synchronize().unwrap();
    other.synchronize().unwrap();
    assert_eq!(g.used(), start, "the deferred frees did not return the memory");
    g.no_new_drop_errors();
}

/// A buffer allocated inside the capture and alive at its end: never
/// launched, its drop frees nothing and records nothing; launched, it holds
/// the latest launch's result, relaunching frees and allocates it again,
/// its drop frees it on its stream (after the launch stream), and an
/// executable launched after the drop frees that launch's allocation when
/// it is dropped: the graph memory comes back after a trim.
#[test]
fn graph_outputs() {
    let Some(g) = setup("capture::graph_outputs") else {
        return;
    };
    let launch_stream = Stream::new(&g.dev).unwrap();
    g.dev.graph_mem_trim().unwrap();
    let graph_used_start = g.dev.graph_mem_stats().unwrap().used_current;

    // Never launched.
    g.stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    let mut out = DeviceBuffer::<u32>::new_in(N, &g.pool, &g.stream).unwrap();
    g.k.iota_u32(&mut out, 5, 9, &g.stream).unwrap();
    let graph = g.stream.end_capture().unwrap();
    let exec = graph.instantiate().unwrap();
    drop(out);
    drop((exec, graph));
    g.stream.synchronize().unwrap();
    g.no_new_drop_errors();

    // Launched.
    g.stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    let mut out = DeviceBuffer::<u32>::new(N, &g.stream).unwrap();
    let mut kept = DeviceBuffer::<u32>::new(N, &g.stream).unwrap();
    g.k.iota_u32(&mut out, 5, 9, &g.stream).unwrap();
    g.k.iota_u32(&mut kept, 3, 2, &g.stream).unwrap();
    let graph = g.stream.end_capture().unwrap();
    let exec = graph.instantiate().unwrap();
    let check = |buf: &DeviceBuffer<u32>, mul: u32, add: u32| {
        let host = buf.to_vec().unwrap();
        let bad = host
            .iter()
            .enumerate()
            .filter(|(i, w)| **w != iota_word(*i as u64, mul, add))
            .count();
        assert_eq!(bad, 0, "{bad} words of a graph output wrong");
    };
    for _ in 0..3 {
        exec.launch(&g.stream).unwrap();
        check(&out, 5, 9);
        check(&kept, 3, 2);
    }
    // The latest launch on another stream; the drop orders after it.
    let ev = Event::new(&g.dev).unwrap();
    ev.record(&g.stream).unwrap();
    launch_stream.wait_event(&ev).unwrap();
    exec.launch(&launch_stream).unwrap();
    drop(out);
    // Relaunch after the output was dropped: allocated again, freed by the
    // executable's drop.
    for _ in 0..3 {
        exec.launch(&launch_stream).unwrap();
    }
    ev.record(&launch_stream).unwrap();
    g.stream.wait_event(&ev).unwrap();
    check(&kept, 3, 2);
    drop((exec, graph));
    drop(kept);
    g.stream.synchronize().unwrap();
    launch_stream.synchronize().unwrap();
    g.dev.graph_mem_trim().unwrap();
    let graph_used = g.dev.graph_mem_stats().unwrap().used_current;
    assert_eq!(graph_used, graph_used_start, "graph memory left allocated");
    g.no_new_drop_errors();
}

/// `use_on` and event waits between a capturing and a non-capturing stream
/// are typed errors and the capture stays valid; fork/join within one
/// capture works and replays.
#[test]
fn use_on_across_the_edge_of_a_capture_is_refused() {
    let Some(g) = setup("capture::use_on_across_the_edge_of_a_capture_is_refused") else {
        return;
    };
    let other = Stream::new(&g.dev).unwrap();
    let start = g.used();
    let mut acc = g.accumulator();
    let mut outside = DeviceBuffer::<u32>::new_in(16, &g.pool, &other).unwrap();
    let outside_event = Event::new(&g.dev).unwrap();
    outside_event.record(&other).unwrap();
    g.stream.synchronize().unwrap();

    g.stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    let mut inside = DeviceBuffer::<u32>::new_in(N, &g.pool, &g.stream).unwrap();
    assert!(matches!(inside.use_on(&other), Err(Error::Capture { .. })));
    assert!(matches!(outside.use_on(&g.stream), Err(Error::Capture { .. })));
    assert!(matches!(
        g.stream.wait_event(&outside_event),
        Err(Error::Capture { .. })
    ));
    assert!(matches!(g.stream.synchronize(), Err(Error::Capture { .. })));
    assert_eq!(g.stream.capture_status().unwrap(), CaptureStatus::Active);
    assert_eq!(
        other.capture_status().unwrap(),
        CaptureStatus::None,
        "other joined the capture"
    );
    // Fork `other` into the capture, use the buffer there, join back.
    let fork = Event::new(&g.dev).unwrap();
    fork.record(&g.stream).unwrap();
    assert!(matches!(fork.synchronize(), Err(Error::Capture { .. })));
    let mut host = vec![0u32; N];
    assert!(matches!(
        inside.copy_to_host(&mut host),
        Err(Error::Capture { .. })
    ));
    assert!(matches!(inside.copy_from_host(&host), Err(Error::Capture { .. })));
    other.wait_event(&fork).unwrap();
    assert_eq!(other.capture_status().unwrap(), CaptureStatus::Active);
    inside.use_on(&other).unwrap();
    g.k.iota_u32(&mut inside, 4, 4, &other).unwrap();
    let join = Event::new(&g.dev).unwrap();
    join.record(&other).unwrap();
    g.stream.wait_event(&join).unwrap();
    g.k.axpy_u32(&mut acc, &inside, 1, &g.stream).unwrap();
    drop(inside); // in the graph, after the other stream's use
    let graph = g.stream.end_capture().unwrap();
    assert_eq!(other.capture_status().unwrap(), CaptureStatus::None);
    let exec = graph.instantiate().unwrap();
    for _ in 0..10 {
        exec.launch(&g.stream).unwrap();
    }
    check_accumulated(&acc, 10, &[(1, 4, 4)]);
    // After the capture the outside buffer works on both streams again.
    outside.use_on(&g.stream).unwrap();
    drop((exec, graph, outside, acc));
    g.stream.synchronize().unwrap();
    other.synchronize().unwrap();
    assert_eq!(g.used(), start);
    g.no_new_drop_errors();
}

/// A capture invalidated by a raw call: ending it is a typed error, a
/// buffer from before it dropped during it is freed once it ends, and the
/// stream works again.
#[test]
fn an_invalidated_capture_is_a_typed_error_and_the_stream_recovers() {
    let Some(g) = setup("capture::an_invalidated_capture_is_a_typed_error_and_the_stream_recovers") else {
        return;
    };
    let start = g.used();
    let before = DeviceBuffer::<u32>::new_in(N, &g.pool, &g.stream).unwrap();
    g.stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    let early = DeviceBuffer::<u32>::new_in(N, &g.pool, &g.stream).unwrap();
    assert!(
        raw::synchronize(&g.stream).is_err(),
        "synchronize inside a capture"
    );
    assert_eq!(g.stream.capture_status().unwrap(), CaptureStatus::Invalidated);
    assert!(DeviceBuffer::<u32>::new_in(N, &g.pool, &g.stream).is_err());
    drop(early); // made in the capture: never existed
    drop(before); // waits for the capture to end
    match g.stream.end_capture() {
        Err(Error::CaptureInvalidated { .. }) => {}
        other => panic!("expected CaptureInvalidated, got {other:?}"),
    }
    assert_eq!(g.stream.capture_status().unwrap(), CaptureStatus::None);
    let mut buf = DeviceBuffer::<u8>::new_in(1 << 16, &g.pool, &g.stream).unwrap();
    g.k.fill(&mut buf, 5, &g.stream).unwrap();
    assert_eq!(g.k.verify(&buf, 5, &g.stream).unwrap(), 0);
    drop(buf);
    reclaim_until("the free parked during the invalidated capture", || {
        somalloc::pending_graph_frees() == 0
    });
    g.stream.synchronize().unwrap();
    assert_eq!(g.used(), start);
    g.no_new_drop_errors();
}

/// The adaptors count host-side calls: a captured allocation once, at
/// capture, however often the graph replays; a graph output until its drop.
#[test]
fn adaptors_count_captured_allocations_once() {
    let Some(g) = setup("capture::adaptors_count_captured_allocations_once") else {
        return;
    };
    let start = g.used();
    let retry = Arc::new(RetryAdaptor::new(Arc::new(g.pool.clone())));
    let tracking = Arc::new(TrackingAdaptor::new(retry.clone(), Backtraces::Off));
    let limit = Arc::new(LimitingAdaptor::new(tracking.clone(), 64 << 20));
    let stats = Arc::new(StatisticsAdaptor::new(limit.clone()));
    let res: Arc<dyn MemoryResource> = stats.clone();
    let mut acc = g.accumulator();

    g.stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    let mut scratch = DeviceBuffer::<u32>::new_with(N, &res, &g.stream).unwrap();
    let mut out = DeviceBuffer::<u32>::new_with(N, &res, &g.stream).unwrap();
    g.k.iota_u32(&mut scratch, 11, 1, &g.stream).unwrap();
    g.k.axpy_u32(&mut acc, &scratch, 1, &g.stream).unwrap();
    g.k.iota_u32(&mut out, 13, 2, &g.stream).unwrap();
    drop(scratch);
    let graph = g.stream.end_capture().unwrap();
    let counts = |s: &StatisticsAdaptor| {
        let st = s.stats();
        (st.allocations, st.deallocations, st.outstanding, st.bytes_current)
    };
    assert_eq!(counts(&stats), (2, 1, 1, N * 4));
    assert_eq!(limit.allocated_bytes(), N * 4);
    assert_eq!(tracking.outstanding().len(), 1);
    let exec = graph.instantiate().unwrap();
    for _ in 0..100 {
        exec.launch(&g.stream).unwrap();
    }
    check_accumulated(&acc, 100, &[(1, 11, 1)]);
    assert_eq!(counts(&stats), (2, 1, 1, N * 4), "replays were counted");
    assert_eq!(out.to_vec().unwrap()[7], iota_word(7, 13, 2));
    drop(out);
    assert_eq!(counts(&stats), (2, 2, 0, 0));
    assert_eq!(limit.allocated_bytes(), 0);
    assert!(tracking.outstanding().is_empty());
    assert_eq!(retry.stats().out_of_memory, 0);
    drop((exec, graph, acc));
    g.stream.synchronize().unwrap();
    assert_eq!(g.used(), start);
    g.no_new_drop_errors();
}

/// Another library captures a stream that somalloc uses as a borrowed
/// stream (`Stream::from_raw`), with the raw calls: somalloc's count of
/// captures does not know, but a borrowed stream is always asked. The warm
/// cache stands aside; graph outputs of that graph are freed after a launch
/// and ignored (no error) when it never launched.
#[test]
fn a_capture_by_another_library_on_a_borrowed_stream() {
    let Some(g) = setup("capture::a_capture_by_another_library_on_a_borrowed_stream") else {
        return;
    };
    let start = g.used();
    // SAFETY: the owned stream outlives every use of the borrowed handle
    // (both are dropped at the end of this test, the borrowed one first).
    let borrowed = unsafe { Stream::from_raw(&g.dev, g.stream.as_raw()) }.unwrap();
    let tier = CacheTier::new(Arc::new(g.pool.clone()), CacheConfig::default()).unwrap();
    let cache = tier.for_stream(&borrowed).unwrap();
    let res: Arc<dyn MemoryResource> = cache.clone();
    let mut acc = g.accumulator();
    drop(DeviceBuffer::<u32>::new_with(N, &res, &borrowed).unwrap());
    assert_eq!(cache.stats().cached_blocks, 1);

    raw::begin_capture(&borrowed, CaptureMode::ThreadLocal).unwrap();
    assert!(borrowed.is_capturing().unwrap());
    let mut captured = DeviceBuffer::<u32>::new_with(N, &res, &borrowed).unwrap();
    g.k.iota_u32(&mut captured, 6, 5, &borrowed).unwrap();
    g.k.axpy_u32(&mut acc, &captured, 1, &borrowed).unwrap();
    drop(captured);
    let mut out = DeviceBuffer::<u32>::new_in(N, &g.pool, &borrowed).unwrap();
    g.k.iota_u32(&mut out, 8, 8, &borrowed).unwrap();
    let graph = raw::end_capture(&borrowed).unwrap();
    assert_eq!(cache.stats().captured, 1);
    assert_eq!(
        cache.stats().cached_blocks,
        1,
        "the captured free entered the cache"
    );
    let mut ordinary = DeviceBuffer::<u32>::new_with(N, &res, &borrowed).unwrap();
    g.k.fill(&mut ordinary, 33, &borrowed).unwrap();
    let exec = graph.instantiate(true).unwrap();
    for _ in 0..replays() {
        exec.launch(&borrowed).unwrap();
    }
    assert_eq!(g.k.verify(&ordinary, 33, &borrowed).unwrap(), 0);
    check_accumulated(&acc, replays(), &[(1, 6, 5)]);
    assert_eq!(out.to_vec().unwrap()[5], iota_word(5, 8, 8));
    drop(out); // after a launch: freed
    borrowed.synchronize().unwrap();
    drop((exec, graph));

    // A graph of that library that is never launched: its output's drop
    // has nothing to free and records nothing.
    raw::begin_capture(&borrowed, CaptureMode::ThreadLocal).unwrap();
    let never = DeviceBuffer::<u32>::new_in(N, &g.pool, &borrowed).unwrap();
    let graph = raw::end_capture(&borrowed).unwrap();
    drop(never);
    drop(graph);

    drop((ordinary, acc, res, cache));
    tier.flush().unwrap();
    drop(tier);
    borrowed.synchronize().unwrap();
    drop(borrowed);
    assert_eq!(g.used(), start);
    g.no_new_drop_errors();
}

/// A borrowed stream with the promise that it is captured only through
/// somalloc (`Stream::assume_captured_only_by_somalloc`), captured through
/// `Stream::begin_capture`: somalloc asks no capture question on it outside
/// the capture, yet the warm cache stands aside during it (the count of
/// captures begun through the API makes every stream ask), a buffer from
/// before the capture dropped inside it waits for the graph, and 1000
/// replays leave the ordinary buffer that took the cached block intact.
#[test]
fn a_promised_borrowed_stream_captured_through_somalloc() {
    let Some(g) = setup("capture::a_promised_borrowed_stream_captured_through_somalloc") else {
        return;
    };
    let start = g.used();
    // SAFETY: the owned stream outlives every use of the borrowed handle
    // (both are dropped at the end of this test, the borrowed one first).
    let borrowed = unsafe { Stream::from_raw(&g.dev, g.stream.as_raw()) }.unwrap();
    // SAFETY: this test captures the handle only through somalloc's
    // `begin_capture` (on `borrowed`).
    unsafe { borrowed.assume_captured_only_by_somalloc() };
    let tier = CacheTier::new(Arc::new(g.pool.clone()), CacheConfig::default()).unwrap();
    let cache = tier.for_stream(&borrowed).unwrap();
    let res: Arc<dyn MemoryResource> = cache.clone();
    let mut acc = g.accumulator();
    drop(DeviceBuffer::<u32>::new_with(N, &res, &borrowed).unwrap());
    assert_eq!(cache.stats().cached_blocks, 1);
    let warm_hits = cache.stats().hits;
    let before = DeviceBuffer::<u32>::new_in(N, &g.pool, &borrowed).unwrap();
    let pending = somalloc::pending_graph_frees();

    borrowed.begin_capture(CaptureMode::ThreadLocal).unwrap();
    assert_eq!(borrowed.capture_status().unwrap(), CaptureStatus::Active);
    let mut captured = DeviceBuffer::<u32>::new_with(N, &res, &borrowed).unwrap();
    g.k.iota_u32(&mut captured, 7, 3, &borrowed).unwrap();
    g.k.axpy_u32(&mut acc, &captured, 1, &borrowed).unwrap();
    let graph_addr = captured.as_raw();
    drop(captured);
    drop(before); // from outside the capture: waits for the graph
    assert_eq!(somalloc::pending_graph_frees(), pending + 1);
    let graph = borrowed.end_capture().unwrap();
    let st = cache.stats();
    assert_eq!((st.hits, st.captured, st.captured_live), (warm_hits, 1, 0));
    assert_eq!(st.cached_blocks, 1, "the captured free entered the cache");

    let mut ordinary = DeviceBuffer::<u32>::new_with(N, &res, &borrowed).unwrap();
    assert_eq!(cache.stats().hits, warm_hits + 1);
    assert_ne!(ordinary.as_raw(), graph_addr);
    g.k.fill(&mut ordinary, 55, &borrowed).unwrap();
    let exec = graph.instantiate().unwrap();
    for _ in 0..replays() {
        exec.launch(&borrowed).unwrap();
    }
    assert_eq!(g.k.verify(&ordinary, 55, &borrowed).unwrap(), 0);
    check_accumulated(&acc, replays(), &[(1, 7, 3)]);
    drop((exec, graph, ordinary, acc));
    reclaim_until("the free deferred by the graph", || {
        somalloc::pending_graph_frees() == pending
    });
    drop((res, cache));
    tier.flush().unwrap();
    drop(tier);
    borrowed.synchronize().unwrap();
    drop(borrowed);
    assert_eq!(g.used(), start);
    g.no_new_drop_errors();
}
