//! The same-run planner on the fake runtime: a program's step found,
//! planned and served from a step's start; programs that never repeat,
//! that leave their step, that capture graphs, that fork.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

use super::*;
use crate::plan::{find_step, Op, StreamOp};
use crate::resource::MemoryResource;
use crate::stream::Stream;
use crate::testing::{FakeResource, Rng};

/// A program of `streams` streams: a prologue of weights never freed,
/// then steps of allocations, each freed some allocations later (some in
/// the next step), with `extra(step)` more allocations of its own in the
/// steps it names (a step that strays).
struct Program {
    up: Arc<FakeResource>,
    streams: Vec<Stream>,
    auto: Arc<AutoPlanner>,
    shares: HashMap<usize, PlanShare>,
    /// Live blocks: (stream, address, bytes, slot if planned), and when
    /// each is due to be freed (an allocation count).
    live: Vec<(usize, usize, usize, Option<usize>, u64)>,
    allocations: u64,
    planned: u64,
    /// Allocations after the switch, and those served from the plan.
    after: (u64, u64),
    /// Times `settle_due` said yes.
    settled: u32,
    /// What the switch is told when it is due (`None`: it goes ahead), and
    /// the previews it was shown.
    decline: Option<String>,
    previews: Vec<SwitchPreview>,
}

impl Program {
    fn new(opts: AutoOptions, streams: usize, id: usize) -> Program {
        Program {
            up: FakeResource::new(None),
            streams: (0..streams).map(|k| Stream::fake_in(id + 16 * k, 0, 0)).collect(),
            auto: AutoPlanner::new(opts),
            shares: HashMap::new(),
            live: Vec::new(),
            allocations: 0,
            planned: 0,
            after: (0, 0),
            settled: 0,
            decline: None,
            previews: Vec::new(),
        }
    }

    fn alloc(&mut self, stream: usize, bytes: usize, life: u64, capturing: bool) {
        let mut shown = None;
        let decline = self.decline.clone();
        if let Some(shares) = self.auto.switch_due_unless(|p| {
            shown = Some(p.clone());
            decline
        }) {
            assert!(self.shares.is_empty(), "switched twice");
            self.shares = shares.into_iter().collect();
        }
        self.previews.extend(shown);
        if self.auto.settle_due() {
            self.settled += 1;
        }
        let s = &self.streams[stream];
        let key = s.as_raw() as usize;
        let switched = !self.shares.is_empty();
        let planned = match self.shares.get(&key) {
            Some(sh) if !capturing => sh.arena.allocate(sh.lane, bytes, s, &*self.up),
            _ => None,
        };
        let (addr, slot) = match planned {
            Some((p, slot)) => {
                self.planned += 1;
                (p as usize, Some(slot))
            }
            None => {
                let p = self
                    .up
                    .allocate(bytes, s)
                    .expect("the fake upstream never refuses") as usize;
                if self.auto.recording() {
                    self.auto.allocated(key, p, bytes, capturing);
                }
                (p, None)
            }
        };
        if switched {
            self.after.0 += 1;
            self.after.1 += u64::from(slot.is_some());
        }
        // A planned block never shares a byte with a live block.
        for &(_, q, n, _, _) in &self.live {
            assert!(
                addr + bytes <= q || q + n <= addr,
                "{addr:#x} overlaps a live block at {q:#x}"
            );
        }
        self.allocations += 1;
        self.live
            .push((stream, addr, bytes, slot, self.allocations + life));
        self.free_due();
    }

    /// Frees the blocks due by now.
    fn free_due(&mut self) {
        let now = self.allocations;
        let (due, keep): (Vec<_>, Vec<_>) = self.live.drain(..).partition(|b| b.4 <= now);
        self.live = keep;
        for (stream, addr, bytes, slot, _) in due {
            self.free(stream, addr, bytes, slot);
        }
    }

    fn free(&mut self, stream: usize, addr: usize, bytes: usize, slot: Option<usize>) {
        let s = &self.streams[stream];
        match slot {
            Some(slot) => {
                let sh = &self.shares[&(s.as_raw() as usize)];
                sh.arena.free(slot, false).expect("a live slot");
            }
            None => {
                if self.auto.recording() {
                    self.auto.freed(addr);
                }
                // SAFETY: the upstream's block, freed once on its stream.
                unsafe { self.up.deallocate(addr as *mut c_void, bytes, s) }.expect("freed");
            }
        }
    }

    /// Frees everything and gives the arena back.
    fn end(mut self) {
        for (stream, addr, bytes, slot, _) in std::mem::take(&mut self.live) {
            self.free(stream, addr, bytes, slot);
        }
        // The arena goes back on the stream it was made on: that stream's
        // lane is released last.
        let maker = self.up.state().live.values().next().map(|&(_, key)| key);
        let mut order: Vec<&Stream> = self.streams.iter().collect();
        order.sort_by_key(|s| Some(s.as_raw() as usize) == maker);
        for s in order {
            if let Some(sh) = self.shares.get(&(s.as_raw() as usize)) {
                assert!(sh.arena.release(sh.lane, s, &*self.up).expect("released"));
            }
        }
        assert_eq!(self.up.live(), 0, "a block or the arena leaked");
        self.up.assert_clean();
    }
}

/// One training step: (stream, bytes, life in allocations); some blocks
/// live into the next step (freed there before their next instance).
const STEP: [(usize, usize, u64); 8] = [
    (0, 1 << 20, 3),
    (0, 4096, 1),
    (0, 3 << 20, 5),
    (0, 512, 2),
    (0, 2 << 20, 4),
    (0, 8192, 1),
    (0, 1 << 20, 6),
    (0, 640, 1),
];

fn run_steps(p: &mut Program, steps: usize, step: &[(usize, usize, u64)]) {
    for _ in 0..steps {
        for &(stream, bytes, life) in step {
            p.alloc(stream, bytes, life, false);
        }
        // The planner runs on a thread of its own: the test waits for it
        // at each step's end, as a run's next steps would.
        p.auto.wait_planned();
    }
}

#[test]
fn a_repeated_step_is_planned_and_served_from_the_start_of_a_step() {
    let mut p = Program::new(AutoOptions::default(), 1, 0x4a00_0000);
    // The prologue: weights, never freed.
    for k in 0..5 {
        p.alloc(0, (64 << 20) + k * 512, u64::MAX / 2, false);
    }
    run_steps(&mut p, 200, &STEP);
    let AutoStatus::Serving {
        at,
        step,
        arena_bytes,
        ..
    } = p.auto.status()
    else {
        panic!("not serving: {:?}", p.auto.status());
    };
    assert_eq!(step, 8);
    // Switched once the step had repeated three times, its plan made.
    assert!(at >= 5 + 3 * 8, "{at}");
    assert!(!p.auto.recording());
    // Every allocation after the switch from the plan, in an arena of the
    // step's live peak at most (here 8 MiB and a bit at most).
    assert_eq!(p.after.0, p.after.1, "allocations after the switch not planned");
    assert!(p.after.0 > 800);
    assert!(arena_bytes <= 16 << 20, "{arena_bytes}");
    assert_eq!(p.settled, 1, "settled once, a step after the switch");
    p.end();
}

#[test]
fn a_declined_switch_steps_aside_with_the_reason_given() {
    let mut p = Program::new(AutoOptions::default(), 1, 0x4c00_0000);
    p.decline = Some("the caller maps less without it".into());
    let mut weights = Vec::new();
    for k in 0..5 {
        let bytes = (64 << 20) + k * 512;
        p.alloc(0, bytes, u64::MAX / 2, false);
        weights.push((p.live.last().unwrap().1, bytes));
    }
    run_steps(&mut p, 200, &STEP);
    assert_eq!(
        p.auto.status(),
        AutoStatus::Off("the caller maps less without it".into())
    );
    assert!(!p.auto.recording());
    assert!(p.shares.is_empty(), "declined, yet switched");
    assert_eq!(p.planned, 0);
    // Shown once, at a step's start: the plan's arena, its one stream, and
    // the blocks kept across steps (the weights; a step's own blocks live
    // six allocations at most, less than a step).
    assert_eq!(p.previews.len(), 1);
    let shown = &p.previews[0];
    assert_eq!(shown.streams, 1);
    assert!(
        shown.arena_bytes >= 3 << 20 && shown.arena_bytes <= 16 << 20,
        "{shown:?}"
    );
    let mut kept = shown.kept.clone();
    kept.sort();
    weights.sort();
    assert_eq!(kept, weights);
    p.end();
}

#[test]
fn two_streams_are_planned_together() {
    let mut p = Program::new(AutoOptions::default(), 2, 0x4b00_0000);
    let step: Vec<(usize, usize, u64)> = STEP
        .iter()
        .enumerate()
        .map(|(i, &(_, b, l))| (i % 2, b, l))
        .collect();
    run_steps(&mut p, 200, &step);
    assert!(
        matches!(p.auto.status(), AutoStatus::Serving { step: 8, .. }),
        "{:?}",
        p.auto.status()
    );
    assert_eq!(p.shares.len(), 2);
    assert_eq!(p.after.0, p.after.1);
    p.end();
}

#[test]
fn a_program_without_a_repeated_step_is_not_planned_and_says_why() {
    let opts = AutoOptions {
        max_allocations: 3000,
        ..AutoOptions::default()
    };
    let mut p = Program::new(opts, 1, 0x4c00_0000);
    let mut rng = Rng(7);
    for _ in 0..4000 {
        // Variable shapes: every size new.
        let bytes = 512 * (1 + rng.below(100_000));
        p.alloc(0, bytes, 1 + rng.below(5) as u64, false);
        if p.allocations.is_multiple_of(200) {
            p.auto.wait_planned();
        }
    }
    match p.auto.status() {
        AutoStatus::Off(why) => assert!(
            why.contains("no repeated step in the first 3000 allocations"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(!p.auto.recording());
    assert_eq!(p.planned, 0);
    p.end();
}

#[test]
fn allocations_in_a_capture_are_not_recorded() {
    let mut p = Program::new(AutoOptions::default(), 1, 0x4d00_0000);
    let mut rng = Rng(11);
    for _ in 0..200 {
        for &(stream, bytes, life) in &STEP {
            p.alloc(stream, bytes, life, false);
            // A graph captured now and then, with sizes of its own.
            if rng.below(4) == 0 {
                p.alloc(stream, 512 * (1 + rng.below(1000)), 1, true);
            }
        }
        p.auto.wait_planned();
    }
    assert!(
        matches!(p.auto.status(), AutoStatus::Serving { step: 8, .. }),
        "{:?}",
        p.auto.status()
    );
    p.end();
}

#[test]
fn a_program_that_leaves_its_step_is_planned_again_then_let_go() {
    let auto = AutoPlanner::new(AutoOptions::default());
    let mut addr = 0x10_0000usize;
    let mut push = |auto: &Arc<AutoPlanner>, bytes: usize| {
        auto.allocated(3, addr, bytes, false);
        auto.freed(addr);
        addr += 1 << 24;
    };
    let mut rng = Rng(3);
    let mut ready = 0;
    for round in 0..100 {
        // Steady long enough to plan...
        for _ in 0..40 {
            for &(_, b, _) in &STEP {
                push(&auto, b);
            }
            auto.wait_planned();
        }
        if matches!(auto.status(), AutoStatus::Ready { step: 8 }) {
            ready += 1;
        }
        if matches!(auto.status(), AutoStatus::Off(_)) {
            assert_eq!(ready, 3, "round {round}");
            break;
        }
        // ...then one allocation of another size, before the switch (this
        // program never asks for it).
        push(&auto, 512 * (1 + rng.below(64)) + 3);
    }
    match auto.status() {
        AutoStatus::Off(why) => assert!(why.contains("left its repeated step three times"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(!auto.recording());
}

#[test]
fn a_forked_child_does_not_plan() {
    let mut p = Program::new(AutoOptions::default(), 1, 0x4f00_0000);
    run_steps(&mut p, 3, &STEP);
    p.auto.pretend_forked();
    run_steps(&mut p, 100, &STEP);
    match p.auto.status() {
        AutoStatus::Off(why) => assert!(why.contains("forked"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(p.planned, 0);
    p.end();
}

/// A model's step: forward keeps an activation per layer, backward makes
/// a gradient per layer and frees the layer's activation, the optimizer
/// makes and frees a buffer. The layers repeat inside the step; only the
/// whole step leaves the live blocks as it found them, and that is the
/// step planned.
#[test]
fn the_step_is_the_whole_step_not_a_layer_repeated_inside_it() {
    let layers = 12;
    let mut step: Vec<(usize, usize, u64)> = Vec::new();
    // Forward: activation k, freed in backward (layers - k) * 2 - 1
    // allocations later... laid out below by position.
    for k in 0..layers {
        // Lives until the backward of layer k: after the rest of forward
        // (layers - 1 - k) and the backward layers after it (2 per layer).
        let life = (layers - 1 - k) as u64 + 2 * (layers - k) as u64;
        step.push((0, 1 << 20, life));
    }
    for _ in 0..layers {
        step.push((0, 256 << 10, 1)); // a layer's gradient scratch
        step.push((0, 64 << 10, 24)); // its weight gradient, freed later
    }
    step.push((0, 4 << 20, 1)); // the optimizer's buffer
    let mut p = Program::new(AutoOptions::default(), 1, 0x5000_0000);
    run_steps(&mut p, 60, &step);
    match p.auto.status() {
        AutoStatus::Serving { step: len, .. } => assert_eq!(len as usize, step.len()),
        other => panic!("{other:?}"),
    }
    p.end();
}

/// The recording of a model's first step, cut in the middle of its
/// backward pass: the last layers repeat (a gradient scratch freed at
/// once, a weight gradient that lives on, each layer's activation freed),
/// but they free what forward made, so they are no step.
#[test]
fn a_layer_period_in_the_middle_of_backward_is_not_planned() {
    let layers = 24usize;
    let mut ops: Vec<StreamOp> = Vec::new();
    let mut keys: Vec<u64> = Vec::new();
    let mut alloc = |ops: &mut Vec<StreamOp>, bytes: u64| {
        keys.push(bytes);
        ops.push(StreamOp::new(0, Op::Alloc(bytes), 0));
        keys.len() - 1
    };
    let acts: Vec<usize> = (0..layers).map(|_| alloc(&mut ops, 1 << 20)).collect();
    for k in (0..layers).rev() {
        let scratch = alloc(&mut ops, 256 << 10);
        ops.push(StreamOp::new(0, Op::Free(scratch), 0));
        alloc(&mut ops, 64 << 10);
        let more = alloc(&mut ops, 128 << 10);
        ops.push(StreamOp::new(0, Op::Free(more), 0));
        alloc(&mut ops, 32 << 10);
        ops.push(StreamOp::new(0, Op::Free(acts[k]), 0));
    }
    // The layers of backward repeat with a period of four allocations...
    let step = find_step(&keys).expect("a period");
    assert_eq!((step.len, step.end), (4, keys.len()));
    // ...which frees a layer's activation every time: no step.
    assert!(!balanced(&ops, keys.len(), 4));
    assert!(plan_recording(&keys, 0, &ops, None).unwrap().is_none());
}

/// Replays a recorded trace (`SOMALLOC_REPLAY_TRACE`) through the planner
/// and its arena on the fake runtime, and prints where it switched and
/// which requests the plan refused after: a tool for a program whose
/// steady steps are not all served (`cargo test -- --ignored replay`).
#[test]
#[ignore = "needs a trace: SOMALLOC_REPLAY_TRACE=PATH"]
fn replay_a_trace() {
    use crate::trace::{Action, Trace};
    let path = std::env::var("SOMALLOC_REPLAY_TRACE").expect("SOMALLOC_REPLAY_TRACE");
    let trace = Trace::read(&path).expect("a trace");
    let up = FakeResource::new(None);
    let auto = AutoPlanner::new(AutoOptions::default());
    let streams: Vec<Stream> = (0..trace.streams.len().max(1))
        .map(|i| Stream::fake_in(0x6000_0000 + 16 * i, 0, 0))
        .collect();
    let mut shares: HashMap<usize, PlanShare> = HashMap::new();
    // Recorded address -> (address here, slot, stream index).
    let mut live: HashMap<u64, (usize, Option<usize>, usize, usize)> = HashMap::new();
    let (mut after, mut served) = (0u64, 0u64);
    let mut refused: HashMap<u64, u64> = HashMap::new();
    for e in trace.events.iter().filter(|e| e.device == 0) {
        let si = e.stream.unwrap_or(0) as usize;
        let s = &streams[si];
        let key = s.as_raw() as usize;
        match e.action {
            Action::Allocate => {
                if let Some(sh) = auto.switch_due() {
                    shares = sh.into_iter().collect();
                    let st = up.state();
                    println!(
                        "switch with {} bytes live upstream (peak so far {})",
                        st.used, st.used_peak
                    );
                }
                let bytes = e.bytes as usize;
                let planned = shares
                    .get(&key)
                    .and_then(|sh| sh.arena.allocate(sh.lane, bytes, s, &*up));
                if !shares.is_empty() {
                    after += 1;
                    served += u64::from(planned.is_some());
                    if planned.is_none() {
                        *refused.entry(e.bytes).or_default() += 1;
                    }
                }
                let (addr, slot) = match planned {
                    Some((p, slot)) => (p as usize, Some(slot)),
                    None => {
                        let p = up.allocate(bytes, s).unwrap() as usize;
                        if auto.recording() {
                            auto.allocated(key, p, bytes, false);
                        }
                        (p, None)
                    }
                };
                live.insert(e.addr, (addr, slot, si, bytes));
            }
            Action::Free => {
                let Some((addr, slot, si, bytes)) = live.remove(&e.addr) else {
                    continue;
                };
                let s = &streams[si];
                match slot {
                    Some(slot) => shares[&(s.as_raw() as usize)].arena.free(slot, false).unwrap(),
                    None => {
                        if auto.recording() {
                            auto.freed(addr);
                        }
                        // SAFETY: the upstream's block, freed once.
                        unsafe { up.deallocate(addr as *mut c_void, bytes, s) }.unwrap();
                    }
                }
            }
            _ => {}
        }
        auto.wait_planned();
    }
    let mut top: Vec<_> = refused.into_iter().collect();
    top.sort_by_key(|r| std::cmp::Reverse(r.1));
    println!("{:?}", auto.status());
    println!("after the switch: {after} allocations, {served} from the plan");
    println!("refused most (bytes, times): {:?}", &top[..top.len().min(12)]);
}
