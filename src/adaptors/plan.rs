//! Serving allocations from a placement planned from a trace of an earlier
//! run.

use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use crate::device::Device;
use crate::error::{Error, InvalidReason, Result};
use crate::resource::MemoryResource;
use crate::stream::{Event, Stream};
use crate::trace::plan::{Op, Plan, Server};
use crate::trace::{Action, Trace};

/// How many slots ahead an allocation looks for a slot of its size.
pub const PLAN_WINDOW: usize = 16;

/// The handles a trace keeps for the two default streams.
const LEGACY_HANDLES: [u64; 2] = [0, 1];
const PER_THREAD_HANDLE: u64 = 2;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The plans of one device's streams in a trace
/// ([`Plan::for_program`] each), waiting for the streams of a later run:
/// the legacy default stream's for that stream, the others in the order
/// their streams first allocated (the per-thread default stream has none).
#[derive(Debug, Default)]
pub struct StreamPlans {
    legacy: Mutex<Option<Arc<Plan>>>,
    others: Mutex<VecDeque<Arc<Plan>>>,
}

impl StreamPlans {
    /// The plans of `device`'s streams in `trace`. A free counts on the
    /// stream of the allocation it frees. An error names the stream a plan
    /// could not be made for (too many allocations).
    pub fn from_trace(trace: &Trace, device: usize) -> Result<StreamPlans> {
        let mut order: Vec<Option<u32>> = Vec::new();
        let mut ops: HashMap<Option<u32>, Vec<Op>> = HashMap::new();
        let mut allocations: HashMap<Option<u32>, usize> = HashMap::new();
        let mut live: HashMap<u64, (Option<u32>, usize)> = HashMap::new();
        for e in trace.events.iter().filter(|e| e.device as usize == device) {
            match e.action {
                Action::Allocate => {
                    let n = allocations.entry(e.stream).or_insert_with(|| {
                        order.push(e.stream);
                        0
                    });
                    // An address given out again without a free between
                    // (a lost free): the earlier block is taken as freed.
                    if let Some((s, k)) = live.insert(e.addr, (e.stream, *n)) {
                        ops.entry(s).or_default().push(Op::Free(k));
                    }
                    *n += 1;
                    ops.entry(e.stream).or_default().push(Op::Alloc(e.bytes));
                }
                Action::Free => {
                    if let Some((s, k)) = live.remove(&e.addr) {
                        ops.entry(s).or_default().push(Op::Free(k));
                    }
                }
                _ => {}
            }
        }
        let plans = StreamPlans::default();
        for stream in order {
            let handle = stream
                .and_then(|i| trace.streams.get(i as usize))
                .map(|s| s.handle);
            if handle == Some(PER_THREAD_HANDLE) {
                continue;
            }
            let plan = Plan::for_program(ops.get(&stream).map_or(&[][..], |o| &o[..])).map_err(|e| {
                let name = handle.map_or_else(|| "(none)".into(), |h| format!("{h:#x}"));
                InvalidReason::Other.error(format!("the trace's stream {name}: {e}"))
            })?;
            match handle {
                Some(h) if LEGACY_HANDLES.contains(&h) => {
                    lock(&plans.legacy).get_or_insert(Arc::new(plan));
                }
                _ => lock(&plans.others).push_back(Arc::new(plan)),
            }
        }
        Ok(plans)
    }

    /// The plan of a stream seen for the first time: the legacy stream's
    /// for it (`legacy`), else the next one; `None` when none is left.
    pub fn take(&self, legacy: bool) -> Option<Arc<Plan>> {
        if legacy {
            lock(&self.legacy).take()
        } else {
            lock(&self.others).pop_front()
        }
    }
}

/// One stream's plan at work: its [`Server`] and its arena, one
/// allocation from the upstream resource on the stream, made at the
/// stream's first allocation.
///
/// Every slot is allocated and freed in the order of the arena's stream
/// (a free on another stream is first made to wait for, see
/// [`PlannedArena::free_on`]), so a slot freed there is reusable there at
/// once, as a pool's block would be; the server hands a slot out only if
/// no live block overlaps it.
#[derive(Debug)]
pub struct PlannedArena {
    inner: Mutex<ArenaState>,
    served: AtomicU64,
    refused: AtomicU64,
}

#[derive(Debug)]
struct ArenaState {
    server: Server,
    /// The arena's address once made.
    base: Option<usize>,
    /// No arena will be made (the upstream refused it, or it was given
    /// back).
    closed: bool,
    /// Slots freed while their stream was capturing: a graph may use them
    /// at every replay, so they are never handed out again.
    kept: u64,
}

impl PlannedArena {
    /// Serves `plan` (with [`Server::for_program`]).
    pub fn new(plan: Arc<Plan>) -> PlannedArena {
        PlannedArena {
            inner: Mutex::new(ArenaState {
                server: Server::for_program(plan, PLAN_WINDOW),
                base: None,
                closed: false,
                kept: 0,
            }),
            served: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// A planned slot for `bytes` on `stream` (the arena's stream, not
    /// capturing) and its slot number, or `None` (serve it elsewhere). The
    /// first call makes the arena from `upstream` on `stream`; if that
    /// fails, the plan serves nothing.
    pub fn allocate(
        &self,
        bytes: usize,
        stream: &Stream,
        upstream: &dyn MemoryResource,
    ) -> Option<(*mut c_void, usize)> {
        let mut st = lock(&self.inner);
        if st.base.is_none() && !st.closed {
            let size = usize::try_from(st.server.plan().arena).unwrap_or(0);
            match (size > 0).then(|| upstream.allocate(size, stream)) {
                Some(Ok(ptr)) => st.base = Some(ptr as usize),
                _ => st.closed = true,
            }
        }
        let base = st.base?;
        match st.server.allocate(bytes as u64) {
            Some((slot, offset)) => {
                self.served.fetch_add(1, Ordering::Relaxed);
                // Slots lie inside the arena (`Plan::with_slots`).
                Some(((base + offset as usize) as *mut c_void, slot))
            }
            None => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Whether `ptr` lies in this arena, and if so the live slot it
    /// starts (`Some(None)`: inside, but no live block starts there).
    pub fn slot_at(&self, ptr: *mut c_void) -> Option<Option<usize>> {
        let st = lock(&self.inner);
        let offset = (ptr as usize).checked_sub(st.base?)? as u64;
        (offset < st.server.plan().arena).then(|| st.server.live_slot_at(offset))
    }

    /// Slot `slot` freed in the order of the arena's stream; `capturing`:
    /// that stream is capturing (the slot is then kept out of use for
    /// good). An error when the slot was not live (nothing changes).
    pub fn free(&self, slot: usize, capturing: bool) -> Result<()> {
        let mut st = lock(&self.inner);
        if capturing {
            st.kept += 1;
            return Ok(());
        }
        if st.server.free(slot) {
            Ok(())
        } else {
            Err(InvalidReason::UnknownAllocation.error(format!("plan slot {slot} freed but not live")))
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
        let event = Event::new(&own.device())?;
        event.record(on)?;
        own.wait_event(&event)?;
        self.free(slot, false)
    }

    /// Gives the arena back to `upstream` on `stream` (its own) if no slot
    /// is live, after which the plan serves nothing; `false` (nothing done)
    /// while slots are live.
    pub fn release(&self, stream: &Stream, upstream: &dyn MemoryResource) -> Result<bool> {
        let mut st = lock(&self.inner);
        if st.server.live_slots() > 0 {
            return Ok(false);
        }
        st.closed = true;
        if let Some(base) = st.base.take() {
            let size = st.server.plan().arena as usize;
            // SAFETY: the arena was allocated from `upstream` on this
            // stream with these bytes; no slot of it is live, and every use
            // of a freed slot was ordered before its free on this stream.
            if let Err(e) = unsafe { upstream.deallocate(base as *mut c_void, size, stream) } {
                st.base = Some(base);
                return Err(e);
            }
        }
        Ok(true)
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

/// Serves allocations from a placement planned from a trace of an earlier
/// run of the same program, and passes the rest to the resource it wraps.
///
/// Record a run with a [`RecordingAdaptor`](crate::adaptors::RecordingAdaptor),
/// then wrap the next run's resource in a `PlanningAdaptor` made from that
/// trace: each stream of the trace becomes a plan ([`Plan::for_program`]:
/// every recorded allocation placed in one arena, the repeated step going
/// on for every step after the recording), taken by the streams of the new
/// run in the order they first allocate. An allocation gets its planned
/// slot only if no live block overlaps it; otherwise, and while its stream
/// is capturing, it goes to the inner resource. A run that strays from the
/// recorded one is therefore larger or slower, never wrong. See
/// [the memory history guide](crate::guide::memory_history).
///
/// ```no_run
/// use std::sync::Arc;
/// use somalloc::adaptors::PlanningAdaptor;
/// use somalloc::trace::Trace;
/// use somalloc::{Device, DeviceBuffer, MemPool, MemoryResource, Stream};
///
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let stream = Stream::new(&dev)?;
/// // A trace of an earlier run (a RecordingAdaptor's file).
/// let trace = Trace::read("run.trace")?;
/// let planned = Arc::new(PlanningAdaptor::new(Arc::new(MemPool::default_for(&dev)?), &trace)?);
/// let res: Arc<dyn MemoryResource> = planned.clone();
/// let buf = DeviceBuffer::<f32>::new_with(1 << 20, &res, &stream)?;
/// drop(buf);
/// let (served, refused) = planned.counts();
/// println!("{served} from the plan, {refused} not");
/// # Ok(()) }
/// ```
pub struct PlanningAdaptor {
    inner: Arc<dyn MemoryResource>,
    plans: StreamPlans,
    /// The streams seen, by handle, with their arenas.
    arenas: RwLock<HashMap<usize, Seen>>,
}

/// A stream seen, and its arena (`None`: no plan was left for it).
type Seen = (Stream, Option<Arc<PlannedArena>>);

impl fmt::Debug for PlanningAdaptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (served, refused) = self.counts();
        f.debug_struct("PlanningAdaptor")
            .field("served", &served)
            .field("refused", &refused)
            .finish_non_exhaustive()
    }
}

impl PlanningAdaptor {
    /// Serves the plans of `trace`'s streams on `inner`'s device, falling
    /// back to `inner`.
    pub fn new(inner: Arc<dyn MemoryResource>, trace: &Trace) -> Result<PlanningAdaptor> {
        let plans = StreamPlans::from_trace(trace, inner.device().ordinal())?;
        Ok(PlanningAdaptor {
            inner,
            plans,
            arenas: RwLock::new(HashMap::new()),
        })
    }

    /// The wrapped resource.
    pub fn inner(&self) -> &Arc<dyn MemoryResource> {
        &self.inner
    }

    /// Allocations served from the plans, and allocations they had no slot
    /// for (served by the inner resource).
    pub fn counts(&self) -> (u64, u64) {
        self.arenas
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter_map(|(_, a)| a.as_ref().map(|a| a.counts()))
            .fold((0, 0), |(s, r), (s2, r2)| (s + s2, r + r2))
    }

    /// Bytes of the arenas made.
    pub fn arena_bytes(&self) -> u64 {
        self.arenas
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter_map(|(_, a)| a.as_ref().map(|a| a.arena_bytes()))
            .sum()
    }

    /// Gives `stream`'s arena back to the inner resource if none of its
    /// blocks is live (`Ok(false)`: blocks are live, nothing done). The
    /// stream is served by the inner resource from then on; the counts
    /// stay.
    pub fn release(&self, stream: &Stream) -> Result<bool> {
        let key = stream.as_raw() as usize;
        let arenas = self.arenas.read().unwrap_or_else(|p| p.into_inner());
        match arenas.get(&key) {
            Some((own, Some(a))) => a.release(own, &*self.inner),
            _ => Ok(true),
        }
    }

    fn arena_of(&self, stream: &Stream) -> Option<Arc<PlannedArena>> {
        let key = stream.as_raw() as usize;
        if let Some((_, a)) = self.arenas.read().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return a.clone();
        }
        let mut arenas = self.arenas.write().unwrap_or_else(|p| p.into_inner());
        let (_, a) = arenas.entry(key).or_insert_with(|| {
            let legacy = LEGACY_HANDLES.contains(&(key as u64));
            let plan = match key as u64 {
                PER_THREAD_HANDLE => None,
                _ => self.plans.take(legacy),
            };
            (stream.clone(), plan.map(|p| Arc::new(PlannedArena::new(p))))
        });
        a.clone()
    }

    /// The arena `ptr` lies in, with its stream and the live slot `ptr`
    /// starts (`None`: no live block starts there).
    fn owner_of(&self, ptr: *mut c_void) -> Option<(Stream, Arc<PlannedArena>, Option<usize>)> {
        let arenas = self.arenas.read().unwrap_or_else(|p| p.into_inner());
        arenas.values().find_map(|(s, a)| {
            let a = a.as_ref()?;
            a.slot_at(ptr).map(|slot| (s.clone(), Arc::clone(a), slot))
        })
    }
}

// SAFETY: a block is either the inner resource's (passed through
// unchanged) or a live slot of a stream's arena, which the server hands
// out only if no live block overlaps it, inside the arena (one allocation
// of the inner resource, held until released with no slot live). A slot
// is allocated in its arena's stream order and freed in that order (a free
// on another stream makes the arena's stream wait for it first), so its
// reuse is ordered after every use of the block before.
unsafe impl MemoryResource for PlanningAdaptor {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<*mut c_void> {
        if bytes > 0 && stream.capturing()?.is_none() {
            if let Some(arena) = self.arena_of(stream) {
                if let Some((ptr, _)) = arena.allocate(bytes, stream, &*self.inner) {
                    return Ok(ptr);
                }
            }
        }
        self.inner.allocate(bytes, stream)
    }

    unsafe fn deallocate(&self, ptr: *mut c_void, bytes: usize, stream: &Stream) -> Result<()> {
        match self.owner_of(ptr) {
            // Inside an arena but no live block: freed already (never the
            // inner resource's, whose blocks lie outside every arena).
            Some((_, _, None)) => Err(InvalidReason::UnknownAllocation.error(format!(
                "free of {ptr:p}, inside a plan's arena but no live block of it"
            ))),
            Some((own, arena, Some(slot))) if own.as_raw() == stream.as_raw() => {
                arena.free(slot, stream.capturing()?.is_some())
            }
            Some((own, arena, Some(slot))) => arena.free_on(slot, &own, stream),
            // SAFETY: forwarded from the caller: not a block of an arena,
            // so the inner resource's.
            None => unsafe { self.inner.deallocate(ptr, bytes, stream) },
        }
    }

    fn device(&self) -> Device {
        self.inner.device()
    }

    fn placement(&self) -> crate::Placement {
        self.inner.placement()
    }
}
