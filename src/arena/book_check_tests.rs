//! The books' invariants, checked after every step of the arena's tests.

use super::book::{Addr, Book, Owner, ALIGN, NONE, SMALL_MAX};

impl Book {
    /// Free ranges and live blocks, for checks: every mapped byte is in
    /// exactly one of them, and the indexes agree.
    pub(crate) fn check(&self) {
        let mut covered: Vec<(Addr, usize, bool)> = self
            .free_ranges()
            .map(|(a, f)| (a, f.len, true))
            .chain(self.live.iter().map(|(&a, b)| (a, b.len, false)))
            .collect();
        covered.sort();
        let mut mapped: Vec<(Addr, usize)> = self.chunks().map(|(a, c)| (a, c.len)).collect();
        mapped.sort();
        // Merge adjacent chunks into runs and compare the coverage.
        let runs = |v: Vec<(Addr, usize)>| {
            let mut out: Vec<(Addr, usize)> = Vec::new();
            for (a, l) in v {
                match out.last_mut() {
                    Some(last) if last.0 + last.1 == a => last.1 += l,
                    Some(last) => {
                        assert!(last.0 + last.1 < a, "overlap at {a:#x}");
                        out.push((a, l));
                    }
                    None => out.push((a, l)),
                }
            }
            out
        };
        assert_eq!(
            runs(covered.iter().map(|&(a, l, _)| (a, l)).collect()),
            runs(mapped),
            "free and live ranges cover exactly the mapped chunks"
        );
        assert_eq!(self.fit.len(), self.free.len());
        let mut ranges = vec![0; self.slots.len()];
        let mut last_end = 0;
        for (a, f) in self.free_ranges() {
            // Keyed by their ends, the ranges are in address order and
            // disjoint; the index holds each under its owner.
            assert!(f.len > 0 && a >= last_end, "free ranges overlap at {a:#x}");
            last_end = a + f.len;
            assert!(self.fit.contains(f.kind, f.owner, f.len, a));
            assert!(a % ALIGN == 0 && f.len % ALIGN == 0);
            if let Owner::Stream(s) = f.owner {
                ranges[s as usize] += 1;
                assert!(
                    f.seq > self.slots[s as usize].done,
                    "a covered range is still owned"
                );
            }
            // Every byte of a free range lies in chunks of its kind.
            for (_, c) in self.chunks.range(..a + f.len).filter(|(&ca, c)| ca + c.len > a) {
                assert_eq!(c.kind, f.kind);
            }
            // No two neighbours that should have merged.
            if let Some(n) = self.free_at(a + f.len) {
                assert!(!Self::merges(&f, &n), "unmerged neighbours at {:#x}", a + f.len);
            }
        }
        for c in self.chunks.values() {
            if let Some((Owner::Stream(s), seq)) = c.ghost {
                ranges[s as usize] += 1;
                assert!(
                    seq > self.slots[s as usize].done,
                    "a covered ghost is still owned"
                );
            }
        }
        for (i, s) in self.slots.iter().enumerate() {
            assert_eq!(s.ranges, ranges[i]);
        }
        assert_eq!(
            self.free_bytes,
            self.free_ranges().map(|(_, f)| f.len).sum::<usize>()
        );
        let parked: usize = self.live.values().filter(|b| b.parked).map(|b| b.len).sum();
        assert_eq!(self.parked_bytes, parked);
        assert_eq!(self.parked_bytes, self.parked_of.iter().sum::<usize>());
        let mut count = 0;
        let mut large = 0;
        for (s, p) in self.parked.iter().enumerate() {
            let mut n = 0;
            for (&len, &head) in p {
                let mut a = head;
                assert_ne!(a, NONE, "no empty list is kept");
                while a != NONE {
                    let b = self.live[&a];
                    assert!(b.parked && b.len == len, "parked list and block agree");
                    n += len;
                    count += 1;
                    a = b.next;
                }
            }
            assert_eq!(n, self.parked_of[s]);
            // At most one large block parked in the arena, and it is known.
            for (&l, &head) in p.iter().filter(|(&l, _)| l > SMALL_MAX) {
                assert_eq!(
                    self.parked_large,
                    Some((s as u32, l)),
                    "a large block parked unbooked"
                );
                assert_eq!(self.live[&head].next, NONE, "one large block parked");
                large += 1;
            }
        }
        assert_eq!(large, usize::from(self.parked_large.is_some()));
        assert_eq!(count, self.parked_count);
        assert_eq!(count, self.live.values().filter(|b| b.parked).count());
        assert_eq!(
            self.live_bytes + parked,
            self.live.values().map(|b| b.len).sum::<usize>()
        );
        assert_eq!(
            self.mapped_bytes,
            self.chunks().map(|(_, c)| c.len).sum::<usize>()
        );
        assert_eq!(
            self.mapped_bytes,
            self.free_bytes + self.live_bytes + self.parked_bytes
        );
    }
}
