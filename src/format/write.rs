//! The trace file's writer: records of varints and strings, events as
//! differences to the previous one.

use std::io::{self, Write};

use super::{
    Event, Trace, MAGIC, TAG_BACKTRACE, TAG_DEVICE_TIME, TAG_DROPPED, TAG_END, TAG_EVENT, TAG_META,
    TAG_STREAM, TAG_THREAD, VERSION,
};

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
fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}
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
