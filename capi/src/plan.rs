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
//! The library's `StreamPlans` and `PlannedArena` (those of its
//! `PlanningAdaptor`) do the work: a slot is handed out only if no live
//! block overlaps it, so a run that strays from the recorded one gets its
//! allocations from the cache tier or the pool instead, never overlapping
//! memory; a slot is allocated and freed in the order of its arena's
//! stream (a free on another stream first makes that stream wait for it;
//! see `state.rs`).

use somalloc_rs::adaptors::StreamPlans;
use somalloc_rs::trace::Trace;

use crate::error::{CapiError, Status};

/// The plans of `device`'s streams in the trace at `path`.
pub fn load(path: &str, device: usize) -> Result<StreamPlans, CapiError> {
    let bad = |what: String| CapiError::new(Status::Config, format!("plan:{path}: {what}"));
    let trace = Trace::read(path).map_err(|e| bad(e.to_string()))?;
    StreamPlans::from_trace(&trace, device).map_err(|e| bad(e.to_string()))
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
        let plans = load(&path, 0).unwrap();
        let legacy = plans.take(true).unwrap();
        assert_eq!((legacy.slots.len(), legacy.arena), (8, 512));
        assert!(plans.take(true).is_none(), "the legacy plan is taken once");
        let other = plans.take(false).unwrap();
        assert_eq!((other.slots.len(), other.arena), (8, 1 << 20));
        assert!(plans.take(false).is_none(), "the per-thread stream has no plan");
        // Another device's events are not this device's.
        assert!(load(&path, 1).unwrap().take(false).is_none());
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_missing_or_broken_trace_is_a_configuration_error() {
        let e = load("/nonexistent/run.trace", 0).unwrap_err();
        assert_eq!(e.status, Status::Config);
        assert!(e.text.contains("plan:/nonexistent/run.trace"), "{}", e.text);
        let path = temp("broken");
        std::fs::write(&path, b"not a trace").unwrap();
        assert_eq!(load(&path, 0).unwrap_err().status, Status::Config);
        let _ = std::fs::remove_file(&path);
    }
}
