//! GPU-free tests of the cache tier: the size classes, the caps, flush,
//! trim, drop, the footprint guard, out-of-memory recovery, and seeded
//! random model runs, over a fake upstream resource and fake streams (see
//! `crate::testing`).

use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use super::*;
use crate::buffer::DeviceBuffer;
use crate::testing::{FakeResource, Rng};

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
        let config = CacheConfig {
            max_block_bytes: bad,
            ..CacheConfig::default()
        };
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
fn per_stream_cap_sends_the_excess_upstream() {
    let fake = FakeResource::new(None);
    let config = CacheConfig {
        per_stream_cap: 5 * KIB,
        ..CacheConfig::default()
    };
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
    let config = CacheConfig {
        total_cap: 64 * KIB,
        ..CacheConfig::default()
    };
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
        CacheConfig {
            per_stream_cap: 0,
            ..CacheConfig::default()
        },
        CacheConfig {
            total_cap: 0,
            ..CacheConfig::default()
        },
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
    let tier = tier_over(
        &fake,
        CacheConfig {
            max_block_bytes: 64 * KIB,
            ..CacheConfig::default()
        },
    );
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
    let tier = tier_over(
        &fake,
        CacheConfig {
            headroom: Some(Headroom {
                min_bytes: 0,
                peak_per_mille: 0,
            }),
            ..CacheConfig::default()
        },
    );
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
    let tier2 = tier_over(
        &fake,
        CacheConfig {
            headroom: Some(Headroom {
                min_bytes: 2 << 20,
                peak_per_mille: 0,
            }),
            ..CacheConfig::default()
        },
    );
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
    let tier = tier_over(
        &fake,
        CacheConfig {
            headroom: None,
            ..CacheConfig::default()
        },
    );
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
    assert_eq!(
        cache.cached_bytes(),
        0,
        "the block is forgotten, not cached twice"
    );
    fake.fail_frees(false);
}

/// Per-stream bookkeeping the model keeps next to the tier.
#[derive(Default)]
struct ModelStream {
    live: Vec<(usize, usize)>,
}

/// Seeded random operations over several streams, checking after each one
/// that the tier's books match the upstream's and the caps hold.
#[test]
fn random_model_keeps_books_and_caps() {
    for seed in 1..=6u64 {
        let fake = FakeResource::new(None);
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let config = CacheConfig {
            max_block_bytes: [64 * KIB, 1 << 20, 64 << 20][rng.below(3)],
            per_stream_cap: [0, 256 * KIB, 1 << 20, 4 << 20][rng.below(4)],
            total_cap: [512 * KIB, 2 << 20, 1 << 30][rng.below(3)],
            headroom: [
                None,
                Some(Headroom {
                    min_bytes: 0,
                    peak_per_mille: 0,
                }),
                Some(Headroom::default()),
                Some(Headroom {
                    min_bytes: 64 * KIB,
                    peak_per_mille: 100,
                }),
            ][rng.below(4)],
        };
        let tier = tier_over(&fake, config);
        let streams: Vec<Stream> = (0..4).map(stream).collect();
        let mut model: Vec<ModelStream> = (0..4).map(|_| ModelStream::default()).collect();
        let mut caches: Vec<Option<Arc<StreamCache>>> = vec![None; 4];
        for step in 0..4000 {
            let i = rng.below(4);
            let cache = match &caches[i] {
                Some(c) => c.clone(),
                None => {
                    let c = tier.for_stream(&streams[i]).unwrap();
                    caches[i] = Some(c.clone());
                    c
                }
            };
            match rng.below(100) {
                0..=49 => {
                    let bytes = rng.log_uniform(0.0, 21.0).max(1);
                    let addr = alloc(&cache, bytes);
                    model[i].live.push((addr, bytes));
                }
                50..=94 if !model[i].live.is_empty() => {
                    let k = rng.below(model[i].live.len());
                    let (addr, bytes) = model[i].live.swap_remove(k);
                    free(&cache, addr, bytes);
                }
                95 => tier.flush().unwrap(),
                96 => tier.trim(rng.below(1 << 20)).unwrap(),
                97 => cache.trim(rng.below(256 * KIB)).unwrap(),
                98 => {
                    // Forget the stream; its live blocks are freed through
                    // the detached handle.
                    tier.remove_stream(&streams[i]).unwrap();
                    for (addr, bytes) in model[i].live.drain(..) {
                        free(&cache, addr, bytes);
                    }
                    caches[i] = None;
                }
                _ => {}
            }
            // The books: upstream holds exactly the live blocks (class-sized)
            // and the cached ones, and no two live blocks share an address.
            let st = tier.stats();
            let mut expect = 0;
            let mut seen = HashSet::new();
            for (m, _) in model.iter().zip(&streams) {
                for &(addr, bytes) in &m.live {
                    assert!(
                        seen.insert(addr),
                        "seed {seed} step {step}: {addr:#x} handed out twice"
                    );
                    expect += tier.block_size(bytes);
                }
            }
            let up = fake.state();
            assert_eq!(
                up.used,
                expect + st.total.cached_bytes,
                "seed {seed} step {step}: books differ"
            );
            drop(up);
            assert!(st.total.cached_bytes <= config.total_cap);
            assert!(st.leased_bytes <= config.total_cap);
            for s in &st.streams {
                assert!(s.cached_bytes <= config.per_stream_cap);
                assert!(s.cached_bytes <= s.credit_bytes);
                if let Some(headroom) = config.headroom {
                    let h = headroom.above(s.live_high);
                    assert!(
                        s.live_bytes + s.cached_bytes <= s.live_high + h,
                        "seed {seed} step {step}: footprint {} + {} above peak {} + {h}",
                        s.live_bytes,
                        s.cached_bytes,
                        s.live_high
                    );
                }
            }
        }
        for (i, m) in model.iter_mut().enumerate() {
            if let Some(cache) = &caches[i] {
                for (addr, bytes) in m.live.drain(..) {
                    free(cache, addr, bytes);
                }
            }
        }
        drop(caches);
        drop(tier);
        let up = fake.state();
        assert!(
            up.live.is_empty() && up.used == 0,
            "seed {seed}: the tier's drop left blocks"
        );
        drop(up);
        fake.assert_clean();
    }
}

/// 8 threads, each with its own stream and cache, allocate and free at
/// random; a shared set checks that no address is live twice at once.
#[test]
fn threads_with_own_streams_never_share_blocks() {
    let fake = FakeResource::new(None);
    let tier = Arc::new(tier_over(
        &fake,
        CacheConfig {
            total_cap: 8 << 20,
            per_stream_cap: 2 << 20,
            ..CacheConfig::default()
        },
    ));
    let live_all: Arc<Mutex<HashSet<usize>>> = Arc::default();
    std::thread::scope(|scope| {
        for t in 0..8 {
            let (tier, live_all) = (tier.clone(), live_all.clone());
            scope.spawn(move || {
                let s = stream(100 + t);
                let cache = tier.for_stream(&s).unwrap();
                let mut rng = Rng(0xABCD + t as u64);
                let mut live = Vec::new();
                for _ in 0..5000 {
                    if live.is_empty() || (live.len() < 64 && rng.below(2) == 0) {
                        let bytes = rng.log_uniform(8.0, 18.0);
                        let addr = alloc(&cache, bytes);
                        assert!(live_all.lock().unwrap().insert(addr), "{addr:#x} live twice");
                        live.push((addr, bytes));
                    } else {
                        let (addr, bytes) = live.swap_remove(rng.below(live.len()));
                        assert!(live_all.lock().unwrap().remove(&addr));
                        free(&cache, addr, bytes);
                    }
                }
                for (addr, bytes) in live {
                    live_all.lock().unwrap().remove(&addr);
                    free(&cache, addr, bytes);
                }
            });
        }
    });
    let st = tier.stats();
    assert_eq!(st.streams.len(), 8);
    // (A stream may get no share of the total cap while others hold it.)
    assert!(st.total.hits > 0);
    assert!(st.total.cached_bytes <= 8 << 20 && st.leased_bytes <= 8 << 20);
    assert_eq!(fake.state().used, st.total.cached_bytes);
    tier.flush().unwrap();
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

/// The benchmark's churn workload (up to 1000 live buffers, sizes
/// 2^U(8,22), allocate or free at random, then free all) on one stream with
/// the default configuration. Returns (upstream peak / requested peak, hit
/// rate).
fn churn(steps: usize, seed: u64, config: CacheConfig) -> (f64, f64) {
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, config);
    let cache = tier.for_stream(&stream(1)).unwrap();
    let mut rng = Rng(seed);
    let mut live: Vec<(usize, usize)> = Vec::new();
    let (mut requested, mut requested_high) = (0usize, 0usize);
    for _ in 0..steps {
        let allocate = match live.len() {
            0 => true,
            n if n >= 1000 => false,
            _ => rng.next_u64() & 1 == 0,
        };
        if allocate {
            let bytes = rng.log_uniform(8.0, 22.0);
            live.push((alloc(&cache, bytes), bytes));
            requested += bytes;
            requested_high = requested_high.max(requested);
        } else {
            let (addr, bytes) = live.swap_remove(rng.below(live.len()));
            free(&cache, addr, bytes);
            requested -= bytes;
        }
    }
    for (addr, bytes) in live.drain(..) {
        free(&cache, addr, bytes);
    }
    let st = tier.stats();
    let ratio = fake.state().used_high as f64 / requested_high as f64;
    let (allocs, frees) = fake.calls();
    eprintln!(
        "churn model, {steps} steps, seed {seed}, guard {:?}: {st}; requested peak {requested_high} B; \
         upstream peak / requested peak = {ratio:.3}; live peak (classes) / requested peak = {:.3}; \
         upstream calls per op = {:.3}",
        config.headroom,
        st.total.live_high as f64 / requested_high as f64,
        (allocs + frees) as f64 / steps as f64
    );
    drop(cache);
    drop(tier);
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
    (ratio, st.hit_rate())
}

/// The churn workload at the benchmark's quick and default lengths. With
/// the default configuration (caps only) nearly every allocation hits and
/// the cached bytes stay within the cap. With the footprint guard, the
/// upstream's peak (live blocks in class sizes + cached) stays within 1.10
/// of the peak of requested live bytes and most allocations still hit.
/// (The vendor pool's own fragmentation comes on top: only a GPU run
/// measures that.)
#[test]
fn churn_model_peak_ratio_and_hit_rate() {
    for (steps, seed) in [(40_000, 42), (400_000, 42), (400_000, 7)] {
        let (_, hit_rate) = churn(steps, seed, CacheConfig::default());
        assert!(
            hit_rate >= 0.95,
            "{steps} steps, seed {seed}: hit rate {hit_rate:.3}"
        );
        let guarded = CacheConfig {
            headroom: Some(Headroom::default()),
            ..CacheConfig::default()
        };
        let (ratio, hit_rate) = churn(steps, seed, guarded);
        assert!(ratio <= 1.10, "{steps} steps, seed {seed}: peak ratio {ratio:.3}");
        assert!(
            hit_rate >= 0.80,
            "{steps} steps, seed {seed}: hit rate {hit_rate:.3}"
        );
    }
}

// ---------------------------------------------------------------------------
// Under stream capture (fake streams report a capture; see `crate::graph`).

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
    let tier = tier_over(
        &fake,
        CacheConfig {
            headroom: None,
            ..CacheConfig::default()
        },
    );
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
