//! cudarc interop on a GPU: streams from cudarc, somalloc buffers and
//! views as arguments of cudarc kernel launches, copies with `CudaSlice`,
//! a cuBLAS GEMM on somalloc buffers through cudarc's pointer traits
//! (skipped, with one SKIP line, where cudarc cannot load libcublas), and a
//! capture through somalloc on a cudarc stream. The kernels
//! are somalloc's test kernels (feature `kernels`), loaded through cudarc's
//! own module loading from the image build.rs embeds. Without a GPU every
//! test prints one SKIP line.

use std::io::Write;
use std::panic::catch_unwind;
use std::sync::Arc;

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use somalloc::interop::cudarc::Launch;
use somalloc::testkit::{pattern_byte, TestKernels};
use somalloc::{
    CacheConfig, CacheTier, CaptureMode, Device, DeviceBuffer, Error, Event, InvalidReason, MemPool,
    MemoryResource, PoolProperties, Stream,
};

/// The test kernels, as build.rs compiled them for this crate.
static IMAGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/somalloc_kernels.bin"));

const BLOCK: u32 = 256;

struct Env {
    dev: Device,
    ctx: Arc<CudaContext>,
    fill: CudaFunction,
    verify: CudaFunction,
    process: CudaFunction,
    pool: MemPool,
}

fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Device 0 through somalloc first (a typed error when there is no GPU),
/// then cudarc, whose loader panics when the driver library is missing.
fn setup(test: &str) -> Option<Env> {
    let dev = match Device::get(0) {
        Ok(dev) => dev,
        Err(e @ (Error::RuntimeNotFound { .. } | Error::NoDevice { .. })) => {
            say(&format!("SKIP {test}: no GPU ({e})"));
            return None;
        }
        Err(e) => panic!("{test}: unexpected error opening device 0: {e}"),
    };
    let ctx = match catch_unwind(|| CudaContext::new(0)) {
        Ok(Ok(ctx)) => ctx,
        Ok(Err(e)) => panic!("{test}: somalloc sees device 0 but cudarc cannot open it: {e}"),
        Err(_) => {
            say(&format!(
                "SKIP {test}: no GPU (cudarc could not load the CUDA driver library)"
            ));
            return None;
        }
    };
    let module = ctx
        .load_module(Ptx::from_binary(IMAGE.to_vec()))
        .expect("load the test kernels through cudarc");
    let get = |name: &str| module.load_function(name).expect(name);
    let pool = MemPool::create(&dev, PoolProperties::default()).expect("create pool");
    pool.set_release_threshold(usize::MAX).expect("threshold");
    Some(Env {
        fill: get("somalloc_fill"),
        verify: get("somalloc_verify"),
        process: get("somalloc_process"),
        dev,
        ctx,
        pool,
    })
}

fn grid(n: u64) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(u64::from(BLOCK)).clamp(1, 4096) as u32, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl Env {
    fn stream(&self) -> Arc<CudaStream> {
        self.ctx.new_stream().expect("new cudarc stream")
    }

    /// `somalloc_fill(buf, len, seed)` on `stream`.
    fn fill(&self, stream: &Arc<CudaStream>, buf: &mut DeviceBuffer<u8>, seed: u32) -> somalloc::Result<()> {
        let n = buf.len() as u64;
        let mut launch = Launch::new(stream, &self.fill)?;
        launch.arg(&mut *buf).arg(&n).arg(&seed);
        // SAFETY: (unsigned char*, unsigned long long, unsigned int) is the
        // kernel's signature; it stays within `n` bytes.
        unsafe { launch.launch(grid(n)) }.map(|_| ())
    }

    /// Bytes of `buf` that differ from the pattern of `seed`, counted by
    /// `somalloc_verify` on `stream` (into a cudarc slice on that stream).
    fn mismatches(
        &self,
        stream: &Arc<CudaStream>,
        buf: &DeviceBuffer<u8>,
        seed: u32,
    ) -> somalloc::Result<u64> {
        let n = buf.len() as u64;
        let mut count = stream.alloc_zeros::<u64>(1).expect("counter");
        let mut launch = Launch::new(stream, &self.verify)?;
        launch.arg(buf).arg(&n).arg(&seed).arg(&mut count);
        // SAFETY: (const unsigned char*, unsigned long long, unsigned int,
        // unsigned long long*) is the kernel's signature.
        unsafe { launch.launch(grid(n)) }?;
        drop(launch);
        Ok(stream.clone_dtoh(&count).expect("read counter")[0])
    }

    fn used(&self) -> usize {
        self.pool.stats().expect("stats").used_current
    }
}

/// `waiter` waits for everything queued so far on `target`.
fn order_after(dev: &Device, waiter: &Stream, target: &Stream) {
    let done = Event::new(dev).expect("event");
    done.record(target).expect("record");
    waiter.wait_event(&done).expect("wait");
}

/// The seeds' exercise 3 with cudarc streams and kernels: allocate on A,
/// use on B after A's allocation, compute on B, let A wait for B, read and
/// free on A.
#[test]
fn exercise3_cross_stream_sharing() {
    let Some(env) = setup("cudarc::exercise3_cross_stream_sharing") else {
        return;
    };
    const N: usize = 1 << 20;
    let used_at_start = env.used();
    let (a, b) = (env.stream(), env.stream());
    let (stream_a, stream_b) = (Stream::from_cudarc(&a).unwrap(), Stream::from_cudarc(&b).unwrap());

    // 1. Allocate on A (stream-ordered, no host sync) and clear it there.
    let mut data = DeviceBuffer::<f32>::new_in(N, &env.pool, &stream_a).unwrap();
    data.memset(0xFF).unwrap();
    // 2-3. B waits for A's allocation and clearing.
    data.use_on(&stream_b).unwrap();
    // 4. Use on B: processKernel through cudarc, the buffer as the argument.
    let n = N as i32;
    let mut launch = Launch::new(&b, &env.process).unwrap();
    launch.arg(&mut data).arg(&n);
    // SAFETY: (float*, int) is somalloc_process's signature; one thread per
    // element stays in bounds.
    unsafe { launch.launch(LaunchConfig::for_num_elems(N as u32)) }.unwrap();
    drop(launch);
    // 5-6. A waits for B's compute.
    order_after(&env.dev, &stream_a, &stream_b);
    // Read back on A and check every element (a host-side reduction too).
    let host = data.to_vec().unwrap();
    for (i, v) in host.iter().enumerate() {
        assert_eq!(*v, (i as f32).sqrt(), "element {i}");
    }
    let sum: f64 = host.iter().map(|&v| f64::from(v)).sum();
    let expected: f64 = (0..N).map(|i| f64::from((i as f32).sqrt())).sum();
    assert!((sum - expected).abs() <= expected * 1e-9, "{sum} vs {expected}");
    // 7. Free on A; it waits for B's work through use_on.
    drop(data);
    a.synchronize().unwrap();
    b.synchronize().unwrap();
    assert_eq!(env.used(), used_at_start, "the pool got its memory back");
    assert_eq!(somalloc::drop_errors().last.map(|e| e.to_string()), None);
}

#[test]
fn launch_on_a_stream_the_buffer_was_not_given_to_is_refused() {
    let Some(env) = setup("cudarc::launch_on_a_stream_the_buffer_was_not_given_to_is_refused") else {
        return;
    };
    let (a, c) = (env.stream(), env.stream());
    let stream_a = Stream::from_cudarc(&a).unwrap();
    let mut buf = DeviceBuffer::<u8>::new_in(3 << 20, &env.pool, &stream_a).unwrap();
    env.fill(&a, &mut buf, 1).unwrap();

    // `c` was never given the buffer: refused, by `&mut` and by `&`, and
    // nothing is enqueued.
    match env.fill(&c, &mut buf, 2) {
        Err(Error::InvalidArgument {
            reason: InvalidReason::WrongStream,
            why,
        }) => assert!(why.contains("use_on"), "{why}"),
        other => panic!("a launch on a stream the buffer was not given to ran: {other:?}"),
    }
    match env.mismatches(&c, &buf, 1) {
        Err(Error::InvalidArgument {
            reason: InvalidReason::WrongStream,
            why,
        }) => assert!(why.contains("kernel argument 0"), "{why}"),
        other => panic!("a launch on a stream the buffer was not given to ran: {other:?}"),
    }
    c.synchronize().unwrap();
    assert_eq!(
        env.mismatches(&a, &buf, 1).unwrap(),
        0,
        "the refused fill must not have run"
    );

    // Given to `c`, the same launch runs and is ordered after `a`'s work.
    let stream_c = Stream::from_cudarc(&c).unwrap();
    buf.use_on(&stream_c).unwrap();
    env.fill(&c, &mut buf, 2).unwrap();
    assert_eq!(env.mismatches(&c, &buf, 2).unwrap(), 0);
    order_after(&env.dev, &stream_a, &stream_c);
    let host = buf.to_vec().unwrap();
    assert!(host
        .iter()
        .enumerate()
        .all(|(i, &v)| v == pattern_byte(i as u64, 2)));
    drop(buf);
    a.synchronize().unwrap();
    c.synchronize().unwrap();
}

#[test]
fn from_cudarc_keeps_the_cudarc_stream_alive() {
    let Some(env) = setup("cudarc::from_cudarc_keeps_the_cudarc_stream_alive") else {
        return;
    };
    let cs = env.stream();
    let weak = Arc::downgrade(&cs);
    let stream = Stream::from_cudarc(&cs).unwrap();
    assert!(!stream.is_owned());
    assert_eq!(stream.device(), env.dev);
    assert!(Arc::ptr_eq(stream.cudarc_stream().unwrap(), &cs));
    assert_eq!(stream.as_raw(), cs.cu_stream().cast());
    drop(cs);
    assert!(weak.upgrade().is_some(), "the Stream keeps the cudarc stream");

    let mut buf = DeviceBuffer::<u8>::new_in(1 << 20, &env.pool, &stream).unwrap();
    drop(stream);
    // Only the buffer holds the stream now, and the stream still works.
    let cs = weak.upgrade().expect("the buffer keeps the cudarc stream");
    env.fill(&cs, &mut buf, 7).unwrap();
    assert_eq!(env.mismatches(&cs, &buf, 7).unwrap(), 0);
    drop(cs);
    buf.release().unwrap();
    // The free was the last use; once the buffer is gone so is the stream.
    assert!(
        weak.upgrade().is_none(),
        "the cudarc stream outlived its last user"
    );
}

#[test]
fn default_and_per_thread_streams_are_refused() {
    let Some(env) = setup("cudarc::default_and_per_thread_streams_are_refused") else {
        return;
    };
    // The refusal says what to use instead: the stream's own constructor
    // (as the docs of `Stream::legacy_default` say, the legacy default
    // stream is one stream per device) or a stream of one's own.
    for (name, cs, instead) in [
        (
            "default_stream",
            env.ctx.default_stream(),
            "Stream::legacy_default",
        ),
        (
            "per_thread_stream",
            env.ctx.per_thread_stream(),
            "Stream::per_thread_default",
        ),
    ] {
        match Stream::from_cudarc(&cs) {
            Err(Error::InvalidArgument {
                reason: InvalidReason::SpecialStreamHandle,
                why,
            }) => {
                for words in [instead, "bind_to_thread", "new_stream"] {
                    assert!(why.contains(words), "{name}: {words:?} in {why}");
                }
            }
            other => panic!("{name} was accepted: {other:?}"),
        }
        assert!(
            matches!(
                Launch::new(&cs, &env.fill),
                Err(Error::InvalidArgument {
                    reason: InvalidReason::SpecialStreamHandle,
                    ..
                })
            ),
            "{name}"
        );
    }
    // The raw path refuses the same handles.
    for raw in [0usize, 1, 2] {
        // SAFETY: refused before use.
        let r = unsafe { Stream::from_raw(&env.dev, raw as *mut std::ffi::c_void) };
        assert!(
            matches!(
                r,
                Err(Error::InvalidArgument {
                    reason: InvalidReason::SpecialStreamHandle,
                    ..
                })
            ),
            "{raw:#x}"
        );
    }
}

#[test]
fn copies_between_cudarc_slices_and_buffers() {
    let Some(env) = setup("cudarc::copies_between_cudarc_slices_and_buffers") else {
        return;
    };
    const N: usize = 1 << 18;
    let host: Vec<f32> = (0..N).map(|i| i as f32 * 0.5).collect();
    let x = env.stream();
    // Two kinds of buffer streams: one from cudarc, one made by somalloc
    // (wrapped for cudarc's event tracking inside the copy).
    let a = env.stream();
    let streams = [Stream::from_cudarc(&a).unwrap(), Stream::new(&env.dev).unwrap()];
    for stream in &streams {
        let slice = x.clone_htod(&host).unwrap(); // on x, not yet complete
        let mut buf = DeviceBuffer::<f32>::new_in(N, &env.pool, stream).unwrap();
        buf.copy_from_cudarc(&slice).unwrap();
        drop(slice); // freed on x after the copy
        assert_eq!(buf.to_vec().unwrap(), host);

        // Write on the buffer's stream, copy into a slice of x, read on x.
        let own = Stream::from_cudarc(&a).unwrap();
        let n = N as i32;
        if own == *stream {
            let mut launch = Launch::new(&a, &env.process).unwrap();
            launch.arg(&mut buf).arg(&n);
            // SAFETY: (float*, int), one thread per element.
            unsafe { launch.launch(LaunchConfig::for_num_elems(N as u32)) }.unwrap();
        } else {
            buf.copy_from_host(&vec![3.0f32; N]).unwrap();
        }
        let mut out = x.alloc_zeros::<f32>(N).unwrap();
        buf.copy_to_cudarc(&mut out).unwrap();
        let back = x.clone_dtoh(&out).unwrap();
        for (i, v) in back.iter().enumerate() {
            let want = if own == *stream { (i as f32).sqrt() } else { 3.0 };
            assert_eq!(*v, want, "element {i}");
        }

        // Views work too, and lengths must match.
        let view = out.slice(..N / 2);
        let mut half = DeviceBuffer::<f32>::new_in(N / 2, &env.pool, stream).unwrap();
        half.copy_from_cudarc(&view).unwrap();
        assert_eq!(half.to_vec().unwrap(), back[..N / 2]);
        assert!(matches!(
            buf.copy_from_cudarc(&view),
            Err(Error::InvalidArgument {
                reason: InvalidReason::LengthMismatch,
                ..
            })
        ));
        stream.synchronize().unwrap();
    }
    x.synchronize().unwrap();
}

/// A cudarc program that wants graphs: its stream wrapped by
/// `Stream::from_cudarc`, the promise that only somalloc captures it, and
/// the capture through somalloc with cudarc launches inside. The warm cache
/// stands aside during the capture: 100 replays, each writing the graph's
/// own scratch buffer and an output from outside the capture, leave the
/// ordinary buffer that took the cached block intact.
#[test]
fn a_promised_cudarc_stream_captured_through_somalloc() {
    let Some(env) = setup("cudarc::a_promised_cudarc_stream_captured_through_somalloc") else {
        return;
    };
    const N: usize = 1 << 20;
    let used_at_start = env.used();
    let cs = env.stream();
    let stream = Stream::from_cudarc(&cs).unwrap();
    // SAFETY: this test captures `cs` only through `stream.begin_capture`.
    unsafe { stream.assume_captured_only_by_somalloc() };
    let tier = CacheTier::new(Arc::new(env.pool.clone()), CacheConfig::default()).unwrap();
    let cache = tier.for_stream(&stream).unwrap();
    let res: Arc<dyn MemoryResource> = cache.clone();
    drop(DeviceBuffer::<u8>::new_with(N, &res, &stream).unwrap());
    assert_eq!(cache.stats().cached_blocks, 1);
    let mut out = DeviceBuffer::<u8>::new_in(N, &env.pool, &stream).unwrap();

    stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    let mut scratch = DeviceBuffer::<u8>::new_with(N, &res, &stream).unwrap();
    env.fill(&cs, &mut scratch, 5).unwrap(); // a cudarc launch, recorded
    env.fill(&cs, &mut out, 6).unwrap();
    drop(scratch);
    let graph = stream.end_capture().unwrap();
    assert_eq!(cache.stats().captured, 1);
    assert_eq!(
        cache.stats().cached_blocks,
        1,
        "the captured free entered the cache"
    );

    let mut ordinary = DeviceBuffer::<u8>::new_with(N, &res, &stream).unwrap();
    env.fill(&cs, &mut ordinary, 9).unwrap();
    let exec = graph.instantiate().unwrap();
    for _ in 0..100 {
        exec.launch(&stream).unwrap();
    }
    assert_eq!(
        env.mismatches(&cs, &ordinary, 9).unwrap(),
        0,
        "the graph wrote into the cached block"
    );
    assert_eq!(env.mismatches(&cs, &out, 6).unwrap(), 0);
    drop((exec, graph, ordinary, out, res, cache));
    tier.flush().unwrap();
    drop(tier);
    cs.synchronize().unwrap();
    assert_eq!(env.used(), used_at_start, "the pool got its memory back");
    assert_eq!(somalloc::drop_errors().last.map(|e| e.to_string()), None);
}

/// cuBLAS through cudarc, or `None` (after one SKIP line) where cudarc
/// cannot load libcublas (its loader panics).
fn blas(test: &str, stream: &Arc<CudaStream>) -> Option<CudaBlas> {
    match catch_unwind(|| CudaBlas::new(Arc::clone(stream))) {
        Ok(Ok(blas)) => Some(blas),
        Ok(Err(e)) => panic!("{test}: cuBLAS handle: {e}"),
        Err(_) => {
            say(&format!(
                "SKIP {test}: no cuBLAS library (libcublas) for cudarc to load"
            ));
            None
        }
    }
}

/// Column-major `m × k` times `k × n` on the host, exact for the small
/// integers used here.
fn gemm_on_host(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    let mut c = vec![0.0f32; m * n];
    for j in 0..n {
        for i in 0..m {
            c[i + j * m] = (0..k).map(|l| a[i + l * m] * b[l + j * k]).sum();
        }
    }
    c
}

fn gemm_config(m: usize, n: usize, k: usize) -> GemmConfig<f32> {
    GemmConfig {
        transa: cublasOperation_t::CUBLAS_OP_N,
        transb: cublasOperation_t::CUBLAS_OP_N,
        m: m as i32,
        n: n as i32,
        k: k as i32,
        alpha: 1.0,
        lda: m as i32,
        ldb: k as i32,
        beta: 0.0,
        ldc: m as i32,
    }
}

/// A cuBLAS GEMM reads and writes somalloc buffers and views through
/// cudarc's pointer traits: on the buffers' own stream; on a cudarc stream
/// they were never given to (ordered after their allocation and filling,
/// and freed after the GEMM); on cudarc's default stream; and into a range
/// of a larger buffer, leaving the rest alone.
#[test]
fn cublas_gemm_on_somalloc_buffers_and_views() {
    const TEST: &str = "cudarc::cublas_gemm_on_somalloc_buffers_and_views";
    let Some(env) = setup(TEST) else {
        return;
    };
    let (m, n, k) = (96usize, 64usize, 48usize);
    let host_a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 - 3.0).collect();
    let host_b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 - 2.0).collect();
    let want = gemm_on_host(&host_a, &host_b, m, n, k);
    let used_at_start = env.used();

    // 1. On the buffers' own stream, made by somalloc.
    let s = Stream::new(&env.dev).unwrap();
    let Some(own) = blas(TEST, s.cudarc_stream().unwrap()) else {
        return;
    };
    let a = DeviceBuffer::from_slice(&host_a, &s).unwrap();
    let b = DeviceBuffer::from_slice(&host_b, &s).unwrap();
    let mut c = DeviceBuffer::<f32>::new_in(m * n, &env.pool, &s).unwrap();
    // SAFETY: column-major matrices of exactly these sizes.
    unsafe { own.gemm(gemm_config(m, n, k), &a, &b, &mut c) }.unwrap();
    assert_eq!(c.to_vec().unwrap(), want, "GEMM on the buffers' stream");
    drop((a, b, c)); // not shadowed: their frees go now

    // 2. On a cudarc stream the buffers were never given to, while their
    // stream is still busy: the GEMM must wait for the allocation and the
    // copies, and the frees right after it must wait for the GEMM.
    let kernels = TestKernels::load(&env.dev).unwrap();
    let foreign = env.stream();
    let Some(theirs) = blas(TEST, &foreign) else {
        return;
    };
    kernels.spin(40_000_000, &s).unwrap(); // s runs late
    let mut a = DeviceBuffer::<f32>::new_in(m * k, &env.pool, &s).unwrap();
    let mut b = DeviceBuffer::<f32>::new_in(k * n, &env.pool, &s).unwrap();
    let mut c = DeviceBuffer::<f32>::new_in(m * n, &env.pool, &s).unwrap();
    // SAFETY: the host vectors live until after `s` is synchronised below.
    unsafe {
        a.copy_from_host_async(&host_a).unwrap();
        b.copy_from_host_async(&host_b).unwrap();
    }
    c.memset(0xFF).unwrap();
    // SAFETY: as above.
    unsafe { theirs.gemm(gemm_config(m, n, k), &a, &b, &mut c) }.unwrap();
    drop((a, b)); // enqueued on s; the GEMM on `foreign` is done by now
    assert_eq!(
        c.to_vec().unwrap(),
        want,
        "GEMM on a stream the buffers were not given to"
    );
    env.ctx
        .check_err()
        .expect("no error recorded on cudarc's context");

    // 3. On cudarc's default stream (a handle that names no one stream).
    let default = env.ctx.default_stream();
    let Some(legacy) = blas(TEST, &default) else {
        return;
    };
    let a = DeviceBuffer::from_slice(&host_a, &s).unwrap();
    let b = DeviceBuffer::from_slice(&host_b, &s).unwrap();
    c.memset(0).unwrap();
    // SAFETY: as above.
    unsafe { legacy.gemm(gemm_config(m, n, k), &a, &b, &mut c) }.unwrap();
    assert_eq!(c.to_vec().unwrap(), want, "GEMM on cudarc's default stream");

    // 4. Views: the operands and the product are ranges of larger buffers.
    let pad = 1000;
    let mut big_a = DeviceBuffer::<f32>::zeroed(pad + m * k, &s).unwrap();
    big_a.slice_mut(pad..).unwrap().copy_from_host(&host_a).unwrap();
    let mut big_c = DeviceBuffer::from_slice(&vec![-7.0f32; 2 * pad + m * n], &s).unwrap();
    {
        let a_view = big_a.slice(pad..).unwrap();
        let b_view = b.slice(..).unwrap();
        let mut c_view = big_c.slice_mut(pad..pad + m * n).unwrap();
        // SAFETY: as above; each view has exactly its matrix's size.
        unsafe { own.gemm(gemm_config(m, n, k), &a_view, &b_view, &mut c_view) }.unwrap();
    }
    let all = big_c.to_vec().unwrap();
    assert_eq!(&all[pad..pad + m * n], &want[..], "GEMM into a view");
    assert!(
        all[..pad].iter().chain(&all[pad + m * n..]).all(|&x| x == -7.0),
        "outside the view"
    );

    drop((own, theirs, legacy, a, b, c, big_a, big_c));
    s.synchronize().unwrap();
    foreign.synchronize().unwrap();
    assert_eq!(env.used(), used_at_start, "every buffer went back to the pool");
    assert_eq!(somalloc::drop_errors().last.map(|e| e.to_string()), None);
}

/// The cudarc handle of a stream somalloc made keeps working after the
/// last somalloc handle and buffer of the stream are gone.
#[test]
fn the_cudarc_handle_of_an_owned_stream_outlives_it() {
    let Some(env) = setup("cudarc::the_cudarc_handle_of_an_owned_stream_outlives_it") else {
        return;
    };
    let s = Stream::new(&env.dev).unwrap();
    assert!(s.is_owned());
    let handle = Arc::clone(s.cudarc_stream().unwrap());
    assert_eq!(handle.cu_stream().cast(), s.as_raw());
    assert!(Arc::ptr_eq(&handle, s.cudarc_stream().unwrap()), "made once");
    let mut buf = DeviceBuffer::<u8>::new_in(1 << 20, &env.pool, &s).unwrap();
    env.fill(&handle, &mut buf, 5).unwrap();
    assert_eq!(env.mismatches(&handle, &buf, 5).unwrap(), 0);
    drop((s, buf));
    // Only cudarc holds the stream now; it still runs work.
    let zeros = handle.alloc_zeros::<u32>(1024).unwrap();
    assert_eq!(handle.clone_dtoh(&zeros).unwrap(), vec![0u32; 1024]);
    drop(zeros);
    handle.synchronize().unwrap();
    drop(handle);
    // The next stream somalloc makes destroys the released one.
    let next = Stream::new(&env.dev).unwrap();
    next.synchronize().unwrap();
    assert_eq!(somalloc::drop_errors().last.map(|e| e.to_string()), None);
}

/// Views as arguments of cudarc launches: the kernel sees the range.
#[test]
fn launch_takes_views() {
    let Some(env) = setup("cudarc::launch_takes_views") else {
        return;
    };
    const N: usize = 4096;
    let a = env.stream();
    let stream = Stream::from_cudarc(&a).unwrap();
    let mut buf = DeviceBuffer::from_slice(&vec![-1.0f32; N], &stream).unwrap();
    {
        let mut view = buf.slice_mut(1000..1500).unwrap();
        let n = view.len() as i32;
        let mut launch = Launch::new(&a, &env.process).unwrap();
        launch.arg(&mut view).arg(&n);
        // SAFETY: (float*, int), one thread per element of the view.
        unsafe { launch.launch(LaunchConfig::for_num_elems(n as u32)) }.unwrap();
    }
    let host = buf.to_vec().unwrap();
    for (i, v) in host.iter().enumerate() {
        let want = if (1000..1500).contains(&i) {
            ((i - 1000) as f32).sqrt()
        } else {
            -1.0
        };
        assert_eq!(*v, want, "element {i}");
    }
    // A view of a buffer not given to the launch stream is refused.
    let c = env.stream();
    let view = buf.slice(..10).unwrap();
    let mut launch = Launch::new(&c, &env.verify).unwrap();
    let (n, seed) = (10u64, 0u32);
    let mut count = c.alloc_zeros::<u64>(1).unwrap();
    launch.arg(&view).arg(&n).arg(&seed).arg(&mut count);
    // SAFETY: refused before anything is enqueued.
    let refused = unsafe { launch.launch(grid(n)) }.unwrap_err();
    assert_eq!(refused.invalid_reason(), Some(InvalidReason::WrongStream));
}
