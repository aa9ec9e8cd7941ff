//! Events: markers in a stream's queue, to order streams and to time work.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{RawEvent, Stream};
use crate::backend::Backend;
use crate::device::Device;
use crate::error::{record_drop_error, Error, Result};
use crate::Active;

/// The capture id an event gets when the question whether its record fell
/// into a capture failed: treated as a capture's.
const UNKNOWN_CAPTURE: u64 = u64::MAX;

/// A marker in a stream's queue; used to order streams and to time work.
#[derive(Debug)]
pub struct Event {
    pub(super) raw: RawEvent,
    device: Device,
    /// The capture the event was last recorded in (0: none).
    pub(super) capture_id: AtomicU64,
    /// Unit tests: `Some(domain)` for a fake event (see `Event::for_stream`).
    #[cfg(test)]
    pub(super) fake: Option<u64>,
}

/// Two events are equal when they are the same event (the same vendor
/// handle). Each `Event` owns its handle, so only an event compares equal
/// to itself.
impl PartialEq for Event {
    fn eq(&self, other: &Event) -> bool {
        self.raw == other.raw
    }
}

impl Eq for Event {}

/// Hashes the vendor handle, consistent with `==`.
impl std::hash::Hash for Event {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.as_raw() as usize).hash(state);
    }
}

impl Event {
    /// An event without timing (cheapest; enough for ordering).
    pub fn new(device: &Device) -> Result<Event> {
        Event::create(device, false)
    }

    /// An event that can be used with [`Event::elapsed_ms`].
    pub fn with_timing(device: &Device) -> Result<Event> {
        Event::create(device, true)
    }

    fn create(device: &Device, timing: bool) -> Result<Event> {
        Ok(Event {
            raw: Active::event_create(device.ordinal(), timing)?,
            device: *device,
            capture_id: AtomicU64::new(0),
            #[cfg(test)]
            fake: None,
        })
    }

    /// An event of `stream`'s device, with timing where `timing` is set;
    /// unit tests: a fake event for a fake stream, whose calls go through
    /// the fake runtime (failure injection included: creating, recording
    /// and waiting are `Call::Event`s of the stream's domain).
    pub(crate) fn for_stream(stream: &Stream, timing: bool) -> Result<Event> {
        #[cfg(test)]
        if let Some(domain) = stream.fake_domain() {
            crate::testing::fault_point(Some(domain), crate::testing::Call::Event)?;
            static NEXT: AtomicU64 = AtomicU64::new(0x7e00_0000);
            let id = NEXT.fetch_add(16, Ordering::Relaxed);
            return Ok(Event {
                raw: Active::event_from_raw(id as usize as *mut c_void),
                device: stream.device(),
                capture_id: AtomicU64::new(0),
                fake: Some(domain),
            });
        }
        Event::create(&stream.device(), timing)
    }

    /// Records the event at the current end of `stream`'s queue.
    ///
    /// On a capturing stream this records a point of the graph: a stream
    /// that then waits on the event joins the capture (see
    /// [`Stream::wait_event`]).
    pub fn record(&self, stream: &Stream) -> Result<()> {
        let id = stream.capturing()?.map_or(0, |c| c.id);
        #[cfg(test)]
        if let Some(domain) = self.fake.or(stream.fake_domain()) {
            crate::testing::fault_point(Some(domain), crate::testing::Call::Event)?;
            crate::testing::at_fake_record(stream);
            crate::testing::fake_event_recorded(self.as_raw() as usize, stream.as_raw() as usize);
            return self.recorded(stream, id);
        }
        Active::event_record(self.raw, stream.raw())?;
        self.recorded(stream, id)
    }

    /// Notes the capture the record just made on `stream` belongs to:
    /// `before`, what the stream said before the record, or, if it said
    /// none, what it says now. Another thread may begin a capture of the
    /// stream between that question and the record, which then makes a
    /// node of the graph instead of a point of the stream; a capture seen
    /// after the record is taken to hold it (if the record came first, the
    /// event is only refused for host queries and device waits until it is
    /// recorded again). If the question fails, the event is marked as of
    /// an unknown capture, and the error returned.
    fn recorded(&self, stream: &Stream, before: u64) -> Result<()> {
        let id = if before != 0 {
            Ok(before)
        } else {
            stream.capturing().map(|c| c.map_or(0, |c| c.id))
        };
        self.capture_id
            .store(*id.as_ref().unwrap_or(&UNKNOWN_CAPTURE), Ordering::Relaxed);
        id.map(|_| ())
    }

    /// [`Error::Capture`] if the event was last recorded during a capture
    /// (or may have been): `what` cannot use it as a point of a stream.
    pub(crate) fn refuse_if_captured(&self, what: &str) -> Result<()> {
        match self.capture_id.load(Ordering::Relaxed) {
            0 => Ok(()),
            id => Err(Error::capture(format!(
                "{what} on an event recorded in capture {id}"
            ))),
        }
    }

    /// Makes `stream` wait for this event; same as [`Stream::wait_event`].
    pub fn wait(&self, stream: &Stream) -> Result<()> {
        stream.wait_event(self)
    }

    /// Blocks until the recorded work has completed.
    ///
    /// An event last recorded during a capture marks a point of the graph,
    /// not of a stream's work: waiting for it on the host is
    /// [`Error::Capture`] (record it again outside the capture).
    pub fn synchronize(&self) -> Result<()> {
        let id = self.capture_id.load(Ordering::Relaxed);
        if id != 0 {
            return Err(Error::capture(format!(
                "host wait on an event recorded in capture {id}"
            )));
        }
        #[cfg(test)]
        if self.fake.is_some() {
            return Ok(());
        }
        Active::event_synchronize(self.raw)
    }

    /// Whether the device has finished the work enqueued before the event's
    /// last record (`cudaEventQuery` / `hipEventQuery`); an event never
    /// recorded is complete. It does not block.
    ///
    /// An event last recorded during a capture marks a point of the graph,
    /// not of a stream's work: asking is [`Error::Capture`], as for
    /// [`synchronize`](Event::synchronize).
    ///
    /// ```no_run
    /// use somalloc::{Device, Event, Stream};
    /// # fn main() -> somalloc::Result<()> {
    /// let device = Device::get(0)?;
    /// let stream = Stream::new(&device)?;
    /// let event = Event::new(&device)?;
    /// event.record(&stream)?;
    /// stream.synchronize()?;
    /// assert!(event.is_complete()?);
    /// # Ok(()) }
    /// ```
    pub fn is_complete(&self) -> Result<bool> {
        let id = self.capture_id.load(Ordering::Relaxed);
        if id != 0 {
            return Err(Error::capture(format!(
                "host query of an event recorded in capture {id}"
            )));
        }
        #[cfg(test)]
        if let Some(domain) = self.fake {
            return Ok(crate::testing::fake_events_complete(domain));
        }
        Active::event_query(self.raw)
    }

    /// Milliseconds between `self` and `end`, both made with
    /// [`Event::with_timing`], recorded, and complete.
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        #[cfg(test)]
        if self.fake.is_some() || end.fake.is_some() {
            return Ok(crate::testing::FAKE_ELAPSED_MS);
        }
        Active::event_elapsed_ms(self.raw, end.raw)
    }

    /// The device the event belongs to.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The vendor handle, still owned by this `Event`.
    pub fn as_raw(&self) -> *mut c_void {
        Active::event_as_raw(self.raw)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        #[cfg(test)]
        if self.fake.is_some() {
            return;
        }
        record_drop_error(Active::event_destroy(self.raw));
    }
}

/// `waiter` waits for everything queued so far on `target`.
pub(crate) fn order_after(waiter: &Stream, target: &Stream) -> Result<()> {
    // Unit tests: fake streams order through the fake runtime.
    #[cfg(test)]
    if let Some(domain) = waiter.fake_domain().or(target.fake_domain()) {
        crate::testing::fault_point(Some(domain), crate::testing::Call::Event)?;
        crate::testing::fake_stream_waited(waiter.as_raw() as usize, target.as_raw() as usize);
        return Ok(());
    }
    let event = Event::new(&target.device())?;
    event.record(target)?;
    waiter.wait_event(&event)
    // Destroying a recorded event is fine: the runtime keeps it until the
    // wait is satisfied.
}
