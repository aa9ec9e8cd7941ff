//! A placement planned in the same run ([`AutoPlanner`]): the program's
//! first steps are recorded in memory, its repeated step is found and
//! planned on a thread of its own, and from a later step on its
//! allocations are served from the plan's arena.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::plan::{PlanShare, PlannedArena};
use crate::plan::{find_step, Op, Plan, Sharing, StreamOp, MAX_SEARCHED, MAX_STREAMS};

/// What [`AutoPlanner`] records and plans with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoOptions {
    /// Allocations recorded at most: a program that has not repeated a
    /// step by then (variable shapes, say) is not planned, and the
    /// recording is dropped.
    pub max_allocations: usize,
    /// When a block freed on one stream may pass to another (`None`: the
    /// streams' blocks never share bytes).
    pub sharing: Option<Sharing>,
}

impl Default for AutoOptions {
    /// At most 60 000 allocations recorded (a few steps of most training
    /// loops; about 3 MiB of host memory), streams apart.
    fn default() -> AutoOptions {
        AutoOptions {
            max_allocations: 3 * MAX_SEARCHED,
            sharing: None,
        }
    }
}

/// Where an [`AutoPlanner`] stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AutoStatus {
    /// Recording: this many allocations so far, no repeated step yet.
    Recording {
        /// Allocations recorded.
        allocations: u64,
    },
    /// A plan is made and waits for the start of a step.
    Ready {
        /// The repeated step's allocations.
        step: u64,
    },
    /// Serving from the plan since allocation `at` (counted from the
    /// first recorded).
    Serving {
        /// The allocation the plan took over at.
        at: u64,
        /// The repeated step's allocations.
        step: u64,
        /// The bytes of the plan's arena.
        arena_bytes: u64,
        /// How long finding and planning the step took on the planner's
        /// thread, in microseconds.
        planned_us: u64,
    },
    /// Not planned, for the reason given; allocations go on as before.
    Off(String),
}

/// What a switch to the plan would bring, for the caller to weigh
/// ([`AutoPlanner::switch_due_unless`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchPreview {
    /// The bytes of the plan's arena (one allocation of the caller's
    /// upstream resource, made at the first planned allocation).
    pub arena_bytes: u64,
    /// The recorded streams the plan serves.
    pub streams: usize,
    /// The blocks allocated before the step that just ended and still live
    /// (address, bytes): what the program keeps across its steps, which
    /// stays where it is after the switch.
    pub kept: Vec<(usize, usize)>,
}

/// The bits of a recorded key that hold the allocation's size (the lane
/// is in the top byte).
const KEY_SIZE: u64 = (1 << 56) - 1;

/// The planner's phases (the fast check of `AutoPlanner::phase`).
const RECORDING: u8 = 0;
const READY: u8 = 1;
const SERVING: u8 = 2;
const OFF: u8 = 3;

/// How many allocations the recording grows by between two looks for a
/// step, at least.
const LOOK_EVERY: u64 = 256;

/// A plan found and waiting for its step to begin.
struct Found {
    plan: Arc<Plan>,
    /// The step's length in allocations.
    len: u64,
    /// An allocation number (counted from the first recorded) at which a
    /// step begins.
    phase: u64,
    /// The recorded streams' keys, by lane.
    lanes: Vec<usize>,
    planned_us: u64,
}

struct Recording {
    /// Per allocation: its key (size, lane) for the step finder.
    keys: Vec<u64>,
    /// The events, in order: allocations on their lane, frees by number.
    ops: Vec<StreamOp>,
    /// Live recorded blocks: address -> allocation number.
    live: HashMap<usize, usize>,
    /// Stream keys by lane (first allocation order), and the reverse.
    lanes: Vec<usize>,
    lane_of: HashMap<usize, u32>,
    /// The number of allocations at which the planner looks next.
    look_at: u64,
    /// A plan found, waiting for its step's start.
    found: Option<Found>,
    /// Plans found that the program did not follow, so far.
    strays: u32,
    /// The allocation the step is looked for from (the last stray: a run
    /// before it is over).
    since: usize,
    status: AutoStatus,
    /// The planner thread is busy with a snapshot.
    planning: bool,
}

/// Plans a program's memory in the run itself: records its allocations
/// and frees in memory, finds the step they repeat (a training loop's,
/// say), places the step's blocks in one arena off the allocation path
/// (a thread of its own), and hands the caller the arena's shares for its
/// streams at the start of a later step. Allocations before that go
/// wherever the caller sends them (a cache tier, a pool).
///
/// The arena is one allocation of the caller's upstream resource made at
/// the first planned allocation: no block allocated before the switch
/// lies in it, and the plan's server hands a slot out only where no live
/// block of the arena overlaps it, so a program that strays from its step
/// gets its memory elsewhere, never overlapping memory.
///
/// What steps it aside, once, with its reason in [`status`](AutoPlanner::status):
/// no repeated step within [`AutoOptions::max_allocations`], a program
/// that keeps leaving the step it was planned for (three times), and a fork
/// (the child records nothing). A step is planned once the recording
/// repeats it three times in its last
/// [`MAX_SEARCHED`](crate::plan::MAX_SEARCHED) allocations.
/// Allocations made while their stream captures a graph are not recorded
/// (the caller says so): a graph's memory is the capture's business.
///
/// ```
/// use somalloc::adaptors::{AutoOptions, AutoPlanner, AutoStatus};
///
/// let auto = AutoPlanner::new(AutoOptions::default());
/// // The program's allocations and frees on stream 7, as they are made:
/// // a step of four blocks, again and again.
/// let mut addr = 0x1000;
/// for _ in 0..400 {
///     for size in [1 << 20, 4096, 512, 3 << 20] {
///         auto.allocated(7, addr, size, false);
///         auto.freed(addr);
///         addr += 1 << 22;
///     }
/// }
/// auto.wait_planned();
/// assert!(matches!(auto.status(), AutoStatus::Ready { step: 4 }));
/// ```
pub struct AutoPlanner {
    opts: AutoOptions,
    phase: AtomicU8,
    /// Allocations recorded so far (read without the lock).
    count: AtomicU64,
    rec: Mutex<Recording>,
    /// Wakes the planner thread (a look is due) and its waiters.
    wake: Condvar,
    pid: AtomicU64,
    started: Instant,
    /// Allocations to go after the switch before [`settle_due`](AutoPlanner::settle_due)
    /// answers `true` (a step's).
    settle: AtomicU64,
}

impl std::fmt::Debug for AutoPlanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutoPlanner")
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

fn lock(m: &Mutex<Recording>) -> MutexGuard<'_, Recording> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl AutoPlanner {
    /// A planner recording from now on; its thread starts at the first
    /// look for a step.
    pub fn new(opts: AutoOptions) -> Arc<AutoPlanner> {
        Arc::new(AutoPlanner {
            opts,
            phase: AtomicU8::new(RECORDING),
            count: AtomicU64::new(0),
            rec: Mutex::new(Recording {
                keys: Vec::new(),
                ops: Vec::new(),
                live: HashMap::new(),
                lanes: Vec::new(),
                lane_of: HashMap::new(),
                look_at: LOOK_EVERY,
                found: None,
                strays: 0,
                since: 0,
                status: AutoStatus::Recording { allocations: 0 },
                planning: false,
            }),
            wake: Condvar::new(),
            pid: AtomicU64::new(u64::from(std::process::id())),
            started: Instant::now(),
            settle: AtomicU64::new(0),
        })
    }

    /// Whether the planner still records (allocations and frees should be
    /// reported); `false` once it serves or stepped aside.
    pub fn recording(&self) -> bool {
        self.phase.load(Ordering::Relaxed) < SERVING
    }

    /// Where the planner stands.
    pub fn status(&self) -> AutoStatus {
        lock(&self.rec).status.clone()
    }

    /// Steps aside for good with `why` (unless serving already).
    fn off(&self, rec: &mut Recording, why: String) {
        if self.phase.load(Ordering::Relaxed) == SERVING {
            return;
        }
        self.phase.store(OFF, Ordering::Relaxed);
        rec.status = AutoStatus::Off(why);
        rec.found = None;
        rec.keys = Vec::new();
        rec.ops = Vec::new();
        rec.live = HashMap::new();
        self.wake.notify_all();
    }

    /// Whether this process is the one that made the planner (a forked
    /// child steps aside: its parent's planner thread is not in it).
    fn same_process(&self, rec: &mut Recording) -> bool {
        if u64::from(std::process::id()) == self.pid.load(Ordering::Relaxed) {
            return true;
        }
        self.off(rec, "the process forked: the child does not plan".into());
        false
    }

    /// Stream `stream` (any key the caller names streams by, a handle)
    /// allocated `bytes` at `addr`; `capturing`: the stream was capturing
    /// (not recorded). Call it after each allocation that did not come from
    /// the plan, while [`recording`](AutoPlanner::recording).
    pub fn allocated(self: &Arc<Self>, stream: usize, addr: usize, bytes: usize, capturing: bool) {
        if capturing || !self.recording() {
            return;
        }
        let mut rec = lock(&self.rec);
        if !self.recording() || !self.same_process(&mut rec) {
            return;
        }
        let n = rec.keys.len();
        if n >= self.opts.max_allocations {
            let why = format!(
                "no repeated step in the first {n} allocations (shapes that change from step to step?)"
            );
            self.off(&mut rec, why);
            return;
        }
        let lane = match rec.lane_of.get(&stream) {
            Some(&l) => l,
            None => {
                let l = rec.lanes.len() as u32;
                if l >= MAX_STREAMS {
                    self.off(&mut rec, format!("more than {MAX_STREAMS} streams"));
                    return;
                }
                rec.lanes.push(stream);
                rec.lane_of.insert(stream, l);
                l
            }
        };
        let key = (bytes as u64) ^ (u64::from(lane) << 56);
        // A plan waiting for its step: the program must go on repeating it.
        if let Some(f) = &rec.found {
            let len = f.len as usize;
            if n >= len && rec.keys[n - len] != key {
                rec.found = None;
                rec.strays += 1;
                rec.since = n;
                if rec.strays >= 3 {
                    self.off(&mut rec, "the program left its repeated step three times".into());
                    return;
                }
                self.phase.store(RECORDING, Ordering::Relaxed);
                rec.status = AutoStatus::Recording {
                    allocations: n as u64,
                };
                rec.look_at = n as u64 + LOOK_EVERY;
            }
        }
        rec.keys.push(key);
        let t_ns = self.started.elapsed().as_nanos() as u64;
        rec.ops.push(StreamOp::new(lane, Op::Alloc(bytes as u64), t_ns));
        if let Some(old) = rec.live.insert(addr, n) {
            // An address given out again with no free seen: the earlier
            // block was freed where the planner did not see it.
            rec.ops.push(StreamOp::new(lane, Op::Free(old), t_ns));
        }
        self.count.store(n as u64 + 1, Ordering::Relaxed);
        if let AutoStatus::Recording { allocations } = &mut rec.status {
            *allocations = n as u64 + 1;
        }
        if n as u64 + 1 >= rec.look_at && rec.found.is_none() && !rec.planning {
            rec.planning = true;
            rec.look_at = n as u64 + 1 + LOOK_EVERY.max(n as u64 / 8);
            let snapshot = (rec.keys.clone(), rec.ops.clone(), rec.lanes.clone(), rec.since);
            drop(rec);
            let me = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name("somalloc-planner".into())
                .spawn(move || me.plan(snapshot));
            if spawned.is_err() {
                let mut rec = lock(&self.rec);
                self.off(&mut rec, "no thread for the planner".into());
            }
        }
    }

    /// The block at `addr` was freed (any stream). Call it for every free
    /// while [`recording`](AutoPlanner::recording); blocks it never saw
    /// allocated are ignored.
    pub fn freed(&self, addr: usize) {
        if !self.recording() {
            return;
        }
        let mut rec = lock(&self.rec);
        if let Some(k) = rec.live.remove(&addr) {
            let t_ns = self.started.elapsed().as_nanos() as u64;
            rec.ops.push(StreamOp::new(0, Op::Free(k), t_ns));
        }
    }

    /// The planner thread's work on a snapshot: the step the recording
    /// repeats up to its end, three times at least, planned from its last
    /// two instances (the third before them gives their blocks' frees).
    fn plan(&self, (keys, ops, lanes, since): (Vec<u64>, Vec<StreamOp>, Vec<usize>, usize)) {
        let t0 = Instant::now();
        let found = plan_recording(&keys, since, &ops, self.opts.sharing);
        let mut rec = lock(&self.rec);
        rec.planning = false;
        self.wake.notify_all();
        if self.phase.load(Ordering::Relaxed) != RECORDING {
            return;
        }
        match found {
            Ok(None) => {}
            Err(why) => self.off(&mut rec, why),
            Ok(Some((plan, len, phase))) => {
                // The program since the snapshot must still follow the step.
                let now = rec.keys.len();
                let l = len as usize;
                if let Some(i) = (keys.len()..now).find(|&i| rec.keys[i] != rec.keys[i - l]) {
                    rec.strays += 1;
                    rec.since = i;
                    rec.look_at = now as u64 + LOOK_EVERY;
                    return;
                }
                rec.found = Some(Found {
                    plan,
                    len,
                    phase,
                    lanes,
                    planned_us: t0.elapsed().as_micros() as u64,
                });
                rec.status = AutoStatus::Ready { step: len };
                self.phase.store(READY, Ordering::Relaxed);
            }
        }
    }

    /// Waits until no look for a step is under way (tests, and a caller
    /// that wants the plan before going on).
    pub fn wait_planned(&self) {
        let mut rec = lock(&self.rec);
        while rec.planning {
            rec = self
                .wake
                .wait_timeout(rec, Duration::from_millis(50))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// Call before each allocation while [`recording`](AutoPlanner::recording):
    /// `Some` when a plan is ready and the program is at the start of its
    /// step, with each recorded stream's share of the plan's arena (by the
    /// caller's stream key). The caller serves those streams from their
    /// shares from now on (allocations the plan has no slot for go where
    /// they went before), and stops reporting allocations and frees.
    pub fn switch_due(&self) -> Option<Vec<(usize, PlanShare)>> {
        self.switch_due_unless(|_| None)
    }

    /// [`switch_due`](AutoPlanner::switch_due), asking `decline` first
    /// when the switch is due: given what the switch would bring
    /// ([`SwitchPreview`]), it returns a reason not to switch (the caller
    /// knows its memory: a plan that would hold more than the caller
    /// already serves with is not worth it), and the planner then steps
    /// aside for good with that reason in its [`status`](AutoPlanner::status).
    pub fn switch_due_unless(
        &self,
        decline: impl FnOnce(&SwitchPreview) -> Option<String>,
    ) -> Option<Vec<(usize, PlanShare)>> {
        if self.phase.load(Ordering::Relaxed) != READY {
            return None;
        }
        let mut rec = lock(&self.rec);
        let n = rec.keys.len() as u64;
        let (len, phase) = rec.found.as_ref().map(|f| (f.len, f.phase))?;
        if n % len != phase || !self.same_process(&mut rec) {
            return None;
        }
        let f = rec.found.as_ref()?;
        // Blocks allocated before the step that just ended and still live
        // (the weights, an optimizer's state): they stay where they are.
        let last_step = n.saturating_sub(len) as usize;
        let kept = rec
            .live
            .iter()
            .filter(|&(_, &k)| k < last_step)
            .map(|(&addr, &k)| (addr, (rec.keys[k] & KEY_SIZE) as usize))
            .collect();
        let preview = SwitchPreview {
            arena_bytes: f.plan.arena,
            streams: f.lanes.len(),
            kept,
        };
        if let Some(why) = decline(&preview) {
            self.off(&mut rec, why);
            return None;
        }
        let f = rec.found.take()?;
        let arena = Arc::new(PlannedArena::new(Arc::clone(&f.plan)));
        arena.begin_repeated_step();
        let shares = f
            .lanes
            .iter()
            .enumerate()
            .map(|(lane, &key)| {
                (
                    key,
                    PlanShare {
                        arena: Arc::clone(&arena),
                        lane: lane as u32,
                    },
                )
            })
            .collect();
        rec.status = AutoStatus::Serving {
            at: n,
            step: f.len,
            arena_bytes: f.plan.arena,
            planned_us: f.planned_us,
        };
        self.settle.store(f.len, Ordering::Relaxed);
        self.phase.store(SERVING, Ordering::Relaxed);
        rec.keys = Vec::new();
        rec.ops = Vec::new();
        rec.live = HashMap::new();
        Some(shares)
    }

    /// Call before each allocation once serving: `true` once, a step's
    /// allocations after the switch, when the blocks of the step before the
    /// switch (made elsewhere) are freed: memory the caller's cache or pool
    /// kept for them can go back to the device then. One atomic read a call
    /// after that.
    pub fn settle_due(&self) -> bool {
        if self.phase.load(Ordering::Relaxed) != SERVING || self.settle.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.settle
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok_and(|n| n == 1)
    }

    /// Unit tests: makes the planner believe it was made in another
    /// process (as a forked child sees it).
    #[cfg(test)]
    pub(crate) fn pretend_forked(&self) {
        self.pid.store(u64::MAX, Ordering::Relaxed);
    }
}

/// The recorded blocks live just before each allocation from number
/// `from` to the last (`n` in all), as (count, bytes).
fn live_from(ops: &[StreamOp], from: usize) -> Vec<(i64, i64)> {
    let mut sizes: Vec<u64> = Vec::new();
    let (mut count, mut bytes) = (0i64, 0i64);
    let mut at: Vec<(i64, i64)> = Vec::new();
    for op in ops {
        match op.op {
            Op::Alloc(size) => {
                if sizes.len() >= from {
                    at.push((count, bytes));
                }
                sizes.push(size);
                count += 1;
                bytes += size as i64;
            }
            Op::Free(k) => {
                count -= 1;
                bytes -= sizes.get(k).map_or(0, |&s| s as i64);
            }
        }
    }
    at
}

/// Whether the recorded blocks live just before allocations `n - 3 len`,
/// `n - 2 len` and `n - len` are as many, of as many bytes.
#[cfg(test)]
fn balanced(ops: &[StreamOp], n: usize, len: usize) -> bool {
    let at = live_from(ops, n - 3 * len);
    at.len() == 3 * len && at[0] == at[len] && at[len] == at[2 * len]
}

/// The step `keys` repeat up to their end (three instances at least, from
/// allocation `since` on) and its plan from two instances, ending where
/// the fewest bytes live in the last one, with the frees of their blocks
/// as recorded; with the step's length and the phase (allocation number
/// modulo the length) at which it begins. `Ok(None)` when there is none
/// yet, an error when it can never be planned.
fn plan_recording(
    keys: &[u64],
    since: usize,
    ops: &[StreamOp],
    sharing: Option<Sharing>,
) -> Result<Option<(Arc<Plan>, u64, u64)>, String> {
    let n = keys.len();
    let from = n.saturating_sub(MAX_SEARCHED).max(since.min(n));
    let Some(step) = find_step(&keys[from..]) else {
        return Ok(None);
    };
    if step.end + from != n || step.covered < 3 * step.len {
        return Ok(None);
    }
    // Three instances in a window of `MAX_SEARCHED`: two fit a plan.
    let len = step.len;
    // A program's step leaves what lives as it found it; a period inside
    // the step (a model's layers, one after another) does not: forward
    // keeps each layer's activations, backward frees them. So the blocks
    // live (their number and bytes) must be the same at the last three
    // instance boundaries (not at the end: the frees that follow the
    // last allocation may not have come yet).
    let live = live_from(ops, n - 3 * len);
    if live.len() != 3 * len || live[0] != live[len] || live[len] != live[2 * len] {
        return Ok(None);
    }
    // The plan takes over where the fewest bytes live in the step (a
    // training loop's step boundary, where the activations are freed):
    // the memory the blocks from before hold is least there. The two
    // instances planned end there, inside the last one recorded.
    let low = (0..len).min_by_key(|&r| live[2 * len + r].1).unwrap_or(0);
    let m = n - len + low;
    // The two instances before `m`, allocations renumbered from 0, with the
    // frees of their blocks recorded so far.
    let first = m - 2 * len;
    let mut kept = Vec::with_capacity(4 * len);
    let mut made = 0usize;
    for op in ops {
        match op.op {
            Op::Alloc(_) => {
                if (first..m).contains(&made) {
                    kept.push(*op);
                }
                made += 1;
            }
            Op::Free(k) if (first..m).contains(&k) => kept.push(StreamOp {
                op: Op::Free(k - first),
                ..*op
            }),
            Op::Free(_) => {}
        }
    }
    let plan = Plan::for_step(&kept, sharing.unwrap_or(Sharing::Never))?;
    if plan.wrap_to != Some(len) {
        return Ok(None);
    }
    Ok(Some((Arc::new(plan), len as u64, (m % len) as u64)))
}

#[cfg(test)]
#[path = "auto_tests.rs"]
mod tests;
