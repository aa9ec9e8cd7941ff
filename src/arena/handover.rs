//! Handing another stream's frees over by a device wait: a stream that
//! would otherwise grow the arena makes itself wait, on the device, for
//! the fence of a stream whose frees would hold its request, and takes
//! those frees as its own (see [`ArenaOptions::stream_waits`]). Two ways:
//!
//! * **In place** ([`Arena::hand_over`]): a window of adjacent free ranges,
//!   some of them the other stream's, holds the request.
//! * **By moving** ([`Arena::move_handed_over`]): for a growth of 64 MiB or
//!   more that the growing stream's own and `Any` chunks do not cover, the
//!   other stream's frees are scattered among live blocks, so no window
//!   holds the request, but whole chunks of them do: after the wait those
//!   chunks are mapped where the arena grows, as a move of the growing
//!   stream's own chunks is (the old addresses are unmapped once the other
//!   stream's fence completes). A stream whose work runs behind the
//!   other's holds its frees pending for long; without this, each of the
//!   other stream's large growths made memory while that much lay free,
//!   and the arena's peak drifted upwards from step to step.
//!
//! Why it is sound: a range freed on stream S, with S's free counter `seq`
//! at or below the fence's `upto`, had its last use enqueued on S before
//! the fence was recorded. Once stream T waits on that fence, everything T
//! enqueues afterwards runs after that use, exactly as if T had freed the
//! range itself; so the range becomes T's (with a fresh `seq` of T's).
//! Any third stream must then wait for T's fence, recorded after T's wait,
//! whose completion implies the S fence's.
//!
//! [`ArenaOptions::stream_waits`]: super::ArenaOptions::stream_waits

use super::book::{Addr, Book, Free, Kind, Owner};
use super::core::{two, Arena, State};
use super::mapping::MapFailed;
use super::phys::Phys;
use crate::error::Result;

impl Book {
    /// Where `len` bytes of `kind` would fit for `slot` if some of
    /// `other`'s frees up to its free number `upto` were `slot`'s own: the
    /// start of the shortest window of adjacent free ranges, each `Any`,
    /// the slot's or such a free of `other`, that holds `len` bytes (best
    /// fit, so that `other` gives up no more than the request needs).
    pub(crate) fn window_with(
        &self,
        len: usize,
        kind: Kind,
        slot: u32,
        other: u32,
        upto: u64,
    ) -> Option<Addr> {
        let usable = |f: &Free| {
            f.kind == kind
                && match f.owner {
                    Owner::Any => true,
                    Owner::Stream(s) => s == slot || (s == other && f.seq <= upto),
                }
        };
        // (window length, start) of the best window so far.
        let mut best: Option<(usize, Addr)> = None;
        // The starts of the current run of adjacent usable ranges, the
        // run's end, and the first range of the shortest window ending at
        // the run's end.
        let mut run: Vec<Addr> = Vec::new();
        let mut run_end = 0;
        let mut first = 0;
        for (a, f) in self.free_ranges() {
            if !usable(&f) {
                run.clear();
                continue;
            }
            if run_end != a {
                run.clear();
            }
            if run.is_empty() {
                first = 0;
            }
            run.push(a);
            run_end = a + f.len;
            while first + 1 < run.len() && run_end - run[first + 1] >= len {
                first += 1;
            }
            let window = run_end - run[first];
            if window >= len && best.is_none_or(|(w, _)| window < w) {
                best = Some((window, run[first]));
            }
        }
        best.map(|(_, start)| start)
    }

    /// Hands `[start, start + len)` (the start of a window from
    /// [`window_with`](Book::window_with)) out to `slot`: the bytes of it
    /// that `other` freed (up to `upto`) become `slot`'s first, the rest of
    /// those ranges staying `other`'s. The caller made `slot`'s stream wait
    /// for the fence that covers them. Returns the bytes handed over.
    pub(crate) fn adopt_and_take(
        &mut self,
        other: u32,
        upto: u64,
        slot: u32,
        start: Addr,
        len: usize,
    ) -> usize {
        debug_assert_ne!(other, slot);
        let end = start + len;
        let taken: Vec<Addr> = self
            .free_in(start, end)
            .filter(|(_, f)| f.owner == Owner::Stream(other) && f.seq <= upto)
            .map(|(a, _)| a)
            .collect();
        let s = &mut self.slots[slot as usize];
        s.next += 1;
        let seq = s.next;
        let mut bytes = 0;
        for a in taken {
            let f = self.take_free(a);
            let inside = f.len.min(end - a);
            if inside < f.len {
                self.insert_free(
                    a + inside,
                    Free {
                        len: f.len - inside,
                        ..f
                    },
                );
            }
            bytes += inside;
            self.put_free(
                a,
                Free {
                    len: inside,
                    owner: Owner::Stream(slot),
                    seq,
                    ..f
                },
            );
        }
        // The window's first `len` bytes are now one range, the slot's.
        let (range, f) = self.free_over(start).expect("the window starts in a free range"); // ok: `window_with` returns windows of free ranges, merged just above
        assert!(range + f.len >= end && f.owner == Owner::Stream(slot));
        self.take_at(range, start, len);
        bytes
    }
}

impl<P: Phys> Arena<P> {
    /// Before growing: another stream's frees that would hold the request,
    /// taken by making `slot`'s stream wait on the device for a fence that
    /// covers them, the pending one or, failing that, one recorded now
    /// (see `handover.rs`). `None`: no such frees, the option is off, or
    /// the wait could not be made (a capturing stream refuses it).
    pub(super) fn hand_over(
        &self,
        state: &mut State<P::Fence>,
        len: usize,
        kind: Kind,
        slot: u32,
    ) -> Option<Addr> {
        if !self.opts.stream_waits || self.opts.whole_blocks {
            return None;
        }
        let State {
            book,
            entries,
            counters,
            ..
        } = state;
        // First the frees a pending fence covers (recorded earlier: the
        // wait is likely short); then all of a stream's frees, under a
        // fence recorded now at the end of its queue.
        for fresh in [false, true] {
            for s in 0..entries.len() as u32 {
                if s == slot || !book.waiting(s) {
                    continue;
                }
                let Some(e) = entries[s as usize].as_ref() else {
                    continue;
                };
                let upto = match (fresh, e.pending) {
                    (false, Some(upto)) if e.fence.is_some() => upto,
                    (true, _) => book.frees(s),
                    _ => continue,
                };
                let Some(start) = book.window_with(len, kind, slot, s, upto) else {
                    continue;
                };
                let (me, other) = two(entries, slot, s);
                let fence = if fresh {
                    // Never a record on a capturing stream (it would be a
                    // node of the graph).
                    if !matches!(other.stream.capturing(), Ok(None)) {
                        continue;
                    }
                    match self.record_fence(&mut other.handoff, &other.stream) {
                        Ok(f) => {
                            counters.fences += 1;
                            f
                        }
                        Err(_) => continue,
                    }
                } else {
                    other.fence.as_ref().expect("checked above") // ok: the first pass takes only entries with a fence
                };
                if self.phys.wait_on(&me.stream, fence).is_err() {
                    return None;
                }
                counters.handovers += 1;
                book.adopt_and_take(s, upto, slot, start, len);
                return Some(start);
            }
        }
        None
    }

    /// Growth's second source of moved chunks (see the module docs): whole
    /// chunks of another stream's frees, taken by making `slot`'s stream
    /// wait on the device for a fence recorded now at the end of that
    /// stream's queue (covering every free it made), and mapped into
    /// `[at, end)`, larger ones first. Returns where the window's unmapped
    /// part now begins. A refused record or wait takes nothing from that
    /// stream; a refused map stops the moves (growth makes the rest); a map
    /// that stayed although refused (see `Arena::map_usable`) is booked
    /// and stops the growth with its error.
    pub(super) fn move_handed_over(
        &self,
        state: &mut State<P::Fence>,
        slot: u32,
        kind: Kind,
        mut at: Addr,
        end: Addr,
    ) -> Result<Addr> {
        for s in 0..state.entries.len() as u32 {
            if s == slot || !state.book.waiting(s) || at == end {
                continue;
            }
            let upto = state.book.frees(s);
            let mut chunks = state.book.movable_of(s, upto);
            chunks.retain(|(_, c)| c.len <= end - at);
            if chunks.is_empty() {
                continue;
            }
            chunks.sort_by_key(|(a, c)| (std::cmp::Reverse(c.len), *a));
            let State {
                entries, counters, ..
            } = &mut *state;
            let (me, other) = two(entries, slot, s);
            if !matches!(other.stream.capturing(), Ok(None)) {
                continue;
            }
            let Ok(f) = self.record_fence(&mut other.handoff, &other.stream) else {
                continue;
            };
            counters.fences += 1;
            if self.phys.wait_on(&me.stream, f).is_err() {
                return Ok(at);
            }
            counters.handovers += 1;
            for (from, c) in chunks {
                if c.len > end - at {
                    continue;
                }
                // SAFETY: as for the moves of `grow`.
                match unsafe { self.map_usable(state, at, c.len, c.handle) } {
                    Ok(()) => {}
                    Err(MapFailed { stuck: false, .. }) => return Ok(at),
                    Err(MapFailed { error, stuck: true }) => {
                        state.book.add_stuck(at, c.len, kind, c.handle);
                        return Err(error);
                    }
                }
                state.counters.moves += 1;
                state.counters.moved_over += 1;
                state.book.move_chunk(from, at, kind, slot);
                at += c.len;
                if at == end {
                    break;
                }
            }
        }
        Ok(at)
    }
}
