//! The device side of the unit tests: made-up address space and physical
//! chunks with a capacity, fences whose completion the test decides, and a
//! failure at any call. It also checks what a device could not: that no
//! chunk is unmapped or handed out to another stream while a free in it is
//! still pending on the device, unless that stream was made to wait on the
//! device for the free (a device wait orders the waiting stream's later
//! work after the fence, and completing that work completes what it waited
//! for).
//!
//! It models what a device does with stream handles and captures, so that
//! the arena's mistakes there fail a test:
//!
//! * the per-thread default stream (`0x2`) is another stream on every
//!   thread: work, records and waits on it land on the calling thread's;
//! * a destroyed stream's handle may name a new stream later
//!   ([`FakePhys::destroy`]); a record or wait on a destroyed stream is a
//!   violation;
//! * a fence recorded while its stream captures is a node of the graph:
//!   it never completes for the host, and a stream that waits on it joins
//!   the capture (a violation: nothing orders the two);
//! * a map grants no access: memory handed out where the arena's device
//!   has no access is a violation, as is unmapping memory of a live block.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use super::phys::Phys;
use crate::error::{Error, Result};
use crate::stream::Stream;

/// The calls of [`FakePhys`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    Reserve,
    Unreserve,
    Create,
    Release,
    Map,
    Grant,
    Unmap,
    NewFence,
    Record,
    Done,
    Wait,
    WaitOn,
    NewStream,
}

/// A free the test told the fake about: `[addr, addr + len)` freed on
/// `stream` when the stream's queue had `mark` pieces of work.
#[derive(Clone, Debug)]
struct PendingFree {
    addr: usize,
    len: usize,
    stream: usize,
    mark: u64,
    /// The physical memory behind it at the free: (handle, offset, length).
    phys: Vec<(u64, usize, usize)>,
}

#[derive(Default)]
pub(crate) struct FakeVm {
    /// Physical bytes that may exist at once.
    pub capacity: usize,
    pub created: HashMap<u64, usize>,
    next_handle: u64,
    pub mapped: BTreeMap<usize, (usize, u64)>,
    /// Mappings the arena's device may use (a grant to device 0).
    access: HashSet<usize>,
    /// Per stream handle, how many streams of that handle were destroyed
    /// (the handle of a later one names a new stream).
    generation: HashMap<usize, usize>,
    /// Streams destroyed (by key).
    destroyed: HashSet<usize>,
    /// Fences last recorded during a capture (nodes of a graph).
    captured: HashSet<u64>,
    next_stream: usize,
    pub reservations: BTreeMap<usize, usize>,
    next_va: usize,
    /// Work enqueued per stream, and how much of it completed.
    marks: HashMap<usize, u64>,
    completed: HashMap<usize, u64>,
    /// Fence id → (stream, mark at the record), or `None` before a record.
    fences: HashMap<u64, Option<(usize, u64)>>,
    /// Device waits: (waiting stream, its mark at the wait, stream waited
    /// for, the mark waited for).
    device_waits: Vec<(usize, u64, usize, u64)>,
    next_fence: u64,
    pending: Vec<PendingFree>,
    /// Live blocks' physical memory: (handle, offset, length, address).
    live_phys: Vec<(u64, usize, usize, usize)>,
    /// Live blocks' addresses: address → length.
    live_va: BTreeMap<usize, usize>,
    /// Calls to fail: (op, how many more calls of it succeed first).
    fail: Vec<(Op, u32)>,
    /// Random failures: one call in `n` of every op fails.
    random: Option<(fastrand::Rng, u32)>,
    pub calls: HashMap<Op, u32>,
    pub violations: Vec<String>,
    /// A broken device for the tests of the checks: `wait_on` succeeds
    /// and orders nothing.
    pub drop_waits: bool,
    /// How long each virtual-memory call (reserve to unreserve, not the
    /// fences) takes, as a driver's calls take tens of microseconds.
    pub vmm_delay: std::time::Duration,
}

/// A fake device (see the module docs); clones share it.
#[derive(Clone)]
pub(crate) struct FakePhys {
    vm: Arc<Mutex<FakeVm>>,
}

impl FakePhys {
    /// A fake device with `capacity` bytes of physical memory.
    pub(crate) fn new(capacity: usize) -> FakePhys {
        FakePhys {
            vm: Arc::new(Mutex::new(FakeVm {
                capacity,
                next_handle: 1,
                next_va: 0x7f00_0000_0000,
                next_fence: 1,
                next_stream: 0x5e_0000,
                ..FakeVm::default()
            })),
        }
    }

    pub(crate) fn vm(&self) -> MutexGuard<'_, FakeVm> {
        self.vm.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next call of `op` after `skip` successful ones fails.
    pub(crate) fn fail(&self, op: Op, skip: u32) {
        self.vm().fail.push((op, skip));
    }

    /// From now on one call in `one_in` of every op fails (seeded).
    pub(crate) fn fail_randomly(&self, seed: u64, one_in: u32) {
        self.vm().random = Some((fastrand::Rng::with_seed(seed), one_in));
    }

    pub(crate) fn stop_failing(&self) {
        let mut vm = self.vm();
        vm.random = None;
        vm.fail.clear();
    }

    /// Work on `stream` (a use of memory): its queue grows by one.
    pub(crate) fn enqueue(&self, stream: &Stream) -> u64 {
        let mut vm = self.vm();
        let k = vm.key(stream);
        let m = vm.marks.entry(k).or_insert(0);
        *m += 1;
        *m
    }

    /// The device completes everything queued on `stream` so far.
    pub(crate) fn complete(&self, stream: &Stream) {
        let mut vm = self.vm();
        let k = vm.key(stream);
        let m = vm.marks.get(&k).copied().unwrap_or(0);
        vm.completed.insert(k, m);
        vm.propagate();
    }

    /// The stream is destroyed: a record or wait on its handle is a
    /// violation until [`reuse`](FakePhys::reuse) gives the handle to a new
    /// stream.
    pub(crate) fn destroy(&self, stream: &Stream) {
        let mut vm = self.vm();
        let k = vm.key(stream);
        vm.destroyed.insert(k);
    }

    /// A new stream got the handle of a destroyed one: work on the handle
    /// from now on is that stream's.
    pub(crate) fn reuse(&self, stream: &Stream) {
        *self.vm().generation.entry(stream.as_raw() as usize).or_insert(0) += 1;
    }

    /// The block `[addr, addr + len)` was freed on `stream` (after its last
    /// use there): no other stream may get it, and it may not be unmapped,
    /// until the device completes that point.
    pub(crate) fn freed(&self, addr: usize, len: usize, stream: &Stream) {
        let mark = self.enqueue(stream);
        let mut vm = self.vm();
        let phys = vm.phys(addr, len);
        vm.live_phys.retain(|l| l.3 != addr);
        vm.live_va.remove(&addr);
        let stream = vm.key(stream);
        vm.pending.push(PendingFree {
            addr,
            len,
            stream,
            mark,
            phys,
        });
    }

    /// `[addr, addr + len)` was handed to `stream`: records a violation if
    /// another stream's free of it is still pending, or if it is not mapped.
    pub(crate) fn handed(&self, addr: usize, len: usize, stream: &Stream) {
        let mut vm = self.vm();
        vm.settle();
        let s = vm.key(stream);
        let phys = vm.phys(addr, len);
        let touches = |other: &[(u64, usize, usize)]| {
            other
                .iter()
                .any(|&(h, o, l)| phys.iter().any(|&(h2, o2, l2)| h == h2 && overlaps(o, l, o2, l2)))
        };
        // Another stream's pending free of the same memory, at this address
        // or at another one mapping it.
        let after = vm.ordered_after(s);
        let bad: Vec<_> = vm
            .pending
            .iter()
            .filter(|p| p.stream != s && after.get(&p.stream).is_none_or(|&m| m < p.mark))
            .filter(|p| overlaps(p.addr, p.len, addr, len) || touches(&p.phys))
            .cloned()
            .collect();
        for p in bad {
            vm.violations.push(format!(
                "[{addr:#x}, +{len}) handed to stream {s:#x} while stream {:#x}'s free of [{:#x}, +{}) is pending",
                p.stream, p.addr, p.len
            ));
        }
        // Memory of a live block, under any address.
        let twice: Vec<_> = vm
            .live_phys
            .iter()
            .filter(|l| touches(&[(l.0, l.1, l.2)]))
            .copied()
            .collect();
        for l in twice {
            vm.violations.push(format!(
                "[{addr:#x}, +{len}) handed out over the memory of the live block at {:#x}",
                l.3
            ));
        }
        for (h, o, l) in phys {
            vm.live_phys.push((h, o, l, addr));
        }
        vm.live_va.insert(addr, len);
        // Every byte mapped, with access.
        let mut at = addr;
        while at < addr + len {
            match vm.mapped.range(..=at).next_back() {
                Some((&a, &(l, _))) if a + l > at => {
                    if !vm.access.contains(&a) {
                        vm.violations.push(format!(
                            "[{addr:#x}, +{len}) handed out but the device has no access to {a:#x}"
                        ));
                    }
                    at = a + l;
                }
                _ => {
                    vm.violations.push(format!(
                        "[{addr:#x}, +{len}) handed out but {at:#x} is not mapped"
                    ));
                    break;
                }
            }
        }
    }

    /// How many physical allocations hold `[addr, addr + len)`.
    pub(crate) fn pieces(&self, addr: usize, len: usize) -> usize {
        let vm = self.vm();
        let mut handles: Vec<u64> = vm.phys(addr, len).into_iter().map(|p| p.0).collect();
        handles.dedup();
        handles.len()
    }

    fn call(&self, op: Op) -> Result<()> {
        let delay = self.vm().vmm_delay;
        let fence = matches!(op, Op::NewFence | Op::Record | Op::Done | Op::Wait | Op::WaitOn);
        if !fence && !delay.is_zero() {
            std::thread::sleep(delay);
        }
        let mut vm = self.vm();
        *vm.calls.entry(op).or_insert(0) += 1;
        let mut fail = false;
        if let Some(i) = vm.fail.iter().position(|f| f.0 == op) {
            if vm.fail[i].1 == 0 {
                vm.fail.remove(i);
                fail = true;
            } else {
                vm.fail[i].1 -= 1;
            }
        }
        if let Some((rng, n)) = vm.random.as_mut() {
            fail |= rng.u32(0..*n) == 0;
        }
        if fail {
            return Err(if op == Op::Create {
                oom(0)
            } else {
                Error::invalid(format!("injected failure of {op:?}"))
            });
        }
        Ok(())
    }
}

thread_local! {
    /// This thread's number, for its per-thread default stream.
    static THREAD: Cell<usize> = const { Cell::new(0) };
}

/// Numbers the threads that touch a per-thread default stream.
static THREADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);

/// The calling thread's per-thread default stream, as a key of its own.
fn per_thread_key() -> usize {
    let n = THREAD.with(|t| {
        if t.get() == 0 {
            t.set(THREADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        }
        t.get()
    });
    0x2_0000_0000_0000 + (n << 4)
}

fn overlaps(a: usize, al: usize, b: usize, bl: usize) -> bool {
    a < b + bl && b < a + al
}

fn oom(bytes: usize) -> Error {
    Error::OutOfMemory {
        requested: bytes,
        stats: None,
        arena: None,
    }
}

impl FakeVm {
    /// The stream a handle names on the calling thread, now: the thread's
    /// own for the per-thread default stream, and the latest stream of the
    /// handle for any other.
    fn key(&self, stream: &Stream) -> usize {
        let raw = stream.as_raw() as usize;
        if raw == crate::stream::PER_THREAD {
            return per_thread_key();
        }
        raw + (self.generation.get(&raw).copied().unwrap_or(0) << 48)
    }

    /// A violation if `stream` (by key) was destroyed.
    fn alive(&mut self, k: usize, what: &str) {
        if self.destroyed.contains(&k) {
            self.violations.push(format!("{what} on destroyed stream {k:#x}"));
        }
    }

    /// The physical memory behind `[addr, addr + len)`: (handle, offset,
    /// length) pieces, of the mappings that cover it.
    fn phys(&self, addr: usize, len: usize) -> Vec<(u64, usize, usize)> {
        let mut out = Vec::new();
        for (&a, &(l, h)) in self.mapped.range(..addr + len) {
            if a + l <= addr {
                continue;
            }
            let from = a.max(addr);
            let to = (a + l).min(addr + len);
            out.push((h, from - a, to - from));
        }
        out
    }

    /// What the work enqueued on `stream` from now on is ordered after, by
    /// device waits (transitively): stream → the mark up to which its work
    /// comes first.
    fn ordered_after(&self, stream: usize) -> HashMap<usize, u64> {
        let mut after = HashMap::new();
        let mut todo = vec![(stream, self.marks.get(&stream).copied().unwrap_or(0))];
        while let Some((x, xm)) = todo.pop() {
            for &(w, wm, y, ym) in &self.device_waits {
                if w == x && wm <= xm && after.get(&y).is_none_or(|&m| m < ym) {
                    after.insert(y, ym);
                    todo.push((y, ym));
                }
            }
        }
        after
    }

    /// Completed work completes what it waited for on the device.
    fn propagate(&mut self) {
        loop {
            let mut changed = false;
            for &(w, wm, y, ym) in &self.device_waits {
                let done = self.completed.get(&w).copied().unwrap_or(0) >= wm;
                let c = self.completed.entry(y).or_insert(0);
                if done && *c < ym {
                    *c = ym;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
    }

    /// Forgets the pending frees the device has completed.
    fn settle(&mut self) {
        self.propagate();
        let completed = &self.completed;
        self.pending
            .retain(|p| completed.get(&p.stream).copied().unwrap_or(0) < p.mark);
    }
}

// SAFETY: nothing is ever dereferenced: addresses are numbers the tests
// check, and a fence is done only once the test completed its stream's
// work up to the record.
unsafe impl Phys for FakePhys {
    type Fence = u64;

    fn reserve(&self, bytes: usize, align: usize) -> Result<usize> {
        self.call(Op::Reserve)?;
        let mut vm = self.vm();
        let base = vm.next_va.div_ceil(align) * align;
        vm.next_va = base + bytes + align;
        vm.reservations.insert(base, bytes);
        Ok(base)
    }

    unsafe fn unreserve(&self, base: usize, bytes: usize) -> Result<()> {
        self.call(Op::Unreserve)?;
        let mut vm = self.vm();
        if vm.mapped.range(base..base + bytes).next().is_some() {
            vm.violations
                .push(format!("reservation {base:#x} freed with mappings in it"));
        }
        if vm.reservations.remove(&base) != Some(bytes) {
            vm.violations
                .push(format!("unknown reservation {base:#x} of {bytes}"));
        }
        Ok(())
    }

    fn create(&self, bytes: usize) -> Result<u64> {
        self.call(Op::Create)?;
        let mut vm = self.vm();
        let used: usize = vm.created.values().sum();
        if used + bytes > vm.capacity {
            return Err(oom(bytes));
        }
        let h = vm.next_handle;
        vm.next_handle += 1;
        vm.created.insert(h, bytes);
        Ok(h)
    }

    unsafe fn release(&self, handle: u64) -> Result<()> {
        self.call(Op::Release)?;
        let mut vm = self.vm();
        if vm.mapped.values().any(|&(_, h)| h == handle) {
            vm.violations
                .push(format!("handle {handle} released while mapped"));
        }
        if vm.created.remove(&handle).is_none() {
            vm.violations
                .push(format!("handle {handle} released twice or never made"));
        }
        Ok(())
    }

    unsafe fn map(&self, addr: usize, bytes: usize, handle: u64) -> Result<()> {
        self.call(Op::Map)?;
        let mut vm = self.vm();
        if vm.created.get(&handle) != Some(&bytes) {
            vm.violations
                .push(format!("map of handle {handle} with {bytes} bytes"));
        }
        let inside = vm
            .reservations
            .range(..=addr)
            .next_back()
            .is_some_and(|(&b, &l)| addr + bytes <= b + l);
        let clear = vm
            .mapped
            .range(..addr + bytes)
            .next_back()
            .is_none_or(|(&a, &(l, _))| a + l <= addr);
        if !inside || !clear {
            vm.violations.push(format!(
                "map at [{addr:#x}, +{bytes}) outside a reservation or over a mapping"
            ));
        }
        vm.mapped.insert(addr, (bytes, handle));
        Ok(())
    }

    unsafe fn grant(&self, addr: usize, _bytes: usize, device: usize) -> Result<()> {
        self.call(Op::Grant)?;
        let mut vm = self.vm();
        if !vm.mapped.contains_key(&addr) {
            vm.violations.push(format!("grant on unmapped {addr:#x}"));
        } else if device == 0 {
            vm.access.insert(addr);
        }
        Ok(())
    }

    fn device(&self) -> usize {
        0
    }

    fn new_stream(&self) -> Result<Stream> {
        self.call(Op::NewStream)?;
        let mut vm = self.vm();
        vm.next_stream += 16;
        Ok(Stream::fake(vm.next_stream, 0))
    }

    unsafe fn unmap(&self, addr: usize, bytes: usize) -> Result<()> {
        self.call(Op::Unmap)?;
        let mut vm = self.vm();
        vm.settle();
        let busy: Vec<_> = vm
            .pending
            .iter()
            .filter(|p| overlaps(p.addr, p.len, addr, bytes))
            .cloned()
            .collect();
        for p in busy {
            vm.violations.push(format!(
                "[{addr:#x}, +{bytes}) unmapped while stream {:#x}'s free of [{:#x}, +{}) is pending",
                p.stream, p.addr, p.len
            ));
        }
        let live: Vec<usize> = vm
            .live_va
            .range(..addr + bytes)
            .filter(|&(&a, &l)| overlaps(a, l, addr, bytes))
            .map(|(&a, _)| a)
            .collect();
        for l in live {
            vm.violations.push(format!(
                "[{addr:#x}, +{bytes}) unmapped under the live block at {l:#x}"
            ));
        }
        vm.access.remove(&addr);
        match vm.mapped.remove(&addr) {
            Some((l, _)) if l == bytes => {}
            other => vm
                .violations
                .push(format!("unmap of [{addr:#x}, +{bytes}) found {other:?}")),
        }
        Ok(())
    }

    fn new_fence(&self, _stream: &Stream) -> Result<u64> {
        self.call(Op::NewFence)?;
        let mut vm = self.vm();
        let id = vm.next_fence;
        vm.next_fence += 1;
        vm.fences.insert(id, None);
        Ok(id)
    }

    fn record(&self, fence: &u64, stream: &Stream) -> Result<()> {
        self.call(Op::Record)?;
        crate::testing::at_fake_record(stream);
        let capturing = !matches!(
            stream.ask_capture_status(),
            Ok(crate::backend::CaptureStatus::None) | Err(_)
        );
        let mut vm = self.vm();
        let k = vm.key(stream);
        vm.alive(k, "a record");
        let m = vm.marks.get(&k).copied().unwrap_or(0);
        vm.fences.insert(*fence, Some((k, m)));
        if capturing {
            vm.captured.insert(*fence);
        } else {
            vm.captured.remove(fence);
        }
        Ok(())
    }

    fn done(&self, fence: &u64) -> Result<bool> {
        self.call(Op::Done)?;
        let mut vm = self.vm();
        if vm.captured.contains(fence) {
            return Err(Error::capture("a query of a fence recorded in a capture"));
        }
        vm.propagate();
        Ok(match vm.fences.get(fence).copied().flatten() {
            Some((s, m)) => vm.completed.get(&s).copied().unwrap_or(0) >= m,
            None => true,
        })
    }

    fn wait(&self, fence: &u64) -> Result<()> {
        self.call(Op::Wait)?;
        let mut vm = self.vm();
        if vm.captured.contains(fence) {
            return Err(Error::capture("a host wait on a fence recorded in a capture"));
        }
        if let Some((s, m)) = vm.fences.get(fence).copied().flatten() {
            let c = vm.completed.entry(s).or_insert(0);
            *c = (*c).max(m);
            vm.propagate();
        }
        Ok(())
    }

    fn wait_on(&self, stream: &Stream, fence: &u64) -> Result<()> {
        self.call(Op::WaitOn)?;
        let mut vm = self.vm();
        let w = vm.key(stream);
        vm.alive(w, "a wait");
        if vm.captured.contains(fence) {
            // A device joins the waiting stream to the capture: its work is
            // then ordered after nothing of the other stream's.
            vm.violations.push(format!(
                "stream {w:#x} waited on a fence recorded in a capture (joined it)"
            ));
            return Ok(());
        }
        if vm.drop_waits {
            return Ok(());
        }
        if let Some((s, m)) = vm.fences.get(fence).copied().flatten() {
            // The wait is a piece of the waiting stream's work.
            let wm = {
                let e = vm.marks.entry(w).or_insert(0);
                *e += 1;
                *e
            };
            vm.device_waits.push((w, wm, s, m));
        }
        Ok(())
    }
}
