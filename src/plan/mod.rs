//! Placement planned from a recorded program, and the server that hands it
//! out again by order with every block checked.
//!
//! Experimental, built with the crate's `plan` feature only: no semver
//! promise yet, any release may change it. The adaptors that serve a plan
//! to a program are [`PlanningAdaptor`](crate::adaptors::PlanningAdaptor)
//! (from a trace of an earlier run) and
//! [`AutoPlanner`](crate::adaptors::AutoPlanner) (from the first steps of
//! the same run). It was `somalloc::trace::plan`, which stays for
//! one release as a deprecated alias.
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
//! A recording of any length can be planned: one of more than
//! [`MAX_SEARCHED`] allocations has its step looked for in its first
//! [`MAX_SEARCHED`] allocations and is cut to its prologue and two
//! instances of that step ([`cut`]), so that neither finding the step nor
//! the plan grows with the number of steps recorded. [`MAX_BLOCKS`] bounds
//! the part planned, not the recording.
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
//! use somalloc::plan::{Op, Plan, Server};
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

/// Offsets and sizes round up to a multiple of this.
pub const ALIGN: u64 = 512;
/// The most allocations a plan places (planning takes time quadratic in
/// them): those before the repeated step and two instances of it, in a
/// recording longer than that ([`cut`]).
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
    ///
    /// A recording of more than [`MAX_SEARCHED`] allocations is planned
    /// from its cut ([`cut`]): the allocations before the first instance
    /// of the step found in its first [`MAX_SEARCHED`] allocations get
    /// slots of their own, the first instance is the step before, and the
    /// second the step that repeats; what followed is left out. Without a
    /// step there, such a recording is an error that says what is too
    /// long: the step, or what comes before it.
    ///
    /// ```
    /// use somalloc::plan::{Op, Plan, MAX_SEARCHED};
    /// # fn main() -> Result<(), String> {
    /// // A 64 MiB weight, then steps of four blocks (1 to 4 MiB), each
    /// // freed at once: far more of them than are searched.
    /// let mut ops = vec![Op::Alloc(64 << 20)];
    /// for k in 0..2 * MAX_SEARCHED {
    ///     ops.push(Op::Alloc((k as u64 % 4 + 1) << 20));
    ///     ops.push(Op::Free(k + 1));
    /// }
    /// let plan = Plan::for_program(&ops)?;
    /// // The weight, and two steps.
    /// assert_eq!((plan.slots.len(), plan.wrap_to), (9, Some(5)));
    /// assert_eq!(plan.arena, (64 + 4) << 20);
    /// # Ok(())
    /// # }
    /// ```
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
    /// use somalloc::plan::{Op, Plan, StreamOp};
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
    /// use somalloc::plan::{Op, Plan, Sharing, StreamOp};
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
        Plan::for_streams_within(ops, sharing, MAX_SEARCHED)
    }

    /// [`for_streams_sharing`](Plan::for_streams_sharing), the step looked
    /// for in the first `window` allocations (at most [`MAX_SEARCHED`]):
    /// a longer recording is planned from its cut ([`cut`]).
    pub(crate) fn for_streams_within(
        ops: &[StreamOp],
        sharing: Sharing,
        window: usize,
    ) -> Result<Plan, String> {
        let window = window.min(MAX_SEARCHED);
        match step::part(ops, window)? {
            Part::Whole(found) => Plan::place_program(ops, sharing, found, false),
            Part::Cut(cut, two) => {
                let plan = Plan::place_program(&cut, sharing, Some(two), false)?;
                match plan.wrap_to {
                    Some(_) => Ok(plan),
                    None => Err(format!(
                        "a recording of over {window} allocations whose repeated period of {} is no step (its \
                         blocks mostly outlive it); a plan places at most {window} (record fewer steps)",
                        two.len
                    )),
                }
            }
        }
    }

    /// Plans a repeated step from two instances of it recorded in a row, as
    /// [`for_streams_sharing`](Plan::for_streams_sharing) plans a
    /// program's repeated step: `ops` makes the first instance's
    /// allocations, then as many of the second's (numbered from 0), and the
    /// frees recorded of their blocks (a free of a block of the second
    /// instance may come after its last allocation). Only the second
    /// instance's slots are placed, to serve every step after (`wrap_to`
    /// is the step's length; serve from there with
    /// [`Server::begin_repeated_step`]): the first instance's blocks were
    /// made before the plan takes over, elsewhere, and give the lifetimes.
    /// Where the blocks mostly outlive the step it is no step: the plan
    /// places nothing and ends (`wrap_to` is `None`). An odd or zero number
    /// of allocations is an error.
    pub fn for_step(ops: &[StreamOp], sharing: Sharing) -> Result<Plan, String> {
        let n = ops.iter().filter(|o| matches!(o.op, Op::Alloc(_))).count();
        if n == 0 || n % 2 != 0 {
            return Err(format!("{n} allocations are not two instances of a step"));
        }
        let two = Step {
            len: n / 2,
            covered: n,
            end: n,
        };
        Plan::place_program(ops, sharing, Some(two), true)
    }

    /// Plans the program `ops` whose step is `found`: of its allocations,
    /// `[end - 2 len, end - len)` are the step before, `[end - len, end)`
    /// the step that repeats (`None`: no step, every slot serves once).
    /// With `step_only`, only the slots of the step that repeats are placed.
    fn place_program(
        ops: &[StreamOp],
        sharing: Sharing,
        found: Option<Step>,
        step_only: bool,
    ) -> Result<Plan, String> {
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
                "{n} allocations to place; a plan places at most {MAX_BLOCKS}"
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
        let cycle = found.map(|s| (s.len, s.end - 2 * s.len, s.end - s.len, s.end));
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
            _ if step_only => None,
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
}

mod program;
mod server;
mod sharing;
use sharing::PER_STREAM_MAX;
pub use sharing::{Sharing, DEVICE_MARGIN_NS};
mod step;
use program::Reached;
pub use program::{DeviceProgram, Handover};
pub use server::{Grant, Server, Wait};
use step::Part;
pub use step::{cut, find_step, Step, MAX_SEARCHED, MIN_STEP};

#[cfg(test)]
mod tests;
