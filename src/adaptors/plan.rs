//! Serving allocations from a placement planned from a trace of an earlier
//! run.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::error::{Error, InvalidReason, Result};
use crate::plan::{round, DeviceProgram, Plan, Server, Sharing, Wait};
use crate::resource::MemoryResource;
use crate::stream::{Event, Stream};
use crate::trace::device_time::is_not_ready;
use crate::trace::Trace;

/// How many slots ahead an allocation looks for a slot of its size.
pub const PLAN_WINDOW: usize = 16;

/// The handles a trace keeps for the two default streams.
pub(super) const LEGACY_HANDLES: [u64; 2] = [0, 1];
pub(super) const PER_THREAD_HANDLE: u64 = 2;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The plans of one device's streams in a trace, waiting for the streams
/// of a later run: the legacy default stream's for that stream, the others
/// in the order their streams first allocated (the per-thread default
/// stream has none).
///
/// Each stream gets its own arena ([`Plan::for_program`]), or, with a lag,
/// all of them share one ([`Plan::for_streams`]): bytes go from one stream
/// to another where the recorded run freed them at least the lag before
/// the other stream allocated them, and the taking stream waits for the
/// free with an event.
#[derive(Debug, Default)]
pub struct StreamPlans {
    legacy: Mutex<Option<PlanShare>>,
    others: Mutex<VecDeque<PlanShare>>,
}

/// A stream's part of a plan: the arena, and the plan's stream it serves.
#[derive(Debug, Clone)]
pub struct PlanShare {
    /// The arena (shared by the plan's streams when it has several).
    pub arena: Arc<PlannedArena>,
    /// The plan's stream (a lane of the arena).
    pub lane: u32,
}

impl StreamPlans {
    /// The plans of `device`'s streams in `trace`: an arena per stream
    /// (`lag` `None`), or one arena whose bytes pass from stream to stream
    /// where the recorded run freed them at least `lag` before another
    /// stream allocated them. A free counts on the stream of the
    /// allocation it frees. An error names the stream a plan could not be
    /// made for (too many allocations).
    pub fn from_trace(trace: &Trace, device: usize, lag: Option<Duration>) -> Result<StreamPlans> {
        let sharing = lag.map(|lag| Sharing::HostLag(u64::try_from(lag.as_nanos()).unwrap_or(u64::MAX)));
        StreamPlans::from_trace_sharing(trace, device, sharing)
    }

    /// The plans of `device`'s streams in `trace`: an arena per stream
    /// (`sharing` `None`), or one arena whose bytes pass from stream to
    /// stream by the rule `sharing` ([`Plan::for_streams_sharing`]). A
    /// rule that reads device times needs a trace recorded with them
    /// ([`RecordOptions::device_times`](crate::trace::RecordOptions::device_times)):
    /// without any, it is an error that says so.
    pub fn from_trace_sharing(trace: &Trace, device: usize, sharing: Option<Sharing>) -> Result<StreamPlans> {
        if sharing.is_some_and(Sharing::needs_device_times)
            && !trace
                .events
                .iter()
                .any(|e| e.device == device as u32 && e.device_ns.is_some())
        {
            return Err(InvalidReason::Other.error(format!(
                "sharing by device times, and the trace has none for device {device}: record it with device \
                 times (RecordOptions::device_times, the C ABI's trace_device:on)"
            )));
        }
        let handle = |stream: Option<u32>| {
            stream
                .and_then(|i| trace.streams.get(i as usize))
                .map(|s| s.handle)
        };
        // The per-thread default stream is left out (it gets no plan).
        let program = DeviceProgram::of(trace, device as u32, |s| handle(s) == Some(PER_THREAD_HANDLE));
        let order = &program.streams;
        let name =
            |stream: Option<u32>| handle(stream).map_or_else(|| "(none)".into(), |h| format!("{h:#x}"));
        let plans = StreamPlans::default();
        let put = |lane: usize, share: PlanShare| match handle(order[lane]) {
            Some(h) if LEGACY_HANDLES.contains(&h) => {
                lock(&plans.legacy).get_or_insert(share);
            }
            _ => lock(&plans.others).push_back(share),
        };
        match sharing {
            Some(sharing) => {
                let plan = Plan::for_streams_sharing(&program.ops, sharing).map_err(|e| {
                    InvalidReason::Other.error(format!("the trace's streams on device {device}: {e}"))
                })?;
                let arena = Arc::new(PlannedArena::new(Arc::new(plan)));
                for lane in 0..order.len() {
                    put(
                        lane,
                        PlanShare {
                            arena: Arc::clone(&arena),
                            lane: lane as u32,
                        },
                    );
                }
            }
            None => {
                let own = program.per_stream();
                for (lane, ops) in own.iter().enumerate() {
                    let plan = Plan::for_program(ops).map_err(|e| {
                        InvalidReason::Other.error(format!("the trace's stream {}: {e}", name(order[lane])))
                    })?;
                    put(
                        lane,
                        PlanShare {
                            arena: Arc::new(PlannedArena::new(Arc::new(plan))),
                            lane: 0,
                        },
                    );
                }
            }
        }
        Ok(plans)
    }

    /// Every arena diverts slots whose waits hold their stream on the
    /// device, up to `bytes` each ([`PlannedArena::divert_stalls`]).
    #[deprecated(note = "a recorded run showed diverting gives up memory without saving time; to be removed")]
    #[allow(deprecated)]
    pub fn divert_stalls(&self, bytes: u64) {
        self.each_arena(|a| a.divert_stalls(bytes));
    }

    /// Every arena times its waits ([`PlannedArena::time_waits`]).
    pub fn time_waits(&self, on: bool) {
        self.each_arena(|a| a.time_waits(on));
    }

    /// `f` on every plan not taken yet (an arena shared by streams once
    /// per stream).
    fn each_arena(&self, f: impl Fn(&PlannedArena)) {
        let legacy = lock(&self.legacy);
        let others = lock(&self.others);
        for share in legacy.iter().chain(others.iter()) {
            f(&share.arena);
        }
    }

    /// The plan of a stream seen for the first time: the legacy stream's
    /// for it (`legacy`), else the next one; `None` when none is left.
    pub fn take(&self, legacy: bool) -> Option<PlanShare> {
        if legacy {
            lock(&self.legacy).take()
        } else {
            lock(&self.others).pop_front()
        }
    }
}

/// A plan at work: its [`Server`] and its arena, one allocation from the
/// upstream resource, made at the first allocation from it.
///
/// Every slot is allocated and freed in the order of its stream (a free on
/// another stream is first made to wait for, see
/// [`PlannedArena::free_on`]), so a slot freed there is reusable there at
/// once, as a pool's block would be. Where the plan has several streams
/// (lanes), a stream that takes bytes another freed last waits first for
/// an event recorded on the other after that free ([`Server::allocate_on`]):
/// recorded at the free where the server asks for it, else at the
/// allocation. The server hands a slot out only if no live block overlaps
/// it.
#[derive(Debug)]
pub struct PlannedArena {
    plan: Arc<Plan>,
    /// The plan's streams.
    lanes: usize,
    inner: Mutex<ArenaState>,
    served: AtomicU64,
    refused: AtomicU64,
}

/// Events kept per lane; an older one is reused (a wait for it takes a
/// later one, which orders after it too).
const EVENTS_KEPT: usize = 64;

/// A wait that held its stream this long on the device diverts its slot
/// ([`PlannedArena::divert_stalls`]).
pub const STALL_MS: f32 = 0.2;

/// Waits timed and not read yet, at most (more go untimed).
const PROBES_KEPT: usize = 256;

/// What a shared plan's waits cost: how many the device was asked for, how
/// many it had no need of (the other stream's free was done already), how
/// many events were recorded for them, and, where the waits are timed
/// ([`PlannedArena::time_waits`], or while [`PlannedArena::divert_stalls`]
/// has budget), how long they held their streams on the device.
///
/// A plan of one stream never waits: all zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanWaits {
    /// Waits a stream made for another's frees before using their bytes
    /// (one per other stream and slot at most).
    pub waits: u64,
    /// Waits not made because the device had passed the other stream's free
    /// already when the bytes were taken (its event was complete).
    pub passed: u64,
    /// Events recorded for those waits, at the frees and at the waits.
    pub events: u64,
    /// Waits timed on the device and read back (slots of the repeated step
    /// only: the others are not asked for again).
    pub timed: u64,
    /// The time the timed waits held their streams, added up, in
    /// nanoseconds (the device's timer resolves about half a microsecond).
    pub stalled_ns: u64,
    /// Slots granted whose waits could not be made (an event that could
    /// not be recorded, a wait the runtime refused, the other stream
    /// capturing): the request was served elsewhere and the slot stayed
    /// free, to be granted again with the same waits.
    pub failed: u64,
}

/// Field by field (the waits of several arenas).
impl std::ops::Add for PlanWaits {
    type Output = PlanWaits;

    fn add(self, other: PlanWaits) -> PlanWaits {
        PlanWaits {
            waits: self.waits + other.waits,
            passed: self.passed + other.passed,
            events: self.events + other.events,
            timed: self.timed + other.timed,
            stalled_ns: self.stalled_ns + other.stalled_ns,
            failed: self.failed + other.failed,
        }
    }
}

/// What [`PlannedArena::divert_stalls`] and [`PlannedArena::time_waits`]
/// keep: the budget left, the slots diverted, the counts, and the timed
/// waits not read yet. A wait is timed by a timing event recorded on the
/// taking stream before its waits and one after: the time between them is
/// the time the stream stood still. Only the repeated step's slots are
/// timed (the others are not asked for again).
#[derive(Debug, Default)]
struct Stalls {
    /// Bytes of slots that may still be diverted.
    budget: u64,
    /// Time every wait of the repeated step, budget or not.
    timing: bool,
    /// Slots diverted, and their bytes.
    slots: u64,
    bytes: u64,
    /// The waits' counts and their timed cost.
    counts: PlanWaits,
    /// Timed waits not read yet, in the order made: the slot, and the
    /// events recorded before and after its waits.
    pending: VecDeque<(usize, Event, Event)>,
    /// Read timing events, to record again.
    spare: Vec<Event>,
}

impl Stalls {
    /// A timing event recorded on `stream` now (`None`: it could not be).
    fn mark(&mut self, stream: &Stream) -> Option<Event> {
        let event = match self.spare.pop() {
            Some(e) => e,
            None => Event::for_stream(stream, true).ok()?,
        };
        match event.record(stream) {
            Ok(()) => Some(event),
            Err(_) => {
                self.spare.push(event);
                None
            }
        }
    }
}

#[derive(Debug)]
struct ArenaState {
    server: Server,
    /// The arena's address once made.
    base: Option<usize>,
    /// The arena serves nothing (the upstream refused it, it could not be
    /// made ready for every stream and is kept only to be given back, or
    /// it was given back).
    closed: bool,
    /// Slots freed while their stream was capturing: never handed out
    /// again (a graph may use their bytes whenever it is launched).
    kept: u64,
    lanes: Vec<LaneState>,
    stalls: Stalls,
}

#[derive(Debug, Default)]
struct LaneState {
    /// The stream serving the lane (from its first allocation), and
    /// whether it is gone (released).
    stream: Option<Stream>,
    released: bool,
    /// Events recorded on the lane's stream, by the free they follow.
    events: BTreeMap<u64, Event>,
}

impl ArenaState {
    /// Records an event on lane `lane`'s stream, filed under `ticket`.
    fn record(&mut self, lane: usize, ticket: u64) -> Result<()> {
        let l = &mut self.lanes[lane];
        let stream = l.stream.as_ref().ok_or_else(|| {
            InvalidReason::Other.error(format!("plan lane {lane} has no stream to record on"))
        })?;
        if stream.capturing()?.is_some() {
            return Err(Error::Capture {
                why: "a plan's block handed to another stream while its own stream is capturing".into(),
            });
        }
        // The oldest event is recorded again: a wait for its free takes a
        // later event, which orders after it too. If recording fails it is
        // put back as it was (a failed record leaves the event as it was).
        let (old, event) = match l.events.len() >= EVENTS_KEPT {
            true => match l.events.pop_first() {
                Some((t, e)) => (Some(t), e),
                None => (None, Event::for_stream(stream, false)?),
            },
            false => (None, Event::for_stream(stream, false)?),
        };
        if let Err(e) = event.record(stream) {
            if let Some(t) = old {
                l.events.insert(t, event);
            }
            return Err(e);
        }
        l.events.insert(ticket, event);
        self.stalls.counts.events += 1;
        Ok(())
    }

    /// Reads the timed waits the device has passed, in order, diverting
    /// the slots whose waits held their stream [`STALL_MS`] or more while
    /// the budget lasts.
    fn read_stalls(&mut self) {
        while let Some((slot, before, after)) = self.stalls.pending.front() {
            let ms = match before.elapsed_ms(after) {
                Err(e) if is_not_ready(&e) => return,
                // Unreadable: dropped, as if not timed.
                Err(_) => None,
                Ok(ms) => Some(ms),
            };
            let slot = *slot;
            let Some((_, before, after)) = self.stalls.pending.pop_front() else {
                return;
            };
            self.stalls.spare.extend([before, after]);
            if let Some(ms) = ms {
                self.stalls.counts.timed += 1;
                // The cast saturates; a negative time counts as none.
                self.stalls.counts.stalled_ns += (f64::from(ms.max(0.0)) * 1e6) as u64;
            }
            let size = round(self.server.plan().slots[slot].size);
            if ms.is_some_and(|ms| ms >= STALL_MS) && size <= self.stalls.budget && self.server.divert(slot) {
                self.stalls.budget -= size;
                self.stalls.slots += 1;
                self.stalls.bytes += size;
            }
        }
    }

    /// The event that `w` waits for, once recorded (see
    /// [`passed`](ArenaState::passed), which records it where `w` asks).
    fn event_for(&self, w: &Wait) -> Result<&Event> {
        let a = w.stream as usize;
        self.lanes[a]
            .events
            .range(w.ticket..)
            .next()
            .map(|(_, e)| e)
            .ok_or_else(|| {
                InvalidReason::Other.error(format!(
                    "no event recorded on plan lane {a} after its free {}",
                    w.ticket
                ))
            })
    }

    /// Whether the device has passed the free `w` waits for, so that the
    /// taking stream needs no wait at all (see [`PlannedArena::allocate`]).
    /// `false` also where that cannot be told: the wait is then made. The
    /// event is recorded first where `w` asks for one (once: the wait, if
    /// made, uses the same event).
    fn passed(&mut self, w: &Wait) -> Result<bool> {
        if let Some(t) = w.record {
            self.record(w.stream as usize, t)?;
            self.server.recorded(w.stream, t);
        }
        let done = self.event_for(w)?.is_complete().unwrap_or(false);
        self.stalls.counts.passed += u64::from(done);
        Ok(done)
    }

    /// `stream` (lane `b`'s) waits as `w` says, after
    /// [`passed`](ArenaState::passed) answered `false` for `w`.
    fn order_after(&mut self, w: &Wait, stream: &Stream) -> Result<()> {
        stream.wait_event(self.event_for(w)?)?;
        self.stalls.counts.waits += 1;
        Ok(())
    }
}

impl PlannedArena {
    /// Serves `plan` (with [`Server::for_program`]).
    pub fn new(plan: Arc<Plan>) -> PlannedArena {
        let server = Server::for_program(Arc::clone(&plan), PLAN_WINDOW);
        let lanes: Vec<LaneState> = (0..server.streams()).map(|_| LaneState::default()).collect();
        PlannedArena {
            plan,
            lanes: server.streams(),
            inner: Mutex::new(ArenaState {
                server,
                base: None,
                closed: false,
                kept: 0,
                lanes,
                stalls: Stalls::default(),
            }),
            served: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Serving starts at every stream's first slot of the plan's repeated
    /// step ([`Server::begin_repeated_step`]): for a plan that takes over a
    /// run at the start of a step, not at the start of the program.
    pub fn begin_repeated_step(&self) {
        lock(&self.inner).server.begin_repeated_step();
    }

    /// The plan served.
    pub fn plan(&self) -> &Arc<Plan> {
        &self.plan
    }

    /// How many streams the plan has (lanes of the arena).
    pub fn lanes(&self) -> usize {
        self.lanes
    }

    /// [`allocate`](PlannedArena::allocate) where it makes no call to the
    /// runtime: the arena made, lane `lane` bound to `stream` (which the
    /// caller knows is not capturing), and the slot free and needing no
    /// wait. `Some(ptr, slot)`: served;
    /// `None`: nothing done and nothing counted (call `allocate`, which
    /// decides). In a plan of several streams most requests are served so:
    /// only the first use of bytes another stream freed waits. A caller
    /// that makes a device current only for the runtime's sake can skip
    /// that here, and in [`free_ready`](PlannedArena::free_ready).
    pub fn allocate_ready(&self, lane: u32, bytes: usize, stream: &Stream) -> Option<(*mut c_void, usize)> {
        let mut st = lock(&self.inner);
        let base = st.base.filter(|_| !st.closed)?;
        let l = st.lanes.get(lane as usize)?;
        if l.released || l.stream.as_ref()?.as_raw() != stream.as_raw() {
            return None;
        }
        let (slot, offset) = st.server.allocate_unwaited(lane, bytes as u64)?;
        self.served.fetch_add(1, Ordering::Relaxed);
        // The server hands out only slots inside the arena.
        Some(((base + offset as usize) as *mut c_void, slot))
    }

    /// [`free`](PlannedArena::free) of slot `slot` by a stream not
    /// capturing, where it makes no call to the runtime (no event to
    /// record): `true`, freed; `false`: nothing done (call `free`).
    pub fn free_ready(&self, slot: usize) -> bool {
        let mut st = lock(&self.inner);
        if st.server.free_records(slot) {
            return false;
        }
        // Live (else `free_records`' `false` falls through to here and
        // `free_slot` says so) and asking for no event.
        matches!(st.server.free_slot(slot), Some(None))
    }

    /// A planned slot for `bytes` on `stream`, which serves the plan's
    /// stream `lane` (the first call for a lane binds it to its stream)
    /// and is not capturing, and its slot number; `None`: serve it
    /// elsewhere. The first call makes the arena from `upstream` on
    /// `stream` (and waits for it when other streams share it); if that
    /// fails, the plan serves nothing.
    pub fn allocate(
        &self,
        lane: u32,
        bytes: usize,
        stream: &Stream,
        upstream: &dyn MemoryResource,
    ) -> Option<(*mut c_void, usize)> {
        let mut st = lock(&self.inner);
        let shared = st.lanes.len() > 1;
        let l = st.lanes.get_mut(lane as usize)?;
        if l.released || l.stream.as_ref().is_some_and(|s| s.as_raw() != stream.as_raw()) {
            return None;
        }
        l.stream.get_or_insert_with(|| stream.clone());
        if st.base.is_none() && !st.closed {
            let size = usize::try_from(st.server.plan().arena).unwrap_or(0);
            match (size > 0).then(|| upstream.allocate(size, stream)) {
                Some(Ok(ptr)) => {
                    // Other streams use it without waiting for this one.
                    if let Err(e) = shared.then(|| stream.synchronize()).transpose() {
                        st.closed = true;
                        eprintln!(
                            "somalloc: a planned arena could not be made ready ({e}); served without it"
                        );
                        // SAFETY: just allocated on this stream, unused.
                        if unsafe { upstream.deallocate(ptr, size, stream) }.is_err() {
                            // Kept, unused, for `release` to give back.
                            st.base = Some(ptr as usize);
                        }
                    } else {
                        st.base = Some(ptr as usize);
                    }
                }
                other => {
                    st.closed = true;
                    if let Some(Err(e)) = other {
                        eprintln!(
                            "somalloc: a planned arena of {size} bytes was refused ({e}); served without it"
                        );
                    }
                }
            }
        }
        if st.closed {
            return None;
        }
        let base = st.base?;
        let Some(grant) = st.server.allocate_on(lane, bytes as u64) else {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        // Bytes another stream freed where the device has passed that free
        // need no wait: the event recorded after the free is complete, so
        // every use of the bytes before it is done, and events on one stream
        // complete in order (a later event of that stream, which may stand
        // for the free, completing means the free's point did). Asking costs
        // the host a query; a wait costs the taking stream a dependency on
        // the device, even with nothing left to wait for.
        //
        // The server counts none of the grant's waits as made until
        // confirmed: a wait that fails cancels the grant (its slot is free
        // again, and a later grant of those bytes asks for the same waits).
        let mut open = Vec::with_capacity(grant.waits.len());
        for w in &grant.waits {
            match st.passed(w) {
                Ok(true) => {}
                Ok(false) => open.push(w),
                Err(_) => {
                    // No event to order after.
                    self.cancel(&mut st, &grant, None);
                    return None;
                }
            }
        }
        // The waits made are timed for slots that come again (those of the
        // repeated step), when asked for or while one of this size may still
        // be diverted.
        let again = st.server.plan().wrap_to.is_some_and(|w| grant.slot >= w);
        let timed = st.stalls.timing || st.stalls.budget >= round(bytes as u64);
        let before = match again && !open.is_empty() && timed {
            true => {
                st.read_stalls();
                (st.stalls.pending.len() < PROBES_KEPT)
                    .then(|| st.stalls.mark(stream))
                    .flatten()
            }
            false => None,
        };
        for w in open {
            if st.order_after(w, stream).is_err() {
                // The bytes cannot be ordered after the other stream's use:
                // the request goes elsewhere. (A wait made before this one
                // only orders the stream further; none counts as made.)
                self.cancel(&mut st, &grant, before);
                return None;
            }
        }
        st.server.confirm(lane, &grant);
        if let Some(before) = before {
            match st.stalls.mark(stream) {
                Some(after) => st.stalls.pending.push_back((grant.slot, before, after)),
                None => st.stalls.spare.push(before),
            }
        }
        self.served.fetch_add(1, Ordering::Relaxed);
        // The server hands out only slots inside the arena.
        Some(((base + grant.offset as usize) as *mut c_void, grant.slot))
    }

    /// `grant` could not be carried out: its slot is free again and the
    /// request refused (served elsewhere); `before`, a timing event not
    /// used, is kept for later.
    fn cancel(&self, st: &mut ArenaState, grant: &crate::plan::Grant, before: Option<Event>) {
        st.server.cancel(grant);
        st.stalls.spare.extend(before);
        st.stalls.counts.failed += 1;
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether `ptr` lies in this arena, and if so the live slot it
    /// starts (`Some(None)`: inside, but no live block starts there).
    pub fn slot_at(&self, ptr: *mut c_void) -> Option<Option<usize>> {
        let st = lock(&self.inner);
        let offset = (ptr as usize).checked_sub(st.base?)? as u64;
        (offset < st.server.plan().arena).then(|| st.server.live_slot_at(offset))
    }

    /// The stream serving slot `slot`'s lane, if bound.
    pub fn stream_of(&self, slot: usize) -> Option<Stream> {
        let st = lock(&self.inner);
        let lane = st.server.plan().slots.get(slot)?.stream as usize;
        st.lanes.get(lane)?.stream.clone()
    }

    /// Slot `slot` freed in the order of its stream; `capturing`: that
    /// stream is capturing (the slot is then kept out of use for good). An
    /// error when the slot was not live (nothing changes).
    pub fn free(&self, slot: usize, capturing: bool) -> Result<()> {
        let mut st = lock(&self.inner);
        if capturing {
            st.kept += 1;
            return Ok(());
        }
        match st.server.free_slot(slot) {
            None => {
                Err(InvalidReason::UnknownAllocation.error(format!("plan slot {slot} freed but not live")))
            }
            Some(None) => Ok(()),
            Some(Some(ticket)) => {
                let lane = st.server.plan().slots[slot].stream as usize;
                // Without this event, a later stream records one itself
                // (`Wait::record` is then asked for again): none is lost.
                if st.record(lane, ticket).is_ok() {
                    st.server.recorded(lane as u32, ticket);
                }
                Ok(())
            }
        }
    }

    /// Slot `slot`, allocated on `own`, freed in the order of `on`: `own`
    /// waits for the current end of `on` (an event), then the slot is
    /// free in `own`'s order. Refused (nothing freed) while either stream
    /// is capturing, where that wait would join the capture.
    pub fn free_on(&self, slot: usize, own: &Stream, on: &Stream) -> Result<()> {
        if own.capturing()?.is_some() || on.capturing()?.is_some() {
            return Err(Error::Capture {
                why: "a planned block freed on another stream than its own while one of the two \
                         is capturing: free it on the stream it was allocated on"
                    .into(),
            });
        }
        let event = Event::for_stream(own, false)?;
        event.record(on)?;
        own.wait_event(&event)?;
        self.free(slot, false)
    }

    /// Lane `lane`'s stream, `stream`, is done with the plan if none of
    /// its slots is live (`Ok(false)`, nothing done, while some are): it
    /// is served elsewhere from then on. When no lane is left, the arena
    /// goes back to `upstream` on `stream`, after the other lanes' last
    /// frees.
    pub fn release(&self, lane: u32, stream: &Stream, upstream: &dyn MemoryResource) -> Result<bool> {
        let mut st = lock(&self.inner);
        if st.server.live_slots_of(lane) > 0 {
            return Ok(false);
        }
        let l = lane as usize;
        if l >= st.lanes.len() {
            return Ok(true);
        }
        if st.lanes[l].stream.is_none() {
            st.lanes[l].stream = Some(stream.clone());
        }
        // Later streams will wait for this one's frees with no stream to
        // record on: record after the last one now.
        if let Some(ticket) = st.server.seal(lane) {
            st.record(l, ticket)?;
            st.server.recorded(lane, ticket);
        }
        st.lanes[l].released = true;
        if st.lanes.iter().any(|l| !l.released) || st.server.live_slots() > 0 {
            return Ok(true);
        }
        if let Some(base) = st.base {
            // Every use of the arena by another lane ended before its last
            // recorded free (its slots are all freed). A wait that fails
            // leaves the arena as it was, to be released again.
            for (_, other) in st.lanes.iter().enumerate().filter(|(i, _)| *i != l) {
                if let Some((_, e)) = other.events.last_key_value() {
                    stream.wait_event(e)?;
                }
            }
            st.base = None;
            let size = st.server.plan().arena as usize;
            // SAFETY: the arena was allocated from `upstream` with these
            // bytes; no slot of it is live, and every use of a freed slot
            // was ordered before its free on its stream, which this stream
            // now follows (its own, or the event just waited for).
            if let Err(e) = unsafe { upstream.deallocate(base as *mut c_void, size, stream) } {
                st.base = Some(base);
                return Err(e);
            }
        }
        st.closed = true;
        Ok(true)
    }

    /// Diverts slots whose waits hold their stream on the device, up to
    /// `bytes` of them in all (0, the default: none): see [`STALL_MS`].
    /// A plan of one stream never waits, so this changes nothing there.
    ///
    /// A plan shared by streams keeps its memory to what the recorded run
    /// needed by making a stream wait where it would take bytes the other
    /// stream's device has not released yet. A run that keeps another pace
    /// than the recorded one (a quicker host, the streams' kernels meeting
    /// otherwise on the device) reaches some of those bytes sooner, and the
    /// wait stalls the stream every step. Each wait for a slot of the
    /// repeated step is then timed on the device (two timing events on the
    /// waiting stream, read at later waits), and a slot whose wait lasted
    /// [`STALL_MS`] or more is served by the resource behind the plan from
    /// then on ([`Server::divert`]; its bytes rounded up to 512 count
    /// against `bytes`). The arena keeps its size: the run gives up at most
    /// `bytes` of memory for time.
    ///
    /// Deprecated: on the two-stream benchmark (one H100, three recordings
    /// each served with and without it) diverting moved the step time by
    /// -0.66 to +0.31 ms and raised the peak by 600 to 800 MiB; the default
    /// margin of [`Sharing::Device`] since makes the waits short. It keeps
    /// working until it is removed.
    #[deprecated(note = "a recorded run showed diverting gives up memory without saving time; to be removed")]
    pub fn divert_stalls(&self, bytes: u64) {
        lock(&self.inner).stalls.budget = bytes;
    }

    /// Times every wait for a slot of the repeated step on the device
    /// (`on`), budget to divert or not: [`waits`](PlannedArena::waits)
    /// then says how long the plan's waits held their streams. It costs
    /// two timing events recorded per timed wait. Off by default.
    pub fn time_waits(&self, on: bool) {
        lock(&self.inner).stalls.timing = on;
    }

    /// The plan's waits so far, and what the timed ones cost on the device
    /// (those the device has passed: read now, and with a budget to
    /// divert, judged now as the next wait would judge them).
    pub fn waits(&self) -> PlanWaits {
        let mut st = lock(&self.inner);
        st.read_stalls();
        st.stalls.counts
    }

    /// Slots diverted ([`divert_stalls`](PlannedArena::divert_stalls)),
    /// and their bytes (each rounded up to 512).
    pub fn diverted(&self) -> (u64, u64) {
        let st = lock(&self.inner);
        (st.stalls.slots, st.stalls.bytes)
    }

    /// Allocations served from the arena, and allocations it had no slot
    /// for.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.served.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
        )
    }

    /// The arena's bytes once made (0 before, or when it could not be).
    pub fn arena_bytes(&self) -> u64 {
        let st = lock(&self.inner);
        st.base.map_or(0, |_| st.server.plan().arena)
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
