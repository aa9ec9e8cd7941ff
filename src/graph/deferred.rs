//! Frees that wait for graphs to go away: the deferred-free queue, the
//! runtime's graph-release callbacks, and the reclaim at safe points.
//!
//! Three kinds of threads meet here: the thread that frees during a capture
//! (`defer`), the runtime's own thread that destroys a graph and calls
//! `release_slot`, and any thread at a safe point (`reclaim_graph_frees`).
//! Why each free is done once, and only after every graph let go of it:
//!
//! * A free that waits for graphs sits in a [`Slot`] whose `holders` counts
//!   the graphs that retain it plus one that `defer` keeps while it
//!   registers. Each release and `defer`'s end take one away with an
//!   acquire-release decrement; the one that takes the last moves the free
//!   to the ready queue. The decrements form one release sequence, so
//!   everything each graph's release did before its decrement happens before
//!   the free is queued (and so before it is done).
//! * The slot's free is an `Option` under a mutex: moved out once, by the
//!   last holder, or by `defer` when a registration failed (then the free is
//!   dropped: memory leaked rather than freed under a graph). A graph whose
//!   registration failed never calls back, and its hold is never given
//!   back, so the free never becomes ready.
//! * The ready queue is a `Vec` under a mutex, and `ready_len` its length,
//!   changed only with the mutex held, so that a thread can look without
//!   the lock; a stale 0 only leaves a free for the next safe point.
//!
//! The model-checked test of this argument is `models.rs` (the queue fed
//! from destructor threads while another thread drains it; `ci/loom.sh`).

use super::*;
use crate::backend::GraphRelease;
use crate::sync;

// ---------------------------------------------------------------------------
// Frees that wait for graphs to go away.

/// The free; called again later when it fails (a failed call freed
/// nothing), so it must be callable more than once.
type FreeFn = Box<dyn FnMut(&Stream) -> Result<()> + Send>;

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
pub(super) struct Slot {
    item: sync::Mutex<Option<Deferred>>,
    /// Graphs that still hold it, plus one while it is being registered.
    holders: sync::AtomicUsize,
}

/// The process's deferred frees.
pub(super) struct Queue {
    /// Frees whose graphs are gone (or that wait only for a stream to stop
    /// capturing).
    pub(super) ready: sync::Mutex<Vec<Deferred>>,
    /// `ready.len()`, readable without the lock (written with it held).
    pub(super) ready_len: sync::AtomicUsize,
    /// Deferred frees not done yet (held by graphs, or ready).
    pending: sync::AtomicUsize,
}

impl Queue {
    #[cfg(not(all(loom, test)))]
    const fn new() -> Queue {
        Queue {
            ready: sync::Mutex::new(Vec::new()),
            ready_len: sync::AtomicUsize::new(0),
            pending: sync::AtomicUsize::new(0),
        }
    }

    #[cfg(all(loom, test))]
    fn new() -> Queue {
        Queue {
            ready: sync::Mutex::new(Vec::new()),
            ready_len: sync::AtomicUsize::new(0),
            pending: sync::AtomicUsize::new(0),
        }
    }

    fn push_ready(&self, item: Deferred) {
        let mut ready = lock_sync(&self.ready);
        ready.push(item);
        self.ready_len.fetch_add(1, sync::Ordering::Release);
    }
}

/// The one queue (under loom: one per modelled execution).
#[cfg(not(all(loom, test)))]
#[inline(always)]
pub(super) fn queue() -> &'static Queue {
    static QUEUE: Queue = Queue::new();
    &QUEUE
}

/// The one queue (under loom: one per modelled execution).
#[cfg(all(loom, test))]
pub(super) fn queue() -> &'static Queue {
    loom::lazy_static! {
        static ref QUEUE: Queue = Queue::new();
    }
    &QUEUE
}

fn lock_sync<T>(m: &sync::Mutex<T>) -> sync::MutexGuard<'_, T> {
    // No code panics while holding these locks; the data stays consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The graph-release callback: the runtime calls it on a thread of its own
/// once the graph and its executables are gone. It only moves the free to
/// the ready queue (no runtime call, nothing dropped but a reference).
pub(super) unsafe extern "C" fn release_slot(data: *mut c_void) {
    let release = || {
        // SAFETY: `data` is one strong reference made by `Arc::into_raw` in
        // `defer_with` for this callback, which the runtime calls once.
        let slot = unsafe { sync::Arc::from_raw(data as *const Slot) };
        if slot.holders.fetch_sub(1, sync::Ordering::AcqRel) == 1 {
            if let Some(item) = lock_sync(&slot.item).take() {
                queue().push_ready(item);
            }
        }
        // Not the last reference: `defer_with` keeps one until it returns,
        // and only then may this be the last; an empty slot drops nothing
        // that calls the runtime.
        drop(slot);
    };
    // A panic cannot cross into the runtime; the free is then leaked. (Under
    // loom a failed check must reach the model, so nothing is caught.)
    #[cfg(not(all(loom, test)))]
    let _ = std::panic::catch_unwind(release);
    #[cfg(all(loom, test))]
    release();
}

/// What a deferred free waits for: a graph of the runtime, or (unit tests)
/// a graph of the fake runtime, named by its capture's id.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Target {
    Graph(RawGraph),
    #[cfg(test)]
    Fake(u64),
}

/// Defers `item` until the graphs of the active captures in `captures` are
/// destroyed (an invalidated capture makes no graph: only its end is waited
/// for). On failure the memory is leaked (never freed under a graph that
/// may use it) and the error returned.
pub(crate) fn defer(item: Deferred, captures: &[Capturing]) -> Result<()> {
    let mut graphs: Vec<Target> = Vec::new();
    for c in captures {
        if c.status != CaptureStatus::Active {
            continue;
        }
        let target = match c.graph {
            Some(g) => Target::Graph(g),
            #[cfg(test)]
            None if crate::testing::fake_graph_exists(c.id) => Target::Fake(c.id),
            None => {
                return Err(Error::capture(format!(
                    "the runtime named no graph for capture {}; the free is skipped (memory leaked)",
                    c.id
                )));
            }
        };
        if !graphs.contains(&target) {
            graphs.push(target);
        }
    }
    defer_with(item, graphs, |target, release, data| match target {
        // SAFETY: `release` may run once, on any thread, at any later time:
        // it only consumes the reference `data` and moves the free to a
        // queue (no runtime call).
        Target::Graph(g) => unsafe { Active::graph_retain_release(g, release, data) },
        #[cfg(test)]
        Target::Fake(id) => crate::testing::fake_graph_retain(id, release, data),
    })
}

/// Defers `item` until each of `graphs` (distinct) has let go of it:
/// `register(graph, release_slot, data)` must arrange for one call of
/// `release_slot(data)` once the graph is gone, or fail without ever making
/// it (the reference `data` then stays the caller's).
pub(super) fn defer_with<G>(
    item: Deferred,
    graphs: Vec<G>,
    mut register: impl FnMut(G, GraphRelease, *mut c_void) -> Result<()>,
) -> Result<()> {
    let queue = queue();
    queue.pending.fetch_add(1, sync::Ordering::Relaxed);
    if graphs.is_empty() {
        queue.push_ready(item);
        return Ok(());
    }
    let slot = sync::Arc::new(Slot {
        item: sync::Mutex::new(Some(item)),
        holders: sync::AtomicUsize::new(1),
    });
    let mut failure = None;
    for graph in graphs {
        slot.holders.fetch_add(1, sync::Ordering::AcqRel);
        let data = sync::Arc::into_raw(sync::Arc::clone(&slot)) as *mut c_void;
        if let Err(e) = register(graph, release_slot, data) {
            // Not registered: `release_slot` is never called for it and the
            // reference is still ours (the backend's error contract). Its
            // hold is never given back: the free never becomes ready.
            // SAFETY: the reference made by `Arc::into_raw` just above,
            // which nobody else will consume.
            drop(unsafe { sync::Arc::from_raw(data as *const Slot) });
            failure = Some(e);
            break;
        }
    }
    if let Some(e) = failure {
        // Take the free out (dropped here, not on a runtime thread): the
        // memory is leaked rather than freed under a graph.
        drop(lock_sync(&slot.item).take());
        queue.pending.fetch_sub(1, sync::Ordering::Relaxed);
        return Err(e);
    }
    if slot.holders.fetch_sub(1, sync::Ordering::AcqRel) == 1 {
        // Every graph let go already.
        if let Some(item) = lock_sync(&slot.item).take() {
            queue.push_ready(item);
        }
    }
    Ok(())
}

/// Whether a deferred free may be ready (one relaxed load).
#[inline]
pub(crate) fn frees_ready() -> bool {
    queue().ready_len.load(sync::Ordering::Relaxed) != 0
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
    let queue = queue();
    if queue.ready_len.load(sync::Ordering::Acquire) == 0 {
        return Ok(0);
    }
    let items = {
        let mut ready = lock_sync(&queue.ready);
        queue.ready_len.fetch_sub(ready.len(), sync::Ordering::Relaxed);
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
        // If ordering fails nothing is freed (never under running work);
        // if the free fails, it freed nothing. Either way the item stays
        // queued and is tried again at the next reclaim: nothing is lost.
        let mut item = item;
        let result = item
            .users
            .iter()
            .try_for_each(|u| order_after(&item.stream, u))
            .and_then(|()| (item.free)(&item.stream));
        match result {
            Ok(()) => {
                queue.pending.fetch_sub(1, sync::Ordering::Relaxed);
                done += 1;
            }
            Err(e) => {
                first_error.get_or_insert(e);
                blocked.push(item);
            }
        }
    }
    if !blocked.is_empty() {
        let mut ready = lock_sync(&queue.ready);
        queue.ready_len.fetch_add(blocked.len(), sync::Ordering::Relaxed);
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
    queue().pending.load(sync::Ordering::Relaxed)
}
