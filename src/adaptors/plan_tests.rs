//! The planned arena on the fake runtime: hand-overs between streams whose
//! events and waits fail, captures on either stream, and a model of the
//! order the waits give the streams (vector clocks kept by the fake
//! runtime).

use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::capture::CaptureStatus;
use crate::plan::{Op, Slot, StreamOp};
use crate::testing::{self, FakeResource, Fault};

const KIB: usize = 1024;

/// Two streams in one arena of 2 KiB: stream 0's slots s0 at [0, 1K) and
/// s1 at [1K, 2K), then stream 1's at s1's bytes and s0's, every lane
/// starting over after its last slot.
fn handed_plan() -> Arc<Plan> {
    let slot = |offset: u64, stream: u32| Slot {
        size: KIB as u64,
        offset: Some(offset),
        stream,
    };
    let mut plan = Plan::with_slots(vec![slot(0, 0), slot(1024, 0), slot(1024, 1), slot(0, 1)], 2048);
    plan.wrap_to = Some(0);
    Arc::new(plan)
}

fn raw(s: &Stream) -> usize {
    s.as_raw() as usize
}

/// The interleaving of a race seen on a device: stream A frees s0 then
/// s1 and begins a capture; stream B is granted s1's bytes with a wait
/// for A's free, which cannot be made (no event can be recorded on a
/// capturing stream), so the request is refused. B's next request must
/// not get s0's bytes without a wait: a failed hand-over is not booked
/// as made. Once A's capture ends, both slots serve B again, each after
/// the free of its bytes.
#[test]
fn a_failed_hand_over_is_not_booked_as_made() {
    let domain = 0x3901;
    let up = FakeResource::new(None);
    let a = Stream::fake_in(0x39a0, 0, domain);
    let b = Stream::fake_in(0x39b0, 0, domain);
    let arena = PlannedArena::new(handed_plan());
    let (p0, s0) = arena.allocate(0, KIB, &a, &*up).expect("s0");
    let (p1, s1) = arena.allocate(0, KIB, &a, &*up).expect("s1");
    let base = p0 as usize;
    assert_eq!(p1 as usize, base + KIB);
    let free1 = testing::fake_mark(raw(&a));
    arena.free(s0, false).unwrap();
    let free2 = testing::fake_mark(raw(&a));
    arena.free(s1, false).unwrap();

    a.set_fake_capture(CaptureStatus::Active, 0x39);
    assert!(
        arena.allocate(1, KIB, &b, &*up).is_none(),
        "no event on a capturing stream"
    );
    assert!(
        arena.allocate(1, KIB, &b, &*up).is_none(),
        "s0's bytes granted without the wait for A's free"
    );
    assert_eq!(testing::fake_ordered_after(raw(&b), raw(&a)), 0);
    assert_eq!(arena.waits().failed, 2);
    assert_eq!(arena.counts(), (2, 2));

    a.set_fake_capture(CaptureStatus::None, 0);
    let (q, _) = arena
        .allocate(1, KIB, &b, &*up)
        .expect("s1's bytes, servable again");
    assert_eq!(q as usize, base + KIB);
    assert!(testing::fake_ordered_after(raw(&b), raw(&a)) >= free2);
    let (r, _) = arena
        .allocate(1, KIB, &b, &*up)
        .expect("s0's bytes, servable again");
    assert_eq!(r as usize, base);
    assert!(testing::fake_ordered_after(raw(&b), raw(&a)) >= free1);
    assert_eq!(arena.counts(), (4, 2));
    up.assert_clean();
}

/// A failed record leaves no event filed under its ticket: a later
/// hand-over of those frees records one itself instead of failing on an
/// event that does not exist (the slot stays servable).
#[test]
fn an_event_that_could_not_be_recorded_is_asked_for_again() {
    let domain = 0x3902;
    let up = FakeResource::new(None);
    let a = Stream::fake_in(0x39c0, 0, domain);
    let b = Stream::fake_in(0x39d0, 0, domain);
    let arena = PlannedArena::new(handed_plan());
    let (_, s0) = arena.allocate(0, KIB, &a, &*up).expect("s0");
    let (_, s1) = arena.allocate(0, KIB, &a, &*up).expect("s1");
    arena.free(s0, false).unwrap();
    let free2 = testing::fake_mark(raw(&a));
    arena.free(s1, false).unwrap();
    // The first event call fails: the record asked for by B's grant.
    testing::arm(domain, 0, Fault::Vendor, false);
    assert!(arena.allocate(1, KIB, &b, &*up).is_none());
    assert_eq!(testing::disarm(), (1, 1));
    // Asked again, recorded, waited for.
    arena
        .allocate(1, KIB, &b, &*up)
        .expect("served after the failure");
    assert!(testing::fake_ordered_after(raw(&b), raw(&a)) >= free2);
}

/// A failed release leaves the arena to be released again, not lost.
#[test]
fn a_release_whose_wait_fails_can_be_made_again() {
    let domain = 0x3903;
    let up = FakeResource::new(None);
    let a = Stream::fake_in(0x39e0, 0, domain);
    let b = Stream::fake_in(0x39f0, 0, domain);
    let arena = PlannedArena::new(handed_plan());
    let (_, s0) = arena.allocate(0, KIB, &a, &*up).expect("s0");
    let (_, x) = arena.allocate(1, KIB, &b, &*up).expect("B's first slot");
    arena.free(x, false).unwrap();
    arena.free(s0, false).unwrap();
    assert!(arena.release(1, &b, &*up).unwrap());
    assert_eq!(up.live(), 1);
    // A's release waits for B's last event: that wait fails.
    let calls = (0..8)
        .find(|&skip| {
            testing::arm(domain, skip, Fault::Vendor, false);
            let r = arena.release(0, &a, &*up);
            let (injected, _) = testing::disarm();
            injected == 0 || r.is_ok()
        })
        .expect("released within 8 calls");
    assert!(calls > 0, "a release with no failing call");
    assert_eq!(up.live(), 0, "the arena went back once");
    up.assert_clean();
}

/// Three steps of two streams, each allocating 1 KiB and 512 bytes and
/// freeing them, with no lag: every block's bytes pass to the other
/// stream.
fn two_stream_plan() -> Arc<Plan> {
    let mut ops = Vec::new();
    let mut k = 0;
    for step in 0..3u64 {
        for (i, (stream, size)) in [(0u32, 1024u64), (0, 512), (1, 1024), (1, 512)]
            .into_iter()
            .enumerate()
        {
            let t = 100 * step + 10 * i as u64;
            ops.push(StreamOp::new(stream, Op::Alloc(size), t));
            ops.push(StreamOp::new(stream, Op::Free(k), t + 1));
            k += 1;
        }
    }
    Arc::new(Plan::for_streams(&ops, 0).expect("planned"))
}

/// One action of the program in [`hand_overs_hold_under_failures`].
#[derive(Clone, Copy, Debug)]
enum Act {
    /// Lane `0`, 1 KiB (`true`) or 512 bytes.
    Alloc(u32, bool),
    /// Frees the live block of this number (modulo how many are live).
    Free(usize),
    /// Begins or ends a capture on a lane's stream.
    Capture(u32),
    /// The device has passed every event (`true`) or none.
    Passed(bool),
}

fn arb_act() -> impl Strategy<Value = Act> {
    prop_oneof![
        6 => (0u32..2, any::<bool>()).prop_map(|(l, big)| Act::Alloc(l, big)),
        5 => (0usize..8).prop_map(Act::Free),
        1 => (0u32..2).prop_map(Act::Capture),
        1 => any::<bool>().prop_map(Act::Passed),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever two streams do with a shared plan (allocations, frees,
    /// captures, the device passing events or not), and whichever event,
    /// wait or allocation call fails: a stream that gets a planned block
    /// is ordered after (or the device has passed) every free of its
    /// bytes by the other stream; live blocks never overlap; every request
    /// the plan refuses is served by the upstream; and once the streams
    /// are done, the arena goes back whole (unless a block was freed in
    /// a capture, which keeps it for the graph).
    #[test]
    fn hand_overs_hold_under_failures(
        acts in proptest::collection::vec(arb_act(), 1..80),
        skip in 0u32..40,
        persistent in any::<bool>(),
        invalid in any::<bool>(),
        case in 0u64..1_000_000,
    ) {
        // Streams and the domain are this case's alone (tests run at once).
        let domain = 0x39_0000_0000 + case * 4 + 1;
        let up = FakeResource::in_domain(None, domain);
        let id = 0x40_0000 + (case as usize) * 64;
        let streams = [Stream::fake_in(id, 0, domain), Stream::fake_in(id + 16, 0, domain)];
        let arena = PlannedArena::new(two_stream_plan());
        testing::set_fake_events_complete(domain, false);
        let fault = if invalid { Fault::InvalidValue } else { Fault::Vendor };
        testing::arm(domain, skip, fault, persistent);
        // Per 512 bytes of the arena: the stream that freed them last
        // through the plan, and the mark of that free.
        let mut last: Vec<Option<(usize, u64)>> = vec![None; 8];
        // Live blocks: (lane, pointer, bytes, Some(slot) if planned).
        let mut live: Vec<(u32, usize, usize, Option<usize>)> = Vec::new();
        let mut capturing = [false, false];
        let mut kept_for_graphs = false;
        let mut passed = false;
        // Per stream: the marks up to which the device has passed it (its
        // events answered complete).
        let mut done = [0u64; 2];
        let mut base: Option<usize> = None;
        // The lane whose stream made the arena (the upstream wants its
        // block back on that stream: it is released last).
        let mut maker: Option<u32> = None;
        for act in acts {
            match act {
                Act::Alloc(lane, big) => {
                    let s = &streams[lane as usize];
                    let bytes = if big { KIB } else { 512 };
                    let planned = match capturing[lane as usize] {
                        true => None,
                        false => {
                            let got = arena.allocate(lane, bytes, s, &*up);
                            if arena.arena_bytes() > 0 {
                                maker.get_or_insert(lane);
                            }
                            if passed {
                                for (d, st) in done.iter_mut().zip(&streams) {
                                    *d = (*d).max(testing::fake_recorded_mark(raw(st)));
                                }
                            }
                            got
                        }
                    };
                    match planned {
                        Some((ptr, slot)) => {
                            let p = ptr as usize;
                            let b0 = *base.get_or_insert(p - arena.plan().slots[slot].offset.unwrap() as usize);
                            let (from, to) = ((p - b0) / 512, (p - b0 + bytes).div_ceil(512));
                            prop_assert!(to <= 8, "outside the arena");
                            for u in &last[from..to] {
                                if let Some((other, mark)) = *u {
                                    if other != raw(s) {
                                        let passed_by = done[1 - lane as usize];
                                        prop_assert!(
                                            testing::fake_ordered_after(raw(s), other) >= mark || passed_by >= mark,
                                            "lane {} took bytes freed at mark {} of another stream unordered", lane, mark
                                        );
                                    }
                                }
                            }
                            for &(_, q, n, _) in &live {
                                prop_assert!(p + bytes <= q || q + n <= p, "overlap");
                            }
                            live.push((lane, p, bytes, Some(slot)));
                        }
                        // Served by the upstream instead (which may fail by
                        // injection, as it would without a plan).
                        None => {
                            if let Ok(ptr) = up.allocate(bytes, s) {
                                live.push((lane, ptr as usize, bytes, None));
                            }
                        }
                    }
                }
                Act::Free(n) if !live.is_empty() => {
                    let (lane, p, bytes, slot) = live.swap_remove(n % live.len());
                    let s = &streams[lane as usize];
                    match slot {
                        Some(slot) => {
                            let mark = testing::fake_mark(raw(s));
                            let cap = capturing[lane as usize];
                            prop_assert!(arena.free(slot, cap).is_ok());
                            if cap {
                                kept_for_graphs = true;
                            } else {
                                let b0 = base.unwrap();
                                for u in &mut last[(p - b0) / 512..(p - b0 + bytes).div_ceil(512)] {
                                    *u = Some((raw(s), mark));
                                }
                            }
                        }
                        None => {
                            // SAFETY: the upstream's block, freed once.
                            if unsafe { up.deallocate(p as *mut c_void, bytes, s) }.is_err() {
                                // Refused by injection: still live.
                                live.push((lane, p, bytes, None));
                            }
                        }
                    }
                }
                Act::Free(_) => {}
                Act::Capture(lane) => {
                    let l = lane as usize;
                    capturing[l] = !capturing[l];
                    let status = if capturing[l] { CaptureStatus::Active } else { CaptureStatus::None };
                    streams[l].set_fake_capture(status, 0x3900 + lane as u64);
                }
                Act::Passed(p) => {
                    passed = p;
                    testing::set_fake_events_complete(domain, p);
                    if p {
                        for (d, st) in done.iter_mut().zip(&streams) {
                            *d = (*d).max(testing::fake_recorded_mark(raw(st)));
                        }
                    }
                }
            }
        }
        testing::disarm();
        up.assert_clean();
        // The end: captures over, every block freed, the lanes released.
        for (l, s) in streams.iter().enumerate() {
            s.set_fake_capture(CaptureStatus::None, 0);
            capturing[l] = false;
        }
        for (lane, p, bytes, slot) in live.drain(..) {
            let s = &streams[lane as usize];
            match slot {
                Some(slot) => prop_assert!(arena.free(slot, false).is_ok()),
                None => {
                    // SAFETY: the upstream's block, freed once.
                    let freed = unsafe { up.deallocate(p as *mut c_void, bytes, s) };
                    prop_assert!(freed.is_ok());
                }
            }
        }
        let mut released = true;
        let last = maker.unwrap_or(1);
        for lane in [1 - last, last] {
            released &= arena.release(lane, &streams[lane as usize], &*up).expect("released");
        }
        if kept_for_graphs {
            prop_assert!(!released || up.live() <= 1);
        } else {
            prop_assert!(released);
            prop_assert_eq!(up.live(), 0, "the arena or a block leaked");
        }
        up.assert_clean();
    }
}
