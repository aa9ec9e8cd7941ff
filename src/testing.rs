//! Test doubles for the host-side bookkeeping (cfg(test) only), the fake
//! runtime: a resource that hands out made-up, never-overlapping addresses
//! and checks every free against what it handed out ([`FakeResource`]),
//! fake streams ([`Stream::fake`]) that report a capture state the test
//! sets, fake graphs that call their release callbacks when the test
//! destroys them, failure injection into all of these ([`arm`]), and a
//! small seeded PRNG.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::backend::GraphRelease;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::resource::MemoryResource;
use crate::stream::{Asked, Stream};

// ---------------------------------------------------------------------------
// Failure injection.

/// How an injected failure answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Out of memory (an allocation); any other call answers `Vendor`.
    OutOfMemory,
    /// The vendor's invalid-value error (code 1).
    InvalidValue,
    /// Another vendor error (an illegal address, code 700).
    Vendor,
}

/// The kinds of calls into the fake runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Call {
    Allocate,
    Free,
    /// A stream's capture state (`cudaStreamGetCaptureInfo`).
    CaptureQuery,
    /// Ordering one stream after another (event create, record, wait).
    Event,
    /// A graph retaining a release callback (`cudaGraphRetainUserObject`).
    GraphRetain,
}

/// This thread's failure plan: see [`arm`].
#[derive(Clone, Copy)]
struct Plan {
    domain: u64,
    /// Calls of the domain to let through before the first failure.
    skip: u32,
    fault: Fault,
    /// After the first failure, every later call of the domain fails too.
    persistent: bool,
    /// Failures injected since the plan was armed.
    injected: u32,
    /// Calls of the domain seen since the plan was armed.
    calls: u32,
}

thread_local! {
    static PLAN: Cell<Option<Plan>> = const { Cell::new(None) };
}

/// Arms failure injection on this thread: of the fake runtime's calls made
/// by this thread on objects of `domain` (a [`FakeResource::in_domain`], a
/// [`Stream::fake_in`], a fake graph of such a stream), the first `skip`
/// succeed and the next one fails with `fault`; with `persistent`, every
/// call after it fails too. Calls of other threads and other domains are
/// never failed, so that tests running at the same time (which may perform
/// each other's deferred frees) do not see each other's failures.
pub(crate) fn arm(domain: u64, skip: u32, fault: Fault, persistent: bool) {
    assert_ne!(domain, 0, "domain 0 is never failed");
    PLAN.with(|p| {
        p.set(Some(Plan {
            domain,
            skip,
            fault,
            persistent,
            injected: 0,
            calls: 0,
        }))
    });
}

/// Disarms this thread's plan; the failures it injected and the calls of
/// its domain it saw.
pub(crate) fn disarm() -> (u32, u32) {
    PLAN.with(|p| p.take().map_or((0, 0), |plan| (plan.injected, plan.calls)))
}

/// Called by the fake runtime at each call: the injected failure, if this
/// one is to fail.
pub(crate) fn fault_point(domain: Option<u64>, call: Call) -> Result<()> {
    let Some(domain) = domain.filter(|d| *d != 0) else {
        return Ok(());
    };
    let fault = PLAN.with(|p| {
        let mut plan = p.get()?;
        if plan.domain != domain {
            return None;
        }
        plan.calls += 1;
        let fail = if plan.calls <= plan.skip {
            false
        } else {
            plan.injected == 0 || plan.persistent
        };
        if fail {
            plan.injected += 1;
        }
        p.set(Some(plan));
        fail.then_some(plan.fault)
    });
    match fault {
        None => Ok(()),
        Some(Fault::OutOfMemory) if call == Call::Allocate => Err(Error::OutOfMemory {
            requested: 0,
            stats: None,
            arena: None,
        }),
        Some(Fault::InvalidValue) => Err(vendor_error(call, 1, "fakeErrorInvalidValue")),
        Some(_) => Err(vendor_error(call, 700, "fakeErrorIllegalAddress")),
    }
}

fn vendor_error(call: Call, code: i32, name: &str) -> Error {
    Error::Vendor {
        call: match call {
            Call::Allocate => "fakeMallocFromPoolAsync",
            Call::Free => "fakeFreeAsync",
            Call::CaptureQuery => "fakeStreamGetCaptureInfo",
            Call::Event => "fakeEventRecord",
            Call::GraphRetain => "fakeGraphRetainUserObject",
        },
        code: crate::VendorCode(code),
        name: name.into(),
        message: "failure injected by the test".into(),
    }
}

// ---------------------------------------------------------------------------
// Captures that begin at a record.

/// Fake streams (by handle) whose capture begins at their next record, as
/// if another thread began it between somalloc's question and the record:
/// the capture's id.
static CAPTURE_AT_RECORD: Mutex<Option<HashMap<usize, u64>>> = Mutex::new(None);

/// Makes a capture (of id `id`) of fake stream `stream` begin at the next
/// record on it ([`at_fake_record`]).
pub(crate) fn begin_capture_at_next_record(stream: &Stream, id: u64) {
    CAPTURE_AT_RECORD
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(stream.as_raw() as usize, id);
}

/// Called by the fakes at a record on `stream`, just before it takes
/// effect: begins the capture [`begin_capture_at_next_record`] asked for.
pub(crate) fn at_fake_record(stream: &Stream) {
    let id = CAPTURE_AT_RECORD
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_mut()
        .and_then(|m| m.remove(&(stream.as_raw() as usize)));
    if let Some(id) = id {
        stream.set_fake_capture(crate::capture::CaptureStatus::Active, id);
    }
}

// ---------------------------------------------------------------------------
// Fake events (`Event::for_stream` on a fake stream).

/// What a fake timing event pair reads as ([`Event::elapsed_ms`]).
///
/// [`Event::elapsed_ms`]: crate::Event::elapsed_ms
pub(crate) const FAKE_ELAPSED_MS: f32 = 0.5;

/// Per failure domain: whether its fake events answer complete.
static FAKE_EVENTS_DONE: Mutex<Option<HashMap<u64, bool>>> = Mutex::new(None);

/// Makes the fake events of `domain` answer `done` when asked whether the
/// device has passed them (`Event::is_complete`; `false` until set).
#[cfg(feature = "plan")] // for the plan's tests
pub(crate) fn set_fake_events_complete(domain: u64, done: bool) {
    FAKE_EVENTS_DONE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(domain, done);
}

/// Whether the fake events of `domain` answer complete.
pub(crate) fn fake_events_complete(domain: u64) -> bool {
    FAKE_EVENTS_DONE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .and_then(|m| m.get(&domain).copied())
        .unwrap_or(false)
}

/// The order the fake runtime keeps between fake streams, as vector
/// clocks: per stream (by handle), how many marks of each stream it is
/// ordered after; per fake event, the clock of the stream it was last
/// recorded on, at the record. A wait merges the event's clock into the
/// waiting stream's, as a device orders the two streams.
#[derive(Default)]
struct Clocks {
    streams: HashMap<usize, HashMap<usize, u64>>,
    events: HashMap<usize, HashMap<usize, u64>>,
}

static FAKE_CLOCKS: Mutex<Option<Clocks>> = Mutex::new(None);

fn with_clocks<T>(f: impl FnOnce(&mut Clocks) -> T) -> T {
    f(FAKE_CLOCKS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(Clocks::default))
}

/// A mark on fake stream `stream` (a point of its queue, such as a free):
/// its number, from 1. Events recorded on the stream from now on, and the
/// streams that wait for them, are ordered after it.
#[cfg(feature = "plan")] // for the plan's tests
pub(crate) fn fake_mark(stream: usize) -> u64 {
    with_clocks(|c| {
        let own = c.streams.entry(stream).or_default().entry(stream).or_insert(0);
        *own += 1;
        *own
    })
}

/// How many of `of`'s marks fake stream `stream` is ordered after.
#[cfg(feature = "plan")] // for the plan's tests
pub(crate) fn fake_ordered_after(stream: usize, of: usize) -> u64 {
    with_clocks(|c| {
        c.streams
            .get(&stream)
            .and_then(|v| v.get(&of).copied())
            .unwrap_or(0)
    })
}

/// The latest mark of fake stream `stream` that a fake event was recorded
/// after (0: none): once the device is said to have passed the domain's
/// events ([`set_fake_events_complete`]), the marks up to it are done.
#[cfg(feature = "plan")] // for the plan's tests
pub(crate) fn fake_recorded_mark(stream: usize) -> u64 {
    with_clocks(|c| {
        c.events
            .values()
            .filter_map(|snap| snap.get(&stream).copied())
            .max()
            .unwrap_or(0)
    })
}

/// Fake event `event` is recorded on fake stream `stream`.
pub(crate) fn fake_event_recorded(event: usize, stream: usize) {
    with_clocks(|c| {
        let now = c.streams.get(&stream).cloned().unwrap_or_default();
        c.events.insert(event, now);
    });
}

/// Fake stream `stream` waits for fake event `event` (as last recorded).
pub(crate) fn fake_event_waited(stream: usize, event: usize) {
    with_clocks(|c| {
        let snap = c.events.get(&event).cloned().unwrap_or_default();
        merge(c.streams.entry(stream).or_default(), &snap);
    });
}

/// Fake stream `waiter` waits for everything queued so far on `target`.
pub(crate) fn fake_stream_waited(waiter: usize, target: usize) {
    with_clocks(|c| {
        let snap = c.streams.get(&target).cloned().unwrap_or_default();
        merge(c.streams.entry(waiter).or_default(), &snap);
    });
}

fn merge(into: &mut HashMap<usize, u64>, from: &HashMap<usize, u64>) {
    for (&k, &v) in from {
        let e = into.entry(k).or_insert(0);
        *e = (*e).max(v);
    }
}

// ---------------------------------------------------------------------------
// Fake graphs.

/// A fake graph: the release callbacks retained by it, and the failure
/// domain of the stream that captures it.
struct FakeGraph {
    domain: u64,
    retained: Vec<(GraphRelease, usize)>,
}

static FAKE_GRAPHS: Mutex<Option<HashMap<u64, FakeGraph>>> = Mutex::new(None);

fn fake_graphs() -> MutexGuard<'static, Option<HashMap<u64, FakeGraph>>> {
    FAKE_GRAPHS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Makes capture `id` (use ids no other test uses) have a fake graph, of
/// failure-injection `domain`: `defer` then registers with it a free that
/// waits for that capture.
pub(crate) fn fake_graph_begin(id: u64, domain: u64) {
    fake_graphs().get_or_insert_with(HashMap::new).insert(
        id,
        FakeGraph {
            domain,
            retained: Vec::new(),
        },
    );
}

/// Whether capture `id` has a fake graph that is not destroyed.
pub(crate) fn fake_graph_exists(id: u64) -> bool {
    fake_graphs().as_ref().is_some_and(|g| g.contains_key(&id))
}

/// The fake `graph_retain_release`: keeps `release(data)` for the graph's
/// destruction, or fails (by injection) without keeping it.
pub(crate) fn fake_graph_retain(id: u64, release: GraphRelease, data: *mut c_void) -> Result<()> {
    let domain = fake_graphs().as_ref().and_then(|g| g.get(&id)).map(|g| g.domain);
    let Some(domain) = domain else {
        return Err(vendor_error(Call::GraphRetain, 1, "fakeErrorInvalidValue"));
    };
    fault_point(Some(domain), Call::GraphRetain)?;
    if let Some(g) = fake_graphs().as_mut().and_then(|g| g.get_mut(&id)) {
        g.retained.push((release, data as usize));
    }
    Ok(())
}

/// Destroys capture `id`'s fake graph: its release callbacks run on a
/// thread of their own, as the runtime's do, which this joins. The number
/// of callbacks run.
pub(crate) fn fake_graph_destroy(id: u64) -> usize {
    let graph = fake_graphs().as_mut().and_then(|g| g.remove(&id));
    let Some(graph) = graph else { return 0 };
    let n = graph.retained.len();
    let destructor = std::thread::spawn(move || {
        for (release, data) in graph.retained {
            // SAFETY: each callback was retained once with its data by
            // `fake_graph_retain`, under the contract of
            // `Backend::graph_retain_release`: called once, on any thread.
            unsafe { release(data as *mut c_void) };
        }
    });
    destructor
        .join()
        .expect("the fake graph's destructor thread panicked");
    n
}

/// What a [`FakeResource`] saw.
#[derive(Debug, Default)]
pub(crate) struct FakeState {
    next: usize,
    /// addr -> (bytes, stream) of every block handed out and not freed.
    pub live: HashMap<usize, (usize, usize)>,
    pub used: usize,
    pub used_peak: usize,
    pub allocs: u64,
    pub frees: u64,
    /// Every contract violation seen (double free, wrong size or stream).
    pub errors: Vec<String>,
    /// Log of (is_alloc, addr, bytes, stream), when enabled.
    pub log: Option<Vec<(bool, usize, usize, usize)>>,
    /// Live blocks whose free failed by injection (so they stay live: the
    /// caller was told, and may not free them again).
    pub failed_frees: HashSet<usize>,
}

/// A host-only [`MemoryResource`]: addresses are made up (never
/// dereferenced), blocks never overlap, frees are checked.
pub(crate) struct FakeResource {
    device: Device,
    /// Failure-injection domain (0: never failed).
    domain: u64,
    limit: Option<usize>,
    fail_frees: AtomicBool,
    state: Mutex<FakeState>,
}

impl FakeResource {
    pub fn new(limit: Option<usize>) -> Arc<FakeResource> {
        Self::with(0, limit, 0)
    }

    /// An unlimited fake resource of [`Device::fake`]`(device)`.
    pub fn on(device: usize) -> Arc<FakeResource> {
        Self::with(device, None, 0)
    }

    /// A fake resource whose calls fail as this thread's plan of `domain`
    /// says (see [`arm`]).
    pub fn in_domain(limit: Option<usize>, domain: u64) -> Arc<FakeResource> {
        Self::with(0, limit, domain)
    }

    fn with(device: usize, limit: Option<usize>, domain: u64) -> Arc<FakeResource> {
        Arc::new(FakeResource {
            device: Device::fake(device),
            domain,
            limit,
            fail_frees: AtomicBool::new(false),
            state: Mutex::new(FakeState {
                next: 0x1_0000_0000,
                ..FakeState::default()
            }),
        })
    }

    pub fn state(&self) -> MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Blocks handed out and not freed.
    pub fn live(&self) -> usize {
        self.state().live.len()
    }

    /// (allocations, frees) so far.
    pub fn calls(&self) -> (u64, u64) {
        let s = self.state();
        (s.allocs, s.frees)
    }

    pub fn enable_log(&self) {
        self.state().log = Some(Vec::new());
    }

    /// Makes every later free fail (with a vendor-like error) without
    /// freeing.
    pub fn fail_frees(&self, on: bool) {
        self.fail_frees.store(on, Ordering::Relaxed);
    }

    /// Panics (in tests) if any contract violation was seen.
    pub fn assert_clean(&self) {
        let s = self.state();
        assert!(s.errors.is_empty(), "fake upstream saw: {:?}", s.errors);
    }
}

// SAFETY: test double: its addresses are made up and never dereferenced;
// it never hands out a block twice while live (blocks never overlap).
// Like somalloc's pool, it wants to know whether the stream is capturing on
// every call, and takes the caller's answer where there is one (so that the
// tests count the questions a path asks in all).
unsafe impl MemoryResource for FakeResource {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<*mut c_void> {
        self.allocate_asked(bytes, stream, Asked::NOT_YET)
    }

    unsafe fn deallocate(&self, ptr: *mut c_void, bytes: usize, stream: &Stream) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.deallocate_asked(ptr, bytes, stream, Asked::NOT_YET) }
    }

    fn allocate_asked(&self, bytes: usize, stream: &Stream, asked: Asked) -> Result<*mut c_void> {
        asked.capturing(stream)?;
        let mut s = self.state();
        if bytes == 0 {
            s.errors.push("0-byte allocation".into());
            return Err(Error::invalid("0 bytes"));
        }
        if let Err(e) = fault_point(Some(self.domain), Call::Allocate) {
            return Err(match e {
                Error::OutOfMemory { stats, .. } => Error::OutOfMemory {
                    requested: bytes,
                    stats,
                    arena: None,
                },
                other => other,
            });
        }
        if self.limit.is_some_and(|l| s.used + bytes > l) {
            return Err(Error::OutOfMemory {
                requested: bytes,
                stats: None,
                arena: None,
            });
        }
        let addr = s.next;
        // A gap after every block, so that adjacent blocks never touch.
        s.next += bytes.div_ceil(256) * 256 + 256;
        let key = stream.as_raw() as usize;
        s.live.insert(addr, (bytes, key));
        s.used += bytes;
        s.used_peak = s.used_peak.max(s.used);
        s.allocs += 1;
        if let Some(log) = &mut s.log {
            log.push((true, addr, bytes, key));
        }
        Ok(addr as *mut c_void)
    }

    unsafe fn deallocate_asked(
        &self,
        ptr: *mut c_void,
        bytes: usize,
        stream: &Stream,
        asked: Asked,
    ) -> Result<()> {
        asked.capturing(stream)?;
        if self.fail_frees.load(Ordering::Relaxed) {
            let addr = ptr as usize;
            let mut s = self.state();
            if s.live.contains_key(&addr) {
                s.failed_frees.insert(addr);
            }
            return Err(Error::Vendor {
                call: "fakeFreeAsync",
                code: crate::VendorCode(1),
                name: "fakeError".into(),
                message: "free refused".into(),
            });
        }
        let mut s = self.state();
        let addr = ptr as usize;
        let key = stream.as_raw() as usize;
        if let Err(e) = fault_point(Some(self.domain), Call::Free) {
            // Refused: the block stays live (remembered as such).
            if s.live.contains_key(&addr) {
                s.failed_frees.insert(addr);
            }
            return Err(e);
        }
        s.failed_frees.remove(&addr);
        match s.live.remove(&addr) {
            None => s.errors.push(format!("free of {addr:#x}, not live")),
            Some((b, k)) => {
                if b != bytes {
                    s.errors
                        .push(format!("free of {addr:#x} with {bytes} bytes, allocated {b}"));
                }
                if k != key {
                    s.errors.push(format!(
                        "free of {addr:#x} on stream {key:#x}, allocated on {k:#x}"
                    ));
                }
                s.used -= b;
            }
        }
        s.frees += 1;
        if let Some(log) = &mut s.log {
            log.push((false, addr, bytes, key));
        }
        Ok(())
    }

    fn device(&self) -> Device {
        self.device
    }
}

/// xorshift64*: small, seeded, good enough for model tests.
pub(crate) struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// 2^U(lo, hi), as the benchmark's churn draws sizes.
    pub fn log_uniform(&mut self, lo: f64, hi: f64) -> usize {
        (lo + (hi - lo) * self.unit()).exp2() as usize
    }
}

// ---------------------------------------------------------------------------
// Tests that change process-wide state.

/// Runs the calling test again in a child process of its own, for a test
/// that changes state every test of the process sees (the count of
/// captures in progress, which turns every stream's fast path off while it
/// is not zero). Returns `true` in the child, where the test's body runs;
/// in the parent it waits for the child, panics with its output if the
/// child failed, and returns `false` (the test returns at once).
///
/// `name` is the test's path below the crate (`graph::tests::my_test`).
pub(crate) fn in_own_process(name: &str) -> bool {
    const CHILD: &str = "SOMALLOC_TEST_CHILD";
    if std::env::var_os(CHILD).is_some_and(|v| v == name) {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(exe)
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(CHILD, name)
        .output()
        .expect("the test binary runs again");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{name} failed in its own process ({}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    false
}
