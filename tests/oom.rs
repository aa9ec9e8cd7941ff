//! Out of memory: allocate until the pool or the whole device refuses. The
//! refusal is a typed error, the pool stays usable afterwards, and nothing
//! leaks. The retry adaptor turns such a refusal into a success when one of
//! its steps (flushing a cache tier, trimming a pool) frees enough. (Its own
//! binary: exhausting the device must not run beside other tests. The tests
//! here take a lock for the same reason.)

mod support;

use std::sync::{Arc, MutexGuard};
use support::say;

use somalloc::adaptors::{RetryAdaptor, RetryStats};
use somalloc::testkit::TestKernels;
use somalloc::{
    CacheConfig, CacheTier, Device, DeviceBuffer, Error, MemPool, MemoryResource, PoolProperties, Stream,
};

const MIB: usize = 1 << 20;

/// What every test here starts from: the lock (held while it lives),
/// device 0, its test kernels and a stream.
struct Gpu {
    dev: Device,
    k: TestKernels,
    stream: Stream,
    _exclusive: MutexGuard<'static, ()>,
}

fn setup(test: &str) -> Option<Gpu> {
    let exclusive = support::exclusive();
    let dev = support::device_or_skip(test)?;
    Some(Gpu {
        k: TestKernels::load(&dev).unwrap(),
        stream: Stream::new(&dev).unwrap(),
        dev,
        _exclusive: exclusive,
    })
}

/// A new pool on `dev`, with an optional size cap and release threshold;
/// `None` after one SKIP line where the runtime has no size cap (HIP before
/// ROCm 6.2 says so with `Unsupported` instead of ignoring it).
fn pool(
    test: &str,
    dev: &Device,
    max_size: Option<usize>,
    release_threshold: Option<usize>,
) -> Option<MemPool> {
    let created = MemPool::create(
        dev,
        match max_size {
            Some(bytes) => PoolProperties::device().max_size(bytes),
            None => PoolProperties::device(),
        },
    );
    let pool = match created {
        Ok(p) => p,
        Err(e @ Error::Unsupported { .. }) if max_size.is_some() => {
            say(&format!("SKIP {test}: no pool size cap on this runtime ({e})"));
            return None;
        }
        Err(e) => panic!("{test}: create pool: {e}"),
    };
    if let Some(t) = release_threshold {
        pool.set_release_threshold(t).unwrap();
    }
    Some(pool)
}

/// Calls `alloc` until the first error (at most `limit` times); returns the
/// buffers and the error.
fn fill_up(
    limit: usize,
    alloc: impl Fn() -> Result<DeviceBuffer<u8>, Error>,
) -> (Vec<DeviceBuffer<u8>>, Error) {
    let mut held = Vec::new();
    for _ in 0..limit {
        match alloc() {
            Ok(b) => held.push(b),
            Err(e) => return (held, e),
        }
    }
    panic!("no out-of-memory after {limit} allocations");
}

/// Fills `buf` by kernel and checks every byte.
fn assert_usable(k: &TestKernels, buf: &mut DeviceBuffer<u8>, seed: u32, stream: &Stream) {
    k.fill(buf, seed, stream).unwrap();
    assert_eq!(k.verify(buf, seed, stream).unwrap(), 0, "seed {seed}");
}

/// After the frees enqueued on `stream`, the pool has nothing in use.
fn assert_drained(pool: &MemPool, stream: &Stream) {
    stream.synchronize().unwrap();
    let s = pool.stats().unwrap();
    assert_eq!(s.used_current, 0, "{s}");
}

/// A retry adaptor's (out of memory, recovered, step errors).
fn counts(s: RetryStats) -> (u64, u64, u64) {
    (s.out_of_memory, s.recovered, s.step_errors)
}

#[test]
fn capped_pool_until_out_of_memory() {
    let test = "oom::capped_pool_until_out_of_memory";
    let Some(gpu) = setup(test) else { return };
    let Gpu { dev, k, stream, .. } = &gpu;
    let cap = 256 * MIB;
    let Some(pool) = pool(test, dev, Some(cap), None) else {
        return;
    };
    let (held, e) = fill_up(1000, || DeviceBuffer::new_in(16 * MIB, &pool, stream));
    match &e {
        Error::OutOfMemory {
            requested,
            stats: Some(s),
            arena: None,
        } => {
            assert_eq!(*requested, 16 * MIB);
            assert!(s.reserved_current <= cap, "reserved beyond the cap: {s}");
        }
        other => panic!("expected OutOfMemory with stats, got {other}"),
    }
    assert!(
        (12..=16).contains(&held.len()),
        "{} chunks of 16 MiB in a 256 MiB pool",
        held.len()
    );
    say(&format!(
        "{test}: {} x 16 MiB fit under the 256 MiB cap, then: {e}",
        held.len()
    ));
    drop(held);
    assert_drained(&pool, stream);
    // Usable again, up to the cap.
    let (mut again, _) = fill_up(1000, || DeviceBuffer::new_in(16 * MIB, &pool, stream));
    assert!(again.len() >= 12);
    assert_usable(k, &mut again[0], 3, stream);
    drop(again);
    assert_drained(&pool, stream);
}

#[test]
fn whole_device_until_out_of_memory() {
    let test = "oom::whole_device_until_out_of_memory";
    let Some(gpu) = setup(test) else { return };
    let Gpu { dev, k, stream, .. } = &gpu;
    let pool = pool(test, dev, None, Some(0)).unwrap();
    let free_before = dev.free_memory().unwrap();
    let chunk = 1usize << 30;
    let (held, e) = fill_up(4096, || DeviceBuffer::new_in(chunk, &pool, stream));
    assert!(
        matches!(e, Error::OutOfMemory { requested, .. } if requested == chunk),
        "{e}"
    );
    let expected = free_before / chunk;
    assert!(
        held.len() + 2 >= expected,
        "only {} GiB before OOM with {expected} GiB free",
        held.len()
    );
    say(&format!(
        "{test}: {} GiB allocated of {} GiB free, then: {e}",
        held.len(),
        free_before >> 30
    ));
    // The device is full: a small allocation from another pool may fail too,
    // and must fail typed.
    match DeviceBuffer::<u8>::new(64 * MIB, stream) {
        Ok(b) => drop(b),
        Err(Error::OutOfMemory { .. }) => {}
        Err(other) => panic!("expected OutOfMemory or success, got {other}"),
    }
    drop(held);
    stream.synchronize().unwrap();
    let s = pool.stats().unwrap();
    assert_eq!(s.used_current, 0, "{s}");
    assert_eq!(
        s.reserved_current, 0,
        "threshold 0 keeps memory after a sync: {s}"
    );
    let free_after = dev.free_memory().unwrap();
    assert!(
        free_after + 256 * MIB >= free_before,
        "leaked: {free_before} free before, {free_after} after"
    );
    let mut b = DeviceBuffer::<u8>::new_in(chunk, &pool, stream).unwrap();
    assert_usable(k, &mut b, 4, stream);
    drop(b);
    assert_drained(&pool, stream);
}

/// A capped pool is taken whole by buffers of one stream's cache, which are
/// then freed: the blocks stay in the cache and the pool still counts them
/// used. An allocation from the pool on another stream is refused; through a
/// retry adaptor that flushes the tier it succeeds, and the memory it gets
/// is usable.
#[test]
fn retry_recovers_by_flushing_the_cache_tier() {
    let test = "oom::retry_recovers_by_flushing_the_cache_tier";
    let Some(gpu) = setup(test) else { return };
    let Gpu { dev, k, stream, .. } = &gpu;
    let chunk = 16 * MIB;
    let Some(pool) = pool(test, dev, Some(256 * MIB), None) else {
        return;
    };
    let tier = Arc::new(CacheTier::new(Arc::new(pool.clone()), CacheConfig::default()).unwrap());
    assert_eq!(tier.block_size(chunk), chunk);
    let (s1, s2) = (stream, &Stream::new(dev).unwrap());
    let c1: Arc<dyn MemoryResource> = tier.for_stream(s1).unwrap();
    let (mut held, refusal) = fill_up(64, || DeviceBuffer::new_with(chunk, &c1, s1));
    for (i, b) in held.iter_mut().enumerate() {
        k.fill(b, i as u32, s1).unwrap();
    }
    assert!(matches!(refusal, Error::OutOfMemory { .. }), "{refusal}");
    let n = held.len();
    assert!(n >= 12, "{n} x 16 MiB in a 256 MiB pool");
    drop(held);
    assert_eq!(tier.stats().total.cached_bytes, n * chunk);

    let plain: Arc<dyn MemoryResource> = Arc::new(pool.clone());
    let bare = Arc::new(RetryAdaptor::new(plain.clone()));
    let r: Arc<dyn MemoryResource> = bare.clone();
    assert!(
        matches!(
            DeviceBuffer::<u8>::new_with(chunk, &r, s2),
            Err(Error::OutOfMemory { .. })
        ),
        "the pool had room although the cache holds all of it"
    );
    assert_eq!(counts(bare.stats()), (1, 0, 0));

    let retry = Arc::new(RetryAdaptor::new(plain).flush_on_oom(&tier));
    let r: Arc<dyn MemoryResource> = retry.clone();
    let mut b = DeviceBuffer::<u8>::new_with(chunk, &r, s2).unwrap();
    assert_eq!(counts(retry.stats()), (1, 1, 0));
    assert_eq!(tier.stats().total.cached_bytes, 0, "the flush emptied the tier");
    assert_usable(k, &mut b, 1000, s2);
    say(&format!(
        "{test}: {n} x 16 MiB cached, a direct allocation refused, then granted after the flush"
    ));
    drop(b);
    drop(tier);
    s1.synchronize().unwrap();
    assert_drained(&pool, s2);
}

/// One pool keeps the whole device reserved after its buffers are freed
/// (release threshold `usize::MAX`); another pool asks for 4 GiB through a
/// retry adaptor that trims the first pool. The request is granted and the
/// memory is usable, by one of two paths, and the test checks the one taken:
/// either the runtime refuses, the trim releases the first pool and the
/// retry succeeds; or the runtime takes the first pool's unused memory by
/// itself (the CUDA driver does: it reclaims unused pool memory when the
/// device is full, whatever the release threshold), so the first pool gives
/// up at least the 4 GiB and the adaptor sees no out-of-memory.
#[test]
fn retry_with_trim_when_another_pool_holds_the_device() {
    let test = "oom::retry_with_trim_when_another_pool_holds_the_device";
    let Some(gpu) = setup(test) else { return };
    let Gpu { dev, k, stream, .. } = &gpu;
    let hog = pool(test, dev, None, Some(usize::MAX)).unwrap();
    let (held, e) = fill_up(4096, || DeviceBuffer::new_in(1 << 30, &hog, stream));
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
    let gib = held.len();
    drop(held);
    stream.synchronize().unwrap();
    let s = hog.stats().unwrap();
    assert_eq!(s.used_current, 0, "{s}");
    let reserved = s.reserved_current;
    assert!(reserved >= gib << 30, "the pool kept its memory: {s}");

    let other = pool(test, dev, None, None).unwrap();
    let want = 4usize << 30;
    let retry = Arc::new(RetryAdaptor::new(Arc::new(other.clone())).trim_on_oom(&hog));
    let r: Arc<dyn MemoryResource> = retry.clone();
    let mut b = DeviceBuffer::<u8>::new_with(want, &r, stream).unwrap();
    let kept = hog.stats().unwrap().reserved_current;
    let path = if retry.stats().out_of_memory == 0 {
        assert_eq!(counts(retry.stats()), (0, 0, 0));
        assert!(
            kept + want <= reserved,
            "4 GiB granted on a full device, but the other pool still holds {kept} of {reserved} bytes"
        );
        "granted at once: the runtime took the unused memory of the other pool itself"
    } else {
        assert_eq!(counts(retry.stats()), (1, 1, 0));
        assert_eq!(kept, 0, "the trim released the other pool");
        "refused, then granted after the trim"
    };
    assert_usable(k, &mut b, 6, stream);
    say(&format!(
        "{test}: one pool kept {gib} GiB reserved; 4 GiB from another: {path} (first pool now {} MiB)",
        kept >> 20
    ));
    drop(b);
    assert_drained(&other, stream);
}
