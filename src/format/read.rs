//! The trace file's reader.

use super::{
    Action, Event, FormatError, Source, StreamInfo, ThreadInfo, Trace, MAGIC, TAG_BACKTRACE, TAG_DEVICE_TIME,
    TAG_DROPPED, TAG_END, TAG_EVENT, TAG_META, TAG_STREAM, TAG_THREAD, VERSION,
};

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
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

pub(super) fn parse_somalloc(bytes: &[u8]) -> Result<Trace, FormatError> {
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
