//! Frees that wait for graphs to go away: the deferred-free queue, the
//! runtime's graph-release callbacks, and the reclaim at safe points.

use super::*;

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
