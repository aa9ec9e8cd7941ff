//! `plan:PATH`: allocations served from a placement planned from a trace of
//! an earlier run of the same program (`trace:PATH`).
//!
//! Each stream of the trace becomes one plan ([`Plan::for_program`]):
//! every recorded allocation gets a slot in one arena, the repeated step's
//! slots serve every step after the recording. The streams of this run
//! take the plans of the recorded ones in the order they first allocate:
//! the legacy default stream takes the legacy stream's plan, every other
//! stream the next plan of a stream the trace saw (the per-thread default
//! stream has none). A stream's arena is one allocation from the pool, on
//! the stream, made at its first allocation.
//!
//! The [`Server`] hands a slot out only if no live block overlaps its
//! bytes (see `somalloc::trace::plan`): a run that strays from the
//! recorded one gets its allocations from the cache tier or the pool
//! instead, never overlapping memory. Every use of a slot is in the order
//! of the arena's stream: the allocation and the free of a slot happen
//! there (a free on another stream first makes the arena's stream wait for
//! it; see `state.rs`), so a slot freed there is reusable there at once,
//! as a pool's block would be.

use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use somalloc_rs::trace::plan::{Op, Plan, Server};
use somalloc_rs::trace::{Action, Trace};
use somalloc_rs::{MemPool, MemoryResource, Stream};

use crate::error::{CapiError, Status};

/// How many slots ahead an allocation looks for a slot of its size.
pub const WINDOW: usize = 16;

/// The plans of one device's streams, waiting for the streams of this run.
#[derive(Debug, Default)]
pub struct DevicePlans {
    legacy: Mutex<Option<Arc<Plan>>>,
    others: Mutex<VecDeque<Arc<Plan>>>,
    /// Over every stream of the device: allocations served from a plan,
    /// and allocations a plan had no free slot for.
    pub served: AtomicU64,
    pub refused: AtomicU64,
    /// Bytes of the arenas made.
    pub arena_bytes: AtomicU64,
}

/// The handles the trace format keeps for the two default streams.
const LEGACY_HANDLES: [u64; 2] = [0, 1];
const PER_THREAD_HANDLE: u64 = 2;

impl DevicePlans {
    /// The plans of `device`'s streams in the trace at `path`.
    pub fn load(path: &str, device: usize) -> Result<DevicePlans, CapiError> {
        let bad = |what: String| CapiError::new(Status::Config, format!("plan:{path}: {what}"));
        let trace = Trace::read(path).map_err(|e| bad(e.to_string()))?;
        DevicePlans::from_trace(&trace, device).map_err(bad)
    }

    pub fn from_trace(trace: &Trace, device: usize) -> Result<DevicePlans, String> {
        // Each stream's events in order, a free counted on the stream of
        // the allocation it frees; streams in the order they first
        // allocate.
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
        let plans = DevicePlans::default();
        for stream in order {
            let handle = stream
                .and_then(|i| trace.streams.get(i as usize))
                .map(|s| s.handle);
            if handle == Some(PER_THREAD_HANDLE) {
                continue;
            }
            let plan = Arc::new(Plan::for_program(&ops[&stream]).map_err(|e| {
                format!(
                    "stream {}: {e}",
                    handle.map_or_else(|| "(none)".into(), |h| format!("{h:#x}"))
                )
            })?);
            match handle {
                Some(h) if LEGACY_HANDLES.contains(&h) => {
                    let mut legacy = plans.legacy.lock().unwrap_or_else(|p| p.into_inner());
                    if legacy.is_none() {
                        *legacy = Some(plan);
                    }
                }
                _ => plans
                    .others
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push_back(plan),
            }
        }
        Ok(plans)
    }

    /// The plan of a stream of this run seen for the first time: the
    /// legacy stream's for it, else the next one.
    pub fn take(&self, legacy: bool) -> Option<Arc<Plan>> {
        if legacy {
            self.legacy.lock().unwrap_or_else(|p| p.into_inner()).take()
        } else {
            self.others.lock().unwrap_or_else(|p| p.into_inner()).pop_front()
        }
    }
}

/// One stream's plan: its server and its arena.
#[derive(Debug)]
pub struct StreamPlan {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    server: Server,
    /// The arena's address once made; `None` before, and for good after
    /// the pool refused it.
    arena: Option<usize>,
    refused_arena: bool,
    /// Slots freed while their stream was capturing: the graph may use
    /// their memory at every replay, so they are never handed out again.
    kept: u64,
}

impl StreamPlan {
    pub fn new(plan: Arc<Plan>) -> StreamPlan {
        StreamPlan {
            inner: Mutex::new(Inner {
                server: Server::for_program(plan, WINDOW),
                arena: None,
                refused_arena: false,
                kept: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for `size` bytes on `stream` (the plan's stream, not
    /// capturing), or `None`. The first call makes the arena.
    pub fn allocate(
        &self,
        size: usize,
        stream: &Stream,
        pool: &MemPool,
        counts: &DevicePlans,
    ) -> Option<(*mut c_void, u32)> {
        let mut inner = self.lock();
        if inner.arena.is_none() && !inner.refused_arena {
            let bytes = inner.server.plan().arena;
            match usize::try_from(bytes)
                .ok()
                .filter(|&b| b > 0)
                .map(|b| pool.allocate(b, stream))
            {
                Some(Ok(ptr)) => {
                    inner.arena = Some(ptr as usize);
                    counts.arena_bytes.fetch_add(bytes, Ordering::Relaxed);
                }
                // Out of memory, or an empty plan: served from elsewhere.
                _ => inner.refused_arena = true,
            }
        }
        let base = inner.arena?;
        match inner.server.allocate(size as u64) {
            Some((slot, offset)) => {
                counts.served.fetch_add(1, Ordering::Relaxed);
                // Slots lie inside the arena (`Plan::with_slots`) and are
                // fewer than `MAX_BLOCKS`.
                Some(((base + offset as usize) as *mut c_void, slot as u32))
            }
            None => {
                counts.refused.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Slot `slot` is freed in its stream's order; `capturing`: during a
    /// capture of that stream (the slot is then kept out of use for good).
    pub fn free(&self, slot: u32, capturing: bool) -> Result<(), CapiError> {
        let mut inner = self.lock();
        if capturing {
            inner.kept += 1;
            return Ok(());
        }
        if inner.server.free(slot as usize) {
            Ok(())
        } else {
            Err(CapiError::new(
                Status::Internal,
                format!("plan slot {slot} freed but not live"),
            ))
        }
    }

    /// Gives the arena back to the pool on `stream` if no slot is live
    /// (`false`: some are, nothing is done).
    pub fn release(&self, stream: &Stream, pool: &MemPool) -> Result<bool, CapiError> {
        let mut inner = self.lock();
        if inner.server.live_slots() > 0 {
            return Ok(false);
        }
        if let Some(base) = inner.arena.take() {
            inner.refused_arena = true;
            let bytes = inner.server.plan().arena as usize;
            // SAFETY: the arena was allocated from `pool` on this stream
            // with these bytes; no slot of it is live, and every use of a
            // freed slot was ordered before its free on this stream.
            unsafe { pool.deallocate(base as *mut c_void, bytes, stream)? };
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use somalloc_rs::trace::{RecordOptions, Recorder};

    fn temp(name: &str) -> String {
        let p = std::env::temp_dir().join(format!("somalloc-plan-{name}-{}", std::process::id()));
        p.to_str().expect("a UTF-8 temporary path").to_string()
    }

    #[test]
    fn each_recorded_stream_becomes_a_plan_in_order() {
        let path = temp("streams");
        let r = Recorder::to_file(&path, RecordOptions::default()).unwrap();
        // Stream 0x7000 first, then the legacy stream, then the per-thread
        // one; a free on another stream counts on the allocation's.
        for k in 0..8 {
            let t = r.now_ns();
            r.record(t, Action::Allocate, 0, Some(0x7000), 1 << 20, 0x10_0000 + k);
            r.record(t, Action::Allocate, 0, Some(0), 512, 0x20_0000 + k);
            r.record(t, Action::Free, 0, Some(0), 1 << 20, 0x10_0000 + k);
            r.record(t, Action::Free, 0, Some(0), 512, 0x20_0000 + k);
            r.record(t, Action::Allocate, 0, Some(2), 64, 0x30_0000 + k);
        }
        r.finish().unwrap();
        let plans = DevicePlans::load(&path, 0).unwrap();
        let legacy = plans.take(true).unwrap();
        assert_eq!((legacy.slots.len(), legacy.arena), (8, 512));
        assert!(plans.take(true).is_none(), "the legacy plan is taken once");
        let other = plans.take(false).unwrap();
        assert_eq!((other.slots.len(), other.arena), (8, 1 << 20));
        assert!(plans.take(false).is_none(), "the per-thread stream has no plan");
        // Another device's events are not this device's.
        assert!(DevicePlans::load(&path, 1).unwrap().take(false).is_none());
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_missing_or_broken_trace_is_a_configuration_error() {
        let e = DevicePlans::load("/nonexistent/run.trace", 0).unwrap_err();
        assert_eq!(e.status, Status::Config);
        assert!(e.text.contains("plan:/nonexistent/run.trace"), "{}", e.text);
        let path = temp("broken");
        std::fs::write(&path, b"not a trace").unwrap();
        assert_eq!(DevicePlans::load(&path, 0).unwrap_err().status, Status::Config);
        let _ = std::fs::remove_file(&path);
    }
}
