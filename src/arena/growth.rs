//! Where the arena grows, and where in a free range a block goes: the
//! book's answers to the two questions that decide which chunks a block
//! touches. A chunk is one physical allocation, given back only when all
//! of it is free, so a block that lives long (a library's workspace, made
//! in the first step and kept to the end) holds every chunk it touches;
//! these rules keep large blocks from touching chunks they barely need.
//!
//! * **Chunks of its own.** A block of [`OWN_CHUNKS_MIN`] bytes or more
//!   extends a free range that ends where unmapped space begins only when
//!   that maps at least a granule less than a window of the block's own
//!   would; otherwise it gets that window and starts at its start, in
//!   chunks made for it alone. (Extending a 0.3 MiB tail for a 32 MiB
//!   block maps the same 32 MiB, and leaves the block in the tail's chunk
//!   too.) Any block that growth gives a window of its own starts there,
//!   not in a free range the window happens to join.
//! * **The fewest chunks.** A block of [`SPOT_MIN`] to [`SPOT_MAX`] bytes
//!   taken from a longer free range goes where it touches the fewest chunk
//!   bytes: the range's start (best fit's usual place), the first chunk
//!   boundary within [`SPOT_GAP`] of the start, or the range's end, but
//!   not the end of a range that growth can extend (a block there would
//!   keep the range from growing: with moves off, GPT-2's recorded steps
//!   then mapped 1.15 times their live peak instead of 1.07).
//!
//! On the recorded programs of `benches/data`, replayed on the fake
//! device, a trim after the program freed its models left 66, 74 and
//! 154 MiB mapped (ResNet-50, GPT-2 small, both on two streams; 65, 65 and
//! 130 MiB live), against 82, 112 and 190 MiB before these rules; with
//! every block but the kept ones scaled by 0.6 to 1.5, 66, 74 and 148 to
//! 158 MiB, against 68-82, 86-114 and 152-204. The mapped peaks moved by
//! at most 0.2 % on those programs, and on average over the scaled ones
//! (see `replay_tests.rs`, `at_other_sizes`). Both rules are bounded in
//! size because applied to every block they moved ResNet-50's first-step
//! peak by 1 to 4 % of its live peak.

use super::book::{round_up, Addr, Book, Grow, Kind, Owner};

/// The least block that extends a free range only when that saves mapping
/// (see the module docs).
pub(crate) const OWN_CHUNKS_MIN: usize = 32 << 20;

/// The blocks that go where they touch the fewest chunk bytes (see the
/// module docs), and how far past a range's start a chunk boundary may
/// lie for such a block to start there.
pub(crate) const SPOT_MIN: usize = 32 << 20;
pub(crate) const SPOT_MAX: usize = 64 << 20;
pub(crate) const SPOT_GAP: usize = 1 << 20;

/// Where to map chunks for a block (see [`Book::plan_growth`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct GrowthPlan {
    /// The chunks to map, in address order.
    pub pieces: Vec<Grow>,
    /// Where the block starts: the first piece's start for a window of its
    /// own; `None` when the plan extends a free range (the block is then
    /// the best fit of the ranges, which the extended one now is).
    pub at: Option<Addr>,
}

impl Book {
    /// Where to map chunks so that `len` bytes of `kind` fit for `slot`, at
    /// least `min` bytes in all, in pieces of at most `chunk` bytes (a
    /// multiple of the granule). Extends a usable free range that ends at
    /// unmapped space when one does and that saves mapping (any saving
    /// below [`OWN_CHUNKS_MIN`], a granule at least from there up), else
    /// places the whole block in unmapped space (see [`Book::hole`]).
    /// `None`: no unmapped space can hold it.
    pub(crate) fn plan_growth(
        &self,
        len: usize,
        kind: Kind,
        slot: u32,
        chunk: usize,
        min: usize,
        extend: bool,
    ) -> Option<GrowthPlan> {
        let g = self.granule;
        // At least `min` bytes (a multiple of the granule) are mapped.
        let min = round_up(min.max(g), g)?;
        let own = round_up(len, g)?.max(min);
        // Extending a free range that ends where unmapped space begins.
        let mut best: Option<(usize, Addr)> = None;
        for (a, f) in self.free_ranges().filter(|_| extend) {
            let usable = f.kind == kind && (f.owner == Owner::Any || f.owner == Owner::Stream(slot));
            if !usable || f.len >= len {
                continue;
            }
            let end = a + f.len;
            if end % g != 0 {
                continue;
            }
            let need = round_up(len - f.len, g)?.max(min);
            if len >= OWN_CHUNKS_MIN && need >= own {
                continue;
            }
            if self.unmapped(end, need) && best.is_none_or(|b| need < b.0) {
                best = Some((need, end));
            }
        }
        let (need, start, at) = match best {
            Some((need, end)) => (need, end, None),
            None => {
                let start = self.hole(own, kind)?;
                (own, start, Some(start))
            }
        };
        let mut pieces = Vec::new();
        let mut p = start;
        let end = start + need;
        while p < end {
            let piece = chunk.min(end - p);
            pieces.push(Grow { addr: p, len: piece });
            p += piece;
        }
        Some(GrowthPlan { pieces, at })
    }

    /// Unmapped space for `len` bytes: for large blocks the start of the
    /// lowest hole that holds them (so that they can later grow upwards),
    /// for small chunks the end of the highest hole (so that the two kinds
    /// stay apart), for huge blocks a window of their own in the upper
    /// half of a reservation (see [`Book::huge_hole`]), else as for large
    /// blocks.
    pub(super) fn hole(&self, len: usize, kind: Kind) -> Option<Addr> {
        if kind == Kind::Huge {
            if let Some(at) = self.huge_hole(len) {
                return Some(at);
            }
        }
        let mut holes = Vec::new();
        for (&base, &rlen) in &self.reserved {
            let mut at = base;
            for (&a, c) in self.chunks.range(base..base + rlen) {
                if a - at >= len {
                    holes.push((at, a));
                }
                at = a + c.len;
            }
            if base + rlen - at >= len {
                holes.push((at, base + rlen));
            }
        }
        match kind {
            Kind::Small => holes.last().map(|&(_, e)| e - len),
            Kind::Large | Kind::Huge => holes.first().map(|&(a, _)| a),
        }
    }

    /// Unmapped space for a huge block of `len` bytes, apart from the
    /// large chunks (which take the lowest holes) and from the small ones
    /// (the highest): from the middle of a reservation up, a quarter of
    /// `len` past the chunk before it, with as much unmapped after it, so
    /// that a free range of huge chunks that falls a little short of a
    /// huge block can be extended in place. `None`: no reservation has
    /// such room.
    fn huge_hole(&self, len: usize) -> Option<Addr> {
        let g = self.granule;
        let gap = round_up(len / 4, g)?;
        for (&base, &rlen) in &self.reserved {
            let mid = round_up(base + rlen / 2, g)?;
            // The chunks' (start, end), then the reservation's end.
            let spans = self
                .chunks
                .range(base..base + rlen)
                .map(|(&a, c)| (a, a + c.len))
                .chain(std::iter::once((base + rlen, base + rlen)));
            let mut at = base;
            for (a, next) in spans {
                // The unmapped space `[at, a)`.
                let start = if at > mid { at + gap } else { mid.max(at) };
                if a > start && a - start >= len.checked_add(gap)? {
                    return Some(start);
                }
                at = next;
            }
        }
        None
    }

    /// Where in the free range at `range` (of `range_len` bytes, at least
    /// `len`) a block of `len` bytes goes: its start, unless the block is
    /// of [`SPOT_MIN`] to [`SPOT_MAX`] bytes and its end (unless the range
    /// ends where the arena can grow) or the first chunk boundary within
    /// [`SPOT_GAP`] of its start touches fewer chunk bytes (the earlier of
    /// two such places on a tie).
    pub(crate) fn spot(&self, range: Addr, range_len: usize, len: usize) -> Addr {
        if !(SPOT_MIN..=SPOT_MAX).contains(&len) || range_len == len {
            return range;
        }
        let end = range + range_len;
        let touched = |at: Addr| self.touching(at, len).map(|(_, l)| l).sum::<usize>();
        let mut best = (touched(range), range);
        let boundary = self
            .chunks
            .range(range + 1..)
            .next()
            .map(|(&c, _)| c)
            .filter(|&c| c - range <= SPOT_GAP && c + len <= end);
        // Not at the end of a range that growth can extend: a block there
        // would keep the range from growing.
        let tail = (!self.unmapped(end, self.granule)).then_some(end - len);
        for at in boundary.into_iter().chain(tail) {
            let t = touched(at);
            if t < best.0 || (t == best.0 && at < best.1) {
                best = (t, at);
            }
        }
        best.1
    }
}
