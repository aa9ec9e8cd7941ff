//! The recorder: a ring per recording thread, drained by one writer thread
//! that streams the events to a file.

use std::backtrace::Backtrace;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::clock::Clock;
use super::device_time::{DeviceClock, Reached};
use super::format::{Action, Event, TraceWriter};
use super::ring::{ring, Consumer, Producer};
use crate::error::{record_drop_error, Error, Result};
use crate::stream::Stream;
use crate::sync;

/// How a [`Recorder`] records.
///
/// ```
/// use somalloc::trace::RecordOptions;
/// let options = RecordOptions::default().backtraces(true).buffer_events(1 << 16);
/// assert!(options.backtraces);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordOptions {
    /// Capture a backtrace at every allocation (off by default: it costs
    /// tens of microseconds per allocation, and the writer thread resolves
    /// the symbols).
    pub backtraces: bool,
    /// Events each recording thread can hold before the writer takes them
    /// (default 8192, 56 bytes each). When a thread's buffer is full its
    /// next events are dropped and counted ([`RecorderStats::dropped`], and
    /// a record in the file), never waited for.
    pub buffer_events: usize,
    /// Record the markers of every cache tier flush and trim, pool trim and
    /// stream capture made through somalloc in the process while the
    /// recorder is alive (on by default), not only those of the recorded
    /// resources.
    pub markers: bool,
    /// Record, for allocations and frees on a stream, when the device
    /// reached them in the stream's queue ([`Event::device_ns`](crate::trace::Event::device_ns);
    /// off by default): at most one event per stream every
    /// [`device_time_interval_ns`](RecordOptions::device_time_interval_ns)
    /// of host time gets a timing event recorded on its stream, which the
    /// writer thread reads once the device has passed it. Events of a
    /// capturing stream get none. A placement planned from the trace uses
    /// them to share bytes between streams only where the device had
    /// released them ([`Sharing::Device`](crate::trace::plan::Sharing::Device));
    /// the events between two timed ones of their stream are bounded by
    /// them (a free by the next, an allocation by the one before).
    pub device_times: bool,
    /// The host time a stream's timed events are apart at least (default
    /// 100 µs; 0 times every event). Each timing event costs the recording
    /// thread about a microsecond or two: a program that launches work as
    /// fast as the device runs it would slow down, and with it the device
    /// times, if every event had one.
    pub device_time_interval_ns: u64,
}

impl Default for RecordOptions {
    fn default() -> RecordOptions {
        RecordOptions {
            backtraces: false,
            buffer_events: 8192,
            markers: true,
            device_times: false,
            device_time_interval_ns: 100_000,
        }
    }
}

impl RecordOptions {
    /// Sets [`backtraces`](RecordOptions::backtraces).
    pub fn backtraces(mut self, on: bool) -> RecordOptions {
        self.backtraces = on;
        self
    }

    /// Sets [`buffer_events`](RecordOptions::buffer_events) (at least 2;
    /// rounded up to a power of two).
    pub fn buffer_events(mut self, events: usize) -> RecordOptions {
        self.buffer_events = events.max(2);
        self
    }

    /// Sets [`markers`](RecordOptions::markers).
    pub fn markers(mut self, on: bool) -> RecordOptions {
        self.markers = on;
        self
    }

    /// Sets [`device_times`](RecordOptions::device_times).
    pub fn device_times(mut self, on: bool) -> RecordOptions {
        self.device_times = on;
        self
    }

    /// Sets [`device_time_interval_ns`](RecordOptions::device_time_interval_ns).
    pub fn device_time_interval(mut self, interval: Duration) -> RecordOptions {
        self.device_time_interval_ns = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
        self
    }
}

/// What a [`Recorder`] has done so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecorderStats {
    /// Events written to the file.
    pub events: u64,
    /// Events dropped: a thread's buffer was full, the recorder was
    /// finished, or the file could not be written.
    pub dropped: u64,
    /// Bytes written to the file.
    pub bytes: u64,
    /// Threads that recorded.
    pub threads: u32,
    /// The first error writing the file, if any (later events are dropped).
    pub error: Option<String>,
    /// Device times written ([`RecordOptions::device_times`]).
    pub device_times: u64,
    /// Events that were to get a device time and have none: the runtime
    /// refused their timing event, or the device had not reached it when
    /// the recording finished (the events the interval skips, and a
    /// capturing stream's, are not counted).
    pub device_times_missed: u64,
}

impl fmt::Display for RecorderStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} events written ({} bytes), {} dropped, {} thread(s)",
            self.events, self.bytes, self.dropped, self.threads
        )?;
        if let Some(e) = &self.error {
            write!(f, "; error: {e}")?;
        }
        Ok(())
    }
}

/// An event as a recording thread hands it over; the writer turns the
/// stream handle and the backtrace into indices.
pub(crate) struct RawEvent {
    pub(crate) t_ns: u64,
    pub(crate) action: Action,
    pub(crate) device: u32,
    /// The stream's vendor handle, if the event has a stream.
    pub(crate) stream: Option<u64>,
    pub(crate) bytes: u64,
    pub(crate) addr: u64,
    pub(crate) backtrace: Option<Box<Backtrace>>,
}

// What `RecordOptions::buffer_events` says an event takes.
const _: () = assert!(std::mem::size_of::<RawEvent>() <= 56);

/// A ring a thread registered, waiting for the writer to take it.
struct NewRing {
    consumer: Consumer<RawEvent>,
    window: sync::Arc<Window>,
    thread: u32,
    name: String,
}

/// What the writer is asked to do, under `Shared::control`.
#[derive(Default)]
struct Control {
    flush_requested: u64,
    flush_done: u64,
    stop: bool,
    meta: Vec<(String, String)>,
}

pub(crate) struct Shared {
    id: u64,
    clock: Clock,
    ring_events: usize,
    next_thread: AtomicU32,
    /// Closed by the writer's last round: later events are dropped (and
    /// counted in `late`); see [`Closing`].
    closing: Closing,
    /// Events dropped without a ring: after `finish`, or on a thread whose
    /// thread-local storage is gone when the fallback is full.
    late: AtomicU64,
    /// Rings registered since the writer last looked.
    pending: Mutex<Vec<NewRing>>,
    /// Events of threads that can no longer reach their ring (thread-local
    /// storage destroyed), bounded by `ring_events`.
    fallback: Mutex<Vec<RawEvent>>,
    control: Mutex<Control>,
    /// The writer waits here between rounds.
    wake: Condvar,
    /// `flush` waits here.
    flushed: Condvar,
    /// Whether the writer is waiting on `wake`: a hint for the nudge only.
    /// A nudge that reads a stale value, or comes just before the writer
    /// waits, is lost; the writer's wait has a timeout (at most 16 ms), so
    /// a lost nudge delays the writer and never stops it. Correctness
    /// (every published event is written) rests on the ring alone.
    sleeping: AtomicBool,
    stats: Mutex<RecorderStats>,
    /// With [`RecordOptions::device_times`].
    pub(crate) device_clock: Option<DeviceClock>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // No code panics while holding these locks; the data stays consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The thread's side of one recorder.
struct Local {
    shared: Arc<Shared>,
    producer: Producer<RawEvent>,
    /// Where this thread's pushes into `producer` announce themselves.
    window: sync::Arc<Window>,
}

// ---------------------------------------------------------------------------
// Closing without losing an event
//
// A thread that finds the recorder open and then pushes must not push
// after the writer's last drain: its event would be neither written nor
// counted, and a ring it registered then would never be taken. So a push
// announces itself before it looks at `closed`, and the writer's last
// round, after setting `closed`, waits for every push it can see announced
// before it drains for the last time.
//
// A push into the thread's own ring announces itself in that ring's
// `Window`: a counter only that thread writes, on a cache line of its own,
// odd from before the push looks at `closed` until it has pushed. A push
// with no ring to push into (it registers one, or the thread's storage is
// gone and the event goes to `fallback`) announces itself in `entering`,
// a count shared by all threads: such pushes are rare.
//
//   push:    window += 1 (Release) | entering += 1
//            F1: fence(SeqCst)
//            load `closed`; if open, push (ring / `pending` / `fallback`)
//            window += 1 (Release) | entering -= 1 (Release)
//   writer:  store `closed`
//            F2: fence(SeqCst)
//            wait until `entering` is 0 (Acquire loads)
//            take `pending`; for each ring, load its window (Acquire) and,
//            if odd, wait until it changes (Acquire loads)
//            drain every ring and `fallback` for the last time
//
// Why every event is written or counted. All SeqCst fences lie in one
// total order S. Take a push with announcement A, fence F1, and the
// writer's F2 (the writer's loads are on its own thread, after F2).
// * F2 before F1 in S: the `closed` store is sequenced before F2 and the
//   push's load after F1, so the load sees it (the fence rule of the
//   memory model: a load after the later of two SeqCst fences sees a store
//   before the earlier, or a later store). The push is refused and counted
//   in `late`.
// * F1 before F2 in S: by the same rule, the writer's loads see A or a
//   later store of the same counter.
//   - `entering`: in the count's modification order a push's subtraction
//     comes after its addition, so a 0 at or after A comes after this
//     push's subtraction. Every change of the count is a read-modify-write,
//     so that 0 lies in the release sequence of the subtraction, and the
//     writer's Acquire load synchronises with it: the ring put in `pending`
//     or the event put in `fallback` happens before the writer takes them.
//   - a window: the writer reads v at or after A. Even: a Release store
//     the thread made after this push ended. Odd: a push is inside (this
//     one or a later one), and the writer waits for a later value, which
//     the thread stores (Release) after that push ended. The Acquire load
//     synchronises with it, so this push's `head` store happens before the
//     last drain, which reads it.
//   A push of that thread announced after the value the writer read sees
//   `closed`: had its F1 come before F2, the writer's load would have seen
//   its announcement or later, not an earlier value. So the writer waits
//   for at most one push per ring, and never for a push it cannot see.
//
// On the fast path this costs two plain stores (Release is a plain store
// on x86), a load and a fence: no lock and no cache line shared with other
// threads. The models at the end of this file run both kinds of push
// against the writer's close under loom (`ci/loom.sh`); the schedule tests
// (`tests.rs`) stop a real push inside its window while `finish` runs.

/// One ring's announcements (see "Closing" above): odd while its thread is
/// inside a push. Written by that thread only.
#[repr(align(128))]
struct Window(sync::AtomicU64);

impl Window {
    fn new() -> Window {
        Window(sync::AtomicU64::new(0))
    }

    /// Enters or leaves the window: its thread only.
    #[inline]
    fn step(&self) {
        // Relaxed: this thread is the only writer, so it reads its own
        // last store.
        let v = self.0.load(sync::Ordering::Relaxed);
        self.0.store(v + 1, sync::Ordering::Release);
    }

    /// The writer, after [`Closing::close`]: waits until the push inside
    /// the window now (if any) has left it.
    fn wait_quiet(&self) {
        let v = self.0.load(sync::Ordering::Acquire);
        if v % 2 == 1 {
            while self.0.load(sync::Ordering::Acquire) == v {
                sync::yield_now();
            }
        }
    }
}

/// Whether the recorder is closed, and the handshake that closes it
/// without losing a push (see "Closing" above).
struct Closing {
    closed: sync::AtomicBool,
    /// Pushes inside their window that have no ring of their own.
    entering: sync::AtomicUsize,
}

impl Closing {
    fn new() -> Closing {
        Closing {
            closed: sync::AtomicBool::new(false),
            entering: sync::AtomicUsize::new(0),
        }
    }

    /// Whether it is closed, as a hint (no ordering).
    fn is_closed(&self) -> bool {
        self.closed.load(sync::Ordering::Relaxed)
    }

    /// A push into `window`'s ring enters: `true` if open, and then the
    /// push ends with [`leave`](Closing::leave); `false` if closed.
    #[inline]
    fn enter(&self, window: &Window) -> bool {
        window.step();
        sync::fence_seq_cst();
        if self.closed.load(sync::Ordering::Relaxed) {
            window.step();
            return false;
        }
        true
    }

    #[inline]
    fn leave(&self, window: &Window) {
        window.step();
    }

    /// A push with no ring of its own enters: as [`enter`](Closing::enter),
    /// ended with [`leave_shared`](Closing::leave_shared).
    fn enter_shared(&self) -> bool {
        self.entering.fetch_add(1, sync::Ordering::Relaxed);
        sync::fence_seq_cst();
        if self.closed.load(sync::Ordering::Relaxed) {
            self.entering.fetch_sub(1, sync::Ordering::Release);
            return false;
        }
        true
    }

    fn leave_shared(&self) {
        self.entering.fetch_sub(1, sync::Ordering::Release);
    }

    /// The writer's last round, on the writer thread: closes, and waits for
    /// the pushes with no ring of their own. The caller then waits on each
    /// ring's window ([`Window::wait_quiet`]) before its last drain.
    fn close(&self) {
        self.closed.store(true, sync::Ordering::Relaxed);
        sync::fence_seq_cst();
        while self.entering.load(sync::Ordering::Acquire) != 0 {
            sync::yield_now();
        }
    }
}

thread_local! {
    /// The rings this thread records into, one per recorder (nearly always
    /// one). Dropping it at thread exit drops the producers, which tells
    /// the writer that the rings are complete.
    static LOCAL: RefCell<Vec<Local>> = const { RefCell::new(Vec::new()) };
}

/// Recorders alive, and how many: the hooks of flush, trim and capture
/// look at the count (one relaxed load) and do nothing while it is 0.
static LIVE: AtomicUsize = AtomicUsize::new(0);
static REGISTRY: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Shared {
    /// Nanoseconds since the recording started.
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// Hands `event` to this thread's ring of this recorder; never waits
    /// for the writer.
    #[inline]
    pub(crate) fn push(self: &Arc<Self>, event: RawEvent) {
        let done = LOCAL.try_with(|local| {
            let Ok(mut local) = local.try_borrow_mut() else {
                return Err(event);
            };
            match local.iter_mut().find(|l| l.shared.id == self.id) {
                Some(l) => {
                    if self.closing.enter(&l.window) {
                        #[cfg(test)]
                        crate::cache::pause::point("recorder: open, not pushed");
                        push_into(l, event);
                        self.closing.leave(&l.window);
                    } else {
                        self.late.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                }
                None => {
                    self.push_registering(&mut local, event);
                    Ok(())
                }
            }
        });
        match done {
            Ok(Ok(())) => {}
            // The thread's storage is gone (the thread is exiting) or in use.
            Ok(Err(event)) => self.push_fallback(event),
            Err(_) => self.push_fallback_lost(),
        }
    }

    /// The thread's first push into this recorder: registers its ring.
    #[cold]
    fn push_registering(self: &Arc<Self>, local: &mut Vec<Local>, event: RawEvent) {
        if !self.closing.enter_shared() {
            self.late.fetch_add(1, Ordering::Relaxed);
            return;
        }
        #[cfg(test)]
        crate::cache::pause::point("recorder: open, registering");
        let mut l = self.register(local);
        push_into(&mut l, event);
        local.push(l);
        self.closing.leave_shared();
    }

    /// Inside [`Closing::enter_shared`]: the writer's last round takes the
    /// ring.
    fn register(self: &Arc<Self>, local: &mut Vec<Local>) -> Local {
        // Rings of finished recorders are of no use any more.
        local.retain(|l| !l.shared.closing.is_closed());
        let (producer, consumer) = ring(self.ring_events);
        let window = sync::Arc::new(Window::new());
        let thread = self.next_thread.fetch_add(1, Ordering::Relaxed);
        let current = std::thread::current();
        let name = match current.name() {
            Some(n) => n.to_string(),
            None => format!("{:?}", current.id()),
        };
        lock(&self.pending).push(NewRing {
            consumer,
            window: sync::Arc::clone(&window),
            thread,
            name,
        });
        Local {
            shared: Arc::clone(self),
            producer,
            window,
        }
    }

    #[cold]
    fn push_fallback(&self, event: RawEvent) {
        if !self.closing.enter_shared() {
            self.late.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut f = lock(&self.fallback);
        if f.len() < self.ring_events {
            f.push(event);
        } else {
            drop(f);
            self.late.fetch_add(1, Ordering::Relaxed);
        }
        self.closing.leave_shared();
    }

    #[cold]
    fn push_fallback_lost(&self) {
        // `try_with` failed: the event went with the closure; count it.
        self.late.fetch_add(1, Ordering::Relaxed);
    }

    /// Wakes the writer if it sleeps.
    #[cold]
    fn nudge(&self) {
        let _guard = lock(&self.control);
        self.wake.notify_one();
    }
}

#[inline]
fn push_into(l: &mut Local, event: RawEvent) {
    // Dropped (and counted) by the ring when full; the event (with its
    // backtrace, if any) is dropped here.
    let _ = l.producer.push(event);
    // Half full: make sure the writer comes soon (it may be sleeping for
    // a longer round).
    if l.producer.len_seen() == l.producer.capacity() / 2 && l.shared.sleeping.load(Ordering::Relaxed) {
        l.shared.nudge();
    }
}

/// Hands an event to `shared`, with a backtrace for an allocation when
/// `backtraces` is on.
#[inline]
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_into(
    shared: &Arc<Shared>,
    backtraces: bool,
    t_ns: u64,
    action: Action,
    device: u32,
    stream: Option<u64>,
    bytes: usize,
    addr: usize,
) {
    let backtrace = match action {
        Action::Allocate | Action::FailedAllocate if backtraces => Some(Box::new(Backtrace::force_capture())),
        _ => None,
    };
    shared.push(RawEvent {
        t_ns,
        action,
        device,
        stream,
        bytes: bytes as u64,
        addr: addr as u64,
        backtrace,
    });
}

/// Sends a marker (flush, trim, capture) to every live recorder. One
/// relaxed load when no recorder is alive.
#[inline]
pub(crate) fn note(action: Action, device: usize, stream: Option<&Stream>, bytes: usize) {
    if LIVE.load(Ordering::Relaxed) != 0 {
        note_slow(action, device, stream, bytes);
    }
}

#[cold]
fn note_slow(action: Action, device: usize, stream: Option<&Stream>, bytes: usize) {
    let live: Vec<Arc<Shared>> = lock(&REGISTRY)
        .iter()
        .filter_map(Weak::upgrade)
        .filter(|s| !s.closing.is_closed())
        .collect();
    for shared in live {
        let t_ns = shared.now_ns();
        shared.push(RawEvent {
            t_ns,
            action,
            device: device as u32,
            stream: stream.map(|s| s.as_raw() as u64),
            bytes: bytes as u64,
            addr: 0,
            backtrace: None,
        });
    }
}

/// Records allocation events into a file, from any number of threads,
/// without making them wait for the file.
///
/// Each thread that records gets a buffer of its own
/// ([`RecordOptions::buffer_events`]); a background thread takes the
/// events from every buffer every millisecond or so (sooner when a buffer
/// is half full) and writes them in the [trace format](crate::trace). A
/// thread whose buffer is full drops its next events and counts them. A
/// recorder is shared by the [`RecordingAdaptor`](crate::adaptors::RecordingAdaptor)s
/// that write into it (one per device, say), and also receives the markers
/// of every cache tier flush and trim, pool trim and capture made through
/// somalloc while it is alive ([`RecordOptions::markers`]).
///
/// The file is complete after [`finish`](Recorder::finish) (or the
/// recorder's drop); [`flush`](Recorder::flush) makes everything recorded
/// so far readable before that.
///
/// ```no_run
/// use std::sync::Arc;
/// use somalloc::adaptors::RecordingAdaptor;
/// use somalloc::trace::{RecordOptions, Recorder, Trace};
/// use somalloc::{Device, DeviceBuffer, MemPool, MemoryResource, Stream};
///
/// # fn main() -> somalloc::Result<()> {
/// let recorder = Recorder::to_file("run.trace", RecordOptions::default())?;
/// let mut resources: Vec<Arc<dyn MemoryResource>> = Vec::new();
/// for ordinal in 0..Device::count()? {
///     let pool = MemPool::default_for(&Device::get(ordinal)?)?;
///     resources.push(Arc::new(RecordingAdaptor::new(Arc::new(pool), recorder.clone())));
/// }
/// let stream = Stream::new(&Device::get(0)?)?;
/// drop(DeviceBuffer::<u8>::new_with(1 << 20, &resources[0], &stream)?);
/// let stats = recorder.finish()?;
/// assert_eq!(stats.events, 2);
/// let trace = Trace::read("run.trace")?;
/// assert_eq!(trace.events.len(), 2);
/// # Ok(()) }
/// ```
pub struct Recorder {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
    backtraces: bool,
    markers: bool,
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

fn io_error(what: String, e: &std::io::Error) -> Error {
    Error::Io {
        what,
        kind: e.kind(),
        message: e.to_string(),
    }
}

impl Recorder {
    /// Records into a new file at `path` (truncated if it exists).
    pub fn to_file(path: impl AsRef<Path>, options: RecordOptions) -> Result<Arc<Recorder>> {
        let path = path.as_ref();
        let file = File::create(path)
            .map_err(|e| io_error(format!("creating the trace file {}", path.display()), &e))?;
        Recorder::to_writer(file, options)
    }

    /// Records into `out` (a file, a socket, a `Vec<u8>` behind a lock).
    /// The writer thread owns it until the recorder finishes.
    pub fn to_writer(out: impl Write + Send + 'static, options: RecordOptions) -> Result<Arc<Recorder>> {
        let shared = Arc::new(Shared {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            clock: Clock::start(),
            ring_events: options.buffer_events.max(2),
            next_thread: AtomicU32::new(0),
            closing: Closing::new(),
            late: AtomicU64::new(0),
            pending: Mutex::new(Vec::new()),
            fallback: Mutex::new(Vec::new()),
            control: Mutex::new(Control::default()),
            wake: Condvar::new(),
            flushed: Condvar::new(),
            sleeping: AtomicBool::new(false),
            stats: Mutex::new(RecorderStats::default()),
            device_clock: options
                .device_times
                .then(|| DeviceClock::new(options.device_time_interval_ns)),
        });
        let unix_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let program = std::env::args().next().unwrap_or_default();
        let meta = vec![
            (
                "recorder".to_string(),
                format!("somalloc {}", env!("CARGO_PKG_VERSION")),
            ),
            ("backend".to_string(), crate::VENDOR.as_str().to_string()),
            ("program".to_string(), program),
            ("pid".to_string(), std::process::id().to_string()),
            ("start_unix_ns".to_string(), unix_ns.to_string()),
            ("backtraces".to_string(), options.backtraces.to_string()),
            ("markers".to_string(), options.markers.to_string()),
            ("device_times".to_string(), options.device_times.to_string()),
            (
                "device_time_interval_ns".to_string(),
                options.device_time_interval_ns.to_string(),
            ),
            (
                "clock".to_string(),
                if shared.clock.uses_tsc() {
                    "tsc"
                } else {
                    "monotonic"
                }
                .to_string(),
            ),
        ];
        let writer_shared = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("somalloc-trace".into())
            .spawn(move || writer_thread(writer_shared, Box::new(out), meta))
            .map_err(|e| io_error("starting the trace writer thread".into(), &e))?;
        if options.markers {
            let mut registry = lock(&REGISTRY);
            registry.retain(|w| w.strong_count() > 0);
            registry.push(Arc::downgrade(&shared));
            LIVE.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Arc::new(Recorder {
            shared,
            writer: Mutex::new(Some(handle)),
            backtraces: options.backtraces,
            markers: options.markers,
        }))
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Whether allocations get a backtrace ([`RecordOptions::backtraces`]).
    pub fn backtraces(&self) -> bool {
        self.backtraces
    }

    /// Whether events get device times ([`RecordOptions::device_times`]).
    pub fn device_times(&self) -> bool {
        self.shared.device_clock.is_some()
    }

    /// Gives the event just recorded at `t_ns` on `stream` (with
    /// [`record`](Recorder::record), whose `stream` must be this stream's
    /// handle) its device time: records a timing event at the current end
    /// of the stream's queue, which the writer reads once the device has
    /// passed it. Does nothing unless the recorder takes
    /// [device times](RecordOptions::device_times). Make the stream's
    /// device current first for a handle that needs it (the legacy default
    /// stream). An event of a capturing stream, or one whose timing event
    /// cannot be recorded, gets none (counted in
    /// [`RecorderStats::device_times_missed`]).
    pub fn record_device_time(&self, stream: &Stream, t_ns: u64) {
        if let Some(c) = &self.shared.device_clock {
            c.mark(stream, t_ns);
        }
    }

    /// Nanoseconds since the recording started: the time of
    /// [`record`](Recorder::record)'s events.
    pub fn now_ns(&self) -> u64 {
        self.shared.now_ns()
    }

    /// Records one event of code that allocates without a
    /// [`RecordingAdaptor`](crate::adaptors::RecordingAdaptor) (the C ABI,
    /// say), at `t_ns` from [`now_ns`](Recorder::now_ns): take an
    /// allocation's time after the allocator answered and a free's before
    /// the memory is given back, so that the trace keeps a block's frees
    /// before its next allocation. `stream` is the vendor handle
    /// (`cudaStream_t` / `hipStream_t`) as a number. An allocation (or a
    /// failed one) gets a backtrace when the recorder takes them. Never
    /// waits for the file.
    ///
    /// ```
    /// use somalloc::trace::{Action, RecordOptions, Recorder};
    /// # fn main() -> somalloc::Result<()> {
    /// # let path = std::env::temp_dir().join("somalloc-doc-record.trace");
    /// let recorder = Recorder::to_file(&path, RecordOptions::default().markers(false))?;
    /// let t = recorder.now_ns();
    /// recorder.record(t, Action::Allocate, 0, Some(0x5000), 4096, 0x7f00_0000_0000);
    /// let t = recorder.now_ns();
    /// recorder.record(t, Action::Free, 0, Some(0x5000), 4096, 0x7f00_0000_0000);
    /// assert_eq!(recorder.finish()?.events, 2);
    /// # std::fs::remove_file(&path).ok();
    /// # Ok(()) }
    /// ```
    pub fn record(
        &self,
        t_ns: u64,
        action: Action,
        device: usize,
        stream: Option<u64>,
        bytes: usize,
        addr: usize,
    ) {
        record_into(
            &self.shared,
            self.backtraces,
            t_ns,
            action,
            device as u32,
            stream,
            bytes,
            addr,
        );
    }

    /// Writes a `key = value` pair into the file's meta records (say, the
    /// pool's reserved peak of the recorded run, which the replay compares
    /// with). Written by the writer thread at its next round.
    pub fn set_meta(&self, key: &str, value: &str) {
        lock(&self.shared.control)
            .meta
            .push((key.to_string(), value.to_string()));
    }

    /// Waits until every event recorded before this call (on any thread,
    /// as far as that thread's recording happened before the call) is in
    /// the file and the file is flushed. Returns the error that stopped
    /// the writing, if any.
    pub fn flush(&self) -> Result<()> {
        let mut control = lock(&self.shared.control);
        if control.stop {
            return self.error_or_ok();
        }
        control.flush_requested += 1;
        let mine = control.flush_requested;
        self.shared.wake.notify_one();
        while control.flush_done < mine && !control.stop {
            control = self
                .shared
                .flushed
                .wait_timeout(control, Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner())
                .0;
            // A writer thread that died (it never should) answers no more.
            if lock(&self.writer).as_ref().is_none_or(|h| h.is_finished()) {
                break;
            }
        }
        drop(control);
        self.error_or_ok()
    }

    fn error_or_ok(&self) -> Result<()> {
        match &lock(&self.shared.stats).error {
            Some(e) => Err(Error::Io {
                what: "writing the trace".into(),
                kind: std::io::ErrorKind::Other,
                message: e.clone(),
            }),
            None => Ok(()),
        }
    }

    /// What was recorded so far.
    pub fn stats(&self) -> RecorderStats {
        let mut s = lock(&self.shared.stats).clone();
        s.dropped += self.shared.late.load(Ordering::Relaxed);
        if let Some(c) = &self.shared.device_clock {
            s.device_times_missed = s.device_times_missed.max(c.missed());
        }
        s
    }

    /// Stops recording: the writer takes every event recorded so far,
    /// writes the end record and closes the file. An event recorded while
    /// it runs is either written or dropped (counted), and later events are
    /// dropped (counted). Calling it again returns the same figures.
    pub fn finish(&self) -> Result<RecorderStats> {
        let handle = lock(&self.writer).take();
        if let Some(handle) = handle {
            // The writer closes the recorder in its last round.
            {
                let mut control = lock(&self.shared.control);
                control.stop = true;
                self.shared.wake.notify_one();
            }
            if handle.join().is_err() {
                lock(&self.shared.stats)
                    .error
                    .get_or_insert_with(|| "the trace writer thread panicked".into());
                // It may not have closed; later events are dropped.
                self.shared.closing.close();
            }
            if self.markers {
                LIVE.fetch_sub(1, Ordering::Relaxed);
            }
            self.shared.flushed.notify_all();
        }
        self.error_or_ok()?;
        Ok(self.stats())
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        record_drop_error(self.finish().map(|_| ()));
    }
}

// ---------------------------------------------------------------------------
// The writer thread

/// A ring the writer drains.
struct Drained {
    consumer: Consumer<RawEvent>,
    window: sync::Arc<Window>,
    thread: u32,
    /// The ring's drop count already written.
    dropped_written: u64,
}

struct Writer {
    out: Option<TraceWriter<Box<dyn Write + Send>>>,
    shared: Arc<Shared>,
    rings: Vec<Drained>,
    streams: HashMap<(u32, u64), u32>,
    /// The stream of the last event: (device, handle) and its index.
    last_stream: Option<((u32, u64), u32)>,
    backtraces: HashMap<String, u32>,
    /// Events taken from a ring, before they are written (kept to reuse
    /// its memory).
    batch: Vec<RawEvent>,
    /// Events lost because the file could not be written.
    lost: u64,
    /// Drops written into the file (all rings, the late ones included).
    dropped_written: u64,
    late_written: u64,
    /// Device times read and not yet written (kept to reuse its memory).
    reached: Vec<Reached>,
    device_times: u64,
}

impl Writer {
    /// Runs `f` on the output unless an earlier write failed; a failure is
    /// kept in the stats and ends the writing.
    fn io(&mut self, f: impl FnOnce(&mut TraceWriter<Box<dyn Write + Send>>) -> std::io::Result<()>) -> bool {
        let Some(out) = self.out.as_mut() else {
            return false;
        };
        match f(out) {
            Ok(()) => true,
            Err(e) => {
                lock(&self.shared.stats)
                    .error
                    .get_or_insert_with(|| e.to_string());
                self.out = None;
                false
            }
        }
    }

    fn take_new_rings(&mut self) {
        let new: Vec<NewRing> = std::mem::take(&mut *lock(&self.shared.pending));
        for r in new {
            self.io(|w| w.thread(r.thread, &r.name));
            self.rings.push(Drained {
                consumer: r.consumer,
                window: r.window,
                thread: r.thread,
                dropped_written: 0,
            });
        }
    }

    /// The last round's start: closes the recorder and waits for the pushes
    /// that found it open (see "Closing"), so that the drain after this
    /// gets every event not counted as dropped.
    fn close(&mut self) {
        self.shared.closing.close();
        self.take_new_rings();
        for r in &self.rings {
            r.window.wait_quiet();
        }
    }

    /// The index of stream `handle` of `device`, its record written the
    /// first time.
    fn stream_index(&mut self, device: u32, handle: u64) -> u32 {
        let key = (device, handle);
        match self.last_stream {
            // Most events are on the stream of the one before.
            Some((k, i)) if k == key => i,
            _ => {
                let next = self.streams.len() as u32;
                let index = *self.streams.entry(key).or_insert(next);
                if index == next {
                    self.io(|w| w.stream(index, device, handle));
                }
                self.last_stream = Some((key, index));
                index
            }
        }
    }

    /// Writes the device times the devices have reached.
    fn write_device_times(&mut self) -> u64 {
        let Some(clock) = &self.shared.device_clock else {
            return 0;
        };
        let mut reached = std::mem::take(&mut self.reached);
        clock.harvest(&mut reached);
        let n = reached.len() as u64;
        for r in reached.drain(..) {
            let index = self.stream_index(r.device, r.handle);
            if self.io(|w| w.device_time(index, r.t_ns, r.device_ns)) {
                self.device_times += 1;
            }
        }
        self.reached = reached;
        n
    }

    fn write_event(&mut self, thread: u32, raw: RawEvent) {
        if self.out.is_none() {
            self.lost += 1;
            return;
        }
        let mut e = Event::new(raw.t_ns, raw.action, thread, raw.device).at(raw.bytes, raw.addr);
        if let Some(handle) = raw.stream {
            e = e.on(self.stream_index(raw.device, handle));
        }
        if let Some(bt) = raw.backtrace {
            let text = clean_backtrace(&bt.to_string());
            let next = self.backtraces.len() as u32;
            let index = match self.backtraces.get(&text) {
                Some(i) => *i,
                None => {
                    self.io(|w| w.backtrace(next, &text));
                    self.backtraces.insert(text, next);
                    next
                }
            };
            e = e.with_backtrace(index);
        }
        if !self.io(|w| w.event(&e)) {
            self.lost += 1;
        }
    }

    /// Takes every published event; returns how many.
    fn drain(&mut self) -> u64 {
        self.take_new_rings();
        let mut n = 0;
        let mut i = 0;
        while i < self.rings.len() {
            // Whether the thread is gone, asked before the drain, so that
            // this drain gets its last events.
            let gone = self.rings[i].consumer.producer_gone();
            let thread = self.rings[i].thread;
            let mut batch = std::mem::take(&mut self.batch);
            n += self.rings[i].consumer.drain(|e| batch.push(e));
            for e in batch.drain(..) {
                self.write_event(thread, e);
            }
            self.batch = batch;
            let dropped = self.rings[i].consumer.dropped();
            let new = dropped - self.rings[i].dropped_written;
            if new > 0 {
                let t = self.shared.now_ns();
                self.io(|w| w.dropped(thread, new, t));
                self.rings[i].dropped_written = dropped;
                self.dropped_written += new;
            }
            if gone {
                self.rings.swap_remove(i);
            } else {
                i += 1;
            }
        }
        let fallback: Vec<RawEvent> = std::mem::take(&mut *lock(&self.shared.fallback));
        if !fallback.is_empty() {
            // Events of exiting threads: under a thread of their own.
            let thread = self.shared.next_thread.fetch_add(1, Ordering::Relaxed);
            self.io(|w| w.thread(thread, "(exiting threads)"));
            n += fallback.len() as u64;
            for e in fallback {
                self.write_event(thread, e);
            }
        }
        let late = self.shared.late.load(Ordering::Relaxed);
        if late > self.late_written {
            let t = self.shared.now_ns();
            let new = late - self.late_written;
            self.io(|w| w.dropped(u32::MAX, new, t));
            self.late_written = late;
        }
        n
    }

    fn publish_stats(&self) {
        let mut s = lock(&self.shared.stats);
        if let Some(out) = &self.out {
            s.events = out.events();
            s.bytes = out.bytes_written();
        }
        s.threads = self.shared.next_thread.load(Ordering::Relaxed);
        s.device_times = self.device_times;
        // Late drops are added by `Recorder::stats`.
        s.dropped = self.dropped_written
            + self.lost
            + self
                .rings
                .iter()
                .map(|r| r.consumer.dropped() - r.dropped_written)
                .sum::<u64>();
    }
}

fn writer_thread(shared: Arc<Shared>, out: Box<dyn Write + Send>, meta: Vec<(String, String)>) {
    let mut w = Writer {
        out: None,
        shared: Arc::clone(&shared),
        rings: Vec::new(),
        streams: HashMap::new(),
        last_stream: None,
        backtraces: HashMap::new(),
        batch: Vec::new(),
        lost: 0,
        dropped_written: 0,
        late_written: 0,
        reached: Vec::new(),
        device_times: 0,
    };
    match TraceWriter::new(out) {
        Ok(tw) => w.out = Some(tw),
        Err(e) => {
            lock(&shared.stats).error = Some(e.to_string());
        }
    }
    for (k, v) in &meta {
        w.io(|o| o.meta(k, v));
    }
    let mut idle = Duration::from_millis(1);
    loop {
        let (target, stop, meta) = {
            let mut c = lock(&shared.control);
            (c.flush_requested, c.stop, std::mem::take(&mut c.meta))
        };
        for (k, v) in &meta {
            w.io(|o| o.meta(k, v));
        }
        if stop {
            w.close();
        }
        // Events first: a device time's event is in its thread's ring
        // before the timing event is recorded.
        let n = w.drain() + w.write_device_times();
        if stop {
            if let Some(clock) = &shared.device_clock {
                let missed = clock.finish();
                lock(&shared.stats).device_times_missed = missed;
                w.io(|o| o.meta("device_times_missed", &missed.to_string()));
            }
        }
        if n > 0 || target > 0 || stop || !meta.is_empty() {
            // Hand what is written to the OS each round, so that a crash
            // loses at most the events of the last round.
            w.io(|o| o.flush());
        }
        w.publish_stats();
        if stop {
            let dropped = w.dropped_written + w.late_written + w.lost;
            if let Some(out) = w.out.take() {
                if let Err(e) = out.finish(dropped) {
                    lock(&shared.stats).error.get_or_insert_with(|| e.to_string());
                }
            }
            // The end record's bytes.
            break;
        }
        let mut c = lock(&shared.control);
        if c.flush_done < target {
            c.flush_done = target;
            shared.flushed.notify_all();
        }
        idle = if n > 0 {
            Duration::from_millis(1)
        } else {
            (idle * 2).min(Duration::from_millis(16))
        };
        if c.flush_requested == c.flush_done && !c.stop && c.meta.is_empty() {
            shared.sleeping.store(true, Ordering::Relaxed);
            c = shared
                .wake
                .wait_timeout(c, idle)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            shared.sleeping.store(false, Ordering::Relaxed);
        }
        drop(c);
    }
    let mut c = lock(&shared.control);
    c.flush_done = c.flush_requested;
    shared.flushed.notify_all();
}

/// A backtrace's text without the frames of the capture itself and of the
/// recording (the leading frames up to the last of somalloc's recording
/// frames), at most 40 frames.
pub(crate) fn clean_backtrace(text: &str) -> String {
    let mut frames: Vec<Vec<&str>> = Vec::new();
    for line in text.lines() {
        let t = line.trim_start();
        let starts_frame = t
            .split_once(": ")
            .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        match frames.last_mut() {
            Some(f) if !starts_frame => f.push(line),
            _ => frames.push(vec![line]),
        }
    }
    let internal = |f: &Vec<&str>| {
        let head = f.first().copied().unwrap_or("");
        head.contains("std::backtrace")
            || head.contains("somalloc::adaptors::record::")
            || head.contains("somalloc::trace::recorder::")
    };
    // Only the leading frames are the recorder's own (a program's own
    // frames further down may well be in somalloc).
    let skip = frames.iter().take(24).rposition(internal).map_or(0, |i| i + 1);
    frames[skip..]
        .iter()
        .take(40)
        .flatten()
        .copied()
        .collect::<Vec<_>>()
        .join("\n")
}

/// Model-checked (`ci/loom.sh`): the closing handshake ("Closing" above),
/// the real `Closing`, `Window` and ring, under every interleaving of a
/// recording thread and the writer's last round, with every load free to
/// return any store the memory model allows. Each event must be drained or
/// refused (counted), never left behind.
#[cfg(all(loom, test))]
mod models {
    use loom::thread;

    use super::{ring, Closing, Window};
    use crate::sync::{Arc, AtomicUsize, Mutex, Ordering};

    /// Two pushes into a thread's ring against the writer's close, its
    /// wait on the window and its last drain: the first push may land
    /// before, inside or after the close, the second after the writer
    /// looked at the window.
    #[test]
    fn loom_recorder_a_push_into_a_ring_is_drained_or_refused() {
        loom::model(|| {
            let closing = Arc::new(Closing::new());
            let window = Arc::new(Window::new());
            let (mut producer, mut consumer) = ring::<u64>(2);
            let writer = {
                let (closing, window) = (Arc::clone(&closing), Arc::clone(&window));
                thread::spawn(move || {
                    closing.close();
                    window.wait_quiet();
                    let mut got = 0;
                    consumer.drain(|_| got += 1);
                    got
                })
            };
            let mut refused = 0;
            for event in 0..2u64 {
                if closing.enter(&window) {
                    producer.push(event).unwrap(); // ok: a loom model (test code), two events fit
                    closing.leave(&window);
                } else {
                    refused += 1;
                }
            }
            let drained = writer.join().unwrap(); // ok: a loom model (test code), a failure is the finding
            assert_eq!(drained + refused, 2, "an event neither drained nor refused");
        });
    }

    /// A push with no ring of its own (a registration, the fallback)
    /// against the writer's close and its take of what was handed over.
    #[test]
    fn loom_recorder_a_push_without_a_ring_is_taken_or_refused() {
        loom::model(|| {
            let closing = Arc::new(Closing::new());
            let pending = Arc::new(Mutex::new(Vec::new()));
            let refused = Arc::new(AtomicUsize::new(0));
            let pushers: Vec<_> = (0..2u64)
                .map(|event| {
                    let (closing, pending, refused) =
                        (Arc::clone(&closing), Arc::clone(&pending), Arc::clone(&refused));
                    thread::spawn(move || {
                        if closing.enter_shared() {
                            pending.lock().unwrap().push(event); // ok: a loom model (test code)
                            closing.leave_shared();
                        } else {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            closing.close();
            let taken = std::mem::take(&mut *pending.lock().unwrap()).len(); // ok: a loom model (test code)
            for p in pushers {
                p.join().unwrap(); // ok: a loom model (test code), a failure is the finding
            }
            assert_eq!(
                taken + refused.load(Ordering::Relaxed),
                2,
                "a push neither taken nor refused"
            );
        });
    }
}
