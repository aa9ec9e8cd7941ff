//! GPU-free tests of the cache tier over a fake upstream resource and fake
//! streams (see `crate::testing`): here the size classes, the caps, flush,
//! trim, drop, the footprint guard and out-of-memory recovery; seeded random
//! model runs in `model.rs`; stream capture in `capture.rs`; the fast paths
//! (the biased lock, buffers pinning their cache, larger blocks under the
//! footprint budget) in `fast.rs`.

use std::ffi::c_void;
use std::sync::Arc;

use super::*;
use crate::buffer::DeviceBuffer;
use crate::device::Device;
use crate::error::InvalidReason;
use crate::testing::{FakeResource, Rng};

mod capture;
mod fast;
mod model;
#[cfg(loom)]
mod models;
mod props;
mod schedules;

const KIB: usize = 1 << 10;

fn tier_over(fake: &Arc<FakeResource>, config: CacheConfig) -> CacheTier {
    let upstream: Arc<dyn MemoryResource> = fake.clone();
    CacheTier::new(upstream, config).unwrap()
}

fn stream(id: usize) -> Stream {
    Stream::fake(0x5000 + 16 * id, 0)
}

fn alloc(cache: &StreamCache, bytes: usize) -> usize {
    cache.allocate(bytes, &cache.stream).unwrap() as usize
}

fn free(cache: &StreamCache, addr: usize, bytes: usize) {
    // SAFETY: fake addresses from this cache, freed once, never used.
    unsafe { cache.deallocate(addr as *mut c_void, bytes, &cache.stream) }.unwrap()
}

#[test]
fn size_classes_bound_the_waste() {
    // Every request fits its class; the class is below request × 9/8 from
    // 256 B on (256 below); classes grow strictly and map to themselves.
    let check = |b: usize| {
        let idx = class_index(b);
        let size = class_size(idx);
        assert!(size >= b, "{b} -> {size}");
        if b > 256 {
            assert!(size * 8 < b * 9, "{b} -> {size}: more than 12.5 % waste");
        } else {
            assert_eq!(size, 256);
        }
        assert_eq!(class_index(size), idx, "class size {size} maps to another class");
        if idx > 0 {
            assert!(class_size(idx - 1) < b, "{b} would fit the class below");
        }
    };
    for b in 1..=(1 << 18) {
        check(b);
    }
    let mut rng = Rng(7);
    for _ in 0..200_000 {
        check(1 + rng.below(64 << 20));
    }
    for k in 8..40 {
        for d in [-1i64, 0, 1] {
            check(((1i64 << k) + d) as usize);
        }
    }
    for i in 1..400 {
        assert!(class_size(i) > class_size(i - 1));
    }
    // 8 classes per power of two, up to 64 MiB: 145 classes.
    assert_eq!(class_index(64 << 20), 144);
    assert_eq!(class_size(1), 288);
    assert_eq!(class_size(8), 512);
    assert_eq!(class_size(9), 576);
}

#[test]
fn block_size_and_config_checks() {
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, CacheConfig::default());
    assert_eq!(tier.block_size(1), 256);
    assert_eq!(tier.block_size(1000), 1024);
    assert_eq!(tier.block_size(1025), 1152);
    assert_eq!(tier.block_size(64 << 20), 64 << 20);
    assert_eq!(tier.block_size((64 << 20) + 1), (64 << 20) + 1);
    for bad in [0, 255, (1 << 40) + 1] {
        let upstream: Arc<dyn MemoryResource> = fake.clone();
        let config = CacheConfig::default().max_block_bytes(bad);
        assert!(matches!(
            CacheTier::new(upstream, config),
            Err(Error::InvalidArgument { .. })
        ));
    }
}

#[test]
fn a_freed_block_is_reused_on_its_stream_without_upstream_calls() {
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, CacheConfig::default());
    let s = stream(1);
    let cache = tier.for_stream(&s).unwrap();
    assert!(Arc::ptr_eq(&cache, &tier.for_stream(&s).unwrap()));
    let a = alloc(&cache, 1000);
    assert_eq!(
        fake.state().live[&a],
        (1024, s.as_raw() as usize),
        "class size, own stream"
    );
    free(&cache, a, 1000);
    assert_eq!(cache.cached_bytes(), 1024);
    let calls = fake.calls();
    for bytes in [1000, 1024, 993] {
        let b = alloc(&cache, bytes);
        assert_eq!(b, a, "same class: the cached block");
        free(&cache, b, bytes);
    }
    assert_eq!(fake.calls(), calls);
    let st = cache.stats();
    assert_eq!((st.hits, st.misses, st.cached_blocks), (3, 1, 1));
    // Another class misses.
    let c = alloc(&cache, 1025);
    assert_ne!(c, a);
    free(&cache, c, 1025);
    tier.flush().unwrap();
    assert!(fake.state().live.is_empty());
    assert_eq!(tier.stats().leased_bytes, 0);
    fake.assert_clean();
}

#[test]
fn a_cache_refuses_other_streams() {
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, CacheConfig::default());
    let (s, t) = (stream(1), stream(2));
    let cs = tier.for_stream(&s).unwrap();
    let ct = tier.for_stream(&t).unwrap();
    let a = alloc(&cs, 4096);
    assert!(matches!(
        cs.allocate(4096, &t),
        Err(Error::InvalidArgument { .. })
    ));
    // SAFETY: refused before anything is freed.
    let r = unsafe { cs.deallocate(a as *mut c_void, 4096, &t) };
    assert!(matches!(r, Err(Error::InvalidArgument { .. })));
    free(&cs, a, 4096);
    // The block cached on S is never handed to T.
    let b = alloc(&ct, 4096);
    assert_ne!(a, b);
    assert_eq!(cs.cached_bytes(), 4096);
    free(&ct, b, 4096);
    // A stream of another device is refused by the tier.
    assert!(matches!(
        tier.for_stream(&Stream::fake(0x9000, 1)),
        Err(Error::InvalidArgument { .. })
    ));
    // 0 bytes are refused, not passed on.
    assert!(matches!(cs.allocate(0, &s), Err(Error::InvalidArgument { .. })));
    drop(tier);
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

#[test]
fn the_default_streams_legacy_cached_per_thread_refused() {
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, CacheConfig::default());
    let dev = Device::fake(0);
    // SAFETY: fake device and upstream: the handles never reach a runtime.
    let (legacy, per_thread) = unsafe { (Stream::legacy_default(&dev), Stream::per_thread_default(&dev)) };
    assert!(
        !legacy.may_capture(),
        "the legacy stream is never asked about capture"
    );
    assert!(per_thread.may_capture() && per_thread.is_per_thread_default());
    let cache = tier.for_stream(&legacy).unwrap();
    let a = alloc(&cache, 4096);
    free(&cache, a, 4096);
    let calls = fake.calls();
    assert_eq!(alloc(&cache, 4096), a, "a hit on the legacy stream");
    assert_eq!(fake.calls(), calls);
    free(&cache, a, 4096);
    assert!(matches!(
        tier.for_stream(&per_thread),
        Err(Error::InvalidArgument {
            reason: InvalidReason::SpecialStreamHandle,
            ..
        })
    ));
    assert!(tier.allocate(4096, &per_thread).is_err());
    drop(tier);
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

#[test]
fn per_stream_cap_sends_the_excess_upstream() {
    let fake = FakeResource::new(None);
    let config = CacheConfig::default().per_stream_cap(5 * KIB);
    let tier = tier_over(&fake, config);
    let cache = tier.for_stream(&stream(1)).unwrap();
    let blocks: Vec<usize> = (0..4).map(|_| alloc(&cache, 2 * KIB)).collect();
    for &b in &blocks {
        free(&cache, b, 2 * KIB);
    }
    let st = cache.stats();
    assert_eq!((st.cached_bytes, st.cached_blocks, st.spilled), (4 * KIB, 2, 2));
    assert_eq!(fake.state().live.len(), 2, "two went back upstream");
    drop(tier);
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

#[test]
fn total_cap_is_shared_and_idle_slack_is_reclaimed() {
    let fake = FakeResource::new(None);
    let config = CacheConfig::default().total_cap(64 * KIB);
    let tier = tier_over(&fake, config);
    assert_eq!(tier.shared.granule, KIB);
    let (a, b) = (
        tier.for_stream(&stream(1)).unwrap(),
        tier.for_stream(&stream(2)).unwrap(),
    );
    // A caches 48 KiB, B then only 16 KiB of its 48.
    for cache in [&a, &b] {
        let blocks: Vec<usize> = (0..3).map(|_| alloc(cache, 16 * KIB)).collect();
        for blk in blocks {
            free(cache, blk, 16 * KIB);
        }
    }
    let st = tier.stats();
    assert_eq!(st.total.cached_bytes, 64 * KIB);
    assert!(st.leased_bytes <= 64 * KIB);
    assert_eq!((a.cached_bytes(), b.cached_bytes()), (48 * KIB, 16 * KIB));
    assert_eq!(b.stats().spilled, 2);
    // A takes its blocks back (hits) and keeps its credit as slack; B can
    // then cache up to the cap by reclaiming A's idle credit.
    let held: Vec<usize> = (0..3).map(|_| alloc(&a, 16 * KIB)).collect();
    assert_eq!(a.stats().credit_bytes, 48 * KIB);
    let more: Vec<usize> = (0..4).map(|_| alloc(&b, 16 * KIB)).collect();
    for blk in more {
        free(&b, blk, 16 * KIB);
    }
    assert_eq!(b.cached_bytes(), 64 * KIB, "all of the cap");
    assert_eq!(a.stats().credit_bytes, 0, "A's slack was reclaimed");
    for blk in held {
        free(&a, blk, 16 * KIB);
    }
    assert_eq!(a.cached_bytes(), 0, "no room left under the total cap");
    assert!(tier.stats().leased_bytes <= 64 * KIB);
    drop(tier);
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

#[test]
fn caps_of_zero_turn_caching_off() {
    let fake = FakeResource::new(None);
    for config in [
        CacheConfig::default().per_stream_cap(0),
        CacheConfig::default().total_cap(0),
    ] {
        let tier = tier_over(&fake, config);
        let cache = tier.for_stream(&stream(1)).unwrap();
        let a = alloc(&cache, 300);
        free(&cache, a, 300);
        assert_eq!(cache.cached_bytes(), 0);
        assert!(fake.state().live.is_empty());
    }
    fake.assert_clean();
}

#[test]
fn requests_above_the_largest_class_bypass_the_cache() {
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, CacheConfig::default().max_block_bytes(64 * KIB));
    let cache = tier.for_stream(&stream(1)).unwrap();
    let big = 64 * KIB + 1;
    let a = alloc(&cache, big);
    assert_eq!(fake.state().live[&a].0, big, "not rounded");
    free(&cache, a, big);
    assert!(fake.state().live.is_empty(), "not cached");
    assert_eq!(cache.stats().bypassed, 1);
    let b = alloc(&cache, 64 * KIB);
    free(&cache, b, 64 * KIB);
    assert_eq!(cache.cached_bytes(), 64 * KIB, "the largest class is cached");
    fake.assert_clean();
}

#[test]
fn flush_trim_and_remove_return_blocks_on_their_own_streams() {
    let fake = FakeResource::new(None);
    fake.enable_log();
    let tier = tier_over(&fake, CacheConfig::default());
    let streams: Vec<Stream> = (0..3).map(stream).collect();
    let caches: Vec<Arc<StreamCache>> = streams.iter().map(|s| tier.for_stream(s).unwrap()).collect();
    for (i, cache) in caches.iter().enumerate() {
        let blocks: Vec<(usize, usize)> = (0..8)
            .map(|j| (alloc(cache, (j + 1) * 1000 * (i + 1)), (j + 1) * 1000 * (i + 1)))
            .collect();
        for (blk, bytes) in blocks {
            free(cache, blk, bytes);
        }
    }
    let total = tier.cached_bytes();
    assert_eq!(fake.state().used, total);
    tier.trim(total / 2).unwrap();
    assert!(tier.cached_bytes() <= total / 2);
    assert_eq!(fake.state().used, tier.cached_bytes());
    caches[0].trim(0).unwrap();
    assert_eq!(caches[0].cached_bytes(), 0);
    assert!(tier.remove_stream(&streams[1]).unwrap());
    assert!(!tier.remove_stream(&streams[1]).unwrap());
    assert_eq!(caches[1].cached_bytes(), 0);
    // A removed stream's cache passes frees straight through.
    let x = alloc(&caches[1], 5000);
    free(&caches[1], x, 5000);
    assert_eq!(caches[1].cached_bytes(), 0);
    tier.flush().unwrap();
    let st = tier.stats();
    assert_eq!((st.total.cached_bytes, st.leased_bytes), (0, 0));
    assert_eq!(st.streams.len(), 2);
    let s = fake.state();
    assert!(s.live.is_empty() && s.used == 0);
    drop(s);
    // The fake checked that every free was on the block's own stream.
    fake.assert_clean();
}

#[test]
fn dropping_the_tier_returns_everything_and_detaches_held_caches() {
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, CacheConfig::default());
    let s = stream(1);
    let res: Arc<dyn MemoryResource> = tier.for_stream(&s).unwrap();
    let kept = DeviceBuffer::<u8>::new_with(3000, &res, &s).unwrap();
    for n in [1, 100, 5000, 70_000] {
        drop(DeviceBuffer::<u32>::new_with(n, &res, &s).unwrap());
    }
    assert_eq!(fake.state().live.len(), 5);
    drop(tier);
    assert_eq!(fake.state().live.len(), 1, "only the live buffer is left");
    drop(kept); // its cache is detached: straight upstream
    drop(res);
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

#[test]
fn the_tier_itself_is_a_resource_for_any_stream() {
    let fake = FakeResource::new(None);
    let tier = Arc::new(tier_over(&fake, CacheConfig::default()));
    let res: Arc<dyn MemoryResource> = tier.clone();
    let (s, t) = (stream(1), stream(2));
    let a = DeviceBuffer::<u8>::new_with(10_000, &res, &s).unwrap();
    let addr = a.as_raw();
    drop(a);
    let b = DeviceBuffer::<u8>::new_with(10_000, &res, &t).unwrap();
    assert_ne!(b.as_raw(), addr, "not S's block");
    let c = DeviceBuffer::<u8>::new_with(10_000, &res, &s).unwrap();
    assert_eq!(c.as_raw(), addr, "S's block, again on S");
    assert_eq!(tier.stats().streams.len(), 2);
    // A stream removed while a buffer of it lives: the free goes upstream.
    tier.remove_stream(&s).unwrap();
    drop(c);
    drop(b);
    tier.flush().unwrap();
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

#[test]
fn device_buffers_from_a_resource() {
    let fake = FakeResource::new(None);
    let res: Arc<dyn MemoryResource> = fake.clone();
    let s = stream(1);
    // 0 bytes: no call.
    let empty = DeviceBuffer::<u64>::new_with(0, &res, &s).unwrap();
    assert!(empty.as_raw().is_null() && empty.is_empty());
    drop(empty);
    assert_eq!(fake.state().allocs, 0);
    let buf = DeviceBuffer::<u64>::new_with(10, &res, &s).unwrap();
    assert_eq!(
        fake.state().live[&(buf.as_raw() as usize)],
        (80, s.as_raw() as usize)
    );
    // Overflow and a stream of another device are refused.
    assert!(matches!(
        DeviceBuffer::<u64>::new_with(usize::MAX / 4, &res, &s),
        Err(Error::InvalidArgument { .. })
    ));
    let other_device = Stream::fake(0x7000, 1);
    assert!(matches!(
        DeviceBuffer::<u8>::new_with(1, &res, &other_device),
        Err(Error::InvalidArgument { .. })
    ));
    // use_on to another device is refused for a resource buffer.
    let mut buf = buf;
    assert!(matches!(
        buf.use_on(&other_device),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(!buf.is_usable_on(&other_device));
    buf.release().unwrap();
    assert!(fake.state().live.is_empty());
    // An out-of-memory answer comes through unchanged.
    let small = FakeResource::new(Some(100));
    let res: Arc<dyn MemoryResource> = small.clone();
    assert!(matches!(
        DeviceBuffer::<u8>::new_with(101, &res, &s),
        Err(Error::OutOfMemory { requested: 101, .. })
    ));
    fake.assert_clean();
}

#[test]
fn the_footprint_guard_releases_before_growing() {
    let fake = FakeResource::new(None);
    fake.enable_log();
    let tier = tier_over(&fake, CacheConfig::default().headroom(Headroom::new(0, 0)));
    let cache = tier.for_stream(&stream(1)).unwrap();
    let a = alloc(&cache, 1 << 20);
    free(&cache, a, 1 << 20);
    let before = fake.state().log.as_ref().unwrap().len();
    let b = alloc(&cache, 2 << 20);
    let log = fake.state().log.clone().unwrap();
    // The cached 1 MiB went back before the 2 MiB came.
    assert_eq!(
        &log[before..].iter().map(|e| (e.0, e.2)).collect::<Vec<_>>(),
        &[(false, 1 << 20), (true, 2 << 20)]
    );
    assert_eq!(cache.stats().released, 1);
    free(&cache, b, 2 << 20);
    // Alternating 1 MiB and 2 MiB, one live at a time: the live peak is
    // 2 MiB and both blocks cached make 3 MiB. With 2 MiB of headroom both
    // stay cached (without, the guard would return one on every miss).
    let tier2 = tier_over(&fake, CacheConfig::default().headroom(Headroom::new(2 << 20, 0)));
    let c2 = tier2.for_stream(&stream(2)).unwrap();
    for _ in 0..3 {
        for bytes in [1 << 20, 2 << 20] {
            let x = alloc(&c2, bytes);
            free(&c2, x, bytes);
        }
    }
    let st = c2.stats();
    assert_eq!(
        (st.misses, st.hits, st.released),
        (2, 4, 0),
        "alternating sizes within the headroom"
    );
    drop((tier, tier2));
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

#[test]
fn out_of_memory_releases_own_then_other_streams_cached_blocks() {
    let fake = FakeResource::new(Some(4 << 20));
    let tier = tier_over(&fake, CacheConfig::default().headroom(None));
    let (a, b) = (
        tier.for_stream(&stream(1)).unwrap(),
        tier.for_stream(&stream(2)).unwrap(),
    );
    // A caches 3 MiB; a 2 MiB miss on A needs its own blocks back.
    let blocks: Vec<usize> = (0..3).map(|_| alloc(&a, 1 << 20)).collect();
    for blk in blocks {
        free(&a, blk, 1 << 20);
    }
    let x = alloc(&a, 2 << 20);
    assert!(a.stats().released >= 1);
    free(&a, x, 2 << 20);
    // B has nothing cached: A's blocks are released for it.
    assert_eq!(a.cached_bytes(), 2 << 20);
    let y = alloc(&b, 3 << 20);
    assert_eq!(a.cached_bytes(), 0);
    // When nothing helps: OutOfMemory with the size asked for.
    match b.allocate(3 << 20, &b.stream) {
        Err(Error::OutOfMemory { requested, .. }) => assert_eq!(requested, 3 << 20),
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    free(&b, y, 3 << 20);
    drop(tier);
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

#[test]
fn upstream_free_errors_are_reported_not_hidden() {
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, CacheConfig::default());
    let cache = tier.for_stream(&stream(1)).unwrap();
    let a = alloc(&cache, 5000);
    free(&cache, a, 5000);
    fake.fail_frees(true);
    assert!(matches!(tier.flush(), Err(Error::Vendor { .. })));
    assert!(matches!(cache.trim(0), Err(Error::Vendor { .. })));
    // The block whose free failed is kept, once, and freed by a later flush.
    let st = cache.stats();
    assert_eq!((st.cached_bytes, st.cached_blocks), (5120, 1));
    assert!(st.credit_bytes >= st.cached_bytes);
    assert_eq!(fake.state().live.len(), 1);
    fake.fail_frees(false);
    tier.flush().unwrap();
    assert_eq!(cache.cached_bytes(), 0);
    assert!(fake.state().live.is_empty());
    drop(cache);
    drop(tier);
    fake.assert_clean();
}

/// A miss whose headroom victims cannot be freed still gets its block;
/// the victims stay cached and the error is counted, not lost.
#[test]
fn a_miss_whose_victims_cannot_be_freed_still_allocates() {
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, CacheConfig::default().headroom(Headroom::new(0, 0)));
    let cache = tier.for_stream(&stream(2)).unwrap();
    let a = alloc(&cache, 1 << 20);
    free(&cache, a, 1 << 20);
    assert_eq!(cache.cached_bytes(), 1 << 20);
    let errors = crate::error::drop_errors().count;
    fake.fail_frees(true);
    // A miss of another class: the headroom wants the cached block gone.
    let b = alloc(&cache, 3000);
    assert!(
        crate::error::drop_errors().count > errors,
        "the failed free is counted"
    );
    assert_eq!(cache.cached_bytes(), 1 << 20, "the victim stays cached");
    fake.fail_frees(false);
    free(&cache, b, 3000);
    drop(cache);
    drop(tier);
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

/// A buffer from a stream cache whose free fails before anything is freed
/// (here the question of whether its stream captures) is given up: its
/// memory stays allocated and the error is counted, but the cache stops
/// counting it, so the cache is not kept alive for it. Before, the block
/// stayed pinned for ever: the removed stream's cache, its cached blocks
/// and the tier's shared state were never freed.
#[test]
fn a_buffer_whose_free_fails_before_freeing_does_not_keep_its_cache() {
    const DOMAIN: u64 = 0x5EED_0024;
    let fake = FakeResource::in_domain(None, DOMAIN);
    let tier = tier_over(&fake, CacheConfig::default());
    let s = Stream::fake_in(0x6600_0000, 0, DOMAIN);
    let cache = tier.for_stream(&s).unwrap();
    let kept = alloc(&cache, 4 * KIB);
    free(&cache, kept, 4 * KIB);
    let res: Arc<dyn MemoryResource> = cache.clone();
    let buf = DeviceBuffer::<u8>::new_with(1000, &res, &s).unwrap();
    let lost = buf.as_raw() as usize;
    assert_eq!(cache.stats().live_bytes, 1024);
    let weak = Arc::downgrade(&cache);
    drop(res);
    drop(cache);
    let errors = crate::error::drop_errors_here();
    crate::testing::arm(DOMAIN, 0, crate::testing::Fault::Vendor, false);
    drop(buf);
    let (injected, _) = crate::testing::disarm();
    assert_eq!(injected, 1, "the free's capture question failed");
    assert_eq!(
        crate::error::drop_errors_here(),
        errors + 1,
        "and the failure is counted"
    );
    let cache = weak.upgrade().expect("the tier still holds the cache");
    assert_eq!(
        cache.stats().live_bytes,
        0,
        "the given-up block is not live any more"
    );
    assert_eq!(cache.lock().pinned, 0, "nor pinned");
    drop(cache);
    assert!(tier.remove_stream(&s).unwrap());
    assert!(weak.upgrade().is_none(), "the removed stream's cache is gone");
    drop(tier);
    // Only the given-up block is still allocated: the cached one went back.
    let live: Vec<usize> = fake.state().live.keys().copied().collect();
    assert_eq!(live, vec![lost]);
}
