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
//! `plan_divert:SIZE` is accepted for this release and ignored, with one
//! line on stderr: a recorded run showed that diverting the slots whose
//! waits stalled their stream gave up memory without saving time.
//!
//! The library's `StreamPlans` and `PlannedArena` (those of its
//! `PlanningAdaptor`) do the work: a slot is handed out only if no live
//! block overlaps it, so a run that strays from the recorded one gets its
//! allocations from the cache tier or the pool instead, never overlapping
//! memory; a slot is allocated and freed in the order of its arena's
//! stream (a free on another stream first makes that stream wait for it;
//! see `state.rs`).
//!
//! A plan that cannot be made never makes an allocation fail: a trace that
//! is missing or unreadable, that has no event of the device (recorded on
//! fewer devices), or that no plan can be made from (no repeated step
//! within its first allocations, no device times for `plan_share:device`)
//! leaves the device served without a plan ([`load_or_explain`]); one line
//! on stderr says why, and `somalloc_stats`' `plan_status` and
//! `somalloc_plan_status` tell it too.

use somalloc_rs::adaptors::StreamPlans;
use somalloc_rs::plan::Sharing;
use somalloc_rs::trace::Trace;

use crate::conf::Conf;

/// What became of `plan:` on a device: `SomallocStats::plan_status` (its
/// [`code`](PlanStatus::code)) and, for a plan not used, why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PlanStatus {
    /// No plan asked for (`plan:off`, the default).
    #[default]
    Off,
    /// The plan was made: it serves the device's streams.
    Serving,
    /// A plan was asked for and could not be made: allocations are served
    /// without it. Why, in words.
    NotUsed(String),
}

impl PlanStatus {
    /// The statistic's value: [`SOMALLOC_PLAN_OFF`](crate::SOMALLOC_PLAN_OFF)
    /// (0), [`SOMALLOC_PLAN_SERVING`](crate::SOMALLOC_PLAN_SERVING) (1) or
    /// [`SOMALLOC_PLAN_NOT_USED`](crate::SOMALLOC_PLAN_NOT_USED) (2).
    pub fn code(&self) -> u64 {
        match self {
            PlanStatus::Off => crate::SOMALLOC_PLAN_OFF,
            PlanStatus::Serving => crate::SOMALLOC_PLAN_SERVING,
            PlanStatus::NotUsed(_) => crate::SOMALLOC_PLAN_NOT_USED,
        }
    }

    /// Why the plan is not used; "" when it is, or when none was asked for.
    pub fn why(&self) -> &str {
        match self {
            PlanStatus::NotUsed(why) => why,
            _ => "",
        }
    }
}

/// The plans of `device`'s streams in the trace at `path`: one arena per
/// stream, or one shared by the streams with bytes passing between them
/// by the rule `share` (`plan_share:`); with `time_waits`, a shared plan
/// times every wait on the device (`plan_time_waits:`).
/// An error says why no plan can be made, without the path.
pub fn load(
    path: &str,
    device: usize,
    share: Option<Sharing>,
    time_waits: bool,
) -> Result<StreamPlans, String> {
    let trace = Trace::read(path).map_err(|e| e.to_string())?;
    if !trace.events.iter().any(|e| e.device as usize == device) {
        let mut seen: Vec<u32> = trace.events.iter().map(|e| e.device).collect();
        seen.sort_unstable();
        seen.dedup();
        return Err(format!(
            "the trace has no event of device {device} (its events are of devices {seen:?}: a run on \
             fewer devices)"
        ));
    }
    let plans = StreamPlans::from_trace_sharing(&trace, device, share).map_err(|e| e.to_string())?;
    plans.time_waits(time_waits);
    Ok(plans)
}

/// The plans `conf` asks for on `device` (`plan:PATH`), and what became
/// of them. Never an error: a plan that cannot be made ([`load`]'s error)
/// gives no plans and [`PlanStatus::NotUsed`] with the reason, which is
/// also written once to stderr as one line (`somalloc: plan:PATH not used
/// on device N: REASON; serving without it`). The device's state calls it
/// once, when it is made.
pub fn load_or_explain(conf: &Conf, device: usize) -> (Option<StreamPlans>, PlanStatus) {
    if conf.plan_divert > 0 {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| eprintln!("{DIVERT_IGNORED}"));
    }
    let Some(path) = &conf.plan else {
        return (None, PlanStatus::Off);
    };
    match load(path, device, conf.plan_share, conf.plan_time_waits) {
        Ok(plans) => (Some(plans), PlanStatus::Serving),
        Err(why) => {
            eprintln!("{}", not_used_line(path, device, &why));
            (None, PlanStatus::NotUsed(why))
        }
    }
}

/// What `plan_divert:` with a size says, once, on stderr.
pub const DIVERT_IGNORED: &str =
    "somalloc: plan_divert is ignored and will be refused in a later release: a \
     recorded run showed that serving elsewhere the slots whose waits stalled their stream gave up memory \
     without saving time";

/// The line that says a plan is not used: one line (line breaks in the
/// reason become spaces).
fn not_used_line(path: &str, device: usize, why: &str) -> String {
    let why = why.replace(['\n', '\r'], " ");
    format!("somalloc: plan:{path} not used on device {device}: {why}; serving without it")
}

#[cfg(test)]
mod tests {
    use super::*;
    use somalloc_rs::trace::{Action, RecordOptions, Recorder};

    fn temp(name: &str) -> String {
        let p = std::env::temp_dir().join(format!("somalloc-plan-{name}-{}", std::process::id()));
        p.to_str().expect("a UTF-8 temporary path").to_string()
    }

    fn conf(path: &str) -> Conf {
        Conf::parse(&format!("plan:{path}")).unwrap()
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
        let plans = load(&path, 0, None, false).unwrap();
        let legacy = plans.take(true).unwrap().arena;
        assert_eq!((legacy.plan().slots.len(), legacy.plan().arena), (8, 512));
        assert!(plans.take(true).is_none(), "the legacy plan is taken once");
        let other = plans.take(false).unwrap().arena;
        assert_eq!((other.plan().slots.len(), other.plan().arena), (8, 1 << 20));
        assert!(plans.take(false).is_none(), "the per-thread stream has no plan");
        // Shared: one arena, the streams its lanes in the order they came
        // (each block lives beside the other stream's, so none shares).
        let plans = load(&path, 0, Some(Sharing::HostLag(0)), false).unwrap();
        let (legacy, other) = (plans.take(true).unwrap(), plans.take(false).unwrap());
        assert!(std::sync::Arc::ptr_eq(&legacy.arena, &other.arena));
        assert_eq!((other.lane, legacy.lane), (0, 1));
        assert_eq!(other.arena.plan().slots.len(), 16);
        assert_eq!(other.arena.plan().arena, (1 << 20) + 512);
        assert!(plans.take(false).is_none());
        // Sharing by device times needs a trace that has them.
        let e = load(&path, 0, Some(Sharing::Device { margin_ns: 0 }), false).unwrap_err();
        assert!(e.contains("trace_device:on"), "{e}");
        let _ = std::fs::remove_file(&path);
    }

    /// The plan `conf` asks for on `device` is not used: the reason.
    fn not_used(conf: &Conf, device: usize) -> String {
        let (plans, status) = load_or_explain(conf, device);
        assert!(plans.is_none());
        assert_eq!(status.code(), crate::SOMALLOC_PLAN_NOT_USED);
        assert!(!status.why().is_empty());
        status.why().to_string()
    }

    #[test]
    fn a_plan_that_cannot_be_made_is_not_used_and_says_why() {
        // No plan asked for.
        let (plans, status) = load_or_explain(&Conf::default(), 0);
        assert!(plans.is_none());
        assert_eq!((status.code(), status.why()), (crate::SOMALLOC_PLAN_OFF, ""));
        // A missing file, and a file that is no trace.
        let why = not_used(&conf("/nonexistent/run.trace"), 0);
        assert!(why.contains("/nonexistent/run.trace"), "{why}");
        let path = temp("broken");
        std::fs::write(&path, b"not a trace").unwrap();
        not_used(&conf(&path), 0);
        // A trace of device 0 only, for device 1 (a run on more devices).
        let r = Recorder::to_file(&path, RecordOptions::default()).unwrap();
        for k in 0..8 {
            r.record(
                r.now_ns(),
                Action::Allocate,
                0,
                Some(0),
                512 * (k % 4 + 1),
                0x1000 + k,
            );
            r.record(
                r.now_ns(),
                Action::Free,
                0,
                Some(0),
                512 * (k % 4 + 1),
                0x1000 + k,
            );
        }
        r.finish().unwrap();
        let (plans, status) = load_or_explain(&conf(&path), 0);
        assert!(plans.is_some_and(|p| p.take(true).is_some()));
        assert_eq!((status.code(), status.why()), (crate::SOMALLOC_PLAN_SERVING, ""));
        let why = not_used(&conf(&path), 1);
        assert!(why.contains("no event of device 1"), "{why}");
        // The line on stderr is one line, and names the path and device.
        let line = not_used_line("/tmp/r.trace", 3, "a\nb");
        assert_eq!(
            line,
            "somalloc: plan:/tmp/r.trace not used on device 3: a b; serving without it"
        );
        let _ = std::fs::remove_file(&path);
    }

    /// Writes a trace of `allocations` allocations on the legacy stream of
    /// device 0, each freed at once, of sizes `size(k)`: as RMM's CSV log,
    /// which `Trace::read` reads too (a recorder this fast drops events).
    fn write_long(path: &str, allocations: u64, size: impl Fn(u64) -> u64) {
        use std::fmt::Write as _;
        let mut csv = format!("{}\n", somalloc_rs::trace::RMM_HEADER);
        for k in 0..allocations {
            for (i, action) in ["allocate", "free"].into_iter().enumerate() {
                let us = 2 * k + i as u64;
                let (s, us) = (us / 1_000_000, us % 1_000_000);
                let _ = writeln!(
                    csv,
                    "1,00:{:02}:{:02}.{us:06},{action},0x1000,{},0x0",
                    s / 60,
                    s % 60,
                    size(k)
                );
            }
        }
        std::fs::write(path, csv).unwrap();
    }

    #[test]
    fn a_trace_longer_than_the_old_cap_is_planned_from_its_step_or_not_used() {
        // 24,000 allocations (over the 20,000 a plan places), a step of 8:
        // planned from two steps of it.
        let path = temp("long");
        write_long(&path, 24_000, |k| 512 * (k % 8 + 1));
        let (plans, status) = load_or_explain(&conf(&path), 0);
        assert_eq!(status, PlanStatus::Serving);
        let plan = plans.unwrap().take(true).unwrap().arena;
        assert_eq!((plan.plan().slots.len(), plan.plan().wrap_to), (16, Some(8)));
        // As long, with no step: not used, and the reason says so.
        write_long(&path, 24_000, |k| {
            512 + (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40)
        });
        let why = not_used(&conf(&path), 0);
        assert!(
            why.contains("24000 allocations") && why.contains("step is too long"),
            "{why}"
        );
        let _ = std::fs::remove_file(&path);
    }
}
