//! The reader of RMM's logging-adaptor CSV.

use std::collections::HashMap;

use super::{Action, Event, FormatError, Source, StreamInfo, ThreadInfo, Trace, RMM_HEADER, VERSION};

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

pub(super) fn parse_rmm_csv(bytes: &[u8]) -> Result<Trace, FormatError> {
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
