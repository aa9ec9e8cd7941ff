//! Placement planned from a recorded program, and the server that hands it
//! out again by order with every block checked.
//!
//! A training loop allocates the same sizes in the same order every step,
//! and a program run twice allocates the same sequence twice. Once the
//! sequence is recorded with its lifetimes (a [trace](crate::trace)), the
//! blocks can be placed in one arena, largest first, each at the lowest
//! offset that no block living at the same time holds: the program then
//! needs about its live peak and nothing more.
//!
//! - [`Plan::build`] places one recorded step, whose blocks may live on
//!   into the next step (gradients freed by the next `zero_grad`).
//! - [`Plan::for_program`] places a whole recorded program: what comes
//!   before its repeated step once, then the repeated step ([`find_step`])
//!   for ever after; [`Server::for_program`] serves it.
//!
//! Positions are counted in events (allocations and frees). A block of the
//! repeated step lives over an interval of the step, or wraps over its end
//! when it is freed in the next step before the position it was allocated
//! at (it is then gone before its own next instance). Blocks that live
//! longer are not placed.
//!
//! [`Server`] matches each allocation with the next slot of the same size
//! (within a window, so that an allocation the program added or dropped
//! does not end the match), and hands the slot out only if no live block
//! overlaps its bytes. That check, not the plan, keeps blocks
//! apart: a program that strays from the recording (other sizes, other
//! order, a block held longer) gets no slot for that allocation (it is
//! served from elsewhere), never one that overlaps a live block. The
//! property test `live_blocks_never_overlap` tries arbitrary plans and
//! programs against it.
//!
//! ```
//! use somalloc::trace::plan::{Op, Plan, Server};
//! # fn main() -> Result<(), String> {
//! // A step of four allocations (1 to 4 MiB), each freed at once; recorded
//! // twice.
//! let mut recorded = Vec::new();
//! for k in 0..8 {
//!     recorded.push(Op::Alloc((k % 4 + 1) << 20));
//!     recorded.push(Op::Free(k as usize));
//! }
//! let plan = Plan::for_program(&recorded)?;
//! assert_eq!(plan.arena, 4 << 20); // no two blocks live together
//! let mut server = Server::for_program(plan.into(), 8);
//! for k in 0..100 {
//!     let (slot, offset) = server.allocate((k % 4 + 1) << 20).ok_or("refused")?;
//!     assert_eq!(offset, 0);
//!     assert!(server.free(slot));
//! }
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use super::format::{Action, Trace};

/// Offsets and sizes round up to a multiple of this.
pub const ALIGN: u64 = 512;
/// The most allocations a plan places (planning takes time quadratic in
/// them).
pub const MAX_BLOCKS: usize = 20_000;
/// The most streams one plan serves ([`Plan::for_streams`]; a server keeps
/// a table of streams by streams).
pub const MAX_STREAMS: u32 = 256;

/// When a recorded block of a step was freed, in event positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// In its own step, at this position.
    InStep(u32),
    /// In the next step, at this position.
    Next(u32),
    /// Not before the end of the next step (or never).
    Later,
}

/// A recorded allocation of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rec {
    /// Bytes requested.
    pub size: u64,
    /// Its position in the step.
    pub at: u32,
    /// When it was freed.
    pub end: End,
}

/// One event of a recorded stream: an allocation of so many bytes, or the
/// free of its `k`-th allocation (counted from 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// An allocation of this many bytes.
    Alloc(u64),
    /// The free of the stream's allocation of this number.
    Free(usize),
}

/// One event of a device's recorded program for [`Plan::for_streams`]:
/// an [`Op`] on one of its streams (numbered from 0), at a time in
/// nanoseconds. A free names its allocation by its number among all the
/// device's allocations (counted from 0), whatever stream made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamOp {
    /// The stream the allocation was made on (for a free: ignored, the
    /// block's own stream counts).
    pub stream: u32,
    /// What happened.
    pub op: Op,
    /// When, in nanoseconds from any origin; events come in time order.
    pub t_ns: u64,
    /// When the device reached it in its stream's queue, in nanoseconds
    /// from an origin of its own, where the trace has it
    /// ([`Event::device_ns`](crate::trace::Event::device_ns)); used by
    /// [`Sharing::Device`].
    pub device_ns: Option<i64>,
}

impl StreamOp {
    /// `op` on `stream` at `t_ns`, with no device time.
    pub fn new(stream: u32, op: Op, t_ns: u64) -> StreamOp {
        StreamOp {
            stream,
            op,
            t_ns,
            device_ns: None,
        }
    }

    /// With the time the device reached it.
    pub fn at_device(mut self, device_ns: i64) -> StreamOp {
        self.device_ns = Some(device_ns);
        self
    }
}

/// When a block freed on one stream may take its bytes to a block of
/// another stream, in a plan of several streams ([`Plan::for_streams_sharing`]).
/// The taking stream then waits for the free ([`Server::allocate_on`]),
/// so that the rule decides how much memory the streams share against how
/// long a stream may wait for another; never whether the plan is sound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharing {
    /// Never: each stream's blocks have bytes of their own.
    Never,
    /// When the recorded run freed it at least this many nanoseconds
    /// before the other stream allocated, in the host's time. The device
    /// reaches a free later than the host (by as much as the host runs
    /// ahead of it), which this lag stands for.
    HostLag(u64),
    /// When the device had reached the free at least `margin_ns` before it
    /// reached the other stream's allocation, in the recorded run's device
    /// times ([`StreamOp::device_ns`]): the wait would have cost the
    /// taking stream nothing then. Each other stream is judged on its own
    /// (in plans of up to 16 streams; beyond, a block passes to the other
    /// streams from where the last of them had passed its free). Events
    /// without device times share nothing.
    Device {
        /// Nanoseconds the free must come before the allocation by.
        margin_ns: u64,
    },
}

/// A device's allocations and frees in a trace, ready to plan: its streams
/// (the trace's stream indices) in the order they first allocated, and the
/// events, each allocation on its stream's number in that order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceProgram {
    /// The trace's stream index of each stream (`None`: the events of no
    /// stream), in the order they first allocated.
    pub streams: Vec<Option<u32>>,
    /// The events; an allocation's `stream` indexes `streams`.
    pub ops: Vec<StreamOp>,
}

impl DeviceProgram {
    /// The events of `device` in `trace`, leaving out the streams that
    /// `skip` names (by their trace index). A free counts on the stream of
    /// the allocation it frees; an address allocated again without a free
    /// between (a lost free) frees the earlier block there.
    ///
    /// Device times: an event the trace has none for (a recorder times an
    /// event per interval, see `RecordOptions::device_times`) gets a bound
    /// from the timed events of the stream it was recorded on: a free the
    /// time of the next one (the device had reached the free by then), an
    /// allocation the time of the one before (it had not reached the
    /// allocation earlier). So a plan that shares by device times
    /// ([`Sharing::Device`]) shares only what the timed events prove.
    pub fn of(trace: &Trace, device: u32, skip: impl Fn(Option<u32>) -> bool) -> DeviceProgram {
        let mut p = DeviceProgram::default();
        // The trace stream each event was recorded on.
        let mut on: Vec<Option<u32>> = Vec::new();
        let mut live: HashMap<u64, usize> = HashMap::new();
        let mut made = 0usize;
        for e in trace.events.iter().filter(|e| e.device == device) {
            match e.action {
                Action::Allocate if !skip(e.stream) => {
                    let lane = match p.streams.iter().position(|s| *s == e.stream) {
                        Some(i) => i,
                        None => {
                            p.streams.push(e.stream);
                            p.streams.len() - 1
                        }
                    } as u32;
                    if let Some(k) = live.insert(e.addr, made) {
                        on.push(e.stream);
                        p.ops.push(StreamOp {
                            stream: lane,
                            op: Op::Free(k),
                            t_ns: e.t_ns,
                            device_ns: e.device_ns,
                        });
                    }
                    made += 1;
                    on.push(e.stream);
                    p.ops.push(StreamOp {
                        stream: lane,
                        op: Op::Alloc(e.bytes),
                        t_ns: e.t_ns,
                        device_ns: e.device_ns,
                    });
                }
                Action::Free => {
                    if let Some(k) = live.remove(&e.addr) {
                        on.push(e.stream);
                        p.ops.push(StreamOp {
                            stream: 0,
                            op: Op::Free(k),
                            t_ns: e.t_ns,
                            device_ns: e.device_ns,
                        });
                    }
                }
                _ => {}
            }
        }
        bound_device_times(&mut p.ops, &on);
        p
    }

    /// Each stream's events alone ([`Plan::for_program`]'s input), its
    /// allocations numbered from 0, in the order of `streams`.
    pub fn per_stream(&self) -> Vec<Vec<Op>> {
        let mut own: Vec<Vec<Op>> = vec![Vec::new(); self.streams.len()];
        let mut made = vec![0usize; self.streams.len()];
        // Each allocation's (stream, number on it).
        let mut number: Vec<(usize, usize)> = Vec::new();
        for op in &self.ops {
            match op.op {
                Op::Alloc(size) => {
                    let l = op.stream as usize;
                    number.push((l, made[l]));
                    made[l] += 1;
                    own[l].push(Op::Alloc(size));
                }
                Op::Free(k) => {
                    if let Some(&(l, n)) = number.get(k) {
                        own[l].push(Op::Free(n));
                    }
                }
            }
        }
        own
    }
}

/// [`Sharing::Device`] keeps a block's lifetime for each other stream of
/// plans of up to this many streams; plans of more streams keep one for
/// all of them (the latest), which shares less.
const PER_STREAM_MAX: usize = 16;

/// The margin of [`Sharing::Device`] when none is given: 15 ms. A served
/// run keeps the recorded one's pace only roughly (a quicker host starts
/// the next stream's work sooner, the streams' kernels meet otherwise on
/// the device); on the models benchmark's two-stream mix (H200) the waits
/// of a 5 ms margin held their streams 1.2 to 3.2 ms a step in all, those
/// of 15 ms 0.3 to 0.5 ms, for 1.1 to 1.2 × the memory.
pub const DEVICE_MARGIN_NS: u64 = 15_000_000;

impl Sharing {
    /// Reads a sharing rule from text (the C ABI's `plan_share`, the
    /// trace tool's `--share`): `off` ([`Never`](Sharing::Never)),
    /// milliseconds ([`HostLag`](Sharing::HostLag)), `device`
    /// ([`Device`](Sharing::Device) with a margin of [`DEVICE_MARGIN_NS`])
    /// or `device+MS` (a margin of MS milliseconds). Milliseconds go from 0
    /// to 10000, fractions allowed.
    ///
    /// ```
    /// use somalloc::trace::plan::Sharing;
    /// assert_eq!(Sharing::parse("10"), Ok(Sharing::HostLag(10_000_000)));
    /// assert_eq!(Sharing::parse("device+0.5"), Ok(Sharing::Device { margin_ns: 500_000 }));
    /// assert!(Sharing::parse("device+soon").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Sharing, String> {
        let ms = |v: &str| {
            match v.trim().parse::<f64>() {
            Ok(ms) if (0.0..=10_000.0).contains(&ms) => Ok((ms * 1e6).round() as u64),
            _ => Err(format!(
                "expected off, milliseconds from 0 to 10000, device or device+MS (e.g. 10 or device+0.5), not `{text}`"
            )),
        }
        };
        match text.trim() {
            "off" | "false" | "False" => Ok(Sharing::Never),
            "device" => Ok(Sharing::Device {
                margin_ns: DEVICE_MARGIN_NS,
            }),
            t => match t.strip_prefix("device+") {
                Some(m) => Ok(Sharing::Device { margin_ns: ms(m)? }),
                None => Ok(Sharing::HostLag(ms(t)?)),
            },
        }
    }

    /// Whether the rule reads device times.
    pub fn needs_device_times(self) -> bool {
        matches!(self, Sharing::Device { .. })
    }
}

impl std::fmt::Display for Sharing {
    /// The text [`Sharing::parse`] reads.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |ns: u64| ns as f64 / 1e6;
        match *self {
            Sharing::Never => f.write_str("off"),
            Sharing::HostLag(ns) => write!(f, "{}", ms(ns)),
            Sharing::Device { margin_ns } => write!(f, "device+{}", ms(margin_ns)),
        }
    }
}

/// Gives the events without a device time the bounds of
/// [`DeviceProgram::of`]: `on[i]` is the stream event `i` was recorded on.
/// An event that is itself a lost free (recorded at the next allocation
/// of its address) takes that allocation's bound like any free.
fn bound_device_times(ops: &mut [StreamOp], on: &[Option<u32>]) {
    if ops.iter().all(|o| o.device_ns.is_none()) {
        return;
    }
    let mut next: HashMap<Option<u32>, i64> = HashMap::new();
    let mut bounds: Vec<Option<i64>> = vec![None; ops.len()];
    for i in (0..ops.len()).rev() {
        match ops[i].device_ns {
            Some(d) => {
                next.insert(on[i], d);
            }
            None if matches!(ops[i].op, Op::Free(_)) => bounds[i] = next.get(&on[i]).copied(),
            None => {}
        }
    }
    let mut last: HashMap<Option<u32>, i64> = HashMap::new();
    for (i, op) in ops.iter_mut().enumerate() {
        match op.device_ns {
            Some(d) => {
                last.insert(on[i], d);
            }
            None => {
                op.device_ns = match op.op {
                    Op::Free(_) => bounds[i],
                    Op::Alloc(_) => last.get(&on[i]).copied(),
                };
            }
        }
    }
}

/// Each stream's allocations (their positions among all the allocations)
/// and, at each, the latest device time reached on the stream so far (a
/// stream's queue is reached in order; an allocation without a device time
/// has the one before it).
struct Reached {
    per_stream: Vec<Vec<(u64, i64)>>,
}

impl Reached {
    fn of(ops: &[StreamOp], streams: &[u32]) -> Reached {
        let count = streams.iter().map(|&s| s as usize + 1).max().unwrap_or(0);
        let mut per_stream: Vec<Vec<(u64, i64)>> = vec![Vec::new(); count];
        let mut pos = 0u64;
        for op in ops {
            if let Op::Alloc(_) = op.op {
                let list = &mut per_stream[streams[pos as usize] as usize];
                let before = list.last().map_or(i64::MIN, |&(_, d)| d);
                list.push((pos, op.device_ns.map_or(before, |d| d.max(before))));
                pos += 1;
            }
        }
        Reached { per_stream }
    }

    /// The first allocation of stream `s` from `made` on at which it had
    /// reached `t` (`u64::MAX` if it never did; `made` if it allocates
    /// nothing from then on).
    fn first_on(&self, s: usize, made: usize, t: i64) -> u64 {
        let list = &self.per_stream[s];
        let rest = &list[list.partition_point(|&(p, _)| p < made as u64)..];
        if rest.is_empty() {
            return made as u64;
        }
        rest.get(rest.partition_point(|&(_, d)| d < t))
            .map_or(u64::MAX, |&(p, _)| p)
    }

    /// The first allocation from `made` on from which every stream but
    /// `own` had reached `t` (see [`first_on`](Reached::first_on)): the
    /// rule for all the other streams at once, where a rule per stream
    /// would take too much memory.
    fn first_after(&self, own: u32, made: usize, t: i64) -> u64 {
        (0..self.per_stream.len())
            .filter(|&s| s != own as usize)
            .map(|s| self.first_on(s, made, t))
            .max()
            .unwrap_or(made as u64)
    }
}

/// The shortest step [`find_step`] looks for, in allocations.
pub const MIN_STEP: usize = 4;
/// [`find_step`] looks at sequences of at most this many allocations (its
/// time grows with the square of their number).
pub const MAX_SEARCHED: usize = MAX_BLOCKS;

/// A step found by [`find_step`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// The step's length in allocations.
    pub len: usize,
    /// How many allocations in a row follow it (at least two steps).
    pub covered: usize,
    /// Where they end (exclusive): the last step is `[end - len, end)`.
    pub end: usize,
}

/// The step of a sequence of allocation sizes: the period that the
/// longest run of the sequence follows, at least two periods long (the
/// shortest such period; the latest such run). What comes after the run
/// (a program's evaluation or saving after its loop) is left out of it.
/// `None` when no period of at least [`MIN_STEP`] repeats, or the
/// sequence is longer than [`MAX_SEARCHED`].
///
/// ```
/// use somalloc::trace::plan::{find_step, Step};
/// let mut sizes = vec![1, 2, 3]; // a prologue
/// for _ in 0..3 {
///     sizes.extend([7, 8, 9, 4, 4]); // three steps of five
/// }
/// sizes.extend([5, 6]); // a tail
/// assert_eq!(find_step(&sizes), Some(Step { len: 5, covered: 15, end: 18 }));
/// assert_eq!(find_step(&[1, 2, 3, 4, 5]), None);
/// ```
pub fn find_step(sizes: &[u64]) -> Option<Step> {
    let n = sizes.len();
    if n > MAX_SEARCHED {
        return None;
    }
    let mut best: Option<Step> = None;
    for len in MIN_STEP..=n / 2 {
        // `run` allocations in a row equal the one `len` before, up to
        // `end`: the run covers `run + len` allocations.
        let mut consider = |run: usize, end: usize| {
            let covered = run + len;
            if run >= len
                && best.is_none_or(|b| covered > b.covered || (covered == b.covered && len == b.len))
            {
                best = Some(Step { len, covered, end });
            }
        };
        let mut run = 0;
        for i in len..n {
            if sizes[i] == sizes[i - len] {
                run += 1;
            } else {
                consider(run, i);
                run = 0;
            }
        }
        consider(run, n);
    }
    best
}

/// A slot of a plan: the allocation it stands for, and where it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Bytes requested (a request matches only this size).
    pub size: u64,
    /// Its offset in the arena; `None`: not placed (it lives too long).
    pub offset: Option<u64>,
    /// The recorded stream it was allocated on (0 in a plan of one
    /// stream): only a request on that stream matches it.
    pub stream: u32,
}

/// A planned step or program.
#[derive(Debug)]
pub struct Plan {
    /// One slot per recorded allocation, in order.
    pub slots: Vec<Slot>,
    /// The bytes the arena needs.
    pub arena: u64,
    /// The slot the server goes on with after the last one (the first of
    /// the repeated step); `None`: none, the plan ends.
    pub wrap_to: Option<usize>,
}

pub(crate) fn round(n: u64) -> u64 {
    n.div_ceil(ALIGN).max(1) * ALIGN
}

/// The step positions a record's block holds, as one or two half-open
/// intervals; `None` when it is not placed.
fn span(r: &Rec, events: u32) -> Option<[(u32, u32); 2]> {
    let at = r.at.min(events);
    match r.end {
        End::InStep(f) => Some([(at, f.max(at + 1)), (0, 0)]),
        End::Next(f) if f <= at => Some([(at, events.max(at + 1)), (0, f)]),
        End::Next(_) | End::Later => None,
    }
}

fn meet(a: &[(u32, u32); 2], b: &[(u32, u32); 2]) -> bool {
    a.iter()
        .any(|x| x.0 < x.1 && b.iter().any(|y| y.0 < y.1 && x.0 < y.1 && y.0 < x.1))
}

/// A block's stream, lifetime, and lifetimes for other streams where they
/// differ (for one stream, or for all with stream `u32::MAX`).
type Lives = (u32, Life, Vec<(u32, Life)>);

/// A slot's lifetime in a whole program's events.
#[derive(Clone, Copy, Debug)]
enum Life {
    /// `[from, to)`, once.
    Once(u64, u64),
    /// The step positions `span` of every step from `from` on, steps
    /// `len` events long.
    Every {
        from: u64,
        len: u64,
        span: [(u32, u32); 2],
    },
}

impl Life {
    fn meets(&self, other: &Life) -> bool {
        match (*self, *other) {
            (Life::Once(a, b), Life::Once(c, d)) => a < d && c < b,
            (Life::Every { span: x, .. }, Life::Every { span: y, .. }) => meet(&x, &y),
            (Life::Once(a, b), Life::Every { from, len, span })
            | (Life::Every { from, len, span }, Life::Once(a, b)) => {
                // The step instances that start before `b`.
                if b <= from {
                    return false;
                }
                let last = (b - from) / len.max(1);
                let first = a.saturating_sub(from) / len.max(1);
                // An instance that began a step earlier may reach into
                // this one (a span that wraps).
                (first.saturating_sub(1)..=last).any(|m| {
                    let base = from + m * len;
                    span.iter().enumerate().any(|(i, &(s, e))| {
                        // The wrapped part belongs to the next step.
                        let shift = if i == 1 { len } else { 0 };
                        let (s, e) = (base + shift + u64::from(s), base + shift + u64::from(e));
                        s < e && s < b && a < e
                    })
                })
            }
        }
    }
}

/// Places the blocks that have a lifetime, the largest first (the
/// earliest among equals), each at the lowest offset that no block placed
/// before it and living at the same time (`meets`) holds: the slots, and
/// the arena's bytes.
fn place<L>(sizes: &[u64], lives: &[Option<L>], meets: impl Fn(&L, &L) -> bool) -> (Vec<Slot>, u64) {
    place_on(sizes, &[], lives, meets)
}

/// [`place`], the slots tagged with their streams (`streams[k]`, 0 where
/// `streams` is shorter).
fn place_on<L>(
    sizes: &[u64],
    streams: &[u32],
    lives: &[Option<L>],
    meets: impl Fn(&L, &L) -> bool,
) -> (Vec<Slot>, u64) {
    let mut order: Vec<(usize, &L)> = lives
        .iter()
        .enumerate()
        .filter_map(|(k, l)| l.as_ref().map(|l| (k, l)))
        .collect();
    order.sort_by_key(|&(k, _)| (std::cmp::Reverse(sizes[k]), k));
    let mut offsets: Vec<Option<u64>> = vec![None; sizes.len()];
    let mut placed: Vec<(&L, u64, u64)> = Vec::with_capacity(order.len());
    // The byte ranges of the placed blocks living at the same time as the
    // one being placed.
    let mut taken: Vec<(u64, u64)> = Vec::new();
    let mut arena = 0;
    for (k, life) in order {
        let size = round(sizes[k]);
        taken.clear();
        taken.extend(placed.iter().filter(|p| meets(life, p.0)).map(|p| (p.1, p.2)));
        taken.sort_unstable();
        let mut offset = 0;
        for &(from, to) in &taken {
            if offset + size <= from {
                break;
            }
            offset = offset.max(to);
        }
        offsets[k] = Some(offset);
        arena = arena.max(offset + size);
        placed.push((life, offset, offset + size));
    }
    let slots = sizes
        .iter()
        .zip(offsets)
        .enumerate()
        .map(|(k, (&size, offset))| Slot {
            size,
            offset,
            stream: streams.get(k).copied().unwrap_or(0),
        })
        .collect();
    (slots, arena)
}

impl Plan {
    /// Plans a recorded step of `events` events whose allocations, in
    /// order, are `recs`.
    pub fn build(recs: &[Rec], events: u32) -> Result<Plan, String> {
        if recs.len() > MAX_BLOCKS {
            return Err(format!(
                "a step of {} allocations; at most {MAX_BLOCKS} are planned",
                recs.len()
            ));
        }
        let spans: Vec<_> = recs.iter().map(|r| span(r, events)).collect();
        let sizes: Vec<u64> = recs.iter().map(|r| r.size).collect();
        let (slots, arena) = place(&sizes, &spans, meet);
        Ok(Plan::with_slots(slots, arena))
    }

    /// Plans a whole recorded stream, `ops` in order: each allocation
    /// outside the last repeated step ([`find_step`], two whole steps at
    /// least) gets a slot of its own, placed for its recorded lifetime (for
    /// ever if it was never freed); the last step's allocations get slots
    /// that serve every step after the recording (after the slots of what
    /// followed the step, if anything did), placed for the lifetimes their
    /// counterparts had in the step before. Without a repeated step, every
    /// allocation gets a slot of its own and the plan ends with them.
    pub fn for_program(ops: &[Op]) -> Result<Plan, String> {
        let ops: Vec<StreamOp> = ops.iter().map(|&op| StreamOp::new(0, op, 0)).collect();
        Plan::for_streams_sharing(&ops, Sharing::HostLag(0))
    }

    /// Plans a device's recorded program, `ops` in order, its streams'
    /// blocks in one arena: as [`for_program`](Plan::for_program) does for
    /// one stream, with the repeated step found in the events of all the
    /// streams together (a training loop that runs each model of a step on
    /// its own stream repeats them all). Two blocks of one stream share
    /// bytes when they do not live at the same time; two blocks of
    /// different streams only when one was freed at least `lag_ns` before
    /// the other was allocated, in the recorded run's time: a stream's free
    /// is reached on the device later than on the host, and a block handed
    /// to another stream makes that stream wait for it
    /// ([`Server::allocate_on`]). `u64::MAX` keeps the streams' blocks
    /// apart for ever.
    ///
    /// ```
    /// use somalloc::trace::plan::{Op, Plan, StreamOp};
    /// # fn main() -> Result<(), String> {
    /// // Stream 0 allocates and frees 4 MiB at 0 ms, stream 1 the same at
    /// // 10 ms.
    /// let mib = 1u64 << 20;
    /// let ops = [
    ///     StreamOp::new(0, Op::Alloc(4 * mib), 0),
    ///     StreamOp::new(0, Op::Free(0), 1_000_000),
    ///     StreamOp::new(1, Op::Alloc(4 * mib), 10_000_000),
    ///     StreamOp::new(1, Op::Free(1), 11_000_000),
    /// ];
    /// // Freed 9 ms before: shared when 5 ms is enough, apart when 20 ms is
    /// // needed.
    /// assert_eq!(Plan::for_streams(&ops, 5_000_000)?.arena, 4 * mib);
    /// assert_eq!(Plan::for_streams(&ops, 20_000_000)?.arena, 8 * mib);
    /// # Ok(())
    /// # }
    /// ```
    pub fn for_streams(ops: &[StreamOp], lag_ns: u64) -> Result<Plan, String> {
        Plan::for_streams_sharing(ops, Sharing::HostLag(lag_ns))
    }

    /// Plans a device's recorded program as [`for_streams`](Plan::for_streams)
    /// does, with `sharing` deciding when bytes pass from a stream to
    /// another.
    ///
    /// ```
    /// use somalloc::trace::plan::{Op, Plan, Sharing, StreamOp};
    /// # fn main() -> Result<(), String> {
    /// // Stream 0 frees 4 MiB at 1 ms on the host, stream 1 allocates 4 MiB
    /// // at 10 ms; the device reached stream 0's free at 30 ms, stream
    /// // 1's allocation at 12 ms (stream 0 had work queued).
    /// let mib = 1u64 << 20;
    /// let ms: u64 = 1_000_000;
    /// let dev = |t: u64| (t * ms) as i64;
    /// let ops = [
    ///     StreamOp::new(0, Op::Alloc(4 * mib), 0).at_device(0),
    ///     StreamOp::new(0, Op::Free(0), ms).at_device(dev(30)),
    ///     StreamOp::new(1, Op::Alloc(4 * mib), 10 * ms).at_device(dev(12)),
    ///     StreamOp::new(1, Op::Free(1), 11 * ms).at_device(dev(13)),
    /// ];
    /// // A host lag of 5 ms shares the bytes (stream 1 would wait 18 ms
    /// // for them); the device times keep them apart.
    /// assert_eq!(Plan::for_streams_sharing(&ops, Sharing::HostLag(5 * ms))?.arena, 4 * mib);
    /// let device = Sharing::Device { margin_ns: ms };
    /// assert_eq!(Plan::for_streams_sharing(&ops, device)?.arena, 8 * mib);
    /// # Ok(())
    /// # }
    /// ```
    pub fn for_streams_sharing(ops: &[StreamOp], sharing: Sharing) -> Result<Plan, String> {
        // Positions count allocations: a block freed before the program's
        // allocation `f` is live over [its own number, f). Two blocks live
        // at the same time exactly when these intervals meet, however the
        // frees fall between the allocations (they differ between a
        // program's first step and the others).
        let mut sizes: Vec<u64> = Vec::new();
        let mut streams: Vec<u32> = Vec::new();
        let mut times: Vec<u64> = Vec::new();
        for op in ops {
            if let Op::Alloc(s) = op.op {
                sizes.push(s);
                streams.push(op.stream);
                times.push(op.t_ns);
            }
        }
        let n = sizes.len();
        if n > MAX_BLOCKS {
            return Err(format!(
                "{n} allocations in a stream; at most {MAX_BLOCKS} are planned (record fewer steps)"
            ));
        }
        if let Some(&s) = streams.iter().find(|&&s| s >= MAX_STREAMS) {
            return Err(format!(
                "an allocation on stream {s}; a plan serves streams 0 to {}",
                MAX_STREAMS - 1
            ));
        }
        let mut freed = vec![u64::MAX; n];
        // For blocks of other streams: the first allocation from which
        // `sharing` lets them take the block (at least `freed`), one rule
        // for every other stream (`handed`), or one per stream (`per`,
        // device times, up to `PER_STREAM_MAX` streams).
        let mut handed = vec![u64::MAX; n];
        let reached = Reached::of(ops, &streams);
        let count = reached.per_stream.len();
        let per_stream = matches!(sharing, Sharing::Device { .. }) && count <= PER_STREAM_MAX;
        let mut per: Vec<Vec<u64>> = if per_stream {
            vec![vec![u64::MAX; n]; count]
        } else {
            Vec::new()
        };
        let mut made = 0usize;
        for (pos, op) in ops.iter().enumerate() {
            match op.op {
                Op::Alloc(_) => made += 1,
                Op::Free(k) => {
                    let slot = freed
                        .get_mut(k)
                        .ok_or_else(|| format!("event {pos} frees allocation {k} of {n}"))?;
                    if *slot != u64::MAX || k >= made {
                        return Err(format!("event {pos} frees allocation {k}, which is not live"));
                    }
                    *slot = made as u64;
                    handed[k] = match sharing {
                        Sharing::Never => u64::MAX,
                        Sharing::HostLag(lag_ns) => match op.t_ns.checked_add(lag_ns) {
                            Some(t) => (times.partition_point(|&a| a < t) as u64).max(made as u64),
                            None => u64::MAX,
                        },
                        Sharing::Device { margin_ns } => {
                            let t = op.device_ns.map(|d| d.saturating_add_unsigned(margin_ns));
                            for (s, h) in per.iter_mut().enumerate() {
                                h[k] = match t {
                                    _ if s == streams[k] as usize => made as u64,
                                    Some(t) => reached.first_on(s, made, t),
                                    None => u64::MAX,
                                };
                            }
                            // One rule for all other streams only where there
                            // is no rule per stream.
                            match t {
                                Some(t) if !per_stream => reached.first_after(streams[k], made, t),
                                _ => u64::MAX,
                            }
                        }
                    };
                }
            }
        }
        // The repeated step: allocations [last, end), the step before
        // [prev, last), `p` allocations each. What follows `end` is
        // planned once, like what precedes `prev`. A step matches sizes
        // and streams both.
        let keys: Vec<u64> = sizes
            .iter()
            .zip(&streams)
            .map(|(&s, &t)| s ^ (u64::from(t) << 56))
            .collect();
        let cycle = find_step(&keys).map(|s| (s.len, s.end - 2 * s.len, s.end - s.len, s.end));
        if cycle.is_some_and(|c| c.0 > u32::MAX as usize) {
            return Err("a repeated step of over 4 billion allocations".into());
        }
        // Each slot's lifetime: an interval, or (a slot of the repeated
        // step) a step span repeated every `p` allocations from the last
        // step's start, taken from its twin in the step before. A period
        // whose blocks mostly outlive it (layer after layer of a model's
        // weights) is no step: it is planned once, like the rest.
        let once = |k: usize, freed: &[u64]| Some(Life::Once(k as u64, freed[k].max(k as u64 + 1)));
        let every = |k: usize, (p, prev, last): (usize, usize, usize), freed: &[u64], whole: bool| {
            let rel = (k - last) as u64;
            let (prev, last, f) = (prev as u64, last as u64, freed[k - p]);
            let end = if f <= last {
                Some(End::InStep((f - prev) as u32))
            } else if f != u64::MAX && f - last <= rel {
                Some(End::Next((f - last) as u32))
            } else if whole {
                // Held (for other streams) up to its own next instance.
                Some(End::Next(rel as u32))
            } else {
                None
            };
            let at = Rec {
                size: sizes[k],
                at: rel as u32,
                end: end?,
            };
            span(&at, p as u32).map(|span| Life::Every {
                from: last,
                len: p as u64,
                span,
            })
        };
        let cycle = cycle.filter(|&(p, prev, last, end)| {
            let repeating = (last..end)
                .filter(|&k| every(k, (p, prev, last), &freed, false).is_some())
                .count();
            2 * repeating >= p
        });
        let life = |k: usize, freed: &[u64], whole: bool| match cycle {
            Some((p, prev, last, end)) if (last..end).contains(&k) => every(k, (p, prev, last), freed, whole),
            _ => once(k, freed),
        };
        // A slot of the repeated step takes the lifetime of its twin in the
        // step before; for other streams, it keeps its bytes as long as
        // either recorded instance of the step did (the two ran with
        // different timings: a hand-over both allow is likelier to hold in
        // the steps to come).
        if let Some((p, _, last, end)) = cycle {
            for h in per.iter_mut().chain(std::iter::once(&mut handed)) {
                for k in last..end {
                    let own = match h[k] {
                        u64::MAX => u64::MAX,
                        f => f.saturating_sub(p as u64),
                    };
                    h[k - p] = h[k - p].max(own);
                }
            }
        }
        // (stream, lifetime, lifetimes for other streams): the latter
        // only where they differ, for one stream or (`ANY`) for all.
        const ANY: u32 = u32::MAX;
        // Whether a block's lifetime from `h` differs from its own: a slot
        // of the repeated step takes both from its twin.
        let differs = |k: usize, h: &[u64]| match cycle {
            Some((p, _, last, end)) if (last..end).contains(&k) => h[k - p] != freed[k - p],
            _ => h[k] != freed[k],
        };
        let lives: Vec<Option<Lives>> = (0..n)
            .map(|k| {
                let own = life(k, &freed, false)?;
                let mut others = Vec::new();
                if per_stream {
                    for (s, h) in per.iter().enumerate() {
                        if differs(k, h) {
                            if let Some(l) = life(k, h, true) {
                                others.push((s as u32, l));
                            }
                        }
                    }
                } else if differs(k, &handed) {
                    if let Some(l) = life(k, &handed, true) {
                        others.push((ANY, l));
                    }
                }
                Some((streams[k], own, others))
            })
            .collect();
        let for_stream = |x: &Lives, s: u32| -> Life {
            x.2.iter()
                .find(|(t, _)| *t == s || *t == ANY)
                .map_or(x.1, |(_, l)| *l)
        };
        // Two blocks of different streams meet where each one's lifetime
        // for the other's stream meets the other's.
        let meets = |a: &Lives, b: &Lives| {
            if a.0 == b.0 {
                a.1.meets(&b.1)
            } else {
                for_stream(a, b.0).meets(&for_stream(b, a.0))
            }
        };
        let (slots, arena) = place_on(&sizes, &streams, &lives, meets);
        let mut plan = Plan::with_slots(slots, arena);
        plan.wrap_to = cycle.map(|c| c.2);
        Ok(plan)
    }

    /// A plan of these slots in an arena of `arena` bytes, whatever their
    /// offsets (they may overlap: the server's check keeps live blocks
    /// apart all the same). Slots that do not fit in the arena are not
    /// placed; slots of streams from [`MAX_STREAMS`] on are not placed and
    /// count as stream 0's.
    pub fn with_slots(mut slots: Vec<Slot>, arena: u64) -> Plan {
        for s in &mut slots {
            if s.stream >= MAX_STREAMS {
                s.stream = 0;
                s.offset = None;
            }
            if s.offset
                .is_some_and(|o| o.checked_add(round(s.size)).is_none_or(|end| end > arena))
            {
                s.offset = None;
            }
        }
        Plan {
            slots,
            arena,
            wrap_to: None,
        }
    }

    /// Bytes of the placed slots.
    pub fn placed_bytes(&self) -> u64 {
        self.slots
            .iter()
            .filter(|s| s.offset.is_some())
            .map(|s| s.size)
            .sum()
    }

    /// The program `ops` this plan was made from, replayed with every
    /// placed slot at its offset (the `k`-th allocation in slot `k`): the
    /// allocations that take bytes another stream freed last, in program
    /// order, each with how long before it those frees came (the latest of
    /// them). How far apart a plan keeps the streams in the recorded run is
    /// what its sharing rule allowed; a served run that keeps another pace
    /// waits where these margins are small.
    ///
    /// ```
    /// use somalloc::trace::plan::{Op, Plan, Sharing, StreamOp};
    /// # fn main() -> Result<(), String> {
    /// // Stream 0 frees 1 MiB at 1 ms (the device gets there at 1.5 ms);
    /// // stream 1 allocates 1 MiB at 3 ms (the device at 9 ms).
    /// let ops = [
    ///     StreamOp::new(0, Op::Alloc(1 << 20), 0).at_device(0),
    ///     StreamOp::new(0, Op::Free(0), 1_000_000).at_device(1_500_000),
    ///     StreamOp::new(1, Op::Alloc(1 << 20), 3_000_000).at_device(9_000_000),
    ///     StreamOp::new(1, Op::Free(1), 4_000_000).at_device(10_000_000),
    /// ];
    /// let plan = Plan::for_streams_sharing(&ops, Sharing::Device { margin_ns: 1_000_000 })?;
    /// let h = plan.handovers(&ops);
    /// assert_eq!((h.len(), h[0].slot, h[0].from, h[0].to), (1, 1, 0, 1));
    /// assert_eq!((h[0].host_ns, h[0].device_ns), (2_000_000, Some(7_500_000)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn handovers(&self, ops: &[StreamOp]) -> Vec<Handover> {
        let pieces = Pieces::new(self);
        // Per piece: the last free's stream, host time and device time.
        let mut last: Vec<Option<(u32, u64, Option<i64>)>> = vec![None; pieces.starts.len()];
        let mut streams: Vec<u32> = Vec::new();
        let mut out = Vec::new();
        for op in ops {
            match op.op {
                Op::Alloc(_) => {
                    let k = streams.len();
                    streams.push(op.stream);
                    if k >= self.slots.len() {
                        continue;
                    }
                    let mut took: Option<Handover> = None;
                    for l in last[pieces.of(k)].iter_mut() {
                        if let Some((from, t, d)) = l.take().filter(|f| f.0 != op.stream) {
                            let host_ns = op.t_ns as i64 - t as i64;
                            let device_ns = d.zip(op.device_ns).map(|(f, a)| a - f);
                            let h = Handover {
                                slot: k,
                                from,
                                to: op.stream,
                                host_ns,
                                device_ns,
                            };
                            // The latest free: the smallest margin (by the
                            // device where both have it).
                            let key = |h: &Handover| (h.device_ns.unwrap_or(i64::MAX), h.host_ns);
                            if took.is_none_or(|t| key(&h) < key(&t)) {
                                took = Some(h);
                            }
                        }
                    }
                    out.extend(took);
                }
                Op::Free(k) => {
                    let (Some(&stream), true) = (streams.get(k), k < self.slots.len()) else {
                        continue;
                    };
                    last[pieces.of(k)].fill(Some((stream, op.t_ns, op.device_ns)));
                }
            }
        }
        out
    }
}

/// An allocation that takes bytes another stream freed last, in a plan's
/// replay of its own program ([`Plan::handovers`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handover {
    /// The allocation's number in the program, which is its slot's.
    pub slot: usize,
    /// The stream that freed the bytes, and the one that takes them.
    pub from: u32,
    /// See `from`.
    pub to: u32,
    /// How long after that free the allocation came, on the host's clock
    /// (ns).
    pub host_ns: i64,
    /// The same by the device's times, where both have one: how long after
    /// the device reached the free it reached the allocation.
    pub device_ns: Option<i64>,
}

/// Serves allocations from a plan, in order, each slot checked against the
/// live ones.
///
/// A plan of several streams ([`Plan::for_streams`]) is served stream by
/// stream ([`allocate_on`](Server::allocate_on)), each stream matching its
/// own slots in order, all of them in one arena: a slot whose bytes another
/// stream freed last comes with the [`Wait`]s that order its stream after
/// those frees.
#[derive(Debug)]
pub struct Server {
    plan: Arc<Plan>,
    /// Per stream: its slots in order, and where matching goes on.
    lanes: Vec<Lane>,
    live: Vec<bool>,
    /// Slots never handed out again ([`divert`](Server::divert)): a request
    /// they match is refused, and matching goes on after them.
    diverted: Vec<bool>,
    /// How many slots are live.
    live_count: usize,
    /// The arena cut into pieces at every servable slot's start and end.
    pieces: Pieces,
    /// Per piece: the live slot holding it, plus one (0: none). Live slots
    /// never share a piece (see `allocate_on`).
    holder: Vec<u32>,
    /// How many slots ahead a request looks for its size.
    window: usize,
    /// Who freed the bytes that are not live (plans of several streams).
    handoffs: Option<Handoffs>,
    /// Requests served from the arena.
    pub served: u64,
    /// Requests that got no slot.
    pub refused: u64,
    /// Slots passed over by a match further ahead.
    pub skipped: u64,
    /// Requests refused because the slot they matched was diverted (also
    /// counted in `refused`).
    pub passed: u64,
}

/// The arena cut at the start and the end of every slot the server can
/// hand out (placed, inside the arena): each such slot covers a run of
/// whole pieces, and two of them overlap exactly where they share a piece.
/// Serving a slot then reads and writes its pieces (on the recorded
/// programs a slot covers 15 pieces on average, one in the median) instead
/// of searching ordered maps.
#[derive(Debug)]
struct Pieces {
    /// The pieces' starts, in order.
    starts: Vec<u64>,
    /// Per slot: its pieces `lo..hi` (empty for a slot never handed out).
    of_slot: Vec<(u32, u32)>,
}

impl Pieces {
    fn new(plan: &Plan) -> Pieces {
        let span = |s: &Slot| {
            let o = s.offset?;
            let e = o.checked_add(round(s.size))?;
            (e <= plan.arena).then_some((o, e))
        };
        let mut starts: Vec<u64> = plan
            .slots
            .iter()
            .filter_map(span)
            .flat_map(|(o, e)| [o, e])
            .collect();
        starts.sort_unstable();
        starts.dedup();
        let at = |x: u64| starts.partition_point(|&b| b < x) as u32;
        let of_slot = plan
            .slots
            .iter()
            .map(|s| span(s).map_or((0, 0), |(o, e)| (at(o), at(e))))
            .collect();
        Pieces { starts, of_slot }
    }

    /// Slot `slot`'s pieces.
    fn of(&self, slot: usize) -> std::ops::Range<usize> {
        let (lo, hi) = self.of_slot[slot];
        lo as usize..hi as usize
    }
}

#[derive(Debug)]
struct Lane {
    /// The stream's slots, in plan order.
    order: Vec<usize>,
    /// The index in `order` that matching goes on at after the last (the
    /// stream's first slot of the repeated step).
    wrap: Option<usize>,
    /// The next index in `order` to match.
    cursor: usize,
    /// Its live slots.
    live: usize,
}

/// A stream's frees are numbered from 1 (tickets); an event recorded on
/// the stream after its free number `t` orders a wait after frees 1..=t.
#[derive(Debug)]
struct Handoffs {
    /// Per piece of the arena: its last free (ticket 0: none yet). A
    /// piece taken since keeps it until its next free; only a live slot
    /// holds it meanwhile, and that slot's stream already waited for it.
    freed: Vec<Freed>,
    /// Per stream: its frees so far.
    frees: Vec<u64>,
    /// Per stream: the last free an event was recorded after.
    recorded: Vec<u64>,
    /// `waited[b][a]`: stream `b` waited for stream `a`'s frees up to this.
    waited: Vec<Vec<u64>>,
    /// Slots whose free another stream waited for once (the latest free
    /// of their stream among the bytes it took): their frees are recorded
    /// as they happen from then on.
    handed: Vec<bool>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Freed {
    stream: u32,
    ticket: u64,
    slot: usize,
}

/// How [`Server::grant`] may serve a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// With the waits the slot needs.
    Wait,
    /// Only a slot that needs no wait; a refusal is counted.
    NoWait,
    /// Only a slot that needs no wait; a refusal changes nothing (not
    /// even the count, nor the match past a diverted slot).
    Quiet,
}

/// What a stream must do before it uses a slot another stream freed last
/// ([`Server::allocate_on`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    /// The stream that freed the bytes.
    pub stream: u32,
    /// Wait for an event recorded on `stream` after its free number
    /// `ticket` (the first such event is enough).
    pub ticket: u64,
    /// `Some(t)`: no such event was recorded yet; record one on `stream`
    /// now, filed under `t` (at least `ticket`), before waiting.
    pub record: Option<u64>,
}

/// A slot handed out by [`Server::allocate_on`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The slot.
    pub slot: usize,
    /// Its offset in the arena.
    pub offset: u64,
    /// What the stream must wait for first (one per other stream at most).
    pub waits: Vec<Wait>,
}

impl Server {
    /// Serves the steps after a step planned with [`Plan::build`]: call
    /// [`begin_step`](Server::begin_step) at each step's start. A request
    /// looks up to `window` slots ahead for its size.
    pub fn new(plan: Arc<Plan>, window: usize) -> Server {
        // Slots of streams from MAX_STREAMS on (a plan made by hand) are
        // never served.
        let streams = plan
            .slots
            .iter()
            .filter(|s| s.stream < MAX_STREAMS)
            .map(|s| s.stream as usize + 1)
            .max()
            .unwrap_or(1);
        let mut lanes: Vec<Lane> = (0..streams)
            .map(|_| Lane {
                order: Vec::new(),
                wrap: None,
                cursor: 0,
                live: 0,
            })
            .collect();
        for (k, s) in plan.slots.iter().enumerate() {
            if let Some(lane) = lanes.get_mut(s.stream as usize) {
                lane.order.push(k);
            }
        }
        if let Some(w) = plan.wrap_to {
            for lane in &mut lanes {
                let at = lane.order.partition_point(|&k| k < w);
                lane.wrap = (at < lane.order.len()).then_some(at);
            }
        }
        let pieces = Pieces::new(&plan);
        Server {
            live: vec![false; plan.slots.len()],
            diverted: vec![false; plan.slots.len()],
            live_count: 0,
            holder: vec![0; pieces.starts.len()],
            handoffs: (streams > 1).then(|| Handoffs {
                freed: vec![Freed::default(); pieces.starts.len()],
                frees: vec![0; streams],
                recorded: vec![0; streams],
                waited: vec![vec![0; streams]; streams],
                handed: vec![false; plan.slots.len()],
            }),
            lanes,
            pieces,
            plan,
            window: window.max(1),
            served: 0,
            refused: 0,
            skipped: 0,
            passed: 0,
        }
    }

    /// Serves a program planned with [`Plan::for_program`] or
    /// [`Plan::for_streams`] from its first allocation on: after a
    /// stream's last slot, matching goes on at its first slot of the
    /// repeated step.
    pub fn for_program(plan: Arc<Plan>, window: usize) -> Server {
        Server::new(plan, window)
    }

    /// The plan served.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// How many streams the plan has.
    pub fn streams(&self) -> usize {
        self.lanes.len()
    }

    /// A step begins: matching starts again at the first slot. Blocks of
    /// the last step may still be live; their slots stay taken.
    pub fn begin_step(&mut self) {
        for lane in &mut self.lanes {
            lane.cursor = 0;
        }
    }

    /// The index after `i` in `lane`'s order: the next one, or past the
    /// last the repeated step's first (`None`: the plan has ended).
    fn after(lane: &Lane, i: usize) -> Option<usize> {
        match i + 1 {
            n if n < lane.order.len() => Some(n),
            _ => lane.wrap,
        }
    }

    /// A slot for `size` bytes and its offset in the arena, or `None` (the
    /// caller takes the memory elsewhere): [`allocate_on`](Server::allocate_on)
    /// stream 0, refused where the slot would need a wait.
    pub fn allocate(&mut self, size: u64) -> Option<(usize, u64)> {
        self.grant(0, size, Mode::NoWait).map(|g| (g.slot, g.offset))
    }

    /// [`allocate_on`](Server::allocate_on) where the slot it would hand
    /// out needs no wait: `Some(slot, offset)`; `None`: nothing changed
    /// and nothing counted (call `allocate_on`, which decides).
    pub fn allocate_unwaited(&mut self, stream: u32, size: u64) -> Option<(usize, u64)> {
        self.grant(stream, size, Mode::Quiet).map(|g| (g.slot, g.offset))
    }

    /// Whether [`free_slot`](Server::free_slot) of the live slot `slot`
    /// would ask for an event (`false` also when it is not live).
    pub fn free_records(&self, slot: usize) -> bool {
        self.live.get(slot).is_some_and(|&l| l) && self.handoffs.as_ref().is_some_and(|h| h.handed[slot])
    }

    /// A slot for `size` bytes on the plan's stream `stream`, or `None`
    /// (the caller takes the memory elsewhere). The caller must carry out
    /// the grant's waits on `stream` before it uses the block.
    pub fn allocate_on(&mut self, stream: u32, size: u64) -> Option<Grant> {
        self.grant(stream, size, Mode::Wait)
    }

    /// Slot `slot` is never handed out again: a request that matches it is
    /// refused (the caller serves it elsewhere) and matching goes on after
    /// it, so the stream's later requests still meet their own slots.
    /// `false` when there is no such slot or it was diverted already. A
    /// live slot stays live until freed. Nothing else changes: the bytes
    /// it would have taken keep the record of who freed them last, so a
    /// later slot on them waits for that free as it would have for this
    /// slot's.
    pub fn divert(&mut self, slot: usize) -> bool {
        match self.diverted.get_mut(slot) {
            Some(d @ false) => {
                *d = true;
                true
            }
            _ => false,
        }
    }

    /// Whether slot `slot` was diverted ([`divert`](Server::divert)).
    pub fn is_diverted(&self, slot: usize) -> bool {
        self.diverted.get(slot).is_some_and(|&d| d)
    }

    fn grant(&mut self, stream: u32, size: u64, mode: Mode) -> Option<Grant> {
        // A quiet request that gets nothing leaves no trace.
        let refuse = |s: &mut Server| {
            if mode != Mode::Quiet {
                s.refused += 1;
            }
            None
        };
        let Some(lane) = self.lanes.get(stream as usize) else {
            return refuse(self);
        };
        let slots = &self.plan.slots;
        let mut i = Some(lane.cursor).filter(|&c| c < lane.order.len());
        let mut looked = 0;
        let found = loop {
            match i {
                Some(at) if looked < self.window => {
                    if slots[lane.order[at]].size == size {
                        break Some(at);
                    }
                    looked += 1;
                    i = Self::after(lane, at);
                }
                _ => break None,
            }
        };
        let Some(at) = found else {
            return refuse(self);
        };
        let j = lane.order[at];
        if self.diverted[j] {
            if mode == Mode::Quiet {
                return None;
            }
            // Matched, and served elsewhere: the stream's next request
            // matches from the slot after.
            let lane = &mut self.lanes[stream as usize];
            lane.cursor = Self::after(lane, at).unwrap_or(lane.order.len());
            self.skipped += looked as u64;
            self.passed += 1;
            return refuse(self);
        }
        // Placed inside the arena (a plan's fields are public: one made by
        // hand may say otherwise: such a slot has no pieces), and no live
        // block on any of its pieces.
        let pieces = self.pieces.of(j);
        let offset = match slots[j].offset {
            Some(offset)
                if !self.live[j]
                    && !pieces.is_empty()
                    && self.holder[pieces.clone()].iter().all(|&h| h == 0) =>
            {
                offset
            }
            _ => return refuse(self),
        };
        let waits = match &mut self.handoffs {
            Some(h) => match h.take(stream, pieces.clone(), mode == Mode::Wait) {
                Some(w) => w,
                None => return refuse(self),
            },
            None => Vec::new(),
        };
        let lane = &mut self.lanes[stream as usize];
        self.skipped += looked as u64;
        lane.cursor = Self::after(lane, at).unwrap_or(lane.order.len());
        lane.live += 1;
        self.live[j] = true;
        self.live_count += 1;
        // Slots number at most `MAX_BLOCKS` by plan (`u32` is plenty); a
        // plan made by hand with more still keeps them apart.
        let tag = u32::try_from(j + 1).unwrap_or(u32::MAX);
        self.holder[pieces].fill(tag);
        self.served += 1;
        Some(Grant {
            slot: j,
            offset,
            waits,
        })
    }

    /// Slot `slot`'s block is freed. `false` (and nothing changes) when it
    /// was not live. In a plan of several streams, a later stream that
    /// takes these bytes records an event on this one first
    /// ([`Wait::record`]); [`free_slot`](Server::free_slot) avoids that.
    pub fn free(&mut self, slot: usize) -> bool {
        self.release(slot, false).is_some()
    }

    /// Slot `slot`'s block is freed in its stream's order: `None` (and
    /// nothing changes) when it was not live; `Some(Some(t))`: record an
    /// event on the slot's stream now, filed under `t` (its bytes went to
    /// another stream before, and will again).
    pub fn free_slot(&mut self, slot: usize) -> Option<Option<u64>> {
        self.release(slot, true)
    }

    fn release(&mut self, slot: usize, may_record: bool) -> Option<Option<u64>> {
        match self.live.get_mut(slot) {
            Some(l @ true) => *l = false,
            _ => return None,
        }
        let s = self.plan.slots[slot];
        self.lanes[s.stream as usize].live -= 1;
        self.live_count -= 1;
        // A live slot has pieces (`grant` hands out no other), which it
        // alone holds.
        let pieces = self.pieces.of(slot);
        self.holder[pieces.clone()].fill(0);
        let Some(h) = &mut self.handoffs else {
            return Some(None);
        };
        let a = s.stream as usize;
        h.frees[a] += 1;
        let ticket = h.frees[a];
        h.freed[pieces].fill(Freed {
            stream: s.stream,
            ticket,
            slot,
        });
        if may_record && h.handed[slot] {
            h.recorded[a] = ticket;
            Some(Some(ticket))
        } else {
            Some(None)
        }
    }

    /// `stream` ends (its handle goes away): `Some(t)` asks for an event
    /// recorded on it now, filed under `t`, so that other streams never
    /// need one recorded later.
    pub fn seal(&mut self, stream: u32) -> Option<u64> {
        let h = self.handoffs.as_mut()?;
        let a = stream as usize;
        let f = *h.frees.get(a)?;
        (h.recorded[a] < f).then(|| {
            h.recorded[a] = f;
            f
        })
    }

    /// The event [`free_slot`](Server::free_slot) or [`seal`](Server::seal)
    /// asked for on `stream` could not be recorded: a stream that waits for
    /// its frees is asked to record one itself ([`Wait::record`]).
    pub fn forget_record(&mut self, stream: u32) {
        if let Some(r) = self
            .handoffs
            .as_mut()
            .and_then(|h| h.recorded.get_mut(stream as usize))
        {
            *r = 0;
        }
    }

    /// The live slot whose block starts at `offset`, if any.
    pub fn live_slot_at(&self, offset: u64) -> Option<usize> {
        let p = self.pieces.starts.binary_search(&offset).ok()?;
        let slot = (self.holder[p] as usize).checked_sub(1)?;
        (self.plan.slots.get(slot)?.offset == Some(offset)).then_some(slot)
    }

    /// How many slots are live.
    pub fn live_slots(&self) -> usize {
        self.live_count
    }

    /// How many slots of the plan's stream `stream` are live.
    pub fn live_slots_of(&self, stream: u32) -> usize {
        self.lanes.get(stream as usize).map_or(0, |l| l.live)
    }

    /// The live slots' byte ranges.
    #[cfg(test)]
    pub fn live_ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.live.iter().enumerate().filter(|(_, &l)| l).map(|(i, _)| {
            let s = &self.plan.slots[i];
            let o = s.offset.expect("a live slot is placed");
            (o, o + round(s.size))
        })
    }
}

impl Handoffs {
    /// Stream `b` takes the pieces `pieces` (no live slot holds them):
    /// the waits on the other streams that freed them last are returned
    /// (`None`, nothing changed, if there are some and `may_wait` is off).
    fn take(&mut self, b: u32, pieces: std::ops::Range<usize>, may_wait: bool) -> Option<Vec<Wait>> {
        // Per other stream, the latest of its frees to wait for, and its
        // slot. A piece freed by `b` itself, or taken by a slot since (its
        // stream waited for this free, or freed it itself), asks for
        // nothing more than `waited` already says.
        let mut need: Vec<(u32, u64, usize)> = Vec::new();
        for f in &self.freed[pieces] {
            if f.ticket != 0 && f.stream != b && self.waited[b as usize][f.stream as usize] < f.ticket {
                match need.iter_mut().find(|n| n.0 == f.stream) {
                    Some(n) if n.1 < f.ticket => *n = (f.stream, f.ticket, f.slot),
                    Some(_) => {}
                    None => need.push((f.stream, f.ticket, f.slot)),
                }
            }
        }
        if !need.is_empty() && !may_wait {
            return None;
        }
        need.sort_unstable();
        Some(
            need.into_iter()
                .map(|(a, ticket, slot)| {
                    // The wait covers the stream's earlier frees: only
                    // this slot's free needs its event at the free.
                    self.handed[slot] = true;
                    let (ai, bi) = (a as usize, b as usize);
                    let record = (self.recorded[ai] < ticket).then(|| {
                        self.recorded[ai] = self.frees[ai];
                        self.frees[ai]
                    });
                    self.waited[bi][ai] = ticket;
                    Wait {
                        stream: a,
                        ticket,
                        record,
                    }
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn rec(size: u64, at: u32, end: End) -> Rec {
        Rec { size, at, end }
    }

    /// Any two placed blocks that live at the same time hold separate
    /// bytes, inside the arena.
    fn check_placement(recs: &[Rec], events: u32, plan: &Plan) {
        for i in 0..recs.len() {
            let Some(oi) = plan.slots[i].offset else { continue };
            assert!(oi + round(recs[i].size) <= plan.arena);
            assert_eq!(oi % ALIGN, 0);
            for j in i + 1..recs.len() {
                let Some(oj) = plan.slots[j].offset else { continue };
                let (a, b) = (span(&recs[i], events).unwrap(), span(&recs[j], events).unwrap());
                if meet(&a, &b) {
                    let apart = oi + round(recs[i].size) <= oj || oj + round(recs[j].size) <= oi;
                    assert!(apart, "blocks {i} and {j} live together and overlap");
                }
            }
        }
    }

    #[test]
    fn blocks_living_together_are_apart_and_the_others_share() {
        // a: 0..4, b: 1..3 (inside a), c: 5..7 (after both), d wraps 6..8 and 0..1.
        let recs = [
            rec(1000, 0, End::InStep(4)),
            rec(3000, 1, End::InStep(3)),
            rec(4000, 5, End::InStep(7)),
            rec(512, 6, End::Next(1)),
        ];
        let plan = Plan::build(&recs, 8).unwrap();
        check_placement(&recs, 8, &plan);
        // c is the largest; b lives apart from c, so b shares c's bytes;
        // a lives with b and d with c.
        assert_eq!(plan.slots[2].offset, Some(0));
        assert_eq!(plan.slots[1].offset, Some(0));
        assert_eq!(plan.slots[0].offset, Some(3072));
        assert_eq!(plan.slots[3].offset, Some(4096));
        assert_eq!(plan.arena, 4608);
    }

    #[test]
    fn blocks_outliving_the_next_instance_are_not_placed() {
        let recs = [
            rec(100, 2, End::Later),
            rec(100, 2, End::Next(3)), // freed after its own next allocation
            rec(100, 4, End::Next(1)),
        ];
        let plan = Plan::build(&recs, 6).unwrap();
        assert_eq!(plan.slots[0].offset, None);
        assert_eq!(plan.slots[1].offset, None);
        assert_eq!(plan.slots[2].offset, Some(0));
        assert_eq!(plan.placed_bytes(), 100);
    }

    #[test]
    fn a_repeated_step_is_served_whole_and_a_stray_one_in_part() {
        // Two blocks that never live together share their bytes.
        let recs = [rec(1 << 20, 0, End::InStep(1)), rec(1 << 20, 2, End::InStep(3))];
        let plan = Arc::new(Plan::build(&recs, 4).unwrap());
        assert_eq!(plan.arena, 1 << 20);
        let mut s = Server::new(plan, 4);
        for _ in 0..3 {
            s.begin_step();
            let (a, _) = s.allocate(1 << 20).unwrap();
            assert!(s.free(a));
            let (b, _) = s.allocate(1 << 20).unwrap();
            assert!(s.free(b));
        }
        assert_eq!((s.served, s.refused), (6, 0));
        // A step that holds the first block longer: the second finds its
        // bytes taken and is refused, not placed over it.
        s.begin_step();
        let (a, _) = s.allocate(1 << 20).unwrap();
        assert_eq!(s.allocate(1 << 20), None);
        assert!(s.free(a));
        assert!(!s.free(a));
        // A size the plan does not have is refused and does not move the
        // match: the next request still finds slot 0.
        s.begin_step();
        assert_eq!(s.allocate(77), None);
        assert_eq!(s.allocate(1 << 20).map(|x| x.0), Some(0));
        assert_eq!(s.refused, 2);
    }

    #[test]
    fn a_dropped_allocation_is_skipped_within_the_window() {
        let recs = [
            rec(100, 0, End::InStep(6)),
            rec(200, 1, End::InStep(6)),
            rec(300, 2, End::InStep(6)),
        ];
        let plan = Arc::new(Plan::build(&recs, 7).unwrap());
        let mut s = Server::new(plan.clone(), 2);
        assert_eq!(s.allocate(200).map(|x| x.0), Some(1));
        assert_eq!(s.skipped, 1);
        assert_eq!(s.allocate(300).map(|x| x.0), Some(2));
        let mut s = Server::new(plan, 2);
        assert_eq!(s.allocate(300), None, "two slots ahead is outside a window of 2");
    }

    /// A program: `persistent` blocks never freed, then `steps` steps of
    /// the allocations `step` (size, lifetime in allocations: freed just
    /// before the allocation that many later, at most a step later).
    fn program(persistent: &[u64], step: &[(u64, usize)], steps: usize) -> Vec<Op> {
        let mut ops: Vec<Op> = persistent.iter().map(|&s| Op::Alloc(s)).collect();
        let base = persistent.len();
        // (due at this allocation count, allocation number)
        let mut due: Vec<(usize, usize)> = Vec::new();
        for i in 0..steps * step.len() {
            let g = base + i;
            due.sort_unstable();
            while due.first().is_some_and(|d| d.0 <= i) {
                ops.push(Op::Free(due.remove(0).1));
            }
            let (size, life) = step[i % step.len()];
            ops.push(Op::Alloc(size));
            due.push((i + life.clamp(1, step.len()), g));
        }
        ops
    }

    /// Serves `ops` and returns the number of allocations refused.
    fn serve(server: &mut Server, ops: &[Op]) -> u64 {
        let mut slot_of: Vec<Option<usize>> = Vec::new();
        let before = server.refused;
        for op in ops {
            match *op {
                Op::Alloc(size) => slot_of.push(server.allocate(size).map(|x| x.0)),
                Op::Free(k) => {
                    if let Some(slot) = slot_of[k] {
                        assert!(server.free(slot));
                    }
                }
            }
        }
        server.refused - before
    }

    #[test]
    fn a_program_is_planned_once_and_its_step_for_ever() {
        // Weights (never freed), then steps of: a gradient g (512 KiB)
        // freed at the next step's start, activations a (1 MiB), b (2 MiB)
        // and c (3 MiB) freed within the step.
        let mib = 1u64 << 20;
        let step = [(mib / 2, 4), (mib, 1), (2 * mib, 1), (3 * mib, 1)];
        let recorded = program(&[4 * mib], &step, 3);
        let plan = Arc::new(Plan::for_program(&recorded).unwrap());
        assert_eq!(plan.wrap_to, Some(1 + 2 * 4));
        // The weights, the gradient and the largest activation at once.
        assert_eq!(plan.arena, 4 * mib + mib / 2 + 3 * mib);
        // The recorded run and twenty more steps: every allocation served.
        let mut server = Server::for_program(plan.clone(), 8);
        let longer = program(&[4 * mib], &step, 23);
        assert_eq!(serve(&mut server, &longer), 0);
        assert_eq!(server.served as usize, 1 + 23 * 4);
    }

    #[test]
    fn what_follows_the_loop_is_planned_once_and_the_step_goes_on() {
        // Steps of four allocations freed at once, then two allocations
        // after the loop (an evaluation), then more steps in the served
        // run.
        let ops = |steps: usize, tail_at: usize| {
            let mut ops = Vec::new();
            let mut k = 0;
            let mut push = |ops: &mut Vec<Op>, size: u64| {
                ops.push(Op::Alloc(size));
                ops.push(Op::Free(k));
                k += 1;
            };
            for s in 0..steps {
                if s == tail_at {
                    push(&mut ops, 99_999);
                    push(&mut ops, 77_777);
                }
                for size in [1000, 2000, 3000, 4000] {
                    push(&mut ops, size);
                }
            }
            if tail_at == steps {
                push(&mut ops, 99_999);
                push(&mut ops, 77_777);
            }
            ops
        };
        let plan = Arc::new(Plan::for_program(&ops(3, 3)).unwrap());
        assert_eq!(plan.wrap_to, Some(8));
        let mut server = Server::for_program(plan, 16);
        assert_eq!(serve(&mut server, &ops(13, 3)), 0);
        assert_eq!(server.served, 13 * 4 + 2);
    }

    #[test]
    fn a_period_of_blocks_never_freed_is_no_step() {
        // A model's layers: the same four weights, eight times, all kept.
        let ops: Vec<Op> = (0..32).map(|k| Op::Alloc(1000 * (k % 4 + 1))).collect();
        let plan = Arc::new(Plan::for_program(&ops).unwrap());
        assert_eq!(plan.wrap_to, None);
        assert!(plan.slots.iter().all(|s| s.offset.is_some()));
        assert_eq!(plan.arena, 8 * (1024 + 2048 + 3072 + 4096));
    }

    #[test]
    fn a_program_without_a_step_ends_with_its_slots() {
        let ops = [Op::Alloc(100), Op::Alloc(200), Op::Free(0), Op::Alloc(300)];
        let plan = Arc::new(Plan::for_program(&ops).unwrap());
        assert_eq!(plan.wrap_to, None);
        let mut server = Server::for_program(plan, 4);
        assert_eq!(serve(&mut server, &ops), 0);
        assert_eq!(server.allocate(100), None, "the plan has ended");
    }

    #[test]
    fn frees_the_program_cannot_have_made_are_errors() {
        assert!(Plan::for_program(&[Op::Free(0)])
            .unwrap_err()
            .contains("frees allocation 0 of 0"));
        let twice = [Op::Alloc(1), Op::Free(0), Op::Free(0)];
        assert!(Plan::for_program(&twice).unwrap_err().contains("not live"));
    }

    #[test]
    fn too_many_blocks_are_an_error() {
        let recs = vec![rec(1, 0, End::InStep(1)); MAX_BLOCKS + 1];
        assert!(Plan::build(&recs, 2).unwrap_err().contains("at most"));
    }

    #[test]
    fn streams_beyond_the_limit_are_refused_not_served() {
        let ops = [sop(MAX_STREAMS, Op::Alloc(512), 0)];
        assert!(Plan::for_streams(&ops, 0).unwrap_err().contains("stream 256"));
        let plan = Plan::with_slots(
            vec![Slot {
                size: 512,
                offset: Some(0),
                stream: u32::MAX,
            }],
            1024,
        );
        assert_eq!((plan.slots[0].stream, plan.slots[0].offset), (0, None));
        let mut s = Server::new(Arc::new(plan), 4);
        assert_eq!(s.streams(), 1);
        assert_eq!(s.allocate(512), None);
    }

    #[test]
    fn a_plan_made_by_hand_serves_nothing_outside_its_arena_or_its_streams() {
        let plan = Plan {
            slots: vec![
                Slot {
                    size: 512,
                    offset: Some(1024),
                    stream: 0,
                },
                Slot {
                    size: 512,
                    offset: Some(0),
                    stream: 1 << 30,
                },
            ],
            arena: 1024,
            wrap_to: None,
        };
        let mut s = Server::new(Arc::new(plan), 4);
        assert_eq!(s.streams(), 1);
        assert_eq!(s.allocate(512), None, "past the arena's end");
        assert_eq!(
            s.allocate_on(1 << 30, 512),
            None,
            "a stream the server has no lane for"
        );
    }

    #[test]
    fn slots_beyond_the_arena_are_not_placed() {
        let plan = Plan::with_slots(
            vec![
                Slot {
                    size: 512,
                    offset: Some(0),
                    stream: 0,
                },
                Slot {
                    size: 512,
                    offset: Some(u64::MAX - 10),
                    stream: 0,
                },
            ],
            1024,
        );
        assert_eq!(plan.slots[1].offset, None);
    }

    fn sop(stream: u32, op: Op, ms: u64) -> StreamOp {
        StreamOp::new(stream, op, ms * 1_000_000)
    }

    /// Two streams, each a step of one 1 MiB block, stream 1 allocating
    /// 10 ms after stream 0 freed.
    fn two_streams(steps: u64) -> Vec<StreamOp> {
        let mut ops = Vec::new();
        for k in 0..steps {
            let t = 30 * k;
            ops.push(sop(0, Op::Alloc(1 << 20), t));
            ops.push(sop(0, Op::Free(2 * k as usize), t + 1));
            ops.push(sop(1, Op::Alloc(1 << 20), t + 11));
            ops.push(sop(1, Op::Free(2 * k as usize + 1), t + 12));
        }
        ops
    }

    #[test]
    fn streams_share_bytes_only_after_the_lag() {
        let shared = Plan::for_streams(&two_streams(3), 5_000_000).unwrap();
        assert_eq!(shared.arena, 1 << 20);
        assert_eq!(shared.slots[2].stream, 0);
        assert_eq!(shared.slots[3].stream, 1);
        let apart = Plan::for_streams(&two_streams(3), 15_000_000).unwrap();
        assert_eq!(apart.arena, 2 << 20);
        // A plan of one stream is the same either way.
        let one: Vec<Op> = two_streams(3).iter().map(|o| o.op).collect();
        assert_eq!(Plan::for_program(&one).unwrap().arena, 1 << 20);
    }

    #[test]
    fn device_times_share_bytes_only_with_the_streams_that_had_passed_the_free() {
        let ms = 1_000_000i64;
        let d = |stream, op, host: u64, dev: i64| sop(stream, op, host).at_device(dev * ms);
        // Stream 0 frees 1 MiB; on the device, stream 1 passes the free by
        // 8 ms, stream 2 by only 0.5 ms.
        let ops = [
            d(0, Op::Alloc(1 << 20), 0, 0),
            d(0, Op::Free(0), 1, 10),
            d(1, Op::Alloc(1 << 20), 2, 18),
            d(2, Op::Alloc(1 << 20), 3, 10),
            d(1, Op::Free(1), 4, 19),
            d(2, Op::Free(2), 5, 11),
        ];
        let plan = |margin_ms: u64| {
            Plan::for_streams_sharing(
                &ops,
                Sharing::Device {
                    margin_ns: margin_ms * 1_000_000,
                },
            )
            .unwrap()
        };
        // Stream 1 had passed the free by more than 1 ms: its block takes
        // stream 0's bytes. Stream 2 had not: its block keeps apart from
        // stream 0's (and from stream 1's, which lives beside it).
        let by_1 = plan(1);
        assert_eq!(by_1.arena, 2 << 20);
        assert_eq!(by_1.slots[1].offset, by_1.slots[0].offset);
        assert_ne!(by_1.slots[2].offset, by_1.slots[0].offset);
        // By 9 ms neither had.
        assert_eq!(plan(9).arena, 3 << 20);
        // Without device times nothing is shared, whatever the host times.
        let bare: Vec<StreamOp> = ops
            .iter()
            .map(|o| StreamOp::new(o.stream, o.op, o.t_ns))
            .collect();
        let none = Plan::for_streams_sharing(&bare, Sharing::Device { margin_ns: 0 }).unwrap();
        assert_eq!(none.arena, 3 << 20);
        assert_eq!(
            Plan::for_streams_sharing(&bare, Sharing::HostLag(0))
                .unwrap()
                .arena,
            2 << 20
        );
        assert_eq!(
            Plan::for_streams_sharing(&bare, Sharing::Never).unwrap().arena,
            3 << 20
        );
    }

    /// Three steps of two streams: stream 0 frees 1 MiB and 512 bytes,
    /// stream 1 allocates as much 1 ms later on the host; on the device,
    /// stream 0's frees come `late[i]` ms after stream 1's allocations in
    /// step `i` (negative: before).
    fn steps_timed(late: [i64; 3]) -> Vec<StreamOp> {
        let mut ops = Vec::new();
        let ms = 1_000_000i64;
        for (i, late) in late.into_iter().enumerate() {
            let t = 100 * i as u64;
            let d = 100 * i as i64 * ms;
            let k = 4 * i;
            let at = |stream, op, host: u64, dev: i64| sop(stream, op, host).at_device(dev);
            ops.push(at(0, Op::Alloc(1 << 20), t, d));
            ops.push(at(0, Op::Alloc(512), t, d));
            ops.push(at(0, Op::Free(k), t + 1, d + 10 * ms + late * ms));
            ops.push(at(0, Op::Free(k + 1), t + 1, d + 10 * ms + late * ms));
            ops.push(at(1, Op::Alloc(1 << 20), t + 2, d + 10 * ms));
            ops.push(at(1, Op::Alloc(512), t + 2, d + 10 * ms));
            ops.push(at(1, Op::Free(k + 2), t + 3, d + 11 * ms));
            ops.push(at(1, Op::Free(k + 3), t + 3, d + 11 * ms));
        }
        ops
    }

    #[test]
    fn a_repeated_steps_slot_passes_bytes_only_where_both_recorded_steps_allowed() {
        let device = Sharing::Device { margin_ns: 1_000_000 };
        // Stream 0's frees come 5 ms before stream 1's allocations in
        // every step: the repeated step shares its bytes.
        let both = Plan::for_streams_sharing(&steps_timed([-5, -5, -5]), device).unwrap();
        assert_eq!(both.wrap_to, Some(8));
        let (a, b) = (&both.slots[8], &both.slots[10]);
        assert_eq!((a.stream, b.stream, a.offset), (0, 1, b.offset));
        // In the last step they come 20 ms after: the repeated step keeps
        // them apart, though its twin in the step before would share.
        for late in [[-5, -5, 20], [-5, 20, -5]] {
            let apart = Plan::for_streams_sharing(&steps_timed(late), device).unwrap();
            let (a, b) = (&apart.slots[8], &apart.slots[10]);
            assert_ne!(a.offset, b.offset, "{late:?}");
            assert!(apart.arena >= 2 << 20, "{late:?}");
        }
    }

    #[test]
    fn untimed_events_take_the_bounds_of_their_streams_timed_ones() {
        use super::super::format::{Event, Source, StreamInfo, ThreadInfo};
        let ev = |t: u64, action, stream: u32, addr: u64| Event::new(t, action, 0, 0).on(stream).at(64, addr);
        let trace = Trace {
            source: Source::Somalloc,
            version: 1,
            meta: Vec::new(),
            threads: vec![ThreadInfo { name: "main".into() }],
            streams: vec![
                StreamInfo {
                    device: 0,
                    handle: 0x10,
                },
                StreamInfo {
                    device: 0,
                    handle: 0x20,
                },
            ],
            backtraces: Vec::new(),
            events: vec![
                ev(1, Action::Allocate, 0, 0xa).with_device_ns(100),
                ev(2, Action::Allocate, 0, 0xb),
                // Freed on stream 1: bounded by stream 1's next timed event.
                ev(3, Action::Free, 1, 0xa),
                ev(4, Action::Allocate, 1, 0xc).with_device_ns(900),
                ev(5, Action::Free, 0, 0xb),
                ev(6, Action::Allocate, 0, 0xd).with_device_ns(500),
                ev(7, Action::Free, 0, 0xd),
            ],
            dropped: 0,
            complete: true,
        };
        let p = DeviceProgram::of(&trace, 0, |_| false);
        let got: Vec<(Op, Option<i64>)> = p.ops.iter().map(|o| (o.op, o.device_ns)).collect();
        assert_eq!(
            got,
            [
                (Op::Alloc(64), Some(100)),
                // No earlier than the allocation before it on its stream.
                (Op::Alloc(64), Some(100)),
                (Op::Free(0), Some(900)),
                (Op::Alloc(64), Some(900)),
                // No later than the next timed event of its stream.
                (Op::Free(1), Some(500)),
                (Op::Alloc(64), Some(500)),
                // Nothing timed after it: no bound.
                (Op::Free(3), None),
            ]
        );
    }

    #[test]
    fn beyond_sixteen_streams_one_rule_serves_all_other_streams() {
        let ms = 1_000_000i64;
        let d = |stream, op, host: u64, dev: i64| sop(stream, op, host).at_device(dev * ms);
        // Stream 0 frees 1 MiB; stream 1 passes the free by 8 ms and takes
        // 1 MiB; then `others` more streams allocate 64 bytes each, the
        // last of them reaching its allocation before the free.
        let ops = |others: u32| {
            let mut ops = vec![
                d(0, Op::Alloc(1 << 20), 0, 0),
                d(0, Op::Free(0), 1, 10),
                d(1, Op::Alloc(1 << 20), 2, 18),
            ];
            for s in 0..others {
                let dev = if s + 1 == others { 5 } else { 30 };
                ops.push(d(2 + s, Op::Alloc(64), 3 + u64::from(s), dev));
            }
            ops
        };
        let device = Sharing::Device { margin_ns: 1_000_000 };
        // 16 streams: each judged on its own, stream 1 takes the bytes.
        let judged = Plan::for_streams_sharing(&ops(14), device).unwrap();
        assert_eq!(judged.slots[1].offset, judged.slots[0].offset);
        // 17: one rule, from the last stream to pass the free, which never
        // did: stream 1 keeps apart.
        let one_rule = Plan::for_streams_sharing(&ops(15), device).unwrap();
        assert_ne!(one_rule.slots[1].offset, one_rule.slots[0].offset);
    }

    #[test]
    fn sharing_rules_read_back_as_written() {
        for rule in [
            Sharing::Never,
            Sharing::HostLag(0),
            Sharing::HostLag(17_500_000),
            Sharing::Device {
                margin_ns: DEVICE_MARGIN_NS,
            },
            Sharing::Device { margin_ns: 250_000 },
        ] {
            assert_eq!(Sharing::parse(&rule.to_string()), Ok(rule));
        }
        assert_eq!(
            Sharing::parse("device"),
            Ok(Sharing::Device {
                margin_ns: 15_000_000
            })
        );
        for bad in [
            "", "on", "-1", "10001", "NaN", "device+", "device+x", "device-1", "devices",
        ] {
            assert!(Sharing::parse(bad).is_err(), "{bad}");
        }
    }

    /// The blocks of a step of `four_block_steps`: stream, size.
    const FOUR_BLOCKS: [(u32, u64); 4] = [(0, 1 << 20), (0, 512), (1, 1 << 20), (1, 512)];

    /// Three steps of four blocks, each freed at once: 1 MiB and 512 bytes
    /// on stream 0, then the same on stream 1; planned with a host lag of
    /// 0, so all of them share bytes.
    fn four_block_steps() -> Plan {
        let mut ops = Vec::new();
        let mut k = 0;
        for step in 0..3 {
            for (i, (stream, size)) in FOUR_BLOCKS.into_iter().enumerate() {
                let t = 100 * step + 10 * i as u64;
                ops.push(sop(stream, Op::Alloc(size), t));
                ops.push(sop(stream, Op::Free(k), t + 1));
                k += 1;
            }
        }
        Plan::for_streams(&ops, 0).unwrap()
    }

    #[test]
    fn a_handed_over_slot_waits_and_its_free_is_recorded_from_then_on() {
        let plan = Arc::new(four_block_steps());
        assert_eq!(plan.arena, 1 << 20);
        assert_eq!(plan.wrap_to, Some(8));
        let mut s = Server::for_program(plan, 4);
        assert_eq!(s.streams(), 2);
        // Per step: the waits asked for, and the events recorded at frees.
        let mut steps = Vec::new();
        for _ in 0..8 {
            let (mut waits, mut at_frees) = (Vec::new(), 0);
            for (stream, size) in FOUR_BLOCKS {
                // The entry point without waits serves exactly the slots
                // that need none, and leaves the others to `allocate_on`
                // with nothing changed.
                let slot = match s.allocate_unwaited(stream, size) {
                    Some((slot, _)) => slot,
                    None => {
                        assert_eq!(s.live_slots_of(stream), 0);
                        let g = s.allocate_on(stream, size).expect("served");
                        assert!(!g.waits.is_empty(), "refused without waits");
                        waits.extend(g.waits.iter().map(|w| (w.stream, w.record.is_some())));
                        g.slot
                    }
                };
                assert_eq!(s.live_slots_of(stream), 1);
                let records = s.free_records(slot);
                if s.free_slot(slot).expect("live").is_some() {
                    assert!(records);
                    at_frees += 1;
                } else {
                    assert!(!records);
                }
                assert!(!s.free_records(slot), "not live");
            }
            steps.push((waits, at_frees));
        }
        // The first step: stream 1 waits for stream 0 with an event
        // recorded at its allocation. The repeated step's slots serve from
        // the third step on; once each has handed its bytes over (the
        // fourth), each stream waits once a step for the other, on an
        // event recorded at the free.
        assert_eq!(steps[0], (vec![(0, true)], 0));
        for (waits, at_frees) in &steps[4..] {
            assert_eq!(waits, &[(1, false), (0, false)]);
            assert_eq!(*at_frees, 2);
        }
        assert_eq!(s.refused, 0);
        // The one-stream entry point refuses a slot that needs a wait.
        assert_eq!(s.allocate(1 << 20), None);
        assert_eq!(s.seal(1), None, "stream 1's frees are all recorded");
    }

    #[test]
    fn a_diverted_slot_is_refused_and_its_stream_keeps_its_other_slots() {
        let plan = Arc::new(four_block_steps());
        let mut s = Server::for_program(Arc::clone(&plan), 4);
        let run_step = |s: &mut Server| {
            let mut got = Vec::new();
            for (stream, size) in FOUR_BLOCKS {
                let g = s.allocate_on(stream, size);
                if let Some(g) = &g {
                    assert_eq!(s.free_slot(g.slot).map(|_| ()), Some(()));
                }
                got.push(g.map(|g| g.slot));
            }
            got
        };
        for _ in 0..3 {
            run_step(&mut s);
        }
        let before = run_step(&mut s);
        let big = before[2].expect("stream 1's 1 MiB slot");
        assert!(s.divert(big));
        assert!(!s.divert(big), "diverted once");
        assert!(s.is_diverted(big) && !s.divert(plan.slots.len()));
        // From now on that request is served elsewhere, and the stream's
        // next request still meets its own slot; the others are as before.
        for _ in 0..3 {
            let (refused, passed) = (s.refused, s.passed);
            let got = run_step(&mut s);
            assert_eq!(got, vec![before[0], before[1], None, before[3]]);
            assert_eq!((s.refused - refused, s.passed - passed), (1, 1));
        }
        // The quiet entry point refuses it with nothing counted.
        let (refused, passed) = (s.refused, s.passed);
        let a = s.allocate_on(0, 1 << 20).unwrap().slot;
        s.free_slot(a);
        let b = s.allocate_on(0, 512).unwrap().slot;
        s.free_slot(b);
        assert_eq!(s.allocate_unwaited(1, 1 << 20), None);
        assert_eq!((s.refused, s.passed), (refused, passed));
    }

    fn arb_recs() -> impl Strategy<Value = (Vec<Rec>, u32)> {
        (2u32..60).prop_flat_map(|events| {
            let r = (1u64..5000, 0..events, 0u32..3, 0..events).prop_map(move |(size, at, kind, f)| {
                let end = match kind {
                    0 => End::InStep(at + 1 + f % (events - at).max(1)),
                    1 => End::Next(f),
                    _ => End::Later,
                };
                Rec { size, at, end }
            });
            (proptest::collection::vec(r, 0..40), Just(events))
        })
    }

    /// A request of one of a few sizes, or a free of the n-th live slot.
    #[derive(Clone, Debug)]
    enum Act {
        Alloc(u64),
        Free(usize),
        Step,
    }

    fn arb_ops() -> impl Strategy<Value = Vec<Act>> {
        proptest::collection::vec(
            prop_oneof![
                4 => (0u64..6).prop_map(|k| Act::Alloc(512 * (k + 1))),
                3 => (0usize..8).prop_map(Act::Free),
                1 => Just(Act::Step),
            ],
            0..200,
        )
    }

    proptest! {
        #[test]
        fn placed_blocks_living_together_never_overlap((recs, events) in arb_recs()) {
            let plan = Plan::build(&recs, events).unwrap();
            check_placement(&recs, events, &plan);
        }

        /// A program that repeats its step is served whole from its plan,
        /// for more steps than were recorded: the placement keeps apart
        /// every two blocks that live at the same time, across the step's
        /// end and the prologue's.
        #[test]
        fn a_repeated_program_is_served_whole(
            persistent in proptest::collection::vec(1u64..4096, 0..4),
            lives in proptest::collection::vec((1u64..4096, 1usize..12), MIN_STEP..10),
            steps in 2usize..4,
            more in 1usize..6,
        ) {
            // Sizes distinct within the step, so that no shorter period
            // repeats.
            let step: Vec<(u64, usize)> = lives
                .iter()
                .enumerate()
                .map(|(k, &(s, life))| (s * 64 + k as u64, life))
                .collect();
            let plan = Arc::new(Plan::for_program(&program(&persistent, &step, steps)).unwrap());
            let mut server = Server::for_program(plan, 4);
            let longer = program(&persistent, &step, steps + more);
            prop_assert_eq!(serve(&mut server, &longer), 0);
        }

        /// A plan shared by device times hands bytes from a stream to
        /// another only where, in the recorded program itself, the device
        /// had reached the free by the margin before it reached the
        /// taking allocation: replayed with the plan's own slots, every
        /// block's bytes last held by another stream's block were freed
        /// early enough, in every recorded step (the repeated step's
        /// included, whose slots take both recorded instances into
        /// account), however the device's pace moves from step to step.
        /// (A plan shared by a host lag of 0 fails this at once.)
        #[test]
        fn device_time_plans_hand_over_only_what_the_device_had_released(
            blocks in proptest::collection::vec((0u32..3, 1u64..5, 1usize..6), MIN_STEP..9),
            steps in 2usize..5,
            lags in proptest::collection::vec(0u64..20, 1..400),
            margin_ms in 0u64..4,
        ) {
            let ms = 1_000_000u64;
            // Each step allocates `blocks` in order (stream, size in 256
            // bytes, freed after that many more allocations of the
            // program); a stream's device reaches each event `lag` ms
            // after the host, never before its own earlier events.
            let mut ops: Vec<StreamOp> = Vec::new();
            // (free due at, allocation, stream)
            let mut pending: Vec<(usize, usize, u32)> = Vec::new();
            let mut reached = [0i64; 3];
            let (mut host, mut made, mut lag) = (0u64, 0usize, 0usize);
            let mut at = |stream: u32, host: u64| {
                let l = lags[lag % lags.len()];
                lag += 1;
                let d = ((host + l * ms) as i64).max(reached[stream as usize]);
                reached[stream as usize] = d;
                d
            };
            for _ in 0..steps {
                for (i, &(stream, size, life)) in blocks.iter().enumerate() {
                    host += ms;
                    // Frees due before this allocation.
                    pending.sort();
                    while pending.first().is_some_and(|p| p.0 <= made) {
                        let (_, k, t) = pending.remove(0);
                        ops.push(StreamOp::new(t, Op::Free(k), host).at_device(at(t, host)));
                    }
                    // Sizes distinct within the step, so that the step
                    // repeats with no shorter period.
                    let bytes = 256 * size + 8 * i as u64;
                    ops.push(StreamOp::new(stream, Op::Alloc(bytes), host).at_device(at(stream, host)));
                    pending.push((made + life, made, stream));
                    made += 1;
                }
            }
            pending.sort();
            for (_, k, t) in pending {
                host += ms;
                ops.push(StreamOp::new(t, Op::Free(k), host).at_device(at(t, host)));
            }
            let margin = (margin_ms * ms) as i64;
            let plan = Plan::for_streams_sharing(&ops, Sharing::Device { margin_ns: margin_ms * ms }).unwrap();
            // Replay: the last holder of every byte range, and when the
            // device reached its free.
            let mut held: Vec<(u64, u64, u32, Option<i64>)> = Vec::new();
            let mut placed: Vec<Option<(u64, u64, u32)>> = Vec::new();
            // Per allocation taking another stream's bytes: the smallest
            // margin, which `Plan::handovers` must give too.
            let mut taken: Vec<(usize, i64)> = Vec::new();
            for op in &ops {
                match op.op {
                    Op::Alloc(size) => {
                        let k = placed.len();
                        let Some(off) = plan.slots[k].offset else {
                            placed.push(None);
                            continue;
                        };
                        // The slot's bytes as the plan keeps them apart.
                        let (a, b) = (off, off + round(size));
                        for &(from, to, stream, freed) in held.iter().filter(|h| h.0 < b && a < h.1) {
                            if stream != op.stream {
                                let (d, f) = (op.device_ns.unwrap(), freed.unwrap());
                                match taken.last_mut() {
                                    Some(t) if t.0 == k => t.1 = t.1.min(d - f),
                                    _ => taken.push((k, d - f)),
                                }
                                prop_assert!(
                                    f + margin <= d,
                                    "allocation {} (stream {}) takes [{}, {}) of stream {}, freed at {} ns, reached at {} ns",
                                    k, op.stream, from, to, stream, f, d
                                );
                            }
                        }
                        // Taken: what is left of the ranges met stays
                        // with its last holder.
                        let mut rest = Vec::new();
                        held.retain(|h| {
                            let meets = h.0 < b && a < h.1;
                            if meets && h.0 < a {
                                rest.push((h.0, a, h.2, h.3));
                            }
                            if meets && b < h.1 {
                                rest.push((b, h.1, h.2, h.3));
                            }
                            !meets
                        });
                        held.extend(rest);
                        placed.push(Some((a, b, op.stream)));
                    }
                    Op::Free(k) => {
                        if let Some((a, b, stream)) = placed[k] {
                            held.push((a, b, stream, op.device_ns));
                        }
                    }
                }
            }
            let listed: Vec<(usize, i64)> = plan
                .handovers(&ops)
                .iter()
                .map(|h| (h.slot, h.device_ns.unwrap()))
                .collect();
            prop_assert_eq!(listed, taken);
        }

        /// Whatever the plan of three streams and whatever they do, a
        /// stream that gets a slot is ordered (through the waits it was
        /// given, as a device orders streams with events) after every
        /// free of its bytes by another stream. Events are modelled as
        /// vector clocks: `vc[b][a]` is the number of stream `a`'s frees
        /// that stream `b` is ordered after.
        #[test]
        fn a_stream_is_ordered_after_every_other_streams_free_of_its_bytes(
            slots in proptest::collection::vec(
                (0u64..4, proptest::option::of(0u64..6), 0u32..3).prop_map(|(k, o, t)| Slot {
                    size: 512 * (k + 1),
                    offset: o.map(|o| o * 512),
                    stream: t,
                }),
                0..30,
            ),
            window in 1usize..6,
            ops in proptest::collection::vec(
                prop_oneof![
                    4 => (0u32..3, 0u64..4).prop_map(|(t, k)| (0u8, t, 512 * (k + 1) as usize)),
                    2 => (0u32..3, 0u64..4).prop_map(|(t, k)| (4u8, t, 512 * (k + 1) as usize)),
                    3 => (0usize..8).prop_map(|n| (1u8, 0, n)),
                    1 => (0usize..8).prop_map(|n| (2u8, 0, n)),
                    1 => (0u32..3).prop_map(|t| (3u8, t, 0)),
                    1 => (0usize..30).prop_map(|n| (5u8, 0, n)),
                ],
                0..200,
            ),
        ) {
            let plan = Arc::new(Plan::with_slots(slots, 4096));
            let mut s = Server::new(plan.clone(), window);
            let mut diverted = vec![false; plan.slots.len()];
            let n = s.streams();
            let mut vc = vec![vec![0u64; n]; n];
            let mut frees = vec![0u64; n];
            let mut events: Vec<BTreeMap<u64, Vec<u64>>> = vec![BTreeMap::new(); n];
            // Per 512 bytes: the stream that freed them last, and its free
            // number.
            let mut last: Vec<Option<(usize, u64)>> = vec![None; 8];
            let mut out: Vec<usize> = Vec::new();
            let record = |vc: &[Vec<u64>], frees: &[u64], a: usize| {
                let mut snap = vc[a].clone();
                snap[a] = frees[a];
                snap
            };
            for (kind, t, x) in ops {
                match kind {
                    0 | 4 => {
                        // Kind 4: the entry point that serves only slots
                        // needing no wait.
                        let counts = (s.refused, s.passed, s.skipped);
                        let g = match kind {
                            0 => s.allocate_on(t, x as u64),
                            _ => s.allocate_unwaited(t, x as u64).map(|(slot, offset)| Grant {
                                slot,
                                offset,
                                waits: Vec::new(),
                            }),
                        };
                        let Some(g) = g else {
                            if kind == 4 {
                                prop_assert_eq!(counts, (s.refused, s.passed, s.skipped), "a quiet refusal counted");
                            }
                            continue;
                        };
                        prop_assert!(!diverted[g.slot], "diverted slot {} handed out", g.slot);
                        let b = t as usize;
                        for w in &g.waits {
                            let a = w.stream as usize;
                            prop_assert_ne!(a, b);
                            if let Some(tk) = w.record {
                                prop_assert!(tk >= w.ticket);
                                let snap = record(&vc, &frees, a);
                                events[a].insert(tk, snap);
                            }
                            let snap = events[a].range(w.ticket..).next().map(|(_, v)| v.clone());
                            prop_assert!(snap.is_some(), "no event on {} at or after {}", a, w.ticket);
                            for (c, v) in snap.unwrap().into_iter().enumerate() {
                                vc[b][c] = vc[b][c].max(v);
                            }
                        }
                        let from = g.offset / 512;
                        let to = (g.offset + plan.slots[g.slot].size).div_ceil(512);
                        for u in &last[from as usize..to as usize] {
                            if let Some((a, k)) = *u {
                                prop_assert!(a == b || vc[b][a] >= k, "stream {} not after free {} of {}", b, k, a);
                            }
                        }
                        out.push(g.slot);
                    }
                    1 | 2 if !out.is_empty() => {
                        let slot = out.swap_remove(x % out.len());
                        let sl = plan.slots[slot];
                        let a = sl.stream as usize;
                        frees[a] += 1;
                        let o = sl.offset.unwrap();
                        for u in &mut last[(o / 512) as usize..(o + sl.size).div_ceil(512) as usize] {
                            *u = Some((a, frees[a]));
                        }
                        if kind == 1 {
                            let records = s.free_records(slot);
                            let asked = s.free_slot(slot).unwrap();
                            prop_assert_eq!(records, asked.is_some());
                            if let Some(tk) = asked {
                                prop_assert_eq!(tk, frees[a]);
                                let snap = record(&vc, &frees, a);
                                events[a].insert(tk, snap);
                            }
                        } else {
                            prop_assert!(s.free(slot));
                        }
                    }
                    3 => {
                        if let Some(tk) = s.seal(t) {
                            let snap = record(&vc, &frees, t as usize);
                            events[t as usize].insert(tk, snap);
                        }
                    }
                    // A slot served elsewhere from now on (live or not).
                    5 => {
                        let fresh = x < diverted.len() && !diverted[x];
                        prop_assert_eq!(s.divert(x), fresh);
                        if fresh {
                            diverted[x] = true;
                        }
                        prop_assert_eq!(s.is_diverted(x), x < diverted.len());
                    }
                    _ => {}
                }
            }
        }

        /// Whatever the plan (overlapping slots, any sizes) and whatever
        /// the program does, the blocks the server has out never share a
        /// byte and stay inside the arena.
        #[test]
        fn live_blocks_never_overlap(
            slots in proptest::collection::vec(
                (0u64..6, proptest::option::of(0u64..12)).prop_map(|(k, o)| Slot {
                    size: 512 * (k + 1),
                    offset: o.map(|o| o * 512),
                    stream: 0,
                }),
                0..30,
            ),
            window in 1usize..6,
            ops in arb_ops(),
        ) {
            let plan = Arc::new(Plan::with_slots(slots, 4096));
            let mut s = Server::new(plan.clone(), window);
            let mut out: Vec<usize> = Vec::new();
            for op in ops {
                match op {
                    Act::Alloc(size) => {
                        if let Some((slot, offset)) = s.allocate(size) {
                            prop_assert_eq!(plan.slots[slot].offset, Some(offset));
                            prop_assert_eq!(plan.slots[slot].size, size);
                            out.push(slot);
                        }
                    }
                    Act::Free(n) if !out.is_empty() => {
                        let slot = out.swap_remove(n % out.len());
                        prop_assert!(s.free(slot));
                    }
                    Act::Free(_) => {}
                    Act::Step => s.begin_step(),
                }
                let mut ranges: Vec<_> = s.live_ranges().collect();
                prop_assert_eq!(ranges.len(), out.len());
                ranges.sort_unstable();
                for w in ranges.windows(2) {
                    prop_assert!(w[0].1 <= w[1].0, "{:?} and {:?} overlap", w[0], w[1]);
                }
                prop_assert!(ranges.iter().all(|r| r.1 <= plan.arena));
            }
        }
    }
}
