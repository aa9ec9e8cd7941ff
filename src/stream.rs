//! Streams and events.

use std::any::Any;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use crate::backend::{Backend, CaptureInfo};
use crate::capture::Capturing;
use crate::device::Device;
use crate::error::{record_drop_error, Error, InvalidReason, Result};
use crate::Active;

type RawStream = <Active as Backend>::Stream;
type RawEvent = <Active as Backend>::Event;
type RawGraph = <Active as Backend>::Graph;

mod event;
pub(crate) use event::order_after;
pub use event::Event;

/// Bits of `StreamInner::capture_flags`: any bit set means "ask the runtime
/// whether this stream is capturing" on capture-sensitive paths.
pub(crate) mod capture_flag {
    /// A borrowed stream: another library may capture it at any time.
    /// Cleared by [`Stream::assume_captured_only_by_somalloc`](super::Stream::assume_captured_only_by_somalloc).
    pub const ALWAYS_ASK: u8 = 1;
    /// The stream waited (through somalloc) on an event recorded during a
    /// capture, so it may have joined that capture. Cleared when the
    /// runtime next says the stream is not capturing.
    pub const MAY_HAVE_JOINED: u8 = 2;
    /// A capture was begun on it through `Stream::begin_capture` and not
    /// ended yet.
    pub const API_CAPTURE: u8 = 4;
}

/// What one call of somalloc already knows about whether its stream is
/// capturing, handed down so that an allocation or a free asks the runtime
/// at most once (the answer also goes to where the memory comes from: a
/// stream cache's upstream, the vendor pool). A type that only this crate
/// can make or name (it is an argument of hidden methods of
/// [`MemoryResource`](crate::MemoryResource)).
pub(crate) mod asked {
    use crate::capture::Capturing;

    /// See the module.
    #[derive(Clone, Copy, Debug)]
    pub struct Asked(pub(crate) Option<Option<Capturing>>);
}
pub(crate) use asked::Asked;

impl Asked {
    /// Nothing known: whoever needs the answer asks ([`Stream::capturing`]).
    pub(crate) const NOT_YET: Asked = Asked(None);

    /// The answer for the stream of this call (`None`: not capturing),
    /// just given by [`Stream::capturing`].
    #[inline]
    pub(crate) fn answer(capture: Option<Capturing>) -> Asked {
        Asked(Some(capture))
    }

    /// Whether `stream` is capturing: the answer if there is one, else
    /// [`Stream::capturing`] (which asks only where it may matter).
    #[inline]
    pub(crate) fn capturing(self, stream: &Stream) -> Result<Option<Capturing>> {
        match self.0 {
            Some(answer) => Ok(answer),
            None => stream.capturing(),
        }
    }

    /// Whether `stream` is certainly not capturing without asking: the
    /// answer says so, or nothing is known and `stream` may not be
    /// capturing ([`Stream::may_capture`]).
    #[inline]
    pub(crate) fn quiet(self, stream: &Stream) -> bool {
        match self.0 {
            Some(answer) => answer.is_none(),
            None => !stream.may_capture(),
        }
    }
}

#[derive(Debug)]
struct StreamInner {
    raw: RawStream,
    device: Device,
    owned: bool,
    /// What keeps a borrowed stream alive (e.g. cudarc's `Arc<CudaStream>`),
    /// dropped after the last use of `raw`.
    keep_alive: Option<Box<dyn Any + Send + Sync>>,
    capture_flags: AtomicU8,
    /// The cudarc handle of this stream, made on first request
    /// (`Stream::cudarc_stream`) for a stream that did not come from cudarc.
    #[cfg(feature = "cudarc")]
    pub(crate) cudarc: std::sync::OnceLock<Arc<::cudarc::driver::CudaStream>>,
    /// Unit tests: the capture state a fake stream reports, `(status, id)`.
    #[cfg(test)]
    fake_capture: std::sync::Mutex<(crate::capture::CaptureStatus, u64)>,
    /// Unit tests: `Some(domain)` for a fake stream (see `Stream::fake_in`).
    #[cfg(test)]
    fake_domain: Option<u64>,
    /// Unit tests: the runtime calls that asked about the capture state
    /// (`ask_capture_status` and `ask_capture_info`).
    #[cfg(test)]
    questions: std::sync::atomic::AtomicUsize,
    /// Unit tests: how many more capture-info queries of a fake stream
    /// answer before they fail (negative: all answer; the status query
    /// always answers).
    #[cfg(test)]
    fake_queries_ok: std::sync::atomic::AtomicI32,
}

impl StreamInner {
    fn new(
        raw: RawStream,
        device: Device,
        owned: bool,
        keep_alive: Option<Box<dyn Any + Send + Sync>>,
    ) -> StreamInner {
        StreamInner {
            raw,
            device,
            owned,
            keep_alive,
            // A borrowed stream is always asked: it may be captured by
            // whoever lent it.
            capture_flags: AtomicU8::new(if owned { 0 } else { capture_flag::ALWAYS_ASK }),
            #[cfg(feature = "cudarc")]
            cudarc: std::sync::OnceLock::new(),
            #[cfg(test)]
            fake_capture: std::sync::Mutex::new((crate::capture::CaptureStatus::None, 0)),
            #[cfg(test)]
            fake_domain: None,
            #[cfg(test)]
            questions: std::sync::atomic::AtomicUsize::new(0),
            #[cfg(test)]
            fake_queries_ok: std::sync::atomic::AtomicI32::new(-1),
        }
    }
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        if self.capture_flags.load(Ordering::Relaxed) & capture_flag::API_CAPTURE != 0 {
            // The last handle went away during a capture begun through
            // somalloc: end it and throw the graph away.
            crate::capture::abandon(self.raw);
        }
        if self.owned {
            // A cudarc handle that the program still holds keeps the
            // stream: it is destroyed once cudarc lets go of it.
            #[cfg(feature = "cudarc")]
            if let Some(handle) = self.cudarc.take() {
                if cudarc_parking::park_if_shared(self.raw, handle) {
                    return;
                }
            }
            record_drop_error(Active::stream_destroy(self.raw));
        }
    }
}

/// A GPU stream: an in-order queue of device work.
///
/// `Stream` is a cheap, cloneable handle. The underlying stream is destroyed
/// when the last clone and the last buffer that lives on it are gone, so a
/// buffer can never outlive its stream. A stream made by [`Stream::new`] is
/// non-blocking (it does not synchronise with the legacy default stream).
///
/// # Stream capture
///
/// While a stream is captured into a graph ([`Stream::begin_capture`]),
/// somalloc's allocations on it become graph memory, its caches stand
/// aside, and frees that the graph's replays would race with are deferred
/// (see the [stream capture](crate#stream-capture-and-graphs)). To keep that check cheap,
/// somalloc knows which streams may be capturing:
///
/// * a stream made by [`Stream::new`] (owned) is asked about only while a
///   capture begun through somalloc's API is in progress somewhere in the
///   process, or after it waited, through [`Stream::wait_event`], on an
///   event recorded during a capture (it may have joined it). **Capture an
///   owned stream only through [`Stream::begin_capture`]**; if another
///   library must capture it, lend that library the handle and use it in
///   somalloc as a borrowed stream ([`Stream::from_raw`]);
/// * a borrowed stream ([`Stream::from_raw`], `Stream::from_cudarc`) may
///   be captured by its owner at any time, so somalloc asks whether it is
///   capturing: once per allocation and once per free (of a buffer, of the
///   cache tier, of the pool; the answer goes along to where the memory
///   comes from), and on the calls that a capture changes ([`Event::record`],
///   [`Stream::wait_event`], [`Stream::synchronize`], host copies). On CUDA
///   the question goes to the driver (`cuStreamIsCapturing`, found through
///   the runtime; about 25 ns, with no lock shared between threads), else
///   (HIP, or a runtime that cannot give the driver's entry point) to the
///   runtime. A cached allocate + free pair then costs about two questions
///   more than on an owned stream (figures on the guide's
///   [Measured](https://github.com/somalloc/somalloc/blob/main/docs/measured.md) page);
/// * a borrowed stream whose program promised, with
///   [`Stream::assume_captured_only_by_somalloc`], that it captures the
///   stream only through [`Stream::begin_capture`] is treated as an owned
///   one.
///
/// While a capture begun through the API is in progress anywhere in the
/// process, every stream is asked (it may have joined it).
///
/// When nothing is captured, the check on an owned (or promised) stream is
/// two relaxed atomic loads.
///
/// ```no_run
/// # fn main() -> somalloc::Result<()> {
/// let dev = somalloc::Device::get(0)?;
/// let stream = somalloc::Stream::new(&dev)?;
/// stream.synchronize()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Stream {
    inner: Arc<StreamInner>,
}

/// Two handles are equal when they name the same stream (the same vendor
/// handle), whichever way they were made.
impl PartialEq for Stream {
    #[inline]
    fn eq(&self, other: &Stream) -> bool {
        self.inner.raw == other.inner.raw
    }
}

impl Eq for Stream {}

/// Hashes the vendor handle, consistent with `==`.
impl std::hash::Hash for Stream {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.as_raw() as usize).hash(state);
    }
}

impl Stream {
    /// Creates a non-blocking stream on `device`.
    pub fn new(device: &Device) -> Result<Stream> {
        #[cfg(feature = "cudarc")]
        cudarc_parking::destroy_released();
        let raw = Active::stream_create(device.ordinal())?;
        Ok(Stream {
            inner: Arc::new(StreamInner::new(raw, *device, true, None)),
        })
    }

    /// Wraps a stream made elsewhere. somalloc never destroys a borrowed
    /// stream.
    ///
    /// somalloc tells streams apart by their handle, so the three special
    /// handles that are not one stream are refused with
    /// [`Error::InvalidArgument`] before anything else happens: null (the
    /// legacy default stream), `0x1` (`cudaStreamLegacy`) and `0x2`
    /// (`cudaStreamPerThread` / `hipStreamPerThread`, a different stream on
    /// every thread). Create a stream with [`Stream::new`] instead, or, with
    /// the `cudarc` feature, wrap a stream from cudarc's `ctx.new_stream()`
    /// with `Stream::from_cudarc`; the default streams themselves are
    /// [`Stream::legacy_default`] and [`Stream::per_thread_default`].
    ///
    /// ```no_run
    /// # fn main() -> somalloc::Result<()> {
    /// let dev = somalloc::Device::get(0)?;
    /// let mine = somalloc::Stream::new(&dev)?;
    /// // SAFETY: `mine` outlives `borrowed` and every buffer allocated on it.
    /// let borrowed = unsafe { somalloc::Stream::from_raw(&dev, mine.as_raw()) }?;
    /// assert!(borrowed == mine && !borrowed.is_owned());
    /// // SAFETY: refused before the handle is used.
    /// let per_thread = unsafe { somalloc::Stream::from_raw(&dev, 0x2 as *mut std::ffi::c_void) };
    /// assert!(per_thread.is_err());
    /// # Ok(()) }
    /// ```
    ///
    /// Its owner may capture it into a graph at any time, so somalloc asks
    /// whether it is capturing on every allocation and free (once each; see
    /// [Stream capture](Stream#stream-capture)), unless the program
    /// promises that it captures the stream only through somalloc
    /// ([`Stream::assume_captured_only_by_somalloc`]).
    ///
    /// # Safety
    /// `raw` is a live stream of `device` for the vendor this crate was built
    /// for, and it stays alive until the returned `Stream`, all its clones,
    /// and every buffer allocated on it are dropped (with the `cudarc`
    /// feature: and every cudarc handle of it that somalloc handed out, by
    /// `Stream::cudarc_stream` or the `stream()` of cudarc's traits on its
    /// buffers).
    pub unsafe fn from_raw(device: &Device, raw: *mut c_void) -> Result<Stream> {
        Self::borrowed(device, raw, None)
    }

    /// The legacy default stream of `device` (the null handle; `0x1`,
    /// `cudaStreamLegacy`, names the same stream). It always exists and is
    /// never destroyed, and it cannot be captured into a graph, so somalloc
    /// treats it like a stream it made when it comes to capture checks: a
    /// cache tier serves it at the owned-stream cost. It is one stream per
    /// device, shared by every thread, so a [`CacheTier`](crate::CacheTier)
    /// (which serves one device) may cache blocks for it.
    ///
    /// ```no_run
    /// # fn main() -> somalloc::Result<()> {
    /// let dev = somalloc::Device::get(0)?;
    /// dev.bind_to_thread()?;
    /// // SAFETY: this thread keeps `dev` current while it uses the stream.
    /// let legacy = unsafe { somalloc::Stream::legacy_default(&dev) };
    /// assert!(legacy.as_raw().is_null() && !legacy.is_owned());
    /// # Ok(()) }
    /// ```
    ///
    /// # Safety
    /// The runtime reads the null handle as the legacy default stream of
    /// the *current* device: every use of the returned `Stream` (and of
    /// memory allocated or freed on it, buffers included) happens on a
    /// thread whose current device is `device`. Used with another device
    /// current, work would be ordered on that device's stream instead.
    pub unsafe fn legacy_default(device: &Device) -> Stream {
        let inner = StreamInner::new(
            Active::stream_from_raw(std::ptr::null_mut()),
            *device,
            false,
            None,
        );
        // Never captured (the runtime refuses to capture it): no question
        // to ask on capture-sensitive paths.
        inner.capture_flags.store(0, Ordering::Relaxed);
        Stream {
            inner: Arc::new(inner),
        }
    }

    /// The per-thread default stream (`cudaStreamPerThread` /
    /// `hipStreamPerThread`, handle `0x2`) of `device` for the calling
    /// thread. The handle names another stream on every thread, so no
    /// cache tier serves it ([`CacheTier::for_stream`](crate::CacheTier::for_stream)
    /// refuses it with [`InvalidReason::SpecialStreamHandle`]: a cache key
    /// must name one stream); a pool serves it as any stream. Its owner (the
    /// thread) may capture it, so it is asked about capture like a borrowed
    /// stream.
    ///
    /// # Safety
    /// Every use of the returned `Stream` (and of memory allocated or freed
    /// on it, buffers included) happens on the calling thread, with `device`
    /// current: on another thread, or with another device current, the
    /// handle names another stream and the stream order it stands for is
    /// lost.
    pub unsafe fn per_thread_default(device: &Device) -> Stream {
        Stream {
            inner: Arc::new(StreamInner::new(
                Active::stream_from_raw(PER_THREAD as *mut c_void),
                *device,
                false,
                None,
            )),
        }
    }

    /// Whether this is the per-thread default stream (a different stream on
    /// every thread).
    pub fn is_per_thread_default(&self) -> bool {
        self.as_raw() as usize == PER_THREAD
    }

    /// A borrowed stream that owns `keep_alive` (dropped with the last
    /// clone). Refuses the special handles; calls no runtime function.
    ///
    /// The caller guarantees what [`Stream::from_raw`] asks for, with
    /// `keep_alive` counting as keeping the stream alive when it does.
    pub(crate) fn borrowed(
        device: &Device,
        raw: *mut c_void,
        keep_alive: Option<Box<dyn Any + Send + Sync>>,
    ) -> Result<Stream> {
        if let Some(what) = special_handle(raw) {
            return Err(InvalidReason::SpecialStreamHandle.error(format!(
                "{what} cannot be borrowed: somalloc tells streams apart by their handle; create a \
                 stream with Stream::new, or wrap a stream from cudarc's ctx.new_stream() with \
                 Stream::from_cudarc; the default streams themselves are \
                 unsafe {{ Stream::legacy_default(&device) }} and \
                 unsafe {{ Stream::per_thread_default(&device) }} (see their safety rules)"
            )));
        }
        Ok(Stream {
            inner: Arc::new(StreamInner::new(
                Active::stream_from_raw(raw),
                *device,
                false,
                keep_alive,
            )),
        })
    }

    /// Promises that this stream is captured into a graph only through
    /// somalloc ([`Stream::begin_capture`] on a `Stream` of the same
    /// handle), or never: from now on somalloc treats it as it treats a
    /// stream it made, and a borrowed stream costs what an owned one costs
    /// (no capture question on the allocation and free paths; see
    /// [Stream capture](Stream#stream-capture)). The promise holds for this
    /// `Stream` and its clones, and for the buffers and caches made with
    /// them. On an owned stream it changes nothing (it is the contract of
    /// every owned stream already). `Stream::cudarc_stream` (feature
    /// `cudarc`) on a stream that did not come from cudarc hands cudarc a
    /// handle that can capture it, and so sets the stream back to being
    /// asked: make the promise after it, if it holds.
    ///
    /// A program that wants graphs of its cudarc (or C++) work captures on
    /// the borrowed stream through somalloc: `stream.begin_capture(..)` /
    /// `stream.end_capture()`, and cudarc's own launches on the same
    /// stream are recorded into that capture as usual.
    ///
    /// ```no_run
    /// use somalloc::{CaptureMode, Device, DeviceBuffer, Stream};
    /// # fn main() -> somalloc::Result<()> {
    /// let dev = Device::get(0)?;
    /// let theirs = Stream::new(&dev)?; // stands for a stream made elsewhere
    /// // SAFETY: `theirs` outlives `stream` and its buffers.
    /// let stream = unsafe { Stream::from_raw(&dev, theirs.as_raw()) }?;
    /// // SAFETY: this program captures the stream only through somalloc,
    /// // as below.
    /// unsafe { stream.assume_captured_only_by_somalloc() };
    /// let buf = DeviceBuffer::<f32>::new(1024, &stream)?; // no capture question
    /// stream.begin_capture(CaptureMode::ThreadLocal)?;
    /// let scratch = DeviceBuffer::<f32>::new(1024, &stream)?; // graph memory
    /// drop(scratch);
    /// let graph = stream.end_capture()?;
    /// # drop((buf, graph));
    /// # Ok(()) }
    /// ```
    ///
    /// # Safety
    ///
    /// Until this `Stream`, its clones, and every buffer and stream cache
    /// made with them are gone, no capture of the stream's handle is begun
    /// except through somalloc's [`Stream::begin_capture`]: not through
    /// cudarc (`CudaStream::begin_capture`), the runtime or driver
    /// (`cudaStreamBeginCapture`, `cuStreamBeginCapture`), another library,
    /// or by the handle joining a capture through an event wait made
    /// outside somalloc (`cudaStreamWaitEvent` on an event recorded in a
    /// capture). Waits made through [`Stream::wait_event`] are fine:
    /// somalloc sees them.
    ///
    /// What breaks otherwise: somalloc would not know that the stream is
    /// capturing, so it would treat the capture's allocations and frees as
    /// ordinary work. A cache tier would hand a cached block (memory that
    /// exists outside the graph) to the capture and later give the same
    /// block to other work while every replay of the graph still writes
    /// it; a buffer freed during the capture would be freed into the graph,
    /// so that each replay frees memory that other work may be using. Both
    /// are use-after-free on the device: silent memory corruption.
    pub unsafe fn assume_captured_only_by_somalloc(&self) {
        self.clear_capture_flag(capture_flag::ALWAYS_ASK);
    }

    /// The slot of the cudarc handle made for this stream.
    #[cfg(feature = "cudarc")]
    pub(crate) fn inner_cudarc(&self) -> &std::sync::OnceLock<Arc<::cudarc::driver::CudaStream>> {
        &self.inner.cudarc
    }

    /// What a borrowed stream keeps alive, if it is of type `K`.
    #[cfg_attr(not(feature = "cudarc"), allow(dead_code))]
    pub(crate) fn keep_alive<K: Any>(&self) -> Option<&K> {
        self.inner.keep_alive.as_ref()?.downcast_ref::<K>()
    }

    /// Blocks until all work queued on the stream has finished.
    ///
    /// A capturing stream cannot be synchronised (the runtime would
    /// invalidate the capture): that is [`Error::Capture`], and the capture
    /// goes on.
    pub fn synchronize(&self) -> Result<()> {
        if let Some(c) = self.capturing()? {
            return Err(Error::capture(format!(
                "synchronize on a stream that is capturing (capture {}); end the capture first",
                c.id
            )));
        }
        // Unit tests: a fake stream's work is done at once.
        #[cfg(test)]
        if let Some(domain) = self.fake_domain() {
            return crate::testing::fault_point(Some(domain), crate::testing::Call::Event);
        }
        Active::stream_synchronize(self.inner.raw)
    }

    /// Makes all work queued on this stream after this call wait for
    /// `event` (as last recorded) to complete.
    ///
    /// Under stream capture: waiting on an event recorded during a capture
    /// makes this stream join that capture (fork/join inside the graph; it
    /// must be joined back into the capturing stream before the capture
    /// ends). Waiting inside a capture on an event recorded outside it, or
    /// in another capture, is [`Error::Capture`] (the runtime would
    /// invalidate the capture).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        let recorded_in = event.capture_id.load(Ordering::Relaxed);
        if recorded_in != 0 || self.may_capture() {
            let mine = self.capturing()?.map(|c| c.id);
            match (recorded_in, mine) {
                (0, Some(id)) => {
                    return Err(Error::capture(format!(
                        "a stream in capture {id} cannot wait on an event recorded outside the capture"
                    )))
                }
                (theirs, Some(id)) if theirs != id => {
                    return Err(Error::capture(format!(
                        "a stream in capture {id} cannot wait on an event recorded in capture {theirs}"
                    )))
                }
                (0, None) => {}
                // Joins the capture (or is in it already).
                _ => self.set_capture_flag(capture_flag::MAY_HAVE_JOINED),
            }
        }
        #[cfg(test)]
        if let Some(domain) = event.fake.or(self.fake_domain()) {
            crate::testing::fault_point(Some(domain), crate::testing::Call::Event)?;
            crate::testing::fake_event_waited(self.as_raw() as usize, event.as_raw() as usize);
            return Ok(());
        }
        Active::stream_wait_event(self.inner.raw, event.raw)
    }

    /// The vendor handle (`cudaStream_t` / `hipStream_t`), still owned by
    /// this `Stream`.
    ///
    /// Work may be enqueued through it, but **do not capture an owned
    /// stream through the raw handle** (`cudaStreamBeginCapture` by hand or
    /// by another library): somalloc does not ask the runtime about captures
    /// on an owned stream it did not see begin, so its caches would hand
    /// memory into the graph (see [Stream capture](Stream#stream-capture)).
    /// Capture with [`Stream::begin_capture`]; to give the stream to
    /// another library that may capture it, lend a handle somalloc knows
    /// about (with the `cudarc` feature, `Stream::cudarc_stream`, after
    /// which somalloc asks), or create the stream in that library and
    /// borrow it ([`Stream::from_raw`]).
    pub fn as_raw(&self) -> *mut c_void {
        Active::stream_as_raw(self.inner.raw)
    }

    /// The device the stream belongs to.
    pub fn device(&self) -> Device {
        self.inner.device
    }

    /// Whether this stream was made by somalloc (and will be destroyed by it).
    pub fn is_owned(&self) -> bool {
        self.inner.owned
    }

    pub(crate) fn raw(&self) -> RawStream {
        self.inner.raw
    }

    /// Whether this stream may be capturing, from relaxed loads only:
    /// `false` is certain (for an owned stream captured only through
    /// somalloc's API); `true` means "ask the runtime".
    #[inline]
    pub(crate) fn may_capture(&self) -> bool {
        self.inner.capture_flags.load(Ordering::Relaxed) != 0 || crate::capture::captures_in_progress()
    }

    /// [`Stream::capturing`] for this stream's handle, asked (of this
    /// stream) when either this stream or `other`, another `Stream` of the
    /// same handle, may be capturing.
    #[inline]
    pub(crate) fn capturing_with(&self, other: &Stream) -> Result<Option<Capturing>> {
        if !self.may_capture() && !other.may_capture() {
            return Ok(None);
        }
        self.ask_capturing()
    }

    pub(crate) fn set_capture_flag(&self, bit: u8) {
        self.inner.capture_flags.fetch_or(bit, Ordering::Relaxed);
    }

    /// Clears `bit`. A load first: every answer "not capturing" clears
    /// `MAY_HAVE_JOINED`, and a read-modify-write there would cost a
    /// borrowed stream's question an atomic operation, on a cache line
    /// that its other users then lose. A set that races with the load
    /// may stay set: the stream is then asked once more, which is always
    /// allowed (a set bit only ever means "ask").
    pub(crate) fn clear_capture_flag(&self, bit: u8) {
        if self.inner.capture_flags.load(Ordering::Relaxed) & bit != 0 {
            self.inner.capture_flags.fetch_and(!bit, Ordering::Relaxed);
        }
    }

    /// Whether `bit` is set (true for the first caller that clears it with
    /// `take`).
    pub(crate) fn take_capture_flag(&self, bit: u8) -> bool {
        self.inner.capture_flags.fetch_and(!bit, Ordering::Relaxed) & bit != 0
    }

    /// The capture status, id and graph (`cuStreamGetCaptureInfo` from the
    /// driver, or the runtime's `cudaStreamGetCaptureInfo`; see the
    /// backend); unit tests: the fake stream's state.
    pub(crate) fn ask_capture_info(&self) -> Result<CaptureInfo<RawGraph>> {
        #[cfg(test)]
        self.inner.questions.fetch_add(1, Ordering::Relaxed);
        #[cfg(test)]
        if !self.inner.owned {
            crate::testing::fault_point(self.inner.fake_domain, crate::testing::Call::CaptureQuery)?;
            let ok = &self.inner.fake_queries_ok;
            if ok.load(Ordering::Relaxed) == 0 {
                return Err(Error::invalid("a fake stream's capture query fails"));
            }
            if ok.load(Ordering::Relaxed) > 0 {
                ok.fetch_sub(1, Ordering::Relaxed);
            }
            let (status, id) = *self.inner.fake_capture.lock().unwrap_or_else(|p| p.into_inner());
            return Ok(CaptureInfo {
                status: status.to_raw(),
                id,
                graph: None,
            });
        }
        Active::stream_capture_info(self.inner.raw)
    }

    /// The capture status alone, the cheaper question (`cuStreamIsCapturing`
    /// from the driver, or the runtime's `cudaStreamIsCapturing`); unit
    /// tests: the fake stream's state.
    pub(crate) fn ask_capture_status(&self) -> Result<crate::backend::CaptureStatus> {
        #[cfg(test)]
        self.inner.questions.fetch_add(1, Ordering::Relaxed);
        #[cfg(test)]
        if !self.inner.owned {
            crate::testing::fault_point(self.inner.fake_domain, crate::testing::Call::CaptureQuery)?;
            return Ok(self
                .inner
                .fake_capture
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .0
                .to_raw());
        }
        Active::stream_capture_status(self.inner.raw)
    }

    /// Unit tests: how many runtime calls asked about this stream's
    /// capture state so far (all clones together).
    #[cfg(test)]
    pub(crate) fn questions(&self) -> usize {
        self.inner.questions.load(Ordering::Relaxed)
    }

    /// Unit tests: makes a fake stream report `status` in capture `id`.
    #[cfg(test)]
    pub(crate) fn set_fake_capture(&self, status: crate::capture::CaptureStatus, id: u64) {
        *self.inner.fake_capture.lock().unwrap_or_else(|p| p.into_inner()) = (status, id);
    }

    /// Unit tests: the next `n` capture-info queries of a fake stream
    /// answer, the ones after fail (negative `n`: all answer; the status
    /// query always answers).
    #[cfg(test)]
    pub(crate) fn fail_fake_queries_after(&self, n: i32) {
        self.inner.fake_queries_ok.store(n, Ordering::Relaxed);
    }

    /// Ends a capture with the runtime; unit tests: a fake stream's end
    /// fails (it never began one with the runtime).
    pub(crate) fn end_capture_raw(&self) -> Result<RawGraph> {
        #[cfg(test)]
        if !self.inner.owned {
            return Err(Error::invalid("a fake stream's capture cannot be ended"));
        }
        Active::stream_end_capture(self.inner.raw)
    }

    /// A borrowed (never destroyed) handle with the made-up address `id`, on
    /// [`Device::fake`]`(device)`: unit tests of host-side bookkeeping (the
    /// resources, the cache tier) key on it and never give it to the runtime.
    #[cfg(test)]
    pub(crate) fn fake(id: usize, device: usize) -> Stream {
        Stream::fake_in(id, device, 0)
    }

    /// A fake stream (see [`Stream::fake`]) whose runtime calls the fake
    /// runtime may fail on purpose: those of failure-injection `domain`
    /// (see `crate::testing::arm`; 0: none).
    #[cfg(test)]
    pub(crate) fn fake_in(id: usize, device: usize, domain: u64) -> Stream {
        let mut inner = StreamInner::new(
            Active::stream_from_raw(id as *mut c_void),
            Device::fake(device),
            false,
            None,
        );
        inner.fake_domain = Some(domain);
        Stream {
            inner: Arc::new(inner),
        }
    }

    /// Unit tests: the failure-injection domain of a fake stream, `None`
    /// for a stream of the runtime.
    #[cfg(test)]
    pub(crate) fn fake_domain(&self) -> Option<u64> {
        self.inner.fake_domain
    }
}

/// The handle of the per-thread default stream, on both vendors.
pub(crate) const PER_THREAD: usize = 0x2;

/// Why `raw` cannot stand for one stream, if it cannot: the handles both
/// vendors reserve for the legacy and per-thread default streams.
pub(crate) fn special_handle(raw: *mut c_void) -> Option<&'static str> {
    match raw as usize {
        0 => Some("a null stream handle (the legacy default stream)"),
        0x1 => Some("the handle 0x1 (cudaStreamLegacy, the legacy default stream)"),
        PER_THREAD => Some(
            "the handle 0x2 (cudaStreamPerThread / hipStreamPerThread, which names another stream \
             on every thread)",
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests;

/// Owned streams whose cudarc handle outlives their last somalloc handle
/// (feature `cudarc`; see `Stream::cudarc_stream`).
#[cfg(feature = "cudarc")]
mod cudarc_parking {
    use std::sync::{Arc, Mutex, MutexGuard};

    use cudarc::driver::CudaStream;

    use super::RawStream;
    use crate::backend::Backend;
    use crate::error::record_drop_error;
    use crate::Active;

    /// Streams made by `Stream::new` whose last somalloc handle is gone while
    /// the program still holds their cudarc handle: destroyed once it does not.
    ///
    /// The argument: a stream is destroyed only after `Arc::try_unwrap` of its
    /// cudarc handle succeeded, which happens only when this list holds the one
    /// strong reference; from then on no clone exists and none can be made (a
    /// `Weak` no longer upgrades), so nothing can use the stream afterwards.
    static RELEASED: Mutex<Vec<(RawStream, Arc<CudaStream>)>> = Mutex::new(Vec::new());

    fn released() -> MutexGuard<'static, Vec<(RawStream, Arc<CudaStream>)>> {
        // No code panics while holding the lock; the list stays consistent.
        RELEASED.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// For an owned stream whose last somalloc handle is gone: `true` when the
    /// program still holds its cudarc `handle` (the stream is then kept, and
    /// destroyed by a later `destroy_released`), `false` when the stream may be
    /// destroyed now.
    pub(crate) fn park_if_shared(raw: RawStream, handle: Arc<CudaStream>) -> bool {
        match Arc::try_unwrap(handle) {
            // The wrapper never destroys the stream; the caller does.
            Ok(_unique) => false,
            Err(shared) => {
                released().push((raw, shared));
                true
            }
        }
    }

    /// Destroys the kept streams whose cudarc handles the program has let go.
    pub(crate) fn destroy_released() {
        let free = {
            let mut kept = released();
            if kept.is_empty() {
                return;
            }
            let mut free = Vec::new();
            for (raw, handle) in std::mem::take(&mut *kept) {
                match Arc::try_unwrap(handle) {
                    Ok(_unique) => free.push(raw),
                    Err(shared) => kept.push((raw, shared)),
                }
            }
            free
        };
        for raw in free {
            record_drop_error(Active::stream_destroy(raw));
        }
    }
}
