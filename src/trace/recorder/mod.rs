//! The recorder: a ring per recording thread, drained by one writer thread
//! that streams the events to a file.
//!
//! * this file: the public [`Recorder`] API, its options and figures, and
//!   the state the recording threads share with the writer;
//! * `push`: a recording thread's side (its rings, the push, the markers);
//! * `closing`: the handshake that closes the recorder without losing the
//!   event of a push that found it open, and its loom models;
//! * `writer`: the writer thread.

use std::backtrace::Backtrace;
use std::fmt;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::clock::Clock;
use super::device_time::DeviceClock;
use super::ring::Consumer;
use crate::error::{record_drop_error, Error, Result};
use crate::format::Action;
use crate::stream::Stream;
use crate::sync;

mod closing;
mod push;
mod writer;

use closing::{Closing, Window};
pub(crate) use push::{note, record_into};
use writer::writer_thread;

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
    /// released them (`somalloc::plan::Sharing::Device`, feature `plan`);
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
