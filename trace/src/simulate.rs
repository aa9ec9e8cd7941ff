//! `simulate`: replays a trace's allocations and frees through models of
//! other allocators, and reports how much device memory each would have
//! reserved for the same program.
//!
//! The models place blocks by the published rules of the allocators they
//! stand for; they keep no device memory and make no device calls, so a
//! trace recorded under one allocator answers "what would the others have
//! held" on any machine. What they leave out: the time each allocator
//! takes, and any memory an allocator gives back on its own (the models
//! never release; PyTorch's allocators only do so on an out-of-memory retry
//! or `empty_cache`).
//!
//! - [`Model::Caching`]: PyTorch's caching allocator with its default
//!   settings. Requests round up to 512 bytes. Requests up to 1 MiB come
//!   from 2 MiB segments, requests under 10 MiB from 20 MiB segments, larger
//!   ones get a segment of their own rounded up to 2 MiB. Each stream has
//!   its own free blocks, small and large apart; a request takes the
//!   smallest free block that fits (the lowest address among equals), split
//!   when the rest is at least 512 bytes (small) or over 1 MiB (large); a
//!   freed block merges with free neighbours of its segment.
//! - [`Model::Expandable`]: the same with `expandable_segments:True`: each
//!   stream's small and large blocks live in one address range that grows at
//!   its end (a free block at the end grows in place), mapped in pages of
//!   2 MiB (small) or 20 MiB (large), never unmapped; a block is split
//!   whenever at least 512 bytes are left.
//! - [`Model::Segments`]: the caching allocator's rules with shared
//!   segments of another size, under another limit (`segments:20:10` is
//!   `caching`).
//! - [`Model::Pages`]: the expandable placement, but only the 2 MiB pages
//!   under live blocks count: an arena that unmaps the pages under free
//!   ranges and maps them again where they are needed, at no cost. No
//!   allocator here does that; it is the bound such a design could reach on
//!   the trace.
//! - [`Model::Remap`]: that arena made lazy. Pages stay mapped when their
//!   blocks are freed. A page that must be mapped takes a new page of memory
//!   while the arena holds fewer than the most pages ever live at once plus
//!   a slack; beyond that it takes an idle page (mapped, under no live
//!   block: the one at the highest address) and maps it where it is needed.
//!   Each such remap is an unmap and a map that must wait until the page's
//!   last user is done on the device: the report counts them, in all and in
//!   the second half of the trace (a training loop's steady state).
//!
//! - [`Model::Plan`]: no allocator at all but a plan: the whole trace's
//!   blocks, lifetimes known, placed in one arena per stream (largest
//!   first, each at the lowest offset free for its lifetime). It is the
//!   bound of an allocator that plans a training step's placement from a
//!   recorded one; it never remaps.
//!
//! Against PyTorch 2.11's own `max_memory_reserved()` the models land on the
//! byte, or within one 20 MiB page: the recorded traces in `benches/data`
//! give 7708 and 7886 MiB on GPT-2 (PyTorch: the same), 3654 and 3188 MiB on
//! ResNet-50 (PyTorch: 3654 and 3208), 11384 and 11074 MiB on both models
//! on two streams (PyTorch: 11384 and 11094).

mod arena;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::format::{Action, Trace};
use crate::summary::fmt_bytes;
use arena::Arena;

const MIB: u64 = 1 << 20;
/// Requests round up to a multiple of this.
const ROUND: u64 = 512;
/// Requests up to this size are small.
const SMALL: u64 = MIB;
/// The segment of a small request.
const SMALL_SEGMENT: u64 = 2 * MIB;
/// Requests under this size share a segment of `MID_SEGMENT`.
const MID_LIMIT: u64 = 10 * MIB;
const MID_SEGMENT: u64 = 20 * MIB;
/// Larger segments round up to this.
const LARGE_ROUND: u64 = 2 * MIB;
/// The pages of expandable segments: small and large.
const SMALL_PAGE: u64 = 2 * MIB;
const LARGE_PAGE: u64 = 20 * MIB;
/// The page of the `pages` model.
const PAGE: u64 = 2 * MIB;
/// Room between two segments' simulated addresses, so that no two segments
/// are ever neighbours.
const GAP: u64 = 1 << 30;
/// The address range of one expandable pool.
const RANGE: u64 = 1 << 48;
/// The largest allocation the models take (larger ones are not device
/// memory a trace of a real program holds).
pub const MAX_ALLOCATION: u64 = 1 << 40;

/// An allocator model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// PyTorch's caching allocator, default settings.
    Caching,
    /// PyTorch's caching allocator with expandable segments.
    Expandable,
    /// Expandable placement with only the pages under live blocks mapped.
    Pages,
    /// The caching allocator's rules with other segment sizes: requests
    /// over 1 MiB and under `limit` share segments of `segment` bytes
    /// (the caching allocator: 20 MiB under 10 MiB).
    Segments {
        /// The shared segments' size.
        segment: u64,
        /// Requests under this share them; larger ones get their own.
        limit: u64,
    },
    /// One arena per stream holding the trace's blocks at offsets planned
    /// with their lifetimes known.
    Plan,
    /// Expandable placement, pages mapped lazily and remapped beyond the
    /// most pages ever live plus `slack` bytes.
    Remap {
        /// Bytes the arena may hold beyond its live pages' peak before it
        /// remaps idle pages.
        slack: u64,
    },
}

impl Model {
    /// Every model (the remap model with no slack).
    #[cfg(test)]
    pub const ALL: [Model; 5] = [
        Model::Caching,
        Model::Expandable,
        Model::Pages,
        Model::Remap { slack: 0 },
        Model::Plan,
    ];

    /// The model's name on the command line: `caching`, `expandable`,
    /// `pages`, `segments:SIZE:LIMIT` (in MiB), `remap` or `remap:MIB` (a
    /// slack in MiB; `remap` is `remap:0`), `plan`.
    pub fn name(self) -> String {
        match self {
            Model::Caching => "caching".into(),
            Model::Expandable => "expandable".into(),
            Model::Pages => "pages".into(),
            Model::Segments { segment, limit } => {
                format!("segments:{}:{}", segment / MIB, limit / MIB)
            }
            Model::Remap { slack } => format!("remap:{}", slack / MIB),
            Model::Plan => "plan".into(),
        }
    }

    /// The segment-based models' shared segment and the size under which
    /// requests share one.
    fn shared_segments(self) -> Option<(u64, u64)> {
        match self {
            Model::Caching => Some((MID_SEGMENT, MID_LIMIT)),
            Model::Segments { segment, limit } => Some((segment, limit)),
            _ => None,
        }
    }

    /// The model named `name`.
    pub fn parse(name: &str) -> Option<Model> {
        match name {
            "caching" => Some(Model::Caching),
            "expandable" => Some(Model::Expandable),
            "pages" => Some(Model::Pages),
            "remap" => Some(Model::Remap { slack: 0 }),
            "plan" => Some(Model::Plan),
            _ => {
                let mib = |v: &str| v.parse::<u64>().ok()?.checked_mul(MIB);
                if let Some(slack) = name.strip_prefix("remap:") {
                    return Some(Model::Remap { slack: mib(slack)? });
                }
                let (segment, limit) = name.strip_prefix("segments:")?.split_once(':')?;
                let (segment, limit) = (mib(segment)?, mib(limit)?);
                (segment > 0 && segment <= MAX_ALLOCATION && limit <= MAX_ALLOCATION)
                    .then_some(Model::Segments { segment, limit })
            }
        }
    }

    fn what(self) -> &'static str {
        match self {
            Model::Caching => "PyTorch's caching allocator (default settings)",
            Model::Expandable => "PyTorch's caching allocator, expandable_segments:True",
            Model::Pages => "2 MiB pages mapped under live blocks only (a bound)",
            Model::Segments { .. } => "the caching allocator's rules, other shared segments",
            Model::Remap { .. } => "2 MiB pages mapped lazily, idle ones remapped beyond the slack",
            Model::Plan => "offsets planned with lifetimes known, an arena per stream (a bound)",
        }
    }
}

/// What one model would have held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The model.
    pub model: Model,
    /// The most device memory it held at once.
    pub peak_reserved: u64,
    /// What it held after the last event.
    pub reserved_at_end: u64,
    /// The calls it would have made for more memory: segments (caching),
    /// growths (expandable), pages mapped (pages), new pages (remap),
    /// arenas (plan).
    pub grows: u64,
    /// The remap model: idle pages unmapped and mapped again elsewhere (0
    /// for the others).
    pub remaps: u64,
    /// Those of `remaps` in the second half of the trace's events.
    pub remaps_late: u64,
}

/// The replay of one trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Simulation {
    /// Allocations replayed.
    pub allocations: u64,
    /// Frees replayed.
    pub frees: u64,
    /// Frees of addresses the trace never allocated (it began after
    /// them): left out.
    pub unknown_frees: u64,
    /// The most bytes live at once, as requested.
    pub peak_live: u64,
    /// One outcome per model asked for.
    pub outcomes: Vec<Outcome>,
}

/// The most blocks the `plan` model places in one arena (its placement
/// takes time quadratic in them).
pub const PLAN_LIMIT: usize = 50_000;
/// Replays `trace` through each of `models`. With `one_pool`, every stream
/// of a device takes from the same free blocks (and the same ranges), as if
/// a block freed on one stream were ready on any other at once: no
/// allocator can do that for free (reuse on another stream must wait for the
/// free's stream), so it is the bound of sharing blocks between streams. A
/// trace the models cannot hold (an allocation over [`MAX_ALLOCATION`],
/// more memory in one stream than its simulated range) is an error naming
/// the event.
pub fn simulate(trace: &Trace, models: &[Model], one_pool: bool) -> Result<Simulation, String> {
    let mut arenas: Vec<Arena> = models.iter().map(|&m| Arena::new(m)).collect();
    // The trace's address → (bytes requested, each arena's address).
    let mut live: HashMap<u64, (u64, Vec<u64>)> = HashMap::new();
    let (mut allocations, mut frees, mut unknown_frees) = (0, 0, 0);
    let (mut live_bytes, mut peak_live) = (0u64, 0u64);
    let half = trace.events.len() / 2;
    for (i, e) in trace.events.iter().enumerate() {
        for a in &mut arenas {
            a.late = i >= half;
            a.now = i as u64;
        }
        match e.action {
            Action::Allocate => {
                // An address given out twice without a free between (a
                // free the trace lost): the first block goes.
                if let Some((bytes, addrs)) = live.remove(&e.addr) {
                    live_bytes -= bytes;
                    for (arena, a) in arenas.iter_mut().zip(addrs) {
                        arena.free(a);
                    }
                }
                if e.bytes > MAX_ALLOCATION {
                    return Err(format!(
                        "event {i}: an allocation of {} bytes, over the {} TiB the models take",
                        e.bytes,
                        MAX_ALLOCATION >> 40
                    ));
                }
                let addrs = arenas
                    .iter_mut()
                    .map(|a| a.allocate(e.device, if one_pool { None } else { e.stream }, e.bytes))
                    .collect::<Result<_, _>>()
                    .map_err(|why| format!("event {i}: {why}"))?;
                live.insert(e.addr, (e.bytes, addrs));
                live_bytes += e.bytes;
                peak_live = peak_live.max(live_bytes);
                allocations += 1;
            }
            Action::Free => match live.remove(&e.addr) {
                Some((bytes, addrs)) => {
                    live_bytes -= bytes;
                    for (arena, a) in arenas.iter_mut().zip(addrs) {
                        arena.free(a);
                    }
                    frees += 1;
                }
                None => unknown_frees += 1,
            },
            _ => {}
        }
    }
    for a in &mut arenas {
        if a.model == Model::Plan {
            a.plan()?;
        }
    }
    Ok(Simulation {
        allocations,
        frees,
        unknown_frees,
        peak_live,
        outcomes: arenas
            .into_iter()
            .map(|a| Outcome {
                model: a.model,
                peak_reserved: a.peak,
                reserved_at_end: a.reserved,
                grows: a.grows,
                remaps: a.remaps,
                remaps_late: a.remaps_late,
            })
            .collect(),
    })
}

fn mib(n: u64) -> String {
    format!("{:.1} MiB", n as f64 / MIB as f64)
}

/// The terminal report of a simulation.
pub fn report(trace: &Trace, sim: &Simulation) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "replayed {} allocations and {} frees{}",
        sim.allocations,
        sim.frees,
        if sim.unknown_frees > 0 {
            format!(
                " ({} frees of addresses allocated before the trace began left out)",
                sim.unknown_frees
            )
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        out,
        "peak live: {} ({})\n",
        mib(sim.peak_live),
        fmt_bytes(sim.peak_live)
    );
    let _ = writeln!(
        out,
        "{:<16} {:>14} {:>8} {:>7} {:>15}  model",
        "allocator", "peak reserved", "vs live", "grows", "remaps (late)"
    );
    let ratio = |n: u64| {
        if sim.peak_live == 0 {
            "-".to_string()
        } else {
            format!("{:.3}", n as f64 / sim.peak_live as f64)
        }
    };
    for o in &sim.outcomes {
        let remaps = match o.model {
            Model::Remap { .. } => format!("{} ({})", o.remaps, o.remaps_late),
            _ => "-".into(),
        };
        let _ = writeln!(
            out,
            "{:<16} {:>14} {:>8} {:>7} {:>15}  {}",
            o.model.name(),
            mib(o.peak_reserved),
            ratio(o.peak_reserved),
            o.grows,
            remaps,
            o.model.what()
        );
    }
    if let Some(r) = trace
        .meta("pool_reserved_peak")
        .and_then(|v| v.parse::<u64>().ok())
    {
        let _ = writeln!(
            out,
            "{:<16} {:>14} {:>8} {:>7} {:>15}  the allocator the trace was recorded under",
            "recorded",
            mib(r),
            ratio(r),
            "",
            ""
        );
    }
    out
}
