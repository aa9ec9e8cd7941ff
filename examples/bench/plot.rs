//! The pictures: a bar chart per workload family, the thread-scaling line
//! chart, the allocation timeline, and the rows on borrowed streams beside
//! their owned-stream rows, as SVG (plotters' SVG backend needs no
//! fonts on the machine that draws: the viewer renders the text).

use std::path::{Path, PathBuf};

use plotters::coord::ranged1d::Ranged;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::results::{fmt_bytes, fmt_ns, Results, Row, RAW, SYNC};

/// Every picture a complete results file gives, in the order they are drawn.
pub const PICTURES: &[&str] = &[
    "pair.svg",
    "churn.svg",
    "threshold.svg",
    "synchronous.svg",
    "seed_pipeline.svg",
    "graph_pipeline.svg",
    "threads.svg",
    "timeline.svg",
    "host_pair.svg",
    "h2d.svg",
    "borrowed.svg",
    "replay.svg",
    "recording.svg",
];

const FONT: &str = "sans-serif";
const WIDTH: u32 = 1100;
const HEIGHT: u32 = 640;
const HEADER: u32 = 84;

type Out<T> = Result<T, String>;

fn e<E: std::fmt::Display>(err: E) -> String {
    format!("plot: {err}")
}

/// The colour of an allocator: fixed for the known ones so that every chart
/// agrees, then a palette for any later entries.
fn colour(name: &str, index: usize) -> RGBColor {
    match name {
        RAW => RGBColor(76, 114, 176),
        "somalloc" => RGBColor(221, 132, 82),
        "cache" => RGBColor(85, 168, 104),
        "cache+buf" => RGBColor(129, 114, 179),
        "arena" => RGBColor(23, 190, 207),
        "cache+arena" => RGBColor(188, 189, 34),
        SYNC => RGBColor(196, 78, 82),
        "raw (pair)" => RGBColor(150, 170, 210),
        // A borrowed stream: the owned colour lighter; with the promise,
        // darker.
        "raw@borrowed" => RGBColor(160, 180, 215),
        "somalloc@borrowed" => RGBColor(240, 190, 160),
        "somalloc@promised" => RGBColor(160, 85, 45),
        "cache@borrowed" => RGBColor(165, 215, 175),
        "cache@promised" => RGBColor(45, 110, 60),
        "cache+buf@borrowed" => RGBColor(195, 185, 225),
        "cache+buf@promised" => RGBColor(80, 65, 130),
        _ => {
            const MORE: [RGBColor; 5] = [
                RGBColor(100, 181, 205),
                RGBColor(204, 185, 116),
                RGBColor(147, 120, 96),
                RGBColor(218, 139, 195),
                RGBColor(140, 140, 140),
            ];
            MORE[index % MORE.len()]
        }
    }
}

/// A ratio to raw for a label: `×1.06`, and three places below 0.1
/// (`×0.044`), where two would round the cache tier's figures to nothing.
fn fmt_ratio(x: f64) -> String {
    if x < 0.1 {
        format!("×{x:.3}")
    } else {
        format!("×{x:.2}")
    }
}

/// Draws every picture `res` has data for into `out`; returns their paths.
pub fn plot_all(res: &Results, out: &Path) -> Out<Vec<PathBuf>> {
    std::fs::create_dir_all(out).map_err(|err| format!("plot: creating {}: {err}", out.display()))?;
    let mut written = Vec::new();
    for family in [
        "pair",
        "churn",
        "threshold",
        "synchronous",
        "seed_pipeline",
        "graph_pipeline",
        "host_pair",
        "h2d",
        "replay",
        "recording",
    ] {
        if let Some(spec) = bar_spec(res, family) {
            let path = out.join(format!("{family}.svg"));
            bar_chart(&path, &spec, res)?;
            written.push(path);
        }
    }
    if let Some(spec) = borrowed_spec(res) {
        let path = out.join("borrowed.svg");
        bar_chart(&path, &spec, res)?;
        written.push(path);
    }
    if res.rows.iter().any(|r| r.workload == "threads") {
        let path = out.join("threads.svg");
        threads_chart(&path, res)?;
        written.push(path);
    }
    if !res.timelines.is_empty() {
        let path = out.join("timeline.svg");
        timeline_chart(&path, res)?;
        written.push(path);
    }
    Ok(written)
}

/// Title line and a line saying where the numbers come from; a results
/// file with a label (the format test) says so in red on every picture.
fn header(area: &DrawingArea<SVGBackend, Shift>, title: &str, res: &Results) -> Out<()> {
    let m = &res.meta;
    area.draw_text(title, &(FONT, 22).into_font().color(&BLACK), (16, 10))
        .map_err(e)?;
    let sub = format!(
        "{} · {} runtime {} · somalloc {} · seed {} · {}{}",
        m.device,
        m.backend,
        m.runtime_version,
        m.somalloc_version,
        m.seed,
        m.statistic,
        if m.quick { " · --quick" } else { "" }
    );
    area.draw_text(
        &sub,
        &(FONT, 14).into_font().color(&RGBColor(90, 90, 90)),
        (16, 38),
    )
    .map_err(e)?;
    if !res.label.is_empty() {
        let style = (FONT, 16).into_font().color(&RED);
        area.draw_text(&res.label, &style, (16, 60)).map_err(e)?;
    }
    Ok(())
}

struct BarSpec {
    title: String,
    y_desc: String,
    groups: Vec<String>,
    series: Vec<String>,
    /// `[series][group]`: the bar's height.
    values: Vec<Vec<Option<f64>>>,
    /// `[series][group]`: the text above the bar, one entry a line (top
    /// line first), so that it stays about as narrow as the bar.
    notes: Vec<Vec<Option<Vec<String>>>>,
    log: bool,
}

fn bar_spec(res: &Results, family: &str) -> Option<BarSpec> {
    // The borrowed-stream rows have their own picture (`borrowed_spec`).
    let mut rows: Vec<(String, &Row)> = res
        .rows
        .iter()
        .filter(|r| r.workload == family && !is_borrowed(&r.allocator))
        .map(|r| (r.allocator.clone(), r))
        .collect();
    if rows.is_empty() {
        return None;
    }
    if family == "synchronous" {
        // The stream-ordered raw pair of the same size, for scale.
        let sizes: Vec<String> = rows.iter().map(|(_, r)| r.param.clone()).collect();
        rows.extend(
            res.rows
                .iter()
                .filter(|r| r.workload == "pair" && r.allocator == RAW && sizes.contains(&r.param))
                .map(|r| ("raw (pair)".to_string(), r)),
        );
    }
    let mut groups: Vec<String> = Vec::new();
    let mut series: Vec<String> = Vec::new();
    for (name, r) in &rows {
        if !groups.contains(&r.param) {
            groups.push(r.param.clone());
        }
        if !series.contains(name) {
            series.push(name.clone());
        }
    }
    let mut values = vec![vec![None; groups.len()]; series.len()];
    let mut notes = vec![vec![None; groups.len()]; series.len()];
    for (name, r) in &rows {
        let s = series.iter().position(|x| x == name)?;
        let g = groups.iter().position(|x| *x == r.param)?;
        values[s][g] = Some(r.ns_per_op);
        // The value, its ratio to raw (not on raw's own bars) and, in the
        // seed pipeline, the speedup over the synchronous loop.
        let mut note = vec![fmt_ns(r.ns_per_op)];
        // h2d: bandwidth bars (higher is better), against pageable memory.
        if let (true, Some(&gbs)) = (family == "h2d", r.extra.get("gb_per_s")) {
            values[s][g] = Some(gbs);
            note = vec![format!("{gbs:.1} GB/s")];
        }
        let reference = name == crate::results::reference_allocator(family);
        if let (Some(x), false) = (r.ratio_to_raw, name == RAW || name == "raw (pair)" || reference) {
            note.push(if family == "h2d" {
                format!("{:.1}× pageable", 1.0 / x)
            } else {
                fmt_ratio(x)
            });
        }
        if let (Some(x), true) = (r.extra.get("speedup"), r.allocator != SYNC) {
            note.push(format!("{x:.1}× sync"));
        }
        notes[s][g] = Some(note);
    }
    let present: Vec<f64> = values.iter().flatten().flatten().copied().collect();
    let max = present.iter().copied().fold(0.0, f64::max);
    let min = present.iter().copied().fold(f64::INFINITY, f64::min);
    let reps = res.meta.repeats;
    let (title, y_desc) = match family {
        "pair" => (
            "pair: allocate + free on one stream, by size".to_string(),
            "host ns per alloc+free pair",
        ),
        "churn" => (
            "churn: random alloc/free, ≤1000 live, sizes 2^U(8,22) B".to_string(),
            "host ns per operation",
        ),
        "threshold" => (
            "threshold: allocate 64 MiB + free + stream sync, by release threshold".to_string(),
            "host ns per iteration (log scale)",
        ),
        "synchronous" => (
            "synchronous cudaMalloc/cudaFree (hipMalloc/hipFree) vs the stream-ordered raw pair".to_string(),
            "host ns per pair (log scale)",
        ),
        "seed_pipeline" => (
            "seed pipeline: 100 × (allocate 4 MiB, kernel, free)".to_string(),
            "ns per iteration, events around the loop",
        ),
        "graph_pipeline" => (
            "graph pipeline: the seed pipeline eager vs captured once and replayed".to_string(),
            "ns per iteration, events around the loop",
        ),
        "host_pair" => (
            "host_pair: pinned host allocate + free: host pool (raw, somalloc, cache) vs cudaMallocHost/cudaHostAlloc"
                .to_string(),
            "host ns per alloc+free pair",
        ),
        "h2d" => (
            "h2d: one 64 MiB host-to-device copy, enqueued and waited for, by source memory".to_string(),
            "GB/s (host clock, higher is better)",
        ),
        "replay" => (
            "replay: recorded traces, their threads, streams, sizes and order, on every allocator".to_string(),
            "host ns per allocation or free",
        ),
        "recording" => (
            "recording: 64 KiB pairs on the cache tier, without and with a RecordingAdaptor".to_string(),
            "host ns per alloc+free pair",
        ),
        other => (other.to_string(), "ns per operation"),
    };
    let log = min > 0.0 && max / min > 20.0;
    let y_desc = if log && !y_desc.contains("log") {
        format!("{y_desc} (log scale)")
    } else {
        y_desc.to_string()
    };
    Some(BarSpec {
        title: format!("{title} — median of {reps}"),
        y_desc,
        groups,
        series,
        values,
        notes,
        log,
    })
}

/// A row of an allocator on a borrowed stream (`cache+buf@borrowed`).
fn is_borrowed(allocator: &str) -> bool {
    allocator.contains('@')
}

/// The borrowed-stream picture: the raw calls on a borrowed stream, and
/// somalloc's buffer on the pool and on the cache tier on a stream somalloc
/// made and on borrowed streams (without and with the promise), for each
/// pair size, churn and 8 threads; a log scale, each borrowed bar labelled
/// with its ratio to the same allocator's bar on an owned stream.
fn borrowed_spec(res: &Results) -> Option<BarSpec> {
    const SERIES: [&str; 7] = [
        "raw@borrowed",
        "somalloc",
        "somalloc@borrowed",
        "somalloc@promised",
        "cache+buf",
        "cache+buf@borrowed",
        "cache+buf@promised",
    ];
    if !res.rows.iter().any(|r| is_borrowed(&r.allocator)) {
        return None;
    }
    let shown = |r: &&Row| match r.workload.as_str() {
        "pair" | "churn" => true,
        "threads" => r.extra.get("threads") == Some(&8.0),
        _ => false,
    };
    let mut groups: Vec<(String, String)> = Vec::new();
    for r in res.rows.iter().filter(shown) {
        let g = (r.workload.clone(), r.param.clone());
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    let series: Vec<String> = SERIES.iter().map(|s| s.to_string()).collect();
    let find = |(w, p): &(String, String), a: &str| {
        res.rows
            .iter()
            .find(|r| r.workload == *w && r.param == *p && r.allocator == a)
    };
    let mut values = vec![vec![None; groups.len()]; series.len()];
    let mut notes = vec![vec![None; groups.len()]; series.len()];
    for (s, name) in SERIES.iter().enumerate() {
        let base = name.split('@').next().unwrap_or(name);
        for (g, group) in groups.iter().enumerate() {
            let Some(r) = find(group, name) else { continue };
            values[s][g] = Some(r.ns_per_op);
            if let (true, Some(b)) = (is_borrowed(name), find(group, base)) {
                notes[s][g] = Some(vec![fmt_ratio(r.ns_per_op / b.ns_per_op)]);
            }
        }
    }
    let groups = groups
        .into_iter()
        .map(|(w, p)| match w.as_str() {
            "pair" => format!("pair {p}"),
            "threads" => "8 threads (aggr.)".to_string(),
            _ => w,
        })
        .collect();
    Some(BarSpec {
        title: format!(
            "borrowed streams: DeviceBuffer on the pool and on the cache tier, streams made by somalloc vs \
             borrowed (no promise, promise) — median of {}",
            res.meta.repeats
        ),
        y_desc: "host ns per pair / per operation (log scale); label: × the owned-stream bar".to_string(),
        groups,
        series,
        values,
        notes,
        log: true,
    })
}

fn bar_chart(path: &Path, spec: &BarSpec, res: &Results) -> Out<()> {
    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let (top, body) = root.split_vertically(HEADER);
    header(&top, &spec.title, res)?;
    let present: Vec<f64> = spec.values.iter().flatten().flatten().copied().collect();
    let max = present.iter().copied().fold(0.0, f64::max).max(1.0);
    let min = present.iter().copied().fold(f64::INFINITY, f64::min).max(1e-3);
    let n = spec.groups.len() as f64;
    let builder = |b: &mut ChartBuilder<'_, '_, SVGBackend>| {
        b.margin(16)
            .margin_right(24)
            .x_label_area_size(44)
            .y_label_area_size(92);
    };
    let fmt = |v: &f64| fmt_ns(*v);
    if spec.log {
        let lo = min / 3.0;
        let mut b = ChartBuilder::on(&body);
        builder(&mut b);
        let mut chart = b
            .build_cartesian_2d(0f64..n, (lo..max * 4.0).log_scale())
            .map_err(e)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(spec.y_desc.as_str())
            .y_label_formatter(&fmt)
            .label_style((FONT, 14))
            .draw()
            .map_err(e)?;
        draw_bars(&mut chart, spec, lo)?;
        group_labels(&root, &chart, spec, lo)
    } else {
        let mut b = ChartBuilder::on(&body);
        builder(&mut b);
        let mut chart = b.build_cartesian_2d(0f64..n, 0f64..max * 1.2).map_err(e)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(spec.y_desc.as_str())
            .y_label_formatter(&fmt)
            .label_style((FONT, 14))
            .draw()
            .map_err(e)?;
        draw_bars(&mut chart, spec, 0.0)?;
        group_labels(&root, &chart, spec, 0.0)
    }?;
    root.present().map_err(e)
}

fn draw_bars<'a, DB, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Y>>,
    spec: &BarSpec,
    base: f64,
) -> Out<()>
where
    DB: DrawingBackend + 'a,
    Y: Ranged<ValueType = f64>,
{
    let width = 0.8 / spec.series.len() as f64;
    for (s, name) in spec.series.iter().enumerate() {
        let c = colour(name, s);
        let x0 = |g: usize| g as f64 + 0.1 + s as f64 * width;
        let bars: Vec<_> = spec.values[s]
            .iter()
            .enumerate()
            .filter_map(|(g, v)| {
                v.map(|v| Rectangle::new([(x0(g), base), (x0(g) + width * 0.92, v)], c.filled()))
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(e)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()));
        let style = (FONT, 12)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Center, VPos::Bottom));
        // Lines stacked upwards from the bar's top, the last line lowest.
        let style = &style;
        let texts: Vec<_> = spec.values[s]
            .iter()
            .zip(&spec.notes[s])
            .enumerate()
            .filter_map(|(g, (v, t))| Some(((x0(g) + width * 0.46, *v.as_ref()?), t.as_ref()?)))
            .flat_map(|(at, lines)| {
                let n = lines.len() as i32;
                lines.iter().enumerate().map(move |(i, line)| {
                    let dy = -2 - 13 * (n - 1 - i as i32);
                    EmptyElement::at(at) + Text::new(line.clone(), (0, dy), style.clone())
                })
            })
            .collect();
        chart.draw_series(texts).map_err(e)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(e)
}

/// The group names under the x axis (plotters' own labels would fall on
/// round numbers of the f64 axis, not on the groups).
fn group_labels<DB, Y>(
    root: &DrawingArea<DB, Shift>,
    chart: &ChartContext<'_, DB, Cartesian2d<RangedCoordf64, Y>>,
    spec: &BarSpec,
    base: f64,
) -> Out<()>
where
    DB: DrawingBackend,
    Y: Ranged<ValueType = f64>,
{
    let style = (FONT, 16)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Top));
    for (g, label) in spec.groups.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(g as f64 + 0.5, base));
        root.draw_text(label, &style, (x, y + 10)).map_err(e)?;
    }
    Ok(())
}

fn threads_chart(path: &Path, res: &Results) -> Out<()> {
    let rows: Vec<&Row> = res
        .rows
        .iter()
        .filter(|r| r.workload == "threads" && !is_borrowed(&r.allocator))
        .collect();
    let threads = |r: &Row| r.extra.get("threads").copied().unwrap_or(f64::NAN);
    let max_t = rows.iter().map(|r| threads(r)).fold(1.0, f64::max);
    let max_y = rows.iter().map(|r| r.ns_per_op).fold(1.0, f64::max);
    let min_y = rows
        .iter()
        .map(|r| r.ns_per_op)
        .fold(f64::INFINITY, f64::min)
        .max(1e-3);
    // The cache tier's figures sit one or two orders of magnitude below the
    // driver's: a log scale keeps both readable.
    let log = max_y / min_y > 20.0;

    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let (top, body) = root.split_vertically(HEADER);
    let title = format!(
        "threads: T threads, each its own stream, 64 KiB pairs — aggregate ns per pair (wall / all pairs), median of {}",
        res.meta.repeats
    );
    header(&top, &title, res)?;
    let mut b = ChartBuilder::on(&body);
    b.margin(16)
        .margin_right(24)
        .x_label_area_size(44)
        .y_label_area_size(92);
    let x_range = 0f64..max_t + 1.0;
    let y_desc = if log {
        "aggregate host ns per alloc+free pair (log scale)"
    } else {
        "aggregate host ns per alloc+free pair"
    };
    let xfmt = |x: &f64| format!("{x:.0}");
    let yfmt = |v: &f64| fmt_ns(*v);
    let x_labels = (max_t as usize + 2).min(20);
    // The same mesh on either axis type (their formatting traits differ).
    macro_rules! mesh {
        ($chart:expr) => {
            $chart
                .configure_mesh()
                .x_labels(x_labels)
                .x_label_formatter(&xfmt)
                .y_label_formatter(&yfmt)
                .x_desc("threads")
                .y_desc(y_desc)
                .label_style((FONT, 14))
                .draw()
                .map_err(e)?
        };
    }
    if log {
        let mut chart = b
            .build_cartesian_2d(x_range, (min_y / 2.0..max_y * 2.0).log_scale())
            .map_err(e)?;
        mesh!(chart);
        draw_threads(chart, &rows)?;
    } else {
        let mut chart = b.build_cartesian_2d(x_range, 0f64..max_y * 1.2).map_err(e)?;
        mesh!(chart);
        draw_threads(chart, &rows)?;
    }
    root.present().map_err(e)
}

fn draw_threads<'a, DB, Y>(
    mut chart: ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Y>>,
    rows: &[&Row],
) -> Out<()>
where
    DB: DrawingBackend + 'a,
    Y: Ranged<ValueType = f64>,
{
    let threads = |r: &Row| r.extra.get("threads").copied().unwrap_or(f64::NAN);
    let mut series: Vec<&str> = Vec::new();
    for r in rows {
        if !series.contains(&r.allocator.as_str()) {
            series.push(&r.allocator);
        }
    }
    // Where each point's label goes, in pixels below the point: off the
    // side its line leaves by (below a rising line, above a falling one,
    // level at the last point); then, at a thread count, top to bottom,
    // each pushed down below the one above where they would overlap.
    const LINE: i32 = 15;
    const OFF: i32 = 11;
    let py = |r: &Row| chart.backend_coord(&(threads(r), r.ns_per_op)).1;
    let side = |r: &Row| {
        let next = rows
            .iter()
            .filter(|o| o.allocator == r.allocator && threads(o) > threads(r))
            .min_by(|a, b| threads(a).total_cmp(&threads(b)));
        match next {
            Some(n) if py(n) <= py(r) => OFF,
            Some(_) => -OFF,
            None => 0,
        }
    };
    let mut label_dy: Vec<i32> = vec![0; rows.len()];
    let mut xs: Vec<f64> = rows
        .iter()
        .map(|r| threads(r))
        .filter(|x| x.is_finite())
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    for x in xs {
        let mut at: Vec<(usize, i32, i32)> = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| threads(r) == x)
            .map(|(i, r)| (i, py(r), py(r) + side(r)))
            .collect();
        at.sort_by_key(|&(_, _, want)| want);
        let mut next_free = i32::MIN;
        for (i, py, want) in at {
            let y = want.max(next_free);
            label_dy[i] = y - py;
            next_free = y + LINE;
        }
    }
    for (s, name) in series.iter().enumerate() {
        let c = colour(name, s);
        let mut pts: Vec<(f64, f64, i32, Option<f64>)> = rows
            .iter()
            .zip(&label_dy)
            .filter(|(r, _)| r.allocator == *name && threads(r).is_finite())
            .map(|(r, dy)| (threads(r), r.ns_per_op, *dy, r.ratio_to_raw))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let line: Vec<(f64, f64)> = pts.iter().map(|p| (p.0, p.1)).collect();
        chart
            .draw_series(LineSeries::new(line.clone(), c.stroke_width(3)))
            .map_err(e)?
            .label(*name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], c.stroke_width(3)));
        chart
            .draw_series(line.iter().map(|&p| Circle::new(p, 5, c.filled())))
            .map_err(e)?;
        let style = (FONT, 13)
            .into_font()
            .color(&c)
            .pos(Pos::new(HPos::Left, VPos::Center));
        chart
            .draw_series(pts.iter().map(|&(x, y, dy, ratio)| {
                let text = match ratio {
                    Some(q) if *name != RAW => format!("{} {}", fmt_ns(y), fmt_ratio(q)),
                    _ => fmt_ns(y),
                };
                EmptyElement::at((x, y)) + Text::new(text, (10, dy), style.clone())
            }))
            .map_err(e)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(e)
}

fn timeline_chart(path: &Path, res: &Results) -> Out<()> {
    let panels = res.timelines.len() as u32;
    let height = HEADER + panels * 380;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let (top, body) = root.split_vertically(HEADER);
    header(
        &top,
        "allocation timeline: the pool's used and reserved bytes (the arena's live and mapped bytes; the cache tier's \
         cached bytes) while the workload runs",
        res,
    )?;
    let used_c = RGBColor(76, 114, 176);
    let reserved_c = RGBColor(196, 78, 82);
    let cached_c = RGBColor(85, 168, 104);
    for (area, tl) in body
        .split_evenly((res.timelines.len(), 1))
        .iter()
        .zip(&res.timelines)
    {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let t_max = tl.points.iter().map(|p| p.t_ns as f64 / 1e6).fold(1e-3, f64::max);
        let y_max = tl
            .points
            .iter()
            .map(|p| mib(p.used.max(p.reserved)))
            .fold(1.0, f64::max);
        let peak = tl.points.iter().map(|p| p.reserved).max().unwrap_or(0);
        // An arena's timeline: its mapped bytes for reserved, its live
        // blocks (cached ones included) for used.
        let (reserved_w, used_w) = if tl.allocator.contains("arena") {
            ("mapped", "handed out")
        } else {
            ("reserved", "used")
        };
        let mut caption = format!(
            "{} on {}: {} samples, one every {} ops; ",
            tl.workload,
            tl.allocator,
            tl.points.len(),
            tl.every_ops,
        );
        match tl.peaks {
            // The pool's own peaks, over the whole run.
            Some(p) => {
                caption += &format!(
                    "peak {reserved_w} {} = {:.2} × peak {used_w}, {:.2} × peak live {}",
                    fmt_bytes(p.pool_reserved as f64),
                    p.pool_reserved as f64 / p.pool_used.max(1) as f64,
                    p.pool_reserved as f64 / p.live.max(1) as f64,
                    fmt_bytes(p.live as f64),
                );
                if let (Some(c), Some(cap)) = (p.cached, p.cache_cap) {
                    caption += &format!(
                        "; cached ≤ {} (cap {})",
                        fmt_bytes(c as f64),
                        fmt_bytes(cap as f64)
                    );
                }
            }
            None => caption += &format!("peak {reserved_w} {}", fmt_bytes(peak as f64)),
        }
        let mut chart = ChartBuilder::on(area)
            .caption(caption, (FONT, 16))
            .margin(12)
            .margin_right(24)
            .x_label_area_size(40)
            .y_label_area_size(80)
            // Headroom above the lines for the legend.
            .build_cartesian_2d(0f64..t_max * 1.02, 0f64..y_max * 1.35)
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc("ms since the workload started (host clock)")
            .y_desc("MiB")
            .label_style((FONT, 13))
            .draw()
            .map_err(e)?;
        let has_cached = tl.points.iter().any(|p| p.cached.is_some());
        let lines = [
            (
                "reserved",
                reserved_c,
                (|p: &crate::results::TimelinePoint| Some(p.reserved)) as fn(_) -> Option<u64>,
            ),
            ("used (cached blocks included)", used_c, |p| Some(p.used)),
            ("cached in the tier", cached_c, |p| p.cached),
        ];
        for (name, c, pick) in lines {
            if name.starts_with("cached") && !has_cached {
                continue;
            }
            let name = if has_cached {
                name
            } else {
                name.split(" (").next().unwrap_or(name)
            };
            let name = name
                .replacen("reserved", reserved_w, 1)
                .replacen("used", used_w, 1);
            let pts = tl
                .points
                .iter()
                .filter_map(|p| Some((p.t_ns as f64 / 1e6, mib(pick(p)?))));
            chart
                .draw_series(LineSeries::new(pts, c.stroke_width(2)))
                .map_err(e)?
                .label(name)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], c.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font((FONT, 14))
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()
            .map_err(e)?;
    }
    root.present().map_err(e)
}
