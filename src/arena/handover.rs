//! Handing another stream's frees over by a device wait: a stream that
//! would otherwise grow the arena makes itself wait, on the device, for
//! the fence of a stream whose frees would hold its request, and takes
//! those frees as its own (see [`ArenaOptions::stream_waits`]).
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
