//! Memory history: recording a program's allocations into a file, and
//! reading such files back (somalloc's own traces and RMM's logging-adaptor
//! CSV).
//!
//! * [`RecordingAdaptor`](crate::adaptors::RecordingAdaptor) wraps any
//!   resource and records every allocation, free and refused allocation
//!   made through it, into a [`Recorder`], which streams the events to a
//!   file from a thread of its own. The recorder also receives a marker
//!   for every cache tier flush and trim, pool trim and stream capture
//!   made through somalloc while it records.
//! * [`Trace::read`] reads a trace (either format) for replay or analysis:
//!   the benchmark's `replay` workload replays it against every allocator,
//!   and the `somalloc-trace` tool of the workspace summarises it and draws
//!   it as a web page.
//!
//! ```no_run
//! use std::sync::Arc;
//! use somalloc::adaptors::RecordingAdaptor;
//! use somalloc::trace::{RecordOptions, Trace};
//! use somalloc::{Device, DeviceBuffer, MemPool, MemoryResource, Stream};
//!
//! # fn main() -> somalloc::Result<()> {
//! let dev = Device::get(0)?;
//! let stream = Stream::new(&dev)?;
//! let pool = Arc::new(MemPool::default_for(&dev)?);
//! let recording = Arc::new(RecordingAdaptor::to_file(pool, "run.trace", RecordOptions::default())?);
//! let res: Arc<dyn MemoryResource> = recording.clone();
//! for _ in 0..10 {
//!     drop(DeviceBuffer::<f32>::new_with(1 << 20, &res, &stream)?);
//! }
//! println!("{}", recording.recorder().finish()?); // 20 events written ...
//! let trace = Trace::read("run.trace")?;
//! assert_eq!(trace.events.len(), 20);
//! # Ok(()) }
//! ```
//!
//! # What is recorded
//!
//! Each event has a time (nanoseconds since the recording started, from
//! the monotonic clock), the thread (numbered in the order threads first
//! recorded, with their names), the device, the stream (its vendor handle),
//! the action, the bytes and the address, and, when
//! [`RecordOptions::backtraces`] is on, the allocation's backtrace. An
//! allocation's time is taken when the resource has answered and a free's
//! before the resource is asked, so that a block freed by one thread and
//! handed out again to another is freed before it is allocated in the
//! trace.
//!
//! # Cost and memory
//!
//! Recording an event costs a clock read, a write into the thread's own
//! buffer, two stores to a counter of that buffer (on a cache line no other
//! thread writes), one sequentially consistent fence (a full memory
//! barrier) and a load of whether the recorder is finished: no lock, no
//! atomic read-modify-write, no system call (the
//! [Measured](https://github.com/somalloc/somalloc/blob/main/docs/measured.md) page gives the cost over the cache
//! tier). A thread's first event into a recorder also registers its
//! buffer, under a lock. An event recorded while
//! [`finish`](Recorder::finish) runs is either written or counted as
//! dropped, never lost uncounted; events recorded after it are dropped and
//! counted.
//!
//! Memory is bounded: [`RecordOptions::buffer_events`] events per recording
//! thread (56 bytes each). The writer thread takes the events every
//! millisecond or so; a thread that records faster than that until its
//! buffer is full drops its next events, never waits. Dropped events are
//! counted ([`RecorderStats::dropped`]) and the file says how many were
//! dropped and when. With backtraces on, each allocation captures its
//! backtrace (tens of microseconds) and the writer resolves the symbols.
//!
//! The clock is the processor's time-stamp counter where it runs at one
//! constant rate on every core (x86-64 with the kernel's clock source `tsc`,
//! or the CPU flags `constant_tsc` and `nonstop_tsc`), scaled to
//! nanoseconds by a rate measured over 2 ms when the recorder starts (a few
//! nanoseconds a read, against about 20 for the operating system's
//! monotonic clock); elsewhere, or with the environment variable
//! `SOMALLOC_TRACE_CLOCK=monotonic`, the monotonic clock. The file's `clock`
//! meta record says which (`tsc` or `monotonic`).
//!
//! # The file format, version 1
//!
//! A trace file is a header line and then records, all binary after the
//! header:
//!
//! ```text
//! somalloc-trace/1\n
//! record*
//! ```
//!
//! A record is `tag: u8`, `length: varint`, then `length` bytes of payload.
//! Numbers are unsigned LEB128 varints (7 bits per byte, low bits first, the
//! top bit set on every byte but the last); *zigzag* numbers are signed,
//! mapped to unsigned as `(n << 1) ^ (n >> 63)`; a string is a varint byte
//! length and UTF-8 bytes. A reader skips records of tags it does not know,
//! and ignores payload bytes after the fields it knows, so later versions
//! may add both without breaking readers of version 1; a change that
//! readers must understand raises the version in the header.
//!
//! | tag | record | payload |
//! |---|---|---|
//! | 1 | meta | key: string, value: string (e.g. `program`, `pid`, `start_unix_ns`: the wall-clock time of t = 0, `backend`, `backtraces`, `clock`, figures of the recorded run such as `pool_reserved_peak`) |
//! | 2 | thread | index: varint, name: string |
//! | 3 | stream | index: varint, device: varint, handle: varint (the vendor handle) |
//! | 4 | backtrace | index: varint, text: string |
//! | 5 | event | action: u8, thread: varint, time: zigzag, device: varint, stream: varint, bytes: varint, address: zigzag, backtrace: varint |
//! | 6 | dropped | thread: varint (`u32::MAX`: none), count: varint, time: varint (ns) |
//! | 7 | end | events: varint, dropped: varint |
//! | 8 | device time | stream: varint, time: varint (ns, the host time of the event), device time: zigzag (ns) |
//!
//! In an event, *time* is the difference to the previous event's time
//! (the first event's to 0) and *address* the difference to the previous
//! event's address; *stream* and *backtrace* are an index plus one, 0 for
//! none. The thread, stream and backtrace records of an index come before
//! the first event that names it. The actions are 1 allocate, 2 free,
//! 3 failed allocate (address 0), 4 flush (of a cache tier, or of one
//! stream's cache), 5 trim (bytes: what is kept), 6 capture begin,
//! 7 capture end.
//!
//! A device time record (written with [`RecordOptions::device_times`], some
//! time after its event) gives the event of that stream and host time the
//! time at which the device reached it in its stream's queue, in
//! nanoseconds from an origin of the stream's device (the first event the
//! device timed, or a later one that took its place: one origin per device
//! in a file); readers attach it to the event ([`Event::device_ns`]). The
//! device times come from the vendor's timing events: their resolution is
//! about half a microsecond.
//!
//! Events of different threads are not in time order in the file (the
//! writer takes each thread's events in turn); events of one thread are.
//! Readers sort by time, keeping each thread's order. A file cut short (a
//! crashed program) has no end record; everything before the cut is read.
//!
//! # RMM's logging-adaptor CSV
//!
//! [`Trace::read`] also reads the CSV that RMM's `logging_resource_adaptor`
//! writes: a header line naming the columns `Thread`, `Time`, `Action`,
//! `Pointer`, `Size` and `Stream` (in any order), then one line per event:
//! the thread id, the time of day (`HH:MM:SS.ffffff`), `allocate`, `free` or
//! `allocate failure`, the pointer and the stream in hexadecimal (with or
//! without `0x`; `(nil)` or `nullptr` for null) and the size in bytes.
//! Times are made relative to the first line (a time more than half a day
//! before the latest one is taken to be on the next day); everything is on
//! device 0.

mod clock;
pub(crate) mod device_time;
/// Moved to [`somalloc::plan`](crate::plan): the planner reads traces but is
/// no part of recording them. This path names the same items, and is kept,
/// deprecated, for one release.
///
/// ```
/// #[allow(deprecated)]
/// fn same(plan: somalloc::trace::plan::Plan) -> somalloc::plan::Plan {
///     plan
/// }
/// ```
#[cfg(feature = "plan")]
#[deprecated(note = "moved to somalloc::plan")]
pub mod plan {
    pub use crate::plan::*;
}
pub(crate) mod recorder;
mod ring;

#[cfg(test)]
mod tests;

use std::path::Path;

pub use crate::format::{
    Action, Event, FormatError, Source, StreamInfo, ThreadInfo, Trace, MAGIC, RMM_HEADER, VERSION,
};
pub(crate) use recorder::note;
pub use recorder::{RecordOptions, Recorder, RecorderStats};

use crate::error::{Error, Result};

impl Trace {
    /// Reads the trace file at `path`: somalloc's format or RMM's CSV.
    pub fn read(path: impl AsRef<Path>) -> Result<Trace> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| Error::Io {
            what: format!("reading the trace {}", path.display()),
            kind: e.kind(),
            message: e.to_string(),
        })?;
        Trace::parse(&bytes).map_err(|e| Error::Io {
            what: format!("reading the trace {}", path.display()),
            kind: std::io::ErrorKind::InvalidData,
            message: e.to_string(),
        })
    }

    /// Writes the trace in somalloc's format (version 1) to `path`: e.g. an
    /// RMM log converted.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let io = |e: std::io::Error| Error::Io {
            what: format!("writing the trace {}", path.display()),
            kind: e.kind(),
            message: e.to_string(),
        };
        let file = std::fs::File::create(path).map_err(io)?;
        crate::format::write_trace(self, file).map(drop).map_err(io)
    }
}
