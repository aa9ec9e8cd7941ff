//! The tier under stream capture (fake streams report a capture; see
//! `crate::graph`).

use std::ffi::c_void;
use std::sync::Arc;

use super::*;
use crate::graph::{pending_graph_frees, reclaim_graph_frees, CaptureStatus};

/// Calls `reclaim_graph_frees` until `done` holds (other tests drain the
/// same process-wide queue concurrently), for at most two seconds.
fn reclaim_until(done: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(2),
            "deferred frees did not happen"
        );
        let _ = reclaim_graph_frees();
        std::thread::yield_now();
    }
}

#[test]
fn a_capturing_stream_never_gets_or_gives_cached_blocks() {
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, CacheConfig::default());
    let s = stream(40);
    let cache = tier.for_stream(&s).unwrap();
    // Warm: one cached block, one live block from before the capture.
    let warm = alloc(&cache, 4096);
    free(&cache, warm, 4096);
    let before_capture = alloc(&cache, 8000);
    assert_eq!(cache.stats().hits, 0);
    let (allocs0, frees0) = fake.calls();

    s.set_fake_capture(CaptureStatus::Active, 11);
    // A captured allocation of the cached size: upstream, not the cached block.
    let g = alloc(&cache, 4096);
    assert_ne!(g, warm, "a cached block was handed into a capture");
    assert_eq!(fake.calls(), (allocs0 + 1, frees0));
    let st = cache.stats();
    assert_eq!((st.hits, st.captured, st.captured_live), (0, 1, 1));
    assert_eq!(st.cached_blocks, 1);
    // Above the classes: upstream too, counted as captured.
    let big = alloc(&cache, 100 << 20);
    assert_eq!(cache.stats().captured, 2);
    // Freed in the capture: upstream, never cached.
    free(&cache, g, 4096);
    free(&cache, big, 100 << 20);
    // A block from before the capture freed in it: upstream too.
    free(&cache, before_capture, 8000);
    assert_eq!(fake.calls(), (allocs0 + 2, frees0 + 3));
    let st = cache.stats();
    assert_eq!((st.cached_blocks, st.captured_live, st.live_bytes), (1, 0, 0));
    // Flush and trim leave a capturing stream alone.
    cache.flush().unwrap();
    tier.flush().unwrap();
    tier.trim(0).unwrap();
    assert_eq!(cache.stats().cached_blocks, 1);

    s.set_fake_capture(CaptureStatus::None, 0);
    assert_eq!(
        alloc(&cache, 4096),
        warm,
        "the cached block is served again after the capture"
    );
    assert_eq!(cache.stats().hits, 1);
    free(&cache, warm, 4096);
    drop(tier);
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

#[test]
fn a_block_allocated_in_a_capture_is_never_cached_after_it() {
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, CacheConfig::default());
    let s = stream(41);
    s.set_fake_capture(CaptureStatus::Active, 12);
    // Through the tier as a resource (the registry path) and the stream's cache.
    let tier_res: &dyn MemoryResource = &tier;
    let a = tier_res.allocate(5000, &s).unwrap() as usize;
    let cache = tier.for_stream(&s).unwrap();
    let b = alloc(&cache, 300 << 20); // above the classes
    assert_eq!(cache.stats().captured_live, 2);
    // The capture ends; the graph outputs are freed later.
    s.set_fake_capture(CaptureStatus::None, 0);
    // SAFETY: fake addresses from this tier, freed once.
    unsafe { tier_res.deallocate(a as *mut c_void, 5000, &s) }.unwrap();
    free(&cache, b, 300 << 20);
    let st = cache.stats();
    assert_eq!((st.cached_blocks, st.captured_live, st.captured), (0, 0, 2));
    assert!(fake.state().live.is_empty(), "graph memory went back upstream");
    // An ordinary pair afterwards is cached as usual, at another address.
    let c = alloc(&cache, 5000);
    free(&cache, c, 5000);
    assert_eq!(cache.stats().cached_blocks, 1);
    assert_ne!(c, a);
    fake.assert_clean();
}

#[test]
fn recovery_from_out_of_memory_skips_a_capturing_stream() {
    let fake = FakeResource::new(Some(4 << 20));
    let tier = tier_over(&fake, CacheConfig::default().headroom(None));
    let (sa, sb) = (stream(42), stream(43));
    let (a, b) = (tier.for_stream(&sa).unwrap(), tier.for_stream(&sb).unwrap());
    let blocks: Vec<usize> = (0..3).map(|_| alloc(&a, 1 << 20)).collect();
    for blk in blocks {
        free(&a, blk, 1 << 20);
    }
    assert_eq!(a.cached_bytes(), 3 << 20);
    // A is capturing: B's miss may not free A's blocks (into A's capture).
    sa.set_fake_capture(CaptureStatus::Active, 13);
    assert!(matches!(b.allocate(2 << 20, &sb), Err(Error::OutOfMemory { .. })));
    assert_eq!(a.cached_bytes(), 3 << 20);
    // A captured allocation that runs out does not free A's own blocks either.
    assert!(matches!(a.allocate(2 << 20, &sa), Err(Error::OutOfMemory { .. })));
    assert_eq!(a.cached_bytes(), 3 << 20);
    sa.set_fake_capture(CaptureStatus::None, 0);
    let y = alloc(&b, 2 << 20);
    assert!(a.cached_bytes() < 3 << 20);
    free(&b, y, 2 << 20);
    drop(tier);
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

#[test]
fn dropping_the_tier_during_a_capture_defers_the_streams_blocks() {
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, CacheConfig::default());
    let s = stream(44);
    let cache = tier.for_stream(&s).unwrap();
    let blocks: Vec<usize> = (1..=3).map(|i| alloc(&cache, i * 1000)).collect();
    for (i, blk) in blocks.into_iter().enumerate() {
        free(&cache, blk, (i + 1) * 1000);
    }
    s.set_fake_capture(CaptureStatus::Active, 14);
    drop(tier);
    assert_eq!(fake.state().live.len(), 3, "freed into a capture");
    // Held in the queue (nobody can run them while the stream captures).
    assert!(pending_graph_frees() >= 3);
    // The held cache now passes through.
    let x = alloc(&cache, 1000);
    free(&cache, x, 1000);
    assert_eq!(cache.stats().cached_blocks, 0);
    // Still capturing: the queue keeps them.
    let _ = reclaim_graph_frees();
    assert_eq!(fake.state().live.len(), 3);
    s.set_fake_capture(CaptureStatus::None, 0);
    reclaim_until(|| fake.state().live.is_empty());
    fake.assert_clean();
}

#[test]
fn device_buffers_under_capture() {
    let fake = FakeResource::new(None);
    let res: Arc<dyn MemoryResource> = fake.clone();
    let s = stream(45);
    let other = stream(46);
    let outside = DeviceBuffer::<u32>::new_with(100, &res, &s).unwrap();
    let addr_outside = outside.as_raw() as usize;
    s.set_fake_capture(CaptureStatus::Active, 15);
    // use_on between a capturing and a non-capturing stream is refused.
    let mut inside = DeviceBuffer::<u32>::new_with(100, &res, &s).unwrap();
    assert!(matches!(inside.use_on(&other), Err(Error::Capture { .. })));
    let mut outside_other = DeviceBuffer::<u8>::new_with(10, &res, &other).unwrap();
    assert!(matches!(outside_other.use_on(&s), Err(Error::Capture { .. })));
    // Two captures do not mix either.
    other.set_fake_capture(CaptureStatus::Active, 16);
    assert!(matches!(inside.use_on(&other), Err(Error::Capture { .. })));
    other.set_fake_capture(CaptureStatus::None, 0);
    // Synchronising a capturing stream, and the synchronous host copies
    // (whose host memory the graph would use at every launch), are refused
    // before the runtime sees them.
    assert!(matches!(s.synchronize(), Err(Error::Capture { .. })));
    let mut host = vec![0u32; 100];
    assert!(matches!(inside.copy_from_host(&host), Err(Error::Capture { .. })));
    assert!(matches!(
        inside.copy_to_host(&mut host),
        Err(Error::Capture { .. })
    ));
    assert!(matches!(inside.to_vec(), Err(Error::Capture { .. })));
    // Allocated and freed in the capture: freed now (a graph free node).
    drop(inside);
    assert_eq!(fake.state().live.len(), 2);
    drop(outside_other);
    // The capture is invalidated: a buffer from before it, dropped now,
    // waits for the capture to end (it made no graph).
    s.set_fake_capture(CaptureStatus::Invalidated, 15);
    drop(outside);
    assert!(fake.state().live.contains_key(&addr_outside));
    let _ = reclaim_graph_frees();
    assert!(fake.state().live.contains_key(&addr_outside));
    s.set_fake_capture(CaptureStatus::None, 0);
    reclaim_until(|| fake.state().live.is_empty());
    fake.assert_clean();
}

/// Graph memory allocated through the tier in a capture, on a stream that
/// is then removed and registered again, is freed through the new cache:
/// it must not be cached (a later allocation would get memory that the
/// graph allocates again at every launch).
#[test]
fn graph_memory_of_a_removed_stream_is_not_cached_by_its_next_cache() {
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, CacheConfig::default());
    let s = stream(57);
    let res: &dyn MemoryResource = &tier;
    s.set_fake_capture(CaptureStatus::Active, 27);
    let a = res.allocate(5000, &s).unwrap() as usize;
    s.set_fake_capture(CaptureStatus::None, 0);
    tier.remove_stream(&s).unwrap();
    let b = res.allocate(100, &s).unwrap() as usize;
    // SAFETY: fake addresses from this tier, freed once.
    unsafe { res.deallocate(a as *mut c_void, 5000, &s) }.unwrap();
    assert_eq!(
        tier.for_stream(&s).unwrap().stats().cached_blocks,
        0,
        "graph memory was cached"
    );
    let c = res.allocate(5000, &s).unwrap() as usize;
    assert_ne!(c, a, "graph memory handed out again");
    // SAFETY: as above.
    unsafe {
        res.deallocate(b as *mut c_void, 100, &s).unwrap();
        res.deallocate(c as *mut c_void, 5000, &s).unwrap();
    }
    drop(tier);
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

/// `remove_stream` whose runtime call fails (here the capture query) must
/// not leave a detached cache holding blocks: a hit would hand one out from
/// a cache that the tier no longer keeps alive for pinned buffers.
#[test]
fn a_failed_remove_stream_leaves_no_blocks_in_the_detached_cache() {
    use crate::testing::{arm, disarm, Fault};
    let domain = 0x5051_0001;
    let fake = FakeResource::in_domain(None, domain);
    let tier = tier_over(&fake, CacheConfig::default());
    let s = Stream::fake_in(0x5000 + 16 * 48, 0, domain);
    let cache = tier.for_stream(&s).unwrap();
    let a = alloc(&cache, 4096);
    free(&cache, a, 4096);
    arm(domain, 0, Fault::Vendor, false);
    let r = tier.remove_stream(&s);
    assert_eq!(disarm().0, 1);
    assert!(matches!(r, Err(Error::Vendor { .. })));
    assert!(
        !cache.lock().detached || cache.stats().cached_blocks == 0,
        "a detached cache kept its blocks"
    );
    drop((cache, tier));
    // Its blocks wait in the deferred-free queue (the stream's capture
    // state was not known) and go back at the next safe point.
    reclaim_until(|| fake.state().live.is_empty());
    fake.assert_clean();
}

/// A deferred free of a pinned block whose upstream free fails did
/// nothing: the block stays pinned, so its cache (detached, with no other
/// owner) stays alive for the retry, which frees it. Before, the failed
/// attempt unpinned the block and could drop the cache, and the retry then
/// reached into the freed cache.
#[test]
fn a_deferred_pinned_free_that_fails_keeps_its_cache_for_the_retry() {
    let fake = FakeResource::new(None);
    // Cap 0: every free goes upstream.
    let tier = tier_over(&fake, CacheConfig::default().per_stream_cap(0));
    let s = stream(47);
    let cache = tier.for_stream(&s).unwrap();
    let res: Arc<dyn MemoryResource> = cache.clone();
    let buf = DeviceBuffer::<u8>::new_with(3000, &res, &s).unwrap();
    let addr = buf.as_raw() as usize;
    // Dropped during a capture that made no graph: deferred until it ends.
    s.set_fake_capture(CaptureStatus::Invalidated, 17);
    drop(buf);
    // Nothing holds the cache but the pinned block.
    let weak = Arc::downgrade(&cache);
    drop((res, cache));
    assert!(tier.remove_stream(&s).unwrap());
    drop(tier);
    assert!(weak.upgrade().is_some(), "pinned by the deferred block");
    fake.fail_frees(true);
    s.set_fake_capture(CaptureStatus::None, 0);
    reclaim_until(|| fake.state().failed_frees.contains(&addr));
    assert!(
        weak.upgrade().is_some(),
        "a failed attempt keeps the block pinned and its cache alive"
    );
    assert!(fake.state().live.contains_key(&addr));
    fake.fail_frees(false);
    reclaim_until(|| !fake.state().live.contains_key(&addr));
    // The retry freed it, and the cache goes with it: the reclaim that made
    // the retry drops the deferred block (the last hold on the cache) just
    // after the upstream free returns. That reclaim may run on another
    // test's thread, so the cache may outlive the free by a moment, never
    // for good (`reclaim_until` fails after 2 s).
    reclaim_until(|| weak.upgrade().is_none());
}

/// Graph memory that a stream's cache handed out, freed through that cache
/// after the stream was removed, is forgotten everywhere: the tier's record
/// for the removed stream, or the stream's next cache that took it over.
/// Before, the old cache freed it without looking, and the record stayed
/// for ever (the next cache would refuse to cache a later block that the
/// pool happened to place at that address).
#[test]
fn graph_memory_freed_through_a_removed_streams_cache_is_forgotten() {
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, CacheConfig::default());
    let s = stream(58);
    let old = tier.for_stream(&s).unwrap();
    s.set_fake_capture(CaptureStatus::Active, 28);
    let a = alloc(&old, 5000);
    let b = alloc(&old, 7000);
    s.set_fake_capture(CaptureStatus::None, 0);
    assert!(tier.remove_stream(&s).unwrap());
    assert_eq!(
        lock(&tier.shared.captured_of_removed)[&(s.as_raw() as usize)].len(),
        2
    );
    // Through the old handle while the stream has no cache: the record goes.
    free(&old, a, 5000);
    assert_eq!(
        lock(&tier.shared.captured_of_removed)[&(s.as_raw() as usize)].len(),
        1
    );
    assert_eq!(old.stats().live_bytes, 0, "graph memory never counted as live");
    // The next cache takes the rest over; the old handle's free clears it there.
    let next = tier.for_stream(&s).unwrap();
    assert!(lock(&tier.shared.captured_of_removed).is_empty());
    assert_eq!(next.lock().captured.len(), 1);
    free(&old, b, 7000);
    assert!(
        next.lock().captured.is_empty(),
        "the next cache still remembers it"
    );
    assert_eq!(next.stats().cached_blocks, 0, "graph memory was cached");
    drop((old, next, tier));
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

/// A buffer of graph memory from a stream cache, given up after its stream
/// was removed (its free failed before freeing anything), is forgotten by
/// the tier's record of the removed stream's graph memory, and the old
/// cache's live bytes are not touched (graph memory never counted there).
#[test]
fn a_given_up_graph_memory_buffer_of_a_removed_stream_is_forgotten() {
    use crate::testing::{arm, disarm, Fault};
    const DOMAIN: u64 = 0x5EED_0025;
    let fake = FakeResource::in_domain(None, DOMAIN);
    let tier = tier_over(&fake, CacheConfig::default());
    let s = Stream::fake_in(0x6700_0000, 0, DOMAIN);
    let cache = tier.for_stream(&s).unwrap();
    let live = alloc(&cache, 4096);
    let res: Arc<dyn MemoryResource> = cache.clone();
    s.set_fake_capture(CaptureStatus::Active, 29);
    let buf = DeviceBuffer::<u8>::new_with(3000, &res, &s).unwrap();
    s.set_fake_capture(CaptureStatus::None, 0);
    let key = s.as_raw() as usize;
    assert!(tier.remove_stream(&s).unwrap());
    assert_eq!(lock(&tier.shared.captured_of_removed)[&key].len(), 1);
    let before = cache.stats().live_bytes;
    arm(DOMAIN, 0, Fault::Vendor, false);
    drop(buf);
    assert_eq!(disarm().0, 1, "the free's first question failed");
    assert!(
        lock(&tier.shared.captured_of_removed).get(&key).is_none(),
        "the record still holds the given-up block"
    );
    assert_eq!(
        cache.stats().live_bytes,
        before,
        "graph memory taken off the live bytes"
    );
    free(&cache, live, 4096);
    drop((res, cache, tier));
}

/// Graph memory allocated through the tier in a capture, freed through the
/// tier after its stream was removed (so no cache is registered for it), is
/// forgotten by the tier's record for the stream. Before, the record stayed
/// for ever: the stream's next cache took it over, so that a later block at
/// that address went upstream instead of into the cache, and every free of
/// that cache took the slow path.
#[test]
fn graph_memory_freed_through_the_tier_after_its_stream_was_removed_is_forgotten() {
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, CacheConfig::default());
    let s = stream(59);
    let key = s.as_raw() as usize;
    let res: &dyn MemoryResource = &tier;
    s.set_fake_capture(CaptureStatus::Active, 29);
    let a = res.allocate(5000, &s).unwrap() as usize;
    let b = res.allocate(700, &s).unwrap() as usize;
    s.set_fake_capture(CaptureStatus::None, 0);
    assert!(tier.remove_stream(&s).unwrap());
    assert_eq!(lock(&tier.shared.captured_of_removed)[&key].len(), 2);
    // No cache for the stream: straight upstream, and out of the record.
    // SAFETY: fake addresses from this tier, freed once.
    unsafe { res.deallocate(a as *mut c_void, 5000, &s) }.unwrap();
    assert!(!fake.state().live.contains_key(&a));
    assert_eq!(lock(&tier.shared.captured_of_removed)[&key].len(), 1);
    // A failed free keeps the entry (nothing was freed), for the retry.
    fake.fail_frees(true);
    // SAFETY: as above (the failed free freed nothing).
    assert!(unsafe { res.deallocate(b as *mut c_void, 700, &s) }.is_err());
    fake.fail_frees(false);
    assert_eq!(lock(&tier.shared.captured_of_removed)[&key].len(), 1);
    // SAFETY: as above.
    unsafe { res.deallocate(b as *mut c_void, 700, &s) }.unwrap();
    assert!(
        lock(&tier.shared.captured_of_removed).is_empty(),
        "the record of the removed stream stayed"
    );
    // The stream's next cache remembers no graph memory: its frees cache.
    let next = tier.for_stream(&s).unwrap();
    assert!(next.lock().captured.is_empty());
    assert_eq!(next.stats().captured_live, 0);
    let c = alloc(&next, 5000);
    free(&next, c, 5000);
    assert_eq!(next.stats().cached_blocks, 1);
    drop((next, tier));
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}
