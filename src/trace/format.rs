//! The trace file: its types, its writer and its reader (the format is
//! specified in the docs of [`crate::trace`]), and the reader of RMM's
//! logging-adaptor CSV.
//!
//! This file uses `std` only: the `somalloc-trace` tool compiles it into
//! itself (`#[path]`), so that the tool needs no GPU backend.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Write};

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
            parse_somalloc(bytes)
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
                parse_rmm_csv(bytes)
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

// ---------------------------------------------------------------------------
// Varints

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// A cursor over a record's payload.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// The payload's offset in the file, for errors.
    base: usize,
}

impl<'a> Cursor<'a> {
    fn err(&self, what: &str) -> FormatError {
        FormatError::at(self.base + self.pos, what)
    }

    fn u8(&mut self) -> Result<u8, FormatError> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or_else(|| self.err("record too short"))?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, FormatError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.err("a varint longer than 64 bits"))
    }

    fn u32(&mut self) -> Result<u32, FormatError> {
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| self.err("a number above u32::MAX"))
    }

    fn str(&mut self) -> Result<String, FormatError> {
        let len = self.varint()? as usize;
        let end = self
            .pos
            .checked_add(len)
            .filter(|e| *e <= self.bytes.len())
            .ok_or_else(|| self.err("a string longer than its record"))?;
        let s = std::str::from_utf8(&self.bytes[self.pos..end])
            .map_err(|_| self.err("a string that is not UTF-8"))?;
        self.pos = end;
        Ok(s.to_string())
    }

    fn done(&self) -> bool {
        self.pos >= self.bytes.len()
    }
}

// ---------------------------------------------------------------------------
// Writer

/// Writes a trace file record by record. Event times and addresses are
/// written as differences to the previous event's, so events need not come
/// in time order (the reader sorts them).
pub struct TraceWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
    record: Vec<u8>,
    last_t: u64,
    last_addr: u64,
    events: u64,
    written: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the header line to `out`.
    pub fn new(mut out: W) -> io::Result<TraceWriter<W>> {
        let header = format!("{MAGIC}{VERSION}\n");
        out.write_all(header.as_bytes())?;
        Ok(TraceWriter {
            out,
            buf: Vec::with_capacity(64 << 10),
            record: Vec::with_capacity(256),
            last_t: 0,
            last_addr: 0,
            events: 0,
            written: header.len() as u64,
        })
    }

    fn emit(&mut self, tag: u8) -> io::Result<()> {
        self.buf.push(tag);
        put_varint(&mut self.buf, self.record.len() as u64);
        self.buf.extend_from_slice(&self.record);
        self.record.clear();
        if self.buf.len() >= 60 << 10 {
            self.drain()?;
        }
        Ok(())
    }

    fn drain(&mut self) -> io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// A `key = value` pair.
    pub fn meta(&mut self, key: &str, value: &str) -> io::Result<()> {
        put_str(&mut self.record, key);
        put_str(&mut self.record, value);
        self.emit(TAG_META)
    }

    /// Thread `index` is named `name`.
    pub fn thread(&mut self, index: u32, name: &str) -> io::Result<()> {
        put_varint(&mut self.record, u64::from(index));
        put_str(&mut self.record, name);
        self.emit(TAG_THREAD)
    }

    /// Stream `index` is `handle` on `device`.
    pub fn stream(&mut self, index: u32, device: u32, handle: u64) -> io::Result<()> {
        put_varint(&mut self.record, u64::from(index));
        put_varint(&mut self.record, u64::from(device));
        put_varint(&mut self.record, handle);
        self.emit(TAG_STREAM)
    }

    /// Backtrace `index` reads `text`.
    pub fn backtrace(&mut self, index: u32, text: &str) -> io::Result<()> {
        put_varint(&mut self.record, u64::from(index));
        put_str(&mut self.record, text);
        self.emit(TAG_BACKTRACE)
    }

    /// One event; its thread, stream and backtrace are indices written
    /// before (readers refuse an index they have not seen).
    pub fn event(&mut self, e: &Event) -> io::Result<()> {
        let r = &mut self.record;
        r.push(e.action.code());
        put_varint(r, u64::from(e.thread));
        put_varint(r, zigzag(e.t_ns.wrapping_sub(self.last_t) as i64));
        put_varint(r, u64::from(e.device));
        put_varint(r, e.stream.map_or(0, |s| u64::from(s) + 1));
        put_varint(r, e.bytes);
        put_varint(r, zigzag(e.addr.wrapping_sub(self.last_addr) as i64));
        put_varint(r, e.backtrace.map_or(0, |b| u64::from(b) + 1));
        self.last_t = e.t_ns;
        self.last_addr = e.addr;
        self.events += 1;
        self.emit(TAG_EVENT)
    }

    /// The event of stream `stream` (an index written before) at host time
    /// `t_ns` was reached by the device at `device_ns` ([`Event::device_ns`]).
    /// Written after the event, whenever the device time is known.
    pub fn device_time(&mut self, stream: u32, t_ns: u64, device_ns: i64) -> io::Result<()> {
        put_varint(&mut self.record, u64::from(stream));
        put_varint(&mut self.record, t_ns);
        put_varint(&mut self.record, zigzag(device_ns));
        self.emit(TAG_DEVICE_TIME)
    }

    /// `count` events of thread `thread` were dropped (seen at `t_ns`).
    pub fn dropped(&mut self, thread: u32, count: u64, t_ns: u64) -> io::Result<()> {
        put_varint(&mut self.record, u64::from(thread));
        put_varint(&mut self.record, count);
        put_varint(&mut self.record, t_ns);
        self.emit(TAG_DROPPED)
    }

    /// Hands what is buffered to the output and flushes it.
    pub fn flush(&mut self) -> io::Result<()> {
        self.drain()?;
        self.out.flush()
    }

    /// Events written so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Bytes handed to the output so far (what is buffered not counted).
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// The end record (events written, events dropped in all), flushed;
    /// returns the output.
    pub fn finish(mut self, dropped: u64) -> io::Result<W> {
        put_varint(&mut self.record, self.events);
        put_varint(&mut self.record, dropped);
        self.emit(TAG_END)?;
        self.flush()?;
        Ok(self.out)
    }
}

/// Writes `trace` whole (its events in their order).
pub fn write_trace<W: Write>(trace: &Trace, out: W) -> io::Result<W> {
    let mut w = TraceWriter::new(out)?;
    for (k, v) in &trace.meta {
        w.meta(k, v)?;
    }
    for (i, t) in trace.threads.iter().enumerate() {
        w.thread(i as u32, &t.name)?;
    }
    for (i, s) in trace.streams.iter().enumerate() {
        w.stream(i as u32, s.device, s.handle)?;
    }
    for (i, b) in trace.backtraces.iter().enumerate() {
        w.backtrace(i as u32, b)?;
    }
    for e in &trace.events {
        w.event(e)?;
        if let (Some(stream), Some(d)) = (e.stream, e.device_ns) {
            w.device_time(stream, e.t_ns, d)?;
        }
    }
    if trace.dropped > 0 {
        w.dropped(0, trace.dropped, trace.events.last().map_or(0, |e| e.t_ns))?;
    }
    w.finish(trace.dropped)
}

// ---------------------------------------------------------------------------
// Reader

fn parse_somalloc(bytes: &[u8]) -> Result<Trace, FormatError> {
    let nl = bytes
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| FormatError::at(0, "no header line"))?;
    let header =
        std::str::from_utf8(&bytes[..nl]).map_err(|_| FormatError::at(0, "a header that is not UTF-8"))?;
    let version: u32 = header[MAGIC.len()..]
        .trim()
        .parse()
        .map_err(|_| FormatError::at(0, format!("a header `{header}` without a version number")))?;
    if version != VERSION {
        return Err(FormatError::at(
            0,
            format!("version {version}; this reader reads version {VERSION}"),
        ));
    }
    let mut t = Trace {
        source: Source::Somalloc,
        version,
        meta: Vec::new(),
        threads: Vec::new(),
        streams: Vec::new(),
        backtraces: Vec::new(),
        events: Vec::new(),
        dropped: 0,
        complete: false,
    };
    // Indices may be defined in any order (the recorder writes a thread's
    // or a stream's record before its first event); placeholders fill gaps.
    let mut threads: Vec<Option<ThreadInfo>> = Vec::new();
    let mut streams: Vec<Option<StreamInfo>> = Vec::new();
    let mut backtraces: Vec<Option<String>> = Vec::new();
    let (mut last_t, mut last_addr) = (0u64, 0u64);
    let mut pos = nl + 1;
    let mut end_counts = None;
    // (stream, host time, device time): attached to their events at the end.
    let mut device_times: Vec<(u32, u64, i64)> = Vec::new();
    while pos < bytes.len() {
        let start = pos;
        let mut head = Cursor { bytes, pos, base: 0 };
        let (tag, len) = match (head.u8(), head.varint()) {
            (Ok(tag), Ok(len)) => (tag, len as usize),
            // A record cut short at the end of the file: what came before stands.
            _ => break,
        };
        let body_start = head.pos;
        let Some(body_end) = body_start.checked_add(len).filter(|e| *e <= bytes.len()) else {
            break;
        };
        pos = body_end;
        let mut c = Cursor {
            bytes: &bytes[body_start..body_end],
            pos: 0,
            base: body_start,
        };
        match tag {
            TAG_META => {
                let k = c.str()?;
                let v = c.str()?;
                t.meta.push((k, v));
            }
            TAG_THREAD => {
                let i = c.u32()? as usize;
                let name = c.str()?;
                define(&mut threads, i, ThreadInfo { name }, start)?;
            }
            TAG_STREAM => {
                let i = c.u32()? as usize;
                let device = c.u32()?;
                let handle = c.varint()?;
                define(&mut streams, i, StreamInfo { device, handle }, start)?;
            }
            TAG_BACKTRACE => {
                let i = c.u32()? as usize;
                let text = c.str()?;
                define(&mut backtraces, i, text, start)?;
            }
            TAG_EVENT => {
                let code = c.u8()?;
                let action =
                    Action::from_code(code).ok_or_else(|| c.err(&format!("unknown action {code}")))?;
                let thread = c.u32()?;
                let t_ns = last_t.wrapping_add(unzigzag(c.varint()?) as u64);
                let device = c.u32()?;
                let stream = c.u32()?.checked_sub(1);
                let bytes_ = c.varint()?;
                let addr = last_addr.wrapping_add(unzigzag(c.varint()?) as u64);
                // Added fields of a later minor change would follow; a
                // record without the backtrace field has none.
                let backtrace = if c.done() { None } else { c.u32()?.checked_sub(1) };
                last_t = t_ns;
                last_addr = addr;
                let known = |n: usize, i: Option<u32>| i.is_none_or(|i| (i as usize) < n);
                if !known(threads.len(), Some(thread))
                    || !known(streams.len(), stream)
                    || !known(backtraces.len(), backtrace)
                {
                    return Err(FormatError::at(
                        start,
                        "an event names a thread, stream or backtrace defined nowhere before it",
                    ));
                }
                t.events.push(Event {
                    t_ns,
                    action,
                    thread,
                    device,
                    stream,
                    bytes: bytes_,
                    addr,
                    backtrace,
                    device_ns: None,
                });
            }
            TAG_DEVICE_TIME => {
                let stream = c.u32()?;
                let t_ns = c.varint()?;
                let device_ns = unzigzag(c.varint()?);
                device_times.push((stream, t_ns, device_ns));
            }
            TAG_DROPPED => {
                let _thread = c.u32()?;
                t.dropped += c.varint()?;
            }
            TAG_END => {
                let events = c.varint()?;
                let dropped = c.varint()?;
                end_counts = Some((events, dropped));
                t.complete = true;
            }
            // A record of a later minor version: skipped whole.
            _ => {}
        }
    }
    if let Some((events, dropped)) = end_counts {
        if events != t.events.len() as u64 {
            return Err(FormatError::at(
                bytes.len(),
                format!(
                    "the end record counts {events} events, the file holds {}",
                    t.events.len()
                ),
            ));
        }
        t.dropped = t.dropped.max(dropped);
    }
    t.threads = fill(threads, |i| ThreadInfo {
        name: format!("thread {i}"),
    });
    t.streams = fill(streams, |_| StreamInfo { device: 0, handle: 0 });
    t.backtraces = fill(backtraces, |_| String::new());
    t.events.sort_by_key(|e| e.t_ns);
    attach_device_times(&mut t.events, device_times);
    Ok(t)
}

/// Gives each event its device time: the record of its stream and host
/// time (events of one stream at one host time take them in order). A
/// record that matches no event is dropped.
fn attach_device_times(events: &mut [Event], mut times: Vec<(u32, u64, i64)>) {
    if times.is_empty() {
        return;
    }
    times.sort_by_key(|&(s, t, _)| (s, t));
    let mut next = 0usize;
    let mut order: Vec<usize> = (0..events.len())
        .filter(|&i| events[i].stream.is_some())
        .collect();
    order.sort_by_key(|&i| (events[i].stream, events[i].t_ns));
    for i in order {
        let key = (events[i].stream.unwrap_or(0), events[i].t_ns);
        while next < times.len() && (times[next].0, times[next].1) < key {
            next += 1;
        }
        if next < times.len() && (times[next].0, times[next].1) == key {
            events[i].device_ns = Some(times[next].2);
            next += 1;
        }
    }
}

fn define<T>(v: &mut Vec<Option<T>>, i: usize, value: T, at: usize) -> Result<(), FormatError> {
    if i > 1 << 24 {
        return Err(FormatError::at(at, format!("index {i} is out of range")));
    }
    if v.len() <= i {
        v.resize_with(i + 1, || None);
    }
    v[i] = Some(value);
    Ok(())
}

fn fill<T>(v: Vec<Option<T>>, missing: impl Fn(usize) -> T) -> Vec<T> {
    v.into_iter()
        .enumerate()
        .map(|(i, x)| x.unwrap_or_else(|| missing(i)))
        .collect()
}

// ---------------------------------------------------------------------------
// RMM's CSV

/// `HH:MM:SS.fraction` → nanoseconds since midnight.
fn parse_clock(s: &str) -> Option<u64> {
    let mut parts = s.trim().splitn(3, ':');
    let h: u64 = parts.next()?.parse().ok()?;
    let m: u64 = parts.next()?.parse().ok()?;
    let rest = parts.next()?;
    let (secs, frac) = rest.split_once('.').unwrap_or((rest, ""));
    let s: u64 = secs.parse().ok()?;
    if m >= 60 || s >= 61 || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut ns: u64 = if frac.is_empty() { 0 } else { frac.parse().ok()? };
    for _ in frac.len()..9 {
        ns *= 10;
    }
    Some(((h * 60 + m) * 60 + s) * 1_000_000_000 + ns)
}

/// A pointer or a stream as RMM prints it: hexadecimal with or without
/// `0x`; `(nil)`, `nullptr` or nothing for null.
fn parse_hex(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() || s == "(nil)" || s == "nullptr" {
        return Some(0);
    }
    let digits = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")).unwrap_or(s);
    u64::from_str_radix(digits, 16).ok()
}

fn parse_rmm_csv(bytes: &[u8]) -> Result<Trace, FormatError> {
    let text = std::str::from_utf8(bytes).map_err(|_| FormatError::line(1, "the CSV is not UTF-8"))?;
    let mut lines = text.lines().enumerate();
    let (_, header) = lines.next().ok_or_else(|| FormatError::line(1, "empty"))?;
    let columns: Vec<&str> = header
        .trim()
        .trim_start_matches('\u{feff}')
        .split(',')
        .map(str::trim)
        .collect();
    let col = |name: &str| {
        columns
            .iter()
            .position(|c| c.eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                FormatError::line(1, format!("no `{name}` column (RMM's header is `{RMM_HEADER}`)"))
            })
    };
    let (c_thread, c_time, c_action, c_ptr, c_size, c_stream) = (
        col("Thread")?,
        col("Time")?,
        col("Action")?,
        col("Pointer")?,
        col("Size")?,
        col("Stream")?,
    );
    let mut t = Trace {
        source: Source::RmmCsv,
        version: VERSION,
        meta: vec![("source".into(), "RMM logging_resource_adaptor CSV".into())],
        threads: Vec::new(),
        streams: Vec::new(),
        backtraces: Vec::new(),
        events: Vec::new(),
        dropped: 0,
        complete: true,
    };
    let mut thread_ids: HashMap<String, u32> = HashMap::new();
    let mut stream_ids: HashMap<u64, u32> = HashMap::new();
    let (mut first, mut last, mut wraps) = (None::<u64>, 0u64, 0u64);
    const DAY: u64 = 86_400 * 1_000_000_000;
    for (i, line) in lines {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let get = |c: usize| {
            fields.get(c).copied().ok_or_else(|| {
                FormatError::line(
                    n,
                    format!("{} fields, the header has {}", fields.len(), columns.len()),
                )
            })
        };
        let action = match get(c_action)? {
            "allocate" => Action::Allocate,
            "free" => Action::Free,
            "allocate failure" => Action::FailedAllocate,
            other => return Err(FormatError::line(n, format!("unknown action `{other}`"))),
        };
        let clock = parse_clock(get(c_time)?).ok_or_else(|| {
            FormatError::line(
                n,
                format!(
                    "a time `{}` that is not HH:MM:SS.ffffff",
                    get(c_time).unwrap_or("")
                ),
            )
        })?;
        // The log has the time of day only: a time far before the last one
        // is the next day.
        let mut abs = clock + wraps * DAY;
        if abs + DAY / 2 < last {
            wraps += 1;
            abs += DAY;
        }
        last = last.max(abs);
        let t0 = *first.get_or_insert(abs);
        let addr = parse_hex(get(c_ptr)?)
            .ok_or_else(|| FormatError::line(n, "a pointer that is not hexadecimal"))?;
        let bytes_: u64 = get(c_size)?
            .parse()
            .map_err(|_| FormatError::line(n, "a size that is not a number"))?;
        let handle = parse_hex(get(c_stream)?)
            .ok_or_else(|| FormatError::line(n, "a stream that is not hexadecimal"))?;
        let thread_name = get(c_thread)?;
        let next = thread_ids.len() as u32;
        let thread = *thread_ids.entry(thread_name.to_string()).or_insert_with(|| {
            t.threads.push(ThreadInfo {
                name: thread_name.to_string(),
            });
            next
        });
        let next = stream_ids.len() as u32;
        let stream = *stream_ids.entry(handle).or_insert_with(|| {
            t.streams.push(StreamInfo { device: 0, handle });
            next
        });
        t.events.push(
            Event::new(abs.saturating_sub(t0), action, thread, 0)
                .on(stream)
                .at(bytes_, addr),
        );
    }
    t.events.sort_by_key(|e| e.t_ns);
    Ok(t)
}
