//! The [`Server`]: a plan's slots handed out in order, each checked
//! against the live ones, with the waits that order a stream after
//! another's frees of the same bytes.

use std::sync::Arc;

use super::{round, Plan, Slot, MAX_STREAMS};

/// Serves allocations from a plan, in order, each slot checked against the
/// live ones.
///
/// A plan of several streams ([`Plan::for_streams`]) is served stream by
/// stream ([`allocate_on`](Server::allocate_on)), each stream matching its
/// own slots in order, all of them in one arena: a slot whose bytes another
/// stream freed last comes with the [`Wait`]s that order its stream after
/// those frees.
#[derive(Debug)]
pub struct Server {
    plan: Arc<Plan>,
    /// Per stream: its slots in order, and where matching goes on.
    lanes: Vec<Lane>,
    live: Vec<bool>,
    /// Slots never handed out again ([`divert`](Server::divert)): a request
    /// they match is refused, and matching goes on after them.
    diverted: Vec<bool>,
    /// How many slots are live.
    live_count: usize,
    /// The arena cut into pieces at every servable slot's start and end.
    pieces: Pieces,
    /// Per piece: the live slot holding it, plus one (0: none). Live slots
    /// never share a piece (see `allocate_on`).
    holder: Vec<u32>,
    /// How many slots ahead a request looks for its size.
    window: usize,
    /// Who freed the bytes that are not live (plans of several streams).
    handoffs: Option<Handoffs>,
    /// Requests served from the arena.
    pub served: u64,
    /// Requests that got no slot.
    pub refused: u64,
    /// Slots passed over by a match further ahead.
    pub skipped: u64,
    /// Requests refused because the slot they matched was diverted (also
    /// counted in `refused`).
    pub passed: u64,
}

/// The arena cut at the start and the end of every slot the server can
/// hand out (placed, inside the arena): each such slot covers a run of
/// whole pieces, and two of them overlap exactly where they share a piece.
/// Serving a slot then reads and writes its pieces (on the recorded
/// programs a slot covers 15 pieces on average, one in the median) instead
/// of searching ordered maps.
#[derive(Debug)]
pub(super) struct Pieces {
    /// The pieces' starts, in order.
    pub(super) starts: Vec<u64>,
    /// Per slot: its pieces `lo..hi` (empty for a slot never handed out).
    of_slot: Vec<(u32, u32)>,
}

impl Pieces {
    pub(super) fn new(plan: &Plan) -> Pieces {
        let span = |s: &Slot| {
            let o = s.offset?;
            let e = o.checked_add(round(s.size))?;
            (e <= plan.arena).then_some((o, e))
        };
        let mut starts: Vec<u64> = plan
            .slots
            .iter()
            .filter_map(span)
            .flat_map(|(o, e)| [o, e])
            .collect();
        starts.sort_unstable();
        starts.dedup();
        let at = |x: u64| starts.partition_point(|&b| b < x) as u32;
        let of_slot = plan
            .slots
            .iter()
            .map(|s| span(s).map_or((0, 0), |(o, e)| (at(o), at(e))))
            .collect();
        Pieces { starts, of_slot }
    }

    /// Slot `slot`'s pieces.
    pub(super) fn of(&self, slot: usize) -> std::ops::Range<usize> {
        let (lo, hi) = self.of_slot[slot];
        lo as usize..hi as usize
    }
}

#[derive(Debug)]
struct Lane {
    /// The stream's slots, in plan order.
    order: Vec<usize>,
    /// The index in `order` that matching goes on at after the last (the
    /// stream's first slot of the repeated step).
    wrap: Option<usize>,
    /// The next index in `order` to match.
    cursor: usize,
    /// Its live slots.
    live: usize,
}

/// A stream's frees are numbered from 1 (tickets); an event recorded on
/// the stream after its free number `t` orders a wait after frees 1..=t.
#[derive(Debug)]
struct Handoffs {
    /// Per piece of the arena: its last free (ticket 0: none yet). A
    /// piece taken since keeps it until its next free; only a live slot
    /// holds it meanwhile, and that slot's stream already waited for it.
    freed: Vec<Freed>,
    /// Per stream: its frees so far.
    frees: Vec<u64>,
    /// Per stream: the last free an event was recorded after.
    recorded: Vec<u64>,
    /// `waited[b][a]`: stream `b` waited for stream `a`'s frees up to this.
    waited: Vec<Vec<u64>>,
    /// Slots whose free another stream waited for once (the latest free
    /// of their stream among the bytes it took): their frees are recorded
    /// as they happen from then on.
    handed: Vec<bool>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Freed {
    stream: u32,
    ticket: u64,
    slot: usize,
}

/// How [`Server::grant`] may serve a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// With the waits the slot needs.
    Wait,
    /// Only a slot that needs no wait; a refusal is counted.
    NoWait,
    /// Only a slot that needs no wait; a refusal changes nothing (not
    /// even the count, nor the match past a diverted slot).
    Quiet,
}

/// What a stream must do before it uses a slot another stream freed last
/// ([`Server::allocate_on`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    /// The stream that freed the bytes.
    pub stream: u32,
    /// Wait for an event recorded on `stream` after its free number
    /// `ticket` (the first such event is enough).
    pub ticket: u64,
    /// `Some(t)`: no such event was recorded yet; record one on `stream`
    /// now, filed under `t` (at least `ticket`), before waiting, and say
    /// so with [`Server::recorded`].
    pub record: Option<u64>,
    /// The slot whose free that was: once the wait is made
    /// ([`Server::confirm`]), its later frees are recorded as they happen
    /// ([`Server::free_slot`] asks for an event).
    pub slot: usize,
}

/// A slot handed out by [`Server::allocate_on`].
///
/// The slot is live from the grant on. Its waits are the caller's to carry
/// out, and the server assumes none of them made until told: with
/// [`Server::confirm`] once they all are, or [`Server::cancel`] when one
/// could not be (the slot is then free again, and a later grant of the same
/// bytes asks for the same waits).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The slot.
    pub slot: usize,
    /// Its offset in the arena.
    pub offset: u64,
    /// What the stream must wait for first (one per other stream at most).
    pub waits: Vec<Wait>,
}

impl Server {
    /// Serves the steps after a step planned with [`Plan::build`]: call
    /// [`begin_step`](Server::begin_step) at each step's start. A request
    /// looks up to `window` slots ahead for its size.
    pub fn new(plan: Arc<Plan>, window: usize) -> Server {
        // Slots of streams from MAX_STREAMS on (a plan made by hand) are
        // never served.
        let streams = plan
            .slots
            .iter()
            .filter(|s| s.stream < MAX_STREAMS)
            .map(|s| s.stream as usize + 1)
            .max()
            .unwrap_or(1);
        let mut lanes: Vec<Lane> = (0..streams)
            .map(|_| Lane {
                order: Vec::new(),
                wrap: None,
                cursor: 0,
                live: 0,
            })
            .collect();
        for (k, s) in plan.slots.iter().enumerate() {
            if let Some(lane) = lanes.get_mut(s.stream as usize) {
                lane.order.push(k);
            }
        }
        if let Some(w) = plan.wrap_to {
            for lane in &mut lanes {
                let at = lane.order.partition_point(|&k| k < w);
                lane.wrap = (at < lane.order.len()).then_some(at);
            }
        }
        let pieces = Pieces::new(&plan);
        Server {
            live: vec![false; plan.slots.len()],
            diverted: vec![false; plan.slots.len()],
            live_count: 0,
            holder: vec![0; pieces.starts.len()],
            handoffs: (streams > 1).then(|| Handoffs {
                freed: vec![Freed::default(); pieces.starts.len()],
                frees: vec![0; streams],
                recorded: vec![0; streams],
                waited: vec![vec![0; streams]; streams],
                handed: vec![false; plan.slots.len()],
            }),
            lanes,
            pieces,
            plan,
            window: window.max(1),
            served: 0,
            refused: 0,
            skipped: 0,
            passed: 0,
        }
    }

    /// Serves a program planned with [`Plan::for_program`] or
    /// [`Plan::for_streams`] from its first allocation on: after a
    /// stream's last slot, matching goes on at its first slot of the
    /// repeated step.
    pub fn for_program(plan: Arc<Plan>, window: usize) -> Server {
        Server::new(plan, window)
    }

    /// The plan served.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// How many streams the plan has.
    pub fn streams(&self) -> usize {
        self.lanes.len()
    }

    /// A step begins: matching starts again at the first slot. Blocks of
    /// the last step may still be live; their slots stay taken.
    pub fn begin_step(&mut self) {
        for lane in &mut self.lanes {
            lane.cursor = 0;
        }
    }

    /// Matching goes on at every stream's first slot of the repeated step
    /// (for a plan served from a step boundary of a run that is already
    /// going, not from its start); a stream whose plan has no repeated
    /// step is past its end. Blocks out stay live.
    pub fn begin_repeated_step(&mut self) {
        for lane in &mut self.lanes {
            lane.cursor = lane.wrap.unwrap_or(lane.order.len());
        }
    }

    /// The index after `i` in `lane`'s order: the next one, or past the
    /// last the repeated step's first (`None`: the plan has ended).
    fn after(lane: &Lane, i: usize) -> Option<usize> {
        match i + 1 {
            n if n < lane.order.len() => Some(n),
            _ => lane.wrap,
        }
    }

    /// A slot for `size` bytes and its offset in the arena, or `None` (the
    /// caller takes the memory elsewhere): [`allocate_on`](Server::allocate_on)
    /// stream 0, refused where the slot would need a wait.
    pub fn allocate(&mut self, size: u64) -> Option<(usize, u64)> {
        self.grant(0, size, Mode::NoWait).map(|g| (g.slot, g.offset))
    }

    /// [`allocate_on`](Server::allocate_on) where the slot it would hand
    /// out needs no wait: `Some(slot, offset)`; `None`: nothing changed
    /// and nothing counted (call `allocate_on`, which decides).
    pub fn allocate_unwaited(&mut self, stream: u32, size: u64) -> Option<(usize, u64)> {
        self.grant(stream, size, Mode::Quiet).map(|g| (g.slot, g.offset))
    }

    /// Whether [`free_slot`](Server::free_slot) of the live slot `slot`
    /// would ask for an event (`false` also when it is not live).
    pub fn free_records(&self, slot: usize) -> bool {
        self.live.get(slot).is_some_and(|&l| l) && self.handoffs.as_ref().is_some_and(|h| h.handed[slot])
    }

    /// A slot for `size` bytes on the plan's stream `stream`, or `None`
    /// (the caller takes the memory elsewhere). The caller must carry out
    /// the grant's waits on `stream` before it uses the block, then
    /// [`confirm`](Server::confirm) the grant; if a wait cannot be made, it
    /// [`cancel`](Server::cancel)s it and serves the request elsewhere.
    ///
    /// The server commits nothing about the waits before the confirmation:
    /// until then a later grant of bytes the same streams freed asks for
    /// its waits again, so a grant whose waits failed never lets another
    /// skip them.
    pub fn allocate_on(&mut self, stream: u32, size: u64) -> Option<Grant> {
        self.grant(stream, size, Mode::Wait)
    }

    /// The waits of `grant` (from [`allocate_on`](Server::allocate_on) on
    /// its stream, `stream`) were made: the stream is ordered after each
    /// free they name, which later grants of those bytes count on. Call it
    /// once every wait of the grant was made on the device (or found
    /// passed already), and never for waits that were not.
    pub fn confirm(&mut self, stream: u32, grant: &Grant) {
        let Some(h) = &mut self.handoffs else { return };
        let b = stream as usize;
        for w in &grant.waits {
            let a = w.stream as usize;
            if let Some(done) = h.waited.get_mut(b).and_then(|row| row.get_mut(a)) {
                *done = (*done).max(w.ticket);
            }
            if let Some(handed) = h.handed.get_mut(w.slot) {
                *handed = true;
            }
        }
    }

    /// `grant` (from [`allocate_on`](Server::allocate_on)) was not carried
    /// out: one of its waits could not be made, and the request is served
    /// elsewhere. Its slot is free again (servable when matched next), and
    /// nothing of its waits is assumed made. The request counts as refused
    /// instead of served. `false` (nothing changes) when the slot is not
    /// live.
    pub fn cancel(&mut self, grant: &Grant) -> bool {
        let j = grant.slot;
        match self.live.get_mut(j) {
            Some(l @ true) => *l = false,
            _ => return false,
        }
        let stream = self.plan.slots[j].stream as usize;
        self.lanes[stream].live -= 1;
        self.live_count -= 1;
        let pieces = self.pieces.of(j);
        self.holder[pieces].fill(0);
        self.served -= 1;
        self.refused += 1;
        true
    }

    /// An event was recorded on `stream` after its free number `ticket`,
    /// as a [`Wait::record`], [`free_slot`](Server::free_slot) or
    /// [`seal`](Server::seal) asked: later waits for its frees up to
    /// `ticket` use it instead of asking for another. Say it only once the
    /// event is recorded; an event that could not be recorded is simply
    /// not reported (a later wait asks for one again).
    pub fn recorded(&mut self, stream: u32, ticket: u64) {
        if let Some(h) = &mut self.handoffs {
            let a = stream as usize;
            if let (Some(r), Some(&f)) = (h.recorded.get_mut(a), h.frees.get(a)) {
                *r = (*r).max(ticket.min(f));
            }
        }
    }

    /// Slot `slot` is never handed out again: a request that matches it is
    /// refused (the caller serves it elsewhere) and matching goes on after
    /// it, so the stream's later requests still meet their own slots.
    /// `false` when there is no such slot or it was diverted already. A
    /// live slot stays live until freed. Nothing else changes: the bytes
    /// it would have taken keep the record of who freed them last, so a
    /// later slot on them waits for that free as it would have for this
    /// slot's.
    pub fn divert(&mut self, slot: usize) -> bool {
        match self.diverted.get_mut(slot) {
            Some(d @ false) => {
                *d = true;
                true
            }
            _ => false,
        }
    }

    /// Whether slot `slot` was diverted ([`divert`](Server::divert)).
    pub fn is_diverted(&self, slot: usize) -> bool {
        self.diverted.get(slot).is_some_and(|&d| d)
    }

    fn grant(&mut self, stream: u32, size: u64, mode: Mode) -> Option<Grant> {
        // A quiet request that gets nothing leaves no trace.
        let refuse = |s: &mut Server| {
            if mode != Mode::Quiet {
                s.refused += 1;
            }
            None
        };
        let Some(lane) = self.lanes.get(stream as usize) else {
            return refuse(self);
        };
        let slots = &self.plan.slots;
        let mut i = Some(lane.cursor).filter(|&c| c < lane.order.len());
        let mut looked = 0;
        let found = loop {
            match i {
                Some(at) if looked < self.window => {
                    if slots[lane.order[at]].size == size {
                        break Some(at);
                    }
                    looked += 1;
                    i = Self::after(lane, at);
                }
                _ => break None,
            }
        };
        let Some(at) = found else {
            return refuse(self);
        };
        let j = lane.order[at];
        if self.diverted[j] {
            if mode == Mode::Quiet {
                return None;
            }
            // Matched, and served elsewhere: the stream's next request
            // matches from the slot after.
            let lane = &mut self.lanes[stream as usize];
            lane.cursor = Self::after(lane, at).unwrap_or(lane.order.len());
            self.skipped += looked as u64;
            self.passed += 1;
            return refuse(self);
        }
        // Placed inside the arena (a plan's fields are public: one made by
        // hand may say otherwise: such a slot has no pieces), and no live
        // block on any of its pieces.
        let pieces = self.pieces.of(j);
        let offset = match slots[j].offset {
            Some(offset)
                if !self.live[j]
                    && !pieces.is_empty()
                    && self.holder[pieces.clone()].iter().all(|&h| h == 0) =>
            {
                offset
            }
            _ => return refuse(self),
        };
        let waits = match &self.handoffs {
            Some(h) => match h.take(stream, pieces.clone(), mode == Mode::Wait) {
                Some(w) => w,
                None => return refuse(self),
            },
            None => Vec::new(),
        };
        let lane = &mut self.lanes[stream as usize];
        self.skipped += looked as u64;
        lane.cursor = Self::after(lane, at).unwrap_or(lane.order.len());
        lane.live += 1;
        self.live[j] = true;
        self.live_count += 1;
        // Slots number at most `MAX_BLOCKS` by plan (`u32` is plenty); a
        // plan made by hand with more still keeps them apart.
        let tag = u32::try_from(j + 1).unwrap_or(u32::MAX);
        self.holder[pieces].fill(tag);
        self.served += 1;
        Some(Grant {
            slot: j,
            offset,
            waits,
        })
    }

    /// Slot `slot`'s block is freed. `false` (and nothing changes) when it
    /// was not live. In a plan of several streams, a later stream that
    /// takes these bytes records an event on this one first
    /// ([`Wait::record`]); [`free_slot`](Server::free_slot) avoids that.
    pub fn free(&mut self, slot: usize) -> bool {
        self.release(slot, false).is_some()
    }

    /// Slot `slot`'s block is freed in its stream's order: `None` (and
    /// nothing changes) when it was not live; `Some(Some(t))`: record an
    /// event on the slot's stream now, filed under `t` (its bytes went to
    /// another stream before, and will again), and say so with
    /// [`recorded`](Server::recorded).
    pub fn free_slot(&mut self, slot: usize) -> Option<Option<u64>> {
        self.release(slot, true)
    }

    fn release(&mut self, slot: usize, may_record: bool) -> Option<Option<u64>> {
        match self.live.get_mut(slot) {
            Some(l @ true) => *l = false,
            _ => return None,
        }
        let s = self.plan.slots[slot];
        self.lanes[s.stream as usize].live -= 1;
        self.live_count -= 1;
        // A live slot has pieces (`grant` hands out no other), which it
        // alone holds.
        let pieces = self.pieces.of(slot);
        self.holder[pieces.clone()].fill(0);
        let Some(h) = &mut self.handoffs else {
            return Some(None);
        };
        let a = s.stream as usize;
        h.frees[a] += 1;
        let ticket = h.frees[a];
        h.freed[pieces].fill(Freed {
            stream: s.stream,
            ticket,
            slot,
        });
        if may_record && h.handed[slot] {
            Some(Some(ticket))
        } else {
            Some(None)
        }
    }

    /// `stream` ends (its handle goes away): `Some(t)` asks for an event
    /// recorded on it now, filed under `t`, so that other streams never
    /// need one recorded later (say so with [`recorded`](Server::recorded)).
    pub fn seal(&self, stream: u32) -> Option<u64> {
        let h = self.handoffs.as_ref()?;
        let a = stream as usize;
        let f = *h.frees.get(a)?;
        (h.recorded[a] < f).then_some(f)
    }

    /// The live slot whose block starts at `offset`, if any.
    pub fn live_slot_at(&self, offset: u64) -> Option<usize> {
        let p = self.pieces.starts.binary_search(&offset).ok()?;
        let slot = (self.holder[p] as usize).checked_sub(1)?;
        (self.plan.slots.get(slot)?.offset == Some(offset)).then_some(slot)
    }

    /// How many slots are live.
    pub fn live_slots(&self) -> usize {
        self.live_count
    }

    /// How many slots of the plan's stream `stream` are live.
    pub fn live_slots_of(&self, stream: u32) -> usize {
        self.lanes.get(stream as usize).map_or(0, |l| l.live)
    }

    /// The live slots' byte ranges.
    #[cfg(test)]
    pub fn live_ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.live.iter().enumerate().filter(|(_, &l)| l).map(|(i, _)| {
            let s = &self.plan.slots[i];
            let o = s.offset.expect("a live slot is placed");
            (o, o + round(s.size))
        })
    }
}

impl Handoffs {
    /// Stream `b` takes the pieces `pieces` (no live slot holds them):
    /// the waits on the other streams that freed them last are returned
    /// (`None` if there are some and `may_wait` is off). Nothing changes:
    /// the waits count as made once the grant is confirmed
    /// ([`Server::confirm`]), and the events they ask for as recorded once
    /// reported ([`Server::recorded`]).
    fn take(&self, b: u32, pieces: std::ops::Range<usize>, may_wait: bool) -> Option<Vec<Wait>> {
        // Per other stream, the latest of its frees to wait for, and its
        // slot. A piece freed by `b` itself, or taken by a slot since (its
        // stream waited for this free, or freed it itself), asks for
        // nothing more than `waited` already says.
        let mut need: Vec<(u32, u64, usize)> = Vec::new();
        for f in &self.freed[pieces] {
            if f.ticket != 0 && f.stream != b && self.waited[b as usize][f.stream as usize] < f.ticket {
                match need.iter_mut().find(|n| n.0 == f.stream) {
                    Some(n) if n.1 < f.ticket => *n = (f.stream, f.ticket, f.slot),
                    Some(_) => {}
                    None => need.push((f.stream, f.ticket, f.slot)),
                }
            }
        }
        if !need.is_empty() && !may_wait {
            return None;
        }
        need.sort_unstable();
        Some(
            need.into_iter()
                .map(|(a, ticket, slot)| {
                    // The wait covers the stream's earlier frees: only
                    // this slot's free needs its event at the free.
                    let ai = a as usize;
                    let record = (self.recorded[ai] < ticket).then_some(self.frees[ai]);
                    Wait {
                        stream: a,
                        ticket,
                        record,
                        slot,
                    }
                })
                .collect(),
        )
    }
}
