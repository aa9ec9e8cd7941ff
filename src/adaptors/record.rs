//! Recording every allocation into a trace file.

use std::ffi::c_void;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use crate::device::Device;
use crate::error::Result;
use crate::resource::MemoryResource;
use crate::stream::Stream;
use crate::trace::recorder::{record_into, Shared};
use crate::trace::{Action, RecordOptions, Recorder};

/// Records every allocation, free and refused allocation made through it
/// into a [`Recorder`] (a trace file; see [`trace`](crate::trace) for what
/// is recorded, what it costs and the file format), and passes each call
/// on to the resource it wraps unchanged.
///
/// The recording never makes the calling thread wait for the file: each
/// thread writes into a buffer of its own that a background thread empties;
/// when a buffer is full, events are dropped and counted, not waited for.
///
/// ```no_run
/// use std::sync::Arc;
/// use somalloc::adaptors::RecordingAdaptor;
/// use somalloc::trace::RecordOptions;
/// use somalloc::{CacheConfig, CacheTier, Device, DeviceBuffer, MemPool, MemoryResource, Stream};
///
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let stream = Stream::new(&dev)?;
/// let tier = CacheTier::new(Arc::new(MemPool::default_for(&dev)?), CacheConfig::default())?;
/// // What the program asks of the tier, with backtraces.
/// let options = RecordOptions::default().backtraces(true);
/// let recording = Arc::new(RecordingAdaptor::to_file(tier.for_stream(&stream)?, "app.trace", options)?);
/// let res: Arc<dyn MemoryResource> = recording.clone();
/// let buf = DeviceBuffer::<u8>::new_with(4096, &res, &stream)?;
/// drop(buf);
/// let stats = recording.recorder().finish()?;
/// assert_eq!((stats.events, stats.dropped), (2, 0));
/// # Ok(()) }
/// ```
pub struct RecordingAdaptor {
    inner: Arc<dyn MemoryResource>,
    recorder: Arc<Recorder>,
    /// The recorder's state (a clone of the recorder's, for the hot path).
    shared: Arc<Shared>,
    device: u32,
    backtraces: bool,
}

impl fmt::Debug for RecordingAdaptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordingAdaptor")
            .field("device", &self.device)
            .field("backtraces", &self.backtraces)
            .field("recorder", &self.recorder)
            .finish_non_exhaustive()
    }
}

impl RecordingAdaptor {
    /// Records what goes through to `inner` into `recorder` (which several
    /// adaptors may share: one per device, say).
    pub fn new(inner: Arc<dyn MemoryResource>, recorder: Arc<Recorder>) -> RecordingAdaptor {
        RecordingAdaptor {
            device: inner.device().ordinal() as u32,
            backtraces: recorder.backtraces(),
            shared: Arc::clone(recorder.shared()),
            inner,
            recorder,
        }
    }

    /// Records what goes through to `inner` into a new trace file at
    /// `path`: [`Recorder::to_file`] and [`RecordingAdaptor::new`]. The
    /// file is complete when the recorder finishes: at
    /// [`Recorder::finish`], or when the adaptor (the recorder's last
    /// holder) is dropped.
    pub fn to_file(
        inner: Arc<dyn MemoryResource>,
        path: impl AsRef<Path>,
        options: RecordOptions,
    ) -> Result<RecordingAdaptor> {
        let recorder = Recorder::to_file(path, options)?;
        Ok(RecordingAdaptor::new(inner, recorder))
    }

    /// The recorder this adaptor writes into.
    pub fn recorder(&self) -> &Arc<Recorder> {
        &self.recorder
    }

    /// The wrapped resource.
    pub fn inner(&self) -> &Arc<dyn MemoryResource> {
        &self.inner
    }

    #[inline]
    fn record(&self, t_ns: u64, action: Action, stream: &Stream, bytes: usize, addr: usize) {
        let handle = Some(stream.as_raw() as u64);
        record_into(
            &self.shared,
            self.backtraces,
            t_ns,
            action,
            self.device,
            handle,
            bytes,
            addr,
        );
        if let (Some(clock), Action::Allocate | Action::Free) = (&self.shared.device_clock, action) {
            clock.mark(stream, t_ns);
        }
    }
}

// SAFETY: hands out exactly what `inner` (itself a `MemoryResource`)
// allocated and returns it to `inner` on the same streams: the contract
// carries over. Recording only reads the arguments and the results.
unsafe impl MemoryResource for RecordingAdaptor {
    #[inline]
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<*mut c_void> {
        let result = self.inner.allocate(bytes, stream);
        // After the answer: a block another thread freed just before is in
        // the trace before this allocation of it.
        let t = self.shared.now_ns();
        match &result {
            Ok(ptr) => self.record(t, Action::Allocate, stream, bytes, *ptr as usize),
            Err(_) => self.record(t, Action::FailedAllocate, stream, bytes, 0),
        }
        result
    }

    #[inline]
    unsafe fn deallocate(&self, ptr: *mut c_void, bytes: usize, stream: &Stream) -> Result<()> {
        // Before the free: no other thread can get the block back earlier.
        let t = self.shared.now_ns();
        // SAFETY: forwarded from the caller; this adaptor hands out exactly
        // what `inner` allocated.
        let result = unsafe { self.inner.deallocate(ptr, bytes, stream) };
        // A free the resource refused did not happen: not recorded.
        if result.is_ok() {
            self.record(t, Action::Free, stream, bytes, ptr as usize);
        }
        result
    }

    fn device(&self) -> Device {
        self.inner.device()
    }

    fn placement(&self) -> crate::Placement {
        self.inner.placement()
    }
}
