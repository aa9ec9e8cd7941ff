//! `plan:auto`: a placement planned in the same run. The library's
//! `AutoPlanner` records the device's allocations and frees in memory
//! (not those made while their stream captures a graph, nor those of the
//! per-thread default stream), finds the step they repeat and plans it on
//! a thread of its own; at the start of a later step each recorded stream
//! takes its share of the plan's arena, and the cache tier and the pool
//! give back what they kept for the blocks before (flush, the device's
//! streams synchronized, trim: at the switch and again a step later, once
//! the step before the switch has freed its blocks). Until then, and for every allocation the plan has
//! no slot for, the cache tier or the pool serve as they would without
//! it. The streams' blocks share one arena as a trace's plan does with
//! `plan_share:10` (the default with `plan:auto`; `plan_share:MS` sets
//! another lag, `plan_share:off` keeps an arena per stream);
//! `plan_share:device` needs device times, which the same-run recording
//! has not: it shares nothing.

use std::sync::Arc;

use somalloc_rs::adaptors::{AutoOptions, AutoPlanner, AutoStatus, SwitchPreview};

use crate::conf::Conf;
use crate::registry::Path;
use crate::state::{DeviceGuard, DeviceState};

/// The planner of a device with `plan:auto`, or `None`.
pub fn planner(conf: &Conf) -> Option<Arc<AutoPlanner>> {
    conf.plan_auto.then(|| {
        AutoPlanner::new(AutoOptions {
            sharing: conf.plan_share,
            ..AutoOptions::default()
        })
    })
}

/// Before an allocation: the switch to the plan when it is due (each
/// recorded stream takes its share), and the memory kept for the blocks of
/// before given back, at the switch and a step later. A failure to give
/// memory back changes nothing else.
pub fn before_allocate(dev: &DeviceState) {
    let Some(auto) = &dev.auto else { return };
    if auto.recording() {
        let Some(shares) = auto.switch_due_unless(|p| not_worth_it(dev, p)) else {
            return;
        };
        for (key, share) in shares {
            if let Some(entry) = dev.streams.seen(key) {
                let _ = entry.plan.set(share);
            }
        }
        give_back(dev);
    } else if auto.settle_due() {
        give_back(dev);
    }
}

/// Why the switch is not worth it, on the virtual-memory arena
/// (`pool:vmm`) with one recorded stream: the plan's arena and the chunks
/// that the blocks kept across steps hold (they stay where they are) would
/// map no less than the arena has mapped at most so far. On one stream the
/// arena's footprint stays where the first steps put it (the recorded
/// training steps of `benches/data` replayed eight times over mapped 1.018
/// to 1.023 times their live peak), so the plan would only add its switch.
/// With several streams the arena's hand-overs between them follow their
/// pace and its footprint can grow over a run; the plan's does not, so it
/// is kept there. On the pool, the plan's arena is fresh memory beside the
/// pool's and nothing is weighed.
fn not_worth_it(dev: &DeviceState, p: &SwitchPreview) -> Option<String> {
    let arena = dev.arena.as_ref()?;
    if p.streams != 1 {
        return None;
    }
    let peak = arena.stats().peak_mapped;
    let held = arena.mapped_holding(&p.kept);
    let plan = usize::try_from(p.arena_bytes).unwrap_or(usize::MAX);
    let after = held.saturating_add(plan);
    const MIB: usize = 1 << 20;
    (after >= peak).then(|| {
        format!(
            "on the virtual-memory arena the plan would map {} MiB (its arena {} MiB, the chunks of \
             the blocks kept across steps {} MiB), no less than the arena's {} MiB at most so far",
            after / MIB,
            plan / MIB,
            held / MIB,
            peak / MIB
        )
    })
}

/// Cached blocks back to the pool, and the pool's unused memory back to
/// the device once the streams have reached those frees (each stream seen
/// is synchronized: twice in a run, a queue's drain each).
fn give_back(dev: &DeviceState) {
    let Ok(_current) = DeviceGuard::set(&dev.device) else {
        return;
    };
    if let Some(tier) = &dev.tier {
        let _ = tier.flush();
    }
    for entry in dev.streams.all() {
        // A capturing stream refuses: its blocks stay with the pool.
        let _ = entry.stream.synchronize();
    }
    let _ = dev.base_trim_to(0);
}

/// After an allocation that succeeded: recorded while the planner records
/// (not a planned one, nor one made in a capture or on the per-thread
/// default stream).
pub fn allocated(dev: &DeviceState, key: usize, ptr: usize, size: usize, path: Path) {
    let Some(auto) = &dev.auto else { return };
    if !auto.recording() || matches!(path, Path::Plan(_)) {
        return;
    }
    let Some(entry) = dev.streams.seen(key) else {
        return;
    };
    // A stream whose capture state cannot be told counts as capturing.
    let capturing = entry.is_capturing().unwrap_or(true);
    auto.allocated(key, ptr, size, capturing);
}

/// After a free that succeeded.
pub fn freed(dev: &DeviceState, ptr: usize) {
    if let Some(auto) = &dev.auto {
        if auto.recording() {
            auto.freed(ptr);
        }
    }
}

/// The `plan_status` code and its words for a device with `plan:auto`.
pub fn status(auto: &AutoPlanner) -> (u64, String) {
    match auto.status() {
        AutoStatus::Recording { allocations } => (
            crate::SOMALLOC_PLAN_RECORDING,
            format!("plan:auto recording: {allocations} allocations, no repeated step yet"),
        ),
        AutoStatus::Ready { step } => (
            crate::SOMALLOC_PLAN_RECORDING,
            format!("plan:auto planned a step of {step} allocations; serving from the start of the next"),
        ),
        AutoStatus::Serving {
            at,
            step,
            arena_bytes,
            planned_us,
        } => (
            crate::SOMALLOC_PLAN_SERVING,
            format!(
                "plan:auto serving since allocation {at}: a step of {step} allocations in an arena of \
                 {arena_bytes} bytes, planned in {:.1} ms",
                planned_us as f64 / 1e3
            ),
        ),
        AutoStatus::Off(why) => (
            crate::SOMALLOC_PLAN_NOT_USED,
            format!("plan:auto not used: {why}"),
        ),
    }
}
