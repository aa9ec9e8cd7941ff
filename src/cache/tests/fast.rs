//! The fast paths: streams that somalloc does not ask about capture (as an
//! owned stream outside a capture), the lock biased to the thread that uses
//! it, buffers that hold no reference to their stream cache, and the reuse
//! of larger cached blocks under the footprint budget.

use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::{Arc, Barrier, Mutex};

use super::*;
use crate::cache::{barrier, lock};
use crate::graph::CaptureStatus;
use crate::stream::capture_flag;

/// A fake stream that somalloc treats like an owned one outside a capture
/// (two relaxed loads say "not capturing"), so that the hot paths run.
pub(super) fn quiet(id: usize) -> Stream {
    let s = Stream::fake(0x9_0000 + 16 * id, 0);
    s.clear_capture_flag(capture_flag::ALWAYS_ASK);
    assert!(!s.may_capture());
    s
}

#[test]
fn the_hot_paths_keep_the_books() {
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, CacheConfig::default());
    let s = quiet(1);
    let cache = tier.for_stream(&s).unwrap();
    let calls = {
        let a = alloc(&cache, 3000);
        free(&cache, a, 3000);
        fake.calls()
    };
    for i in 0..100 {
        let bytes = 2900 + i;
        let a = alloc(&cache, bytes);
        free(&cache, a, bytes);
    }
    assert_eq!(fake.calls(), calls, "all hits, no upstream call");
    let st = cache.stats();
    assert_eq!(
        (st.hits, st.misses, st.cached_bytes, st.live_bytes),
        (100, 1, 3072, 0)
    );
    // The thread that keeps using the cache owns its lock (where the OS
    // has the process-wide barrier).
    assert_eq!(cache.state.owned_here(), barrier::available());
    tier.flush().unwrap();
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

#[test]
fn without_thread_bias_the_lock_is_never_owned() {
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, CacheConfig::default().thread_bias(false));
    let s = quiet(2);
    let cache = tier.for_stream(&s).unwrap();
    for _ in 0..(2 * lock::FIRST_GRANT) {
        let a = alloc(&cache, 4096);
        free(&cache, a, 4096);
    }
    assert!(!cache.state.owned_here());
    assert_eq!(cache.stats().hits, u64::from(2 * lock::FIRST_GRANT) - 1);
}

/// Threads take turns on one stream's cache, each long enough to become
/// the owner of its lock, so ownership is taken away again and again (and
/// the grants get rarer); a shared set checks that no block is handed out
/// twice, and the books match the upstream's at the end.
#[test]
fn threads_taking_turns_on_one_stream_never_share_a_block() {
    for bias in [true, false] {
        let revoked = lock::REVOCATIONS.load(std::sync::atomic::Ordering::Relaxed);
        let fake = FakeResource::new(None);
        let tier = tier_over(&fake, CacheConfig::default().thread_bias(bias));
        let s = quiet(3);
        let cache = tier.for_stream(&s).unwrap();
        let live_all: Mutex<HashSet<usize>> = Mutex::default();
        let turn = Barrier::new(4);
        std::thread::scope(|scope| {
            for t in 0..4u64 {
                let (cache, live_all, turn) = (&cache, &live_all, &turn);
                scope.spawn(move || {
                    let mut rng = Rng(0x5EED + t);
                    for round in 0..12 {
                        turn.wait();
                        // One thread at a time for a while, then all at once.
                        let mine = round % 4 == t as usize || round >= 8;
                        if !mine {
                            continue;
                        }
                        let mut live = Vec::new();
                        for _ in 0..(4 * lock::FIRST_GRANT as usize + rng.below(200)) {
                            if live.is_empty() || (live.len() < 32 && rng.below(2) == 0) {
                                let bytes = rng.log_uniform(8.0, 16.0);
                                let addr = alloc(cache, bytes);
                                assert!(live_all.lock().unwrap().insert(addr), "{addr:#x} live twice");
                                live.push((addr, bytes));
                            } else {
                                let (addr, bytes) = live.swap_remove(rng.below(live.len()));
                                assert!(live_all.lock().unwrap().remove(&addr));
                                free(cache, addr, bytes);
                            }
                        }
                        for (addr, bytes) in live {
                            assert!(live_all.lock().unwrap().remove(&addr));
                            free(cache, addr, bytes);
                        }
                    }
                });
            }
        });
        if bias && barrier::available() {
            let now = lock::REVOCATIONS.load(std::sync::atomic::Ordering::Relaxed);
            assert!(now > revoked, "ownership was never taken away");
        }
        let st = cache.stats();
        assert!(st.hits > 0);
        assert_eq!(st.live_bytes, 0);
        assert_eq!(fake.state().used, st.cached_bytes, "bias {bias}");
        drop(cache);
        drop(tier);
        assert!(fake.state().live.is_empty());
        fake.assert_clean();
    }
}

#[test]
fn a_buffer_keeps_its_stream_cache_and_stream_alive() {
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, CacheConfig::default());
    let s = quiet(4);
    let cache = tier.for_stream(&s).unwrap();
    let weak = Arc::downgrade(&cache);
    let res: Arc<dyn MemoryResource> = cache;
    let a = DeviceBuffer::<u32>::new_with(1000, &res, &s).unwrap();
    let b = DeviceBuffer::<u8>::new_with(70_000, &res, &s).unwrap();
    let (a_addr, b_addr) = (a.as_raw() as usize, b.as_raw() as usize);
    // No reference is left but the tier's, then not even that.
    drop(res);
    drop(s);
    drop(tier);
    assert!(weak.upgrade().is_some(), "the pinned blocks keep the cache");
    assert!(fake.state().live.contains_key(&a_addr));
    assert_eq!(a.stream().as_raw() as usize, 0x9_0000 + 16 * 4);
    assert_eq!(a.len(), 1000);
    a.release().unwrap();
    assert!(weak.upgrade().is_some(), "one block is still out");
    assert!(
        !fake.state().live.contains_key(&a_addr),
        "detached: straight upstream"
    );
    drop(b);
    assert!(weak.upgrade().is_none(), "the last block let the cache go");
    assert!(!fake.state().live.contains_key(&b_addr));
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

#[test]
fn a_detached_cache_gives_counted_buffers() {
    // A cache that the tier let go of pins nothing: its buffers hold a
    // reference like those of any resource.
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, CacheConfig::default());
    let s = quiet(5);
    let cache = tier.for_stream(&s).unwrap();
    let warm = DeviceBuffer::<u8>::new_with(5000, &(cache.clone() as Arc<dyn MemoryResource>), &s).unwrap();
    drop(warm);
    drop(tier);
    let res: Arc<dyn MemoryResource> = cache.clone();
    let weak = Arc::downgrade(&cache);
    drop(cache);
    let buf = DeviceBuffer::<u8>::new_with(5000, &res, &s).unwrap();
    drop(res);
    assert!(weak.upgrade().is_some(), "the buffer's reference keeps it");
    drop(buf);
    assert!(weak.upgrade().is_none());
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

#[test]
fn a_miss_over_the_budget_takes_a_larger_cached_block() {
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, CacheConfig::default().reuse_larger(Headroom::new(0, 0)));
    let s = quiet(6);
    let cache = tier.for_stream(&s).unwrap();
    let two = alloc(&cache, 2 << 20);
    free(&cache, two, 2 << 20);
    // 1.5 MiB is four classes below 2 MiB, and the footprint (2 MiB
    // cached + 1.5 MiB) would pass the live peak (2 MiB): the 2 MiB block.
    let calls = fake.calls();
    let x = alloc(&cache, 3 << 19);
    assert_eq!(x, two);
    assert_eq!(fake.calls(), calls, "no upstream call");
    let st = cache.stats();
    assert_eq!(
        (st.reused_larger, st.live_bytes, st.cached_bytes),
        (1, 2 << 20, 0)
    );
    // Freed with the size asked for, it goes back in its own class.
    free(&cache, x, 3 << 19);
    assert_eq!(cache.stats().cached_bytes, 2 << 20);
    assert_eq!(alloc(&cache, 2 << 20), two, "a 2 MiB block again");
    free(&cache, two, 2 << 20);
    // More than one power of two up is not taken.
    let calls = fake.calls();
    let small = alloc(&cache, 1 << 19);
    assert_ne!(small, two);
    assert_eq!(fake.calls().0, calls.0 + 1);
    free(&cache, small, 1 << 19);
    // The upstream saw every block back in the size it handed out.
    tier.flush().unwrap();
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

#[test]
fn under_the_budget_or_through_the_tier_a_miss_asks_upstream() {
    let fake = FakeResource::new(None);
    let s = quiet(7);
    for (config, through_tier) in [
        (
            CacheConfig::default().reuse_larger(Headroom::new(4 << 20, 0)),
            false,
        ),
        (CacheConfig::default().reuse_larger(None), false),
        (CacheConfig::default().reuse_larger(Headroom::new(0, 0)), true),
    ] {
        let tier = Arc::new(tier_over(&fake, config));
        let res: Arc<dyn MemoryResource> = if through_tier {
            tier.clone()
        } else {
            tier.for_stream(&s).unwrap()
        };
        let two = res.allocate(2 << 20, &s).unwrap();
        // SAFETY: fake addresses from this resource, freed once.
        unsafe { res.deallocate(two, 2 << 20, &s) }.unwrap();
        let x = res.allocate(3 << 19, &s).unwrap();
        assert_ne!(x, two, "{config:?}, through the tier: {through_tier}");
        // SAFETY: as above.
        unsafe { res.deallocate(x, 3 << 19, &s) }.unwrap();
        drop(res);
        drop(tier);
    }
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

#[test]
fn a_larger_block_is_freed_in_its_size_under_capture_and_when_detached() {
    let fake = FakeResource::new(None);
    let config = CacheConfig::default().reuse_larger(Headroom::new(0, 0));
    // Freed during a capture: straight upstream, in the size handed out.
    let tier = tier_over(&fake, config);
    let s = stream(60);
    let cache = tier.for_stream(&s).unwrap();
    let two = alloc(&cache, 2 << 20);
    free(&cache, two, 2 << 20);
    let x = alloc(&cache, 3 << 19);
    assert_eq!(x, two);
    s.set_fake_capture(CaptureStatus::Active, 61);
    free(&cache, x, 3 << 19);
    s.set_fake_capture(CaptureStatus::None, 0);
    assert!(fake.state().live.is_empty());
    drop((cache, tier));
    // Freed to a detached cache: upstream, in the size handed out.
    let tier = tier_over(&fake, config);
    let s = quiet(8);
    let cache = tier.for_stream(&s).unwrap();
    let two = alloc(&cache, 2 << 20);
    free(&cache, two, 2 << 20);
    let x = alloc(&cache, 3 << 19);
    assert_eq!(x, two);
    drop(tier);
    // SAFETY: a fake address from this cache, freed once.
    unsafe { cache.deallocate(x as *mut c_void, 3 << 19, &s) }.unwrap();
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}
