//! The seeds' pipeline (allocate 4 MiB, run a kernel over 1<<20 floats,
//! free) captured once into a graph and replayed, against the same pipeline
//! enqueued eagerly each iteration: with the raw stream-ordered calls, and
//! through somalloc's `DeviceBuffer`. Each loop is timed with events around
//! it on the device; the figures are microseconds per iteration.
//!
//! ```text
//! cargo run --release --features cuda,kernels --example graph
//! ```
//!
//! In the graph the allocation and the free are graph memory nodes: each
//! replay allocates and frees them again, at the same address, without a
//! host call per node. With no GPU (or a runtime without graphs) it prints
//! one line and exits.

use std::process::ExitCode;

use somalloc::testkit::{raw, RawRange, TestKernels};
use somalloc::{CaptureMode, Device, DeviceBuffer, Error, Event, InvalidReason, MemPool, Stream};

const N: usize = 1 << 20;
const ITERATIONS: usize = 1000;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ (Error::RuntimeNotFound { .. } | Error::NoDevice { .. } | Error::Unsupported { .. })) => {
            println!("somalloc graph: nothing to run ({e})");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("somalloc graph: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Microseconds per iteration of `body`, run `ITERATIONS` times between two
/// events on `stream`.
fn time(
    dev: &Device,
    stream: &Stream,
    mut body: impl FnMut() -> somalloc::Result<()>,
) -> somalloc::Result<f64> {
    let (start, stop) = (Event::with_timing(dev)?, Event::with_timing(dev)?);
    start.record(stream)?;
    for _ in 0..ITERATIONS {
        body()?;
    }
    stop.record(stream)?;
    stop.synchronize()?;
    Ok(f64::from(start.elapsed_ms(&stop)?) * 1000.0 / ITERATIONS as f64)
}

fn run() -> somalloc::Result<()> {
    let dev = Device::get(0)?;
    println!(
        "{} ({} runtime {})",
        dev.name()?,
        Device::backend(),
        Device::runtime_version()?
    );
    let pool = MemPool::default_for(&dev)?;
    pool.set_release_threshold(usize::MAX)?; // process-wide: the default pool is shared
    let kernels = TestKernels::load(&dev)?;
    let stream = Stream::new(&dev)?;
    let bytes = N * std::mem::size_of::<f32>();

    // Eager, raw calls: cudaMallocFromPoolAsync, the kernel, cudaFreeAsync.
    let raw_once = || -> somalloc::Result<()> {
        let ptr = raw::malloc_from_pool_async(bytes, &pool, &stream)?;
        // SAFETY: a live allocation of `bytes` on `stream`, freed on `stream`
        // right after the kernel.
        let range = unsafe { RawRange::new(ptr, bytes, &stream) };
        kernels.process(&range, &stream)?;
        // SAFETY: from malloc_from_pool_async, freed once, after its last use
        // on `stream`.
        unsafe { raw::free_async(ptr, &stream) }
    };
    // Eager, through somalloc.
    let buffer_once = || -> somalloc::Result<()> {
        let buf = DeviceBuffer::<f32>::new_in(N, &pool, &stream)?;
        kernels.process(&buf, &stream)?;
        buf.release()
    };
    // Warm both (module load, first pool reservation).
    raw_once()?;
    buffer_once()?;
    stream.synchronize()?;

    // The same pipeline, captured once.
    stream.begin_capture(CaptureMode::ThreadLocal)?;
    let captured = buffer_once();
    let graph = stream.end_capture();
    captured?;
    let graph = graph?;
    let exec = graph.instantiate()?;
    exec.upload(&stream)?;
    exec.launch(&stream)?;
    stream.synchronize()?;

    // A check that the captured kernel really runs: the same graph with the
    // buffer kept as its output.
    stream.begin_capture(CaptureMode::ThreadLocal)?;
    let out = DeviceBuffer::<f32>::new_in(N, &pool, &stream).and_then(|o| {
        kernels.process(&o, &stream)?;
        Ok(o)
    });
    // The capture is ended whatever happened inside it.
    let check_graph = stream.end_capture();
    let out = out?;
    let check_graph = check_graph?;
    let check_exec = check_graph.instantiate()?;
    check_exec.launch(&stream)?;
    let host = out.to_vec()?;
    let wrong = host
        .iter()
        .enumerate()
        .filter(|(i, v)| (**v - (*i as f32).sqrt()).abs() > 1e-3)
        .count();
    if wrong != 0 {
        return Err(Error::InvalidArgument {
            reason: InvalidReason::Other,
            why: format!("{wrong} of {N} results of the replayed kernel are wrong"),
        });
    }
    drop((out, check_exec, check_graph));

    let raw_us = time(&dev, &stream, raw_once)?;
    let buffer_us = time(&dev, &stream, buffer_once)?;
    let graph_us = time(&dev, &stream, || exec.launch(&stream))?;
    println!("{ITERATIONS} iterations of (allocate 4 MiB, kernel over {N} floats, free), µs per iteration:");
    println!("  eager, raw stream-ordered calls  {raw_us:8.2}");
    println!(
        "  eager, DeviceBuffer              {buffer_us:8.2}  ({:.2} × raw)",
        buffer_us / raw_us
    );
    println!(
        "  graph replay (captured once)     {graph_us:8.2}  ({:.2} × raw)",
        graph_us / raw_us
    );
    println!("  {}", dev.graph_mem_stats()?);
    drop((exec, graph));
    stream.synchronize()?;
    Ok(())
}
