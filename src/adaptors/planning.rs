//! [`PlanningAdaptor`]: a resource that serves the plans of a trace's
//! streams, and passes the rest to the resource it wraps.

use std::collections::HashMap;
use std::ffi::c_void;
use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::plan::{PlanShare, PlanWaits, PlannedArena, StreamPlans, LEGACY_HANDLES, PER_THREAD_HANDLE};
use crate::device::Device;
use crate::error::{InvalidReason, Result};
use crate::plan::Sharing;
use crate::resource::MemoryResource;
use crate::stream::Stream;
use crate::trace::Trace;

/// Serves allocations from a placement planned from a trace of an earlier
/// run of the same program, and passes the rest to the resource it wraps.
///
/// Record a run with a [`RecordingAdaptor`](crate::adaptors::RecordingAdaptor),
/// then wrap the next run's resource in a `PlanningAdaptor` made from that
/// trace: each stream of the trace becomes a plan ([`Plan::for_program`](crate::plan::Plan::for_program):
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
    /// The streams seen, by handle, with their parts of the plans.
    arenas: RwLock<HashMap<usize, Seen>>,
}

/// A stream seen, and its part of a plan (`None`: no plan was left for
/// it).
type Seen = (Stream, Option<PlanShare>);

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
    /// Serves the plans of `trace`'s streams on `inner`'s device, an arena
    /// per stream, falling back to `inner`.
    pub fn new(inner: Arc<dyn MemoryResource>, trace: &Trace) -> Result<PlanningAdaptor> {
        Self::with_lag(inner, trace, None)
    }

    /// As [`new`](PlanningAdaptor::new), the streams sharing one arena
    /// where `lag` is `Some`: bytes pass from a stream to another where the
    /// recorded run freed them at least `lag` before the other allocated
    /// them (see [`Plan::for_streams`](crate::plan::Plan::for_streams)); the taking stream waits for the
    /// free with an event.
    pub fn with_lag(
        inner: Arc<dyn MemoryResource>,
        trace: &Trace,
        lag: Option<Duration>,
    ) -> Result<PlanningAdaptor> {
        let sharing = lag.map(|lag| Sharing::HostLag(u64::try_from(lag.as_nanos()).unwrap_or(u64::MAX)));
        Self::with_sharing(inner, trace, sharing)
    }

    /// As [`new`](PlanningAdaptor::new), the streams sharing one arena
    /// where `sharing` is `Some`, bytes passing from a stream to another by
    /// its rule (see [`Sharing`]; [`Sharing::Device`] needs a trace
    /// recorded with
    /// [device times](crate::trace::RecordOptions::device_times)).
    pub fn with_sharing(
        inner: Arc<dyn MemoryResource>,
        trace: &Trace,
        sharing: Option<Sharing>,
    ) -> Result<PlanningAdaptor> {
        let plans = StreamPlans::from_trace_sharing(trace, inner.device().ordinal(), sharing)?;
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

    /// The arenas in use, each once.
    fn arenas(&self) -> Vec<Arc<PlannedArena>> {
        let mut out: Vec<Arc<PlannedArena>> = Vec::new();
        for (_, share) in self.arenas.read().unwrap_or_else(|p| p.into_inner()).values() {
            if let Some(sh) = share {
                if !out.iter().any(|a| Arc::ptr_eq(a, &sh.arena)) {
                    out.push(Arc::clone(&sh.arena));
                }
            }
        }
        out
    }

    /// Allocations served from the plans, and allocations they had no slot
    /// for (served by the inner resource).
    pub fn counts(&self) -> (u64, u64) {
        self.sum(PlannedArena::counts)
    }

    /// `f` of every arena in use, added up.
    fn sum(&self, f: impl Fn(&PlannedArena) -> (u64, u64)) -> (u64, u64) {
        self.arenas()
            .iter()
            .map(|a| f(a))
            .fold((0, 0), |(x, y), (x2, y2)| (x + x2, y + y2))
    }

    /// Bytes of the arenas made.
    pub fn arena_bytes(&self) -> u64 {
        self.arenas().iter().map(|a| a.arena_bytes()).sum()
    }

    /// Each arena diverts the slots whose waits hold their stream on the
    /// device, up to `bytes` of them ([`PlannedArena::divert_stalls`]);
    /// for the arenas of streams not seen yet.
    #[deprecated(note = "a recorded run showed diverting gives up memory without saving time; to be removed")]
    #[allow(deprecated)]
    pub fn divert_stalls(self, bytes: u64) -> PlanningAdaptor {
        self.plans.divert_stalls(bytes);
        self
    }

    /// Each arena times its waits on the device
    /// ([`PlannedArena::time_waits`]); for the arenas of streams not seen
    /// yet.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use somalloc::adaptors::PlanningAdaptor;
    /// use somalloc::plan::{Sharing, DEVICE_MARGIN_NS};
    /// use somalloc::trace::Trace;
    /// use somalloc::{Device, MemPool};
    ///
    /// # fn main() -> somalloc::Result<()> {
    /// let dev = Device::get(0)?;
    /// // A trace of an earlier run of the program, recorded with device times.
    /// let trace = Trace::read("run.trace")?;
    /// let sharing = Some(Sharing::Device { margin_ns: DEVICE_MARGIN_NS });
    /// let planned = PlanningAdaptor::with_sharing(Arc::new(MemPool::default_for(&dev)?), &trace, sharing)?
    ///     .time_waits(true);
    /// // ... the program's steps, allocating through `planned` ...
    /// let w = planned.waits();
    /// println!("{} waits, {} timed, {:.2} ms stood still", w.waits, w.timed, w.stalled_ns as f64 / 1e6);
    /// # Ok(()) }
    /// ```
    pub fn time_waits(self, on: bool) -> PlanningAdaptor {
        self.plans.time_waits(on);
        self
    }

    /// The waits of the arenas in use, added up ([`PlannedArena::waits`]).
    pub fn waits(&self) -> PlanWaits {
        self.arenas()
            .iter()
            .fold(PlanWaits::default(), |sum, a| sum + a.waits())
    }

    /// Slots diverted ([`divert_stalls`](PlanningAdaptor::divert_stalls))
    /// and their bytes, over the arenas in use.
    pub fn diverted(&self) -> (u64, u64) {
        self.sum(PlannedArena::diverted)
    }

    /// `stream` is done with its plan if none of its blocks is live
    /// (`Ok(false)`: blocks are live, nothing done): it is served by the
    /// inner resource from then on, and its arena goes back to the inner
    /// resource once no stream uses it. The counts stay.
    pub fn release(&self, stream: &Stream) -> Result<bool> {
        let key = stream.as_raw() as usize;
        let arenas = self.arenas.read().unwrap_or_else(|p| p.into_inner());
        match arenas.get(&key) {
            Some((own, Some(sh))) => sh.arena.release(sh.lane, own, &*self.inner),
            _ => Ok(true),
        }
    }

    fn share_of(&self, stream: &Stream) -> Option<PlanShare> {
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
            (stream.clone(), plan)
        });
        a.clone()
    }

    /// The arena `ptr` lies in, and the live slot `ptr` starts (`None`: no
    /// live block starts there).
    fn owner_of(&self, ptr: *mut c_void) -> Option<(Arc<PlannedArena>, Option<usize>)> {
        self.arenas()
            .into_iter()
            .find_map(|a| a.slot_at(ptr).map(|slot| (a, slot)))
    }
}

// SAFETY: a block is either the inner resource's (passed through
// unchanged) or a live slot of an arena, which the server hands out only
// if no live block overlaps it, inside the arena (one allocation of the
// inner resource, held until released with no slot live). A slot is
// allocated in its stream's order and freed in that order (a free on
// another stream makes the slot's stream wait for it first), so its reuse
// by the same stream is ordered after every use of the block before; a
// stream that takes bytes another stream freed last first waits for an
// event recorded on that stream after the free (`Server::allocate_on`,
// `ArenaState::order_after`; a wait that cannot be made keeps the slot
// out of use).
unsafe impl MemoryResource for PlanningAdaptor {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<*mut c_void> {
        if bytes > 0 && stream.capturing()?.is_none() {
            if let Some(sh) = self.share_of(stream) {
                if let Some((ptr, _)) = sh.arena.allocate(sh.lane, bytes, stream, &*self.inner) {
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
            Some((_, None)) => Err(InvalidReason::UnknownAllocation.error(format!(
                "free of {ptr:p}, inside a plan's arena but no live block of it"
            ))),
            Some((arena, Some(slot))) => match arena.stream_of(slot) {
                Some(own) if own.as_raw() == stream.as_raw() => {
                    arena.free(slot, stream.capturing()?.is_some())
                }
                Some(own) => arena.free_on(slot, &own, stream),
                None => Err(InvalidReason::Other
                    .error(format!("plan slot {slot} is live but its lane has no stream"))),
            },
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
