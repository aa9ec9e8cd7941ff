//! The free ranges' two structures, and the operations that keep them in
//! step.
//!
//! * `Book::free` holds the free ranges in address order, keyed by their
//!   **end**: a block handed out from the start of a range (what best fit
//!   does) and a block freed just before a range (merging into it) both
//!   leave the range's end where it was, so the range is updated in place
//!   instead of being taken out and put back under a new key.
//! * [`Fit`] is the best-fit index: for each kind, the `Any` ranges and
//!   each stream slot's apart, as keys that pack the length and the start
//!   into one integer (length first), so that the first key at or above
//!   `(len, 0)` is the shortest range that holds `len` bytes, the lowest
//!   such on a tie. One integer compares in two instructions, and a query
//!   reads only the ranges of the owners that may use them. The keys are
//!   further split by size class (eight a doubling, see [`class`]), one
//!   small ordered set a class with a bitmap of the classes that hold any:
//!   updates touch a small set, and a query reads its own class, then at
//!   most the first key of the next class held. The order, and so the
//!   block each query picks, is that of one set of all the keys.

use std::collections::BTreeSet;

use super::book::{Addr, Book, Free, Kind, Owner, ALIGN};

/// A free range as `Book::free` stores it (under its end), in 24 bytes:
/// its kind and owner packed in one word (moving the map's values is much
/// of the cost of its updates).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) start: Addr,
    pub(super) seq: u64,
    /// The owner's slot in the low 32 bits, [`STREAM`] for a stream's
    /// range, [`LARGE`] for a large one.
    who: u64,
}

const STREAM: u64 = 1 << 32;
const LARGE: u64 = 1 << 33;
const HUGE: u64 = 1 << 34;

impl Span {
    pub(super) fn new(start: Addr, kind: Kind, owner: Owner, seq: u64) -> Span {
        let mut who = match owner {
            Owner::Any => 0,
            Owner::Stream(s) => STREAM | s as u64,
        };
        match kind {
            Kind::Small => {}
            Kind::Large => who |= LARGE,
            Kind::Huge => who |= HUGE,
        }
        Span { start, seq, who }
    }

    pub(super) fn kind(&self) -> Kind {
        if self.who & HUGE != 0 {
            Kind::Huge
        } else if self.who & LARGE != 0 {
            Kind::Large
        } else {
            Kind::Small
        }
    }

    pub(super) fn owner(&self) -> Owner {
        if self.who & STREAM != 0 {
            Owner::Stream(self.who as u32)
        } else {
            Owner::Any
        }
    }

    /// The range, owned by `owner` since its last free `seq`.
    pub(super) fn set_owner(&mut self, owner: Owner, seq: u64) {
        *self = Span::new(self.start, self.kind(), owner, seq);
    }

    /// The range as a [`Free`], given its end (the map's key).
    pub(super) fn free(&self, end: Addr) -> Free {
        Free {
            len: end - self.start,
            kind: self.kind(),
            owner: self.owner(),
            seq: self.seq,
        }
    }
}

/// The best-fit key of a range: its length, then its start.
fn key(len: usize, start: Addr) -> u128 {
    ((len as u128) << 64) | start as u128
}

/// A key's (length, start).
fn unkey(k: u128) -> (usize, Addr) {
    ((k >> 64) as usize, k as u64 as usize)
}

fn k(kind: Kind) -> usize {
    match kind {
        Kind::Small => 0,
        Kind::Large => 1,
        Kind::Huge => 2,
    }
}

/// Size classes per doubling of the length, as a power of two.
const SUB: u32 = 3;

/// Size classes in all: lengths are below 2^64, so counted in units of
/// [`ALIGN`] (2^9 bytes) below 2^55.
const CLASSES: usize = (((usize::BITS - 9 - 1 - SUB + 1) as usize) << SUB) + (1 << SUB);

/// The size class of a length: below 8 units of [`ALIGN`] bytes one class
/// per unit, above it 8 classes per doubling. Longer lengths are never in
/// a lower class, so the classes in order hold the keys in order.
fn class(len: usize) -> usize {
    let n = len / ALIGN;
    if n < 1 << SUB {
        return n;
    }
    let b = n.ilog2();
    (((b - SUB + 1) as usize) << SUB) | ((n >> (b - SUB)) & ((1 << SUB) - 1))
}

/// The ranges of one kind and owner, by size class: one ordered set of
/// keys per class, and which classes hold any. Each set stays small, so
/// its updates are short; a query reads its own class and then the first
/// class above that holds a range.
#[derive(Debug, Default)]
struct Classes {
    /// Made on first use (most owners hold ranges of few classes).
    sets: Vec<BTreeSet<u128>>,
    held: [u64; CLASSES.div_ceil(64)],
    /// Ranges held, in all.
    count: usize,
}

impl Classes {
    fn insert(&mut self, len: usize, start: Addr) {
        if self.sets.is_empty() {
            self.sets.resize_with(CLASSES, BTreeSet::new);
        }
        let c = class(len);
        let new = self.sets[c].insert(key(len, start));
        debug_assert!(new);
        self.held[c / 64] |= 1 << (c % 64);
        self.count += 1;
    }

    fn remove(&mut self, len: usize, start: Addr) {
        let c = class(len);
        let set = &mut self.sets[c];
        let was = set.remove(&key(len, start));
        debug_assert!(was);
        if set.is_empty() {
            self.held[c / 64] &= !(1 << (c % 64));
        }
        self.count -= 1;
    }

    /// The first class from `c` on that holds a range.
    fn held_from(&self, c: usize) -> Option<usize> {
        let mut w = c / 64;
        let mut bits = *self.held.get(w)? & (!0u64 << (c % 64));
        loop {
            if bits != 0 {
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
            w += 1;
            bits = *self.held.get(w)?;
        }
    }

    /// The classes that hold ranges, from `c` on.
    fn held_classes(&self, c: usize) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(self.held_from(c), |&c| self.held_from(c + 1))
    }

    /// The key of the shortest range (lowest on a tie) that holds `len`
    /// bytes, 0 for none (no range is empty). A bare integer, returned in
    /// registers: this is every allocation's query.
    #[inline]
    fn best(&self, len: usize) -> u128 {
        if self.count == 0 {
            return 0;
        }
        let Some(c) = self.held_from(class(len)) else {
            return 0;
        };
        let want = key(len, 0);
        let set = &self.sets[c];
        // The class's first range when it holds the request (always so
        // above the request's own class); else the first that does, or
        // the first range of the next class holding any.
        let first = set.first().copied().unwrap_or(0);
        if first >= want {
            return first;
        }
        if let Some(&k) = set.range(want..).next() {
            return k;
        }
        self.held_from(c + 1)
            .and_then(|c| self.sets[c].first().copied())
            .unwrap_or(0)
    }

    fn at_least(&self, len: usize) -> impl Iterator<Item = (usize, Addr)> + '_ {
        self.held_classes(class(len))
            .flat_map(move |c| self.sets[c].range(key(len, 0)..))
            .map(|&k| unkey(k))
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        let n = self.sets.iter().map(BTreeSet::len).sum();
        assert_eq!(n, self.count, "the count agrees with the sets");
        n
    }

    #[cfg(test)]
    fn contains(&self, len: usize, start: Addr) -> bool {
        let c = class(len);
        let held = self.held[c / 64] & (1 << (c % 64)) != 0;
        self.sets.get(c).is_some_and(|s| s.contains(&key(len, start))) && held
    }
}

/// The best-fit index (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Fit {
    any: [Classes; 3],
    slots: Vec<[Classes; 3]>,
}

impl Fit {
    fn set(&self, kind: Kind, owner: Owner) -> Option<&Classes> {
        match owner {
            Owner::Any => Some(&self.any[k(kind)]),
            Owner::Stream(s) => self.slots.get(s as usize).map(|x| &x[k(kind)]),
        }
    }

    fn set_mut(&mut self, kind: Kind, owner: Owner) -> &mut Classes {
        match owner {
            Owner::Any => &mut self.any[k(kind)],
            Owner::Stream(s) => {
                let s = s as usize;
                if s >= self.slots.len() {
                    self.slots.resize_with(s + 1, Default::default);
                }
                &mut self.slots[s][k(kind)]
            }
        }
    }

    pub(super) fn insert(&mut self, kind: Kind, owner: Owner, len: usize, start: Addr) {
        self.set_mut(kind, owner).insert(len, start);
    }

    pub(super) fn remove(&mut self, kind: Kind, owner: Owner, len: usize, start: Addr) {
        self.set_mut(kind, owner).remove(len, start);
    }

    /// The ranges of `kind` and `owner` of at least `len` bytes, shortest
    /// first, lowest first on a tie: (length, start).
    pub(super) fn at_least(
        &self,
        kind: Kind,
        owner: Owner,
        len: usize,
    ) -> impl Iterator<Item = (usize, Addr)> + '_ {
        self.set(kind, owner)
            .into_iter()
            .flat_map(move |s| s.at_least(len))
    }

    /// The key of the shortest (lowest on a tie) range of `kind` and
    /// `owner` that holds `len` bytes, 0 for none.
    #[inline]
    fn best(&self, kind: Kind, owner: Owner, len: usize) -> u128 {
        self.set(kind, owner).map_or(0, |s| s.best(len))
    }

    /// How many ranges the index holds (for checks).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        let sets = self.any.iter().chain(self.slots.iter().flatten());
        sets.map(Classes::len).sum()
    }

    /// Whether the index holds the range (for checks).
    #[cfg(test)]
    pub(super) fn contains(&self, kind: Kind, owner: Owner, len: usize, start: Addr) -> bool {
        self.set(kind, owner).is_some_and(|s| s.contains(len, start))
    }
}

impl Book {
    /// The free ranges in address order: (start, range).
    pub(super) fn free_ranges(&self) -> impl Iterator<Item = (Addr, Free)> + '_ {
        self.free.iter().map(|(&end, s)| (s.start, s.free(end)))
    }

    /// The free range that starts at `start`.
    pub(super) fn free_at(&self, start: Addr) -> Option<Free> {
        let (&end, s) = self.free.range(start + 1..).next()?;
        (s.start == start).then(|| s.free(end))
    }

    /// The free range that holds the byte at `addr`: (start, range).
    pub(super) fn free_over(&self, addr: Addr) -> Option<(Addr, Free)> {
        let (&end, s) = self.free.range(addr + 1..).next()?;
        (s.start <= addr).then(|| (s.start, s.free(end)))
    }

    /// The free ranges that start in `[from, to)`, in address order.
    pub(super) fn free_in(&self, from: Addr, to: Addr) -> impl Iterator<Item = (Addr, Free)> + '_ {
        self.free
            .range(from + 1..)
            .take_while(move |(_, s)| s.start < to)
            .filter(move |(_, s)| s.start >= from)
            .map(|(&end, s)| (s.start, s.free(end)))
    }

    /// Counts a range of `owner` in or out of its slot's ranges.
    fn count(&mut self, owner: Owner, add: bool) {
        if let Owner::Stream(s) = owner {
            let r = &mut self.slots[s as usize].ranges;
            if add {
                *r += 1;
            } else {
                *r -= 1;
            }
        }
    }

    pub(super) fn insert_free(&mut self, addr: Addr, f: Free) {
        debug_assert!(f.len > 0);
        self.fit.insert(f.kind, f.owner, f.len, addr);
        self.count(f.owner, true);
        self.free_bytes += f.len;
        let old = self
            .free
            .insert(addr + f.len, Span::new(addr, f.kind, f.owner, f.seq));
        debug_assert!(old.is_none());
    }

    /// Takes out the free range that ends at `end`: (start, range).
    fn take_span(&mut self, end: Addr) -> (Addr, Free) {
        let s = self.free.remove(&end).expect("a free range ends here"); // ok: callers pass an end read from `free`
        let f = s.free(end);
        self.fit.remove(f.kind, f.owner, f.len, s.start);
        self.count(f.owner, false);
        self.free_bytes -= f.len;
        (s.start, f)
    }

    /// Takes out the free range that starts at `addr`.
    pub(super) fn take_free(&mut self, addr: Addr) -> Free {
        let f = self.free_at(addr).expect("a free range starts here"); // ok: callers pass a start from `free` or the index, which agree
        self.take_span(addr + f.len).1
    }

    /// Whether two adjacent free ranges merge.
    pub(super) fn merges(a: &Free, b: &Free) -> bool {
        a.kind == b.kind && (a.owner == b.owner || a.owner == Owner::Any || b.owner == Owner::Any)
    }

    /// `a` and `b` merged (see [`merges`](Book::merges)): the owner that is a
    /// stream, the later free.
    pub(super) fn merged(a: Free, b: Free) -> Free {
        let owner = if a.owner == Owner::Any { b.owner } else { a.owner };
        Free {
            len: a.len + b.len,
            kind: a.kind,
            owner,
            seq: a.seq.max(b.seq),
        }
    }

    /// Books `[addr, addr + f.len)` as free, merged with its neighbours
    /// (the one before first).
    pub(super) fn put_free(&mut self, addr: Addr, f: Free) {
        let end = addr + f.len;
        // One search finds both neighbours: the first range that ends at or
        // after `addr` is the one before if it ends at `addr`, and the one
        // after it is then the next.
        let mut near = self.free.range_mut(addr..);
        let mut next = near.next();
        let mut before = None;
        if let Some((&e, p)) = &next {
            if e == addr {
                let pf = p.free(e);
                if Self::merges(&pf, &f) {
                    before = Some((p.start, pf));
                }
                next = near.next();
            }
        }
        let (start, m) = match before {
            Some((p, pf)) => (p, Self::merged(pf, f)),
            None => (addr, f),
        };
        if let Some((&nend, n)) = next.filter(|(_, n)| n.start == end) {
            let nf = n.free(nend);
            if Self::merges(&m, &nf) {
                // Merged into the next range in place: its end stays.
                let all = Self::merged(m, nf);
                n.start = start;
                n.set_owner(all.owner, all.seq);
                self.fit.remove(nf.kind, nf.owner, nf.len, end);
                self.fit.insert(all.kind, all.owner, all.len, start);
                self.free_bytes += all.len - nf.len;
                if nf.owner != all.owner {
                    self.count(nf.owner, false);
                    self.count(all.owner, true);
                }
                if before.is_some() {
                    self.take_span(addr);
                }
                return;
            }
        }
        if before.is_some() {
            self.take_span(addr);
        }
        self.insert_free(start, m);
    }

    /// The best fit for `len` bytes of `kind` that `slot` may use now: the
    /// shortest range (of its own or `Any`) that holds it, as (start,
    /// length); the slot's own on a tie of lengths, else the lowest.
    pub(crate) fn find(&self, len: usize, kind: Kind, slot: u32) -> Option<(Addr, usize)> {
        let own = self.fit.best(kind, Owner::Stream(slot), len);
        let any = self.fit.best(kind, Owner::Any, len);
        // Keys order by length first: `Any` only when strictly shorter.
        let k = if own == 0 || (any != 0 && any >> 64 < own >> 64) {
            any
        } else {
            own
        };
        if k == 0 {
            return None;
        }
        let (l, a) = unkey(k);
        Some((a, l))
    }

    /// The best fit for `len` bytes of `kind` that `slot` may use now and
    /// that lies within one chunk (one physical allocation): the free range
    /// and the address in it, trying ranges from the shortest up.
    pub(crate) fn find_whole(&self, len: usize, kind: Kind, slot: u32) -> Option<(Addr, Addr)> {
        let mut best: Option<(usize, Addr, Addr)> = None;
        for owner in [Owner::Stream(slot), Owner::Any] {
            for (l, a) in self.fit.at_least(kind, owner, len) {
                if best.is_some_and(|b| b.0 <= l) {
                    break;
                }
                let from = self.chunks.range(..=a).next_back().map_or(a, |(&c, _)| c);
                let fits = self.chunks.range(from..a + l).find_map(|(&c, ch)| {
                    let start = c.max(a);
                    let end = (c + ch.len).min(a + l);
                    (ch.ghost.is_none() && end >= start + len).then_some(start)
                });
                if let Some(at) = fits {
                    best = Some((l, a, at));
                    break;
                }
            }
        }
        best.map(|(_, a, at)| (a, at))
    }

    /// Hands out `len` bytes from the start of the free range at `addr` of
    /// `range_len` bytes (from [`find`](Book::find)); the rest stays free
    /// as it was, under the same end.
    pub(crate) fn take(&mut self, addr: Addr, range_len: usize, len: usize) {
        if range_len == len {
            let (_, f) = self.take_span(addr + len);
            self.hand_out(addr, len, f.kind);
            return;
        }
        assert!(range_len > len);
        let s = self
            .free
            .get_mut(&(addr + range_len))
            .expect("a free range ends here"); // ok: `find` read the range from the index, which agrees with `free`
        debug_assert_eq!(s.start, addr);
        s.start = addr + len;
        let (kind, owner) = (s.kind(), s.owner());
        self.fit.remove(kind, owner, range_len, addr);
        self.fit.insert(kind, owner, range_len - len, addr + len);
        self.free_bytes -= len;
        self.hand_out(addr, len, kind);
    }

    /// Hands out `[at, at + len)` from the free range at `range` (from
    /// [`find_whole`](Book::find_whole)); what is left on either side stays
    /// free as it was.
    pub(crate) fn take_at(&mut self, range: Addr, at: Addr, len: usize) {
        let f = self.take_free(range);
        assert!(at >= range && at + len <= range + f.len);
        if at > range {
            self.insert_free(range, Free { len: at - range, ..f });
        }
        let end = range + f.len;
        if end > at + len {
            self.insert_free(
                at + len,
                Free {
                    len: end - at - len,
                    ..f
                },
            );
        }
        self.hand_out(at, len, f.kind);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_keep_the_order_of_lengths() {
        let mut last = 0;
        for n in (0..1 << 16).chain((16..55).flat_map(|b| [(1usize << b) - 1, 1 << b, (1 << b) + 1])) {
            let c = class(n * ALIGN);
            assert!(c >= last, "class of {n} units");
            assert!(c < CLASSES);
            last = c;
        }
        assert_eq!(class(usize::MAX / ALIGN * ALIGN), CLASSES - 1);
        // Eight classes per doubling.
        assert_eq!(class(1 << 30) + 8, class(1 << 31));
    }
}
