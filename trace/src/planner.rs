//! A placement planned from one recorded step, and the server that hands it
//! out again by order with every block checked.
//!
//! A training loop allocates the same sizes in the same order every step.
//! Once one step is recorded with its lifetimes (including the blocks that
//! live on into the next step, such as gradients freed by the next
//! `zero_grad`), the blocks can be placed in one arena, largest first,
//! each at the lowest offset that no block living at the same time holds:
//! a step then needs about its live peak and nothing more.
//!
//! Positions are counted in events (allocations and frees) from the start
//! of the recorded step, whose length is `events`. A block's lifetime is
//! an interval of that step, or wraps over its end when the block is freed
//! in the next step before the position it was allocated at (it is then
//! gone before its own next instance). Blocks that live longer are not
//! placed.
//!
//! [`Server`] serves a later step: the allocation it is asked for is
//! matched with the next planned slot of the same size (within a window,
//! so that an allocation the program added or dropped does not end the
//! match), and handed out only if the slot and every slot its bytes
//! overlap are free. That check, not the plan, is what keeps blocks apart:
//! a program that strays from the recorded step (other sizes, other
//! order, a block held longer) gets no slot for that allocation (its
//! caller takes it from elsewhere), never one that overlaps a live block.

/// Offsets and sizes round up to a multiple of this.
pub const ALIGN: u64 = 512;
/// The most allocations one step may have to be planned (planning takes
/// time quadratic in them).
pub const MAX_BLOCKS: usize = 20_000;

/// When a recorded block was freed, in event positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// In its own step, at this position.
    InStep(u32),
    /// In the next step, at this position.
    Next(u32),
    /// Not before the end of the next step (or never).
    Later,
}

/// A recorded allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rec {
    /// Bytes requested.
    pub size: u64,
    /// Its position in the step.
    pub at: u32,
    pub end: End,
}

/// A slot of the plan: the allocation it stands for, and where it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Bytes requested (a request matches only this size).
    pub size: u64,
    /// Its offset in the arena; `None`: not placed (it lives too long).
    pub offset: Option<u64>,
}

/// A planned step.
#[derive(Debug)]
pub struct Plan {
    pub slots: Vec<Slot>,
    /// The bytes the arena needs.
    pub arena: u64,
    /// Slot `i` overlaps the bytes of `conflicts[starts[i]..starts[i + 1]]`.
    conflicts: Vec<u32>,
    starts: Vec<u32>,
}

fn round(n: u64) -> u64 {
    n.div_ceil(ALIGN).max(1) * ALIGN
}

/// The step positions a record's block holds, as one or two half-open
/// intervals; `None` when it is not placed.
fn span(r: &Rec, events: u32) -> Option<[(u32, u32); 2]> {
    let at = r.at.min(events);
    match r.end {
        End::InStep(f) => Some([(at, f.max(at + 1)), (0, 0)]),
        End::Next(f) if f <= at => Some([(at, events.max(at + 1)), (0, f)]),
        End::Next(_) | End::Later => None,
    }
}

fn meet(a: &[(u32, u32); 2], b: &[(u32, u32); 2]) -> bool {
    a.iter()
        .any(|x| x.0 < x.1 && b.iter().any(|y| y.0 < y.1 && x.0 < y.1 && y.0 < x.1))
}

impl Plan {
    /// Plans a recorded step of `events` events whose allocations, in
    /// order, are `recs`.
    pub fn build(recs: &[Rec], events: u32) -> Result<Plan, String> {
        if recs.len() > MAX_BLOCKS {
            return Err(format!(
                "a step of {} allocations; at most {MAX_BLOCKS} are planned",
                recs.len()
            ));
        }
        let spans: Vec<_> = recs.iter().map(|r| span(r, events)).collect();
        let mut order: Vec<usize> = (0..recs.len()).filter(|&i| spans[i].is_some()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(recs[i].size), recs[i].at));
        let mut offsets: Vec<Option<u64>> = vec![None; recs.len()];
        // The blocks placed so far, and the byte ranges of those that live
        // at the same time as the one being placed.
        let mut placed: Vec<usize> = Vec::with_capacity(order.len());
        let mut taken: Vec<(u64, u64)> = Vec::new();
        let mut arena = 0;
        for i in order {
            let (si, size) = (
                spans[i].as_ref().expect("placed spans exist"),
                round(recs[i].size),
            );
            taken.clear();
            taken.extend(
                placed
                    .iter()
                    .filter(|&&j| meet(si, spans[j].as_ref().expect("placed")))
                    .map(|&j| {
                        let o = offsets[j].expect("placed");
                        (o, o + round(recs[j].size))
                    }),
            );
            taken.sort_unstable();
            let mut offset = 0;
            for &(from, to) in &taken {
                if offset + size <= from {
                    break;
                }
                offset = offset.max(to);
            }
            offsets[i] = Some(offset);
            arena = arena.max(offset + size);
            placed.push(i);
        }
        let slots: Vec<Slot> = recs
            .iter()
            .zip(&offsets)
            .map(|(r, &offset)| Slot { size: r.size, offset })
            .collect();
        Ok(Plan::with_slots(slots, arena))
    }

    /// A plan of these slots in an arena of `arena` bytes, whatever their
    /// offsets (they may overlap: the server's check keeps live blocks
    /// apart all the same). Slots that do not fit in the arena are not
    /// placed.
    pub fn with_slots(mut slots: Vec<Slot>, arena: u64) -> Plan {
        for s in &mut slots {
            if s.offset
                .is_some_and(|o| o.checked_add(round(s.size)).is_none_or(|end| end > arena))
            {
                s.offset = None;
            }
        }
        // Which placed slots share bytes: by offset, each with the ones
        // that start before it ends.
        let mut by_offset: Vec<(u64, u64, u32)> = slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.offset.map(|o| (o, o + round(s.size), i as u32)))
            .collect();
        by_offset.sort_unstable();
        let mut lists: Vec<Vec<u32>> = vec![Vec::new(); slots.len()];
        for (k, &(_, end, i)) in by_offset.iter().enumerate() {
            for &(from, _, j) in &by_offset[k + 1..] {
                if from >= end {
                    break;
                }
                lists[i as usize].push(j);
                lists[j as usize].push(i);
            }
        }
        let mut starts = Vec::with_capacity(slots.len() + 1);
        let mut conflicts = Vec::new();
        starts.push(0);
        for l in lists {
            conflicts.extend(l);
            starts.push(conflicts.len() as u32);
        }
        Plan {
            slots,
            arena,
            conflicts,
            starts,
        }
    }

    /// The slots whose bytes overlap slot `i`'s.
    pub fn conflicts(&self, i: usize) -> &[u32] {
        &self.conflicts[self.starts[i] as usize..self.starts[i + 1] as usize]
    }

    /// Bytes of the placed slots.
    pub fn placed_bytes(&self) -> u64 {
        self.slots
            .iter()
            .filter(|s| s.offset.is_some())
            .map(|s| s.size)
            .sum()
    }
}

/// Serves the steps after the recorded one from a plan.
#[derive(Debug)]
pub struct Server<'p> {
    plan: &'p Plan,
    /// The next slot to match.
    cursor: usize,
    live: Vec<bool>,
    /// How many slots ahead a request looks for its size.
    window: usize,
    /// Requests served from the arena.
    pub served: u64,
    /// Requests that got no slot.
    pub refused: u64,
    /// Slots passed over by a match further ahead.
    pub skipped: u64,
}

impl<'p> Server<'p> {
    pub fn new(plan: &'p Plan, window: usize) -> Server<'p> {
        Server {
            plan,
            cursor: 0,
            live: vec![false; plan.slots.len()],
            window: window.max(1),
            served: 0,
            refused: 0,
            skipped: 0,
        }
    }

    /// A step begins: matching starts again at the first slot. Blocks of
    /// the last step may still be live; their slots stay taken.
    pub fn begin_step(&mut self) {
        self.cursor = 0;
    }

    /// A slot for `size` bytes and its offset, or `None` (the caller takes
    /// the memory elsewhere).
    pub fn allocate(&mut self, size: u64) -> Option<(usize, u64)> {
        let slots = &self.plan.slots;
        let end = slots.len().min(self.cursor.saturating_add(self.window));
        let Some(j) = (self.cursor..end).find(|&j| slots[j].size == size) else {
            self.refused += 1;
            return None;
        };
        self.skipped += (j - self.cursor) as u64;
        self.cursor = j + 1;
        let free = |k: usize| !self.live[k];
        match slots[j].offset {
            Some(offset) if free(j) && self.plan.conflicts(j).iter().all(|&k| free(k as usize)) => {
                self.live[j] = true;
                self.served += 1;
                Some((j, offset))
            }
            _ => {
                self.refused += 1;
                None
            }
        }
    }

    /// Slot `slot`'s block is freed. `false` (and nothing changes) when it
    /// was not live.
    pub fn free(&mut self, slot: usize) -> bool {
        match self.live.get_mut(slot) {
            Some(l @ true) => {
                *l = false;
                true
            }
            _ => false,
        }
    }

    /// The live slots' byte ranges.
    #[cfg(test)]
    pub fn live_ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.live.iter().enumerate().filter(|(_, &l)| l).map(|(i, _)| {
            let s = &self.plan.slots[i];
            let o = s.offset.expect("a live slot is placed");
            (o, o + round(s.size))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rec(size: u64, at: u32, end: End) -> Rec {
        Rec { size, at, end }
    }

    /// Any two placed blocks that live at the same time hold separate
    /// bytes, inside the arena.
    fn check_placement(recs: &[Rec], events: u32, plan: &Plan) {
        for i in 0..recs.len() {
            let Some(oi) = plan.slots[i].offset else { continue };
            assert!(oi + round(recs[i].size) <= plan.arena);
            assert_eq!(oi % ALIGN, 0);
            for j in i + 1..recs.len() {
                let Some(oj) = plan.slots[j].offset else { continue };
                let (a, b) = (span(&recs[i], events).unwrap(), span(&recs[j], events).unwrap());
                if meet(&a, &b) {
                    let apart = oi + round(recs[i].size) <= oj || oj + round(recs[j].size) <= oi;
                    assert!(apart, "blocks {i} and {j} live together and overlap");
                }
            }
        }
    }

    #[test]
    fn blocks_living_together_are_apart_and_the_others_share() {
        // a: 0..4, b: 1..3 (inside a), c: 5..7 (after both), d wraps 6..8 and 0..1.
        let recs = [
            rec(1000, 0, End::InStep(4)),
            rec(3000, 1, End::InStep(3)),
            rec(4000, 5, End::InStep(7)),
            rec(512, 6, End::Next(1)),
        ];
        let plan = Plan::build(&recs, 8).unwrap();
        check_placement(&recs, 8, &plan);
        // c is the largest; b lives apart from c, so b shares c's bytes;
        // a lives with b and d with c.
        assert_eq!(plan.slots[2].offset, Some(0));
        assert_eq!(plan.slots[1].offset, Some(0));
        assert_eq!(plan.slots[0].offset, Some(3072));
        assert_eq!(plan.slots[3].offset, Some(4096));
        assert_eq!(plan.arena, 4608);
    }

    #[test]
    fn blocks_outliving_the_next_instance_are_not_placed() {
        let recs = [
            rec(100, 2, End::Later),
            rec(100, 2, End::Next(3)), // freed after its own next allocation
            rec(100, 4, End::Next(1)),
        ];
        let plan = Plan::build(&recs, 6).unwrap();
        assert_eq!(plan.slots[0].offset, None);
        assert_eq!(plan.slots[1].offset, None);
        assert_eq!(plan.slots[2].offset, Some(0));
        assert_eq!(plan.placed_bytes(), 100);
    }

    #[test]
    fn a_repeated_step_is_served_whole_and_a_stray_one_in_part() {
        // Two blocks that never live together share their bytes.
        let recs = [rec(1 << 20, 0, End::InStep(1)), rec(1 << 20, 2, End::InStep(3))];
        let plan = Plan::build(&recs, 4).unwrap();
        assert_eq!(plan.arena, 1 << 20);
        let mut s = Server::new(&plan, 4);
        for _ in 0..3 {
            s.begin_step();
            let (a, _) = s.allocate(1 << 20).unwrap();
            assert!(s.free(a));
            let (b, _) = s.allocate(1 << 20).unwrap();
            assert!(s.free(b));
        }
        assert_eq!((s.served, s.refused), (6, 0));
        // A step that holds the first block longer: the second finds its
        // bytes taken and is refused, not placed over it.
        s.begin_step();
        let (a, _) = s.allocate(1 << 20).unwrap();
        assert_eq!(s.allocate(1 << 20), None);
        assert!(s.free(a));
        assert!(!s.free(a));
        // A size the plan does not have is refused and does not move the
        // match: the next request still finds slot 0.
        s.begin_step();
        assert_eq!(s.allocate(77), None);
        assert_eq!(s.allocate(1 << 20).map(|x| x.0), Some(0));
        assert_eq!(s.refused, 2);
    }

    #[test]
    fn a_dropped_allocation_is_skipped_within_the_window() {
        let recs = [
            rec(100, 0, End::InStep(6)),
            rec(200, 1, End::InStep(6)),
            rec(300, 2, End::InStep(6)),
        ];
        let plan = Plan::build(&recs, 7).unwrap();
        let mut s = Server::new(&plan, 2);
        assert_eq!(s.allocate(200).map(|x| x.0), Some(1));
        assert_eq!(s.skipped, 1);
        assert_eq!(s.allocate(300).map(|x| x.0), Some(2));
        let mut s = Server::new(&plan, 2);
        assert_eq!(s.allocate(300), None, "two slots ahead is outside a window of 2");
    }

    #[test]
    fn too_many_blocks_are_an_error() {
        let recs = vec![rec(1, 0, End::InStep(1)); MAX_BLOCKS + 1];
        assert!(Plan::build(&recs, 2).unwrap_err().contains("at most"));
    }

    #[test]
    fn slots_beyond_the_arena_are_not_placed() {
        let plan = Plan::with_slots(
            vec![
                Slot {
                    size: 512,
                    offset: Some(0),
                },
                Slot {
                    size: 512,
                    offset: Some(u64::MAX - 10),
                },
            ],
            1024,
        );
        assert_eq!(plan.slots[1].offset, None);
        assert_eq!(plan.conflicts(0), &[] as &[u32]);
    }

    fn arb_recs() -> impl Strategy<Value = (Vec<Rec>, u32)> {
        (2u32..60).prop_flat_map(|events| {
            let r = (1u64..5000, 0..events, 0u32..3, 0..events).prop_map(move |(size, at, kind, f)| {
                let end = match kind {
                    0 => End::InStep(at + 1 + f % (events - at).max(1)),
                    1 => End::Next(f),
                    _ => End::Later,
                };
                Rec { size, at, end }
            });
            (proptest::collection::vec(r, 0..40), Just(events))
        })
    }

    /// A request of one of a few sizes, or a free of the n-th live slot.
    #[derive(Clone, Debug)]
    enum Op {
        Alloc(u64),
        Free(usize),
        Step,
    }

    fn arb_ops() -> impl Strategy<Value = Vec<Op>> {
        proptest::collection::vec(
            prop_oneof![
                4 => (0u64..6).prop_map(|k| Op::Alloc(512 * (k + 1))),
                3 => (0usize..8).prop_map(Op::Free),
                1 => Just(Op::Step),
            ],
            0..200,
        )
    }

    proptest! {
        #[test]
        fn placed_blocks_living_together_never_overlap((recs, events) in arb_recs()) {
            let plan = Plan::build(&recs, events).unwrap();
            check_placement(&recs, events, &plan);
        }

        /// Whatever the plan (overlapping slots, any sizes) and whatever
        /// the program does, the blocks the server has out never share a
        /// byte and stay inside the arena.
        #[test]
        fn live_blocks_never_overlap(
            slots in proptest::collection::vec(
                (0u64..6, proptest::option::of(0u64..12)).prop_map(|(k, o)| Slot {
                    size: 512 * (k + 1),
                    offset: o.map(|o| o * 512),
                }),
                0..30,
            ),
            window in 1usize..6,
            ops in arb_ops(),
        ) {
            let plan = Plan::with_slots(slots, 4096);
            let mut s = Server::new(&plan, window);
            let mut out: Vec<usize> = Vec::new();
            for op in ops {
                match op {
                    Op::Alloc(size) => {
                        if let Some((slot, offset)) = s.allocate(size) {
                            prop_assert_eq!(plan.slots[slot].offset, Some(offset));
                            prop_assert_eq!(plan.slots[slot].size, size);
                            out.push(slot);
                        }
                    }
                    Op::Free(n) if !out.is_empty() => {
                        let slot = out.swap_remove(n % out.len());
                        prop_assert!(s.free(slot));
                    }
                    Op::Free(_) => {}
                    Op::Step => s.begin_step(),
                }
                let mut ranges: Vec<_> = s.live_ranges().collect();
                prop_assert_eq!(ranges.len(), out.len());
                ranges.sort_unstable();
                for w in ranges.windows(2) {
                    prop_assert!(w[0].1 <= w[1].0, "{:?} and {:?} overlap", w[0], w[1]);
                }
                prop_assert!(ranges.iter().all(|r| r.1 <= plan.arena));
            }
        }
    }
}
