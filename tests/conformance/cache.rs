//! The conformance checks with the stream cache tier as the resource: sizes,
//! same-stream reuse behind a running kernel, cross-stream `use_on`, 8
//! threads with their own streams, the caps, flush, drop, out-of-memory
//! recovery, and an adaptor stack on top.

use std::sync::Arc;

use somalloc::adaptors::{Backtraces, LimitingAdaptor, RetryAdaptor, StatisticsAdaptor, TrackingAdaptor};
use somalloc::testkit::pattern_byte;
use somalloc::{
    CacheConfig, CacheTier, DeviceBuffer, Error, InvalidReason, MemoryResource, PoolProperties, Stream,
    StreamCache,
};

use crate::common::{
    eight_threads_never_overlap, say, setup, setup_with, spin_cycles, Ctx, ThreadAlloc, PER_THREAD, ROUNDS,
    THREADS,
};

const MIB: usize = 1 << 20;

fn tier(ctx: &Ctx, config: CacheConfig) -> Arc<CacheTier> {
    Arc::new(CacheTier::new(Arc::new(ctx.pool.clone()), config).unwrap())
}

fn res(cache: &Arc<StreamCache>) -> Arc<dyn MemoryResource> {
    cache.clone()
}

/// 0 bytes never reach the resource; 1 B … 64 MiB (the largest class) and
/// one size above it are filled and verified by kernels; freed blocks sit in
/// the cache (the pool still counts them used) until the flush.
#[test]
fn sizes_through_the_cache() {
    let Some(ctx) = setup("cache::sizes_through_the_cache") else {
        return;
    };
    // Without the footprint guard, so that the second round is all hits.
    let config = CacheConfig::default().headroom(None);
    let tier = tier(&ctx, config);
    let cache = tier.for_stream(&ctx.stream).unwrap();
    let r = res(&cache);
    let before = ctx.pool.stats().unwrap();
    let mut empty = DeviceBuffer::<u32>::new_with(0, &r, &ctx.stream).unwrap();
    assert!(empty.as_raw().is_null() && empty.is_empty());
    empty.memset(1).unwrap();
    drop(empty);
    let st = cache.stats();
    assert_eq!(
        (st.hits, st.misses, st.bypassed),
        (0, 0, 0),
        "0 bytes called the resource"
    );
    assert_eq!(ctx.pool.stats().unwrap(), before);

    let sizes = [
        1usize,
        4,
        255,
        257,
        1000,
        4096,
        1 << 20,
        3 * MIB + 5,
        64 * MIB,
        64 * MIB + 1,
    ];
    for round in 0..2 {
        for (i, &bytes) in sizes.iter().enumerate() {
            let mut buf = DeviceBuffer::<u8>::new_with(bytes, &r, &ctx.stream).unwrap();
            assert!(!buf.as_raw().is_null());
            let seed = (round * 100 + i) as u32;
            ctx.k.fill(&mut buf, seed, &ctx.stream).unwrap();
            assert_eq!(ctx.k.verify(&buf, seed, &ctx.stream).unwrap(), 0, "{bytes} bytes");
            if bytes <= 1 << 20 {
                let host = buf.to_vec().unwrap();
                assert!(host
                    .iter()
                    .enumerate()
                    .all(|(j, &b)| b == pattern_byte(j as u64, seed)));
            }
            let used = ctx.pool.stats().unwrap().used_current;
            assert!(used >= tier.block_size(bytes), "used {used} < block of {bytes}");
        }
    }
    let st = cache.stats();
    assert_eq!(st.bypassed, 2, "64 MiB + 1 goes straight to the pool");
    // 1, 4 and 255 B share the 256 B class: 7 misses in the first round,
    // and everything else hits.
    assert_eq!((st.misses, st.hits), (7, 11), "{st:?}");
    tier.flush().unwrap();
    assert_eq!(tier.cached_bytes(), 0);
    drop(r);
    ctx.finish(&[]);
}

/// A block freed behind a long kernel is handed out again at once on the
/// same stream (the same address, no driver call); the new owner's work is
/// ordered after the old kernel, so it sees only its own data. Then the
/// seeds' allocate-compute-free loop, 100 times with no synchronisation.
#[test]
fn same_stream_reuse_is_race_free() {
    let Some(ctx) = setup("cache::same_stream_reuse_is_race_free") else {
        return;
    };
    let tier = tier(&ctx, CacheConfig::default());
    let r = res(&tier.for_stream(&ctx.stream).unwrap());
    let bytes = 64 * MIB;
    let mut a = DeviceBuffer::<u8>::new_with(bytes, &r, &ctx.stream).unwrap();
    let a_addr = a.as_raw() as usize;
    ctx.k.spin(spin_cycles(50), &ctx.stream).unwrap();
    ctx.k.fill(&mut a, 1, &ctx.stream).unwrap(); // runs ~50 ms from now
    drop(a);
    let mut b = DeviceBuffer::<u8>::new_with(bytes, &r, &ctx.stream).unwrap();
    assert_eq!(b.as_raw() as usize, a_addr, "the cache hands the block back");
    ctx.k.fill(&mut b, 2, &ctx.stream).unwrap();
    assert_eq!(ctx.k.verify(&b, 2, &ctx.stream).unwrap(), 0);
    drop(b);

    const N: usize = 1 << 20;
    let mut results: Vec<DeviceBuffer<f32>> = (0..20)
        .map(|_| DeviceBuffer::new_with(N, &r, &ctx.stream).unwrap())
        .collect();
    for _ in 0..5 {
        for (i, result) in results.iter_mut().enumerate() {
            let mut data = DeviceBuffer::<f32>::new_with(N, &r, &ctx.stream).unwrap();
            ctx.k.fill(&mut data, i as u32, &ctx.stream).unwrap();
            if i % 2 == 1 {
                ctx.k.process(&data, &ctx.stream).unwrap();
            }
            result.copy_from_device(&data).unwrap();
            drop(data); // cached; the next iteration takes it at once
        }
    }
    let sqrt: Vec<f32> = (0..N).map(|i| (i as f32).sqrt()).collect();
    for (i, out) in results.iter().enumerate() {
        if i % 2 == 1 {
            assert!(
                out.to_vec().unwrap() == sqrt,
                "iteration {i}: processKernel output differs"
            );
        } else {
            assert_eq!(
                ctx.k.verify(out, i as u32, &ctx.stream).unwrap(),
                0,
                "iteration {i}"
            );
        }
    }
    drop(results);
    let st = tier.stats();
    assert!(st.total.hits >= 99, "{st}");
    say(&format!("cache::same_stream_reuse_is_race_free: {st}"));
    drop(r);
    drop(tier); // returns everything
    ctx.finish(&[]);
}

/// Allocate on A from A's cache, use on B, free on A: B sees A's data, and
/// the block goes back into A's cache only after A waits for B, so A's next
/// allocation (the same block) is not overwritten by B's late write. A's
/// cache refuses B, and B's cache never gets A's block.
#[test]
fn use_on_another_stream_then_free() {
    let Some(ctx) = setup("cache::use_on_another_stream_then_free") else {
        return;
    };
    let a = &ctx.stream;
    let b = ctx.new_stream();
    let tier = tier(&ctx, CacheConfig::default());
    let (ca, cb) = (tier.for_stream(a).unwrap(), tier.for_stream(&b).unwrap());
    let (ra, rb) = (res(&ca), res(&cb));
    let bytes = 16 * MIB;

    let mut buf = DeviceBuffer::<u8>::new_with(bytes, &ra, a).unwrap();
    ctx.k.spin(spin_cycles(30), a).unwrap(); // A's fill runs late
    ctx.k.fill(&mut buf, 7, a).unwrap();
    buf.use_on(&b).unwrap();
    assert_eq!(ctx.k.verify(&buf, 7, &b).unwrap(), 0, "B did not see A's fill");
    ctx.k.spin(spin_cycles(30), &b).unwrap();
    ctx.k.fill(&mut buf, 9, &b).unwrap(); // B writes late
    let addr = buf.as_raw() as usize;
    drop(buf); // A waits for B, then the block goes into A's cache

    // B's cache does not get A's block, and A's cache refuses B.
    let other = DeviceBuffer::<u8>::new_with(bytes, &rb, &b).unwrap();
    assert_ne!(other.as_raw() as usize, addr);
    assert!(matches!(
        DeviceBuffer::<u8>::new_with(bytes, &ra, &b),
        Err(Error::InvalidArgument {
            reason: InvalidReason::WrongStream,
            ..
        })
    ));
    assert!(matches!(
        ca.allocate(bytes, &b),
        Err(Error::InvalidArgument {
            reason: InvalidReason::WrongStream,
            ..
        })
    ));

    let mut c = DeviceBuffer::<u8>::new_with(bytes, &ra, a).unwrap();
    assert_eq!(c.as_raw() as usize, addr, "A's cache hands the block back");
    ctx.k.fill(&mut c, 11, a).unwrap();
    b.synchronize().unwrap();
    assert_eq!(
        ctx.k.verify(&c, 11, a).unwrap(),
        0,
        "B's late write landed in A's next allocation"
    );
    drop((c, other, ra, rb));
    tier.flush().unwrap();
    ctx.finish(&[&b]);
}

/// 8 threads, each with its own stream and its stream's cache, allocate,
/// fill, verify and free in rounds of the same sizes (so later rounds are
/// served from the caches); at a barrier all live buffers are checked for
/// overlap on the host and on the device.
#[test]
fn eight_threads_with_own_streams_never_overlap() {
    let Some(ctx) = setup("cache::eight_threads_with_own_streams_never_overlap") else {
        return;
    };
    let tier = tier(&ctx, CacheConfig::default());
    let ctx = Arc::new(ctx);
    let t = tier.clone();
    let streams = eight_threads_never_overlap(&ctx, move |stream: &Stream| -> ThreadAlloc {
        let (r, stream) = (res(&t.for_stream(stream).unwrap()), stream.clone());
        Box::new(move |bytes| DeviceBuffer::<u8>::new_with(bytes, &r, &stream).unwrap())
    });
    let st = tier.stats();
    assert_eq!(st.streams.len(), THREADS);
    assert!(
        st.total.hits >= (THREADS * (ROUNDS - 1) * PER_THREAD) as u64,
        "later rounds come from the caches: {st}"
    );
    say(&format!(
        "cache::eight_threads_with_own_streams_never_overlap: {st}"
    ));
    drop(tier); // returns every stream's blocks on its own stream
    let refs: Vec<&Stream> = streams.iter().collect();
    ctx.finish(&refs);
}

/// Cached bytes never go above the per-stream or the total cap; what would
/// goes back to the pool, whose used bytes are then the live plus the
/// cached bytes exactly.
#[test]
fn caps_are_honoured() {
    let Some(ctx) = setup("cache::caps_are_honoured") else {
        return;
    };
    let config = CacheConfig::default().per_stream_cap(3 * MIB).total_cap(5 * MIB);
    let tier = tier(&ctx, config);
    let streams = [ctx.stream.clone(), ctx.new_stream(), ctx.new_stream()];
    let start = ctx.pool.stats().unwrap().used_current;
    for s in &streams {
        let r = res(&tier.for_stream(s).unwrap());
        let bufs: Vec<_> = (0..4)
            .map(|_| DeviceBuffer::<u8>::new_with(MIB, &r, s).unwrap())
            .collect();
        drop(bufs);
        let st = tier.stats();
        assert!(st.total.cached_bytes <= 5 * MIB, "{st}");
        assert!(st.streams.iter().all(|x| x.cached_bytes <= 3 * MIB), "{st:?}");
    }
    let st = tier.stats();
    assert_eq!(
        st.total.cached_bytes,
        5 * MIB,
        "3 MiB on the first stream, 2 on the second"
    );
    assert!(st.total.spilled >= 7, "{st}");
    for s in &streams {
        s.synchronize().unwrap();
    }
    let used = ctx.pool.stats().unwrap().used_current - start;
    assert_eq!(
        used, st.total.cached_bytes,
        "the pool holds exactly the cached blocks"
    );
    tier.flush().unwrap();
    let refs: Vec<&Stream> = streams.iter().collect();
    ctx.finish(&refs);
}

/// After flush (or trim to 0) and a sync, the pool's used bytes are back to
/// where they began; trim keeps at most what it is told.
#[test]
fn flush_and_trim_return_the_cached_blocks() {
    let Some(ctx) = setup("cache::flush_and_trim_return_the_cached_blocks") else {
        return;
    };
    let tier = tier(&ctx, CacheConfig::default());
    let other = ctx.new_stream();
    for s in [&ctx.stream, &other] {
        let r = res(&tier.for_stream(s).unwrap());
        let mut bufs: Vec<_> = (1..=20)
            .map(|i| DeviceBuffer::<u8>::new_with(i * 100_000, &r, s).unwrap())
            .collect();
        for (i, b) in bufs.iter_mut().enumerate() {
            ctx.k.fill(b, i as u32, s).unwrap();
        }
        drop(bufs);
    }
    let cached = tier.cached_bytes();
    assert!(cached > 0);
    tier.trim(cached / 3).unwrap();
    assert!(tier.cached_bytes() <= cached / 3);
    ctx.stream.synchronize().unwrap();
    other.synchronize().unwrap();
    let used = ctx.pool.stats().unwrap().used_current;
    tier.flush().unwrap();
    assert_eq!(tier.cached_bytes(), 0);
    ctx.stream.synchronize().unwrap();
    other.synchronize().unwrap();
    assert!(ctx.pool.stats().unwrap().used_current < used);
    ctx.finish(&[&other]);
}

/// Dropping the tier returns everything; a stream cache that a buffer still
/// holds passes that buffer's free straight to the pool.
#[test]
fn dropping_the_tier_returns_everything() {
    let Some(ctx) = setup("cache::dropping_the_tier_returns_everything") else {
        return;
    };
    let tier = tier(&ctx, CacheConfig::default());
    let r = res(&tier.for_stream(&ctx.stream).unwrap());
    let mut kept = DeviceBuffer::<u8>::new_with(3 * MIB, &r, &ctx.stream).unwrap();
    for i in 1..=10 {
        drop(DeviceBuffer::<u8>::new_with(i * 50_000, &r, &ctx.stream).unwrap());
    }
    assert!(tier.cached_bytes() > 0);
    drop(tier);
    ctx.k.fill(&mut kept, 3, &ctx.stream).unwrap();
    assert_eq!(ctx.k.verify(&kept, 3, &ctx.stream).unwrap(), 0);
    drop(kept);
    drop(r);
    ctx.finish(&[]);
}

/// A pool with a maximum size, filled by cached blocks: a request of
/// another class misses, the pool refuses, the cache returns its blocks on
/// the same stream and the retry succeeds (the pool reuses them at once).
#[test]
fn out_of_memory_returns_cached_blocks_and_retries() {
    let props = PoolProperties::device().max_size(64 * MIB);
    let Some(ctx) = setup_with("cache::out_of_memory_returns_cached_blocks_and_retries", props) else {
        return;
    };
    // No footprint guard and no reuse of larger blocks: keep the blocks
    // cached until the pool says no.
    let config = CacheConfig::default().headroom(None).reuse_larger(None);
    let tier = tier(&ctx, config);
    let cache = tier.for_stream(&ctx.stream).unwrap();
    let r = res(&cache);
    let bufs: Vec<_> = (0..2)
        .map(|_| DeviceBuffer::<u8>::new_with(30 * MIB, &r, &ctx.stream).unwrap())
        .collect();
    drop(bufs);
    assert_eq!(tier.cached_bytes(), 60 * MIB);
    let mut big = DeviceBuffer::<u8>::new_with(20 * MIB, &r, &ctx.stream).unwrap();
    assert!(cache.stats().released >= 1, "{:?}", cache.stats());
    ctx.k.fill(&mut big, 5, &ctx.stream).unwrap();
    assert_eq!(ctx.k.verify(&big, 5, &ctx.stream).unwrap(), 0);
    // Nothing left to return: OutOfMemory with the size asked for.
    match DeviceBuffer::<u8>::new_with(60 * MIB, &r, &ctx.stream) {
        Err(Error::OutOfMemory { requested, .. }) => assert_eq!(requested, 60 * MIB),
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    drop(big);
    drop(r);
    tier.flush().unwrap();
    ctx.finish(&[]);
}

/// Statistics over tracking over a limit over retry over the tier over the
/// pool, through buffers that kernels fill and verify.
#[test]
fn an_adaptor_stack_over_the_tier() {
    let Some(ctx) = setup("cache::an_adaptor_stack_over_the_tier") else {
        return;
    };
    let tier = tier(&ctx, CacheConfig::default());
    let cache: Arc<dyn MemoryResource> = tier.for_stream(&ctx.stream).unwrap();
    let retry = Arc::new(
        RetryAdaptor::new(cache)
            .flush_on_oom(&tier)
            .trim_on_oom(&ctx.pool),
    );
    let limited = Arc::new(LimitingAdaptor::new(retry, 256 * MIB));
    let tracking = Arc::new(TrackingAdaptor::new(limited.clone(), Backtraces::Off));
    let stats = Arc::new(StatisticsAdaptor::new(tracking.clone()));
    let r: Arc<dyn MemoryResource> = stats.clone();
    for i in 0..50u32 {
        let bytes = 1000 + (i as usize % 5) * 300_000;
        let mut buf = DeviceBuffer::<u8>::new_with(bytes, &r, &ctx.stream).unwrap();
        ctx.k.fill(&mut buf, i, &ctx.stream).unwrap();
        assert_eq!(ctx.k.verify(&buf, i, &ctx.stream).unwrap(), 0);
        assert_eq!(tracking.outstanding_bytes(), bytes);
    }
    assert!(matches!(
        DeviceBuffer::<u8>::new_with(300 * MIB, &r, &ctx.stream),
        Err(Error::OutOfMemory { .. })
    ));
    let st = stats.stats();
    assert_eq!(
        (st.allocations, st.deallocations, st.failed_allocations),
        (50, 50, 1)
    );
    assert_eq!(limited.allocated_bytes(), 0);
    assert!(tier.stats().total.hits >= 45);
    drop(r);
    drop(stats);
    drop(tracking);
    drop(limited);
    drop(tier);
    ctx.finish(&[]);
}
