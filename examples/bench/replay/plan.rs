//! The plan: a trace turned into each thread's operations.

use std::collections::HashMap;

use somalloc::trace::{Action, Trace};

/// Where a block waits between its allocation and its free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// In the thread's own slots (allocated and freed by one thread).
    Local(u32),
    /// In a shared slot (freed by another thread).
    Shared(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Alloc { bytes: usize, stream: u32, slot: Slot },
    Free { slot: Slot },
}

/// A trace ready to replay.
#[derive(Debug)]
pub struct Plan {
    /// The trace's file name.
    pub name: String,
    /// Each replay thread's operations, in order.
    pub threads: Vec<Vec<Op>>,
    /// Local slots each thread needs.
    pub locals: Vec<u32>,
    /// Shared slots.
    pub shared: u32,
    /// Streams to make.
    pub streams: u32,
    /// Allocations and frees replayed.
    pub ops: u64,
    /// The most bytes live at once in the recorded order (requested sizes).
    pub live_peak: u64,
    /// Frees of addresses not live in the trace, and failed allocations:
    /// left out.
    pub left_out: u64,
    /// The recorded run's pool reserved peak, when the trace says it.
    pub recorded_reserved: Option<u64>,
    /// Devices the trace names (all are replayed on the bench's device).
    pub devices: usize,
}

struct Draft {
    thread: usize,
    stream: u32,
    bytes: u64,
    /// The thread and position of its free, if any.
    free: Option<(usize, usize)>,
}

impl Plan {
    pub fn of(name: &str, t: &Trace) -> Plan {
        #[derive(Clone, Copy)]
        enum D {
            Alloc(usize),
            Free(usize),
        }
        let mut threads: HashMap<u32, usize> = HashMap::new();
        let mut streams: HashMap<Option<u32>, u32> = HashMap::new();
        let mut devices: HashMap<u32, ()> = HashMap::new();
        let mut live: HashMap<(u32, u64), usize> = HashMap::new();
        let mut drafts: Vec<Draft> = Vec::new();
        let mut ops: Vec<Vec<D>> = Vec::new();
        let (mut now, mut peak, mut left_out) = (0u64, 0u64, 0u64);
        for e in &t.events {
            if !matches!(e.action, Action::Allocate | Action::Free | Action::FailedAllocate) {
                continue;
            }
            if e.action == Action::FailedAllocate {
                left_out += 1;
                continue;
            }
            let next = threads.len();
            let th = *threads.entry(e.thread).or_insert(next);
            if th == ops.len() {
                ops.push(Vec::new());
            }
            devices.insert(e.device, ());
            match e.action {
                Action::Allocate => {
                    let next = streams.len() as u32;
                    let stream = *streams.entry(e.stream).or_insert(next);
                    if let Some(old) = live.insert((e.device, e.addr), drafts.len()) {
                        // Its free was not recorded (dropped): it ends here.
                        now -= drafts[old].bytes;
                        drafts[old].free = Some((th, ops[th].len()));
                        ops[th].push(D::Free(old));
                    }
                    now += e.bytes;
                    peak = peak.max(now);
                    ops[th].push(D::Alloc(drafts.len()));
                    drafts.push(Draft {
                        thread: th,
                        stream,
                        bytes: e.bytes,
                        free: None,
                    });
                }
                _ => match live.remove(&(e.device, e.addr)) {
                    Some(id) => {
                        now -= drafts[id].bytes;
                        drafts[id].free = Some((th, ops[th].len()));
                        ops[th].push(D::Free(id));
                    }
                    None => left_out += 1,
                },
            }
        }
        // Blocks live at the end: freed at the end of their thread.
        let mut at_end: Vec<usize> = live.into_values().collect();
        at_end.sort_unstable();
        for id in at_end {
            let th = drafts[id].thread;
            drafts[id].free = Some((th, ops[th].len()));
            ops[th].push(D::Free(id));
        }
        // Slots: shared for blocks another thread frees, else the thread's
        // own, reused as they are freed.
        let mut slot: Vec<Option<Slot>> = vec![None; drafts.len()];
        let mut shared = 0u32;
        let mut locals = vec![0u32; ops.len()];
        for (id, d) in drafts.iter().enumerate() {
            if d.free.is_some_and(|(th, _)| th != d.thread) {
                slot[id] = Some(Slot::Shared(shared));
                shared += 1;
            }
        }
        let mut plan_threads = Vec::with_capacity(ops.len());
        let mut n_ops = 0u64;
        for (th, list) in ops.iter().enumerate() {
            let mut spare: Vec<u32> = Vec::new();
            let mut out = Vec::with_capacity(list.len());
            for d in list {
                match *d {
                    D::Alloc(id) => {
                        let s = *slot[id].get_or_insert_with(|| {
                            Slot::Local(spare.pop().unwrap_or_else(|| {
                                locals[th] += 1;
                                locals[th] - 1
                            }))
                        });
                        out.push(Op::Alloc {
                            bytes: drafts[id].bytes as usize,
                            stream: drafts[id].stream,
                            slot: s,
                        });
                    }
                    D::Free(id) => {
                        // Every free's allocation came first (in time, and
                        // a local one in this thread's order).
                        let s = slot[id].expect("a free after its allocation");
                        if let Slot::Local(i) = s {
                            spare.push(i);
                        }
                        out.push(Op::Free { slot: s });
                    }
                }
            }
            n_ops += out.len() as u64;
            plan_threads.push(out);
        }
        Plan {
            name: name.to_string(),
            threads: plan_threads,
            locals,
            shared,
            streams: streams.len() as u32,
            ops: n_ops,
            live_peak: peak,
            left_out,
            recorded_reserved: t.meta("pool_reserved_peak").and_then(|v| v.parse().ok()),
            devices: devices.len(),
        }
    }

    /// The row's parameter: the file and its size.
    pub fn param(&self) -> String {
        format!(
            "{} ({} ops, {} thr, {} str)",
            self.name,
            self.ops,
            self.threads.len(),
            self.streams
        )
    }
}
