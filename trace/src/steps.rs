//! `steps`: finds the step a program repeats on each stream, plans one
//! recorded step's placement ([`crate::plan`], the library's planner) and serves the steps
//! after it from that plan, as an allocator that plans would.
//!
//! A trace has no step marks: the step is found as the period of the
//! stream's allocation sizes that the longest run follows (at least two
//! periods of it; `find_step`, in the stream's first `MAX_SEARCHED`
//! allocations), unless its blocks mostly outlive it (then it is no step,
//! as for the whole-program plan). The step planned is the last one searched
//! whose next step is in the trace (the frees of blocks that live into the
//! next step are then known); the steps after it are replayed through a
//! [`Server`]. An allocation the server refuses is counted as taken
//! elsewhere, at its requested size: the figure beside the arena is the
//! live peak of those, not what any allocator would reserve for them.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::format::Trace;
use std::sync::Arc;

use crate::plan::{find_step, DeviceProgram, End, Handover, Op, Plan, Rec, Server, Sharing, MAX_SEARCHED};

/// One stream's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSteps {
    pub device: u32,
    pub stream: Option<u32>,
    pub allocations: usize,
    /// The step in allocations, and how many whole steps repeat it at the
    /// trace's end; `None`: no step repeats.
    pub step: Option<(usize, usize)>,
    pub planned: usize,
    pub placed: usize,
    pub placed_bytes: u64,
    pub arena: u64,
    pub served: u64,
    pub refused: u64,
    pub skipped: u64,
    /// The live peak of the blocks not in the arena (those before the
    /// replayed steps included), during the replayed steps.
    pub outside_peak: u64,
    /// Whether any steps were replayed.
    pub replayed: bool,
    /// The arena of the whole stream's plan (`plan:` of the C ABI):
    /// every allocation placed, the repeated step for ever after.
    pub program_arena: u64,
}

/// One stream's events: allocations and frees of blocks it allocated,
/// as (size, the index of the allocation a free frees).
enum Ev {
    Alloc(u64),
    Free(usize),
}

pub fn steps(trace: &Trace, window: usize) -> Result<Vec<StreamSteps>, String> {
    let mut out = Vec::new();
    for device in devices(trace) {
        let program = DeviceProgram::of(trace, device, |_| false);
        for (stream, ops) in program.streams.iter().zip(program.per_stream()) {
            // Frees name their allocation's event position here.
            let mut at: Vec<usize> = Vec::new();
            let evs: Vec<Ev> = ops
                .iter()
                .enumerate()
                .map(|(i, op)| match *op {
                    Op::Alloc(s) => {
                        at.push(i);
                        Ev::Alloc(s)
                    }
                    Op::Free(k) => Ev::Free(at[k]),
                })
                .collect();
            out.push(stream_steps((device, *stream), &evs, window)?);
        }
    }
    out.sort_by_key(|s| (s.device, s.stream));
    Ok(out)
}

/// The devices with events, in order.
fn devices(trace: &Trace) -> Vec<u32> {
    let mut d: Vec<u32> = trace.events.iter().map(|e| e.device).collect();
    d.sort_unstable();
    d.dedup();
    d
}

/// A device's streams planned in one arena ([`shared`]).
#[derive(Debug)]
pub struct Shared {
    pub device: u32,
    pub arena: u64,
    /// The allocations that take bytes another stream freed, replaying the
    /// recorded program ([`Plan::handovers`]).
    pub handovers: Vec<Handover>,
}

/// Per device: one plan for all its streams ([`Plan::for_streams_sharing`]),
/// bytes passing from a stream to another as `sharing` allows.
pub fn shared(trace: &Trace, sharing: Sharing) -> Result<Vec<Shared>, String> {
    devices(trace)
        .into_iter()
        .map(|device| {
            let ops = DeviceProgram::of(trace, device, |_| false).ops;
            let plan = Plan::for_streams_sharing(&ops, sharing)?;
            Ok(Shared {
                device,
                arena: plan.arena,
                handovers: plan.handovers(&ops),
            })
        })
        .collect()
}

/// The smallest and the median of `ns`, in milliseconds.
fn least_and_median(mut ns: Vec<i64>) -> Option<(f64, f64)> {
    ns.sort_unstable();
    Some((*ns.first()? as f64 / 1e6, ns[ns.len() / 2] as f64 / 1e6))
}

fn stream_steps(key: (u32, Option<u32>), evs: &[Ev], window: usize) -> Result<StreamSteps, String> {
    let allocs: Vec<usize> = (0..evs.len())
        .filter(|&i| matches!(evs[i], Ev::Alloc(_)))
        .collect();
    let sizes: Vec<u64> = allocs
        .iter()
        .map(|&i| match evs[i] {
            Ev::Alloc(s) => s,
            Ev::Free(_) => unreachable!(),
        })
        .collect();
    let mut out = StreamSteps {
        device: key.0,
        stream: key.1,
        allocations: sizes.len(),
        step: None,
        planned: 0,
        placed: 0,
        placed_bytes: 0,
        arena: 0,
        served: 0,
        refused: 0,
        skipped: 0,
        outside_peak: 0,
        replayed: false,
        program_arena: 0,
    };
    let ops: Vec<Op> = evs
        .iter()
        .map(|e| match *e {
            Ev::Alloc(s) => Op::Alloc(s),
            Ev::Free(i) => Op::Free(allocs.partition_point(|&a| a < i)),
        })
        .collect();
    let program = Plan::for_program(&ops)?;
    out.program_arena = program.arena;
    // The whole-program plan's verdict: a period whose blocks outlive it
    // (a model's layers of weights) is no step.
    // A long stream's step is looked for in its first allocations, as the
    // plan does; the steps replayed are those among them.
    let searched = &sizes[..sizes.len().min(MAX_SEARCHED)];
    let found = find_step(searched).filter(|_| program.wrap_to.is_some());
    let Some(found) = found else {
        // No plan: every block is outside an arena.
        let (mut now, mut size_of) = (0u64, HashMap::new());
        for (i, e) in evs.iter().enumerate() {
            match *e {
                Ev::Alloc(s) => {
                    size_of.insert(i, s);
                    now += s;
                    out.outside_peak = out.outside_peak.max(now);
                }
                Ev::Free(a) => now -= size_of.remove(&a).unwrap_or(0),
            }
        }
        return Ok(out);
    };
    let (p, end) = (found.len, found.end);
    let whole = found.covered / p;
    out.step = Some((p, whole));
    // Step starts (event positions) of the repeated steps, then the end of
    // the last.
    let mut starts: Vec<usize> = (1..=whole).rev().map(|k| allocs[end - k * p]).collect();
    starts.push(allocs.get(end).copied().unwrap_or(evs.len()));
    // The step planned: the last with a whole next step.
    let (from, to, next_end) = (starts[whole - 2], starts[whole - 1], starts[whole]);
    let index_of: HashMap<usize, usize> = allocs.iter().enumerate().map(|(k, &i)| (i, k)).collect();
    let mut freed_at: HashMap<usize, usize> = HashMap::new();
    for (pos, e) in evs.iter().enumerate() {
        if let Ev::Free(a) = e {
            freed_at.insert(*a, pos);
        }
    }
    let len = u32::try_from(to - from).map_err(|_| "a step of over 4 billion events".to_string())?;
    let recs: Vec<Rec> = (from..to)
        .filter(|&i| matches!(evs[i], Ev::Alloc(_)))
        .map(|i| {
            let end = match freed_at.get(&i) {
                Some(&f) if f < to => End::InStep((f - from) as u32),
                Some(&f) if f < next_end => End::Next((f - to) as u32),
                _ => End::Later,
            };
            Rec {
                size: sizes[index_of[&i]],
                at: (i - from) as u32,
                end,
            }
        })
        .collect();
    let plan = Arc::new(Plan::build(&recs, len)?);
    out.planned = recs.len();
    out.placed = plan.slots.iter().filter(|s| s.offset.is_some()).count();
    out.placed_bytes = plan.placed_bytes();
    out.arena = plan.arena;
    // Replay the steps after it. Blocks allocated before are outside the
    // arena; so are the ones the server refuses.
    let mut server = Server::new(plan.clone(), window);
    let mut outside: HashMap<usize, u64> = HashMap::new();
    let mut outside_now = 0u64;
    for (i, e) in evs[..to].iter().enumerate() {
        match *e {
            Ev::Alloc(s) => {
                outside.insert(i, s);
                outside_now += s;
            }
            Ev::Free(a) => outside_now -= outside.remove(&a).unwrap_or(0),
        }
    }
    out.outside_peak = outside_now;
    let mut in_arena: HashMap<usize, usize> = HashMap::new();
    for w in starts[whole - 1..].windows(2) {
        server.begin_step();
        out.replayed = true;
        for (i, e) in evs.iter().enumerate().take(w[1]).skip(w[0]) {
            match *e {
                Ev::Alloc(s) => match server.allocate(s) {
                    Some((slot, _)) => {
                        in_arena.insert(i, slot);
                    }
                    None => {
                        outside.insert(i, s);
                        outside_now += s;
                        out.outside_peak = out.outside_peak.max(outside_now);
                    }
                },
                Ev::Free(a) => {
                    if let Some(slot) = in_arena.remove(&a) {
                        server.free(slot);
                    } else {
                        outside_now -= outside.remove(&a).unwrap_or(0);
                    }
                }
            }
        }
    }
    out.served = server.served;
    out.refused = server.refused;
    out.skipped = server.skipped;
    Ok(out)
}

fn mib(n: u64) -> String {
    format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64)
}

/// The report; `shared`: per device, the arena of the streams sharing one
/// plan, and the lag it was planned with.
/// The report of [`steps`], then of [`shared`] for each sharing rule given.
pub fn report(trace: &Trace, streams: &[StreamSteps], shared: &[(Sharing, Vec<Shared>)]) -> String {
    let mut out = String::new();
    let (mut arena, mut outside) = (0, 0);
    let program: u64 = streams.iter().map(|s| s.program_arena).sum();
    for s in streams {
        let name = match s.stream {
            Some(i) => trace
                .streams
                .get(i as usize)
                .map_or_else(|| format!("#{i}"), |st| format!("{:#x}", st.handle)),
            None => "(none)".into(),
        };
        let _ = write!(
            out,
            "device {} stream {name}: {} allocations, planned whole in an arena of {}",
            s.device,
            s.allocations,
            mib(s.program_arena)
        );
        let Some((p, whole)) = s.step else {
            let _ = writeln!(out, "; no repeated step; live at most {}", mib(s.outside_peak));
            outside += s.outside_peak;
            continue;
        };
        let _ = writeln!(
            out,
            "; a step of {p} allocations, repeated {whole} times\n  \
             plan of the last step but one: {} blocks, {} placed ({}), arena {}",
            s.planned,
            s.placed,
            mib(s.placed_bytes),
            mib(s.arena)
        );
        if s.replayed {
            let _ = writeln!(
                out,
                "  the last step served from it: {} served, {} refused, {} skipped; \
                 live outside the arena at most {}; arena + that: {}",
                s.served,
                s.refused,
                s.skipped,
                mib(s.outside_peak),
                mib(s.arena + s.outside_peak)
            );
        }
        arena += s.arena;
        outside += s.outside_peak;
    }
    let _ = writeln!(
        out,
        "all streams: step arenas {}, live outside them at most {} (each stream's peak, summed): {}\n\
         all streams planned whole: {}",
        mib(arena),
        mib(outside),
        mib(arena + outside),
        mib(program)
    );
    for (sharing, shared) in shared {
        let rule = match *sharing {
            Sharing::Never => "never".to_string(),
            Sharing::HostLag(ns) => format!("{} ms or more after its free", ns as f64 / 1e6),
            Sharing::Device { margin_ns } => format!(
                "where the device reached its free {} ms or more before the allocation",
                margin_ns as f64 / 1e6
            ),
        };
        for sh in shared {
            let _ = writeln!(
                out,
                "device {}, its streams planned whole in one arena, a block passing to another stream \
                 {rule} (plan_share:{sharing}): {}",
                sh.device,
                mib(sh.arena)
            );
            let host = least_and_median(sh.handovers.iter().map(|h| h.host_ns).collect());
            if let Some((least, median)) = host {
                let _ = write!(
                    out,
                    "  {} allocations take bytes another stream freed, {least:.1} ms or more after the free \
                     (median {median:.1} ms)",
                    sh.handovers.len()
                );
                let device: Vec<i64> = sh.handovers.iter().filter_map(|h| h.device_ns).collect();
                let timed = device.len();
                match least_and_median(device) {
                    Some((least, median)) => {
                        let _ = writeln!(
                            out,
                            "; on the device ({timed} of them timed) {least:.1} ms or more (median {median:.1} ms): \
                             a run that keeps another pace waits where these are small"
                        );
                    }
                    None => {
                        let _ = writeln!(out);
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_traces_plan_to_about_their_live_peak() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../benches/data/");
        for (name, step, arena_mib) in [("gpt2", 1432, 5855), ("resnet50", 926, 2758)] {
            let bytes = std::fs::read(format!("{dir}{name}.trace")).unwrap();
            let t = Trace::parse(&bytes).unwrap();
            let s = steps(&t, 16).unwrap();
            let main = s.iter().find(|s| s.step.is_some()).unwrap();
            assert_eq!(main.step.unwrap().0, step, "{name}");
            assert_eq!(main.arena >> 20, arena_mib, "{name}");
            assert!(main.served > 0 && main.replayed, "{name}");
            // The whole program planned: within 1 % of the live peak.
            let live = crate::analysis::Analysis::of(&t).total.peak.bytes;
            assert!(
                main.program_arena >= live && main.program_arena <= live + live / 100,
                "{name}"
            );
            // One stream (the legacy one): one arena either way.
            let sh = shared(&t, Sharing::HostLag(0)).unwrap();
            assert_eq!(sh.len(), 1, "{name}");
            assert_eq!((sh[0].device, sh[0].arena), (0, main.program_arena), "{name}");
            assert!(sh[0].handovers.is_empty(), "{name}");
        }
    }

    #[test]
    fn the_mix_shares_one_arena_when_the_lag_allows() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../benches/data/");
        let t = Trace::parse(&std::fs::read(format!("{dir}mix.trace")).unwrap()).unwrap();
        let apart: u64 = steps(&t, 16).unwrap().iter().map(|s| s.program_arena).sum();
        let live = crate::analysis::Analysis::of(&t).total.peak.bytes;
        let ms = 1_000_000;
        // ResNet-50's step frees its activations 15 ms or more before
        // GPT-2's peak (in the recorded run): shared, the arena is about
        // the live peak of both; with a 30 ms lag the streams keep apart.
        let at_10 = &shared(&t, Sharing::HostLag(10 * ms)).unwrap()[..];
        let [Shared {
            device: 0,
            arena,
            ref handovers,
        }] = *at_10
        else {
            panic!()
        };
        assert!(
            arena >= live && arena <= live + live / 100,
            "{arena} against {live}"
        );
        // Bytes pass between the streams, each 10 ms or more after its
        // free on the host.
        assert!(!handovers.is_empty());
        assert!(handovers
            .iter()
            .all(|h| h.from != h.to && h.host_ns >= 10 * ms as i64));
        let at_30 = shared(&t, Sharing::HostLag(30 * ms)).unwrap();
        assert!(
            at_30[0].arena > apart - apart / 50,
            "{} against {apart}",
            at_30[0].arena
        );
        // Two rules: one report each, in the order given.
        let rules = [Sharing::HostLag(10 * ms), Sharing::HostLag(30 * ms)];
        let each: Vec<_> = rules.iter().map(|&r| (r, shared(&t, r).unwrap())).collect();
        let text = report(&t, &steps(&t, 16).unwrap(), &each);
        let (at, later) = (
            text.find("(plan_share:10): 7").expect(&text),
            text.find(&format!("(plan_share:30): {}", mib(at_30[0].arena)))
                .expect(&text),
        );
        assert!(at < later, "{text}");
        assert!(
            text.contains(&format!(
                "  {} allocations take bytes another stream freed, ",
                handovers.len()
            )),
            "{text}"
        );
    }
}
