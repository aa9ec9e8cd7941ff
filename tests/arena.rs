//! The virtual-memory arena on a device: contents kept, stream order across
//! streams, threads, giving memory back, captures, the physical handle NCCL
//! needs, out of memory, and peers. Each test prints one SKIP line without
//! a GPU or without virtual-memory support.

mod support;

use std::ffi::c_void;
use std::sync::Arc;

use somalloc::testkit::{vmm_handle_check, RawRange, TestKernels};
use somalloc::{
    ArenaOptions, CacheConfig, CacheTier, CaptureMode, Device, DeviceBuffer, Error, Event, MemPool,
    MemoryResource, Stream, VmmArena,
};
use support::{device_or_skip, say};

const MIB: usize = 1 << 20;

fn arena_or_skip(test: &str, opts: ArenaOptions) -> Option<(Device, Arc<VmmArena>, TestKernels)> {
    let dev = device_or_skip(test)?;
    match VmmArena::new(&dev, opts) {
        Ok(a) => Some((dev, Arc::new(a), TestKernels::load(&dev).unwrap())),
        Err(e @ Error::Unsupported { .. }) => {
            say(&format!("SKIP {test}: {e}"));
            None
        }
        Err(e) => panic!("{test}: {e}"),
    }
}

/// Sizes from a byte to 64 MiB, small and large, odd and round.
fn sizes() -> Vec<usize> {
    let mut v = vec![
        1,
        100,
        511,
        512,
        4096,
        65_537,
        MIB - 1,
        MIB,
        MIB + 1,
        3 * MIB + 7,
        20 * MIB,
        64 * MIB,
    ];
    let mut rng = fastrand::Rng::with_seed(7);
    v.extend((0..40).map(|_| rng.usize(1..8 * MIB)));
    v
}

#[test]
fn blocks_hold_their_contents_and_are_reused() {
    let Some((dev, arena, k)) = arena_or_skip(
        "blocks_hold_their_contents_and_are_reused",
        ArenaOptions::default(),
    ) else {
        return;
    };
    let s = Stream::new(&dev).unwrap();
    for round in 0..3u32 {
        let mut bufs: Vec<_> = sizes()
            .into_iter()
            .map(|n| DeviceBuffer::<u8>::new_with(n, &arena, &s).unwrap())
            .collect();
        for (i, b) in bufs.iter_mut().enumerate() {
            k.fill(b, round * 1000 + i as u32, &s).unwrap();
        }
        for (i, b) in bufs.iter().enumerate() {
            assert_eq!(
                k.verify(b, round * 1000 + i as u32, &s).unwrap(),
                0,
                "round {round}, block {i}"
            );
        }
    }
    let st = arena.stats();
    assert_eq!(st.live_bytes, 0);
    assert!(st.maps > 0 && st.mapped_bytes > 0, "{st}");
    // Round 2 and 3 reused round 1's memory: no more mapped than one round.
    let one_round: usize = sizes().iter().map(|n| n.next_multiple_of(512)).sum();
    assert!(st.peak_mapped < 2 * one_round + 40 * MIB, "{st}");
    s.synchronize().unwrap();
    arena.trim(0);
    assert_eq!(arena.stats().mapped_bytes, 0);
}

/// A block freed on stream A while A's kernel still uses it is not handed
/// to stream B before that kernel completes: B's writes never land in A's
/// block.
#[test]
fn another_stream_never_gets_a_block_still_in_use() {
    let Some((dev, arena, k)) = arena_or_skip(
        "another_stream_never_gets_a_block_still_in_use",
        ArenaOptions::default(),
    ) else {
        return;
    };
    let (a, b) = (Stream::new(&dev).unwrap(), Stream::new(&dev).unwrap());
    for i in 0..20u32 {
        let n = [4096, 300 << 10, 6 * MIB][i as usize % 3];
        let mut x = DeviceBuffer::<u8>::new_with(n, &arena, &a).unwrap();
        k.spin(2_000_000, &a).unwrap();
        k.fill(&mut x, i, &a).unwrap();
        // Copy out after the fill on a; then x is freed on a.
        let mut keep = DeviceBuffer::<u8>::new_with(n, &arena, &a).unwrap();
        keep.copy_from_device(&x).unwrap();
        drop(x);
        // b allocates while a is still spinning: it must get other memory.
        let mut y = DeviceBuffer::<u8>::new_with(n, &arena, &b).unwrap();
        k.fill(&mut y, 9999, &b).unwrap();
        assert_eq!(
            k.verify(&keep, i, &a).unwrap(),
            0,
            "round {i}: a's block was overwritten"
        );
        drop(y);
        drop(keep);
    }
    a.synchronize().unwrap();
    b.synchronize().unwrap();
}

/// Where the program configured nothing, the arena serves a device unless
/// the runtime could not give its memory back (ROCm faults, by version);
/// then `VmmArena::as_default` says so while `VmmArena::with_pool` still
/// makes an arena that keeps its chunks. `SOMALLOC_EXPECT_DEFAULT_ARENA`
/// (`serve` or `aside`) makes the run assert which way it went (the
/// HIP-on-CUDA run sets it with the versions it reports).
#[test]
fn the_default_arena_serves_unless_memory_could_not_go_back() {
    const TEST: &str = "the_default_arena_serves_unless_memory_could_not_go_back";
    let Some(dev) = device_or_skip(TEST) else {
        return;
    };
    let pool = MemPool::default_for(&dev).unwrap();
    let explicit = VmmArena::with_pool(pool.clone(), ArenaOptions::default());
    let by_default = VmmArena::as_default(pool, ArenaOptions::default());
    let went = match (explicit, by_default) {
        (Err(e @ Error::Unsupported { .. }), Err(Error::Unsupported { .. })) => {
            say(&format!("SKIP {TEST}: {e}"));
            return;
        }
        (Ok(_), Ok(arena)) => {
            let s = Stream::new(&dev).unwrap();
            let p = arena.allocate(MIB, &s).unwrap();
            assert!(arena.stats().mapped_bytes >= MIB);
            // SAFETY: allocated above, freed once, nothing used it.
            unsafe { arena.deallocate(p, MIB, &s).unwrap() };
            s.synchronize().unwrap();
            "serve"
        }
        (Ok(_), Err(e @ Error::Unsupported { .. })) => {
            assert!(e.to_string().contains("give it back"), "{e}");
            say(&format!("{TEST}: steps aside: {e}"));
            "aside"
        }
        (a, b) => panic!("explicit {a:?}, by default {b:?}"),
    };
    say(&format!("{TEST}: {went}"));
    if let Ok(want) = std::env::var("SOMALLOC_EXPECT_DEFAULT_ARENA") {
        assert_eq!(went, want, "SOMALLOC_EXPECT_DEFAULT_ARENA");
    }
}

/// A block that one thread used on its per-thread default stream and freed
/// there, while its work still runs, goes to another thread's stream only
/// after that work: the per-thread handle names another stream on every
/// thread, so only a mark made on the freeing thread can order the reuse.
#[test]
fn a_free_on_the_per_thread_stream_orders_the_next_user() {
    let Some((dev, arena, k)) = arena_or_skip(
        "a_free_on_the_per_thread_stream_orders_the_next_user",
        ArenaOptions::default(),
    ) else {
        return;
    };
    let s = Stream::new(&dev).unwrap();
    let n = 20 * MIB;
    let mut reused = 0;
    for round in 0..6u32 {
        let x = arena.allocate(n, &s).unwrap() as usize;
        s.synchronize().unwrap();
        let done = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    dev.bind_to_thread().unwrap();
                    // SAFETY: used on this thread only, with `dev` current.
                    let p = unsafe { Stream::per_thread_default(&dev) };
                    // SAFETY: `x` is live until the free below, which is
                    // ordered after these kernels on `p`; `s` is idle.
                    let mut r = unsafe { RawRange::new(x as *mut c_void, n, &p) };
                    k.spin(50_000_000, &p).unwrap();
                    k.fill(&mut r, round, &p).unwrap();
                    let ev = Event::new(&dev).unwrap();
                    ev.record(&p).unwrap();
                    // SAFETY: allocated above, freed once, after its last
                    // use on `p`.
                    unsafe { arena.deallocate(x as *mut c_void, n, &p).unwrap() };
                    ev
                })
                .join()
                .unwrap()
        });
        let t = Stream::new(&dev).unwrap();
        let y = arena.allocate(n, &t).unwrap() as usize;
        // SAFETY: live until its free below, after these kernels on `t`.
        let mut ry = unsafe { RawRange::new(y as *mut c_void, n, &t) };
        k.fill(&mut ry, 9999, &t).unwrap();
        t.synchronize().unwrap();
        if y == x {
            reused += 1;
            assert!(
                done.is_complete().unwrap(),
                "round {round}: the block was reused before the per-thread stream's work completed"
            );
        }
        assert_eq!(k.verify(&ry, 9999, &t).unwrap(), 0, "round {round}: overwritten");
        // SAFETY: allocated above, freed once, after its last use on `t`.
        unsafe { arena.deallocate(y as *mut c_void, n, &t).unwrap() };
        t.synchronize().unwrap();
    }
    assert_eq!(arena.stats().live_blocks, 0);
    say(&format!(
        "a_free_on_the_per_thread_stream_orders_the_next_user: reused the freed block in {reused} of 6 rounds"
    ));
}

/// Stream A's frees lie between its live blocks, still in use by a
/// kernel; stream B's 64 MiB request fits no window of them, so B waits on
/// the device for A's work and the arena maps A's freed chunks where it
/// grows, making no memory. B's writes land after A's last writes to those
/// chunks (or B's block would read A's values), and A's live blocks keep
/// theirs.
#[test]
fn a_large_growth_takes_another_streams_scattered_frees_after_a_device_wait() {
    let test = "a_large_growth_takes_another_streams_scattered_frees_after_a_device_wait";
    let Some((dev, arena, k)) = arena_or_skip(test, ArenaOptions::default().chunk_bytes(16 * MIB)) else {
        return;
    };
    let (a, b) = (Stream::new(&dev).unwrap(), Stream::new(&dev).unwrap());
    let mut x1 = DeviceBuffer::<u8>::new_with(32 * MIB, &arena, &a).unwrap();
    let mut w1 = DeviceBuffer::<u8>::new_with(8 * MIB, &arena, &a).unwrap();
    let mut x2 = DeviceBuffer::<u8>::new_with(32 * MIB, &arena, &a).unwrap();
    let mut w2 = DeviceBuffer::<u8>::new_with(8 * MIB, &arena, &a).unwrap();
    k.fill(&mut w1, 11, &a).unwrap();
    k.fill(&mut w2, 12, &a).unwrap();
    // A is busy for a while, then writes x1 and x2 and frees them.
    k.spin(200_000_000, &a).unwrap();
    k.fill(&mut x1, 1, &a).unwrap();
    k.fill(&mut x2, 2, &a).unwrap();
    drop(x1);
    drop(x2);
    let before = arena.stats();
    let mut y = DeviceBuffer::<u8>::new_with(64 * MIB, &arena, &b).unwrap();
    let st = arena.stats();
    assert_eq!(st.mapped_bytes, before.mapped_bytes, "no memory made: {st}");
    assert_eq!(st.moves, before.moves + 4, "A's four free chunks moved: {st}");
    assert_eq!(st.stream_waits, before.stream_waits + 1, "{st}");
    k.fill(&mut y, 3, &b).unwrap();
    assert_eq!(k.verify(&y, 3, &b).unwrap(), 0, "A's writes landed in B's block");
    assert_eq!(k.verify(&w1, 11, &a).unwrap(), 0);
    assert_eq!(k.verify(&w2, 12, &a).unwrap(), 0);
    drop((y, w1, w2));
    a.synchronize().unwrap();
    b.synchronize().unwrap();
    arena.trim(0);
    assert_eq!(arena.stats().mapped_bytes, 0, "{}", arena.stats());
}

#[test]
fn threads_with_their_own_streams_and_trim_to_live_bytes() {
    let Some((dev, arena, k)) = arena_or_skip(
        "threads_with_their_own_streams_and_trim_to_live_bytes",
        ArenaOptions::default(),
    ) else {
        return;
    };
    let k = Arc::new(k);
    let kept: Vec<_> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..8u64)
            .map(|t| {
                let (arena, k) = (arena.clone(), k.clone());
                sc.spawn(move || {
                    let s = Stream::new(&dev).unwrap();
                    let mut rng = fastrand::Rng::with_seed(t);
                    let mut live: Vec<(DeviceBuffer<u8>, u32)> = Vec::new();
                    for i in 0..300u32 {
                        let n = if rng.bool() {
                            rng.usize(1..MIB)
                        } else {
                            rng.usize(MIB..12 * MIB)
                        };
                        let mut b = DeviceBuffer::<u8>::new_with(n, &arena, &s).unwrap();
                        k.fill(&mut b, i, &s).unwrap();
                        live.push((b, i));
                        if live.len() > 6 {
                            let (b, seed) = live.swap_remove(rng.usize(0..live.len()));
                            assert_eq!(k.verify(&b, seed, &s).unwrap(), 0);
                        }
                    }
                    s.synchronize().unwrap();
                    live.truncate(2);
                    (live, s)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let before = arena.stats();
    arena.trim(0);
    let after = arena.stats();
    say(&format!("threads: before trim {before}; after {after}"));
    let chunk = 20 * MIB;
    assert!(
        after.mapped_bytes as f64 <= 1.1 * after.live_bytes as f64 + (8 * chunk) as f64,
        "after trim: {after}"
    );
    drop(kept);
}

/// NCCL's registration asks the driver for the physical allocation behind
/// an address: it must find one for every arena address.
#[test]
fn every_arena_address_has_a_physical_handle() {
    let Some((dev, arena, _k)) = arena_or_skip(
        "every_arena_address_has_a_physical_handle",
        ArenaOptions::default(),
    ) else {
        return;
    };
    let s = Stream::new(&dev).unwrap();
    let bufs: Vec<_> = [4096, 5 * MIB, 50 * MIB]
        .into_iter()
        .map(|n| DeviceBuffer::<u8>::new_with(n, &arena, &s).unwrap())
        .collect();
    let segs = arena.segments();
    assert!(!segs.is_empty());
    for b in &bufs {
        let p = b.as_raw() as usize;
        assert!(
            segs.iter().any(|g| g.address <= p && p < g.address + g.bytes),
            "{p:#x} in a segment"
        );
        vmm_handle_check(b.as_raw()).unwrap();
        vmm_handle_check((p + b.len() - 1) as *mut _).unwrap();
    }
    for g in &segs {
        assert_eq!(g.address % (2 * MIB), 0, "segments start on the granularity");
    }
}

/// Under capture the arena's allocations are graph memory; a block from
/// before the capture freed inside it waits for the graph; replays compute
/// the same result.
#[test]
fn captures_on_the_arena_replay_correctly() {
    let Some((dev, arena, k)) =
        arena_or_skip("captures_on_the_arena_replay_correctly", ArenaOptions::default())
    else {
        return;
    };
    let s = Stream::new(&dev).unwrap();
    let res: Arc<dyn MemoryResource> = arena.clone();
    let mut out = DeviceBuffer::<u32>::new_with(4096, &res, &s).unwrap();
    out.memset(0).unwrap();
    let before = DeviceBuffer::<u32>::new_with(4096, &res, &s).unwrap();
    s.begin_capture(CaptureMode::ThreadLocal).unwrap();
    let mut tmp = DeviceBuffer::<u32>::new_with(4096, &res, &s).unwrap();
    assert!(
        !arena.segments().iter().any(|g| {
            let p = tmp.as_raw() as usize;
            g.address <= p && p < g.address + g.bytes
        }),
        "a captured allocation is graph memory, not the arena's"
    );
    k.iota_u32(&mut tmp, 1, 0, &s).unwrap();
    k.axpy_u32(&mut out, &tmp, 1, &s).unwrap();
    drop(tmp);
    drop(before);
    let graph = s.end_capture().unwrap();
    assert_eq!(
        arena.stats().live_blocks,
        2,
        "the block freed in the capture waits for the graph"
    );
    let exec = graph.instantiate().unwrap();
    for _ in 0..3 {
        exec.launch(&s).unwrap();
    }
    let host = out.to_vec().unwrap();
    assert!(
        host.iter().enumerate().all(|(i, &v)| v == 3 * i as u32),
        "three replays of out += iota"
    );
    drop(exec);
    drop(graph);
    s.synchronize().unwrap();
    for _ in 0..200 {
        somalloc::reclaim_graph_frees().unwrap();
        if arena.stats().live_blocks == 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(arena.stats().live_blocks, 1, "freed once the graph is gone");
}

#[test]
fn a_cache_tier_in_front_of_the_arena() {
    let Some((dev, arena, k)) = arena_or_skip("a_cache_tier_in_front_of_the_arena", ArenaOptions::default())
    else {
        return;
    };
    let tier = CacheTier::new(arena.clone(), CacheConfig::default()).unwrap();
    let s = Stream::new(&dev).unwrap();
    let cache: Arc<dyn MemoryResource> = tier.for_stream(&s).unwrap();
    for i in 0..200u32 {
        let mut b = DeviceBuffer::<u8>::new_with(1000 + (i as usize % 7) * 3000, &cache, &s).unwrap();
        k.fill(&mut b, i, &s).unwrap();
        assert_eq!(k.verify(&b, i, &s).unwrap(), 0);
    }
    tier.flush().unwrap();
    s.synchronize().unwrap();
    assert_eq!(arena.stats().live_bytes, 0);
}

#[test]
fn out_of_memory_is_refused_with_a_report() {
    let Some((dev, arena, _k)) =
        arena_or_skip("out_of_memory_is_refused_with_a_report", ArenaOptions::default())
    else {
        return;
    };
    let s = Stream::new(&dev).unwrap();
    let total = dev.total_memory().unwrap();
    let held = DeviceBuffer::<u8>::new_with(64 * MIB, &arena, &s).unwrap();
    match DeviceBuffer::<u8>::new_with(total + total / 2, &arena, &s) {
        Err(Error::OutOfMemory {
            arena: Some(report), ..
        }) => {
            assert!(report.live_bytes >= 64 * MIB, "{report}");
            assert_eq!(report.refusals, 1);
        }
        Err(Error::OutOfMemory { arena: None, .. }) => panic!("the refusal carries no report"),
        other => panic!("expected out of memory, got {other:?}"),
    }
    // Still serving after the refusal.
    drop(DeviceBuffer::<u8>::new_with(MIB, &arena, &s).unwrap());
    drop(held);
}

#[test]
fn a_peer_reads_and_writes_arena_memory_once_granted() {
    let Some(dev) = device_or_skip("a_peer_reads_and_writes_arena_memory_once_granted") else {
        return;
    };
    if Device::count().unwrap() < 2 {
        say("SKIP a_peer_reads_and_writes_arena_memory_once_granted: needs two GPUs");
        return;
    }
    let peer = Device::get(1).unwrap();
    if !peer.can_access_peer(&dev).unwrap() {
        say("SKIP a_peer_reads_and_writes_arena_memory_once_granted: device 1 cannot reach device 0");
        return;
    }
    let Some((_, arena, _k)) = arena_or_skip(
        "a_peer_reads_and_writes_arena_memory_once_granted",
        ArenaOptions::default(),
    ) else {
        return;
    };
    arena.grant_access(&peer).unwrap();
    let k1 = TestKernels::load(&peer).unwrap();
    let s0 = Stream::new(&dev).unwrap();
    let s1 = Stream::new(&peer).unwrap();
    let mut b = DeviceBuffer::<u8>::new_with(8 * MIB, &arena, &s0).unwrap();
    b.memset(0).unwrap();
    s0.synchronize().unwrap();
    // SAFETY: b is idle (its stream synchronized) and outlives the range's use.
    let mut on_peer = unsafe { somalloc::testkit::RawRange::new(b.as_raw(), b.len(), &s1) };
    k1.fill(&mut on_peer, 5, &s1).unwrap();
    assert_eq!(
        k1.verify(&on_peer, 5, &s1).unwrap(),
        0,
        "the peer wrote and read arena memory"
    );
    s1.synchronize().unwrap();
    drop(on_peer);
    // Chunks mapped after the grant are granted too.
    let c = DeviceBuffer::<u8>::new_with(40 * MIB, &arena, &s0).unwrap();
    s0.synchronize().unwrap();
    // SAFETY: as above.
    let mut later = unsafe { somalloc::testkit::RawRange::new(c.as_raw(), c.len(), &s1) };
    k1.fill(&mut later, 6, &s1).unwrap();
    assert_eq!(k1.verify(&later, 6, &s1).unwrap(), 0);
    s1.synchronize().unwrap();
}
