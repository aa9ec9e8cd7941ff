//! The trace file: its types, its writer and its reader (the format is
//! specified in the docs of [`crate::trace`]), and the reader of RMM's
//! logging-adaptor CSV.
//!
//! This file and its children in `format/` (the writer, the reader, RMM's
//! CSV) use `std` only: the `somalloc-trace` tool compiles them into itself
//! (`#[path]`), so that the tool needs no GPU backend. The children name
//! their files with `#[path]`: without it the tool, which reads a file it
//! includes by path as a `mod.rs`, would look for them next to this file.

use std::fmt;

#[path = "format/read.rs"]
mod read;
#[path = "format/rmm.rs"]
mod rmm;
#[path = "format/write.rs"]
mod write;

pub use write::{write_trace, TraceWriter};

/// The first bytes of every trace file, followed by the version and `\n`.
pub const MAGIC: &str = "somalloc-trace/";
/// The version this code writes and reads.
pub const VERSION: u32 = 1;
/// The header line of RMM's logging-adaptor CSV.
pub const RMM_HEADER: &str = "Thread,Time,Action,Pointer,Size,Stream";

// Record tags.
const TAG_META: u8 = 1;
const TAG_THREAD: u8 = 2;
const TAG_STREAM: u8 = 3;
const TAG_BACKTRACE: u8 = 4;
const TAG_EVENT: u8 = 5;
const TAG_DROPPED: u8 = 6;
const TAG_END: u8 = 7;
const TAG_DEVICE_TIME: u8 = 8;

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Action {
    /// An allocation the resource granted: `bytes` at `addr`.
    Allocate,
    /// A free of `bytes` at `addr`.
    Free,
    /// An allocation of `bytes` the resource refused (`addr` 0).
    FailedAllocate,
    /// A cache tier returned its cached blocks (`CacheTier::flush`).
    Flush,
    /// A cache tier or a pool gave memory back, keeping `bytes`.
    Trim,
    /// A stream began a capture (through somalloc's API).
    CaptureBegin,
    /// A stream's capture ended (through somalloc's API).
    CaptureEnd,
}

impl Action {
    /// Every action, in the order of their codes (1, 2, ...).
    pub const ALL: [Action; 7] = [
        Action::Allocate,
        Action::Free,
        Action::FailedAllocate,
        Action::Flush,
        Action::Trim,
        Action::CaptureBegin,
        Action::CaptureEnd,
    ];

    /// The action's code in the file.
    pub fn code(self) -> u8 {
        match self {
            Action::Allocate => 1,
            Action::Free => 2,
            Action::FailedAllocate => 3,
            Action::Flush => 4,
            Action::Trim => 5,
            Action::CaptureBegin => 6,
            Action::CaptureEnd => 7,
        }
    }

    /// The action of a code; `None` for a code this version does not know.
    pub fn from_code(code: u8) -> Option<Action> {
        Action::ALL.get(usize::from(code).wrapping_sub(1)).copied()
    }

    /// Its name in text (the tool's output, the viewer).
    pub fn name(self) -> &'static str {
        match self {
            Action::Allocate => "allocate",
            Action::Free => "free",
            Action::FailedAllocate => "failed allocate",
            Action::Flush => "flush",
            Action::Trim => "trim",
            Action::CaptureBegin => "capture begin",
            Action::CaptureEnd => "capture end",
        }
    }
}

/// One event of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Event {
    /// Nanoseconds since the recording started (monotonic clock).
    pub t_ns: u64,
    /// What happened.
    pub action: Action,
    /// Index into [`Trace::threads`].
    pub thread: u32,
    /// The device ordinal.
    pub device: u32,
    /// Index into [`Trace::streams`]; `None` for an event of no stream
    /// (a flush of a whole tier, a trim).
    pub stream: Option<u32>,
    /// Bytes requested (allocations, frees), or kept (trim).
    pub bytes: u64,
    /// The device address (0 where there is none).
    pub addr: u64,
    /// Index into [`Trace::backtraces`], where one was recorded.
    pub backtrace: Option<u32>,
    /// When the device reached the event in its stream's queue, in
    /// nanoseconds from an origin of its device (one origin per device and
    /// file; it may come after some events, which then have negative
    /// times): recorded for allocations and frees with
    /// `RecordOptions::device_times`.
    /// An allocation's device time is when the work queued before it on
    /// its stream was done; a free's, when the work queued before the free
    /// (every use of the block) was done.
    pub device_ns: Option<i64>,
}

impl Event {
    /// An event with no stream, address or backtrace.
    pub fn new(t_ns: u64, action: Action, thread: u32, device: u32) -> Event {
        Event {
            t_ns,
            action,
            thread,
            device,
            stream: None,
            bytes: 0,
            addr: 0,
            backtrace: None,
            device_ns: None,
        }
    }

    /// With `stream` (an index into [`Trace::streams`]).
    pub fn on(mut self, stream: u32) -> Event {
        self.stream = Some(stream);
        self
    }

    /// With `bytes` at `addr`.
    pub fn at(mut self, bytes: u64, addr: u64) -> Event {
        self.bytes = bytes;
        self.addr = addr;
        self
    }

    /// With a backtrace (an index into [`Trace::backtraces`]).
    pub fn with_backtrace(mut self, index: u32) -> Event {
        self.backtrace = Some(index);
        self
    }

    /// With the time the device reached it ([`Event::device_ns`]).
    pub fn with_device_ns(mut self, device_ns: i64) -> Event {
        self.device_ns = Some(device_ns);
        self
    }
}

/// A thread that recorded events.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThreadInfo {
    /// Its name (the thread's name, or its id in an RMM log).
    pub name: String,
}

/// A stream events were recorded on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamInfo {
    /// The device ordinal.
    pub device: u32,
    /// The vendor handle (`cudaStream_t` / `hipStream_t`) as a number.
    pub handle: u64,
}

/// Where a trace came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// somalloc's trace format.
    Somalloc,
    /// RMM's logging-adaptor CSV.
    RmmCsv,
}

/// A whole trace in memory, its events in time order.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Trace {
    /// Which format it was read from.
    pub source: Source,
    /// The file's version (1 for an RMM log).
    pub version: u32,
    /// `key = value` pairs the recorder wrote (the program, the start time,
    /// figures of the recorded run), in file order.
    pub meta: Vec<(String, String)>,
    /// Threads, by index.
    pub threads: Vec<ThreadInfo>,
    /// Streams, by index.
    pub streams: Vec<StreamInfo>,
    /// Backtraces (text), by index.
    pub backtraces: Vec<String>,
    /// The events, sorted by time (events of one thread keep their order).
    pub events: Vec<Event>,
    /// Events the recorder dropped because its writer fell behind.
    pub dropped: u64,
    /// Whether the file ended with its end record (a recording that was
    /// cut short, by a crash say, has none: what is there is still read).
    pub complete: bool,
}

impl Trace {
    /// The value of a meta key, the last one written.
    pub fn meta(&self, key: &str) -> Option<&str> {
        self.meta
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Reads a trace from its bytes: somalloc's format or RMM's CSV,
    /// told apart by the first line.
    pub fn parse(bytes: &[u8]) -> Result<Trace, FormatError> {
        if bytes.starts_with(MAGIC.as_bytes()) {
            read::parse_somalloc(bytes)
        } else {
            let first = bytes.split(|b| *b == b'\n').next().unwrap_or(&[]);
            let first = String::from_utf8_lossy(first);
            let columns: Vec<&str> = first
                .trim()
                .trim_start_matches('\u{feff}')
                .split(',')
                .map(str::trim)
                .collect();
            let named = |c: &str| columns.iter().any(|x| x.eq_ignore_ascii_case(c));
            if named("Thread") && named("Action") && named("Pointer") {
                rmm::parse_rmm_csv(bytes)
            } else {
                Err(FormatError::at(
                    0,
                    format!(
                        "not a trace: the first line is neither `{MAGIC}{VERSION}` nor RMM's header `{RMM_HEADER}`"
                    ),
                ))
            }
        }
    }
}

/// Why a trace could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatError {
    /// Where: a byte offset (somalloc's format) or a line number (CSV).
    pub position: String,
    /// What was wrong.
    pub what: String,
}

impl FormatError {
    fn at(offset: usize, what: impl Into<String>) -> FormatError {
        FormatError {
            position: format!("byte {offset}"),
            what: what.into(),
        }
    }

    fn line(line: usize, what: impl Into<String>) -> FormatError {
        FormatError {
            position: format!("line {line}"),
            what: what.into(),
        }
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.position, self.what)
    }
}

impl std::error::Error for FormatError {}
