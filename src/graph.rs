//! Stream capture and graphs. What the allocation paths do under capture
//! is documented for users in the crate docs (lib.rs, "Stream capture and
//! graphs").

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::backend::{Backend, CaptureStatus as RawStatus, DevicePtr, GraphMemAttr, RawCaptureMode};
use crate::device::Device;
use crate::error::{record_drop_error, Error, InvalidReason, Result, VendorCode};
use crate::stream::{capture_flag, Event, Stream};
use crate::Active;

#[cfg(doc)]
use crate::DeviceBuffer;

type RawGraph = <Active as Backend>::Graph;
type RawGraphExec = <Active as Backend>::GraphExec;
type RawStream = <Active as Backend>::Stream;

/// cudaErrorInvalidValue / hipErrorInvalidValue.
const INVALID_VALUE: i32 = 1;
/// cudaErrorStreamCaptureInvalidated / hipErrorStreamCaptureInvalidated.
const CAPTURE_INVALIDATED: i32 = 901;

/// How a capture guards against calls from other threads that the runtime
/// cannot record (`cudaStreamCaptureMode` / `hipStreamCaptureMode`).
///
/// ```
/// assert_ne!(somalloc::CaptureMode::ThreadLocal, somalloc::CaptureMode::Global);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CaptureMode {
    /// While the capture lasts, potentially unsafe calls (a synchronous
    /// allocation, say) fail on every thread that has not relaxed its own
    /// mode.
    Global,
    /// Potentially unsafe calls fail on the capturing thread only (the
    /// usual choice).
    ThreadLocal,
    /// No call is refused because of this capture.
    Relaxed,
}

impl CaptureMode {
    pub(crate) fn to_raw(self) -> RawCaptureMode {
        match self {
            CaptureMode::Global => RawCaptureMode::Global,
            CaptureMode::ThreadLocal => RawCaptureMode::ThreadLocal,
            CaptureMode::Relaxed => RawCaptureMode::Relaxed,
        }
    }
}

/// What a stream is doing with respect to capture; see
/// [`Stream::capture_status`].
///
/// ```
/// assert_eq!(somalloc::CaptureStatus::None, somalloc::CaptureStatus::default());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CaptureStatus {
    /// Not capturing: work runs.
    #[default]
    None,
    /// Capturing: work is recorded into a graph.
    Active,
    /// The capture was invalidated by a call it does not allow; it must
    /// still be ended, which yields [`Error::CaptureInvalidated`].
    Invalidated,
}

impl CaptureStatus {
    fn from_raw(raw: RawStatus) -> CaptureStatus {
        match raw {
            RawStatus::None => CaptureStatus::None,
            RawStatus::Active => CaptureStatus::Active,
            RawStatus::Invalidated => CaptureStatus::Invalidated,
        }
    }

    #[cfg(test)]
    pub(crate) fn to_raw(self) -> RawStatus {
        match self {
            CaptureStatus::None => RawStatus::None,
            CaptureStatus::Active => RawStatus::Active,
            CaptureStatus::Invalidated => RawStatus::Invalidated,
        }
    }
}

/// A capture a stream takes part in (never `CaptureStatus::None`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Capturing {
    pub status: CaptureStatus,
    pub id: u64,
    pub graph: Option<RawGraph>,
}

/// Captures begun through `Stream::begin_capture` and not ended yet.
static CAPTURES: AtomicUsize = AtomicUsize::new(0);

/// Whether a capture begun through somalloc's API is in progress anywhere
/// in the process (one relaxed load).
#[inline]
pub(crate) fn captures_in_progress() -> bool {
    CAPTURES.load(Ordering::Relaxed) != 0
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // No code panics while holding these locks; the data stays consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------------------
// What somalloc remembers about a capture begun through its API.

/// Shared by the capture, its [`Graph`], the graph's [`GraphExec`] and the
/// bookkeeping of the graph's allocations.
#[derive(Debug)]
struct CaptureRecord {
    id: u64,
    state: Mutex<RecordState>,
}

#[derive(Debug, Default)]
struct RecordState {
    /// The capture was invalidated: it made no graph, and its allocations
    /// never existed.
    invalid: bool,
    /// An executable of the graph was launched at least once.
    launched: bool,
    /// The stream of the latest launch.
    last_launch: Option<Stream>,
    /// Outputs whose buffers were dropped: each later launch allocates them
    /// again, and nobody else frees them. `true`: allocated by a launch
    /// since.
    orphans: Vec<(DevicePtr, bool)>,
}

/// Captures begun through the API, by stream handle and capture id.
static ACTIVE: Mutex<Vec<(RawStream, u64, Arc<CaptureRecord>)>> = Mutex::new(Vec::new());

fn active_record(id: u64) -> Option<Arc<CaptureRecord>> {
    lock(&ACTIVE)
        .iter()
        .find(|(_, i, _)| *i == id)
        .map(|(_, _, r)| Arc::clone(r))
}

fn take_active(raw: RawStream) -> Option<Arc<CaptureRecord>> {
    let mut active = lock(&ACTIVE);
    let at = active.iter().position(|(s, _, _)| *s == raw)?;
    Some(active.swap_remove(at).2)
}

// ---------------------------------------------------------------------------
// The vendor allocations made during captures (graph memory).

#[derive(Clone, Debug)]
struct GraphAlloc {
    /// The capture that made it.
    id: u64,
    /// `None`: a capture somalloc did not begin (whether and how often its
    /// graph is launched is unknown here).
    record: Option<Arc<CaptureRecord>>,
}

static GRAPH_ALLOCS: Mutex<Option<HashMap<usize, GraphAlloc>>> = Mutex::new(None);
/// Entries in `GRAPH_ALLOCS`: the free path looks at the map only when this
/// is not zero.
static GRAPH_ALLOCS_LEN: AtomicUsize = AtomicUsize::new(0);

/// Remembers that `ptr` was allocated on a stream in capture `c`.
pub(crate) fn note_graph_alloc(ptr: DevicePtr, c: &Capturing) {
    if c.status != CaptureStatus::Active {
        return;
    }
    let alloc = GraphAlloc {
        id: c.id,
        record: active_record(c.id),
    };
    let mut map = lock(&GRAPH_ALLOCS);
    if map
        .get_or_insert_with(HashMap::new)
        .insert(ptr.0, alloc)
        .is_none()
    {
        GRAPH_ALLOCS_LEN.fetch_add(1, Ordering::Relaxed);
    }
}

fn graph_alloc(ptr: DevicePtr) -> Option<GraphAlloc> {
    lock(&GRAPH_ALLOCS).as_ref()?.get(&ptr.0).cloned()
}

fn forget_graph_alloc(ptr: DevicePtr) {
    let mut map = lock(&GRAPH_ALLOCS);
    if map.as_mut().and_then(|m| m.remove(&ptr.0)).is_some() {
        GRAPH_ALLOCS_LEN.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether any allocation made during a capture is still remembered.
#[inline]
pub(crate) fn graph_allocs_live() -> bool {
    GRAPH_ALLOCS_LEN.load(Ordering::Relaxed) != 0
}

/// The stream-ordered free of a vendor pool allocation
/// (`cudaFreeAsync`), under the capture rules of the [module docs](self).
///
/// # Safety
/// As for `Backend::free_async`: `ptr` came from the vendor's stream-ordered
/// allocation, is freed once, and every use is ordered before this point of
/// `stream`.
#[inline]
pub(crate) unsafe fn vendor_free(ptr: DevicePtr, stream: &Stream) -> Result<()> {
    if !graph_allocs_live() && !stream.may_capture() {
        // SAFETY: the caller's guarantees.
        return unsafe { Active::free_async(ptr, stream.raw()) };
    }
    // SAFETY: the caller's guarantees.
    unsafe { vendor_free_slow(ptr, stream) }
}

#[cold]
unsafe fn vendor_free_slow(ptr: DevicePtr, stream: &Stream) -> Result<()> {
    let capture = stream.capturing()?;
    let alloc = if graph_allocs_live() {
        graph_alloc(ptr)
    } else {
        None
    };
    if let Some(c) = capture {
        match &alloc {
            Some(a) if a.id == c.id && c.status == CaptureStatus::Active => {
                forget_graph_alloc(ptr);
                // SAFETY: an allocation of this capture freed in it: a graph
                // free node (the caller's guarantees order its uses before).
                return unsafe { Active::free_async(ptr, stream.raw()) };
            }
            // An allocation of a capture that was invalidated: it never
            // existed, and the capture makes no graph.
            Some(a) if a.id == c.id => {
                forget_graph_alloc(ptr);
                return Ok(());
            }
            _ => {}
        }
        // Memory from outside this capture: the graph may use it on every
        // replay, so free it once the graph is gone.
        let item = Deferred {
            stream: stream.clone(),
            users: Vec::new(),
            // SAFETY (of the call inside): the caller's guarantees hold for
            // this free, which now only happens later, after the graph and
            // its launches are gone, on the same stream.
            free: Box::new(move |s: &Stream| unsafe { vendor_free(ptr, s) }),
        };
        return defer(item, &[c]);
    }
    match alloc {
        None => {
            // SAFETY: the caller's guarantees.
            unsafe { Active::free_async(ptr, stream.raw()) }
        }
        // SAFETY: the caller's guarantees.
        Some(a) => unsafe { free_graph_output(ptr, stream, a) },
    }
}

/// Frees, outside any capture, an allocation a capture made and did not
/// free (a graph output).
///
/// # Safety
/// As for [`vendor_free`].
unsafe fn free_graph_output(ptr: DevicePtr, stream: &Stream, alloc: GraphAlloc) -> Result<()> {
    forget_graph_alloc(ptr);
    let Some(record) = alloc.record else {
        // A graph somalloc did not make: the runtime refuses the free
        // (invalid value) exactly when no launch has allocated the memory,
        // and then there is nothing to free.
        // SAFETY: the caller's guarantees.
        return match unsafe { Active::free_async(ptr, stream.raw()) } {
            Err(Error::Vendor {
                code: VendorCode(INVALID_VALUE),
                ..
            }) => Ok(()),
            other => other,
        };
    };
    let last = {
        let mut state = lock(&record.state);
        if state.invalid {
            return Ok(());
        }
        // Later launches allocate this address again; the executable's drop
        // frees it then.
        state.orphans.push((ptr, false));
        if !state.launched {
            // Never launched: nothing was allocated.
            return Ok(());
        }
        state.last_launch.clone()
    };
    // Freed on the stream of the latest launch, after everything queued on
    // `stream` so far: later launches on that stream (which allocate the
    // address again) are then ordered after the free.
    let on = match last {
        Some(last) if !last.same_as(stream) => {
            order_after(&last, stream)?;
            last
        }
        _ => stream.clone(),
    };
    // SAFETY: the latest launch allocated it and nothing freed it since;
    // every use is ordered before this point of `stream` (the caller's
    // guarantees), and `on` waits for that point.
    unsafe { Active::free_async(ptr, on.raw()) }
}

/// `waiter` waits for everything queued so far on `target`.
fn order_after(waiter: &Stream, target: &Stream) -> Result<()> {
    let event = Event::new(&target.device())?;
    event.record(target)?;
    waiter.wait_event(&event)
}

// ---------------------------------------------------------------------------
// Frees that wait for graphs to go away.

type FreeFn = Box<dyn FnOnce(&Stream) -> Result<()> + Send>;

/// A free that must wait: until every graph that may use the memory is
/// destroyed, and until neither its stream nor the streams that used the
/// memory are capturing.
pub(crate) struct Deferred {
    /// The stream the free is enqueued on.
    pub stream: Stream,
    /// Streams whose work is ordered before the free (through events).
    pub users: Vec<Stream>,
    /// The free itself, given `stream`.
    pub free: FreeFn,
}

/// What the runtime's release callbacks hold: the free, handed to the
/// ready queue when the last graph lets go of it.
struct Slot {
    item: Mutex<Option<Deferred>>,
    /// Graphs that still hold it, plus one while it is being registered.
    holders: AtomicUsize,
}

/// Frees whose graphs are gone (or that wait only for a stream to stop
/// capturing).
static READY: Mutex<Vec<Deferred>> = Mutex::new(Vec::new());
/// `READY.len()`, readable without the lock.
static READY_LEN: AtomicUsize = AtomicUsize::new(0);
/// Deferred frees not done yet (held by graphs, or ready).
static PENDING: AtomicUsize = AtomicUsize::new(0);

fn push_ready(item: Deferred) {
    lock(&READY).push(item);
    READY_LEN.fetch_add(1, Ordering::Release);
}

/// The graph-release callback: the runtime calls it on a thread of its own
/// once the graph and its executables are gone. It only moves the free to
/// the ready queue (no runtime call, nothing dropped but a reference).
unsafe extern "C" fn release_slot(data: *mut c_void) {
    let moved = std::panic::catch_unwind(|| {
        // SAFETY: `data` is one strong reference made by `Arc::into_raw` in
        // `defer` for this callback, which the runtime calls once.
        let slot = unsafe { Arc::from_raw(data as *const Slot) };
        if slot.holders.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Some(item) = lock(&slot.item).take() {
                push_ready(item);
            }
        }
        // Not the last reference: `defer` keeps one until it returns, and
        // only then may this be the last; an empty slot drops nothing that
        // calls the runtime.
        drop(slot);
    });
    // A panic cannot cross into the runtime; the free is then leaked.
    let _ = moved;
}

/// Defers `item` until the graphs of the active captures in `captures` are
/// destroyed (an invalidated capture makes no graph: only its end is waited
/// for). On failure the memory is leaked (never freed under a graph that
/// may use it) and the error returned.
pub(crate) fn defer(item: Deferred, captures: &[Capturing]) -> Result<()> {
    PENDING.fetch_add(1, Ordering::Relaxed);
    let mut graphs: Vec<RawGraph> = Vec::new();
    for c in captures {
        if c.status != CaptureStatus::Active {
            continue;
        }
        match c.graph {
            Some(g) if !graphs.contains(&g) => graphs.push(g),
            Some(_) => {}
            None => {
                PENDING.fetch_sub(1, Ordering::Relaxed);
                return Err(Error::capture(format!(
                    "the runtime named no graph for capture {}; the free is skipped (memory leaked)",
                    c.id
                )));
            }
        }
    }
    if graphs.is_empty() {
        push_ready(item);
        return Ok(());
    }
    let slot = Arc::new(Slot {
        item: Mutex::new(Some(item)),
        holders: AtomicUsize::new(1),
    });
    let mut failure = None;
    for graph in graphs {
        slot.holders.fetch_add(1, Ordering::AcqRel);
        let data = Arc::into_raw(Arc::clone(&slot)) as *mut c_void;
        // SAFETY: `release_slot` may run once, on any thread, at any later
        // time: it only consumes the reference made here and moves the free
        // to a queue (no runtime call).
        if let Err(e) = unsafe { Active::graph_retain_release(graph, release_slot, data) } {
            // Not registered: `release_slot` is never called for it and the
            // reference is still ours (the backend's error contract). Its
            // hold is never given back: the free never becomes ready.
            // SAFETY: the reference made by `Arc::into_raw` just above,
            // which nobody else will consume.
            drop(unsafe { Arc::from_raw(data as *const Slot) });
            failure = Some(e);
            break;
        }
    }
    if let Some(e) = failure {
        // Take the free out (dropped here, not on a runtime thread): the
        // memory is leaked rather than freed under a graph.
        drop(lock(&slot.item).take());
        PENDING.fetch_sub(1, Ordering::Relaxed);
        return Err(e);
    }
    if slot.holders.fetch_sub(1, Ordering::AcqRel) == 1 {
        // Every graph let go already.
        if let Some(item) = lock(&slot.item).take() {
            push_ready(item);
        }
    }
    Ok(())
}

/// Whether a deferred free may be ready (one relaxed load).
#[inline]
pub(crate) fn frees_ready() -> bool {
    READY_LEN.load(Ordering::Relaxed) != 0
}

/// At a safe point: performs the deferred frees that are ready, recording
/// errors as drop errors.
#[inline]
pub(crate) fn reclaim_if_ready() {
    if frees_ready() {
        record_drop_error(reclaim_graph_frees().map(|_| ()));
    }
}

/// Performs the deferred frees whose graphs are gone: buffers that were
/// dropped during a capture but allocated outside it (see the
/// [stream capture docs](crate#stream-capture-and-graphs)). Each free is enqueued on its buffer's stream,
/// after the streams the buffer was used on, through its pool or resource;
/// a free whose streams are capturing right now waits for the next call.
/// Returns how many frees were enqueued; tries them all and reports the
/// first error.
///
/// somalloc calls this by itself at safe points (allocations and drops
/// through somalloc, [`Graph`] and [`GraphExec`] drops). The runtime lets
/// go of a destroyed graph a little later (a few milliseconds on CUDA), on
/// a thread of its own, so call this to reclaim the memory at a moment of
/// your choosing.
///
/// ```no_run
/// # fn main() -> somalloc::Result<()> {
/// let enqueued = somalloc::reclaim_graph_frees()?;
/// println!("{enqueued} frees enqueued, {} still waiting", somalloc::pending_graph_frees());
/// # Ok(()) }
/// ```
pub fn reclaim_graph_frees() -> Result<usize> {
    if READY_LEN.load(Ordering::Acquire) == 0 {
        return Ok(0);
    }
    let items = {
        let mut ready = lock(&READY);
        READY_LEN.fetch_sub(ready.len(), Ordering::Relaxed);
        std::mem::take(&mut *ready)
    };
    let mut done = 0;
    let mut first_error = None;
    let mut blocked = Vec::new();
    for item in items {
        match any_capturing(&item) {
            Ok(false) => {}
            Ok(true) => {
                blocked.push(item);
                continue;
            }
            Err(e) => {
                first_error.get_or_insert(e);
                blocked.push(item);
                continue;
            }
        }
        PENDING.fetch_sub(1, Ordering::Relaxed);
        done += 1;
        let Deferred { stream, users, free } = item;
        // If ordering fails the memory is leaked rather than freed under
        // running work.
        let result = users
            .iter()
            .try_for_each(|u| order_after(&stream, u))
            .and_then(|()| free(&stream));
        if let Err(e) = result {
            first_error.get_or_insert(e);
        }
    }
    if !blocked.is_empty() {
        let mut ready = lock(&READY);
        READY_LEN.fetch_add(blocked.len(), Ordering::Relaxed);
        ready.extend(blocked);
    }
    first_error.map_or(Ok(done), Err)
}

fn any_capturing(item: &Deferred) -> Result<bool> {
    for s in std::iter::once(&item.stream).chain(&item.users) {
        if s.capturing()?.is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Deferred frees not performed yet: held by graphs that still exist, or
/// ready for [`reclaim_graph_frees`].
///
/// ```
/// assert_eq!(somalloc::pending_graph_frees(), 0);
/// ```
pub fn pending_graph_frees() -> usize {
    PENDING.load(Ordering::Relaxed)
}

// ---------------------------------------------------------------------------
// Capture through the API.

impl Stream {
    /// Whether the stream is capturing, and the capture, for somalloc's
    /// decisions: `None` from relaxed loads alone for an owned stream when
    /// no capture is in progress through the API (see
    /// [Stream capture](Stream#stream-capture)); otherwise the runtime is
    /// asked. A runtime without capture calls is never capturing.
    #[inline]
    pub(crate) fn capturing(&self) -> Result<Option<Capturing>> {
        if !self.may_capture() {
            return Ok(None);
        }
        self.ask_capturing()
    }

    #[cold]
    fn ask_capturing(&self) -> Result<Option<Capturing>> {
        match self.ask_capture_info() {
            Ok(info) => match CaptureStatus::from_raw(info.status) {
                CaptureStatus::None => {
                    self.clear_capture_flag(capture_flag::MAY_HAVE_JOINED);
                    Ok(None)
                }
                status => Ok(Some(Capturing {
                    status,
                    id: info.id,
                    graph: info.graph,
                })),
            },
            Err(Error::Unsupported { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// What the stream is doing with respect to capture, as the runtime
    /// says now (it is always asked).
    ///
    /// ```no_run
    /// use somalloc::{CaptureMode, CaptureStatus, Device, Stream};
    /// # fn main() -> somalloc::Result<()> {
    /// let stream = Stream::new(&Device::get(0)?)?;
    /// assert_eq!(stream.capture_status()?, CaptureStatus::None);
    /// stream.begin_capture(CaptureMode::ThreadLocal)?;
    /// assert_eq!(stream.capture_status()?, CaptureStatus::Active);
    /// drop(stream.end_capture()?);
    /// # Ok(()) }
    /// ```
    pub fn capture_status(&self) -> Result<CaptureStatus> {
        match self.ask_capture_status() {
            Ok(RawStatus::None) => {
                self.clear_capture_flag(capture_flag::MAY_HAVE_JOINED);
                Ok(CaptureStatus::None)
            }
            Ok(raw) => Ok(CaptureStatus::from_raw(raw)),
            Err(Error::Unsupported { .. }) => Ok(CaptureStatus::None),
            Err(e) => Err(e),
        }
    }

    /// Whether the stream is in a capture (active or invalidated), as the
    /// runtime says now.
    pub fn is_capturing(&self) -> Result<bool> {
        Ok(self.capture_status()? != CaptureStatus::None)
    }

    /// Begins capturing: work enqueued on this stream (and on streams that
    /// join it through events) is recorded into a graph instead of run,
    /// until [`Stream::end_capture`].
    ///
    /// somalloc counts the captures begun here, which is how it knows,
    /// cheaply, that owned streams may be capturing; capture an owned stream
    /// only through this call. Allocations made during the capture follow
    /// the rules in the [stream capture](crate#stream-capture-and-graphs).
    ///
    /// ```no_run
    /// use somalloc::{CaptureMode, Device, Stream};
    /// # fn main() -> somalloc::Result<()> {
    /// let stream = Stream::new(&Device::get(0)?)?;
    /// stream.begin_capture(CaptureMode::ThreadLocal)?;
    /// assert!(stream.is_capturing()?);
    /// let graph = stream.end_capture()?;
    /// # drop(graph);
    /// # Ok(()) }
    /// ```
    pub fn begin_capture(&self, mode: CaptureMode) -> Result<()> {
        // Counted before the capture begins, so that no allocation on an
        // owned stream can miss it.
        CAPTURES.fetch_add(1, Ordering::SeqCst);
        self.set_capture_flag(capture_flag::API_CAPTURE);
        let undo = |e: Error| {
            self.clear_capture_flag(capture_flag::API_CAPTURE);
            CAPTURES.fetch_sub(1, Ordering::SeqCst);
            Err(e)
        };
        if let Err(e) = Active::stream_begin_capture(self.raw(), mode.to_raw()) {
            return undo(e);
        }
        match self.ask_capture_info() {
            Ok(info) if info.status != RawStatus::None => {
                let record = Arc::new(CaptureRecord {
                    id: info.id,
                    state: Mutex::new(RecordState::default()),
                });
                lock(&ACTIVE).push((self.raw(), info.id, record));
                Ok(())
            }
            other => {
                // The capture began but cannot be identified: end it again.
                if let Ok(graph) = Active::stream_end_capture(self.raw()) {
                    record_drop_error(Active::graph_destroy(graph));
                }
                undo(match other {
                    Err(e) => e,
                    Ok(_) => Error::capture("the runtime reports no capture right after it began one"),
                })
            }
        }
    }

    /// Ends the capture and returns its graph. The stream runs work again.
    ///
    /// A capture that was invalidated (by a call the capture does not
    /// allow, made through a raw handle or by another library) is ended too
    /// and reported as [`Error::CaptureInvalidated`]; the stream is then
    /// usable again. Frees that waited for the stream to leave the capture
    /// are done here.
    pub fn end_capture(&self) -> Result<Graph> {
        let before = self.ask_capturing()?;
        let api = self.take_capture_flag(capture_flag::API_CAPTURE);
        let record = if api {
            take_active(self.raw())
        } else {
            before.and_then(|c| active_record(c.id))
        };
        let result = Active::stream_end_capture(self.raw());
        let still = if result.is_err() {
            self.ask_capturing().ok().flatten()
        } else {
            None
        };
        if api {
            match (&still, &record) {
                // Still capturing (e.g. ended from the wrong thread): keep
                // counting it.
                (Some(_), Some(r)) => {
                    lock(&ACTIVE).push((self.raw(), r.id, Arc::clone(r)));
                    self.set_capture_flag(capture_flag::API_CAPTURE);
                }
                (Some(_), None) => self.set_capture_flag(capture_flag::API_CAPTURE),
                (None, _) => {
                    CAPTURES.fetch_sub(1, Ordering::SeqCst);
                }
            }
        }
        let graph = match result {
            Ok(graph) => graph,
            Err(e) => {
                let invalidated = matches!(before, Some(c) if c.status == CaptureStatus::Invalidated)
                    || matches!(
                        e,
                        Error::Vendor {
                            code: VendorCode(CAPTURE_INVALIDATED),
                            ..
                        }
                    );
                if invalidated && still.is_none() {
                    if let Some(r) = &record {
                        lock(&r.state).invalid = true;
                    }
                    reclaim_if_ready();
                    return Err(Error::CaptureInvalidated {
                        detail: e.to_string(),
                    });
                }
                return Err(e);
            }
        };
        reclaim_if_ready();
        Ok(Graph {
            raw: graph,
            device: self.device(),
            record,
            _not_sync: PhantomData,
        })
    }
}

/// The last handle of a stream went away during a capture begun through
/// the API: end it, destroy its graph, stop counting it.
pub(crate) fn abandon_capture(raw: RawStream) {
    let record = take_active(raw);
    match Active::stream_end_capture(raw) {
        Ok(graph) => record_drop_error(Active::graph_destroy(graph)),
        Err(e) => record_drop_error(Err(e)),
    }
    if let Some(r) = record {
        lock(&r.state).invalid = true;
    }
    CAPTURES.fetch_sub(1, Ordering::SeqCst);
}

// ---------------------------------------------------------------------------
// Graphs and executable graphs.

/// A graph made by [`Stream::end_capture`]. Dropping it destroys it (errors
/// are recorded in [`drop_errors`](crate::drop_errors)); executables made
/// from it stay valid.
///
/// It may be moved to another thread but not shared between threads (the
/// runtimes do not synchronise access to one graph).
///
/// ```no_run
/// use somalloc::{CaptureMode, Device, Stream};
/// # fn main() -> somalloc::Result<()> {
/// let stream = Stream::new(&Device::get(0)?)?;
/// stream.begin_capture(CaptureMode::ThreadLocal)?;
/// // ... enqueue work on `stream` ...
/// let graph = stream.end_capture()?;
/// let exec = graph.instantiate()?;
/// exec.launch(&stream)?;
/// stream.synchronize()?;
/// # Ok(()) }
/// ```
pub struct Graph {
    raw: RawGraph,
    device: Device,
    record: Option<Arc<CaptureRecord>>,
    _not_sync: PhantomData<Cell<()>>,
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph")
            .field("raw", &self.raw)
            .field("device", &self.device.ordinal())
            .finish()
    }
}

impl Graph {
    /// Makes an executable graph.
    ///
    /// Always with auto-free-on-launch (`cudaGraphInstantiateFlagAutoFreeOnLaunch`,
    /// `hipGraphInstantiateFlagAutoFreeOnLaunch`): each launch first frees
    /// the memory that the previous launch allocated and did not free (the
    /// graph's outputs). Without it, a graph with outputs could be launched
    /// again only after every output was freed, and the output buffers'
    /// drops could not know whether the memory they name is allocated. With
    /// it, an output buffer always holds the latest launch's result. A graph
    /// with memory nodes may have only one executable at a time (a second
    /// one is [`Error::Unsupported`] on CUDA); instantiate again only after
    /// the first is dropped and its outputs are dropped.
    pub fn instantiate(&self) -> Result<GraphExec> {
        let raw = Active::graph_instantiate(self.raw, true)?;
        Ok(GraphExec {
            raw,
            device: self.device,
            record: self.record.clone(),
            _not_sync: PhantomData,
        })
    }

    /// The device whose stream was captured.
    pub fn device(&self) -> Device {
        self.device
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        record_drop_error(Active::graph_destroy(self.raw));
        reclaim_if_ready();
    }
}

/// An executable graph, from [`Graph::instantiate`]. Launch it as often as
/// needed; dropping it destroys it (after freeing the outputs of its latest
/// launch whose buffers were already dropped).
///
/// It may be moved to another thread but not shared between threads.
///
/// ```no_run
/// use somalloc::{CaptureMode, Device, DeviceBuffer, Stream};
/// # fn main() -> somalloc::Result<()> {
/// let stream = Stream::new(&Device::get(0)?)?;
/// stream.begin_capture(CaptureMode::ThreadLocal)?;
/// let mut out = DeviceBuffer::<u32>::new(256, &stream)?; // a graph output
/// out.memset(7)?;
/// let exec = stream.end_capture()?.instantiate()?;
/// exec.launch(&stream)?;
/// assert_eq!(out.to_vec()?[0], 0x0707_0707); // the latest launch's result
/// exec.launch(&stream)?; // frees the previous output first, allocates it again
/// drop(out); // frees the latest launch's output on its stream
/// # Ok(()) }
/// ```
pub struct GraphExec {
    raw: RawGraphExec,
    device: Device,
    record: Option<Arc<CaptureRecord>>,
    _not_sync: PhantomData<Cell<()>>,
}

impl fmt::Debug for GraphExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphExec")
            .field("raw", &self.raw)
            .field("device", &self.device.ordinal())
            .finish()
    }
}

impl GraphExec {
    /// Enqueues one run of the graph on `stream` (of the graph's device).
    /// Work enqueued on `stream` afterwards is ordered after it.
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        self.check(stream)?;
        Active::graph_launch(self.raw, stream.raw())?;
        if let Some(record) = &self.record {
            let mut state = lock(&record.state);
            state.launched = true;
            for orphan in &mut state.orphans {
                orphan.1 = true;
            }
            let same = state.last_launch.as_ref().is_some_and(|s| s.same_as(stream));
            if !same {
                state.last_launch = Some(stream.clone());
            }
        }
        Ok(())
    }

    /// Uploads the graph to the device ahead of its first launch (on
    /// `stream`), so that the first launch is not slower than the others.
    pub fn upload(&self, stream: &Stream) -> Result<()> {
        self.check(stream)?;
        Active::graph_upload(self.raw, stream.raw())
    }

    /// The device the graph runs on.
    pub fn device(&self) -> Device {
        self.device
    }

    fn check(&self, stream: &Stream) -> Result<()> {
        if stream.device() != self.device {
            return Err(InvalidReason::WrongDevice.error(format!(
                "a graph of device {} launched on a stream of device {}",
                self.device.ordinal(),
                stream.device().ordinal()
            )));
        }
        Ok(())
    }

    /// Frees the outputs whose buffers are gone and that a launch allocated
    /// again since, on the latest launch's stream.
    fn free_orphans(&self) -> Result<()> {
        let Some(record) = &self.record else {
            return Ok(());
        };
        let (ptrs, stream) = {
            let mut state = lock(&record.state);
            let Some(stream) = state.last_launch.clone() else {
                return Ok(());
            };
            let ptrs: Vec<DevicePtr> = state
                .orphans
                .iter_mut()
                .filter(|o| o.1)
                .map(|o| {
                    o.1 = false;
                    o.0
                })
                .collect();
            (ptrs, stream)
        };
        let mut first_error = None;
        for ptr in ptrs {
            // SAFETY: the latest launch allocated `ptr` and nothing owns or
            // frees it; work that used it is the graph's, ordered before
            // this point of the launch stream.
            if let Err(e) = unsafe { vendor_free(ptr, &stream) } {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        record_drop_error(self.free_orphans());
        record_drop_error(Active::graph_exec_destroy(self.raw));
        reclaim_if_ready();
    }
}

// ---------------------------------------------------------------------------
// Graph memory of a device.

/// The device's graph memory (`cudaDeviceGetGraphMemAttribute`): what
/// graph allocation nodes use, apart from the pools. Freed graph memory
/// stays counted until [`Device::graph_mem_trim`].
///
/// Read-only: fields may be added, so it is made only by somalloc.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GraphMemStats {
    /// Bytes in use by graph allocations now.
    pub used_current: u64,
    /// Highest `used_current` since the last reset.
    pub used_high: u64,
    /// Bytes reserved for graph allocations now.
    pub reserved_current: u64,
    /// Highest `reserved_current` since the last reset.
    pub reserved_high: u64,
}

impl fmt::Display for GraphMemStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "graph memory: used {} (high {}), reserved {} (high {})",
            self.used_current, self.used_high, self.reserved_current, self.reserved_high
        )
    }
}

impl Device {
    /// The device's graph-memory counters.
    ///
    /// ```no_run
    /// # fn main() -> somalloc::Result<()> {
    /// let dev = somalloc::Device::get(0)?;
    /// println!("{}", dev.graph_mem_stats()?);
    /// # Ok(()) }
    /// ```
    pub fn graph_mem_stats(&self) -> Result<GraphMemStats> {
        let get = |a| Active::graph_mem_get(self.ordinal(), a);
        Ok(GraphMemStats {
            used_current: get(GraphMemAttr::UsedMemCurrent)?,
            used_high: get(GraphMemAttr::UsedMemHigh)?,
            reserved_current: get(GraphMemAttr::ReservedMemCurrent)?,
            reserved_high: get(GraphMemAttr::ReservedMemHigh)?,
        })
    }

    /// Returns the graph memory that no executable graph is using back to
    /// the system (`cudaDeviceGraphMemTrim`).
    ///
    /// ```no_run
    /// # fn main() -> somalloc::Result<()> {
    /// let dev = somalloc::Device::get(0)?;
    /// dev.graph_mem_trim()?;
    /// # Ok(()) }
    /// ```
    pub fn graph_mem_trim(&self) -> Result<()> {
        Active::graph_mem_trim(self.ordinal())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_streams_report_their_capture() {
        let s = Stream::fake(0x9000, 0);
        assert!(s.capturing().unwrap().is_none());
        s.set_fake_capture(CaptureStatus::Active, 42);
        let c = s.capturing().unwrap().unwrap();
        assert_eq!((c.status, c.id), (CaptureStatus::Active, 42));
        assert!(s.is_capturing().unwrap());
        s.set_fake_capture(CaptureStatus::None, 0);
        assert!(!s.is_capturing().unwrap());
    }

    #[test]
    fn a_free_deferred_without_a_graph_waits_for_its_stream() {
        let s = Stream::fake(0x9100, 0);
        s.set_fake_capture(CaptureStatus::Invalidated, 7);
        let done = Arc::new(AtomicUsize::new(0));
        let d = done.clone();
        let before = pending_graph_frees();
        defer(
            Deferred {
                stream: s.clone(),
                users: Vec::new(),
                free: Box::new(move |_| {
                    d.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }),
            },
            &[s.capturing().unwrap().unwrap()],
        )
        .unwrap();
        assert!(pending_graph_frees() > before || done.load(Ordering::Relaxed) == 1);
        // Still capturing: not done.
        reclaim_graph_frees().unwrap();
        assert_eq!(done.load(Ordering::Relaxed), 0);
        s.set_fake_capture(CaptureStatus::None, 0);
        // Other tests may drain the queue too; either way it runs once.
        let _ = reclaim_graph_frees().unwrap();
        assert_eq!(done.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn an_active_capture_without_a_graph_is_an_error_not_a_free() {
        let s = Stream::fake(0x9200, 0);
        let c = Capturing {
            status: CaptureStatus::Active,
            id: 3,
            graph: None,
        };
        let done = Arc::new(AtomicUsize::new(0));
        let d = done.clone();
        let r = defer(
            Deferred {
                stream: s,
                users: Vec::new(),
                free: Box::new(move |_| {
                    d.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }),
            },
            &[c],
        );
        assert!(matches!(r, Err(Error::Capture { .. })));
        let _ = reclaim_graph_frees();
        assert_eq!(done.load(Ordering::Relaxed), 0);
    }
}
