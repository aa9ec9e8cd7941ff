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
//! With `plan_share:MS`, the recorded streams' blocks share one arena
//! instead ([`Plan::for_streams`]): bytes pass from one stream to another
//! where the recorded run freed them at least MS milliseconds before the
//! other stream allocated them, and the taking stream waits for the free
//! with an event. A stream's free reaches the device later than the host:
//! MS is how much later it may be before the other stream waits for it.
//! The arena is one allocation from the pool, on the first stream that
//! allocates, which then waits for it once.
//!
//! With `plan_share:device` (or `device+MS`), bytes pass from one stream to
//! another only where the recorded run's device had reached the free (at
//! least MS milliseconds, 5 by default) before it reached the other
//! stream's allocation: the wait then costs the taking stream nothing, as
//! far as the run goes as the recorded one did. The trace must have been
//! recorded with `trace_device:on`.
//!
//! With `plan_divert:SIZE` as well, a slot whose wait held its stream on
//! the device ([`PlannedArena::divert_stalls`]) is served by the cache tier
//! or the pool from then on, up to SIZE bytes of such slots: a run whose
//! pace differs from the recorded one's gives up some memory instead of
//! waiting every step.
//!
//! [`PlannedArena::divert_stalls`]: somalloc_rs::adaptors::PlannedArena::divert_stalls
//!
//! The library's `StreamPlans` and `PlannedArena` (those of its
//! `PlanningAdaptor`) do the work: a slot is handed out only if no live
//! block overlaps it, so a run that strays from the recorded one gets its
//! allocations from the cache tier or the pool instead, never overlapping
//! memory; a slot is allocated and freed in the order of its arena's
//! stream (a free on another stream first makes that stream wait for it;
//! see `state.rs`).

use somalloc_rs::adaptors::StreamPlans;
use somalloc_rs::trace::plan::Sharing;
use somalloc_rs::trace::Trace;

use crate::error::{CapiError, Status};

/// The plans of `device`'s streams in the trace at `path`: one arena per
/// stream, or one shared by the streams with bytes passing between them
/// by the rule `share` (`plan_share:`).
/// With `divert` bytes, a shared plan serves the slots whose waits stall
/// their stream elsewhere, up to that much (`plan_divert:`); with
/// `time_waits`, it times every wait on the device (`plan_time_waits:`).
pub fn load(
    path: &str,
    device: usize,
    share: Option<Sharing>,
    divert: u64,
    time_waits: bool,
) -> Result<StreamPlans, CapiError> {
    let bad = |what: String| CapiError::new(Status::Config, format!("plan:{path}: {what}"));
    let trace = Trace::read(path).map_err(|e| bad(e.to_string()))?;
    let plans = StreamPlans::from_trace_sharing(&trace, device, share).map_err(|e| bad(e.to_string()))?;
    plans.divert_stalls(divert);
    plans.time_waits(time_waits);
    Ok(plans)
}

#[cfg(test)]
mod tests {
    use super::*;
    use somalloc_rs::trace::{Action, RecordOptions, Recorder};

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
        let plans = load(&path, 0, None, 0, false).unwrap();
        let legacy = plans.take(true).unwrap().arena;
        assert_eq!((legacy.plan().slots.len(), legacy.plan().arena), (8, 512));
        assert!(plans.take(true).is_none(), "the legacy plan is taken once");
        let other = plans.take(false).unwrap().arena;
        assert_eq!((other.plan().slots.len(), other.plan().arena), (8, 1 << 20));
        assert!(plans.take(false).is_none(), "the per-thread stream has no plan");
        // Another device's events are not this device's.
        assert!(load(&path, 1, None, 0, false).unwrap().take(false).is_none());
        // Shared: one arena, the streams its lanes in the order they came
        // (each block lives beside the other stream's, so none shares).
        let plans = load(&path, 0, Some(Sharing::HostLag(0)), 0, false).unwrap();
        let (legacy, other) = (plans.take(true).unwrap(), plans.take(false).unwrap());
        assert!(std::sync::Arc::ptr_eq(&legacy.arena, &other.arena));
        assert_eq!((other.lane, legacy.lane), (0, 1));
        assert_eq!(other.arena.plan().slots.len(), 16);
        assert_eq!(other.arena.plan().arena, (1 << 20) + 512);
        assert!(plans.take(false).is_none());
        // Sharing by device times needs a trace that has them.
        let e = load(&path, 0, Some(Sharing::Device { margin_ns: 0 }), 0, false).unwrap_err();
        assert_eq!(e.status, Status::Config);
        assert!(e.text.contains("trace_device:on"), "{}", e.text);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_missing_or_broken_trace_is_a_configuration_error() {
        let e = load("/nonexistent/run.trace", 0, None, 0, false).unwrap_err();
        assert_eq!(e.status, Status::Config);
        assert!(e.text.contains("plan:/nonexistent/run.trace"), "{}", e.text);
        let path = temp("broken");
        std::fs::write(&path, b"not a trace").unwrap();
        assert_eq!(load(&path, 0, None, 0, false).unwrap_err().status, Status::Config);
        let _ = std::fs::remove_file(&path);
    }
}
