//! Tests of the step finder's window and of [`cut`]: a recording of any
//! length plans its prologue and two instances of its step.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;

use super::super::{round, Op, Plan, Server, Sharing, StreamOp, MAX_SEARCHED};
use super::{cut, find_step, key, Step};

/// A deterministic spread of sizes: `k`'s size in a family `salt`, from
/// 512 bytes to about 8 MiB, rarely equal to another's.
fn size(salt: u64, k: u64) -> u64 {
    let x = (salt.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ k.wrapping_mul(0xbf58_476d_1ce4_e5b9))
        .wrapping_mul(0x94d0_49bb_1331_11eb);
    512 + (x >> 41)
}

const WEIGHTS: usize = 150;
const LAYERS: usize = 250;
const OPT_TEMPS: usize = 175;
/// Allocations of a step after the first: the forward pass (an
/// activation per layer, a temporary every other layer), the backward
/// pass (a temporary per layer, a gradient per weight), the optimizer's
/// temporaries.
const STEP: usize = LAYERS + LAYERS / 2 + LAYERS + WEIGHTS + OPT_TEMPS;
/// What comes before the loop: the weights and a few blocks of data.
const PROLOGUE: usize = WEIGHTS + 10;
/// The first step also allocates the optimizer's state, two blocks per
/// weight, kept for ever.
const FIRST_STEP: usize = STEP + 2 * WEIGHTS;

/// A training loop's recording, `steps` steps of it: weights (never
/// freed), then steps that free the last step's gradients first (a
/// `zero_grad`), allocate activations kept for the backward pass, free
/// temporaries at once, free the activations in reverse while allocating
/// a gradient per weight (kept into the next step), and allocate the
/// optimizer's temporaries. The first step is irregular: its optimizer
/// allocates its state before its temporaries.
fn training(steps: usize) -> Vec<Op> {
    let mut ops = Vec::new();
    let mut made = 0usize;
    let mut alloc = |ops: &mut Vec<Op>, bytes: u64| {
        ops.push(Op::Alloc(bytes));
        made += 1;
        made - 1
    };
    for w in 0..WEIGHTS + 10 {
        alloc(&mut ops, size(1, w as u64));
    }
    let mut grads: Vec<usize> = Vec::new();
    for step in 0..steps {
        for g in grads.drain(..) {
            ops.push(Op::Free(g));
        }
        let mut acts = Vec::new();
        for l in 0..LAYERS as u64 {
            acts.push(alloc(&mut ops, size(2, l)));
            if l % 2 == 0 {
                let t = alloc(&mut ops, size(3, l));
                ops.push(Op::Free(t));
            }
        }
        for l in (0..LAYERS).rev() {
            let t = alloc(&mut ops, size(4, l as u64));
            ops.push(Op::Free(acts[l]));
            if l < WEIGHTS {
                grads.push(alloc(&mut ops, size(1, l as u64)));
            }
            ops.push(Op::Free(t));
        }
        if step == 0 {
            for w in 0..2 * WEIGHTS as u64 {
                alloc(&mut ops, size(1, w / 2));
            }
        }
        for c in 0..OPT_TEMPS as u64 {
            let t = alloc(&mut ops, size(5, c));
            ops.push(Op::Free(t));
        }
    }
    ops
}

fn allocations(ops: &[Op]) -> usize {
    ops.iter().filter(|o| matches!(o, Op::Alloc(_))).count()
}

/// Serves `ops` from `plan` with every granted block checked against the
/// live ones (none may overlap it): whether each allocation was served.
fn serve_checked(plan: Arc<Plan>, ops: &[Op]) -> Vec<bool> {
    let mut server = Server::for_program(plan, 16);
    let mut slot_of: Vec<Option<(usize, u64)>> = Vec::new();
    // Live served blocks: offset -> end.
    let mut live: BTreeMap<u64, u64> = BTreeMap::new();
    for op in ops {
        match *op {
            Op::Alloc(bytes) => {
                let got = server.allocate(bytes);
                if let Some((_, offset)) = got {
                    let end = offset + round(bytes);
                    let before = live.range(..end).next_back();
                    assert!(
                        before.is_none_or(|(_, &e)| e <= offset),
                        "allocation {} at [{offset}, {end}) overlaps a live block at {before:?}",
                        slot_of.len()
                    );
                    live.insert(offset, end);
                }
                slot_of.push(got);
            }
            Op::Free(k) => {
                if let Some((slot, offset)) = slot_of[k] {
                    assert!(server.free(slot));
                    live.remove(&offset);
                }
            }
        }
    }
    slot_of.iter().map(Option::is_some).collect()
}

#[test]
fn a_training_run_of_any_length_plans_its_prologue_and_two_steps() {
    let recorded = training(25);
    let n = allocations(&recorded);
    assert!(n > MAX_SEARCHED, "{n} allocations");
    assert!(n >= 23_750, "{n} allocations");
    let plan = Arc::new(Plan::for_program(&recorded).unwrap());
    // The weights, the irregular first step and two steps at most (the
    // first instance of the step may begin inside the first step).
    let bound = PROLOGUE + FIRST_STEP + 2 * STEP;
    assert!(
        plan.slots.len() <= bound,
        "{} slots, over {bound}",
        plan.slots.len()
    );
    assert!(plan.slots.len() >= PROLOGUE + 2 * STEP);
    assert_eq!(plan.wrap_to, Some(plan.slots.len() - STEP));
    // Served for 40 steps: the steady steps (from the third on) come from
    // the plan, and no block granted ever overlaps a live one.
    let served = serve_checked(plan.clone(), &training(40));
    let steady = &served[PROLOGUE + FIRST_STEP + STEP..];
    assert_eq!(steady.len(), 38 * STEP);
    let got = steady.iter().filter(|&&s| s).count();
    assert!(got * 100 >= steady.len() * 95, "{got} of {} served", steady.len());
    // The same loop recorded for three steps only (planned whole) needs
    // the same arena.
    let three = Plan::for_program(&training(3)).unwrap();
    assert_eq!(three.arena, plan.arena);
}

#[test]
fn a_long_recording_plans_as_its_cut_and_as_any_longer_one() {
    let long = training(22);
    let sops: Vec<StreamOp> = long.iter().map(|&op| StreamOp::new(0, op, 0)).collect();
    let keys: Vec<u64> = long
        .iter()
        .filter_map(|o| match *o {
            Op::Alloc(s) => Some(key(s, 0)),
            Op::Free(_) => None,
        })
        .collect();
    let step = find_step(&keys[..MAX_SEARCHED]).unwrap();
    assert_eq!(step.len, STEP);
    let (kept, two) = cut(&sops, step).unwrap();
    assert_eq!(
        two.end,
        allocations(&kept.iter().map(|o| o.op).collect::<Vec<_>>())
    );
    let from_cut = Plan::for_streams_sharing(&kept, Sharing::HostLag(0)).unwrap();
    let from_long = Plan::for_program(&long).unwrap();
    let from_longer = Plan::for_program(&training(30)).unwrap();
    for p in [&from_long, &from_longer] {
        assert_eq!(
            (&p.slots, p.arena, p.wrap_to),
            (&from_cut.slots, from_cut.arena, from_cut.wrap_to)
        );
    }
}

#[test]
fn cut_refuses_steps_that_do_not_fit_the_program() {
    let ops: Vec<StreamOp> = (0..10)
        .map(|k| StreamOp::new(0, Op::Alloc(512 * (k % 4 + 1)), 0))
        .collect();
    for bad in [
        Step {
            len: 0,
            covered: 0,
            end: 0,
        },
        Step {
            len: 4,
            covered: 7,
            end: 8,
        },
        Step {
            len: 4,
            covered: 8,
            end: 7,
        },
        Step {
            len: 4,
            covered: 12,
            end: 16,
        },
        Step {
            len: usize::MAX,
            covered: usize::MAX,
            end: usize::MAX,
        },
    ] {
        assert!(cut(&ops, bad).is_err(), "{bad:?}");
    }
    let (kept, two) = cut(
        &ops,
        Step {
            len: 4,
            covered: 8,
            end: 8,
        },
    )
    .unwrap();
    assert_eq!(
        (kept.len(), two),
        (
            8,
            Step {
                len: 4,
                covered: 8,
                end: 8
            }
        )
    );
}

#[test]
fn two_instances_of_a_step_plan_as_the_step_of_a_long_recording() {
    // No prologue: the cut is the two instances and the third's frees.
    let step: Vec<(u32, u64, usize)> = (0..6)
        .map(|i| (i % 2, 4096 * (i as u64 + 1), 3 + i as usize))
        .collect();
    let long = looped(0, &step, 30, &[0, 2, 1]);
    let plan = Plan::for_streams_within(&long, Sharing::HostLag(1_000_000), 48).unwrap();
    let keys: Vec<u64> = long
        .iter()
        .filter_map(|o| match o.op {
            Op::Alloc(s) => Some(key(s, o.stream)),
            Op::Free(_) => None,
        })
        .collect();
    let (kept, two) = cut(&long, find_step(&keys[..48]).unwrap()).unwrap();
    assert_eq!((two.start(), two.len), (0, 6));
    let of_step = Plan::for_step(&kept, Sharing::HostLag(1_000_000)).unwrap();
    assert_eq!(of_step.wrap_to, Some(6));
    // Only the step that repeats is placed (the first instance's blocks
    // were made before the plan takes over), in no more bytes than the
    // recording's plan, whose repeated slots serve the same sizes.
    assert!(of_step.slots[..6].iter().all(|s| s.offset.is_none()));
    // The same slots of the step are placed (not those that outlive it).
    let sizes = |p: &Plan| {
        p.slots[6..12]
            .iter()
            .map(|s| (s.size, s.stream, s.offset.is_some()))
            .collect::<Vec<_>>()
    };
    assert!(sizes(&of_step).iter().any(|s| s.2));
    assert_eq!(sizes(&of_step), sizes(&plan));
    assert!(of_step.arena > 0 && of_step.arena <= plan.arena);
    // Not two instances.
    assert!(Plan::for_step(&kept[..1], Sharing::Never).is_err());
    assert!(Plan::for_step(&[], Sharing::Never).is_err());
}

/// `n` allocations of sizes that never repeat a step, each freed at once.
fn no_step(n: usize, salt: u64) -> Vec<StreamOp> {
    (0..n)
        .flat_map(|k| {
            [
                StreamOp::new(0, Op::Alloc(size(salt, k as u64)), 0),
                StreamOp::new(0, Op::Free(k), 0),
            ]
        })
        .collect()
}

#[test]
fn a_long_recording_without_a_step_in_its_window_says_what_is_too_long() {
    let window = 64;
    // No step at all.
    let e = Plan::for_streams_within(&no_step(200, 9), Sharing::Never, window).unwrap_err();
    assert!(e.contains("step is too long, or that has none"), "{e}");
    assert!(e.contains("200 allocations"), "{e}");
    // A step, after more than the window holds.
    let mut ops = no_step(100, 9);
    for k in 100..300 {
        ops.push(StreamOp::new(0, Op::Alloc(512 * (k as u64 % 5 + 1)), 0));
        ops.push(StreamOp::new(0, Op::Free(k), 0));
    }
    let e = Plan::for_streams_within(&ops, Sharing::Never, window).unwrap_err();
    assert!(
        e.contains("prologue is too long") && e.contains("a step of 5"),
        "{e}"
    );
    // The same, within the window: planned.
    assert!(Plan::for_streams_within(&ops, Sharing::Never, 300).is_ok());
    // A period of blocks never freed (a model's layers) is no step.
    let layers: Vec<StreamOp> = (0..200)
        .map(|k| StreamOp::new(0, Op::Alloc(512 * (k % 4 + 1)), 0))
        .collect();
    let e = Plan::for_streams_within(&layers, Sharing::Never, window).unwrap_err();
    assert!(e.contains("is no step"), "{e}");
    assert!(Plan::for_streams_within(&layers, Sharing::Never, 200)
        .unwrap()
        .wrap_to
        .is_none());
}

#[test]
fn the_window_is_at_most_what_a_plan_places() {
    // A window asked for beyond MAX_SEARCHED is MAX_SEARCHED: the plan of
    // a long recording never places more than MAX_BLOCKS.
    let ops = no_step(MAX_SEARCHED + 1, 3);
    let e = Plan::for_streams_within(&ops, Sharing::Never, usize::MAX).unwrap_err();
    assert!(e.contains(&format!("within its first {MAX_SEARCHED}")), "{e}");
}

/// A recorded loop of several streams: `prologue` blocks of sizes no step
/// has (never freed), then `steps` steps of `step`'s allocations (stream,
/// size, freed before the allocation that many later, at most a step and
/// a half), each event a millisecond after the last on the host and
/// `lags` later on the device.
fn looped(prologue: usize, step: &[(u32, u64, usize)], steps: usize, lags: &[u64]) -> Vec<StreamOp> {
    let ms = 1_000_000u64;
    let mut ops = Vec::new();
    let push = |ops: &mut Vec<StreamOp>, stream: u32, op: Op| {
        let t = ops.len() as u64 * ms;
        let lag = lags[ops.len() % lags.len()] * ms;
        ops.push(StreamOp::new(stream, op, t).at_device((t + lag) as i64));
    };
    for k in 0..prologue {
        push(&mut ops, 0, Op::Alloc(1 << 30 | (k as u64 * 512)));
    }
    // (due at this allocation, allocation, stream)
    let mut due: Vec<(usize, usize, u32)> = Vec::new();
    for i in 0..steps * step.len() {
        due.sort_unstable();
        while due.first().is_some_and(|d| d.0 <= i) {
            let (_, k, stream) = due.remove(0);
            push(&mut ops, stream, Op::Free(k));
        }
        let (stream, bytes, life) = step[i % step.len()];
        push(&mut ops, stream, Op::Alloc(bytes));
        due.push((i + life.clamp(1, step.len() * 3 / 2), prologue + i, stream));
    }
    ops
}

fn arb_sharing() -> impl Strategy<Value = Sharing> {
    prop_oneof![
        Just(Sharing::Never),
        (0u64..4).prop_map(|ms| Sharing::HostLag(ms * 1_000_000)),
        (0u64..4).prop_map(|ms| Sharing::Device {
            margin_ns: ms * 1_000_000
        }),
    ]
}

proptest! {
    /// However many steps a recording longer than the window holds, it
    /// is planned as its cut is: the plan does not grow with the
    /// recording, and equals the plan of the cut program itself.
    #[test]
    fn plans_of_long_recordings_equal_the_plans_of_their_cut(
        prologue in 0usize..6,
        blocks in proptest::collection::vec((0u32..3, 1u64..64, 1usize..12), 4..10),
        lags in proptest::collection::vec(0u64..6, 1..20),
        window in 40usize..90,
        extra in 0usize..5,
        sharing in arb_sharing(),
    ) {
        // Sizes distinct within the step, so that no shorter period
        // repeats.
        let step: Vec<(u32, u64, usize)> = blocks
            .iter()
            .enumerate()
            .map(|(i, &(stream, s, life))| (stream, 512 * s + 8 * i as u64, life))
            .collect();
        let p = step.len();
        // Enough steps that the window and the step after it are
        // recorded whole.
        let steps = (window + 2 * p) / p + 1;
        let long = looped(prologue, &step, steps, &lags);
        let longer = looped(prologue, &step, steps + 1 + extra, &lags);
        let keys: Vec<u64> = long
            .iter()
            .filter_map(|o| match o.op {
                Op::Alloc(s) => Some(key(s, o.stream)),
                Op::Free(_) => None,
            })
            .collect();
        let found = find_step(&keys[..window]).unwrap();
        let (kept, _) = cut(&long, found).unwrap();
        let of_cut = Plan::for_streams_within(&kept, sharing, window).unwrap();
        let of_longer = Plan::for_streams_within(&longer, sharing, window);
        match Plan::for_streams_within(&long, sharing, window) {
            Ok(plan) => {
                prop_assert_eq!(plan.slots.len(), prologue + 2 * p);
                prop_assert_eq!(plan.wrap_to, Some(prologue + p));
                let of_longer = of_longer.unwrap();
                for other in [&of_cut, &of_longer] {
                    prop_assert_eq!(&plan.slots, &other.slots);
                    prop_assert_eq!((plan.arena, plan.wrap_to), (other.arena, other.wrap_to));
                }
            }
            // Blocks that mostly outlive the period: no step, in the cut
            // as in any longer recording.
            Err(e) => {
                prop_assert!(e.contains("is no step"), "{}", e);
                prop_assert_eq!(of_cut.wrap_to, None);
                prop_assert!(of_longer.is_err());
            }
        }
    }

    /// A loop of one stream whose blocks die within a step and a half is
    /// served whole from the plan of a recording longer than the window,
    /// for more steps than were recorded, no granted block overlapping a
    /// live one.
    #[test]
    fn a_long_recording_serves_its_loop_whole(
        prologue in 0usize..6,
        blocks in proptest::collection::vec((1u64..64, 1usize..12), 4..10),
        window in 40usize..90,
        more in 1usize..6,
    ) {
        let step: Vec<(u32, u64, usize)> = blocks
            .iter()
            .enumerate()
            .map(|(i, &(s, life))| (0, 512 * s + 8 * i as u64, life.min(blocks.len())))
            .collect();
        let steps = window / step.len() + 2;
        let recorded = looped(prologue, &step, steps, &[0]);
        let plan = Arc::new(Plan::for_streams_within(&recorded, Sharing::HostLag(0), window).unwrap());
        let ops: Vec<Op> = looped(prologue, &step, steps + more, &[0]).iter().map(|o| o.op).collect();
        let served = serve_checked(plan, &ops);
        prop_assert!(served.iter().all(|&s| s), "{} refused", served.iter().filter(|&&s| !s).count());
    }
}
