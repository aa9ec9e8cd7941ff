//! somalloc inside a cudarc program: cudarc streams and a cudarc kernel,
//! somalloc buffers, no `unsafe` glue beyond the kernel launch itself.
//!
//! ```text
//! cargo run --features cudarc --example cudarc
//! ```
//!
//! The kernel is PTX text loaded with cudarc's own module loading (the
//! driver compiles it for the GPU at load time: no nvcc or NVRTC needed).
//! The example allocates a buffer on stream A, gives it to stream B, scales
//! it there with the kernel, copies the result into a cudarc `CudaSlice`, and
//! shows that a launch on a stream the buffer was not given to is refused.
//! With no GPU it prints one line and exits.

use std::panic::catch_unwind;
use std::process::ExitCode;

use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use somalloc::interop::cudarc::Launch;
use somalloc::{Device, DeviceBuffer, Error, Stream};

/// `scale(float* data, unsigned n, float factor)`: `data[i] *= factor` for
/// `i < n`, one thread per element.
const SCALE_PTX: &str = r#"
.version 7.0
.target sm_75
.address_size 64

.visible .entry scale(
    .param .u64 scale_data,
    .param .u32 scale_n,
    .param .f32 scale_factor
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [scale_data];
    ld.param.u32 %r1, [scale_n];
    ld.param.f32 %f1, [scale_factor];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.u32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f2, [%rd4];
    mul.f32 %f3, %f2, %f1;
    st.global.f32 [%rd4], %f3;
DONE:
    ret;
}
"#;

const N: u32 = 1 << 20;

fn main() -> ExitCode {
    // somalloc first: no runtime or no device is a typed error, while
    // cudarc's loader panics when the driver library is missing.
    match Device::get(0) {
        Ok(_) => {}
        Err(e @ (Error::RuntimeNotFound { .. } | Error::NoDevice { .. })) => {
            println!("somalloc cudarc example: no GPU, nothing to run ({e})");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("somalloc cudarc example: error: {e}");
            return ExitCode::FAILURE;
        }
    }
    let ctx = match catch_unwind(|| CudaContext::new(0)) {
        Ok(Ok(ctx)) => ctx,
        Ok(Err(e)) => {
            eprintln!("somalloc cudarc example: cudarc cannot open device 0: {e}");
            return ExitCode::FAILURE;
        }
        Err(_) => {
            println!("somalloc cudarc example: no GPU (cudarc could not load the CUDA driver library)");
            return ExitCode::SUCCESS;
        }
    };
    match run(&ctx) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("somalloc cudarc example: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(ctx: &std::sync::Arc<CudaContext>) -> Result<(), Box<dyn std::error::Error>> {
    let scale = ctx
        .load_module(Ptx::from_src(SCALE_PTX))?
        .load_function("scale")?;
    let (a, b) = (ctx.new_stream()?, ctx.new_stream()?);

    // cudarc streams as somalloc streams: safe, and the Stream keeps them alive.
    let stream_a = Stream::from_cudarc(&a)?;
    let stream_b = Stream::from_cudarc(&b)?;
    // `DeviceBuffer::new` (and `from_slice`) on device 0: from a cache tier
    // over a pool of somalloc's own that keeps freed memory. Process-wide
    // for device 0; cudarc's own allocations keep using the vendor's pool.
    let tier = somalloc::fast_path(&stream_a.device())?;

    // Allocate and fill on A; B may use the buffer after `use_on`.
    let host: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let mut buf = DeviceBuffer::from_slice(&host, &stream_a)?;
    buf.use_on(&stream_b)?;

    // Launch the cudarc kernel on B with the somalloc buffer as its argument.
    let factor = 2.0f32;
    let mut launch = Launch::new(&b, &scale)?;
    launch.arg(&mut buf).arg(&N).arg(&factor);
    // SAFETY: `scale` takes (float*, unsigned, float), and one thread per
    // element stays within the N floats of `buf`.
    unsafe { launch.launch(LaunchConfig::for_num_elems(N)) }?;
    drop(launch);

    // Copy into a cudarc slice of B. The copy runs on A's queue after B's
    // work so far, and B waits for it before reading.
    let mut out = b.alloc_zeros::<f32>(N as usize)?;
    buf.copy_to_cudarc(&mut out)?;
    let result = b.clone_dtoh(&out)?;
    let wrong = result
        .iter()
        .enumerate()
        .filter(|&(i, &v)| v != i as f32 * factor)
        .count();
    println!("scaled {N} floats on stream B: {wrong} wrong");

    // A third stream was never given the buffer: the launch is refused and
    // nothing is enqueued.
    let c = ctx.new_stream()?;
    let mut refused = Launch::new(&c, &scale)?;
    refused.arg(&mut buf).arg(&N).arg(&factor);
    // SAFETY: as above (and it is refused before anything is enqueued).
    match unsafe { refused.launch(LaunchConfig::for_num_elems(N)) } {
        Err(Error::InvalidArgument { why, .. }) => println!("launch on stream C refused: {why}"),
        other => return Err(format!("the launch on stream C was not refused: {other:?}").into()),
    }
    drop(refused);

    drop(buf); // freed on A after B's work (use_on)
    a.synchronize()?;
    println!("after the free: {}", tier.stats()); // the block waits in A's cache
    if wrong != 0 {
        return Err(format!("{wrong} elements are wrong").into());
    }
    Ok(())
}
