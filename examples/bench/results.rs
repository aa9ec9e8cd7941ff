//! The benchmark's results: what `results.json` holds, how ratios and checks
//! are derived from the rows, and the table printed on stdout.
//!
//! Nothing here touches the GPU: `--plot-only` reads a results file back
//! into these types.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// Format tag written into every results file.
///
/// `/2` added the cache-tier rows' figures (only new keys of `extra`), the
/// timelines' `cached` bytes and `peaks`, and `Check::info`; all optional,
/// so a `/1` file reads as a `/2` file without them.
pub const FORMAT: &str = "somalloc-bench/2";
/// Every format tag this program reads.
pub const READS: &[&str] = &["somalloc-bench/1", FORMAT];
/// The allocator every row is compared with.
pub const RAW: &str = "raw";
/// The synchronous baseline's allocator name (`SyncBuffer`).
pub const SYNC: &str = "sync";
/// The stream cache through the resource trait.
pub const CACHE: &str = "cache";
/// `DeviceBuffer::new_with` on the stream cache.
pub const CACHE_BUF: &str = "cache+buf";
/// The raw calls on a borrowed stream: the baseline of somalloc's buffer on
/// the pool on such a stream.
pub const RAW_BORROWED: &str = "raw@borrowed";

/// One run of the benchmark.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    /// Always [`FORMAT`].
    pub format: String,
    /// Empty for a measured run; otherwise says what the numbers are (the
    /// format test writes placeholders and says so here and on every plot).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label: String,
    /// Where and how the numbers were taken.
    pub meta: Meta,
    /// One row per (workload, parameter, allocator).
    pub rows: Vec<Row>,
    /// (time, used, reserved) samples taken while a workload ran.
    #[serde(default)]
    pub timelines: Vec<Timeline>,
    /// The acceptance targets, evaluated on this run.
    #[serde(default)]
    pub checks: Vec<Check>,
}

/// Where and how the numbers were taken.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Meta {
    /// somalloc's crate version.
    pub somalloc_version: String,
    /// `cuda` or `rocm`.
    pub backend: String,
    /// The runtime's version number (e.g. 13000).
    pub runtime_version: i32,
    /// The device's name.
    pub device: String,
    /// Seed of the RNG (churn's operation sequence).
    pub seed: u64,
    /// Whether this was a `--quick` run.
    pub quick: bool,
    /// How many times each measurement was repeated.
    pub repeats: usize,
    /// How the repeats are reduced to one figure.
    pub statistic: String,
    /// What each allocator name means in this run.
    pub allocators: BTreeMap<String, String>,
    /// Seconds since the Unix epoch when the run started.
    pub unix_time: u64,
    /// Wall-clock seconds the whole run took.
    pub wall_seconds: f64,
}

/// One figure: a workload with one parameter, on one allocator.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    /// Workload family (`pair`, `churn`, ...; see WORKLOADS.md).
    pub workload: String,
    /// The parameter within the family (`64 KiB`, `8 threads`, ...).
    pub param: String,
    /// Allocator name (`raw`, `somalloc`, `cache`, `cache+buf`, `cudarc`,
    /// `cudarc-noev`, `arena`, `cache+arena`, `sync`; `@borrowed` and
    /// `@promised` on borrowed streams).
    pub allocator: String,
    /// Host nanoseconds per operation: the median over the repeats.
    pub ns_per_op: f64,
    /// `ns_per_op` over the raw allocator's for the same workload and
    /// parameter, measured in the same run (for `synchronous`: the raw
    /// `pair` of the same size).
    pub ratio_to_raw: Option<f64>,
    /// Operations timed in one repeat.
    pub ops: u64,
    /// `ns_per_op` of every repeat, in the order they ran.
    pub samples: Vec<f64>,
    /// Other figures of the row (medians over the repeats): e.g.
    /// `reserved_after_bytes`, `loop_ms`, `speedup`, `threads`, `bytes`;
    /// on the cache tier's rows `cache_hits`, `cache_misses` (allocations
    /// served from the cache / sent upstream since the tier was made) and
    /// `cached_bytes` (in the caches when the loop ended).
    #[serde(default)]
    pub extra: BTreeMap<String, f64>,
    /// What the reader should know about this row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Pool statistics sampled while a workload ran.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Timeline {
    /// The workload that ran (e.g. `churn`).
    pub workload: String,
    /// The allocator it ran on.
    pub allocator: String,
    /// A sample was taken every this many operations.
    pub every_ops: u64,
    /// The samples, in time order.
    pub points: Vec<TimelinePoint>,
    /// Peaks over the whole run (not only at the samples); absent in `/1`
    /// files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peaks: Option<Peaks>,
}

/// Peaks of a [`Timeline`]'s run, which started from a trimmed pool with its
/// peaks reset (an arena allocator's: from a trimmed arena with its peaks
/// reset, `pool_used` and `pool_reserved` being the arena's live and mapped
/// peaks).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Peaks {
    /// The pool's `used_peak` after the run: bytes handed out by the pool,
    /// blocks sitting in a cache tier included (the pool sees them as used).
    pub pool_used: u64,
    /// The pool's `reserved_peak` after the run.
    pub pool_reserved: u64,
    /// The most bytes the workload itself held live at once (the requested
    /// sizes, counted after every operation).
    pub live: u64,
    /// The most bytes in the cache tier at a sample (cache allocators only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached: Option<u64>,
    /// The cache tier's cap on one stream's cached bytes: the smaller of
    /// `per_stream_cap` and `total_cap` (cache allocators only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_cap: Option<u64>,
}

/// One sample of a [`Timeline`] (an arena allocator's: the arena's live
/// bytes as `used`, its mapped bytes as `reserved`).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct TimelinePoint {
    /// Host nanoseconds since the workload started.
    pub t_ns: u64,
    /// Operations done so far.
    pub ops: u64,
    /// The pool's `used_current` in bytes.
    pub used: u64,
    /// The pool's `reserved_current` in bytes.
    pub reserved: u64,
    /// Bytes in the cache tier (cache allocators only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached: Option<u64>,
}

/// An acceptance target evaluated on the run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Check {
    /// What is checked.
    pub name: String,
    /// The measured value.
    pub value: f64,
    /// The target, in words (`<= 1.03`, `within 5% of 1`).
    pub target: String,
    /// Whether the value meets it (always true for an `info` line).
    pub pass: bool,
    /// A figure printed for reference beside the checks, with no target.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub info: bool,
}

/// The median of `v` (the mean of the middle two for an even count); NaN
/// when empty.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

/// Which row a row is compared with: the raw allocator's row for the same
/// workload and parameter, except `synchronous`, which is compared with the
/// raw stream-ordered `pair` of the same size.
fn reference_key(row: &Row) -> (&str, &str) {
    match row.workload.as_str() {
        "synchronous" => ("pair", row.param.as_str()),
        w => (w, row.param.as_str()),
    }
}

/// The allocator a workload's rows are compared with: `raw`, except `h2d`,
/// whose copies are compared with the copy from pageable memory, and
/// `recording`, whose recorded pairs are compared with the cache tier's.
pub fn reference_allocator(workload: &str) -> &'static str {
    match workload {
        "h2d" => crate::host::PAGEABLE,
        "recording" => CACHE,
        _ => RAW,
    }
}

/// Fills `ratio_to_raw` of every row that has a reference in `rows`.
pub fn fill_ratios(rows: &mut [Row]) {
    let raw: Vec<(String, String, f64)> = rows
        .iter()
        .filter(|r| r.allocator == reference_allocator(&r.workload))
        .map(|r| (r.workload.clone(), r.param.clone(), r.ns_per_op))
        .collect();
    for row in rows.iter_mut() {
        let (w, p) = reference_key(row);
        row.ratio_to_raw = raw
            .iter()
            .find(|(rw, rp, _)| rw == w && rp == p)
            .map(|(_, _, ns)| row.ns_per_op / ns);
    }
}

/// The targets for somalloc's buffer on the vendor pool (the allocators in
/// `checked`): at most 1.03× the raw calls at every pair size and at every
/// thread count, and a seed-pipeline speedup within 5% of raw's; churn for
/// reference.
pub fn compute_checks(rows: &[Row], checked: &[&str]) -> Vec<Check> {
    let mut checks = Vec::new();
    for name in checked {
        for row in rows.iter().filter(|r| r.allocator == *name) {
            let Some(ratio) = row.ratio_to_raw else { continue };
            let label = format!("{} {}: {name} / raw", row.workload, row.param);
            match row.workload.as_str() {
                "pair" | "threads" => checks.push(Check::at_most(label, ratio, 1.03, "")),
                "churn" => checks.push(Check::info(label, ratio)),
                _ => {}
            }
        }
        let speedup = |alloc: &str| {
            rows.iter()
                .find(|r| r.workload == "seed_pipeline" && r.allocator == alloc)
                .and_then(|r| r.extra.get("speedup").copied())
        };
        if let (Some(mine), Some(raw)) = (speedup(name), speedup(RAW)) {
            let v = mine / raw;
            checks.push(Check {
                name: format!("seed_pipeline: {name} speedup / raw speedup"),
                value: v,
                target: "within 5% of 1".into(),
                pass: (v - 1.0).abs() <= 0.05,
                info: false,
            });
        }
    }
    checks
}

/// The stream cache tier's targets, for the tier allocators in `tiered`
/// ([`CACHE`]: the `StreamCache` through the resource trait; [`CACHE_BUF`]:
/// `DeviceBuffer::new_with` on it):
///
/// * host ns: `cache` at most 20 per pair at every size; `cache+buf` at
///   most 25 per pair and at most 1.3× `cache` at every size, at most 35
///   per churn operation, at most 8 per pair in aggregate with 8 threads;
/// * the churn rows' hit rate (hits / (hits + misses) of the tier made for
///   the run) at least 95 %;
///
/// and, from every churn timeline with peaks (each started from a trimmed
/// pool with its peaks reset):
///
/// * a tier's pool reserved peak at most the raw calls' pool reserved peak
///   in the same run;
/// * the tier's cached bytes at the samples never above its cap;
/// * for reference: the pool's reserved peak over its used peak (what the
///   pool handed out, cached blocks included) and over the most bytes the
///   workload itself held live (requested sizes).
pub fn compute_tier_checks(rows: &[Row], timelines: &[Timeline], tiered: &[&str]) -> Vec<Check> {
    let mut checks = Vec::new();
    let find = |workload: &str, param: &str, alloc: &str| {
        rows.iter()
            .find(|r| r.workload == workload && r.param == param && r.allocator == alloc)
    };
    for name in tiered {
        let buffer = *name == CACHE_BUF;
        for row in rows.iter().filter(|r| r.allocator == *name) {
            let ns = row.ns_per_op;
            match row.workload.as_str() {
                "pair" => {
                    let limit = if buffer { 25.0 } else { 20.0 };
                    checks.push(Check::at_most(
                        format!("pair {}: {name} ns", row.param),
                        ns,
                        limit,
                        " ns",
                    ));
                    if let (true, Some(cache)) = (buffer, find("pair", &row.param, CACHE)) {
                        checks.push(Check::at_most(
                            format!("pair {}: {name} / {CACHE}", row.param),
                            ns / cache.ns_per_op,
                            1.3,
                            "",
                        ));
                    }
                }
                "churn" => {
                    let label = format!("churn: {name} ns/op");
                    checks.push(if buffer {
                        Check::at_most(label, ns, 35.0, " ns")
                    } else {
                        Check::info(label, ns)
                    });
                    let hits = row.extra.get("cache_hits").copied();
                    let misses = row.extra.get("cache_misses").copied();
                    if let (Some(h), Some(m)) = (hits, misses) {
                        checks.push(Check::at_least(
                            format!("churn: {name} hit rate"),
                            h / (h + m).max(1.0),
                            0.95,
                        ));
                    }
                }
                "threads" if row.extra.get("threads") == Some(&8.0) => {
                    let label = format!("threads 8: {name} ns/pair, aggregate");
                    checks.push(if buffer {
                        Check::at_most(label, ns, 8.0, " ns")
                    } else {
                        Check::info(label, ns)
                    });
                }
                _ => {}
            }
        }
    }
    let raw_reserved = timelines
        .iter()
        .find(|t| t.workload == "churn" && t.allocator == RAW)
        .and_then(|t| t.peaks)
        .map(|p| p.pool_reserved);
    // The arena's timelines have their own checks (`arena::checks`).
    for tl in timelines
        .iter()
        .filter(|t| t.workload == "churn" && !t.allocator.contains("arena"))
    {
        let Some(p) = tl.peaks else { continue };
        let name = &tl.allocator;
        let tier = tiered.contains(&name.as_str());
        if let (true, Some(raw)) = (tier, raw_reserved) {
            checks.push(Check::at_most(
                format!("churn {name}: pool reserved peak / raw's reserved peak"),
                p.pool_reserved as f64 / raw.max(1) as f64,
                1.0,
                "",
            ));
        }
        checks.push(Check::info(
            format!("churn {name}: pool reserved peak / pool used peak"),
            p.pool_reserved as f64 / p.pool_used.max(1) as f64,
        ));
        checks.push(Check::info(
            format!("churn {name}: pool reserved peak / live peak"),
            p.pool_reserved as f64 / p.live.max(1) as f64,
        ));
        checks.extend(cached_under_cap(name, &p));
    }
    checks
}

/// An allocator of the borrowed-stream rows: its name, the name of the
/// allocator it repeats on a stream somalloc made, and whether the stream
/// carries the promise that it is captured only through somalloc.
pub struct Borrowed<'a> {
    pub name: &'a str,
    pub base: &'a str,
    pub promised: bool,
}

/// A churn timeline's cached bytes at most the cache's cap (where a cache
/// sampled them).
pub fn cached_under_cap(name: &str, p: &Peaks) -> Option<Check> {
    let (cached, cap) = (p.cached?, p.cache_cap?);
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    Some(Check::at_most(
        format!("churn {name}: cached MiB, peak of the samples"),
        mib(cached),
        mib(cap),
        " MiB",
    ))
}

/// The targets of the rows on borrowed streams (the owned rows' checks,
/// with the borrowed-stream targets):
///
/// * no promise: `somalloc` at most 1.10× the raw calls on the same kind of
///   borrowed stream (`raw@borrowed`) at every size and thread count (churn,
///   and the ratio to `raw` on somalloc's own stream, for reference);
///   `cache+buf` at most 60 ns per pair
///   at every size and at most 12 ns per pair in aggregate with 8 threads
///   (churn, its ratio to `cache` and `cache`'s figures for reference);
/// * with the promise: every row at most 1.15× its base's row (the same
///   allocator on a stream somalloc made) in the same run;
/// * either way, the churn rows' hit rate at least 95 % on the tier.
pub fn compute_borrowed_checks(rows: &[Row], borrowed: &[Borrowed]) -> Vec<Check> {
    let mut checks = Vec::new();
    let find = |workload: &str, param: &str, alloc: &str| {
        rows.iter()
            .find(|r| r.workload == workload && r.param == param && r.allocator == alloc)
    };
    for b in borrowed {
        let name = b.name;
        for row in rows.iter().filter(|r| r.allocator == name) {
            let (w, p, ns) = (row.workload.as_str(), row.param.as_str(), row.ns_per_op);
            if b.promised {
                if let Some(base) = find(w, p, b.base) {
                    let at = if w == "churn" {
                        w.to_string()
                    } else {
                        format!("{w} {p}")
                    };
                    checks.push(Check::at_most(
                        format!("{at}: {name} / {}", b.base),
                        ns / base.ns_per_op,
                        1.15,
                        "",
                    ));
                }
            } else {
                match (b.base, w) {
                    ("somalloc", "pair" | "threads" | "churn") => {
                        let at = if w == "churn" {
                            w.to_string()
                        } else {
                            format!("{w} {p}")
                        };
                        if let Some(raw) = find(w, p, RAW_BORROWED) {
                            let ratio = ns / raw.ns_per_op;
                            let label = format!("{at}: {name} / {RAW_BORROWED}");
                            checks.push(if w == "churn" {
                                Check::info(label, ratio)
                            } else {
                                Check::at_most(label, ratio, 1.10, "")
                            });
                        }
                        if let Some(ratio) = row.ratio_to_raw {
                            checks.push(Check::info(format!("{at}: {name} / raw"), ratio));
                        }
                    }
                    (CACHE_BUF, "pair") => {
                        checks.push(Check::at_most(format!("pair {p}: {name} ns"), ns, 60.0, " ns"));
                        let cache = borrowed
                            .iter()
                            .find(|o| o.base == CACHE && o.promised == b.promised)
                            .and_then(|o| find(w, p, o.name));
                        if let Some(cache) = cache {
                            checks.push(Check::info(
                                format!("pair {p}: {name} / {}", cache.allocator),
                                ns / cache.ns_per_op,
                            ));
                        }
                    }
                    (CACHE_BUF, "threads") if row.extra.get("threads") == Some(&8.0) => {
                        checks.push(Check::at_most(
                            format!("threads 8: {name} ns/pair, aggregate"),
                            ns,
                            12.0,
                            " ns",
                        ));
                    }
                    (CACHE, "pair") => checks.push(Check::info(format!("pair {p}: {name} ns"), ns)),
                    (CACHE, "threads") if row.extra.get("threads") == Some(&8.0) => {
                        checks.push(Check::info(format!("threads 8: {name} ns/pair, aggregate"), ns));
                    }
                    (CACHE | CACHE_BUF, "churn") => {
                        checks.push(Check::info(format!("churn: {name} ns/op"), ns))
                    }
                    _ => {}
                }
            }
            if w == "churn" {
                let hits = row.extra.get("cache_hits").copied();
                let misses = row.extra.get("cache_misses").copied();
                if let (Some(h), Some(m)) = (hits, misses) {
                    checks.push(Check::at_least(
                        format!("churn: {name} hit rate"),
                        h / (h + m).max(1.0),
                        0.95,
                    ));
                }
            }
        }
    }
    checks
}

impl Check {
    /// `value` against the target `<= limit`.
    pub fn at_most(name: String, value: f64, limit: f64, unit: &str) -> Check {
        Check {
            name,
            value,
            target: format!("<= {limit}{unit}"),
            pass: value <= limit,
            info: false,
        }
    }

    /// `value` against the target `>= limit`.
    fn at_least(name: String, value: f64, limit: f64) -> Check {
        Check {
            name,
            value,
            target: format!(">= {limit}"),
            pass: value >= limit,
            info: false,
        }
    }

    /// A figure for reference, with no target.
    pub fn info(name: String, value: f64) -> Check {
        Check {
            name,
            value,
            target: "(reference)".into(),
            pass: true,
            info: true,
        }
    }
}

/// `n` bytes for people: `256 B`, `64 KiB`, `1.5 MiB`, `2.0 GiB`.
pub fn fmt_bytes(n: f64) -> String {
    const K: f64 = 1024.0;
    if n < K {
        format!("{n:.0} B")
    } else if n < K * K {
        trim(format!("{:.1}", n / K)) + " KiB"
    } else if n < K * K * K {
        trim(format!("{:.1}", n / (K * K))) + " MiB"
    } else {
        trim(format!("{:.2}", n / (K * K * K))) + " GiB"
    }
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Nanoseconds for people, three significant digits: `612 ns`, `2.41 µs`,
/// `81.3 µs`, `7.31 ms`.
pub fn fmt_ns(ns: f64) -> String {
    if !ns.is_finite() {
        return "-".into();
    }
    let (v, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "µs")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    let digits = if v >= 100.0 || unit == "ns" {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$} {unit}")
}

fn notes(row: &Row) -> String {
    let mut parts = Vec::new();
    let hits = row.extra.get("cache_hits").copied();
    let misses = row.extra.get("cache_misses").copied();
    if let (Some(h), Some(m)) = (hits, misses) {
        let rate = if h + m > 0.0 { 100.0 * h / (h + m) } else { 0.0 };
        parts.push(format!("tier: {rate:.1}% hits ({h:.0} hits, {m:.0} misses)"));
    }
    for (key, &v) in &row.extra {
        match key.as_str() {
            "cache_hits" | "cache_misses" if hits.is_some() && misses.is_some() => {}
            "cached_bytes" => parts.push(format!("cached at end: {}", fmt_bytes(v))),
            "reserved_after_bytes" => parts.push(format!("reserved after: {}", fmt_bytes(v))),
            "loop_ms" => parts.push(format!("loop {v:.3} ms (events)")),
            "host_loop_ms" => parts.push(format!("host {v:.3} ms")),
            "speedup" => parts.push(format!("speedup {v:.2}x")),
            "peak_reserved_bytes" => parts.push(format!("peak reserved: {}", fmt_bytes(v))),
            "live_peak_bytes" => parts.push(format!("live peak: {}", fmt_bytes(v))),
            "fragmentation" => parts.push(format!("reserved/live {v:.3}")),
            "recorded_reserved_bytes" => parts.push(format!("recorded run reserved: {}", fmt_bytes(v))),
            "reserved_vs_recorded" => parts.push(format!("reserved/recorded {v:.3}")),
            "ns_per_event_over_cache" => parts.push(format!("{v:.1} ns per event over cache")),
            "gb_per_s" => parts.push(format!("{v:.1} GB/s")),
            "arena_pool_allocations" => parts.push(format!("{v:.0} served by the pool instead of the arena")),
            "x_faster_than_mallochost" => parts.push(format!("{v:.0}x faster than mallochost")),
            "x_faster_than_hostalloc" => parts.push(format!("{v:.0}x faster than hostalloc")),
            // Already in the parameter column.
            "threads" | "bytes" | "threshold" => {}
            other => parts.push(format!("{other} {v}")),
        }
    }
    if let Some(n) = &row.note {
        parts.push(n.clone());
    }
    parts.join("; ")
}

/// Relative spread of the repeats: (max - min) / median.
fn spread(row: &Row) -> f64 {
    let lo = row.samples.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = row.samples.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (hi - lo) / row.ns_per_op
}

/// The table printed on stdout (and written to `table.txt`).
pub fn table(res: &Results) -> String {
    let mut s = String::new();
    let m = &res.meta;
    if !res.label.is_empty() {
        let _ = writeln!(s, "*** {} ***", res.label);
    }
    let _ = writeln!(
        s,
        "somalloc {} bench: {} (backend {}, runtime {}), seed {}{}",
        m.somalloc_version,
        m.device,
        m.backend,
        m.runtime_version,
        m.seed,
        if m.quick { ", --quick" } else { "" }
    );
    let _ = writeln!(
        s,
        "figures: host ns per operation, {}; ratio: / raw in the same run (h2d: / pageable, recording: / cache); spread: (max-min)/median",
        m.statistic
    );
    for (name, what) in &m.allocators {
        let _ = writeln!(s, "  {name:<21}{what}");
    }
    let _ = writeln!(
        s,
        "{:<14} {:<26} {:<20} {:>12} {:>8} {:>7}  notes",
        "workload", "param", "allocator", "ns/op", "x raw", "spread"
    );
    let _ = writeln!(s, "{}", "-".repeat(109));
    // Grouped by workload, then parameter, in the order they first appear;
    // allocators keep their order.
    let first = |f: &dyn Fn(&Row) -> bool| res.rows.iter().position(f).unwrap_or(0);
    let mut rows: Vec<&Row> = res.rows.iter().collect();
    rows.sort_by_key(|r| {
        (
            first(&|x: &Row| x.workload == r.workload),
            first(&|x: &Row| x.workload == r.workload && x.param == r.param),
        )
    });
    let mut last = "";
    for row in rows {
        if !last.is_empty() && last != row.workload {
            let _ = writeln!(s);
        }
        last = &row.workload;
        let ratio = row.ratio_to_raw.map_or("-".to_string(), |r| format!("{r:.3}"));
        let _ = writeln!(
            s,
            "{:<14} {:<26} {:<20} {:>12.1} {:>8} {:>6.1}%  {}",
            row.workload,
            row.param,
            row.allocator,
            row.ns_per_op,
            ratio,
            spread(row) * 100.0,
            notes(row)
        );
    }
    if !res.checks.is_empty() {
        let _ = writeln!(s);
        for c in &res.checks {
            let _ = writeln!(
                s,
                "check {:<66} {:>9.4}  target {:<15} {}",
                c.name,
                c.value,
                c.target,
                match (c.info, c.pass) {
                    (true, _) => "info",
                    (false, true) => "PASS",
                    (false, false) => "FAIL",
                }
            );
        }
    }
    s
}
