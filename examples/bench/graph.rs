//! The `graph_pipeline` workload: the seeds' pipeline (allocate 4 MiB, the
//! process kernel over it, free) captured once into a graph and replayed,
//! beside the same pipeline enqueued eagerly, for every allocator. Inside
//! the capture the allocation and the free become graph memory nodes (the
//! cache tier stands aside while its stream captures), so a replay costs one
//! launch instead of three host calls.

use somalloc::{CaptureMode, Event};

use crate::alloc::{with_alloc, Kind, StreamAlloc};
use crate::results::Row;
use crate::workloads::{measure, Ctx, Sample, Who, PIPELINE_FLOATS, PIPELINE_ITERS};

/// How the pipeline is issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Each iteration's three calls enqueued from the host.
    Eager,
    /// One capture, then one graph launch per iteration.
    Graph,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Eager => "eager",
            Mode::Graph => "graph",
        }
    }
}

pub fn graph_param(mode: Mode) -> String {
    format!("{PIPELINE_ITERS} x 4 MiB, {}", mode.name())
}

/// Measures both modes for every allocator; each graph row also carries its
/// ratio to the same allocator's eager row (`ratio_to_eager`).
pub fn run(ctx: &Ctx, rows: &mut Vec<Row>) -> somalloc::Result<()> {
    let all: Vec<Who> = Kind::ALL
        .iter()
        .filter(|k| k.runs("graph_pipeline"))
        .map(|&k| Who::Alloc(k))
        .collect();
    let params = [
        (graph_param(Mode::Eager), Mode::Eager),
        (graph_param(Mode::Graph), Mode::Graph),
    ];
    let mut r = measure(
        ctx,
        "graph_pipeline",
        &params,
        &all,
        |_| None,
        |c, mode, w| {
            let Who::Alloc(k) = w else {
                unreachable!("only allocators run this workload")
            };
            pipeline(c, k, mode)
        },
    )?;
    let eager_param = graph_param(Mode::Eager);
    let eager: Vec<(String, f64)> = r
        .iter()
        .filter(|x| x.param == eager_param)
        .map(|x| (x.allocator.clone(), x.ns_per_op))
        .collect();
    for row in r.iter_mut().filter(|x| x.param != eager_param) {
        if let Some((_, e)) = eager.iter().find(|(a, _)| *a == row.allocator) {
            row.extra.insert("ratio_to_eager".into(), row.ns_per_op / e);
        }
    }
    rows.extend(r);
    Ok(())
}

/// One repeat: `PIPELINE_ITERS` iterations between two events, after three
/// untimed ones; the figure is device-timed ns per iteration.
fn pipeline(ctx: &Ctx, kind: Kind, mode: Mode) -> somalloc::Result<Sample> {
    let bytes = PIPELINE_FLOATS * std::mem::size_of::<f32>();
    let (dev, stream, k) = (&ctx.dev, &ctx.stream, &ctx.kernels);
    let start = Event::with_timing(dev)?;
    let stop = Event::with_timing(dev)?;
    with_alloc!(kind, ctx.pool, ctx.stream, |a| {
        let once = || -> somalloc::Result<()> {
            let data = a.alloc(bytes)?;
            a.process(k, &data, bytes)?;
            a.free(data)
        };
        let ms = match mode {
            Mode::Eager => {
                for _ in 0..3 {
                    once()?;
                }
                stream.synchronize()?;
                start.record(stream)?;
                for _ in 0..PIPELINE_ITERS {
                    once()?;
                }
                stop.record(stream)?;
                stop.synchronize()?;
                start.elapsed_ms(&stop)?
            }
            Mode::Graph => {
                stream.begin_capture(CaptureMode::Global)?;
                let captured = once();
                // End the capture whatever happened inside it, so that the
                // stream is usable again; then report the first error.
                let graph = stream.end_capture();
                captured?;
                let exec = graph?.instantiate()?;
                exec.upload(stream)?;
                for _ in 0..3 {
                    exec.launch(stream)?;
                }
                stream.synchronize()?;
                start.record(stream)?;
                for _ in 0..PIPELINE_ITERS {
                    exec.launch(stream)?;
                }
                stop.record(stream)?;
                stop.synchronize()?;
                start.elapsed_ms(&stop)?
            }
        };
        let mut s = Sample::timed(
            std::time::Duration::from_secs_f64(f64::from(ms) / 1e3),
            PIPELINE_ITERS as u64,
        );
        s.extra.push(("loop_ms", f64::from(ms)));
        Ok(s)
    })
}
