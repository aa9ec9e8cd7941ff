//! The terminal summary.

use std::fmt::Write as _;

use crate::analysis::{Analysis, Counts};
use crate::format::{Action, Source, Trace};

/// `n` bytes for people: `256 B`, `64.0 KiB`, `1.5 MiB`.
pub fn fmt_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Nanoseconds as seconds or milliseconds for people.
pub fn fmt_time(ns: u64) -> String {
    if ns >= 10_000_000_000 {
        format!("{:.2} s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.3} ms", ns as f64 / 1e6)
    } else {
        format!("{:.1} µs", ns as f64 / 1e3)
    }
}

/// A stream's name: its handle and device.
pub fn stream_name(t: &Trace, stream: Option<u32>) -> String {
    match stream.and_then(|s| t.streams.get(s as usize)) {
        Some(s) => format!("{:#x} (dev {})", s.handle, s.device),
        None => "(no stream)".into(),
    }
}

/// The first frame of a backtrace that is not the allocator's (a frame of
/// the program), for one-line listings.
pub fn first_frame(t: &Trace, backtrace: Option<u32>) -> Option<String> {
    let text = t.backtraces.get(backtrace? as usize)?;
    let line = text.lines().find(|l| {
        let l = l.trim_start();
        l.split_once(": ")
            .is_some_and(|(n, _)| n.bytes().all(|b| b.is_ascii_digit()))
            && !l.contains("somalloc::")
            && !l.contains("core::")
            && !l.contains("alloc::")
            && !l.contains("std::")
    })?;
    Some(
        line.trim_start()
            .split_once(": ")
            .map_or(line, |(_, f)| f)
            .to_string(),
    )
}

fn time_of(t: &Trace, event: usize) -> u64 {
    t.events.get(event).map_or(0, |e| e.t_ns)
}

/// The summary: what the trace is, its peaks (in all, per device, per
/// stream), the largest allocations live at the peak, and what did not add
/// up.
pub fn summary(t: &Trace, a: &Analysis, top: usize) -> String {
    let mut s = String::new();
    let span = t.events.last().map_or(0, |e| e.t_ns);
    let source = match t.source {
        Source::Somalloc => format!("somalloc trace, version {}", t.version),
        Source::RmmCsv => "RMM logging_resource_adaptor CSV".into(),
    };
    let _ = writeln!(
        s,
        "{source}: {} events over {}, {} thread(s), {} stream(s), {} device(s){}",
        t.events.len(),
        fmt_time(span),
        t.threads.len(),
        t.streams.len(),
        a.devices.len(),
        if t.complete {
            ""
        } else {
            "; no end record (the recording was cut short)"
        }
    );
    for key in ["program", "backend", "recorder"] {
        if let Some(v) = t.meta(key) {
            let _ = writeln!(s, "  {key}: {v}");
        }
    }
    if t.dropped > 0 {
        let _ = writeln!(
            s,
            "  WARNING: {} events were dropped while recording (the writer fell behind): figures are incomplete",
            t.dropped
        );
    }
    let actions: Vec<String> = Action::ALL
        .iter()
        .filter_map(|act| a.actions.get(act).map(|n| format!("{} {n}", act.name())))
        .collect();
    let _ = writeln!(s, "  events: {}", actions.join(", "));
    let timed = t.events.iter().filter(|e| e.device_ns.is_some()).count();
    if timed > 0 || t.meta("device_times") == Some("true") {
        let of = t
            .events
            .iter()
            .filter(|e| matches!(e.action, Action::Allocate | Action::Free))
            .count();
        let _ = writeln!(
            s,
            "  device times: {timed} of {of} allocations and frees{}",
            t.meta("device_times_missed")
                .map_or(String::new(), |m| format!(" ({m} missed while recording)"))
        );
    }
    let _ = writeln!(s);
    let p = a.total.peak;
    let _ = writeln!(
        s,
        "peak live: {} ({} bytes) at {} (event {} of {})",
        fmt_bytes(p.bytes),
        p.bytes,
        fmt_time(time_of(t, p.event)),
        p.event + 1,
        t.events.len()
    );
    match t.meta("pool_reserved_peak").and_then(|v| v.parse::<u64>().ok()) {
        Some(r) => {
            let _ = writeln!(
                s,
                "peak reserved (the recorded run's pool): {} ({r} bytes), {:.3}x the peak live",
                fmt_bytes(r),
                r as f64 / p.bytes.max(1) as f64
            );
        }
        None => {
            let _ = writeln!(
                s,
                "peak reserved: not in the trace (the benchmark's replay measures it per allocator)"
            );
        }
    }
    let _ = writeln!(
        s,
        "allocated in all: {} in {} allocations; live at the end: {} in {} allocations",
        fmt_bytes(a.total.bytes_allocated),
        a.total.allocations,
        fmt_bytes(a.total.live),
        a.live_at_end().count()
    );
    if a.unknown_frees + a.size_mismatches + a.reused_live > 0 {
        let _ = writeln!(
            s,
            "did not add up: {} frees of addresses not live, {} frees with another size than allocated, {} allocations of a live address",
            a.unknown_frees, a.size_mismatches, a.reused_live
        );
    }
    let _ = writeln!(s);
    let header = |s: &mut String, what: &str| {
        let _ = writeln!(
            s,
            "{what:<26} {:>9} {:>9} {:>7} {:>12} {:>12}  {:>12}",
            "allocs", "frees", "failed", "allocated", "peak live", "at"
        );
    };
    let row = |s: &mut String, name: &str, c: &Counts| {
        let _ = writeln!(
            s,
            "{name:<26} {:>9} {:>9} {:>7} {:>12} {:>12}  {:>12}",
            c.allocations,
            c.frees,
            c.failed,
            fmt_bytes(c.bytes_allocated),
            fmt_bytes(c.peak.bytes),
            fmt_time(time_of(t, c.peak.event))
        );
    };
    if a.devices.len() > 1 {
        header(&mut s, "device");
        let mut devices: Vec<_> = a.devices.iter().collect();
        devices.sort_by_key(|(d, _)| **d);
        for (d, c) in devices {
            row(&mut s, &format!("device {d}"), c);
        }
        let _ = writeln!(s);
    }
    header(&mut s, "stream");
    let mut streams: Vec<_> = a.streams.iter().collect();
    streams.sort_by(|x, y| y.1.peak.bytes.cmp(&x.1.peak.bytes).then(x.0.cmp(y.0)));
    let shown = streams.len().min(32);
    for (st, c) in &streams[..shown] {
        row(&mut s, &stream_name(t, **st), c);
    }
    if streams.len() > shown {
        let _ = writeln!(s, "... and {} more streams", streams.len() - shown);
    }
    let _ = writeln!(s);
    let at_peak = a.live_after(p.event);
    let _ = writeln!(
        s,
        "the largest of the {} allocations live at the peak:",
        at_peak.len()
    );
    let _ = writeln!(
        s,
        "{:>12} {:>18} {:<22} {:<14} {:>12}  from",
        "size", "address", "stream", "thread", "allocated at"
    );
    for al in at_peak.iter().take(top) {
        let thread = t.threads.get(al.thread as usize).map_or("?", |x| x.name.as_str());
        let _ = writeln!(
            s,
            "{:>12} {:>#18x} {:<22} {:<14} {:>12}  {}",
            fmt_bytes(al.bytes),
            al.addr,
            stream_name(t, al.stream),
            thread,
            fmt_time(time_of(t, al.start)),
            first_frame(t, al.backtrace).unwrap_or_default()
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Event, Source, StreamInfo, ThreadInfo};

    #[test]
    fn the_summary_names_the_peak_and_what_was_live_then() {
        let ev = |t, action, stream, bytes, addr| Event::new(t, action, 0, 0).on(stream).at(bytes, addr);
        let t = Trace {
            source: Source::Somalloc,
            version: 1,
            meta: vec![("pool_reserved_peak".into(), "8388608".into())],
            threads: vec![ThreadInfo { name: "main".into() }],
            streams: vec![
                StreamInfo {
                    device: 0,
                    handle: 0xaa,
                },
                StreamInfo {
                    device: 0,
                    handle: 0xbb,
                },
            ],
            backtraces: vec![
                "   0: somalloc::buffer::new\n   1: app::model::forward\n      at src/model.rs:9".into(),
            ],
            events: vec![
                ev(1_000, Action::Allocate, 0, 3 << 20, 0x1000_0000)
                    .with_backtrace(0)
                    .with_device_ns(40),
                ev(2_000, Action::Allocate, 1, 1 << 20, 0x2000_0000),
                ev(3_000, Action::Free, 0, 3 << 20, 0x1000_0000),
                ev(4_000, Action::Free, 1, 1 << 20, 0x2000_0000),
            ],
            dropped: 0,
            complete: true,
        };
        let a = Analysis::of(&t);
        let s = summary(&t, &a, 10);
        assert!(
            s.contains("peak live: 4.0 MiB (4194304 bytes) at 2.0 µs (event 2 of 4)"),
            "{s}"
        );
        assert!(s.contains("8.0 MiB (8388608 bytes), 2.000x the peak live"), "{s}");
        assert!(
            s.contains("the largest of the 2 allocations live at the peak"),
            "{s}"
        );
        let big = s.lines().position(|l| l.contains("0x10000000")).unwrap();
        let small = s.lines().position(|l| l.contains("0x20000000")).unwrap();
        assert!(big < small, "largest first:\n{s}");
        assert!(
            s.lines().nth(big).unwrap().ends_with("app::model::forward"),
            "{s}"
        );
        assert!(s.contains("0xaa (dev 0)"));
        assert!(s.contains("device times: 1 of 4 allocations and frees\n"), "{s}");
    }

    #[test]
    fn sizes_and_times_for_people() {
        assert_eq!(fmt_bytes(256), "256 B");
        assert_eq!(fmt_bytes(1536), "1.5 KiB");
        assert_eq!(fmt_bytes(3 << 30), "3.0 GiB");
        assert_eq!(fmt_time(1_500), "1.5 µs");
        assert_eq!(fmt_time(2_500_000), "2.500 ms");
        assert_eq!(fmt_time(12_000_000_000), "12.00 s");
    }
}
