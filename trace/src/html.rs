//! The web page: one self-contained HTML file (inline script, canvas, no
//! network) with the live bytes over time per stream and the allocations as
//! blocks in address order over time. The tool aggregates here so that the
//! page stays small and draws fast whatever the trace's size: live bytes
//! are the maximum per time bucket, the largest allocations are blocks of
//! their own (with hover details), and all allocations together are a
//! coarse occupancy raster behind them.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::analysis::Analysis;
use crate::format::Trace;
use crate::summary::{fmt_bytes, fmt_time, stream_name};

const PAGE: &str = include_str!("page.html");

/// How the page is drawn.
#[derive(Clone, Copy, Debug)]
pub struct PageOptions {
    /// Time buckets of the live-bytes chart.
    pub buckets: usize,
    /// Allocations drawn as blocks of their own (the largest).
    pub max_blocks: usize,
    /// Streams with a line of their own (the rest are summed as "other").
    pub max_streams: usize,
    /// Cells of the occupancy raster (time × address).
    pub raster: (usize, usize),
}

impl Default for PageOptions {
    fn default() -> PageOptions {
        PageOptions {
            buckets: 1200,
            max_blocks: 20_000,
            max_streams: 10,
            raster: (800, 240),
        }
    }
}

/// A JSON string literal (also safe inside a `<script>` element).
fn js_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            c if (c as u32) < 0x20 || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn base64(bytes: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The address axis without its gaps: the address ranges that were ever
/// allocated, merged and laid end to end (per device, devices in order).
pub struct AddressAxis {
    /// (device, first address, length, offset on the axis), sorted.
    segments: Vec<(u32, u64, u64, u64)>,
    pub height: u64,
}

impl AddressAxis {
    pub fn of(a: &Analysis) -> AddressAxis {
        let mut ranges: Vec<(u32, u64, u64)> = a
            .allocs
            .iter()
            .map(|x| (x.device, x.addr, x.addr.saturating_add(x.bytes.max(1))))
            .collect();
        ranges.sort_unstable();
        let mut segments: Vec<(u32, u64, u64, u64)> = Vec::new();
        let mut height = 0u64;
        let mut cur: Option<(u32, u64, u64)> = None;
        for (d, s, e) in ranges {
            match &mut cur {
                Some((cd, _, ce)) if *cd == d && s <= *ce => *ce = (*ce).max(e),
                _ => {
                    if let Some((cd, cs, ce)) = cur {
                        segments.push((cd, cs, ce - cs, height));
                        height += ce - cs;
                    }
                    cur = Some((d, s, e));
                }
            }
        }
        if let Some((cd, cs, ce)) = cur {
            segments.push((cd, cs, ce - cs, height));
            height += ce - cs;
        }
        AddressAxis { segments, height }
    }

    /// The position of `addr` of `device` on the axis.
    pub fn y(&self, device: u32, addr: u64) -> u64 {
        let i = self
            .segments
            .partition_point(|&(d, s, _, _)| (d, s) <= (device, addr))
            .saturating_sub(1);
        match self.segments.get(i) {
            Some(&(d, s, len, off)) if d == device && addr >= s => off + (addr - s).min(len),
            _ => 0,
        }
    }

    pub fn segments(&self) -> usize {
        self.segments.len()
    }
}

/// The page for `trace` (named `title`).
pub fn page(trace: &Trace, a: &Analysis, title: &str, o: PageOptions) -> String {
    let t0 = trace.events.first().map_or(0, |e| e.t_ns);
    let t1 = trace.events.last().map_or(0, |e| e.t_ns).max(t0 + 1);
    let span = (t1 - t0) as f64;
    let mut d = String::with_capacity(4 << 20);
    d.push('{');
    let _ = write!(d, "\"title\":{},", js_str(title));
    let _ = write!(d, "\"t0\":{t0},\"t1\":{t1},");
    let p = a.total.peak;
    let peak_t = trace.events.get(p.event).map_or(t0, |e| e.t_ns);
    let reserved = trace
        .meta("pool_reserved_peak")
        .and_then(|v| v.parse::<u64>().ok());
    let mut facts = vec![
        format!("{} events over {}", trace.events.len(), fmt_time(t1 - t0)),
        format!("{} threads, {} streams", trace.threads.len(), trace.streams.len()),
        format!("peak live {} at {}", fmt_bytes(p.bytes), fmt_time(peak_t - t0)),
    ];
    if let Some(r) = reserved {
        facts.push(format!("peak reserved (recorded run) {}", fmt_bytes(r)));
    }
    if trace.dropped > 0 {
        facts.push(format!("{} events dropped while recording", trace.dropped));
    }
    let _ = write!(
        d,
        "\"facts\":[{}],\"peak\":{{\"t\":{peak_t},\"bytes\":{}}},",
        facts.iter().map(|f| js_str(f)).collect::<Vec<_>>().join(","),
        p.bytes
    );

    // Live bytes per stream: the top streams by peak, the rest summed.
    let mut by_peak: Vec<(Option<u32>, u64)> = a.streams.iter().map(|(s, c)| (*s, c.peak.bytes)).collect();
    by_peak.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
    let named: Vec<Option<u32>> = by_peak.iter().take(o.max_streams).map(|x| x.0).collect();
    let series_of: HashMap<Option<u32>, usize> = named.iter().enumerate().map(|(i, s)| (*s, i)).collect();
    let other = named.len();
    let n_series = named.len() + usize::from(by_peak.len() > named.len()) + 1; // + total
    let total_series = n_series - 1;
    // Deltas of live bytes per series, by event.
    let mut deltas: Vec<(usize, usize, i64)> = Vec::with_capacity(a.allocs.len() * 2);
    for al in &a.allocs {
        let s = *series_of.get(&al.stream).unwrap_or(&other);
        deltas.push((al.start, s, al.bytes as i64));
        if let Some(e) = al.end {
            deltas.push((e, s, -(al.bytes as i64)));
        }
    }
    deltas.sort_by_key(|x| x.0);
    let b = o.buckets.max(1);
    let bucket = |t: u64| (((t - t0) as f64 / span * b as f64) as usize).min(b - 1);
    let mut max = vec![vec![0u64; b]; n_series];
    let mut live = vec![0i64; n_series];
    // The last bucket each series' value was set in.
    let mut at = vec![0usize; n_series];
    for (ev, s, delta) in deltas {
        let k = bucket(trace.events[ev].t_ns);
        for series in [s, total_series] {
            // Buckets since this series' last change (this one included)
            // begin with its value from before.
            let before = live[series].max(0) as u64;
            if k > at[series] {
                max[series][at[series] + 1..=k].fill(before);
            }
            at[series] = at[series].max(k);
            live[series] += delta;
            max[series][k] = max[series][k].max(live[series].max(0) as u64);
        }
    }
    for s in 0..n_series {
        let last = live[s].max(0) as u64;
        max[s][(at[s] + 1).min(b)..].fill(last);
    }
    let _ = write!(d, "\"live\":{{\"buckets\":{b},\"series\":[");
    for s in 0..n_series {
        let name = if s == total_series {
            "all streams".to_string()
        } else if s == other {
            format!("{} other streams", by_peak.len() - named.len())
        } else {
            stream_name(trace, named[s])
        };
        let peak = max[s].iter().copied().max().unwrap_or(0);
        let values: Vec<String> = max[s].iter().map(u64::to_string).collect();
        let _ = write!(
            d,
            "{}{{\"name\":{},\"total\":{},\"peak\":{peak},\"values\":[{}]}}",
            if s > 0 { "," } else { "" },
            js_str(&name),
            s == total_series,
            values.join(",")
        );
    }
    d.push_str("]},");

    // Blocks: the largest allocations on their own, all of them in the raster.
    let axis = AddressAxis::of(a);
    let ymax = axis.height.max(1);
    let (w, h) = o.raster;
    let mut diff = vec![0i32; (w + 1) * (h + 1)];
    let cell_x = |t: u64| (t - t0) as f64 / span * w as f64;
    let cell_y = |y: u64| y as f64 / ymax as f64 * h as f64;
    let mut order: Vec<usize> = (0..a.allocs.len()).collect();
    order.sort_by(|&x, &y| a.allocs[y].bytes.cmp(&a.allocs[x].bytes).then(x.cmp(&y)));
    let shown = order.len().min(o.max_blocks);
    let end_t = |al: &crate::analysis::Alloc| al.end.map_or(t1, |e| trace.events[e].t_ns);
    for al in &a.allocs {
        let (ts, te) = (trace.events[al.start].t_ns, end_t(al));
        let y0 = axis.y(al.device, al.addr);
        let x0 = (cell_x(ts) as usize).min(w - 1);
        let x1 = (cell_x(te).ceil() as usize).clamp(x0 + 1, w);
        let r0 = (cell_y(y0) as usize).min(h - 1);
        let r1 = (cell_y(y0 + al.bytes).ceil() as usize).clamp(r0 + 1, h);
        diff[r0 * (w + 1) + x0] += 1;
        diff[r0 * (w + 1) + x1] -= 1;
        diff[r1 * (w + 1) + x0] -= 1;
        diff[r1 * (w + 1) + x1] += 1;
    }
    // Prefix sums: the number of allocations over each cell.
    let mut levels = vec![0u8; w * h];
    let mut acc = vec![0i32; (w + 1) * (h + 1)];
    for r in 0..h {
        for c in 0..w {
            let up = if r > 0 { acc[(r - 1) * (w + 1) + c] } else { 0 };
            let left = if c > 0 { acc[r * (w + 1) + c - 1] } else { 0 };
            let diag = if r > 0 && c > 0 {
                acc[(r - 1) * (w + 1) + c - 1]
            } else {
                0
            };
            let v = diff[r * (w + 1) + c] + up + left - diag;
            acc[r * (w + 1) + c] = v;
            levels[r * w + c] = if v <= 0 {
                0
            } else {
                (64.0 + 40.0 * f64::from(v).log2()).min(255.0) as u8
            };
        }
    }
    let _ = write!(
        d,
        "\"blocks\":{{\"ymax\":{ymax},\"segments\":{},\"allocations\":{},\"shown\":{shown},\"raster\":{{\"w\":{w},\"h\":{h},\"data\":\"{}\"}},\"rects\":[",
        axis.segments(),
        a.allocs.len(),
        base64(&levels)
    );
    let mut backtraces: HashMap<u32, usize> = HashMap::new();
    let mut stream_ids: HashMap<Option<u32>, usize> = HashMap::new();
    let mut stream_names: Vec<String> = Vec::new();
    for (n, &i) in order[..shown].iter().enumerate() {
        let al = &a.allocs[i];
        let (ts, te) = (trace.events[al.start].t_ns, end_t(al));
        let y0 = axis.y(al.device, al.addr);
        let next = backtraces.len();
        let bt = al
            .backtrace
            .map_or(-1, |b| *backtraces.entry(b).or_insert(next) as i64);
        let next = stream_ids.len();
        let st = *stream_ids.entry(al.stream).or_insert_with(|| {
            stream_names.push(stream_name(trace, al.stream));
            next
        });
        let _ = write!(
            d,
            "{}[{ts},{te},{y0},{},{},{st},{},{bt},\"{:#x}\",{},{}]",
            if n > 0 { "," } else { "" },
            y0 + al.bytes,
            al.bytes,
            al.thread,
            al.addr,
            u8::from(al.end.is_none()),
            series_of.get(&al.stream).map_or(other as i64, |s| *s as i64),
        );
    }
    d.push_str("]},");
    let names: Vec<String> = stream_names.iter().map(|s| js_str(s)).collect();
    let _ = write!(d, "\"streams\":[{}],", names.join(","));
    let threads: Vec<String> = trace.threads.iter().map(|t| js_str(&t.name)).collect();
    let _ = write!(d, "\"threads\":[{}],", threads.join(","));
    let mut bts: Vec<(usize, u32)> = backtraces.iter().map(|(b, i)| (*i, *b)).collect();
    bts.sort_unstable();
    let texts: Vec<String> = bts
        .iter()
        .map(|(_, b)| js_str(trace.backtraces.get(*b as usize).map_or("", String::as_str)))
        .collect();
    let _ = write!(d, "\"backtraces\":[{}]", texts.join(","));
    d.push('}');
    PAGE.replace("__TITLE__", &html_escape(title))
        .replace("\"__DATA__\"", &d)
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Action, Event, Source, StreamInfo, ThreadInfo};

    fn two_blocks() -> Trace {
        let ev = |t, action, stream, bytes, addr| Event::new(t, action, 0, 0).on(stream).at(bytes, addr);
        Trace {
            source: Source::Somalloc,
            version: 1,
            meta: Vec::new(),
            threads: vec![ThreadInfo {
                name: "main</script>".into(),
            }],
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
            backtraces: vec!["   0: app::f\n      at \"x.rs\"".into()],
            events: vec![
                ev(0, Action::Allocate, 0, 1000, 0x1_0000).with_backtrace(0),
                ev(10, Action::Allocate, 1, 500, 0x9_0000_0000),
                ev(20, Action::Free, 0, 1000, 0x1_0000),
                ev(30, Action::Allocate, 0, 100, 0x1_0000 + 1000),
            ],
            dropped: 0,
            complete: true,
        }
    }

    #[test]
    fn the_address_axis_leaves_out_the_gaps() {
        let t = two_blocks();
        let a = Analysis::of(&t);
        let axis = AddressAxis::of(&a);
        // 0x10000..+1100 merged (adjacent), then 0x900000000..+500.
        assert_eq!(axis.segments(), 2);
        assert_eq!(axis.height, 1600);
        assert_eq!(axis.y(0, 0x1_0000), 0);
        assert_eq!(axis.y(0, 0x1_0000 + 1000), 1000);
        assert_eq!(axis.y(0, 0x9_0000_0000), 1100);
    }

    #[test]
    fn the_page_holds_its_data_and_no_raw_script_end() {
        let t = two_blocks();
        let a = Analysis::of(&t);
        let html = page(&t, &a, "x <run>", PageOptions::default());
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains("<title>x &lt;run&gt; — somalloc trace</title>"));
        // The thread's name cannot close the data's script element.
        assert_eq!(html.matches("</script>").count(), 2, "one data, one code element");
        assert!(html.contains("main\\u003c/script\\u003e"));
        assert!(html.contains("\"shown\":3"));
        // The first block: the largest, with its backtrace.
        assert!(
            html.contains("\"rects\":[[0,20,0,1000,1000,0,0,0,\"0x10000\",0,0]"),
            "{html}"
        );
        assert!(
            !html.contains("http://") && !html.contains("https://"),
            "no network"
        );
        assert!(!html.contains("__DATA__"));
    }

    #[test]
    fn live_bytes_are_the_maximum_of_each_bucket() {
        let t = two_blocks();
        let a = Analysis::of(&t);
        let o = PageOptions {
            buckets: 3,
            ..PageOptions::default()
        };
        let html = page(&t, &a, "x", o);
        // Total: 1000 at 0, 1500 at 10 (bucket 1); bucket 2 begins at 1500
        // (until the free at 20), then 500, then 600 at 30.
        assert!(
            html.contains(
                "\"name\":\"all streams\",\"total\":true,\"peak\":1500,\"values\":[1000,1500,1500]"
            ),
            "{html}"
        );
        // Stream 0xbb alone: 0, 500 from bucket 1 on.
        assert!(html.contains("\"values\":[0,500,500]"), "{html}");
    }

    #[test]
    fn base64_as_atob_reads_it() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }
}
