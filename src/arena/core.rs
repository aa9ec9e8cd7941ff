//! The arena proper, over any [`Phys`]: allocation, free, growth, giving
//! memory back, and the out-of-memory recovery, all under one lock.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use super::book::{round_up, Addr, Book, Kind, ALIGN};
use super::phys::Phys;
use super::ArenaOptions;
use crate::error::{record_drop_error, Error, InvalidReason, Result};
use crate::stream::Stream;

/// The entries of slots `a` and `b` (two different known slots), both
/// mutable.
pub(super) fn two<F>(entries: &mut [Option<Entry<F>>], a: u32, b: u32) -> (&mut Entry<F>, &mut Entry<F>) {
    let (a, b) = (a as usize, b as usize);
    let (x, y) = if a < b {
        let (l, r) = entries.split_at_mut(b);
        (&mut l[a], &mut r[0])
    } else {
        let (l, r) = entries.split_at_mut(a);
        (&mut r[0], &mut l[b])
    };
    (
        x.as_mut().expect("a known slot"), // ok: both slots are known (callers checked)
        y.as_mut().expect("a known slot"), // ok: both slots are known (callers checked)
    )
}

/// A stream the arena has seen, with its fence.
pub(super) struct Entry<F> {
    pub(super) stream: Stream,
    pub(super) fence: Option<F>,
    /// A second fence, recorded when another stream takes this one's
    /// frees by a device wait and `fence` does not cover them yet.
    pub(super) handoff: Option<F>,
    /// The slot's free count the fence's last record covers, while it has
    /// not been seen complete.
    pub(super) pending: Option<u64>,
}

/// Counters of what the arena did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counters {
    pub maps: u64,
    pub unmaps: u64,
    pub fences: u64,
    pub waits: u64,
    pub recoveries: u64,
    pub refusals: u64,
    pub moves: u64,
    pub handovers: u64,
    /// Chunks of another stream's frees moved after a device wait (see
    /// `handover.rs`; part of `moves`).
    pub moved_over: u64,
    pub peak_mapped: usize,
    pub peak_live: usize,
    /// Physical chunks made and released.
    pub creates: u64,
    pub releases: u64,
    /// The runtime's virtual-memory calls, and the host's time in them
    /// (see [`timed`]).
    pub vmm_calls: u64,
    pub vmm: Duration,
    /// Calls that found the lock held by another thread, and their time
    /// waiting for it.
    pub lock_waits: u64,
    pub lock_wait: Duration,
}

/// Runs one of the runtime's virtual-memory calls (reserve, create, map,
/// grant, unmap, release, unreserve), counting it and adding the host's
/// time in it to the counters.
pub(super) fn timed<T>(counters: &mut Counters, call: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = call();
    counters.vmm += t.elapsed();
    counters.vmm_calls += 1;
    r
}

pub(crate) struct State<F> {
    pub(crate) book: Book,
    pub(super) entries: Vec<Option<Entry<F>>>,
    by_raw: HashMap<usize, u32, crate::cache::BuildAddrHasher>,
    /// The last stream looked up and its slot (most calls come from the
    /// stream of the call before): (raw stream, slot).
    last: Option<(usize, u32)>,
    retired: Vec<u32>,
    /// Chunks unmapped whose release failed: physical memory still held,
    /// released at the next trim.
    pub(super) unreleased: Vec<(u64, usize)>,
    /// Handles whose one mapping stayed after a failed map (see
    /// `Arena::map_usable`), booked as a ghost at that address: released
    /// once it is unmapped.
    pub(super) orphans: Vec<(u64, usize)>,
    pub(crate) counters: Counters,
    pub(super) peers: Vec<usize>,
}

/// How hard an allocation has tried (see [`Arena::allocate`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Effort {
    /// Reuse, completed fences, growth.
    Plain,
    /// Also give back idle chunks before growing.
    GiveBack,
    /// Also wait for every stream's frees.
    Wait,
}

pub(crate) struct Arena<P: Phys> {
    pub(crate) phys: P,
    pub(crate) opts: ArenaOptions,
    state: Mutex<State<P::Fence>>,
}

impl<P: Phys> Arena<P> {
    /// An arena over `phys`, whose chunks are multiples of `granule`, with
    /// `reserve` bytes of address space reserved up front.
    pub(crate) fn new(phys: P, granule: usize, opts: ArenaOptions, reserve: usize) -> Result<Arena<P>> {
        let mut book = Book::new(granule);
        let len = round_up(reserve.max(granule), granule)
            .ok_or_else(|| Error::invalid(format!("an address reservation of {reserve} bytes overflows")))?;
        let mut counters = Counters::default();
        let base = timed(&mut counters, || phys.reserve(len, granule))?;
        book.add_reservation(base, len);
        Ok(Arena {
            phys,
            opts,
            state: Mutex::new(State {
                book,
                entries: Vec::new(),
                by_raw: HashMap::default(),
                last: None,
                retired: Vec::new(),
                unreleased: Vec::new(),
                orphans: Vec::new(),
                counters,
                peers: Vec::new(),
            }),
        })
    }

    /// The arena's state, under its lock. A call that finds the lock held
    /// by another thread counts its wait (`try_lock` costs what an
    /// uncontended `lock` does).
    pub(crate) fn lock(&self) -> MutexGuard<'_, State<P::Fence>> {
        match self.state.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                let t = Instant::now();
                let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
                g.counters.lock_waits += 1;
                g.counters.lock_wait += t.elapsed();
                g
            }
        }
    }

    /// Whether `addr` is in the arena's address space.
    pub(crate) fn owns(&self, addr: Addr) -> bool {
        self.lock().book.owns(addr)
    }

    /// Refuses the per-thread default stream: its handle names another
    /// stream on every thread, so the books (which key frees by stream)
    /// and the fences (recorded from whichever thread allocates) cannot
    /// stand for it. `Front` serves its allocations from the pool and
    /// relays its frees through a stream of its own.
    fn one_stream(stream: &Stream) -> Result<()> {
        if stream.is_per_thread_default() {
            return Err(InvalidReason::SpecialStreamHandle.error(
                "the arena keys frees by stream: the per-thread default stream (0x2) names \
                 another stream on every thread"
                    .to_string(),
            ));
        }
        Ok(())
    }

    /// The stream slot of `stream` if it has one.
    fn known_slot(state: &mut State<P::Fence>, stream: &Stream) -> Option<u32> {
        let raw = stream.as_raw() as usize;
        if let Some((r, s)) = state.last {
            if r == raw {
                return Some(s);
            }
        }
        let s = *state.by_raw.get(&raw)?;
        state.last = Some((raw, s));
        Some(s)
    }

    /// The stream slot of `stream`, made on first use.
    fn slot(state: &mut State<P::Fence>, stream: &Stream) -> u32 {
        if let Some(s) = Self::known_slot(state, stream) {
            return s;
        }
        let raw = stream.as_raw() as usize;
        let reuse = state.retired.pop();
        let s = state.book.add_slot(reuse);
        let entry = Entry {
            stream: stream.clone(),
            fence: None,
            handoff: None,
            pending: None,
        };
        match reuse {
            Some(_) => state.entries[s as usize] = Some(entry),
            None => state.entries.push(Some(entry)),
        }
        state.by_raw.insert(raw, s);
        state.last = Some((raw, s));
        s
    }

    /// `bytes` of memory for `stream` (not capturing: the caller routes
    /// captures elsewhere).
    pub(crate) fn allocate(&self, bytes: usize, stream: &Stream) -> Result<Addr> {
        Self::one_stream(stream)?;
        let len = round_up(bytes, ALIGN).ok_or_else(|| {
            InvalidReason::SizeOverflow.error(format!("{bytes} bytes cannot be rounded up"))
        })?;
        let kind = Kind::of(len);
        let mut state = self.lock();
        let state = &mut *state;
        let slot = Self::slot(state, stream);
        state.book.unpark_large_unless(len, slot);
        if let Some(a) = state.book.unpark(len, slot) {
            Self::peaks(state);
            return Ok(a);
        }
        if let Some(a) = self.place(state, len, kind, slot) {
            Self::peaks(state);
            return Ok(a);
        }
        let mut last = None;
        for effort in [Effort::Plain, Effort::GiveBack, Effort::Wait] {
            if effort > Effort::Plain {
                state.counters.recoveries += 1;
            }
            // Parked blocks merge into free ranges before anything else.
            state.book.flush_all();
            self.collect(state, effort == Effort::Wait);
            if let Some(a) = self.place(state, len, kind, slot) {
                Self::peaks(state);
                return Ok(a);
            }
            if effort > Effort::Plain {
                self.give_back(state, 0);
            } else if let Some(keep) = self.opts.release_threshold {
                if state.book.idle_bytes() > keep {
                    self.give_back(state, keep);
                }
            }
            if let Some(a) = self.hand_over(state, len, kind, slot) {
                Self::peaks(state);
                return Ok(a);
            }
            if let Some(a) = self.spill(state, len, kind, slot) {
                Self::peaks(state);
                return Ok(a);
            }
            match self.grow(state, len, kind, slot) {
                Ok(at) => {
                    let a = match at {
                        Some(at) => {
                            let (range, _) = state.book.free_over(at).expect("the grown window is free"); // ok: growth booked `[at, at + len)` and more as the slot's free bytes
                            state.book.take_at(range, at, len);
                            at
                        }
                        None => self
                            .place(state, len, kind, slot)
                            .expect("the grown range holds the block"), // ok: growth mapped a usable range of at least `len` bytes
                    };
                    Self::peaks(state);
                    return Ok(a);
                }
                Err(e @ Error::OutOfMemory { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        state.counters.refusals += 1;
        let stats = self.stats_of(state);
        Err(match last {
            Some(Error::OutOfMemory { stats: pool, .. }) => Error::OutOfMemory {
                requested: bytes,
                stats: pool,
                arena: Some(Box::new(stats)),
            },
            _ => Error::OutOfMemory {
                requested: bytes,
                stats: None,
                arena: Some(Box::new(stats)),
            },
        })
    }

    fn peaks(state: &mut State<P::Fence>) {
        let c = &mut state.counters;
        c.peak_live = c.peak_live.max(state.book.live_bytes);
        c.peak_mapped = c.peak_mapped.max(state.book.mapped_bytes);
    }

    /// Gives back the block at `addr` of `bytes`, freed on `stream`.
    pub(crate) fn deallocate(&self, addr: Addr, bytes: usize, stream: &Stream) -> Result<()> {
        self.free_locked(&mut self.lock(), addr, bytes, stream)
    }

    /// [`deallocate`](Arena::deallocate) if `addr` is in the arena's
    /// address space (`None`: not the arena's), under one lock.
    pub(crate) fn deallocate_owned(&self, addr: Addr, bytes: usize, stream: &Stream) -> Option<Result<()>> {
        let mut state = self.lock();
        let owned = state.book.owns(addr);
        owned.then(|| self.free_locked(&mut state, addr, bytes, stream))
    }

    fn free_locked(
        &self,
        state: &mut State<P::Fence>,
        addr: Addr,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()> {
        Self::one_stream(stream)?;
        // A known stream's free of a live block of that length: in one
        // lookup of the block. Anything else (an error, a new stream) is
        // checked step by step below.
        if let (Some(len), Some(slot)) = (round_up(bytes, ALIGN), Self::known_slot(state, stream)) {
            let park = state.book.parks(len, slot);
            if state.book.free_block(addr, len, slot, park) {
                return Ok(());
            }
        }
        let Some((len, _)) = state.book.live(addr) else {
            return Err(InvalidReason::Other.error(format!(
                "{addr:#x} is not a live block of this arena (freed twice, or from another resource)"
            )));
        };
        if round_up(bytes, ALIGN) != Some(len) {
            return Err(InvalidReason::Other.error(format!(
                "{addr:#x} freed with {bytes} bytes; it was allocated with {len} (rounded)"
            )));
        }
        let slot = Self::slot(state, stream);
        if state.book.parks(len, slot) {
            state.book.park(addr, slot);
        } else {
            state.book.give(addr, slot);
        }
        Ok(())
    }

    /// Turns the frees that completed fences cover into reusable memory, and
    /// records a fence on every stream (the allocating one too) whose frees
    /// no fence covers
    /// (skipping a stream that captures: a fence there would be a graph
    /// node). With `wait`, waits for every fence first. Failures only mean
    /// that less memory is reusable now.
    fn collect(&self, state: &mut State<P::Fence>, wait: bool) {
        for s in 0..state.entries.len() as u32 {
            let frees = state.book.frees(s);
            let waiting = state.book.waiting(s);
            let Some(entry) = state.entries[s as usize].as_mut() else {
                continue;
            };
            if let (Some(upto), Some(f)) = (entry.pending, entry.fence.as_ref()) {
                let done = if wait {
                    state.counters.waits += 1;
                    self.phys.wait(f).map(|()| true)
                } else {
                    self.phys.done(f)
                };
                match done {
                    Ok(true) => {
                        entry.pending = None;
                        state.book.completed(s, upto);
                    }
                    Ok(false) => continue,
                    // Not usable: ask again with a new record.
                    Err(_) => entry.pending = None,
                }
            }
            let covered = entry.pending.is_some();
            // The allocating stream too: its fences turn its own frees into
            // anyone's (so that whole chunks become idle) and let the
            // addresses its moved chunks left be unmapped.
            if !waiting || covered {
                continue;
            }
            if !matches!(entry.stream.capturing(), Ok(None)) {
                continue;
            }
            if let Ok(f) = self.record_fence(&mut entry.fence, &entry.stream) {
                state.counters.fences += 1;
                entry.pending = Some(frees);
                if wait {
                    state.counters.waits += 1;
                    if self.phys.wait(f).is_ok() {
                        entry.pending = None;
                        state.book.completed(s, frees);
                    }
                }
            }
        }
    }

    /// Records a stream's fence (made on first use) at the end of its
    /// queue.
    pub(super) fn record_fence<'f>(
        &self,
        fence: &'f mut Option<P::Fence>,
        stream: &Stream,
    ) -> Result<&'f P::Fence> {
        let f = match fence {
            Some(f) => f,
            None => fence.insert(self.phys.new_fence(stream)?),
        };
        self.phys.record(f, stream)?;
        // Another thread may begin a capture of the stream between the
        // caller's question and the record, which then makes a node of the
        // graph: no query completes it, and a stream that waited on it
        // would join the capture, ordered after nothing. Asked again, a
        // capture now refuses the fence (it is recorded again later).
        if !matches!(stream.capturing(), Ok(None)) {
            return Err(Error::capture(
                "an arena fence was recorded as a capture of its stream began".to_string(),
            ));
        }
        Ok(f)
    }

    /// Takes `len` bytes of `kind` for `slot` from the free ranges, if they
    /// hold them (within one chunk with `whole_blocks`).
    fn place(&self, state: &mut State<P::Fence>, len: usize, kind: Kind, slot: u32) -> Option<Addr> {
        if self.opts.whole_blocks {
            let (range, at) = state.book.find_whole(len, kind, slot)?;
            state.book.take_at(range, at, len);
            Some(at)
        } else {
            let (a, range_len) = state.book.find(len, kind, slot)?;
            let at = state.book.spot(a, range_len, len);
            if at == a {
                state.book.take(a, range_len, len);
            } else {
                state.book.take_at(a, at, len);
            }
            Some(at)
        }
    }

    /// A large block that no free range of large chunks holds (after
    /// completed frees, given-back chunks and other streams' frees were
    /// tried), placed in a free range of huge chunks instead of growing:
    /// the best fit, at its end, away from where a huge block would start
    /// (see the book's module docs, on kinds); else in another stream's
    /// frees of huge chunks, taken by a device wait (see `handover.rs`).
    /// With every block in one chunk (`whole_blocks`) nothing spills.
    fn spill(&self, state: &mut State<P::Fence>, len: usize, kind: Kind, slot: u32) -> Option<Addr> {
        if kind != Kind::Large || self.opts.whole_blocks {
            return None;
        }
        let Some((a, range_len)) = state.book.find(len, Kind::Huge, slot) else {
            return self.hand_over(state, len, Kind::Huge, slot);
        };
        let at = a + range_len - len;
        if at == a {
            state.book.take(a, range_len, len);
        } else {
            state.book.take_at(a, at, len);
        }
        Some(at)
    }

    /// Waits for every stream's frees, then gives back idle chunks down to
    /// `keep` bytes; forgets streams with nothing left in the books.
    pub(crate) fn trim(&self, keep: usize) -> usize {
        let mut state = self.lock();
        let state = &mut *state;
        state.book.flush_all();
        self.collect(state, true);
        self.unmap_ghosts(state);
        let given = self.give_back(state, keep);
        for s in 0..state.entries.len() as u32 {
            let retire = match &state.entries[s as usize] {
                Some(e) => e.pending.is_none() && state.book.slot_empty(s),
                None => false,
            };
            if retire {
                let e = state.entries[s as usize].take().expect("checked"); // ok: `retire` was computed from `Some` just above
                state.by_raw.remove(&(e.stream.as_raw() as usize));
                state.last = None;
                state.retired.push(s);
            }
        }
        given
    }

    /// Stops using `stream`: its parked blocks are freed, a fence recorded
    /// on it is waited for (so every free made on it is complete and its
    /// ranges are anyone's), and the arena lets go of it. `false` if the
    /// arena did not know it. An error leaves it known (nothing lost).
    pub(crate) fn forget(&self, stream: &Stream) -> Result<bool> {
        let mut state = self.lock();
        let state = &mut *state;
        let raw = stream.as_raw() as usize;
        let Some(&s) = state.by_raw.get(&raw) else {
            return Ok(false);
        };
        state.book.flush(s);
        if state.book.waiting(s) {
            let frees = state.book.frees(s);
            let entry = state.entries[s as usize]
                .as_mut()
                .expect("a known slot has an entry"); // ok: every slot in `by_raw` has an entry
            let f = self.record_fence(&mut entry.fence, &entry.stream)?;
            state.counters.fences += 1;
            state.counters.waits += 1;
            self.phys.wait(f)?;
            entry.pending = None;
            state.book.completed(s, frees);
        }
        debug_assert!(state.book.slot_empty(s));
        state.entries[s as usize] = None;
        state.by_raw.remove(&raw);
        state.last = None;
        state.retired.push(s);
        Ok(true)
    }

    /// The mapped chunks, in address order: (base, bytes).
    pub(crate) fn segments(&self) -> Vec<(Addr, usize)> {
        self.lock().book.chunks().map(|(a, c)| (a, c.len)).collect()
    }
}

impl<P: Phys> Drop for Arena<P> {
    /// With nothing live: waits for every free, unmaps and releases every
    /// chunk and gives the address space back. With blocks still live (a
    /// resource dropped under its users cannot happen through buffers,
    /// which hold it), everything stays mapped: unmapping memory in use
    /// would be worse than the leak.
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        if state.book.live_count() != 0 {
            record_drop_error(Err(Error::invalid(format!(
                "an arena dropped with {} live blocks keeps its memory mapped",
                state.book.live_count()
            ))));
            return;
        }
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        let mut state_taken = std::mem::replace(
            state,
            State {
                book: Book::new(ALIGN),
                entries: Vec::new(),
                by_raw: HashMap::default(),
                last: None,
                retired: Vec::new(),
                unreleased: Vec::new(),
                orphans: Vec::new(),
                counters: Counters::default(),
                peers: Vec::new(),
            },
        );
        state_taken.book.flush_all();
        self.collect(&mut state_taken, true);
        self.unmap_ghosts(&mut state_taken);
        self.unmap_idle(&mut state_taken, 0);
        let all_back = state_taken.book.mapped_bytes == 0
            && state_taken.unreleased.is_empty()
            && state_taken.orphans.is_empty();
        if !all_back {
            record_drop_error(Err(Error::invalid(
                "an arena could not give back all of its memory at drop".to_string(),
            )));
            return;
        }
        for (base, len) in state_taken.book.reservations().collect::<Vec<_>>() {
            // SAFETY: nothing is mapped any more.
            record_drop_error(unsafe { self.phys.unreserve(base, len) });
        }
    }
}
