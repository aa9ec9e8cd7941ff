//! What somalloc knows about stream capture below the streams themselves:
//! the capture mode and status types, what a stream's capture is for
//! somalloc's decisions (`Capturing`), how many captures begun through the
//! API are in progress, and what a stream dropped during such a capture
//! does about it. The graph module (above the streams) keeps the rest: the
//! records of each capture, the graphs, the deferred frees.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::backend::{Backend, CaptureStatus as RawStatus, RawCaptureMode};
use crate::Active;

type RawGraph = <Active as Backend>::Graph;
type RawStream = <Active as Backend>::Stream;

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
/// [`Stream::capture_status`](crate::Stream::capture_status).
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
    /// still be ended, which yields [`Error::CaptureInvalidated`](crate::Error::CaptureInvalidated).
    Invalidated,
}

impl CaptureStatus {
    pub(crate) fn from_raw(raw: RawStatus) -> CaptureStatus {
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
pub(crate) static CAPTURES: AtomicUsize = AtomicUsize::new(0);

/// Whether a capture begun through somalloc's API is in progress anywhere
/// in the process (one relaxed load).
#[inline]
pub(crate) fn captures_in_progress() -> bool {
    CAPTURES.load(Ordering::Relaxed) != 0
}

/// What a stream whose last handle goes away during a capture begun
/// through the API does: end it, destroy its graph, stop counting it. The
/// graph module installs it when it begins the first capture (only such a
/// capture sets the stream's flag that leads here).
static ABANDON: OnceLock<fn(RawStream)> = OnceLock::new();

/// Installs the graph module's `abandon_capture` (once; later calls keep it).
pub(crate) fn set_abandon(f: fn(RawStream)) {
    let _ = ABANDON.set(f);
}

/// Ends the capture of a dropped stream (see `ABANDON`).
pub(crate) fn abandon(raw: RawStream) {
    if let Some(f) = ABANDON.get() {
        f(raw);
    }
}
