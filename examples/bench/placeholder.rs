//! A results file of placeholder values (not measurements, and labelled
//! so) with every workload, parameter and allocator: what the format test
//! writes, reads back and draws.

use crate::alloc::Kind;
use crate::graph::{graph_param, Mode};
use crate::host;
use crate::output::allocators;
use crate::results::{self, Meta, Peaks, Results, Row, Timeline, TimelinePoint, FORMAT, RAW, SYNC};
use crate::workloads::{
    churn_param, pipeline_param, size_param, threads_param, threshold_param, MIB, PAIR_SIZES, THREADS,
};

/// A results file with every workload, parameter and allocator, filled with
/// placeholder values (not measurements) and labelled so.
pub fn placeholder_results(seed: u64) -> Results {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut rows = Vec::new();
    let mut row = |workload: &str, param: String, allocator: &str, ns: f64, extra: &[(&str, f64)]| {
        let samples: Vec<f64> = (0..3).map(|_| ns * (0.98 + 0.04 * rng.f64())).collect();
        rows.push(Row {
            workload: workload.into(),
            param,
            allocator: allocator.into(),
            ns_per_op: results::median(&samples),
            ratio_to_raw: None,
            ops: 1000,
            samples,
            extra: extra.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            note: Some("format test".into()),
        });
    };
    // Placeholder scales: the raw pair at 600 ns, somalloc about the same,
    // the cache tier some 10 and 15 ns (cache+buf), cudarc's slices some
    // 1200 and 600 ns (without events).
    // The borrowed-stream rows: their base's figure, a little more.
    let scale = |k: Kind| match k {
        Kind::Raw => 1.0,
        Kind::Somalloc => 1.01,
        Kind::Cache => 0.017,
        Kind::CacheBuf => 0.025,
        Kind::Cudarc => 2.0,
        Kind::CudarcNoEvents => 1.0,
        Kind::RawBorrowed => 1.04,
        Kind::SomallocBorrowed => 1.06,
        Kind::CacheBorrowed => 0.06,
        Kind::CacheBufBorrowed => 0.08,
        Kind::SomallocPromised => 1.02,
        Kind::CachePromised => 0.018,
        Kind::CacheBufPromised => 0.026,
        Kind::Arena => 0.2,
        Kind::CacheArena => 0.022,
        Kind::ArenaBorrowed => 0.24,
        Kind::CacheArenaBorrowed => 0.07,
    };
    let tier_extra = |hits: f64| [("cache_hits", hits), ("cache_misses", 1.0), ("cached_bytes", 4e6)];
    row(
        "seed_pipeline",
        pipeline_param(),
        SYNC,
        70_000.0,
        &[("loop_ms", 7.0), ("speedup", 1.0)],
    );
    for (i, k) in Kind::ALL.iter().filter(|k| k.runs("seed_pipeline")).enumerate() {
        let f = 1.0 + 0.01 * i as f64;
        let mut extra = vec![("loop_ms", 0.5 * f), ("speedup", 14.0 / f)];
        if k.tiered() {
            extra.extend(tier_extra(102.0));
        }
        row("seed_pipeline", pipeline_param(), k.name(), 5_000.0 * f, &extra);
        row(
            "graph_pipeline",
            graph_param(Mode::Eager),
            k.name(),
            5_300.0 * f,
            &[("loop_ms", 0.53 * f)],
        );
        row(
            "graph_pipeline",
            graph_param(Mode::Graph),
            k.name(),
            4_900.0 * f,
            &[("loop_ms", 0.49 * f), ("ratio_to_eager", 0.92)],
        );
    }
    // Every allocator, the cudarc peers too (whatever this build has).
    for k in Kind::ALL {
        let (n, f) = (k.name(), scale(k));
        let te = tier_extra(1000.0);
        let tier: &[(&str, f64)] = if k.tiered() { &te } else { &[] };
        for &b in &PAIR_SIZES {
            let extra = [&[("bytes", b as f64)][..], tier].concat();
            row("pair", size_param(b), n, 600.0 * f, &extra);
        }
        row("churn", churn_param(), n, 800.0 * f.max(0.02), tier);
        for &t in &THREADS {
            let extra = [&[("threads", t as f64)][..], tier].concat();
            let contention = if k.tiered() {
                1.0 / t as f64
            } else {
                (t as f64).sqrt()
            };
            row("threads", threads_param(t), n, 600.0 * f * contention, &extra);
        }
        if k.runs_threshold() {
            for (th, ns) in [(0u64, 500_000.0), (u64::MAX, 5_000.0)] {
                let reserved = if th == 0 { 0.0 } else { (64 * MIB) as f64 };
                let extra = [("threshold", th as f64), ("reserved_after_bytes", reserved)];
                row("threshold", threshold_param(th), n, ns * f, &extra);
            }
        }
    }
    for &b in &PAIR_SIZES {
        row(
            "synchronous",
            size_param(b),
            SYNC,
            60_000.0,
            &[("bytes", b as f64)],
        );
    }
    // Pinned host memory (host.rs): the pool's pairs, the synchronous calls
    // some hundred times dearer (more for large sizes), and the copies.
    for &b in &host::HOST_SIZES {
        let pin = 20_000.0 + b as f64 / 200.0;
        let allocators = [
            (RAW, 650.0),
            ("somalloc", 670.0),
            ("cache", 25.0),
            ("cache+buf", 60.0),
            (host::MALLOCHOST, pin),
            (host::HOSTALLOC, pin * 1.02),
        ];
        for (name, ns) in allocators {
            row("host_pair", size_param(b), name, ns, &[("bytes", b as f64)]);
        }
    }
    for (name, gbs) in [
        ("somalloc", 52.0),
        (host::MALLOCHOST, 52.5),
        (host::PAGEABLE, 18.0),
    ] {
        let bytes = host::H2D_BYTES as f64;
        row(
            "h2d",
            host::h2d_param(),
            name,
            bytes / gbs,
            &[("bytes", bytes), ("gb_per_s", gbs)],
        );
    }
    // Recorded traces (replay.rs): two traces on every replay allocator,
    // and the recording's cost over the cache tier.
    for (trace, ops, live) in [
        ("pipeline.trace", 200.0, 4.0 * MIB as f64),
        ("stress.trace", 16_000.0, 60.0 * MIB as f64),
    ] {
        for (i, k) in crate::replay::REPLAY_KINDS.into_iter().enumerate() {
            let reserved = live * (1.1 + 0.07 * i as f64);
            let extra = [
                ("peak_reserved_bytes", reserved),
                ("live_peak_bytes", live),
                ("fragmentation", reserved / live),
            ];
            row(
                "replay",
                format!("{trace} ({ops} ops)"),
                k.name(),
                700.0 * scale(k).max(0.03),
                &extra,
            );
        }
    }
    row("recording", "64 KiB pairs".into(), "cache", 10.0, &[]);
    row(
        "recording",
        "64 KiB pairs".into(),
        crate::replay::CACHE_REC,
        60.0,
        &[("ns_per_event_over_cache", 25.0), ("events_dropped", 0.0)],
    );
    results::fill_ratios(&mut rows);
    let timelines: Vec<Timeline> = Kind::ALL
        .into_iter()
        .filter(|k| k.has_timeline())
        .map(|k| {
            let (mut used, mut reserved) = (0u64, 0u64);
            let mut live_peak = 0u64;
            let mut cached_peak = 0u64;
            let points: Vec<TimelinePoint> = (0..200u64)
                .map(|i| {
                    used = (used as f64 + (rng.f64() - 0.45) * 8e6).max(0.0) as u64;
                    reserved = reserved.max(used + (used >> 3));
                    let cached = k.tiered().then_some(used / 3);
                    live_peak = live_peak.max(used - cached.unwrap_or(0));
                    cached_peak = cached_peak.max(cached.unwrap_or(0));
                    TimelinePoint {
                        t_ns: i * 1_000_000,
                        ops: i * 100,
                        used,
                        reserved,
                        cached,
                    }
                })
                .collect();
            let used_peak = points.iter().map(|p| p.used).max().unwrap_or(0);
            Timeline {
                workload: "churn".into(),
                allocator: k.name().to_string(),
                every_ops: 100,
                peaks: Some(Peaks {
                    pool_used: used_peak,
                    pool_reserved: reserved,
                    live: live_peak,
                    cached: k.tiered().then_some(cached_peak),
                    cache_cap: k.tiered().then_some(256 << 20),
                }),
                points,
            }
        })
        .collect();
    let mut checks = results::compute_checks(&rows, &["somalloc"]);
    let tiered: Vec<&str> = Kind::ALL
        .iter()
        .filter(|k| k.tier_checked())
        .map(|k| k.name())
        .collect();
    checks.extend(results::compute_tier_checks(&rows, &timelines, &tiered));
    checks.extend(results::compute_borrowed_checks(&rows, &crate::alloc::borrowed()));
    checks.extend(crate::arena::checks(&rows, &timelines));
    checks.extend(crate::replay::checks(&rows));
    Results {
        format: FORMAT.into(),
        label: "format test: placeholder values, not measurements".into(),
        meta: Meta {
            somalloc_version: env!("CARGO_PKG_VERSION").into(),
            backend: "format-test".into(),
            runtime_version: 0,
            device: "no device (format test)".into(),
            seed,
            quick: false,
            repeats: 3,
            statistic: "median of 3 repeats".into(),
            allocators: allocators("cuda"),
            unix_time: 0,
            wall_seconds: 0.0,
        },
        rows,
        timelines,
        checks,
    }
}
