//! The arena's books: which address ranges are mapped (chunks), which of
//! their bytes are live, which are free and who may reuse them without
//! waiting. No runtime call happens here: the arena asks the book for a
//! plan (where to grow, which chunk to give back), makes the calls, and
//! tells the book what succeeded. A failed call therefore changes nothing
//! here.
//!
//! # Free ranges and stream order
//!
//! A free range belongs to an [`Owner`]:
//!
//! * `Owner::Stream(s)`: freed on stream slot `s` (with the slot's free
//!   counter `seq` at the free). Work on `s` after the free is ordered after
//!   every use, so `s` reuses it at once. Any other stream must wait until
//!   the slot's `done` counter (the frees a completed fence covers) reaches
//!   `seq`.
//! * `Owner::Any`: every use has completed on the device: any stream may
//!   reuse it, and a chunk wholly of such ranges may be unmapped.
//!
//! Adjacent free ranges of the same kind merge unless they belong to two
//! different streams. A range merged from a stream's range and an `Any`
//! range is the stream's (with the stream range's `seq`): the `Any` part
//! then waits for the stream's fence too, which is only more careful, and
//! a stream's frees coalesce with fresh memory at once (a program with one
//! stream never waits for a fence to coalesce). When a fence completes,
//! its slot's covered ranges turn `Any` and merge with their neighbours.
//!
//! # Parked blocks
//!
//! A block freed on a stream may first be *parked*: kept whole, for the
//! next allocation of exactly its length on the same stream (a hit costs
//! two hash lookups, no merging). Parked blocks are flushed into the free
//! ranges (merging) before the arena grows, waits or gives memory back, so
//! they never make it map more. Blocks of up to 1 MiB park (up to 256 MiB a
//! stream); of larger ones, only one of at least 32 MiB in the arena, freed
//! into the ranges at the next allocation of any stream unless that
//! allocation takes it (same stream, same length): the same block freed
//! and made again in a row (a step's logits, say) keeps its place, and no
//! other stream ever finds it missing. Parking every
//! large block mapped 1.024 times the live peak on ResNet-50's recorded
//! steps (1.013 without); from 32 MiB up the recorded programs' peaks are
//! those of no large parking, and GPT-2's later passes map less.
//!
//! # Kinds
//!
//! Blocks of at most [`SMALL_MAX`] bytes live in `Small` chunks, blocks of
//! [`HUGE_MIN`] bytes or more (a language model's logits) in `Huge` chunks,
//! the others in `Large` chunks; a chunk keeps its kind while mapped, and
//! free ranges of different kinds never merge. So small blocks, which live
//! long and scattered (biases, norms, scalars), never split the large free
//! ranges that activations need; and activations never take the windows
//! that huge blocks leave free between steps. (With one kind for both, the
//! shortest free range that held an activation was often such a window: the
//! next step's huge block found none, and growth moved chunks to make one,
//! step after step.) A large block goes into a free range of huge chunks
//! only when nothing else holds it and the arena would otherwise grow, at
//! the end of that range (see `Arena::spill`). On the recorded steps of
//! `benches/data` replayed eight times over, the arena then makes no
//! virtual-memory call after the third pass on any of them (the two-stream
//! mix made 44 to 397 a pass, GPT-2 up to 119), and maps 1.014, 1.023 and
//! 1.024 times the live peak (ResNet-50, GPT-2, the mix; 1.014, 1.026 and
//! 1.048 with two kinds).

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};

use super::index::{Fit, Span};
use crate::cache::BuildAddrHasher;

/// Maps keyed by addresses and lengths (multiples of 512).
type Map<V> = HashMap<usize, V, BuildAddrHasher>;

/// A device address, as an integer (never dereferenced).
pub(crate) type Addr = usize;

/// Blocks of at most this many bytes are small (placed in small chunks).
pub(crate) const SMALL_MAX: usize = 1 << 20;

/// Blocks of at least this many bytes are huge (placed in huge chunks, see
/// the module docs). On the recorded programs of `benches/data` any bound
/// from 512 to 700 MiB gives the same figures; from 392 MiB down GPT-2's
/// 392 MiB blocks become huge too, share the windows of its 785 MiB logits
/// and fragment them (at 384 MiB, GPT-2 and the mix moved chunks again on
/// passes 5 and 6 of eight).
pub(crate) const HUGE_MIN: usize = 512 << 20;

/// The largest block a free parks (see the module docs), and the most
/// bytes one stream keeps parked: above them a free merges at once. Only
/// small blocks park: a parked large block stays out of the free ranges
/// until the arena grows, so the ranges it would have merged with are
/// placed around it, and the layout drifts from step to step (replaying
/// the recorded ResNet-50 steps of `benches/data` eight times over, the
/// mapped peak went from 1.03 to 1.06 times the live peak with blocks up to
/// 32 MiB parked, against 1.02 with small blocks only).
const PARK_MAX_BLOCK: usize = SMALL_MAX;
const PARK_MAX_PER_STREAM: usize = 256 << 20;
const PARK_LARGE_MIN: usize = 32 << 20;

/// Every block starts and ends on this many bytes.
pub(crate) const ALIGN: usize = 512;

/// Rounds `bytes` up to a multiple of `to` (a power of two or any non-zero
/// step); `None` on overflow.
pub(crate) fn round_up(bytes: usize, to: usize) -> Option<usize> {
    bytes.checked_add(to - 1).map(|b| b / to * to)
}

/// Which chunks a block lives in (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    Small,
    Large,
    Huge,
}

impl Kind {
    pub(crate) fn of(bytes: usize) -> Kind {
        if bytes <= SMALL_MAX {
            Kind::Small
        } else if bytes < HUGE_MIN {
            Kind::Large
        } else {
            Kind::Huge
        }
    }
}

/// Who may reuse a free range without waiting (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Owner {
    /// Every use has completed.
    Any,
    /// Freed on this stream slot; others wait for its fence.
    Stream(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Free {
    pub len: usize,
    pub kind: Kind,
    pub owner: Owner,
    /// For `Owner::Stream`: the slot's free counter at the last free in the
    /// range; 0 for `Any`.
    pub seq: u64,
}

/// A mapped chunk: one physical handle at `[base, base + len)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub len: usize,
    pub kind: Kind,
    pub handle: u64,
    /// A chunk whose memory was moved (its handle mapped at another
    /// address, see [`Book::move_chunk`]): still mapped here, used by
    /// nothing, unmapped once the frees its bytes had are complete (`Any`).
    pub ghost: Option<(Owner, u64)>,
}

/// A block handed out: live, or parked by a slot (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Block {
    pub(super) len: usize,
    pub(super) kind: Kind,
    pub(super) parked: bool,
    /// For a parked block: the block of its length its slot parked before
    /// it ([`NONE`] for none), so that the parked blocks of one length form
    /// a list through the blocks themselves (no list of their own to make
    /// for each new length).
    pub(super) next: Addr,
}

/// No block: device addresses are never 0.
pub(super) const NONE: Addr = 0;

/// What the book knows of a stream slot's frees.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Slot {
    /// Frees so far (the last free's `seq`).
    pub(super) next: u64,
    /// Frees a completed fence covers: ranges with `seq <= done` are `Any`.
    pub(super) done: u64,
    /// Free ranges owned by the slot.
    pub(super) ranges: usize,
}

/// Where the arena maps a new chunk: `[addr, addr + len)` is unmapped and
/// inside a reservation (see [`Book::add_chunk`] for how it is booked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grow {
    pub addr: Addr,
    pub len: usize,
}

/// The books of one arena (see the module docs).
#[derive(Debug)]
pub(crate) struct Book {
    pub(super) granule: usize,
    /// The reserved address ranges: base → length.
    pub(super) reserved: BTreeMap<Addr, usize>,
    pub(super) chunks: BTreeMap<Addr, Chunk>,
    /// The free ranges by their end (see `index.rs`).
    pub(super) free: BTreeMap<Addr, Span>,
    /// The best-fit index of the free ranges (see `index.rs`).
    pub(super) fit: Fit,
    pub(super) live: Map<Block>,
    pub(super) slots: Vec<Slot>,
    /// Parked blocks per slot: length → the last one parked (the head of
    /// the list of that length, see [`Block::next`]).
    pub(super) parked: Vec<Map<Addr>>,
    /// Parked blocks, in all.
    pub(super) parked_count: usize,
    pub(crate) live_bytes: usize,
    /// Bytes of parked blocks, in all and per slot.
    pub(crate) parked_bytes: usize,
    pub(super) parked_of: Vec<usize>,
    /// The one parked large block of the arena, if any: (slot, length).
    pub(super) parked_large: Option<(u32, usize)>,
    /// Handles mapped at a ghost's address: how many such ghosts.
    pub(super) ghost_handles: Map<u32>,
    pub(crate) mapped_bytes: usize,
    pub(crate) free_bytes: usize,
}

impl Book {
    /// Books for chunks made in multiples of `granule` bytes.
    pub(crate) fn new(granule: usize) -> Book {
        assert!(granule >= ALIGN && granule.is_multiple_of(ALIGN));
        Book {
            granule,
            reserved: BTreeMap::new(),
            chunks: BTreeMap::new(),
            free: BTreeMap::new(),
            fit: Fit::default(),
            live: Map::default(),
            slots: Vec::new(),
            parked: Vec::new(),
            parked_count: 0,
            live_bytes: 0,
            parked_bytes: 0,
            parked_of: Vec::new(),
            parked_large: None,
            ghost_handles: Map::default(),
            mapped_bytes: 0,
            free_bytes: 0,
        }
    }

    pub(crate) fn granule(&self) -> usize {
        self.granule
    }

    // ---- reservations and chunks ----

    pub(crate) fn add_reservation(&mut self, base: Addr, len: usize) {
        self.reserved.insert(base, len);
    }

    pub(crate) fn reservations(&self) -> impl Iterator<Item = (Addr, usize)> + '_ {
        self.reserved.iter().map(|(&a, &l)| (a, l))
    }

    pub(crate) fn reserved_bytes(&self) -> usize {
        self.reserved.values().sum()
    }

    /// Whether `addr` lies in one of the reservations.
    pub(crate) fn owns(&self, addr: Addr) -> bool {
        self.reserved
            .range(..=addr)
            .next_back()
            .is_some_and(|(&b, &l)| addr - b < l)
    }

    /// The mapped chunks that hold memory (not ghosts), in address order.
    pub(crate) fn chunks(&self) -> impl Iterator<Item = (Addr, Chunk)> + '_ {
        self.chunks
            .iter()
            .filter(|(_, c)| c.ghost.is_none())
            .map(|(&a, &c)| (a, c))
    }

    /// Books a chunk just mapped at `g.addr` for `slot`, which grew it. The
    /// fresh bytes have had no use; they are booked as the slot's (as if
    /// freed there just now) so that they merge with the slot's ranges and
    /// `Any` ranges but never join another stream's range, which would keep
    /// them from the slot.
    pub(crate) fn add_chunk(&mut self, g: Grow, kind: Kind, handle: u64, slot: u32) {
        debug_assert!(self.unmapped(g.addr, g.len));
        self.chunks.insert(
            g.addr,
            Chunk {
                len: g.len,
                kind,
                handle,
                ghost: None,
            },
        );
        self.mapped_bytes += g.len;
        let s = &mut self.slots[slot as usize];
        s.next += 1;
        let seq = s.next;
        self.put_free(
            g.addr,
            Free {
                len: g.len,
                kind,
                owner: Owner::Stream(slot),
                seq,
            },
        );
    }

    /// Whether `[addr, addr + len)` lies in one reservation and overlaps no
    /// chunk.
    pub(super) fn unmapped(&self, addr: Addr, len: usize) -> bool {
        let Some((&b, &l)) = self.reserved.range(..=addr).next_back() else {
            return false;
        };
        if addr - b > l || len > l - (addr - b) {
            return false;
        }
        let before_ok = self
            .chunks
            .range(..addr)
            .next_back()
            .is_none_or(|(&a, c)| a + c.len <= addr);
        before_ok && self.chunks.range(addr..addr + len).next().is_none()
    }

    /// The chunks that could be unmapped now (idle): wholly free and
    /// `Any`, in address order.
    pub(crate) fn idle_chunks(&self) -> Vec<(Addr, Chunk)> {
        self.chunks
            .iter()
            // A handle still mapped at a ghost's address waits for it.
            .filter(|(&a, c)| {
                c.ghost.is_none()
                    && !self.ghost_handles.contains_key(&(c.handle as usize))
                    && self.idle(a, c.len)
            })
            .map(|(&a, &c)| (a, c))
            .collect()
    }

    pub(super) fn idle(&self, addr: Addr, len: usize) -> bool {
        match self.free_over(addr) {
            Some((s, f)) => f.owner == Owner::Any && s + f.len >= addr + len,
            None => false,
        }
    }

    pub(crate) fn idle_bytes(&self) -> usize {
        self.idle_chunks().iter().map(|(_, c)| c.len).sum()
    }

    /// Takes the idle chunk at `addr` out of the books (after the arena
    /// unmapped it); its handle is for the arena to release.
    pub(crate) fn remove_chunk(&mut self, addr: Addr) -> Chunk {
        let chunk = self.chunks[&addr];
        assert!(self.idle(addr, chunk.len), "only idle chunks are unmapped");
        self.cut_chunk(addr, chunk)
    }

    /// Takes a chunk mapped by a growth that then failed out of the books:
    /// it was booked as its slot's free bytes and nothing was handed out
    /// from it since (the caller holds the arena's lock throughout), so no
    /// use of its bytes exists, whichever slot's range covers it.
    pub(crate) fn remove_unused_chunk(&mut self, addr: Addr) -> Chunk {
        let chunk = self.chunks[&addr];
        let covered = self
            .free_over(addr)
            .is_some_and(|(s, f)| s + f.len >= addr + chunk.len);
        assert!(covered, "a chunk just mapped is wholly free");
        self.cut_chunk(addr, chunk)
    }

    /// Takes the chunk at `addr`, wholly inside one free range, out of the
    /// books: the free range keeps what lies on either side of it.
    fn cut_chunk(&mut self, addr: Addr, chunk: Chunk) -> Chunk {
        let (start, f) = self
            .free_over(addr)
            .expect("the chunk is covered by a free range"); // ok: both callers just checked that one free range covers the chunk
        self.take_free(start);
        if start < addr {
            self.insert_free(
                start,
                Free {
                    len: addr - start,
                    ..f
                },
            );
        }
        let end = addr + chunk.len;
        if start + f.len > end {
            self.insert_free(
                end,
                Free {
                    len: start + f.len - end,
                    ..f
                },
            );
        }
        self.chunks.remove(&addr);
        self.mapped_bytes -= chunk.len;
        chunk
    }

    // ---- free ranges ----

    /// Books `[addr, addr + len)` as live (just taken from a free range).
    pub(super) fn hand_out(&mut self, addr: Addr, len: usize, kind: Kind) {
        self.live.insert(
            addr,
            Block {
                len,
                kind,
                parked: false,
                next: NONE,
            },
        );
        self.live_bytes += len;
    }

    /// The block at `addr` if it is live (not parked): its length and kind.
    pub(crate) fn live(&self, addr: Addr) -> Option<(usize, Kind)> {
        self.live
            .get(&addr)
            .filter(|b| !b.parked)
            .map(|b| (b.len, b.kind))
    }

    /// Live blocks (parked ones not counted).
    pub(crate) fn live_count(&self) -> usize {
        self.live.len() - self.parked_count
    }

    /// Gives back the live block at `addr`, freed on `slot`.
    pub(crate) fn give(&mut self, addr: Addr, slot: u32) {
        let b = self.live.remove(&addr).expect("a live block"); // ok: the arena checked `live(addr)` before giving it back
        assert!(!b.parked);
        self.live_bytes -= b.len;
        self.give_range(addr, b.len, b.kind, slot);
    }

    pub(super) fn give_range(&mut self, addr: Addr, len: usize, kind: Kind, slot: u32) {
        let s = &mut self.slots[slot as usize];
        s.next += 1;
        let seq = s.next;
        self.put_free(
            addr,
            Free {
                len,
                kind,
                owner: Owner::Stream(slot),
                seq,
            },
        );
    }

    /// Frees the live block at `addr` on `slot` if it is `len` bytes long,
    /// parking it with `park`, in one lookup: `false` (nothing changed) if
    /// there is no such block.
    pub(crate) fn free_block(&mut self, addr: Addr, len: usize, slot: u32, park: bool) -> bool {
        let Entry::Occupied(mut e) = self.live.entry(addr) else {
            return false;
        };
        let b = e.get_mut();
        if b.parked || b.len != len {
            return false;
        }
        self.live_bytes -= len;
        if park {
            debug_assert_ne!(addr, NONE);
            b.parked = true;
            b.next = self.parked[slot as usize].insert(len, addr).unwrap_or(NONE);
            self.parked_bytes += len;
            self.parked_of[slot as usize] += len;
            self.parked_count += 1;
            if len > PARK_MAX_BLOCK {
                self.parked_large = Some((slot, len));
            }
        } else {
            let kind = b.kind;
            e.remove();
            self.give_range(addr, len, kind, slot);
        }
        true
    }

    /// Parks the live block at `addr`, freed on `slot`.
    pub(crate) fn park(&mut self, addr: Addr, slot: u32) {
        debug_assert_ne!(addr, NONE);
        let b = self.live.get_mut(&addr).expect("a live block"); // ok: the arena checked `live(addr)` before parking it
        assert!(!b.parked);
        b.parked = true;
        let len = b.len;
        b.next = self.parked[slot as usize].insert(len, addr).unwrap_or(NONE);
        self.live_bytes -= len;
        self.parked_bytes += len;
        self.parked_of[slot as usize] += len;
        self.parked_count += 1;
        if len > PARK_MAX_BLOCK {
            self.parked_large = Some((slot, len));
        }
    }

    /// Whether a block of `len` bytes freed on `slot` parks.
    pub(crate) fn parks(&self, len: usize, slot: u32) -> bool {
        (len <= PARK_MAX_BLOCK || (len >= PARK_LARGE_MIN && self.parked_large.is_none()))
            && self.parked_of[slot as usize] + len <= PARK_MAX_PER_STREAM
    }

    /// Frees the arena's parked large block unless `slot` is about to take
    /// it back (its next allocation, of the block's length): a large block
    /// stays parked only until the next allocation of any stream, so that
    /// no other stream ever finds it missing from the free ranges.
    pub(crate) fn unpark_large_unless(&mut self, len: usize, slot: u32) {
        if let Some((s, l)) = self.parked_large {
            if s != slot || l != len {
                if let Some(a) = self.unpark(l, s) {
                    self.give(a, s);
                }
            }
        }
    }

    /// A block of exactly `len` bytes that `slot` parked (the last one),
    /// handed out again.
    #[inline]
    pub(crate) fn unpark(&mut self, len: usize, slot: u32) -> Option<Addr> {
        if self.parked_of[slot as usize] == 0 {
            return None;
        }
        let Entry::Occupied(mut head) = self.parked[slot as usize].entry(len) else {
            return None;
        };
        let addr = *head.get();
        let b = self.live.get_mut(&addr).expect("a parked block is booked"); // ok: parked lists hold only booked, parked blocks (the tests' `check`)
        b.parked = false;
        if b.next == NONE {
            head.remove();
        } else {
            *head.get_mut() = b.next;
        }
        self.parked_bytes -= len;
        self.parked_of[slot as usize] -= len;
        self.parked_count -= 1;
        self.live_bytes += len;
        if len > PARK_MAX_BLOCK {
            self.parked_large = None;
        }
        Some(addr)
    }

    /// Turns `slot`'s parked blocks into free ranges (its frees, merging).
    ///
    /// In address order, and adjacent blocks of one kind joined before
    /// they meet the free ranges: the same ranges as freeing them one by
    /// one (all are the slot's, and the slot's frees merge with one
    /// another), in fewer and nearer steps. Each block still counts as one
    /// free of the slot, and a joined run carries its last free's number,
    /// as merging would; no fence was recorded between these frees, so
    /// which block has which number tells no fence anything.
    pub(crate) fn flush(&mut self, slot: u32) {
        if self.parked_large.is_some_and(|(s, _)| s == slot) {
            self.parked_large = None;
        }
        let mut heads = std::mem::take(&mut self.parked[slot as usize]);
        let mut blocks: Vec<(Addr, usize, Kind)> = Vec::new();
        for (_, mut addr) in heads.drain() {
            while addr != NONE {
                let b = self.live.remove(&addr).expect("a parked block is booked"); // ok: parked lists hold only booked, parked blocks (the tests' `check`)
                blocks.push((addr, b.len, b.kind));
                addr = b.next;
            }
        }
        // Back, empty, with its room for the next blocks parked.
        self.parked[slot as usize] = heads;
        let bytes: usize = blocks.iter().map(|b| b.1).sum();
        self.parked_bytes -= bytes;
        self.parked_of[slot as usize] -= bytes;
        self.parked_count -= blocks.len();
        blocks.sort_unstable_by_key(|b| b.0);
        // Block `i` (in address order) is the slot's free `base + i + 1`.
        let base = self.slots[slot as usize].next;
        self.slots[slot as usize].next += blocks.len() as u64;
        let mut i = 0;
        while i < blocks.len() {
            let (start, mut len, kind) = blocks[i];
            i += 1;
            while i < blocks.len() && blocks[i].0 == start + len && blocks[i].2 == kind {
                len += blocks[i].1;
                i += 1;
            }
            self.put_free(
                start,
                Free {
                    len,
                    kind,
                    owner: Owner::Stream(slot),
                    seq: base + i as u64,
                },
            );
        }
    }

    /// [`flush`](Book::flush) for every slot.
    pub(crate) fn flush_all(&mut self) {
        for s in 0..self.slots.len() as u32 {
            if self.parked_of[s as usize] != 0 {
                self.flush(s);
            }
        }
    }

    // ---- stream slots and fences ----

    /// A new stream slot, or a retired one's number.
    pub(crate) fn add_slot(&mut self, reuse: Option<u32>) -> u32 {
        match reuse {
            Some(s) => {
                let slot = &mut self.slots[s as usize];
                debug_assert_eq!(slot.ranges, 0);
                debug_assert_eq!(self.parked_of[s as usize], 0);
                *slot = Slot::default();
                s
            }
            None => {
                self.slots.push(Slot::default());
                self.parked.push(Map::default());
                self.parked_of.push(0);
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// The slot's frees so far: a fence recorded now covers up to here.
    pub(crate) fn frees(&self, slot: u32) -> u64 {
        self.slots[slot as usize].next
    }

    /// Whether the slot owns free ranges that no completed fence covers.
    pub(crate) fn waiting(&self, slot: u32) -> bool {
        self.slots[slot as usize].ranges > 0
    }

    /// Whether nothing of the slot is left in the books (it can retire).
    pub(crate) fn slot_empty(&self, slot: u32) -> bool {
        self.slots[slot as usize].ranges == 0 && self.parked_of[slot as usize] == 0
    }

    /// A fence of `slot` covering its first `upto` frees completed: those
    /// ranges become `Any` (merging with `Any` neighbours). Returns the bytes
    /// that did.
    pub(crate) fn completed(&mut self, slot: u32, upto: u64) -> usize {
        let s = &mut self.slots[slot as usize];
        if upto <= s.done {
            return 0;
        }
        s.done = upto;
        let own = Owner::Stream(slot);
        // The slot's ranges in the index's order (kind, length, start).
        let mine: Vec<(Kind, usize, Addr)> = [Kind::Small, Kind::Large, Kind::Huge]
            .into_iter()
            .flat_map(|kind| self.fit.at_least(kind, own, 0).map(move |(l, a)| (kind, l, a)))
            .collect();
        if !self.ghost_handles.is_empty() {
            for c in self.chunks.values_mut() {
                if let Some((Owner::Stream(g), seq)) = c.ghost {
                    if g == slot && seq <= upto {
                        c.ghost = Some((Owner::Any, 0));
                        self.slots[slot as usize].ranges -= 1;
                    }
                }
            }
        }
        // A covered range with no free neighbour of its kind merges with
        // nothing as `Any`: it turns in place. While no other slot owns
        // ranges, none has such a neighbour (an `Any` one or one of the
        // slot's would have merged with it already).
        let alone = (self.slots.iter().map(|s| s.ranges).sum::<usize>()) == self.slots[slot as usize].ranges;
        let mut bytes = 0;
        let mut merging = Vec::new();
        for (kind, l, a) in mine {
            let lone = alone
                || !(self.free.get(&a).is_some_and(|p| p.kind() == kind)
                    || self.free_at(a + l).is_some_and(|n| n.kind == kind));
            let span = self.free.get_mut(&(a + l)).expect("the index agrees with `free`"); // ok: `mine` was read from the index, which agrees with `free` (the tests' `check`)
            if span.seq > upto {
                continue;
            }
            if !lone {
                merging.push(a);
                continue;
            }
            span.set_owner(Owner::Any, 0);
            self.fit.remove(kind, own, l, a);
            self.fit.insert(kind, Owner::Any, l, a);
            self.slots[slot as usize].ranges -= 1;
            bytes += l;
        }
        // The others all out first: putting one back may merge it with the
        // next.
        let taken: Vec<(Addr, Free)> = merging.into_iter().map(|a| (a, self.take_free(a))).collect();
        for (a, f) in taken {
            bytes += f.len;
            self.put_free(
                a,
                Free {
                    owner: Owner::Any,
                    seq: 0,
                    ..f
                },
            );
        }
        bytes
    }

    // ---- figures ----

    /// The bytes of the mapped chunks that any of `blocks` (address,
    /// bytes) touches: what stays mapped while they live.
    pub(crate) fn holding(&self, blocks: &[(Addr, usize)]) -> usize {
        let mut touched = BTreeMap::new();
        for &(addr, len) in blocks {
            touched.extend(self.touching(addr, len));
        }
        touched.values().sum()
    }

    /// The mapped chunks (not ghosts) that `[addr, addr + len)` touches:
    /// (start, bytes), in address order.
    pub(crate) fn touching(&self, addr: Addr, len: usize) -> impl Iterator<Item = (Addr, usize)> + '_ {
        let from = self.chunks.range(..=addr).next_back().map_or(addr, |(&c, _)| c);
        self.chunks
            .range(from..addr.saturating_add(len.max(1)))
            .filter(move |(&c, ch)| c + ch.len > addr && ch.ghost.is_none())
            .map(|(&c, ch)| (c, ch.len))
    }

    /// The longest free range (any owner, any kind).
    pub(crate) fn largest_free(&self) -> usize {
        self.free_ranges().map(|(_, f)| f.len).max().unwrap_or(0)
    }
}
