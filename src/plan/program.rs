//! A device's recorded program, ready to plan: its streams and events,
//! with device times bounded where the trace has none; and a plan's
//! replay of the program it was made from ([`Plan::handovers`]).

use std::collections::HashMap;

use super::server::Pieces;
use super::{Op, Plan, StreamOp};
use crate::format::{Action, Trace};

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
    /// ([`Sharing::Device`](super::Sharing::Device)) shares only what the timed events prove.
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
pub(super) struct Reached {
    pub(super) per_stream: Vec<Vec<(u64, i64)>>,
}

impl Reached {
    pub(super) fn of(ops: &[StreamOp], streams: &[u32]) -> Reached {
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
    pub(super) fn first_on(&self, s: usize, made: usize, t: i64) -> u64 {
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
    pub(super) fn first_after(&self, own: u32, made: usize, t: i64) -> u64 {
        (0..self.per_stream.len())
            .filter(|&s| s != own as usize)
            .map(|s| self.first_on(s, made, t))
            .max()
            .unwrap_or(made as u64)
    }
}

impl Plan {
    /// The program `ops` this plan was made from, replayed with every
    /// placed slot at its offset (the `k`-th allocation in slot `k`): the
    /// allocations that take bytes another stream freed last, in program
    /// order, each with how long before it those frees came (the latest of
    /// them). How far apart a plan keeps the streams in the recorded run is
    /// what its sharing rule allowed; a served run that keeps another pace
    /// waits where these margins are small.
    ///
    /// ```
    /// use somalloc::plan::{Op, Plan, Sharing, StreamOp};
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
