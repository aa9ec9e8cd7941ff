//! The arena's books on the fake device: placement, stream order, giving
//! memory back, out-of-memory recovery, captures, failure injection at
//! every call, and random runs against the fake's checks.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

use super::book::{Kind, ALIGN, SMALL_MAX};
use super::core::Arena;
use super::fake::{FakePhys, Op};
use super::front::Front;
use super::{ArenaOptions, ArenaStats};
use crate::capture::CaptureStatus;
use crate::device::Device;
use crate::error::{Error, InvalidReason};
use crate::resource::MemoryResource;
use crate::stream::Stream;
use crate::testing::FakeResource;

const MIB: usize = 1 << 20;
const GRANULE: usize = 2 * MIB;

pub(super) fn arena(capacity: usize, opts: ArenaOptions) -> (Arena<FakePhys>, FakePhys) {
    let fake = FakePhys::new(capacity);
    let a = Arena::new(fake.clone(), GRANULE, opts, 1 << 30).unwrap();
    (a, fake)
}

pub(super) fn stream(i: usize) -> Stream {
    Stream::fake(0xa7_0000 + 16 * i, 0)
}

/// Allocates on `s` and tells the fake (which checks the hand-out).
pub(super) fn alloc(a: &Arena<FakePhys>, f: &FakePhys, bytes: usize, s: &Stream) -> usize {
    let addr = a.allocate(bytes, s).unwrap();
    f.handed(addr, bytes, s);
    f.enqueue(s);
    addr
}

pub(super) fn free(a: &Arena<FakePhys>, f: &FakePhys, addr: usize, bytes: usize, s: &Stream) {
    f.freed(addr, bytes.div_ceil(ALIGN) * ALIGN, s);
    a.deallocate(addr, bytes, s).unwrap();
}

/// On a device that drops waits (`drop_waits`), the fake's check saw a
/// block handed to a stream while another stream's free of it was pending.
fn assert_sees_a_missing_wait(f: &FakePhys) {
    assert!(
        f.vm().violations.iter().any(|v| v.contains("is pending")),
        "the check sees a missing wait"
    );
}

pub(super) fn clean(a: &Arena<FakePhys>, f: &FakePhys) {
    a.lock().book.check();
    let vm = f.vm();
    assert!(vm.violations.is_empty(), "{:#?}", vm.violations);
    let st = a.stats();
    assert_eq!(
        vm.created.values().sum::<usize>(),
        st.mapped_bytes + st.unreleased_bytes
    );
    let ghosts = a.lock().book.ghost_bytes();
    assert_eq!(
        vm.mapped.values().map(|m| m.0).sum::<usize>(),
        st.mapped_bytes + ghosts
    );
}

/// After dropping the arena: nothing made, mapped or reserved is left.
pub(super) fn assert_all_back(f: &FakePhys) {
    let vm = f.vm();
    assert!(vm.violations.is_empty(), "{:#?}", vm.violations);
    assert!(vm.created.is_empty(), "physical chunks left: {:?}", vm.created);
    assert!(vm.mapped.is_empty());
    assert!(vm.reservations.is_empty());
}

#[test]
fn a_stream_reuses_its_own_free_at_once() {
    let (a, f) = arena(1 << 30, ArenaOptions::default());
    let s = stream(1);
    let x = alloc(&a, &f, 3000, &s);
    free(&a, &f, x, 3000, &s);
    let maps = a.stats().maps;
    let y = alloc(&a, &f, 2900, &s);
    assert_eq!(x, y, "the same stream reuses the freed block without waiting");
    assert_eq!(a.stats().maps, maps);
    free(&a, &f, y, 2900, &s);
    clean(&a, &f);
    drop(a);
    assert_all_back(&f);
}

#[test]
fn another_stream_waits_for_the_fence() {
    // Device waits off: the other stream learns of the free by a query.
    let (a, f) = arena(1 << 30, ArenaOptions::default().stream_waits(false));
    let (s, t) = (stream(2), stream(3));
    // Fill one small chunk exactly, so the next block needs the freed one
    // or a new chunk.
    let x = alloc(&a, &f, GRANULE, &s);
    free(&a, &f, x, GRANULE, &s);
    let y = alloc(&a, &f, GRANULE, &t);
    assert_ne!(x, y, "the free on s is not known complete: t gets new memory");
    assert_eq!(a.stats().fences, 1, "t's miss recorded a fence on s");
    f.complete(&s);
    free(&a, &f, y, GRANULE, &t);
    let z = alloc(&a, &f, GRANULE, &t);
    assert_eq!(z, y, "t's own free first");
    let w = alloc(&a, &f, GRANULE, &t);
    assert_eq!(w, x, "s's free once its fence completed");
    assert_eq!(a.stats().maps, 2);
    free(&a, &f, z, GRANULE, &t);
    free(&a, &f, w, GRANULE, &t);
    clean(&a, &f);
}

#[test]
fn neighbours_merge_and_best_fit_splits() {
    let (a, f) = arena(1 << 30, ArenaOptions::default());
    let s = stream(4);
    let blocks: Vec<_> = (0..4).map(|_| alloc(&a, &f, 256 << 10, &s)).collect();
    assert!(
        blocks.windows(2).all(|w| w[1] == w[0] + (256 << 10)),
        "one after another"
    );
    for &b in &blocks {
        free(&a, &f, b, 256 << 10, &s);
    }
    let st = a.stats();
    assert_eq!(st.free_bytes, GRANULE);
    assert_eq!(st.idle_bytes, 0, "parked for the stream, not known complete");
    // A trim that keeps everything flushes the parked blocks and waits.
    a.trim(usize::MAX);
    let st = a.stats();
    assert_eq!(
        st.largest_free, GRANULE,
        "the four and the rest of the chunk are one range"
    );
    assert_eq!(st.fragmentation, 0.0);
    assert_eq!(st.idle_bytes, GRANULE);
    // A small hole and a large one: best fit takes the small hole.
    let p = alloc(&a, &f, 512 << 10, &s);
    let q = alloc(&a, &f, 64 << 10, &s);
    let r = alloc(&a, &f, 256 << 10, &s);
    free(&a, &f, q, 64 << 10, &s);
    a.trim(usize::MAX);
    let small = alloc(&a, &f, 32 << 10, &s);
    assert_eq!(small, q, "the 64 KiB hole fits 32 KiB best");
    for (b, n) in [(p, 512 << 10), (r, 256 << 10), (small, 32 << 10)] {
        free(&a, &f, b, n, &s);
    }
    clean(&a, &f);
}

#[test]
fn small_blocks_never_split_large_ranges() {
    let (a, f) = arena(1 << 30, ArenaOptions::default());
    let s = stream(5);
    let big = alloc(&a, &f, 8 * MIB, &s);
    free(&a, &f, big, 8 * MIB, &s);
    let small = alloc(&a, &f, 4096, &s);
    let lock = a.lock();
    let kind_at = |addr: usize| {
        lock.book
            .chunks()
            .find(|(c, ch)| *c <= addr && addr < c + ch.len)
            .map(|(_, ch)| ch.kind)
    };
    assert_eq!(kind_at(small), Some(Kind::Small));
    assert_eq!(kind_at(big), Some(Kind::Large));
    drop(lock);
    assert_eq!(a.stats().largest_free, 8 * MIB, "the large range is whole");
    free(&a, &f, small, 4096, &s);
    clean(&a, &f);
}

#[test]
fn a_large_block_extends_a_free_range_at_the_end() {
    let (a, f) = arena(1 << 30, ArenaOptions::default().chunk_bytes(4 * MIB));
    let s = stream(6);
    let x = alloc(&a, &f, 3 * MIB, &s);
    // 1 MiB free at the chunk's end; 5 MiB more needs only 4 MiB mapped.
    let y = alloc(&a, &f, 2 * MIB + 512, &s);
    let _ = y;
    free(&a, &f, y, 2 * MIB + 512, &s);
    free(&a, &f, x, 3 * MIB, &s);
    let before = a.stats();
    let z = alloc(&a, &f, 9 * MIB, &s);
    let after = a.stats();
    assert_eq!(z, x, "the block starts in the existing range");
    assert!(
        after.mapped_bytes - before.mapped_bytes < 9 * MIB,
        "only the missing part was mapped ({} -> {})",
        before.mapped_bytes,
        after.mapped_bytes
    );
    free(&a, &f, z, 9 * MIB, &s);
    clean(&a, &f);
}

#[test]
fn trim_gives_every_idle_chunk_back() {
    let (a, f) = arena(1 << 30, ArenaOptions::default());
    let (s, t) = (stream(7), stream(8));
    let mut held = Vec::new();
    for i in 0..40 {
        let n = if i % 3 == 0 { 64 << 10 } else { 3 * MIB + i * 4096 };
        held.push((alloc(&a, &f, n, if i % 2 == 0 { &s } else { &t }), n, i % 2));
    }
    let keep = held.pop().unwrap();
    for (x, n, k) in held {
        free(&a, &f, x, n, if k == 0 { &s } else { &t });
    }
    // Nothing completed on the device yet: trim waits for the fences.
    a.trim(0);
    let st = a.stats();
    assert!(
        st.mapped_bytes <= keep.1.next_multiple_of(GRANULE) + 20 * MIB,
        "{st:?}"
    );
    assert!(st.waits > 0);
    free(&a, &f, keep.0, keep.1, if keep.2 == 0 { &s } else { &t });
    a.trim(0);
    assert_eq!(a.stats().mapped_bytes, 0);
    clean(&a, &f);
    drop(a);
    assert_all_back(&f);
}

#[test]
fn out_of_memory_waits_for_other_streams_frees_then_refuses_with_a_report() {
    let (a, f) = arena(64 * MIB, ArenaOptions::default());
    let (s, t) = (stream(9), stream(10));
    let x = alloc(&a, &f, 40 * MIB, &s);
    free(&a, &f, x, 40 * MIB, &s);
    // t cannot reuse s's pending free and the device has 24 MiB left: the
    // arena must wait for s's free, give the chunks back and map anew.
    let y = alloc(&a, &f, 50 * MIB, &t);
    let st = a.stats();
    assert!(st.recoveries > 0 && st.waits > 0, "{st:?}");
    clean(&a, &f);
    match a.allocate(30 * MIB, &t) {
        Err(Error::OutOfMemory {
            requested,
            arena: Some(report),
            ..
        }) => {
            assert_eq!(requested, 30 * MIB);
            assert_eq!(report.live_bytes, 50 * MIB);
            assert!(report.mapped_bytes >= 50 * MIB);
            assert_eq!(report.refusals, 1);
        }
        other => panic!("expected a refusal with a report, got {other:?}"),
    }
    free(&a, &f, y, 50 * MIB, &t);
    clean(&a, &f);
}

#[test]
fn a_refused_growth_gives_back_the_chunks_it_made() {
    let (a, f) = arena(100 * MIB, ArenaOptions::default());
    let s = stream(12);
    let x = alloc(&a, &f, 8 * MIB, &s);
    let before = a.stats().mapped_bytes;
    // More than the device holds: chunks are made one by one until the
    // device refuses; none of them may stay (before, they stayed mapped,
    // and the device was left with nothing for anyone else).
    assert!(matches!(
        a.allocate(300 * MIB, &s),
        Err(Error::OutOfMemory { .. })
    ));
    let st = a.stats();
    assert_eq!(st.mapped_bytes, before, "{st:?}");
    assert_eq!(f.vm().created.values().sum::<usize>(), before);
    clean(&a, &f);
    // A map that fails in the middle of a growth of several chunks: the
    // chunks made before it go back too, and the error is the map's.
    f.fail(Op::Map, 2);
    assert!(a.allocate(70 * MIB, &s).is_err());
    assert_eq!(a.stats().mapped_bytes, before);
    assert_eq!(f.vm().created.values().sum::<usize>(), before);
    clean(&a, &f);
    // And the arena grows normally afterwards, into the same device memory.
    let y = alloc(&a, &f, 70 * MIB, &s);
    free(&a, &f, y, 70 * MIB, &s);
    free(&a, &f, x, 8 * MIB, &s);
    clean(&a, &f);
    drop(a);
    assert_all_back(&f);
}

#[test]
fn max_mapped_caps_growth() {
    let (a, f) = arena(1 << 30, ArenaOptions::default().max_mapped(Some(8 * MIB)));
    let s = stream(11);
    let x = alloc(&a, &f, 6 * MIB, &s);
    assert!(matches!(a.allocate(6 * MIB, &s), Err(Error::OutOfMemory { .. })));
    free(&a, &f, x, 6 * MIB, &s);
    let y = alloc(&a, &f, 6 * MIB, &s);
    free(&a, &f, y, 6 * MIB, &s);
    clean(&a, &f);
}

#[test]
fn bad_frees_are_refused_and_change_nothing() {
    let (a, f) = arena(1 << 30, ArenaOptions::default());
    let s = stream(12);
    let x = alloc(&a, &f, 4096, &s);
    let e = a.deallocate(x + 512, 4096, &s).unwrap_err();
    assert_eq!(e.invalid_reason(), Some(InvalidReason::Other));
    assert!(a.deallocate(x, 100_000, &s).is_err(), "a wrong size");
    assert_eq!(a.stats().live_blocks, 1);
    free(&a, &f, x, 4096, &s);
    assert!(a.deallocate(x, 4096, &s).is_err(), "a double free");
    clean(&a, &f);
}

/// A failure at every call of every kind, one at a time, in a run that
/// grows, frees across streams, recovers from out of memory and trims:
/// nothing leaks and the books stay right.
#[test]
fn a_failed_call_anywhere_leaks_nothing_and_corrupts_nothing() {
    let ops = [
        Op::Create,
        Op::Map,
        Op::Unmap,
        Op::Release,
        Op::NewFence,
        Op::Record,
        Op::Done,
        Op::Wait,
        Op::WaitOn,
    ];
    for op in ops {
        for skip in 0..12 {
            let (a, f) = arena(48 * MIB, ArenaOptions::default().chunk_bytes(8 * MIB));
            f.fail(op, skip);
            let (s, t) = (stream(13), stream(14));
            let mut held: Vec<(usize, usize, Stream)> = Vec::new();
            for i in 0..24usize {
                let st = if i % 3 == 0 { &t } else { &s };
                let n = [4096, 700 << 10, 5 * MIB, 12 * MIB][i % 4];
                // Out of memory, or the injected failure (the resource
                // then serves from its pool: see `front`).
                if let Ok(x) = a.allocate(n, st) {
                    f.handed(x, n, st);
                    f.enqueue(st);
                    held.push((x, n, st.clone()));
                }
                if i % 2 == 1 && !held.is_empty() {
                    let (x, n, st) = held.remove(i % held.len());
                    free(&a, &f, x, n, &st);
                }
                if i % 7 == 6 {
                    f.complete(&s);
                }
                clean(&a, &f);
            }
            a.trim(0);
            clean(&a, &f);
            f.stop_failing();
            for (x, n, st) in held {
                free(&a, &f, x, n, &st);
            }
            a.trim(0);
            clean(&a, &f);
            assert_eq!(a.stats().mapped_bytes, 0, "{op:?} after {skip}");
            drop(a);
            assert_all_back(&f);
        }
    }
}

/// Random runs: several streams, random sizes, frees on the allocating
/// stream or another one, random completions, random failures; the fake
/// checks every hand-out and every unmap.
#[test]
fn random_runs_keep_stream_order_and_lose_nothing() {
    let (mut device_waits, mut moved, mut moved_over) = (0, 0, 0);
    for seed in 0..60u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let cap = [32 * MIB, 96 * MIB, 1 << 30][seed as usize % 3];
        let opts = ArenaOptions::default()
            .chunk_bytes([4 * MIB, 20 * MIB][rng.usize(0..2)])
            .release_threshold([None, Some(0), Some(8 * MIB)][rng.usize(0..3)]);
        let whole = seed % 6 >= 4;
        let opts = ArenaOptions {
            min_grow: [0, 8 * MIB][seed as usize % 4 / 2],
            // Moves for every growth (this run's growths are small).
            move_min: 0,
            ..opts
        }
        .whole_blocks(whole);
        let (a, f) = arena(cap, opts);
        if seed % 2 == 1 {
            f.fail_randomly(seed, 25);
        }
        let streams: Vec<Stream> = (0..3).map(|i| stream(20 + i + 3 * seed as usize)).collect();
        let mut held: Vec<(usize, usize, usize)> = Vec::new();
        let mut refused = 0;
        for _ in 0..400 {
            match rng.u32(0..10) {
                0..=4 => {
                    // Large blocks too, for the rules of `growth.rs`
                    // (from 32 MiB).
                    let n = match rng.u32(0..9) {
                        0 | 1 => rng.usize(1..4096),
                        2 | 3 => rng.usize(4096..SMALL_MAX),
                        4 | 5 => rng.usize(SMALL_MAX..8 * MIB),
                        6 | 7 => rng.usize(8 * MIB..30 * MIB),
                        _ => rng.usize(30 * MIB..70 * MIB),
                    };
                    let si = rng.usize(0..streams.len());
                    match a.allocate(n, &streams[si]) {
                        Ok(x) => {
                            f.handed(x, n, &streams[si]);
                            f.enqueue(&streams[si]);
                            if whole {
                                assert_eq!(f.pieces(x, n), 1, "seed {seed}: a block across chunks");
                            }
                            held.push((x, n, si));
                        }
                        Err(Error::OutOfMemory { .. }) => refused += 1,
                        Err(e) if seed % 2 == 1 => {
                            assert!(e.to_string().contains("injected"), "seed {seed}: {e}");
                        }
                        Err(e) => panic!("seed {seed}: {e}"),
                    }
                }
                5..=7 if !held.is_empty() => {
                    let (x, n, si) = held.swap_remove(rng.usize(0..held.len()));
                    // Freed on another stream than it was used on: that
                    // stream must first be ordered after the use (as
                    // `DeviceBuffer` does); here the device completes it.
                    let fi = if rng.bool() {
                        si
                    } else {
                        rng.usize(0..streams.len())
                    };
                    if fi != si {
                        f.complete(&streams[si]);
                    }
                    free(&a, &f, x, n, &streams[fi]);
                }
                8 => f.complete(&streams[rng.usize(0..streams.len())]),
                _ => {
                    a.trim(rng.usize(0..64 * MIB));
                }
            }
            a.lock().book.check();
        }
        clean(&a, &f);
        f.stop_failing();
        let st: ArenaStats = a.stats();
        device_waits += st.stream_waits;
        moved += st.moves;
        moved_over += a.lock().counters.moved_over;
        assert!(st.peak_live <= cap, "seed {seed}");
        {
            let state = a.lock();
            let kept = state.unreleased.len() + state.orphans.len();
            assert_eq!(
                st.creates - st.releases,
                (st.chunks + kept) as u64,
                "seed {seed}: creates - releases is the chunks held"
            );
        }
        let vmm_ops = [
            Op::Reserve,
            Op::Unreserve,
            Op::Create,
            Op::Release,
            Op::Map,
            Op::Grant,
            Op::Unmap,
        ];
        assert_eq!(
            st.vmm_calls,
            vmm_ops
                .iter()
                .map(|op| u64::from(f.vm().calls.get(op).copied().unwrap_or(0)))
                .sum::<u64>(),
            "seed {seed}: every virtual-memory call is counted"
        );
        for (x, n, si) in held {
            free(&a, &f, x, n, &streams[si]);
        }
        a.trim(0);
        clean(&a, &f);
        assert_eq!(a.stats().mapped_bytes, 0, "seed {seed} ({refused} refused)");
        drop(a);
        assert_all_back(&f);
    }
    assert!(device_waits > 0, "the runs took frees by device waits");
    assert!(moved > 0, "the runs moved chunks");
    assert!(moved_over > 0, "the runs moved chunks of other streams' frees");
}

/// A device of `cap` bytes holds its capacity in blocks whatever their
/// order of frees: once everything is free and complete, a block as large
/// as the device fits (idle chunks are given back and mapped anew).
#[test]
fn never_refused_while_idle_memory_would_do() {
    let (a, f) = arena(64 * MIB, ArenaOptions::default().chunk_bytes(4 * MIB));
    let streams: Vec<Stream> = (0..4).map(|i| stream(300 + i)).collect();
    let mut held = Vec::new();
    for i in 0..30 {
        let s = &streams[i % 4];
        held.push((
            alloc(&a, &f, [4096, 600 << 10, 2 * MIB][i % 3], s),
            [4096, 600 << 10, 2 * MIB][i % 3],
            i % 4,
        ));
    }
    for (x, n, si) in held {
        free(&a, &f, x, n, &streams[(si + 1) % 4]);
    }
    // Nothing completed: the allocation must wait for the frees, give
    // every chunk back, and map 60 MiB in one range.
    let big = alloc(&a, &f, 60 * MIB, &streams[0]);
    free(&a, &f, big, 60 * MIB, &streams[0]);
    clean(&a, &f);
}

// ---- the resource contract ----

pub(super) fn front(capacity: usize) -> (Arc<Front<FakePhys>>, FakePhys, Arc<FakeResource>) {
    let (a, f) = arena(capacity, ArenaOptions::default());
    let graph = FakeResource::new(None);
    let fr = Front::new(a, Device::fake(0), graph.clone() as Arc<dyn MemoryResource>);
    (fr, f, graph)
}

#[test]
fn captured_allocations_are_graph_memory_and_arena_frees_wait_for_the_graph() {
    let (fr, f, graph) = front(1 << 30);
    let s = stream(400);
    let before = fr.allocate(8192, &s).unwrap() as usize;
    assert!(fr.arena.owns(before));
    s.set_fake_capture(CaptureStatus::Active, 0xa7e1);
    crate::testing::fake_graph_begin(0xa7e1, 0);
    let inside = fr.allocate(8192, &s).unwrap();
    assert!(!fr.arena.owns(inside as usize), "graph memory, not the arena's");
    assert_eq!(graph.state().live.len(), 1);
    // SAFETY: allocated above, freed once.
    unsafe {
        fr.deallocate(inside, 8192, &s).unwrap();
        fr.deallocate(before as *mut c_void, 8192, &s).unwrap();
    }
    assert!(
        graph.state().live.is_empty(),
        "the graph's own block went back to the graph resource"
    );
    assert_eq!(
        fr.arena.stats().live_blocks,
        1,
        "the arena block waits for the graph"
    );
    s.set_fake_capture(CaptureStatus::None, 0);
    assert_eq!(crate::testing::fake_graph_destroy(0xa7e1), 1);
    crate::graph::reclaim_graph_frees().unwrap();
    assert_eq!(fr.arena.stats().live_blocks, 0, "freed once the graph is gone");
    let _ = f;
}

#[test]
fn the_resource_refuses_zero_bytes_and_other_devices() {
    let (fr, _f, _g) = front(1 << 30);
    let s = stream(401);
    assert_eq!(
        fr.allocate(0, &s).unwrap_err().invalid_reason(),
        Some(InvalidReason::ZeroBytes)
    );
    let other = Stream::fake(0xa7_9000, 1);
    assert_eq!(
        fr.allocate(64, &other).unwrap_err().invalid_reason(),
        Some(InvalidReason::WrongDevice)
    );
    let mut seen = HashMap::new();
    for i in 0..100 {
        let p = fr.allocate(1000 + i, &s).unwrap() as usize;
        assert_eq!(p % 256, 0, "aligned");
        assert!(seen.insert(p, 1000 + i).is_none());
    }
    for (p, n) in seen {
        // SAFETY: allocated above, freed once.
        unsafe { fr.deallocate(p as *mut c_void, n, &s).unwrap() };
    }
}

#[test]
fn a_failed_map_steps_aside_to_the_pool() {
    let (fr, f, pool) = front(1 << 30);
    let s = stream(402);
    f.fail(Op::Map, 0);
    let p = fr.allocate(4096, &s).unwrap();
    assert!(!fr.arena.owns(p as usize), "served by the pool");
    assert_eq!(pool.state().live.len(), 1);
    assert_eq!(fr.stepped_aside.load(std::sync::atomic::Ordering::Relaxed), 1);
    let q = fr.allocate(4096, &s).unwrap();
    assert!(
        fr.arena.owns(q as usize),
        "the arena serves again once mapping works"
    );
    // SAFETY: allocated above, freed once.
    unsafe {
        fr.deallocate(p, 4096, &s).unwrap();
        fr.deallocate(q, 4096, &s).unwrap();
    }
    assert!(pool.state().live.is_empty());
    assert_eq!(fr.arena.stats().live_blocks, 0);
    // Out of memory in the arena and in the pool: the arena's refusal.
    let (fr, _f, _pool) = {
        let (a, f) = arena(4 * MIB, ArenaOptions::default());
        let pool = FakeResource::new(Some(0));
        (
            Front::new(a, Device::fake(0), pool.clone() as Arc<dyn MemoryResource>),
            f,
            pool,
        )
    };
    match fr.allocate(8 * MIB, &s) {
        Err(Error::OutOfMemory { arena: Some(_), .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_per_thread_default_stream_is_served_by_the_pool() {
    let (fr, _f, pool) = front(1 << 30);
    let per_thread = Stream::fake(crate::stream::PER_THREAD, 0);
    let p = fr.allocate(4096, &per_thread).unwrap();
    assert!(!fr.arena.owns(p as usize));
    assert_eq!(pool.state().live.len(), 1);
    // SAFETY: allocated above, freed once.
    unsafe { fr.deallocate(p, 4096, &per_thread).unwrap() };
    assert!(pool.state().live.is_empty());
}

#[test]
fn a_forgotten_stream_leaves_nothing_of_its_own() {
    let (a, f) = arena(1 << 30, ArenaOptions::default());
    let (s, t) = (stream(500), stream(501));
    let x = alloc(&a, &f, 4096, &s);
    let y = alloc(&a, &f, 5 * MIB, &s);
    free(&a, &f, x, 4096, &s);
    free(&a, &f, y, 5 * MIB, &s);
    assert!(a.forget(&s).unwrap());
    assert!(!a.forget(&s).unwrap(), "once");
    clean(&a, &f);
    // Its memory is anyone's at once (the forget waited for its frees).
    let fences = a.stats().fences;
    let z = alloc(&a, &f, 5 * MIB, &t);
    assert_eq!(z, y);
    assert_eq!(a.stats().fences, fences, "no fence needed");
    // A failed wait leaves the stream known.
    let w = alloc(&a, &f, 8192, &s);
    free(&a, &f, w, 8192, &s);
    f.fail(Op::Wait, 0);
    assert!(a.forget(&s).is_err());
    assert!(a.forget(&s).unwrap());
    free(&a, &f, z, 5 * MIB, &t);
    clean(&a, &f);
}

#[test]
fn whole_blocks_lie_in_one_physical_allocation() {
    let (a, f) = arena(1 << 30, ArenaOptions::default().whole_blocks(true));
    let s = stream(600);
    let mut held = Vec::new();
    for (i, n) in [30 * MIB, 5 * MIB, 100 * MIB, 700 << 10, 3 * MIB, 64 * MIB]
        .into_iter()
        .enumerate()
    {
        let x = alloc(&a, &f, n, &s);
        assert_eq!(f.pieces(x, n), 1, "block {i} of {n} bytes spans chunks");
        held.push((x, n));
    }
    // Freed and merged, the ranges span chunks; new blocks still do not.
    for (x, n) in held.drain(..) {
        free(&a, &f, x, n, &s);
    }
    a.trim(usize::MAX);
    for n in [40 * MIB, 90 * MIB, 6 * MIB] {
        let x = alloc(&a, &f, n, &s);
        assert_eq!(f.pieces(x, n), 1);
        held.push((x, n));
    }
    for (x, n) in held {
        free(&a, &f, x, n, &s);
    }
    clean(&a, &f);
    // Without the option a block may span chunks (what the option is for).
    let (b, g) = arena(1 << 30, ArenaOptions::default());
    let x = alloc(&b, &g, 100 * MIB, &s);
    assert!(g.pieces(x, 100 * MIB) > 1);
    free(&b, &g, x, 100 * MIB, &s);
}

/// Stream T would grow while stream S's free of a block that fits is
/// pending: T waits for S's fence on the device and takes the block, the
/// host waiting for nothing; a third stream takes it from T the same way,
/// ordered after S through T's wait. Off, or with the wait refused, T
/// grows instead. A device that dropped the wait would be caught by the
/// fake's check.
#[test]
fn a_growing_stream_takes_another_streams_pending_frees_by_a_device_wait() {
    let (a, f) = arena(1 << 30, ArenaOptions::default());
    let (s, t, u) = (stream(40), stream(41), stream(42));
    let x = alloc(&a, &f, 16 * MIB, &s);
    free(&a, &f, x, 16 * MIB, &s);
    let maps = a.stats().maps;
    let y = alloc(&a, &f, 16 * MIB, &t);
    let st = a.stats();
    assert_eq!(y, x, "T reuses S's pending free");
    assert_eq!(st.maps, maps, "no growth");
    assert_eq!(st.stream_waits, 1);
    assert_eq!(st.waits, 0, "the host waited for nothing");
    assert_eq!(f.vm().calls.get(&Op::WaitOn), Some(&1));
    // S still has not completed: U's use is ordered after S's through T.
    free(&a, &f, y, 16 * MIB, &t);
    let z = alloc(&a, &f, 16 * MIB, &u);
    assert_eq!(z, x);
    assert_eq!(a.stats().stream_waits, 2);
    free(&a, &f, z, 16 * MIB, &u);
    clean(&a, &f);
    // Completing U's work completes what it waited for: everything idles.
    f.complete(&u);
    a.trim(0);
    assert_eq!(a.stats().mapped_bytes, 0);
    clean(&a, &f);

    // Off: T grows.
    let (a, f) = arena(1 << 30, ArenaOptions::default().stream_waits(false));
    let x = alloc(&a, &f, 16 * MIB, &s);
    free(&a, &f, x, 16 * MIB, &s);
    let y = alloc(&a, &f, 16 * MIB, &t);
    assert_ne!(y, x);
    assert_eq!(a.stats().stream_waits, 0);
    clean(&a, &f);

    // The wait refused: T grows, nothing is booked as waited.
    let (a, f) = arena(1 << 30, ArenaOptions::default());
    let x = alloc(&a, &f, 16 * MIB, &s);
    free(&a, &f, x, 16 * MIB, &s);
    f.fail(Op::WaitOn, 0);
    let y = alloc(&a, &f, 16 * MIB, &t);
    assert_ne!(y, x);
    assert_eq!(a.stats().stream_waits, 0);
    free(&a, &f, y, 16 * MIB, &t);
    let _ = alloc(&a, &f, 16 * MIB, &t);
    clean(&a, &f);

    // A device that drops the wait: the fake sees S's free handed to T.
    let (a, f) = arena(1 << 30, ArenaOptions::default());
    f.vm().drop_waits = true;
    let x = alloc(&a, &f, 16 * MIB, &s);
    free(&a, &f, x, 16 * MIB, &s);
    let _ = alloc(&a, &f, 16 * MIB, &t);
    assert_sees_a_missing_wait(&f);
}

/// Frees that do not hold the request are not waited for: a device wait
/// is made only when it saves the growth.
#[test]
fn no_device_wait_for_frees_that_would_not_hold_the_request() {
    let (a, f) = arena(1 << 30, ArenaOptions::default());
    let (s, t) = (stream(43), stream(44));
    let x = alloc(&a, &f, 4 * MIB, &s);
    let keep = alloc(&a, &f, 4 * MIB, &s);
    free(&a, &f, x, 4 * MIB, &s);
    let _ = alloc(&a, &f, 12 * MIB, &t);
    assert_eq!(a.stats().stream_waits, 0);
    assert_eq!(f.vm().calls.get(&Op::WaitOn), None);
    free(&a, &f, keep, 4 * MIB, &s);
    clean(&a, &f);
}

/// A growth of 64 MiB or more maps the memory of a wholly free chunk
/// elsewhere instead of making memory; a smaller one makes memory.
#[test]
fn large_growths_move_free_chunks_and_small_ones_do_not() {
    let (a, f) = arena(1 << 30, ArenaOptions::default().chunk_bytes(16 * MIB));
    let s = stream(45);
    // Two chunks' worth, then a block after them that stays live, so the
    // freed range cannot be extended in place.
    let x = alloc(&a, &f, 32 * MIB, &s);
    let _wall = alloc(&a, &f, 8 * MIB, &s);
    free(&a, &f, x, 32 * MIB, &s);
    let before = a.stats();
    let small = alloc(&a, &f, 48 * MIB, &s);
    let st = a.stats();
    assert_eq!(st.moves, before.moves, "a 48 MiB growth moves nothing");
    assert_eq!(st.mapped_bytes, before.mapped_bytes + 48 * MIB);
    free(&a, &f, small, 48 * MIB, &s);
    let before = a.stats();
    // 160 MiB: the free range at the end (48 MiB or more) grows by at
    // least 64 MiB.
    let large = alloc(&a, &f, 160 * MIB, &s);
    let st = a.stats();
    assert!(st.moves > before.moves, "a large growth moves the free chunks");
    assert_eq!(
        st.mapped_bytes,
        before.mapped_bytes + 160 * MIB - before.free_bytes,
        "and makes only what no free chunk holds"
    );
    free(&a, &f, large, 160 * MIB, &s);
    clean(&a, &f);
}

#[test]
fn a_block_holds_the_chunks_it_touches() {
    let (a, f) = arena(1 << 30, ArenaOptions::default().chunk_bytes(4 * MIB));
    let s = stream(0);
    // 10 MiB grow the arena by chunks of 4, 4 and 2 MiB; 4 KiB by one
    // small chunk (a granule).
    let big = alloc(&a, &f, 10 * MIB, &s);
    let small = alloc(&a, &f, 4096, &s);
    let segs = a.segments();
    assert_eq!(segs.len(), 4, "{segs:x?}");
    assert_eq!(a.lock().book.holding(&[]), 0);
    assert_eq!(a.lock().book.holding(&[(big, 10 * MIB)]), 10 * MIB);
    // A block within one chunk holds that chunk.
    assert_eq!(a.lock().book.holding(&[(big + 5 * MIB, 512)]), 4 * MIB);
    assert_eq!(a.lock().book.holding(&[(small, 4096)]), GRANULE);
    // Each chunk counted once; an address outside the arena holds nothing.
    assert_eq!(
        a.lock()
            .book
            .holding(&[(big, 10 * MIB), (small, 4096), (big + MIB, 512)]),
        10 * MIB + GRANULE
    );
    assert_eq!(a.lock().book.holding(&[(1 << 12, 512)]), 0);
    free(&a, &f, big, 10 * MIB, &s);
    free(&a, &f, small, 4096, &s);
    clean(&a, &f);
}

#[test]
fn a_large_block_made_again_at_once_keeps_its_place_until_any_other_allocation() {
    let (a, f) = arena(1 << 30, ArenaOptions::default());
    let s = stream(0);
    let big = alloc(&a, &f, 64 * MIB, &s);
    let other = alloc(&a, &f, 40 * MIB, &s);
    free(&a, &f, big, 64 * MIB, &s);
    // Parked: the same length again on the stream takes it back whole.
    assert_eq!(a.lock().book.parked_bytes, 64 * MIB);
    assert_eq!(alloc(&a, &f, 64 * MIB, &s), big);
    a.lock().book.check();
    // Another length: the parked block is freed into the ranges first and
    // best fit places the request there, as with no parking.
    free(&a, &f, big, 64 * MIB, &s);
    let mapped = a.stats().mapped_bytes;
    assert_eq!(alloc(&a, &f, 48 * MIB, &s), big);
    assert_eq!(a.lock().book.parked_bytes, 0);
    assert_eq!(
        a.stats().mapped_bytes,
        mapped,
        "no growth for a request the freed block holds"
    );
    // One large block parks a stream; blocks under 32 MiB above 1 MiB never.
    free(&a, &f, big, 48 * MIB, &s);
    free(&a, &f, other, 40 * MIB, &s);
    assert_eq!(a.lock().book.parked_bytes, 48 * MIB);
    let mid = alloc(&a, &f, 8 * MIB, &s);
    free(&a, &f, mid, 8 * MIB, &s);
    assert_eq!(a.lock().book.parked_bytes, 0);
    // Another stream's next allocation frees it too: no stream finds a
    // large block of another missing from the free ranges.
    let big = alloc(&a, &f, 64 * MIB, &s);
    free(&a, &f, big, 64 * MIB, &s);
    assert_eq!(a.lock().book.parked_bytes, 64 * MIB);
    let t = stream(1);
    let small = alloc(&a, &f, 4096, &t);
    assert_eq!(a.lock().book.parked_bytes, 0);
    free(&a, &f, small, 4096, &t);
    clean(&a, &f);
}

/// Another stream's frees scattered among its live blocks, so that no
/// window holds a large request: the growing stream waits on the device
/// for them and moves their whole chunks where it grows, making no memory;
/// without the wait (refused), it makes the memory; and a device that
/// drops the wait is caught handing the pending memory over.
#[test]
fn a_large_growth_moves_another_streams_scattered_frees_after_a_device_wait() {
    let opts = || ArenaOptions::default().chunk_bytes(16 * MIB);
    // S: two 32 MiB blocks (two chunks each) with live walls after them,
    // freed; T then needs 64 MiB.
    let scatter = |a: &Arena<FakePhys>, f: &FakePhys, s: &Stream| -> Vec<usize> {
        let x = alloc(a, f, 32 * MIB, s);
        let w1 = alloc(a, f, 8 * MIB, s);
        let y = alloc(a, f, 32 * MIB, s);
        let w2 = alloc(a, f, 8 * MIB, s);
        free(a, f, x, 32 * MIB, s);
        free(a, f, y, 32 * MIB, s);
        vec![w1, w2]
    };
    let (s, t) = (stream(50), stream(51));

    let (a, f) = arena(1 << 30, opts());
    let walls = scatter(&a, &f, &s);
    let before = a.stats();
    let z = alloc(&a, &f, 64 * MIB, &t);
    let st = a.stats();
    assert_eq!(st.mapped_bytes, before.mapped_bytes, "no memory made");
    assert_eq!(st.moves, before.moves + 4, "S's four free chunks moved");
    assert_eq!(a.lock().counters.moved_over, 4);
    assert_eq!(st.stream_waits, before.stream_waits + 1, "after one device wait");
    assert_eq!(st.waits, 0, "the host waited for nothing");
    // S reuses none of it, and its own later growth cannot see the ghosts.
    let again = alloc(&a, &f, 32 * MIB, &s);
    assert!(again < z || again >= z + 64 * MIB);
    free(&a, &f, again, 32 * MIB, &s);
    free(&a, &f, z, 64 * MIB, &t);
    for w in walls {
        free(&a, &f, w, 8 * MIB, &s);
    }
    clean(&a, &f);
    // Once S's work completes, its old addresses are unmapped and every
    // chunk idles.
    f.complete(&s);
    f.complete(&t);
    a.trim(0);
    assert_eq!(a.stats().mapped_bytes, 0);
    clean(&a, &f);
    drop(a);
    assert_all_back(&f);

    // The wait refused: T makes its memory, S's frees stay S's.
    let (a, f) = arena(1 << 30, opts());
    let _walls = scatter(&a, &f, &s);
    let before = a.stats();
    f.fail(Op::WaitOn, 0);
    let _z = alloc(&a, &f, 64 * MIB, &t);
    let st = a.stats();
    assert_eq!(st.mapped_bytes, before.mapped_bytes + 64 * MIB);
    assert_eq!((st.moves, st.stream_waits), (before.moves, before.stream_waits));
    clean(&a, &f);

    // Off: no device waits, no moves of S's frees.
    let (a, f) = arena(1 << 30, opts().stream_waits(false));
    let _walls = scatter(&a, &f, &s);
    let before = a.stats();
    let _z = alloc(&a, &f, 64 * MIB, &t);
    assert_eq!(a.stats().moves, before.moves);
    clean(&a, &f);

    // A device that drops the wait: the fake sees S's pending memory
    // handed to T.
    let (a, f) = arena(1 << 30, opts());
    f.vm().drop_waits = true;
    let _walls = scatter(&a, &f, &s);
    let _z = alloc(&a, &f, 64 * MIB, &t);
    assert_sees_a_missing_wait(&f);
}

/// The host's time in the virtual-memory calls is counted (here each call
/// of the fake takes 2 ms): a growth adds at least the time of the calls it
/// made, an allocation from the free ranges adds none, and a trim adds
/// that of its unmaps and releases.
#[test]
fn the_stats_count_the_hosts_time_in_virtual_memory_calls() {
    use std::time::Duration;
    let (a, f) = arena(1 << 30, ArenaOptions::default());
    let s = stream(0);
    // Only the reservation made at creation so far, with no delay.
    assert_eq!(a.stats().vmm_calls, 1);
    assert!(a.stats().vmm_time < Duration::from_millis(1));
    let per_call = Duration::from_millis(2);
    f.vm().vmm_delay = per_call;
    let calls = |f: &FakePhys| -> u32 {
        let vm = f.vm();
        [Op::Create, Op::Map, Op::Unmap, Op::Release]
            .iter()
            .map(|op| vm.calls.get(op).copied().unwrap_or(0))
            .sum()
    };
    let x = alloc(&a, &f, 40 * MIB, &s);
    let grown = a.stats().vmm_time;
    assert!(a.stats().maps >= 2);
    assert!(
        grown >= per_call * calls(&f),
        "{grown:?} for {} calls of 2 ms",
        calls(&f)
    );
    free(&a, &f, x, 40 * MIB, &s);
    let y = alloc(&a, &f, 40 * MIB, &s);
    assert_eq!(a.stats().vmm_time, grown, "reuse made no virtual-memory call");
    free(&a, &f, y, 40 * MIB, &s);
    let before = calls(&f);
    f.complete(&s);
    assert!(a.trim(0) >= 40 * MIB);
    let trimmed = a.stats().vmm_time;
    assert!(calls(&f) > before);
    assert!(trimmed >= grown + per_call * (calls(&f) - before));
    clean(&a, &f);
}

/// A call that finds the arena busy with another thread's call (here a
/// thread holding its lock for 300 ms) is counted with its wait.
#[test]
fn the_stats_count_calls_that_waited_for_another_threads_call() {
    use std::sync::Barrier;
    use std::time::{Duration, Instant};
    let (a, f) = arena(1 << 30, ArenaOptions::default());
    let s = stream(0);
    let x = alloc(&a, &f, MIB, &s);
    assert_eq!(a.stats().lock_waits, 0);
    let held = Barrier::new(2);
    let waited = std::thread::scope(|scope| {
        scope.spawn(|| {
            let guard = a.lock();
            held.wait();
            std::thread::sleep(Duration::from_millis(300));
            drop(guard);
        });
        held.wait();
        let t = Instant::now();
        a.deallocate(x, MIB, &s).unwrap();
        t.elapsed()
    });
    let st = a.stats();
    assert_eq!(st.lock_waits, 1);
    assert!(st.lock_wait_time > Duration::ZERO && st.lock_wait_time <= waited);
    f.freed(x, MIB, &s);
    clean(&a, &f);
}
