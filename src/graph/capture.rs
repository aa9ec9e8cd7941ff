//! `Stream`'s capture methods: asking the runtime, beginning and ending a
//! capture through the API, and abandoning one when the stream goes away.

use super::*;

// ---------------------------------------------------------------------------
// Capture through the API.

impl Stream {
    /// Whether the stream is capturing, and the capture, for somalloc's
    /// decisions: `None` from relaxed loads alone for an owned (or
    /// promised) stream when no capture is in progress through the API (see
    /// [Stream capture](Stream#stream-capture)); otherwise the driver (or
    /// the runtime) is asked. A runtime without capture calls is never
    /// capturing.
    #[inline]
    pub(crate) fn capturing(&self) -> Result<Option<Capturing>> {
        if !self.may_capture() {
            return Ok(None);
        }
        self.ask_capturing()
    }

    /// One question: the capture status alone (the driver's
    /// `cuStreamIsCapturing` where the backend has it: no lock shared
    /// between threads); only a stream that is capturing is asked which
    /// capture (a second call, on the capture's own path).
    #[cold]
    pub(crate) fn ask_capturing(&self) -> Result<Option<Capturing>> {
        match self.ask_capture_status() {
            Ok(RawStatus::None) => {
                self.clear_capture_flag(capture_flag::MAY_HAVE_JOINED);
                return Ok(None);
            }
            Ok(_) => {}
            Err(Error::Unsupported { .. }) => {}
            Err(e) => return Err(e),
        }
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
        // A stream dropped during the capture ends it through this.
        crate::capture::set_abandon(abandon_capture);
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
                crate::trace::note(
                    crate::trace::Action::CaptureBegin,
                    self.device().ordinal(),
                    Some(self),
                    0,
                );
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
        let result = self.end_capture_raw();
        if result.is_ok() {
            crate::trace::note(
                crate::trace::Action::CaptureEnd,
                self.device().ordinal(),
                Some(self),
                0,
            );
        }
        // After a failed end: is the stream still capturing? `None` when
        // that cannot be known, which counts as "still capturing": owned
        // streams then keep asking the runtime (slower, never wrong) until a
        // later `end_capture` or the stream's drop settles it.
        let still: Option<Option<Capturing>> = if result.is_err() {
            self.ask_capturing().ok()
        } else {
            Some(None)
        };
        if api {
            match (&still, &record) {
                // Ended: stop counting it.
                (Some(None), _) => {
                    CAPTURES.fetch_sub(1, Ordering::SeqCst);
                }
                // Still capturing (e.g. ended from the wrong thread), or
                // unknown: keep counting it.
                (_, Some(r)) => {
                    lock(&ACTIVE).push((self.raw(), r.id, Arc::clone(r)));
                    self.set_capture_flag(capture_flag::API_CAPTURE);
                }
                (_, None) => self.set_capture_flag(capture_flag::API_CAPTURE),
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
                if invalidated && matches!(still, Some(None)) {
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
