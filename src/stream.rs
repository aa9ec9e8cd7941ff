//! Streams and events.

use std::ffi::c_void;
use std::sync::Arc;

use crate::backend::Backend;
use crate::device::Device;
use crate::error::{record_drop_error, Error, Result};
use crate::Active;

type RawStream = <Active as Backend>::Stream;
type RawEvent = <Active as Backend>::Event;

#[derive(Debug)]
struct StreamInner {
    raw: RawStream,
    device: Device,
    owned: bool,
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        if self.owned {
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

impl Stream {
    /// Creates a non-blocking stream on `device`.
    pub fn new(device: &Device) -> Result<Stream> {
        let raw = Active::stream_create(device.ordinal())?;
        Ok(Stream {
            inner: Arc::new(StreamInner {
                raw,
                device: *device,
                owned: true,
            }),
        })
    }

    /// Wraps a stream made elsewhere. somalloc never destroys a borrowed
    /// stream. A null handle (the legacy default stream) is refused with
    /// [`Error::InvalidArgument`]: create a stream instead.
    ///
    /// # Safety
    /// `raw` is a live stream of `device` for the vendor this crate was built
    /// for, and it stays alive until the returned `Stream`, all its clones,
    /// and every buffer allocated on it are dropped.
    pub unsafe fn from_raw(device: &Device, raw: *mut c_void) -> Result<Stream> {
        if raw.is_null() {
            return Err(Error::invalid(
                "a null stream handle (the legacy default stream) cannot be borrowed; use Stream::new",
            ));
        }
        Ok(Stream {
            inner: Arc::new(StreamInner {
                raw: Active::stream_from_raw(raw),
                device: *device,
                owned: false,
            }),
        })
    }

    /// Blocks until all work queued on the stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        Active::stream_synchronize(self.inner.raw)
    }

    /// Makes all work queued on this stream after this call wait for
    /// `event` (as last recorded) to complete.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        Active::stream_wait_event(self.inner.raw, event.raw)
    }

    /// The vendor handle (`cudaStream_t` / `hipStream_t`), still owned by
    /// this `Stream`.
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

    /// Whether two handles name the same stream.
    pub fn same_as(&self, other: &Stream) -> bool {
        self.inner.raw == other.inner.raw
    }

    pub(crate) fn raw(&self) -> RawStream {
        self.inner.raw
    }

    /// A borrowed (never destroyed) handle with the made-up address `id`, on
    /// [`Device::fake`]`(device)`: unit tests of host-side bookkeeping (the
    /// resources, the cache tier) key on it and never give it to the runtime.
    #[cfg(test)]
    pub(crate) fn fake(id: usize, device: usize) -> Stream {
        Stream {
            inner: Arc::new(StreamInner {
                raw: Active::stream_from_raw(id as *mut c_void),
                device: Device::fake(device),
                owned: false,
            }),
        }
    }
}

/// A marker in a stream's queue; used to order streams and to time work.
#[derive(Debug)]
pub struct Event {
    raw: RawEvent,
    device: Device,
}

impl Event {
    /// An event without timing (cheapest; enough for ordering).
    pub fn new(device: &Device) -> Result<Event> {
        Ok(Event {
            raw: Active::event_create(device.ordinal(), false)?,
            device: *device,
        })
    }

    /// An event that can be used with [`Event::elapsed_ms`].
    pub fn with_timing(device: &Device) -> Result<Event> {
        Ok(Event {
            raw: Active::event_create(device.ordinal(), true)?,
            device: *device,
        })
    }

    /// Records the event at the current end of `stream`'s queue.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        Active::event_record(self.raw, stream.raw())
    }

    /// Makes `stream` wait for this event; same as [`Stream::wait_event`].
    pub fn wait(&self, stream: &Stream) -> Result<()> {
        stream.wait_event(self)
    }

    /// Blocks until the recorded work has completed.
    pub fn synchronize(&self) -> Result<()> {
        Active::event_synchronize(self.raw)
    }

    /// Milliseconds between `self` and `end`, both made with
    /// [`Event::with_timing`], recorded, and complete.
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
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
        record_drop_error(Active::event_destroy(self.raw));
    }
}
