//! Where the arena grows: the chunks to map for a block that no free
//! range holds, and the unmapped space they go to.

use super::book::{round_up, Addr, Book, Grow, Kind, Owner};

impl Book {
    /// Where to map chunks so that `len` bytes of `kind` fit for `slot`, at
    /// least `min` bytes in all, in pieces of at most `chunk` bytes (a
    /// multiple of the granule): the
    /// chunks to map, in address order. Extends a usable free range that
    /// ends at unmapped space when one does (mapping only what it lacks),
    /// else places the whole block in unmapped space (see [`Book::hole`]).
    /// `None`: no unmapped space can hold it.
    pub(crate) fn plan_growth(
        &self,
        len: usize,
        kind: Kind,
        slot: u32,
        chunk: usize,
        min: usize,
        extend: bool,
    ) -> Option<Vec<Grow>> {
        let g = self.granule;
        // At least `min` bytes (a multiple of the granule) are mapped.
        let min = round_up(min.max(g), g)?;
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
            if self.unmapped(end, need) && best.is_none_or(|b| need < b.0) {
                best = Some((need, end));
            }
        }
        let (need, start) = match best {
            Some(b) => b,
            None => {
                let need = round_up(len, g)?.max(min);
                (need, self.hole(need, kind)?)
            }
        };
        let mut out = Vec::new();
        let mut at = start;
        let end = start + need;
        while at < end {
            let piece = chunk.min(end - at);
            out.push(Grow { addr: at, len: piece });
            at += piece;
        }
        Some(out)
    }

    /// Unmapped space for `len` bytes: for large blocks the start of the
    /// lowest hole that holds them (so that they can later grow upwards),
    /// for small chunks the end of the highest hole (so that the two kinds
    /// stay apart).
    pub(super) fn hole(&self, len: usize, kind: Kind) -> Option<Addr> {
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
            Kind::Large => holes.first().map(|&(a, _)| a),
        }
    }
}
