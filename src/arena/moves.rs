//! Moving wholly free chunks: growth maps a free chunk's memory where it
//! grows instead of making memory, and the old addresses (ghosts) are
//! unmapped once the frees they had are complete (see
//! [`Chunk::ghost`](super::book::Chunk::ghost)).

use super::book::{Addr, Book, Chunk, Free, Kind, Owner};

impl Book {
    /// Chunks wholly free for `slot` (their bytes `Any` or the slot's own
    /// frees), which growth may map at another address instead of making
    /// new memory; not those in the free range that ends at `keep_end` (the
    /// range growth extends).
    pub(crate) fn movable(&self, slot: u32, keep_end: Addr) -> Vec<(Addr, Chunk)> {
        self.whole_chunks_of(&[Owner::Any, Owner::Stream(slot)], |a, l| a + l != keep_end)
    }

    /// Chunks wholly inside free ranges of stream slot `other` freed up to
    /// its free number `upto` (for a hand-over by a device wait).
    pub(crate) fn movable_of(&self, other: u32, upto: u64) -> Vec<(Addr, Chunk)> {
        self.whole_chunks_of(&[Owner::Stream(other)], |a, _| {
            self.free_at(a).is_some_and(|f| f.seq <= upto)
        })
    }

    /// The chunks (not ghosts) wholly inside the free ranges of `owners`
    /// that `keep` (start, length) accepts.
    fn whole_chunks_of(&self, owners: &[Owner], keep: impl Fn(Addr, usize) -> bool) -> Vec<(Addr, Chunk)> {
        let g = self.granule;
        let mut out = Vec::new();
        for kind in [Kind::Small, Kind::Large, Kind::Huge] {
            for &owner in owners {
                for (l, a) in self.fit.at_least(kind, owner, g) {
                    if !keep(a, l) {
                        continue;
                    }
                    for (&ca, c) in self.chunks.range(a..a + l) {
                        if c.ghost.is_none() && ca + c.len <= a + l {
                            out.push((ca, *c));
                        }
                    }
                }
            }
        }
        out
    }

    /// Books the wholly free chunk at `from` (from [`movable`](Book::movable),
    /// or [`movable_of`](Book::movable_of) once the slot's stream waits for
    /// the other stream's fence)
    /// as mapped at `to` too (by the arena, just now) and as `kind` there:
    /// its bytes are free at `to`, for `slot`, and the chunk at
    /// `from` becomes a ghost. Returns whether the ghost may be unmapped at
    /// once (its frees were complete).
    pub(crate) fn move_chunk(&mut self, from: Addr, to: Addr, kind: Kind, slot: u32) -> bool {
        let c = self.chunks[&from];
        debug_assert!(c.ghost.is_none() && self.unmapped(to, c.len));
        let (start, f) = self
            .free_over(from)
            .expect("a movable chunk is covered by a free range"); // ok: `movable` returns only chunks inside a free range
        debug_assert!(start + f.len >= from + c.len);
        self.take_free(start);
        if start < from {
            self.insert_free(
                start,
                Free {
                    len: from - start,
                    ..f
                },
            );
        }
        if start + f.len > from + c.len {
            self.insert_free(
                from + c.len,
                Free {
                    len: start + f.len - from - c.len,
                    ..f
                },
            );
        }
        if let Owner::Stream(s) = f.owner {
            // The ghost is the slot's until its fence completes.
            self.slots[s as usize].ranges += 1;
        }
        self.chunks.get_mut(&from).expect("checked").ghost = Some((f.owner, f.seq)); // ok: `from` was read from `chunks` above
        *self.ghost_handles.entry(c.handle as usize).or_insert(0) += 1;
        self.chunks.insert(
            to,
            Chunk {
                len: c.len,
                kind,
                handle: c.handle,
                ghost: None,
            },
        );
        // Booked as the slot's at `to` (as fresh memory is, so that it
        // never joins another stream's neighbouring range): with the slot's
        // own last free in it, or as freed there just now if it was `Any` or
        // another stream's.
        let seq = match f.owner {
            Owner::Stream(s) if s == slot => f.seq,
            Owner::Stream(_) => {
                // Another stream's free, handed over by a device wait.
                let s = &mut self.slots[slot as usize];
                s.next += 1;
                s.next
            }
            Owner::Any => {
                let s = &mut self.slots[slot as usize];
                s.next += 1;
                s.next
            }
        };
        self.put_free(
            to,
            Free {
                len: c.len,
                kind,
                owner: Owner::Stream(slot),
                seq,
            },
        );
        f.owner == Owner::Any
    }

    /// Bytes mapped at ghosts' addresses.
    #[cfg(test)]
    pub(crate) fn ghost_bytes(&self) -> usize {
        self.chunks
            .values()
            .filter(|c| c.ghost.is_some())
            .map(|c| c.len)
            .sum()
    }

    /// Ghosts whose frees are complete: (address, length), for the arena to
    /// unmap.
    pub(crate) fn ghosts_done(&self) -> Vec<(Addr, usize)> {
        self.chunks
            .iter()
            .filter(|(_, c)| matches!(c.ghost, Some((Owner::Any, _))))
            .map(|(&a, c)| (a, c.len))
            .collect()
    }

    /// Books `[addr, addr + len)`, where `handle` stayed mapped after a map
    /// whose access grant and undoing unmap were both refused (see
    /// `Arena::map_usable`), as a ghost with nothing pending: nothing maps
    /// over it, the handle's chunk elsewhere (if it has one) is not given
    /// back while it stays, and the arena's next `unmap_ghosts` tries to
    /// unmap it.
    pub(crate) fn add_stuck(&mut self, addr: Addr, len: usize, kind: Kind, handle: u64) {
        debug_assert!(self.unmapped(addr, len));
        self.chunks.insert(
            addr,
            Chunk {
                len,
                kind,
                handle,
                ghost: Some((Owner::Any, 0)),
            },
        );
        *self.ghost_handles.entry(handle as usize).or_insert(0) += 1;
    }

    /// Forgets the ghost at `addr` (the arena unmapped it); its handle.
    pub(crate) fn remove_ghost(&mut self, addr: Addr) -> u64 {
        let c = self.chunks.remove(&addr).expect("a ghost"); // ok: `ghosts_done` lists only chunks of the map
        assert!(
            matches!(c.ghost, Some((Owner::Any, _))),
            "only a finished ghost goes"
        );
        let n = self.ghost_handles.get_mut(&(c.handle as usize)).expect("counted"); // ok: every ghost's handle is counted when it is made
        *n -= 1;
        if *n == 0 {
            self.ghost_handles.remove(&(c.handle as usize));
        }
        c.handle
    }
}
