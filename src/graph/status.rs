//! The capture mode and status types, and what a stream's capture is
//! for somalloc's decisions (`Capturing`).

use super::*;

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
    pub(super) fn from_raw(raw: RawStatus) -> CaptureStatus {
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
