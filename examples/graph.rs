//! A small pipeline (allocate 4 MiB, run a kernel over 1<<20 floats, free)
//! captured once into a graph and replayed, against the same pipeline
//! enqueued eagerly each iteration: with the raw stream-ordered calls, and
//! through somalloc's `DeviceBuffer` on the fast path. Each loop is timed
//! with events around it on the device; the figures are microseconds per
//! iteration.
//!
//! ```text
//! cargo run --release --features cudarc --example graph
//! ```
//!
//! The kernel is PTX text loaded with cudarc's module loading, as in the
//! `cudarc` example (the driver compiles it at load time: no nvcc needed).
//! In the graph the allocation and the free are graph memory nodes: each
//! replay allocates and frees them again, at the same address, without a
//! host call per node. With no GPU (or a runtime without graphs) it prints
//! one line and exits.

use std::error::Error as StdError;
use std::panic::catch_unwind;
use std::process::ExitCode;
use std::sync::Arc;

use cudarc::driver::{result, CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use somalloc::interop::cudarc::Launch;
use somalloc::{CaptureMode, Device, DeviceBuffer, Error, Event, Stream};

type Result<T> = std::result::Result<T, Box<dyn StdError>>;

/// `process(float* data, unsigned n)`: `data[i] = sqrt(i)` for `i < n`, one
/// thread per element.
const PROCESS_PTX: &str = r#"
.version 7.0
.target sm_75
.address_size 64

.visible .entry process(
    .param .u64 process_data,
    .param .u32 process_n
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<3>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [process_data];
    ld.param.u32 %r1, [process_n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.u32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvt.rn.f32.u32 %f1, %r5;
    sqrt.rn.f32 %f2, %f1;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.f32 [%rd4], %f2;
DONE:
    ret;
}
"#;

const N: u32 = 1 << 20;
const ITERATIONS: usize = 1000;

fn main() -> ExitCode {
    // somalloc first: no runtime or no device is a typed error, while
    // cudarc's loader panics when the driver library is missing.
    match Device::get(0) {
        Ok(_) => {}
        Err(e @ (Error::RuntimeNotFound { .. } | Error::NoDevice { .. })) => {
            println!("somalloc graph: nothing to run ({e})");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("somalloc graph: error: {e}");
            return ExitCode::FAILURE;
        }
    }
    let ctx = match catch_unwind(|| CudaContext::new(0)) {
        Ok(Ok(ctx)) => ctx,
        Ok(Err(e)) => {
            eprintln!("somalloc graph: cudarc cannot open device 0: {e}");
            return ExitCode::FAILURE;
        }
        Err(_) => {
            println!("somalloc graph: nothing to run (cudarc could not load the CUDA driver library)");
            return ExitCode::SUCCESS;
        }
    };
    match run(&ctx) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => match e.downcast_ref::<Error>() {
            Some(e @ Error::Unsupported { .. }) => {
                println!("somalloc graph: nothing to run ({e})");
                ExitCode::SUCCESS
            }
            _ => {
                eprintln!("somalloc graph: error: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

/// Microseconds per iteration of `body`, run `ITERATIONS` times between two
/// events on `stream`.
fn time(dev: &Device, stream: &Stream, mut body: impl FnMut() -> Result<()>) -> Result<f64> {
    let (start, stop) = (Event::with_timing(dev)?, Event::with_timing(dev)?);
    start.record(stream)?;
    for _ in 0..ITERATIONS {
        body()?;
    }
    stop.record(stream)?;
    stop.synchronize()?;
    Ok(f64::from(start.elapsed_ms(&stop)?) * 1000.0 / ITERATIONS as f64)
}

/// Runs `process` over `buf` on `cs`.
fn process(cs: &Arc<CudaStream>, f: &CudaFunction, buf: &mut DeviceBuffer<f32>) -> Result<()> {
    let mut launch = Launch::new(cs, f)?;
    launch.arg(buf).arg(&N);
    // SAFETY: `process` takes (float*, unsigned), and one thread per element
    // stays within the N floats of `buf`.
    unsafe { launch.launch(LaunchConfig::for_num_elems(N)) }?;
    Ok(())
}

fn run(ctx: &Arc<CudaContext>) -> Result<()> {
    ctx.bind_to_thread()?;
    let f = ctx
        .load_module(Ptx::from_src(PROCESS_PTX))?
        .load_function("process")?;
    let cs = ctx.new_stream()?;
    let stream = Stream::from_cudarc(&cs)?;
    // SAFETY: this program captures the stream only through
    // `Stream::begin_capture`, so somalloc need not ask the driver about
    // captures on every allocation and free.
    unsafe { stream.assume_captured_only_by_somalloc() };
    let dev = stream.device();
    println!(
        "{} ({} runtime {})",
        dev.name()?,
        Device::backend(),
        Device::runtime_version()?
    );
    // `DeviceBuffer::new` on this device: from a cache tier over a pool of
    // somalloc's own (process-wide for device 0; other pools are untouched).
    let tier = somalloc::fast_path(&dev)?;
    let bytes = N as usize * std::mem::size_of::<f32>();

    // Eager, raw calls: cuMemAllocAsync (the device's current pool), the
    // kernel, cuMemFreeAsync.
    let raw_once = || -> Result<()> {
        // SAFETY: an allocation on `cs`, used by the kernel on `cs` and freed
        // on `cs` right after it.
        let ptr = unsafe { result::malloc_async(cs.cu_stream(), bytes) }?;
        let mut args = cs.launch_builder(&f);
        args.arg(&ptr).arg(&N);
        // SAFETY: as in `process`.
        unsafe { args.launch(LaunchConfig::for_num_elems(N)) }?;
        // SAFETY: from malloc_async, freed once, after its last use on `cs`.
        unsafe { result::free_async(ptr, cs.cu_stream()) }?;
        Ok(())
    };
    // Eager, through somalloc: from the stream's cache after the first.
    let buffer_once = || -> Result<()> {
        let mut buf = DeviceBuffer::<f32>::new(N as usize, &stream)?;
        process(&cs, &f, &mut buf)?;
        Ok(buf.release()?)
    };
    // Warm both (module load, first pool reservation).
    raw_once()?;
    buffer_once()?;
    stream.synchronize()?;

    // The same pipeline, captured once. Under capture the cache tier stands
    // aside: the allocation becomes a graph allocation node of its pool.
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
    let out = (|| -> Result<DeviceBuffer<f32>> {
        let mut o = DeviceBuffer::<f32>::new(N as usize, &stream)?;
        process(&cs, &f, &mut o)?;
        Ok(o)
    })();
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
        return Err(format!("{wrong} of {N} results of the replayed kernel are wrong").into());
    }
    drop((out, check_exec, check_graph));

    let raw_us = time(&dev, &stream, raw_once)?;
    let buffer_us = time(&dev, &stream, buffer_once)?;
    let graph_us = time(&dev, &stream, || Ok(exec.launch(&stream)?))?;
    println!("{ITERATIONS} iterations of (allocate 4 MiB, kernel over {N} floats, free), µs per iteration:");
    println!("  eager, raw stream-ordered calls  {raw_us:8.2}");
    println!(
        "  eager, DeviceBuffer (fast path)  {buffer_us:8.2}  ({:.2} × raw)",
        buffer_us / raw_us
    );
    println!(
        "  graph replay (captured once)     {graph_us:8.2}  ({:.2} × raw)",
        graph_us / raw_us
    );
    println!("  {}", dev.graph_mem_stats()?);
    println!("  {}", tier.stats());
    drop((exec, graph));
    stream.synchronize()?;
    Ok(())
}
