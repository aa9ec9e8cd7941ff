//! [`Graph`] and [`GraphExec`]: the graph a capture makes and its
//! executables.

use super::*;

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
    pub(super) raw: RawGraph,
    pub(super) device: Device,
    pub(super) record: Option<Arc<CaptureRecord>>,
    pub(super) _not_sync: PhantomData<Cell<()>>,
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
            let same = state.last_launch.as_ref().is_some_and(|s| s == stream);
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
