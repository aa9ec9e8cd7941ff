//! Growing the arena and giving memory back: every call of the arena to
//! the device's virtual memory (make, map with its access grants, unmap,
//! release, reserve), and what a refused call leaves in the books.
//!
//! It imports from `core` (the arena and its state) and the book; `core`
//! calls these methods but imports nothing from here.

use super::book::{round_up, Addr, Book, Chunk, Grow, Kind};
use super::core::{timed, Arena, State};
use super::phys::Phys;
use crate::error::{Error, Result};

/// A refused [`Arena::map_usable`]: why, and whether the range stayed
/// mapped (an access grant and then the unmap that should undo the map
/// were both refused).
pub(super) struct MapFailed {
    pub(super) error: Error,
    pub(super) stuck: bool,
}

impl<P: Phys> Arena<P> {
    /// Maps chunks so that `len` bytes of `kind` fit for `slot`; where the
    /// block goes when growth made it a window of its own (see
    /// [`GrowthPlan::at`](super::growth::GrowthPlan::at)).
    pub(super) fn grow(
        &self,
        state: &mut State<P::Fence>,
        len: usize,
        kind: Kind,
        slot: u32,
    ) -> Result<Option<Addr>> {
        let whole = self.opts.whole_blocks;
        let chunk = match kind {
            // A block in one chunk: the chunk is as large as the block.
            _ if whole => usize::MAX,
            Kind::Small => state.book.granule(),
            Kind::Large | Kind::Huge => self.opts.chunk_bytes.max(state.book.granule()),
        };
        let plan = match state
            .book
            .plan_growth(len, kind, slot, chunk, self.opts.min_grow, !whole)
        {
            Some(p) => p,
            None => {
                self.reserve_more(state, len)?;
                state
                    .book
                    .plan_growth(len, kind, slot, chunk, self.opts.min_grow, !whole)
                    .ok_or_else(|| Error::OutOfMemory {
                        requested: len,
                        stats: None,
                        arena: None,
                    })?
            }
        };
        let start = plan.pieces[0].addr;
        let end = plan.pieces.last().map_or(start, |g| g.addr + g.len);
        // Wholly free chunks elsewhere move into the window first (their
        // handles mapped there too): the arena grows its addresses, not
        // its memory. Larger ones first; none from the range it extends.
        // Only for a growth of at least `move_min` (64 MiB): a move leaves a
        // hole in the address space that no later block spans, and for
        // small growths those holes cost more than the moves save (on the
        // recorded steps of `benches/data` replayed eight times over:
        // ResNet-50 mapped 1.029 times its live peak moving for every
        // growth, 1.018 with this bound; GPT-2, whose large growths are
        // the 785 MiB logits, 1.023 either way, and 1.07 without moves).
        let mut at = start;
        if self.opts.moves && !whole && end - start >= self.opts.move_min {
            let mut movable = state.book.movable(slot, start);
            movable.sort_by_key(|(a, c)| (std::cmp::Reverse(c.len), *a));
            for (from, c) in movable {
                if c.len > end - at {
                    continue;
                }
                // SAFETY: the window is unmapped address space of a
                // reservation (the book's plan); `c.handle` is made and of
                // `c.len` bytes.
                match unsafe { self.map_usable(state, at, c.len, c.handle) } {
                    Ok(()) => {}
                    Err(MapFailed { stuck: false, .. }) => break,
                    Err(MapFailed { error, stuck: true }) => {
                        // The window is no longer unmapped: this growth
                        // stops (the handle stays with its chunk).
                        state.book.add_stuck(at, c.len, kind, c.handle);
                        return Err(error);
                    }
                }
                state.counters.moves += 1;
                state.book.move_chunk(from, at, kind, slot);
                at += c.len;
                if at == end {
                    break;
                }
            }
            if at < end && self.opts.stream_waits {
                at = self.move_handed_over(state, slot, kind, at, end)?;
            }
            self.unmap_ghosts(state);
        }
        if let Some(max) = self.opts.max_mapped {
            if state.book.mapped_bytes + (end - at) > max {
                return Err(Error::OutOfMemory {
                    requested: len,
                    stats: None,
                    arena: None,
                });
            }
        }
        // Chunks made for this growth: if a later one fails, they go back
        // to the device at once (nothing was handed out from them), so a
        // refused request holds no memory it did not hold before.
        let fresh = at;
        while at < end {
            let piece = chunk.min(end - at);
            if let Err(e) = self.map_chunk(state, Grow { addr: at, len: piece }, kind, slot) {
                self.unmap_fresh(state, fresh, at);
                return Err(e);
            }
            at += piece;
        }
        Ok(plan.at.filter(|_| !whole))
    }

    /// Unmaps and releases the chunks a failed growth mapped in
    /// `[from, to)`. A failed unmap keeps its chunk (free, in the books); a
    /// failed release keeps the handle for the next try.
    fn unmap_fresh(&self, state: &mut State<P::Fence>, from: Addr, to: Addr) {
        let made: Vec<(Addr, usize)> = state
            .book
            .chunks
            .range(from..to)
            .map(|(&a, c)| (a, c.len))
            .collect();
        for (addr, len) in made {
            // SAFETY: one mapping, made by this growth; nothing was handed
            // out from it (the lock is held), so no use of it exists.
            unsafe { self.drop_chunk(state, addr, len, Book::remove_unused_chunk) };
        }
    }

    /// Unmaps the chunk at `addr` (of `len` bytes), takes it out of the
    /// books with `take` and releases its handle (a failed release keeps
    /// the handle for the next try). `false`: the unmap failed, and the
    /// chunk stays as it was.
    ///
    /// # Safety
    /// The chunk is one mapping that no work in flight uses.
    unsafe fn drop_chunk(
        &self,
        state: &mut State<P::Fence>,
        addr: Addr,
        len: usize,
        take: fn(&mut Book, Addr) -> Chunk,
    ) -> bool {
        // SAFETY: the caller's guarantee.
        if timed(&mut state.counters, || unsafe { self.phys.unmap(addr, len) }).is_err() {
            return false;
        }
        state.counters.unmaps += 1;
        let c = take(&mut state.book, addr);
        // SAFETY: made by `create`, now unmapped (a handle still mapped at
        // a ghost's address is never taken: see `Book::idle_chunks`).
        unsafe { self.release_handle(state, c.handle, c.len) };
        true
    }

    /// Releases `handle` (of `len` bytes); a refused release keeps it for
    /// the next try.
    ///
    /// # Safety
    /// Made by `create`, released once, mapped nowhere.
    unsafe fn release_handle(&self, state: &mut State<P::Fence>, handle: u64, len: usize) {
        // SAFETY: the caller's guarantees.
        match timed(&mut state.counters, || unsafe { self.phys.release(handle) }) {
            Ok(()) => state.counters.releases += 1,
            Err(_) => state.unreleased.push((handle, len)),
        }
    }

    /// Maps `handle` (of `len` bytes) at `addr` and grants the arena's
    /// device and its peers access. A refused grant unmaps the range again;
    /// if that unmap is refused too, the range stays mapped and the failure
    /// says so (`stuck`). The caller then books the range
    /// ([`Book::add_stuck`]), so that nothing maps over it and its handle
    /// is not released while it is mapped there; a later
    /// [`unmap_ghosts`](Arena::unmap_ghosts) unmaps it.
    ///
    /// # Safety
    /// `[addr, addr + len)` lies in a reservation and is unmapped; `handle`
    /// is made, of `len` bytes.
    pub(super) unsafe fn map_usable(
        &self,
        state: &mut State<P::Fence>,
        addr: Addr,
        len: usize,
        handle: u64,
    ) -> std::result::Result<(), MapFailed> {
        let State { counters, peers, .. } = state;
        // SAFETY: the caller's guarantees.
        timed(counters, || unsafe { self.phys.map(addr, len, handle) })
            .map_err(|error| MapFailed { error, stuck: false })?;
        let granted = std::iter::once(self.phys.device())
            .chain(peers.iter().copied())
            // SAFETY: mapped just above.
            .try_for_each(|d| timed(counters, || unsafe { self.phys.grant(addr, len, d) }));
        let Err(error) = granted else {
            return Ok(());
        };
        // SAFETY: mapped above, never handed out.
        let stuck = timed(counters, || unsafe { self.phys.unmap(addr, len) }).is_err();
        Err(MapFailed { error, stuck })
    }

    /// Unmaps the ghosts whose frees are complete (a failure keeps one for
    /// the next try), and releases the handle of a stuck mapping that no
    /// chunk holds once its one mapping is gone.
    pub(super) fn unmap_ghosts(&self, state: &mut State<P::Fence>) {
        for (addr, len) in state.book.ghosts_done() {
            // SAFETY: one mapping of a moved chunk, or one left by a failed
            // map; every free of its bytes completed and nothing was handed
            // out from it since.
            if timed(&mut state.counters, || unsafe { self.phys.unmap(addr, len) }).is_err() {
                continue;
            }
            state.counters.unmaps += 1;
            let handle = state.book.remove_ghost(addr);
            if let Some(i) = state.orphans.iter().position(|&(h, _)| h == handle) {
                let (h, l) = state.orphans.swap_remove(i);
                // SAFETY: an orphan is mapped only at its stuck address,
                // unmapped just now.
                unsafe { self.release_handle(state, h, l) };
            }
        }
    }

    /// Makes and maps one chunk. On failure nothing is left behind, but
    /// for a mapping that could not be undone (see
    /// [`map_usable`](Arena::map_usable)): it is booked and its handle kept
    /// until a later unmap succeeds.
    fn map_chunk(&self, state: &mut State<P::Fence>, g: Grow, kind: Kind, slot: u32) -> Result<()> {
        let handle = timed(&mut state.counters, || self.phys.create(g.len))?;
        state.counters.creates += 1;
        // SAFETY: the book placed `g` in a reservation, over no chunk.
        match unsafe { self.map_usable(state, g.addr, g.len, handle) } {
            Ok(()) => {}
            Err(MapFailed { error, stuck: false }) => {
                // SAFETY: made above, mapped nowhere.
                unsafe { self.release_handle(state, handle, g.len) };
                return Err(error);
            }
            Err(MapFailed { error, stuck: true }) => {
                state.book.add_stuck(g.addr, g.len, kind, handle);
                state.orphans.push((handle, g.len));
                return Err(error);
            }
        }
        state.counters.maps += 1;
        state.book.add_chunk(g, kind, handle, slot);
        Ok(())
    }

    /// Reserves another address range of at least `len` bytes (as large as
    /// the first), up to the bound of the options.
    fn reserve_more(&self, state: &mut State<P::Fence>, len: usize) -> Result<()> {
        let g = state.book.granule();
        let first = state.book.reservations().next().map_or(0, |(_, l)| l);
        let want = round_up(len.max(first), g).unwrap_or(usize::MAX);
        let total = state.book.reserved_bytes();
        if total.saturating_add(want) > self.opts.max_reserved {
            return Err(Error::OutOfMemory {
                requested: len,
                stats: None,
                arena: None,
            });
        }
        let base = timed(&mut state.counters, || self.phys.reserve(want, g))?;
        state.book.add_reservation(base, want);
        Ok(())
    }

    /// Unmaps and releases idle chunks until at most `keep` idle bytes are
    /// left (largest chunks last, so small chunks go first). Returns the
    /// bytes given back. A failed unmap keeps the chunk; a failed release
    /// keeps the handle for the next try.
    pub(super) fn give_back(&self, state: &mut State<P::Fence>, keep: usize) -> usize {
        if self.opts.keep_chunks {
            return 0;
        }
        self.unmap_idle(state, keep)
    }

    /// [`give_back`](Arena::give_back) whatever the runtime's faults (at
    /// drop, where nothing else would ever free the chunks).
    pub(super) fn unmap_idle(&self, state: &mut State<P::Fence>, keep: usize) -> usize {
        for (h, l) in std::mem::take(&mut state.unreleased) {
            // SAFETY: unmapped, not released yet (a failure puts it back).
            unsafe { self.release_handle(state, h, l) };
        }
        let mut idle = state.book.idle_chunks();
        let mut left: usize = idle.iter().map(|(_, c)| c.len).sum();
        idle.sort_by_key(|(a, c)| (c.len, *a));
        let mut given = 0;
        for (addr, chunk) in idle {
            if left <= keep {
                break;
            }
            // SAFETY: one mapping; idle means every free in it completed
            // and nothing is live there.
            if unsafe { self.drop_chunk(state, addr, chunk.len, Book::remove_chunk) } {
                left -= chunk.len;
                given += chunk.len;
            }
        }
        given
    }

    /// Grants `peer` access to every chunk now and every chunk mapped later.
    pub(crate) fn grant(&self, peer: usize) -> Result<()> {
        let mut state = self.lock();
        if state.peers.contains(&peer) {
            return Ok(());
        }
        let chunks: Vec<_> = state.book.chunks().collect();
        for (a, c) in chunks {
            // SAFETY: a mapped chunk.
            timed(&mut state.counters, || unsafe { self.phys.grant(a, c.len, peer) })?;
        }
        state.peers.push(peer);
        Ok(())
    }
}
