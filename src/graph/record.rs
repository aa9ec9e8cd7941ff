//! The process-wide capture knowledge: what somalloc remembers about each
//! capture begun through the API, and which vendor allocations were made
//! during a capture (graph memory). How many are in progress is counted in
//! `crate::capture`.

use super::*;

// ---------------------------------------------------------------------------
// What somalloc remembers about a capture begun through its API.

/// Shared by the capture, its [`Graph`], the graph's [`GraphExec`] and the
/// bookkeeping of the graph's allocations.
#[derive(Debug)]
pub(super) struct CaptureRecord {
    pub(super) id: u64,
    pub(super) state: Mutex<RecordState>,
}

#[derive(Debug, Default)]
pub(super) struct RecordState {
    /// The capture was invalidated: it made no graph, and its allocations
    /// never existed.
    pub(super) invalid: bool,
    /// An executable of the graph was launched at least once.
    pub(super) launched: bool,
    /// The stream of the latest launch.
    pub(super) last_launch: Option<Stream>,
    /// Outputs whose buffers were dropped: each later launch allocates them
    /// again, and nobody else frees them. `true`: allocated by a launch
    /// since.
    pub(super) orphans: Vec<(DevicePtr, bool)>,
}

/// Captures begun through the API, by stream handle and capture id.
pub(super) static ACTIVE: Mutex<Vec<(RawStream, u64, Arc<CaptureRecord>)>> = Mutex::new(Vec::new());

pub(super) fn active_record(id: u64) -> Option<Arc<CaptureRecord>> {
    lock(&ACTIVE)
        .iter()
        .find(|(_, i, _)| *i == id)
        .map(|(_, _, r)| Arc::clone(r))
}

pub(super) fn take_active(raw: RawStream) -> Option<Arc<CaptureRecord>> {
    let mut active = lock(&ACTIVE);
    let at = active.iter().position(|(s, _, _)| *s == raw)?;
    Some(active.swap_remove(at).2)
}

// ---------------------------------------------------------------------------
// The vendor allocations made during captures (graph memory).

#[derive(Clone, Debug)]
pub(super) struct GraphAlloc {
    /// The capture that made it.
    pub(super) id: u64,
    /// `None`: a capture somalloc did not begin (whether and how often its
    /// graph is launched is unknown here).
    pub(super) record: Option<Arc<CaptureRecord>>,
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

pub(super) fn graph_alloc(ptr: DevicePtr) -> Option<GraphAlloc> {
    lock(&GRAPH_ALLOCS).as_ref()?.get(&ptr.0).cloned()
}

pub(super) fn forget_graph_alloc(ptr: DevicePtr) {
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
