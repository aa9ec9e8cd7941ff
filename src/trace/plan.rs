//! Placement planned from a recorded program, and the server that hands it
//! out again by order with every block checked.
//!
//! A training loop allocates the same sizes in the same order every step,
//! and a program run twice allocates the same sequence twice. Once the
//! sequence is recorded with its lifetimes (a [trace](crate::trace)), the
//! blocks can be placed in one arena, largest first, each at the lowest
//! offset that no block living at the same time holds: the program then
//! needs about its live peak and nothing more.
//!
//! - [`Plan::build`] places one recorded step, whose blocks may live on
//!   into the next step (gradients freed by the next `zero_grad`).
//! - [`Plan::for_program`] places a whole recorded program: what comes
//!   before its repeated step once, then the repeated step ([`find_step`])
//!   for ever after; [`Server::for_program`] serves it.
//!
//! Positions are counted in events (allocations and frees). A block of the
//! repeated step lives over an interval of the step, or wraps over its end
//! when it is freed in the next step before the position it was allocated
//! at (it is then gone before its own next instance). Blocks that live
//! longer are not placed.
//!
//! [`Server`] matches each allocation with the next slot of the same size
//! (within a window, so that an allocation the program added or dropped
//! does not end the match), and hands the slot out only if no live block
//! overlaps its bytes. That check, not the plan, keeps blocks
//! apart: a program that strays from the recording (other sizes, other
//! order, a block held longer) gets no slot for that allocation (it is
//! served from elsewhere), never one that overlaps a live block. The
//! property test `live_blocks_never_overlap` tries arbitrary plans and
//! programs against it.
//!
//! ```
//! use somalloc::trace::plan::{Op, Plan, Server};
//! # fn main() -> Result<(), String> {
//! // A step of four allocations (1 to 4 MiB), each freed at once; recorded
//! // twice.
//! let mut recorded = Vec::new();
//! for k in 0..8 {
//!     recorded.push(Op::Alloc((k % 4 + 1) << 20));
//!     recorded.push(Op::Free(k as usize));
//! }
//! let plan = Plan::for_program(&recorded)?;
//! assert_eq!(plan.arena, 4 << 20); // no two blocks live together
//! let mut server = Server::for_program(plan.into(), 8);
//! for k in 0..100 {
//!     let (slot, offset) = server.allocate((k % 4 + 1) << 20).ok_or("refused")?;
//!     assert_eq!(offset, 0);
//!     assert!(server.free(slot));
//! }
//! # Ok(())
//! # }
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

/// Offsets and sizes round up to a multiple of this.
pub const ALIGN: u64 = 512;
/// The most allocations a plan places (planning takes time quadratic in
/// them).
pub const MAX_BLOCKS: usize = 20_000;

/// When a recorded block of a step was freed, in event positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// In its own step, at this position.
    InStep(u32),
    /// In the next step, at this position.
    Next(u32),
    /// Not before the end of the next step (or never).
    Later,
}

/// A recorded allocation of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rec {
    /// Bytes requested.
    pub size: u64,
    /// Its position in the step.
    pub at: u32,
    /// When it was freed.
    pub end: End,
}

/// One event of a recorded stream: an allocation of so many bytes, or the
/// free of its `k`-th allocation (counted from 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// An allocation of this many bytes.
    Alloc(u64),
    /// The free of the stream's allocation of this number.
    Free(usize),
}

/// The shortest step [`find_step`] looks for, in allocations.
pub const MIN_STEP: usize = 4;
/// [`find_step`] looks at sequences of at most this many allocations (its
/// time grows with the square of their number).
pub const MAX_SEARCHED: usize = MAX_BLOCKS;

/// A step found by [`find_step`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// The step's length in allocations.
    pub len: usize,
    /// How many allocations in a row follow it (at least two steps).
    pub covered: usize,
    /// Where they end (exclusive): the last step is `[end - len, end)`.
    pub end: usize,
}

/// The step of a sequence of allocation sizes: the period that the
/// longest run of the sequence follows, at least two periods long (the
/// shortest such period; the latest such run). What comes after the run
/// (a program's evaluation or saving after its loop) is left out of it.
/// `None` when no period of at least [`MIN_STEP`] repeats, or the
/// sequence is longer than [`MAX_SEARCHED`].
///
/// ```
/// use somalloc::trace::plan::{find_step, Step};
/// let mut sizes = vec![1, 2, 3]; // a prologue
/// for _ in 0..3 {
///     sizes.extend([7, 8, 9, 4, 4]); // three steps of five
/// }
/// sizes.extend([5, 6]); // a tail
/// assert_eq!(find_step(&sizes), Some(Step { len: 5, covered: 15, end: 18 }));
/// assert_eq!(find_step(&[1, 2, 3, 4, 5]), None);
/// ```
pub fn find_step(sizes: &[u64]) -> Option<Step> {
    let n = sizes.len();
    if n > MAX_SEARCHED {
        return None;
    }
    let mut best: Option<Step> = None;
    for len in MIN_STEP..=n / 2 {
        // `run` allocations in a row equal the one `len` before, up to
        // `end`: the run covers `run + len` allocations.
        let mut consider = |run: usize, end: usize| {
            let covered = run + len;
            if run >= len
                && best.is_none_or(|b| covered > b.covered || (covered == b.covered && len == b.len))
            {
                best = Some(Step { len, covered, end });
            }
        };
        let mut run = 0;
        for i in len..n {
            if sizes[i] == sizes[i - len] {
                run += 1;
            } else {
                consider(run, i);
                run = 0;
            }
        }
        consider(run, n);
    }
    best
}

/// A slot of a plan: the allocation it stands for, and where it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Bytes requested (a request matches only this size).
    pub size: u64,
    /// Its offset in the arena; `None`: not placed (it lives too long).
    pub offset: Option<u64>,
}

/// A planned step or program.
#[derive(Debug)]
pub struct Plan {
    /// One slot per recorded allocation, in order.
    pub slots: Vec<Slot>,
    /// The bytes the arena needs.
    pub arena: u64,
    /// The slot the server goes on with after the last one (the first of
    /// the repeated step); `None`: none, the plan ends.
    pub wrap_to: Option<usize>,
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

/// A slot's lifetime in a whole program's events.
#[derive(Clone, Copy, Debug)]
enum Life {
    /// `[from, to)`, once.
    Once(u64, u64),
    /// The step positions `span` of every step from `from` on, steps
    /// `len` events long.
    Every {
        from: u64,
        len: u64,
        span: [(u32, u32); 2],
    },
}

impl Life {
    fn meets(&self, other: &Life) -> bool {
        match (*self, *other) {
            (Life::Once(a, b), Life::Once(c, d)) => a < d && c < b,
            (Life::Every { span: x, .. }, Life::Every { span: y, .. }) => meet(&x, &y),
            (Life::Once(a, b), Life::Every { from, len, span })
            | (Life::Every { from, len, span }, Life::Once(a, b)) => {
                // The step instances that start before `b`.
                if b <= from {
                    return false;
                }
                let last = (b - from) / len.max(1);
                let first = a.saturating_sub(from) / len.max(1);
                // An instance that began a step earlier may reach into
                // this one (a span that wraps).
                (first.saturating_sub(1)..=last).any(|m| {
                    let base = from + m * len;
                    span.iter().enumerate().any(|(i, &(s, e))| {
                        // The wrapped part belongs to the next step.
                        let shift = if i == 1 { len } else { 0 };
                        let (s, e) = (base + shift + u64::from(s), base + shift + u64::from(e));
                        s < e && s < b && a < e
                    })
                })
            }
        }
    }
}

/// Places the blocks that have a lifetime, the largest first (the
/// earliest among equals), each at the lowest offset that no block placed
/// before it and living at the same time (`meets`) holds: the slots, and
/// the arena's bytes.
fn place<L>(sizes: &[u64], lives: &[Option<L>], meets: impl Fn(&L, &L) -> bool) -> (Vec<Slot>, u64) {
    let mut order: Vec<(usize, &L)> = lives
        .iter()
        .enumerate()
        .filter_map(|(k, l)| l.as_ref().map(|l| (k, l)))
        .collect();
    order.sort_by_key(|&(k, _)| (std::cmp::Reverse(sizes[k]), k));
    let mut offsets: Vec<Option<u64>> = vec![None; sizes.len()];
    let mut placed: Vec<(&L, u64, u64)> = Vec::with_capacity(order.len());
    // The byte ranges of the placed blocks living at the same time as the
    // one being placed.
    let mut taken: Vec<(u64, u64)> = Vec::new();
    let mut arena = 0;
    for (k, life) in order {
        let size = round(sizes[k]);
        taken.clear();
        taken.extend(placed.iter().filter(|p| meets(life, p.0)).map(|p| (p.1, p.2)));
        taken.sort_unstable();
        let mut offset = 0;
        for &(from, to) in &taken {
            if offset + size <= from {
                break;
            }
            offset = offset.max(to);
        }
        offsets[k] = Some(offset);
        arena = arena.max(offset + size);
        placed.push((life, offset, offset + size));
    }
    let slots = sizes
        .iter()
        .zip(offsets)
        .map(|(&size, offset)| Slot { size, offset })
        .collect();
    (slots, arena)
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
        let sizes: Vec<u64> = recs.iter().map(|r| r.size).collect();
        let (slots, arena) = place(&sizes, &spans, meet);
        Ok(Plan::with_slots(slots, arena))
    }

    /// Plans a whole recorded stream, `ops` in order: each allocation
    /// outside the last repeated step ([`find_step`], two whole steps at
    /// least) gets a slot of its own, placed for its recorded lifetime (for
    /// ever if it was never freed); the last step's allocations get slots
    /// that serve every step after the recording (after the slots of what
    /// followed the step, if anything did), placed for the lifetimes their
    /// counterparts had in the step before. Without a repeated step, every
    /// allocation gets a slot of its own and the plan ends with them.
    pub fn for_program(ops: &[Op]) -> Result<Plan, String> {
        // Positions count allocations: a block freed before the program's
        // allocation `f` is live over [its own number, f). Two blocks live
        // at the same time exactly when these intervals meet, however the
        // frees fall between the allocations (they differ between a
        // program's first step and the others).
        let sizes: Vec<u64> = ops
            .iter()
            .filter_map(|op| match *op {
                Op::Alloc(s) => Some(s),
                Op::Free(_) => None,
            })
            .collect();
        let n = sizes.len();
        if n > MAX_BLOCKS {
            return Err(format!(
                "{n} allocations in a stream; at most {MAX_BLOCKS} are planned (record fewer steps)"
            ));
        }
        let mut freed = vec![u64::MAX; n];
        let mut made = 0usize;
        for (pos, op) in ops.iter().enumerate() {
            match *op {
                Op::Alloc(_) => made += 1,
                Op::Free(k) => {
                    let slot = freed
                        .get_mut(k)
                        .ok_or_else(|| format!("event {pos} frees allocation {k} of {n}"))?;
                    if *slot != u64::MAX || k >= made {
                        return Err(format!("event {pos} frees allocation {k}, which is not live"));
                    }
                    *slot = made as u64;
                }
            }
        }
        // The repeated step: allocations [last, end), the step before
        // [prev, last), `p` allocations each. What follows `end` is
        // planned once, like what precedes `prev`.
        let cycle = find_step(&sizes).map(|s| (s.len, s.end - 2 * s.len, s.end - s.len, s.end));
        if cycle.is_some_and(|c| c.0 > u32::MAX as usize) {
            return Err("a repeated step of over 4 billion allocations".into());
        }
        // Each slot's lifetime: an interval, or (a slot of the repeated
        // step) a step span repeated every `p` allocations from the last
        // step's start, taken from its twin in the step before. A period
        // whose blocks mostly outlive it (layer after layer of a model's
        // weights) is no step: it is planned once, like the rest.
        let once = |k: usize| Some(Life::Once(k as u64, freed[k].max(k as u64 + 1)));
        let every = |k: usize, (p, prev, last): (usize, usize, usize)| {
            let rel = (k - last) as u64;
            let (prev, last, f) = (prev as u64, last as u64, freed[k - p]);
            let end = if f <= last {
                Some(End::InStep((f - prev) as u32))
            } else if f != u64::MAX && f - last <= rel {
                Some(End::Next((f - last) as u32))
            } else {
                None
            };
            let at = Rec {
                size: sizes[k],
                at: rel as u32,
                end: end?,
            };
            span(&at, p as u32).map(|span| Life::Every {
                from: last,
                len: p as u64,
                span,
            })
        };
        let cycle = cycle.filter(|&(p, prev, last, end)| {
            let repeating = (last..end)
                .filter(|&k| every(k, (p, prev, last)).is_some())
                .count();
            2 * repeating >= p
        });
        let spans: Vec<Option<Life>> = (0..n)
            .map(|k| match cycle {
                Some((p, prev, last, end)) if (last..end).contains(&k) => every(k, (p, prev, last)),
                _ => once(k),
            })
            .collect();
        let (slots, arena) = place(&sizes, &spans, Life::meets);
        let mut plan = Plan::with_slots(slots, arena);
        plan.wrap_to = cycle.map(|c| c.2);
        Ok(plan)
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
        Plan {
            slots,
            arena,
            wrap_to: None,
        }
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

/// Serves allocations from a plan, in order, each slot checked against the
/// live ones.
#[derive(Debug)]
pub struct Server {
    plan: Arc<Plan>,
    /// The next slot to match.
    cursor: usize,
    live: Vec<bool>,
    /// The live slots' bytes: start -> (end, slot). They never overlap
    /// (see `allocate`).
    taken: BTreeMap<u64, (u64, usize)>,
    /// How many slots ahead a request looks for its size.
    window: usize,
    /// Requests served from the arena.
    pub served: u64,
    /// Requests that got no slot.
    pub refused: u64,
    /// Slots passed over by a match further ahead.
    pub skipped: u64,
}

impl Server {
    /// Serves the steps after a step planned with [`Plan::build`]: call
    /// [`begin_step`](Server::begin_step) at each step's start. A request
    /// looks up to `window` slots ahead for its size.
    pub fn new(plan: Arc<Plan>, window: usize) -> Server {
        Server {
            live: vec![false; plan.slots.len()],
            taken: BTreeMap::new(),
            plan,
            cursor: 0,
            window: window.max(1),
            served: 0,
            refused: 0,
            skipped: 0,
        }
    }

    /// Serves a program planned with [`Plan::for_program`] from its first
    /// allocation on: after the last slot, matching goes on at the
    /// repeated step's first.
    pub fn for_program(plan: Arc<Plan>, window: usize) -> Server {
        Server::new(plan, window)
    }

    /// The plan served.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// A step begins: matching starts again at the first slot. Blocks of
    /// the last step may still be live; their slots stay taken.
    pub fn begin_step(&mut self) {
        self.cursor = 0;
    }

    /// The slot after `j`: the next one, or past the last the repeated
    /// step's first (`None`: the plan has ended).
    fn after(&self, j: usize) -> Option<usize> {
        match j + 1 {
            n if n < self.plan.slots.len() => Some(n),
            _ => self.plan.wrap_to,
        }
    }

    /// A slot for `size` bytes and its offset in the arena, or `None` (the
    /// caller takes the memory elsewhere).
    pub fn allocate(&mut self, size: u64) -> Option<(usize, u64)> {
        let slots = &self.plan.slots;
        let mut j = Some(self.cursor).filter(|&c| c < slots.len());
        let mut looked = 0;
        let found = loop {
            match j {
                Some(k) if looked < self.window => {
                    if slots[k].size == size {
                        break Some(k);
                    }
                    looked += 1;
                    j = self.after(k);
                }
                _ => break None,
            }
        };
        let Some(j) = found else {
            self.refused += 1;
            return None;
        };
        self.skipped += looked as u64;
        self.cursor = self.after(j).unwrap_or(slots.len());
        // The live ranges never overlap, so they end in the order they
        // start: the one that starts last before this slot's end is the
        // only one that can reach into it.
        let free = |from: u64, to: u64| {
            self.taken
                .range(..to)
                .next_back()
                .is_none_or(|(_, &(end, _))| end <= from)
        };
        match slots[j].offset {
            Some(offset) if !self.live[j] && free(offset, offset + round(size)) => {
                self.live[j] = true;
                self.taken.insert(offset, (offset + round(size), j));
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
                // A live slot is placed (`allocate` hands out no other).
                if let Some(offset) = self.plan.slots[slot].offset {
                    self.taken.remove(&offset);
                }
                true
            }
            _ => false,
        }
    }

    /// The live slot whose block starts at `offset`, if any.
    pub fn live_slot_at(&self, offset: u64) -> Option<usize> {
        self.taken.get(&offset).map(|&(_, slot)| slot)
    }

    /// How many slots are live.
    pub fn live_slots(&self) -> usize {
        self.taken.len()
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
        let plan = Arc::new(Plan::build(&recs, 4).unwrap());
        assert_eq!(plan.arena, 1 << 20);
        let mut s = Server::new(plan, 4);
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
        let plan = Arc::new(Plan::build(&recs, 7).unwrap());
        let mut s = Server::new(plan.clone(), 2);
        assert_eq!(s.allocate(200).map(|x| x.0), Some(1));
        assert_eq!(s.skipped, 1);
        assert_eq!(s.allocate(300).map(|x| x.0), Some(2));
        let mut s = Server::new(plan, 2);
        assert_eq!(s.allocate(300), None, "two slots ahead is outside a window of 2");
    }

    /// A program: `persistent` blocks never freed, then `steps` steps of
    /// the allocations `step` (size, lifetime in allocations: freed just
    /// before the allocation that many later, at most a step later).
    fn program(persistent: &[u64], step: &[(u64, usize)], steps: usize) -> Vec<Op> {
        let mut ops: Vec<Op> = persistent.iter().map(|&s| Op::Alloc(s)).collect();
        let base = persistent.len();
        // (due at this allocation count, allocation number)
        let mut due: Vec<(usize, usize)> = Vec::new();
        for i in 0..steps * step.len() {
            let g = base + i;
            due.sort_unstable();
            while due.first().is_some_and(|d| d.0 <= i) {
                ops.push(Op::Free(due.remove(0).1));
            }
            let (size, life) = step[i % step.len()];
            ops.push(Op::Alloc(size));
            due.push((i + life.clamp(1, step.len()), g));
        }
        ops
    }

    /// Serves `ops` and returns the number of allocations refused.
    fn serve(server: &mut Server, ops: &[Op]) -> u64 {
        let mut slot_of: Vec<Option<usize>> = Vec::new();
        let before = server.refused;
        for op in ops {
            match *op {
                Op::Alloc(size) => slot_of.push(server.allocate(size).map(|x| x.0)),
                Op::Free(k) => {
                    if let Some(slot) = slot_of[k] {
                        assert!(server.free(slot));
                    }
                }
            }
        }
        server.refused - before
    }

    #[test]
    fn a_program_is_planned_once_and_its_step_for_ever() {
        // Weights (never freed), then steps of: a gradient g (512 KiB)
        // freed at the next step's start, activations a (1 MiB), b (2 MiB)
        // and c (3 MiB) freed within the step.
        let mib = 1u64 << 20;
        let step = [(mib / 2, 4), (mib, 1), (2 * mib, 1), (3 * mib, 1)];
        let recorded = program(&[4 * mib], &step, 3);
        let plan = Arc::new(Plan::for_program(&recorded).unwrap());
        assert_eq!(plan.wrap_to, Some(1 + 2 * 4));
        // The weights, the gradient and the largest activation at once.
        assert_eq!(plan.arena, 4 * mib + mib / 2 + 3 * mib);
        // The recorded run and twenty more steps: every allocation served.
        let mut server = Server::for_program(plan.clone(), 8);
        let longer = program(&[4 * mib], &step, 23);
        assert_eq!(serve(&mut server, &longer), 0);
        assert_eq!(server.served as usize, 1 + 23 * 4);
    }

    #[test]
    fn what_follows_the_loop_is_planned_once_and_the_step_goes_on() {
        // Steps of four allocations freed at once, then two allocations
        // after the loop (an evaluation), then more steps in the served
        // run.
        let ops = |steps: usize, tail_at: usize| {
            let mut ops = Vec::new();
            let mut k = 0;
            let mut push = |ops: &mut Vec<Op>, size: u64| {
                ops.push(Op::Alloc(size));
                ops.push(Op::Free(k));
                k += 1;
            };
            for s in 0..steps {
                if s == tail_at {
                    push(&mut ops, 99_999);
                    push(&mut ops, 77_777);
                }
                for size in [1000, 2000, 3000, 4000] {
                    push(&mut ops, size);
                }
            }
            if tail_at == steps {
                push(&mut ops, 99_999);
                push(&mut ops, 77_777);
            }
            ops
        };
        let plan = Arc::new(Plan::for_program(&ops(3, 3)).unwrap());
        assert_eq!(plan.wrap_to, Some(8));
        let mut server = Server::for_program(plan, 16);
        assert_eq!(serve(&mut server, &ops(13, 3)), 0);
        assert_eq!(server.served, 13 * 4 + 2);
    }

    #[test]
    fn a_period_of_blocks_never_freed_is_no_step() {
        // A model's layers: the same four weights, eight times, all kept.
        let ops: Vec<Op> = (0..32).map(|k| Op::Alloc(1000 * (k % 4 + 1))).collect();
        let plan = Arc::new(Plan::for_program(&ops).unwrap());
        assert_eq!(plan.wrap_to, None);
        assert!(plan.slots.iter().all(|s| s.offset.is_some()));
        assert_eq!(plan.arena, 8 * (1024 + 2048 + 3072 + 4096));
    }

    #[test]
    fn a_program_without_a_step_ends_with_its_slots() {
        let ops = [Op::Alloc(100), Op::Alloc(200), Op::Free(0), Op::Alloc(300)];
        let plan = Arc::new(Plan::for_program(&ops).unwrap());
        assert_eq!(plan.wrap_to, None);
        let mut server = Server::for_program(plan, 4);
        assert_eq!(serve(&mut server, &ops), 0);
        assert_eq!(server.allocate(100), None, "the plan has ended");
    }

    #[test]
    fn frees_the_program_cannot_have_made_are_errors() {
        assert!(Plan::for_program(&[Op::Free(0)])
            .unwrap_err()
            .contains("frees allocation 0 of 0"));
        let twice = [Op::Alloc(1), Op::Free(0), Op::Free(0)];
        assert!(Plan::for_program(&twice).unwrap_err().contains("not live"));
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
    enum Act {
        Alloc(u64),
        Free(usize),
        Step,
    }

    fn arb_ops() -> impl Strategy<Value = Vec<Act>> {
        proptest::collection::vec(
            prop_oneof![
                4 => (0u64..6).prop_map(|k| Act::Alloc(512 * (k + 1))),
                3 => (0usize..8).prop_map(Act::Free),
                1 => Just(Act::Step),
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

        /// A program that repeats its step is served whole from its plan,
        /// for more steps than were recorded: the placement keeps apart
        /// every two blocks that live at the same time, across the step's
        /// end and the prologue's.
        #[test]
        fn a_repeated_program_is_served_whole(
            persistent in proptest::collection::vec(1u64..4096, 0..4),
            lives in proptest::collection::vec((1u64..4096, 1usize..12), MIN_STEP..10),
            steps in 2usize..4,
            more in 1usize..6,
        ) {
            // Sizes distinct within the step, so that no shorter period
            // repeats.
            let step: Vec<(u64, usize)> = lives
                .iter()
                .enumerate()
                .map(|(k, &(s, life))| (s * 64 + k as u64, life))
                .collect();
            let plan = Arc::new(Plan::for_program(&program(&persistent, &step, steps)).unwrap());
            let mut server = Server::for_program(plan, 4);
            let longer = program(&persistent, &step, steps + more);
            prop_assert_eq!(serve(&mut server, &longer), 0);
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
            let plan = Arc::new(Plan::with_slots(slots, 4096));
            let mut s = Server::new(plan.clone(), window);
            let mut out: Vec<usize> = Vec::new();
            for op in ops {
                match op {
                    Act::Alloc(size) => {
                        if let Some((slot, offset)) = s.allocate(size) {
                            prop_assert_eq!(plan.slots[slot].offset, Some(offset));
                            prop_assert_eq!(plan.slots[slot].size, size);
                            out.push(slot);
                        }
                    }
                    Act::Free(n) if !out.is_empty() => {
                        let slot = out.swap_remove(n % out.len());
                        prop_assert!(s.free(slot));
                    }
                    Act::Free(_) => {}
                    Act::Step => s.begin_step(),
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
