//! cudarc interop (feature `cudarc`).
//!
//! somalloc meets a cudarc program where it already is:
//!
//! * [`Stream::from_cudarc`] turns a cudarc stream (`ctx.new_stream()`) into
//!   a somalloc [`Stream`] without `unsafe`: the `Stream` holds the
//!   `Arc<CudaStream>`, so the cudarc stream lives as long as the `Stream`,
//!   its clones and every buffer allocated on it.
//! * [`Launch`] is cudarc's launch builder with one more kind of argument:
//!   `&DeviceBuffer<T>` and `&mut DeviceBuffer<T>` (cudarc's
//!   [`PushKernelArg`] trait), with everything cudarc's own builder takes
//!   (scalars, `CudaSlice`, views) passed through unchanged.
//! * [`DeviceBuffer::copy_from_cudarc`] and [`DeviceBuffer::copy_to_cudarc`]
//!   copy between a buffer and a `CudaSlice` (or view), stream-ordered; so
//!   do views of buffers ([`DeviceViewMut::copy_from_cudarc`],
//!   [`DeviceView::copy_to_cudarc`]).
//! * Buffers and views are cudarc device memory: they implement cudarc's
//!   [`DevicePtr`] and [`DevicePtrMut`] (and [`DeviceSlice`]), so they go
//!   straight into cuBLAS, cuDNN and cudarc's copies (see [Buffers in
//!   cudarc's calls](#buffers-in-cudarcs-calls)).
//! * [`Stream::cudarc_stream`] gives cudarc's handle of any somalloc stream
//!   (for `CudaBlas::new` and the like), without `unsafe`.
//!
//! ```no_run
//! use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
//! use cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N;
//! use somalloc::{Device, DeviceBuffer, Stream};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let stream = Stream::new(&Device::get(0)?)?;
//! let (m, n, k) = (64, 32, 16);
//! let a = DeviceBuffer::from_slice(&vec![1.0f32; m * k], &stream)?;
//! let b = DeviceBuffer::from_slice(&vec![2.0f32; k * n], &stream)?;
//! let mut c = DeviceBuffer::<f32>::zeroed(m * n, &stream)?;
//! let blas = CudaBlas::new(stream.cudarc_stream()?.clone())?; // on the buffers' stream
//! let cfg = GemmConfig {
//!     transa: CUBLAS_OP_N, transb: CUBLAS_OP_N,
//!     m: m as i32, n: n as i32, k: k as i32,
//!     alpha: 1.0, lda: m as i32, ldb: k as i32, beta: 0.0, ldc: m as i32,
//! };
//! // SAFETY: column-major m×k, k×n and m×n matrices of those sizes.
//! unsafe { blas.gemm(cfg, &a, &b, &mut c) }?;
//! assert!(c.to_vec()?.iter().all(|&x| x == 2.0 * k as f32));
//! # Ok(()) }
//! ```
//!
//! # Why a builder of its own
//!
//! A buffer may be used only on its own stream and on streams given to
//! [`DeviceBuffer::use_on`]; anything else can run before the allocation or
//! after the free. cudarc's `LaunchArgs` keeps its stream private and its
//! `arg` cannot fail, so an implementation of `PushKernelArg` on
//! `LaunchArgs` could neither see nor refuse a launch on the wrong stream.
//! [`Launch`] knows its stream: [`Launch::launch`] refuses, with
//! [`Error::InvalidArgument`] and before anything is enqueued, a launch with
//! a buffer that is not usable on that stream. To use a buffer on another
//! cudarc stream, give it that stream first:
//! `buf.use_on(&Stream::from_cudarc(&other)?)`.
//!
//! somalloc orders a buffer's allocation and free against every stream that
//! uses it; the order between two kernels on different streams that share a
//! buffer is the program's (events, as in cudarc). cudarc's own read/write
//! event tracking covers `CudaSlice` arguments as usual.
//!
//! # Buffers in cudarc's calls
//!
//! cudarc's [`DevicePtr::device_ptr`] and [`DevicePtrMut::device_ptr_mut`]
//! hand out a buffer's address for work that cudarc then enqueues on a
//! stream it names. They cannot fail, so they cannot refuse a stream the
//! buffer was not given to; what they do instead:
//!
//! * On the buffer's own stream, or one given to [`DeviceBuffer::use_on`]
//!   (compared by handle, whichever way cudarc got it): the address, and
//!   nothing else. That is the fast way: make the cuBLAS handle on
//!   `buf.stream().cudarc_stream()?`, or give the buffer to cudarc's stream
//!   first (`buf.use_on(&Stream::from_cudarc(&their_stream)?)`).
//! * On any other stream of the buffer's device (record-stream semantics):
//!   that stream first waits (through an event) for everything queued on
//!   the buffer's stream so far, the allocation included; and the guard
//!   the call returns, which cudarc drops right after enqueuing the work,
//!   waits on the host until that stream has run it. The buffer's free,
//!   which cannot come before the guard is gone (the guard borrows the
//!   buffer), is then after the use. The wait on the host is what keeps
//!   the free in order: the trait gives the method only `&CudaStream`, not
//!   a handle it could keep and have the free wait for later, as
//!   [`DeviceBuffer::use_on`] does.
//! * Refused, where neither is safe: a stream of another device or of a
//!   non-primary context, or either stream in a stream capture (the wait
//!   would pull one stream into the other's capture, or a graph would use
//!   the memory after its free). The address is then null (0) and the
//!   refusal is recorded on cudarc's context as an error
//!   (`CUDA_ERROR_INVALID_VALUE`, or `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`
//!   for a capture), which cudarc's next checked call returns
//!   (`CudaContext::check_err`).
//!
//! Waiting on the host for every use on a foreign stream is slow but never
//! wrong; refusing every such use would make a cuBLAS handle on its own
//! stream unusable with somalloc memory, which is the common case in
//! cudarc programs.
//!
//! [`DeviceSlice::stream`] (which cudarc asks for in a few calls, such as
//! copies between devices) is the buffer's stream as cudarc's handle,
//! made on first use ([`Stream::cudarc_stream`]); where cudarc cannot open
//! the device that method panics, since it cannot return the error: call
//! `buf.stream().cudarc_stream()?` first to get it as a value.
//!
//! # Building
//!
//! somalloc depends on cudarc with `driver` and no CUDA version feature: the
//! version (`cuda-12080`, `cuda-13000`, ...) comes from the application's
//! own cudarc dependency, and so does the loading mode (`dynamic-linking`,
//! ...; somalloc asks only for cudarc's `fallback-dynamic-loading`, which
//! yields to any mode the application names). cudarc's build fails without
//! a version, so a build of somalloc alone names one:
//! `cargo build --features cuda,cudarc,cudarc/cuda-13000` (or sets
//! `CUDARC_CUDA_VERSION=13000`).
//!
//! ```no_run
//! use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
//! use cudarc::nvrtc::Ptx;
//! use somalloc::interop::cudarc::Launch;
//! use somalloc::{DeviceBuffer, Stream};
//!
//! # const PTX: &str = "";
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let ctx = CudaContext::new(0)?;
//! let (a, b) = (ctx.new_stream()?, ctx.new_stream()?);
//! let scale = ctx.load_module(Ptx::from_src(PTX))?.load_function("scale")?;
//!
//! let stream_a = Stream::from_cudarc(&a)?;
//! let mut buf = DeviceBuffer::from_slice(&[1.0f32; 1024], &stream_a)?;
//! buf.use_on(&Stream::from_cudarc(&b)?)?; // b waits for the allocation
//!
//! let (n, factor) = (1024u32, 2.0f32);
//! let mut launch = Launch::new(&b, &scale)?;
//! launch.arg(&mut buf).arg(&n).arg(&factor);
//! // SAFETY: `scale` takes (float*, unsigned, float) and stays in bounds.
//! unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }?;
//!
//! let mut out = b.alloc_zeros::<f32>(1024)?;
//! buf.copy_to_cudarc(&mut out)?; // on a's queue, after b's work so far
//! assert_eq!(b.clone_dtoh(&out)?[0], 2.0);
//! # Ok(()) }
//! ```

use std::ffi::c_void;
use std::sync::Arc;

use ::cudarc::driver::sys::CUresult;
use ::cudarc::driver::sys::{CUdeviceptr, CUevent_flags, CUstream};
use ::cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, DriverError,
    LaunchArgs, LaunchConfig, PushKernelArg, SyncOnDrop,
};
use bytemuck::Pod;

use crate::backend::Backend;
use crate::buffer::{DeviceBuffer, DeviceView, DeviceViewMut};
use crate::device::Device;
use crate::error::{Error, InvalidReason, Result, VendorCode};
use crate::stream::{order_after, special_handle, Stream};
use crate::Active;

/// A cudarc [`DriverError`] as an [`Error::Vendor`] of `call`.
fn driver_error(call: &'static str, e: DriverError) -> Error {
    let text = |r: std::result::Result<&std::ffi::CStr, DriverError>| {
        r.map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
    };
    Error::Vendor {
        call,
        code: VendorCode(e.0 as i32),
        name: text(e.error_name()),
        message: text(e.error_string()),
    }
}

impl Stream {
    /// Wraps a cudarc stream, keeping it alive: the `Stream` holds a clone of
    /// the `Arc`, and so does every clone of the `Stream` and every buffer
    /// allocated on it. somalloc never destroys the stream; cudarc does, when
    /// the last `Arc` is gone.
    ///
    /// The device is the cudarc context's. Refused with
    /// [`Error::InvalidArgument`]:
    ///
    /// * cudarc's `ctx.default_stream()` (the null handle) and
    ///   `ctx.per_thread_stream()` (a handle that names another stream on
    ///   every thread), which are not one stream that buffers can live on:
    ///   create one with `ctx.new_stream()`;
    /// * a stream of a non-primary context (`CudaContext::new_non_primary`):
    ///   somalloc works in each device's primary context, the one
    ///   `CudaContext::new` uses.
    ///
    /// A stream that cudarc itself only borrows (`wrap_borrowed_stream`)
    /// lives as long as its real owner keeps it, as cudarc's contract for
    /// that call says.
    ///
    /// The stream is borrowed: cudarc may capture it (`begin_capture`), so
    /// somalloc asks the driver whether it is capturing on every allocation
    /// and free. A program that captures it only through somalloc
    /// ([`Stream::begin_capture`] on this `Stream`; cudarc's launches on the
    /// stream are recorded into that capture as usual) says so with
    /// [`Stream::assume_captured_only_by_somalloc`], and the stream then
    /// costs what a stream somalloc made costs.
    ///
    /// ```no_run
    /// use somalloc::{DeviceBuffer, Stream};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let ctx = cudarc::driver::CudaContext::new(0)?;
    /// let stream = Stream::from_cudarc(&ctx.new_stream()?)?;
    /// let buf = DeviceBuffer::<u8>::zeroed(1 << 20, &stream)?; // the cudarc stream lives on
    /// assert!(Stream::from_cudarc(&ctx.default_stream()).is_err());
    /// # drop(buf);
    /// # Ok(()) }
    /// ```
    pub fn from_cudarc(stream: &Arc<CudaStream>) -> Result<Stream> {
        let raw = stream.cu_stream() as *mut c_void;
        if let Some(what) = special_handle(raw) {
            return Err(InvalidReason::SpecialStreamHandle.error(format!(
                "{what} cannot be wrapped: cudarc's default_stream() and per_thread_stream() are not \
                 one stream that buffers can live on; create a stream with ctx.new_stream()"
            )));
        }
        let ctx = stream.context();
        if !ctx.is_primary() {
            return Err(Error::invalid(
                "a stream of a non-primary CUDA context: somalloc works in each device's primary \
                 context (the one CudaContext::new uses)",
            ));
        }
        let device = Device::get(ctx.ordinal())?;
        Stream::borrowed(&device, raw, Some(Box::new(Arc::clone(stream))))
    }

    /// The cudarc handle of this stream, for cudarc's own calls on it
    /// (`CudaBlas::new`, cuDNN, cudarc's copies, launches, events): the one
    /// it was made from with [`Stream::from_cudarc`], or, for a stream made
    /// otherwise, a handle made on the first call, in the primary context of
    /// the stream's device (the one `CudaContext::new` opens), which cudarc
    /// never destroys.
    ///
    /// The handle may be cloned and kept: it keeps the stream usable for as
    /// long as it lives.
    ///
    /// * For a stream made by [`Stream::new`], somalloc destroys the stream
    ///   only once every clone of the handle is gone too (at the next
    ///   `Stream::new` after that, or when the process ends).
    /// * For a stream wrapped with [`Stream::from_raw`], its lender keeps it
    ///   alive for as long (the contract of `from_raw`).
    ///
    /// cudarc can capture the stream into a graph through this handle,
    /// without somalloc knowing; so from the first call on, somalloc asks
    /// the runtime whether the stream is capturing on every
    /// capture-sensitive call, as for a borrowed stream (see
    /// [Stream capture](Stream#stream-capture)): allocations on it through
    /// the cache tier cost more.
    ///
    /// An error when cudarc cannot open the device: [`Error::Vendor`] with
    /// cudarc's code, or [`Error::RuntimeNotFound`] when cudarc's loader
    /// cannot load the driver library (cudarc panics there; the panic is
    /// caught).
    ///
    /// ```no_run
    /// use cudarc::cublas::CudaBlas;
    /// use somalloc::{Device, Stream};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let stream = Stream::new(&Device::get(0)?)?;
    /// let blas = CudaBlas::new(stream.cudarc_stream()?.clone())?; // cuBLAS on somalloc's stream
    /// # drop(blas);
    /// # Ok(()) }
    /// ```
    pub fn cudarc_stream(&self) -> Result<&Arc<CudaStream>> {
        if let Some(from_cudarc) = self.keep_alive::<Arc<CudaStream>>() {
            return Ok(from_cudarc);
        }
        if let Some(made) = self.inner_cudarc().get() {
            return Ok(made);
        }
        let ordinal = self.device().ordinal();
        let ctx = match std::panic::catch_unwind(|| CudaContext::new(ordinal)) {
            Ok(Ok(ctx)) => ctx,
            Ok(Err(e)) => return Err(driver_error("cuDevicePrimaryCtxRetain", e)),
            Err(_) => {
                return Err(Error::RuntimeNotFound {
                    library: "libcuda",
                    searched: vec!["(cudarc's own search)".into()],
                    reason: "cudarc could not load the CUDA driver library".into(),
                    cause: None,
                })
            }
        };
        // cudarc may capture the stream from now on.
        self.set_capture_flag(crate::stream::capture_flag::ALWAYS_ASK);
        // SAFETY: the handle is a live stream of the device whose primary
        // context `ctx` is (somalloc's streams are made by the runtime, in
        // the primary context; a borrowed stream's lender promised a stream
        // of this device). It stays alive while the handle does: an owned
        // stream is destroyed only once the handle is no longer shared
        // (`park_if_shared`), and a borrowed stream's lender keeps it alive
        // as long (the contract of `Stream::from_raw`).
        let handle = unsafe { ctx.wrap_borrowed_stream(self.as_raw() as CUstream) };
        Ok(self.inner_cudarc().get_or_init(|| handle))
    }
}

/// A cudarc stream object for `stream` in `ctx`: the one it was made from,
/// or a borrowed wrapper (which never destroys it) when `ctx` is the primary
/// context of the stream's device.
fn cudarc_view(stream: &Stream, ctx: &Arc<CudaContext>) -> Result<Arc<CudaStream>> {
    if let Some(cs) = stream.keep_alive::<Arc<CudaStream>>() {
        if cs.context() == ctx {
            return Ok(Arc::clone(cs));
        }
    }
    if !ctx.is_primary() || ctx.ordinal() != stream.device().ordinal() {
        return Err(InvalidReason::WrongDevice.error(format!(
            "the cudarc memory belongs to {} context of device {}, the buffer's stream to device {}",
            if ctx.is_primary() {
                "the primary"
            } else {
                "a non-primary"
            },
            ctx.ordinal(),
            stream.device().ordinal()
        )));
    }
    // SAFETY: the handle is a live stream of the device whose primary
    // context `ctx` is (somalloc's streams are made by the runtime, which
    // works in the primary context; a borrowed stream's creator promised
    // it is of this device), and the caller holds the `Stream` while it uses
    // the wrapper, which never destroys the stream. Ordering with cudarc's
    // work is done by the callers below.
    Ok(unsafe { ctx.wrap_borrowed_stream(stream.as_raw() as CUstream) })
}

impl<T: Pod> DeviceBuffer<T> {
    /// Enqueues a copy of `src` (a cudarc `CudaSlice` or `CudaView` of the
    /// same length) into this buffer; see
    /// [`DeviceViewMut::copy_from_cudarc`] (a range of the buffer:
    /// `buf.slice_mut(range)?.copy_from_cudarc(src)`).
    pub fn copy_from_cudarc<S: DevicePtr<T>>(&mut self, src: &S) -> Result<()> {
        self.view_mut().copy_from_cudarc(src)
    }

    /// Enqueues a copy of this buffer into `dst` (a cudarc `CudaSlice` or
    /// `CudaViewMut` of the same length); see [`DeviceView::copy_to_cudarc`]
    /// (a range of the buffer: `buf.slice(range)?.copy_to_cudarc(dst)`).
    pub fn copy_to_cudarc<D: DevicePtrMut<T>>(&self, dst: &mut D) -> Result<()> {
        self.view().copy_to_cudarc(dst)
    }
}

impl<T: Pod> DeviceViewMut<'_, T> {
    /// Enqueues a copy of `src` (a cudarc `CudaSlice` or `CudaView` of the
    /// same length) into this view, on its buffer's stream, and returns.
    ///
    /// Ordering, whatever cudarc's event tracking is set to: the copy runs
    /// after all work queued so far on `src`'s own stream (its allocation
    /// included) and after the writes cudarc's events track; `src`'s stream
    /// waits for the copy (so cudarc frees `src` after it), and cudarc's
    /// read event, where it tracks one, is recorded after it.
    ///
    /// An error that cudarc had recorded on the context for later (its
    /// `CudaContext::check_err`) is returned here, as by any cudarc call.
    pub fn copy_from_cudarc<S: DevicePtr<T>>(&mut self, src: &S) -> Result<()> {
        check_cudarc_len(self.len(), src.len())?;
        let bytes = self.size_in_bytes();
        if bytes == 0 {
            return Ok(());
        }
        let theirs = Arc::clone(src.stream());
        let ctx = theirs.context();
        let mine = cudarc_view(self.stream(), ctx)?;
        let same = theirs.cu_stream() == mine.cu_stream();
        if !same {
            mine.join(&theirs)
                .map_err(|e| driver_error("cuStreamWaitEvent", e))?;
        }
        {
            let (ptr, _read_recorded_on_drop) = src.device_ptr(&mine);
            ctx.check_err()
                .map_err(|e| driver_error("cuStreamWaitEvent", e))?;
            // SAFETY: `ptr..ptr+bytes` is `src`'s live device memory (same
            // length, checked), ordered before this point of this buffer's
            // stream (the joins and waits above), and kept alive by the
            // borrow of `src` until its own stream has waited for the copy
            // (below); the destination is this view's range of a live
            // allocation, on its buffer's stream.
            unsafe { Active::copy_async(self.as_raw(), ptr as *const c_void, bytes, self.stream().raw()) }?;
        }
        if !same {
            theirs
                .join(&mine)
                .map_err(|e| driver_error("cuStreamWaitEvent", e))?;
        }
        ctx.check_err().map_err(|e| driver_error("cuEventRecord", e))
    }
}

impl<T: Pod> DeviceView<'_, T> {
    /// Enqueues a copy of this view into `dst` (a cudarc `CudaSlice` or
    /// `CudaViewMut` of the same length), on its buffer's stream, and
    /// returns.
    ///
    /// Ordering, whatever cudarc's event tracking is set to: the copy runs
    /// after all work queued so far on `dst`'s own stream (its allocation
    /// included) and after the reads and writes cudarc's events track;
    /// `dst`'s stream waits for the copy (so its later work sees the new
    /// contents), and cudarc's write event, where it tracks one, is recorded
    /// after it. Errors as for [`DeviceViewMut::copy_from_cudarc`].
    pub fn copy_to_cudarc<D: DevicePtrMut<T>>(&self, dst: &mut D) -> Result<()> {
        check_cudarc_len(self.len(), dst.len())?;
        let bytes = self.size_in_bytes();
        if bytes == 0 {
            return Ok(());
        }
        let theirs = Arc::clone(dst.stream());
        let ctx = Arc::clone(theirs.context());
        let mine = cudarc_view(self.stream(), &ctx)?;
        let same = theirs.cu_stream() == mine.cu_stream();
        if !same {
            mine.join(&theirs)
                .map_err(|e| driver_error("cuStreamWaitEvent", e))?;
        }
        {
            let (ptr, _write_recorded_on_drop) = dst.device_ptr_mut(&mine);
            ctx.check_err()
                .map_err(|e| driver_error("cuStreamWaitEvent", e))?;
            // SAFETY: as in `copy_from_cudarc`, with the directions swapped;
            // `dst` is borrowed mutably, so nothing else on the host touches
            // it while the copy is enqueued.
            unsafe { Active::copy_async(ptr as *mut c_void, self.as_raw(), bytes, self.stream().raw()) }?;
        }
        if !same {
            theirs
                .join(&mine)
                .map_err(|e| driver_error("cuStreamWaitEvent", e))?;
        }
        ctx.check_err().map_err(|e| driver_error("cuEventRecord", e))
    }
}

fn check_cudarc_len(mine: usize, theirs: usize) -> Result<()> {
    if theirs != mine {
        return Err(InvalidReason::LengthMismatch.error(format!(
            "length mismatch: the buffer or view has {mine} elements, the cudarc memory {theirs}"
        )));
    }
    Ok(())
}

/// cudarc's kernel launch builder, for launches whose arguments include
/// somalloc buffers.
///
/// It takes every argument cudarc's `LaunchArgs` takes (through cudarc's
/// [`PushKernelArg`]: `.arg(&x)`), plus `&DeviceBuffer<T>`,
/// `&mut DeviceBuffer<T>` and views of buffers (`&DeviceView<T>`,
/// `&DeviceViewMut<T>`, `&mut DeviceViewMut<T>`), passed to the kernel as
/// the device address of the first element (a `T*` parameter). A buffer
/// (or view) that is not usable on the launch stream (its own stream, or
/// one given to [`DeviceBuffer::use_on`]) makes
/// [`Launch::launch`] return [`Error::InvalidArgument`] without launching.
/// The buffers stay borrowed until the `Launch` is dropped, so none can be
/// freed between `arg` and `launch`.
///
/// See the [module documentation](self) for an example.
#[derive(Debug)]
pub struct Launch<'a> {
    args: LaunchArgs<'a>,
    stream: Stream,
    /// The device addresses of buffer arguments, which `args` points to.
    /// Declared after `args`, so that it is dropped after it.
    addresses: Addresses,
    pushed: usize,
    refused: Option<Error>,
}

/// Heap cells for the device addresses of buffer arguments. Each is held
/// as the raw pointer that `Box::into_raw` returned, so its address never
/// changes when the list grows and no `Box` is moved while `LaunchArgs`
/// refers to its contents; they are freed on drop.
#[derive(Debug, Default)]
struct Addresses(Vec<*mut u64>);

// SAFETY: the cells are owned exclusively (as by `Box<u64>`) and hold plain
// integers; nothing else frees them.
unsafe impl Send for Addresses {}
// SAFETY: `&Addresses` allows no access to the cells.
unsafe impl Sync for Addresses {}

impl Addresses {
    /// A new cell holding `value`, alive until `self` is dropped.
    fn push(&mut self, value: u64) -> *const u64 {
        let cell = Box::into_raw(Box::new(value));
        self.0.push(cell);
        cell
    }
}

impl Drop for Addresses {
    fn drop(&mut self) {
        for &cell in &self.0 {
            // SAFETY: from `Box::into_raw` in `push`, freed only here, once.
            drop(unsafe { Box::from_raw(cell) });
        }
    }
}

impl<'a> Launch<'a> {
    /// A builder for `func` on `stream`; the stream is refused as by
    /// [`Stream::from_cudarc`].
    pub fn new(stream: &'a Arc<CudaStream>, func: &'a CudaFunction) -> Result<Launch<'a>> {
        Ok(Launch {
            stream: Stream::from_cudarc(stream)?,
            args: stream.launch_builder(func),
            addresses: Addresses::default(),
            pushed: 0,
            refused: None,
        })
    }

    /// The launch stream, as a somalloc [`Stream`].
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Makes [`Launch::launch`] also return events recorded just before and
    /// after the kernel (cudarc's `record_kernel_launch`).
    pub fn record_kernel_launch(&mut self, flags: CUevent_flags) -> &mut Self {
        self.args.record_kernel_launch(flags);
        self
    }

    fn push_buffer<T: Pod>(&mut self, buf: DeviceView<'_, T>) -> &mut Self {
        let position = self.pushed;
        self.pushed += 1;
        if self.refused.is_none() && !buf.is_usable_on(&self.stream) {
            self.refused = Some(InvalidReason::WrongStream.error(format!(
                "kernel argument {position}: the buffer is not usable on the launch stream (it is \
                 neither the buffer's stream nor one given to use_on); call \
                 buf.use_on(&Stream::from_cudarc(&stream)?) first"
            )));
        }
        let at = self.addresses.push(buf.as_raw() as u64);
        // SAFETY: `at` is a heap cell of `self.addresses`, freed only when
        // `self` is dropped (after `args`), never written again, and never
        // reached through a reference that could be invalidated (it is held
        // as a raw pointer from `Box::into_raw`, not as a `Box`). `LaunchArgs`
        // only keeps the reference and reads it during `launch`, which takes
        // `&mut self`, so every read happens while the cell is alive; the
        // longer lifetime is never used after that.
        let address: &'a u64 = unsafe { &*at };
        self.args.arg(address);
        self
    }

    /// Enqueues the kernel on the launch stream (cudarc's
    /// `LaunchArgs::launch`), or returns the refusal of a buffer argument
    /// without enqueuing anything.
    ///
    /// # Safety
    /// As for cudarc's `LaunchArgs::launch`: the arguments match the
    /// kernel's parameters in number, order and type, and the kernel stays
    /// within every buffer it is given and respects `&` (reads only).
    pub unsafe fn launch(&mut self, cfg: LaunchConfig) -> Result<Option<(CudaEvent, CudaEvent)>> {
        if let Some(e) = &self.refused {
            return Err(e.clone());
        }
        // SAFETY: forwarded from the caller; buffer arguments are usable on
        // this stream (checked at `arg`) and borrowed for `'a`.
        unsafe { self.args.launch(cfg) }.map_err(|e| driver_error("cuLaunchKernel", e))
    }

    /// [`Launch::launch`] as a cooperative launch (cudarc's
    /// `LaunchArgs::launch_cooperative`).
    ///
    /// # Safety
    /// As for [`Launch::launch`].
    pub unsafe fn launch_cooperative(&mut self, cfg: LaunchConfig) -> Result<Option<(CudaEvent, CudaEvent)>> {
        if let Some(e) = &self.refused {
            return Err(e.clone());
        }
        // SAFETY: as in `launch`.
        unsafe { self.args.launch_cooperative(cfg) }.map_err(|e| driver_error("cuLaunchCooperativeKernel", e))
    }
}

// SAFETY: every argument cudarc's `LaunchArgs` takes goes to it unchanged,
// with cudarc's own contract.
unsafe impl<'a, A> PushKernelArg<A> for Launch<'a>
where
    LaunchArgs<'a>: PushKernelArg<A>,
{
    #[inline(always)]
    fn arg(&mut self, arg: A) -> &mut Self {
        self.pushed += 1;
        self.args.arg(arg);
        self
    }
}

// SAFETY: the kernel gets the buffer's device address (8 bytes, a `T*`
// parameter), stored where it stays valid until the launch (`push_buffer`).
// The buffer is borrowed for `'b: 'a`, so it outlives the launch call, and a
// buffer not usable on the launch stream stops the launch.
unsafe impl<'a, 'b: 'a, T: Pod> PushKernelArg<&'b DeviceBuffer<T>> for Launch<'a> {
    #[inline(always)]
    fn arg(&mut self, buf: &'b DeviceBuffer<T>) -> &mut Self {
        self.push_buffer(buf.view())
    }
}

// SAFETY: as for `&DeviceBuffer<T>`.
unsafe impl<'a, 'b: 'a, T: Pod> PushKernelArg<&'b mut DeviceBuffer<T>> for Launch<'a> {
    #[inline(always)]
    fn arg(&mut self, buf: &'b mut DeviceBuffer<T>) -> &mut Self {
        self.push_buffer(buf.view())
    }
}

// SAFETY: as for `&DeviceBuffer<T>`: the address of the view's first
// element; the view borrows its buffer for `'b`, and the view itself is
// borrowed for `'b: 'a`.
unsafe impl<'a, 'b: 'a, T: Pod> PushKernelArg<&'b DeviceView<'_, T>> for Launch<'a> {
    #[inline(always)]
    fn arg(&mut self, view: &'b DeviceView<'_, T>) -> &mut Self {
        self.push_buffer(*view)
    }
}

// SAFETY: as for `&DeviceView<T>`.
unsafe impl<'a, 'b: 'a, T: Pod> PushKernelArg<&'b DeviceViewMut<'_, T>> for Launch<'a> {
    #[inline(always)]
    fn arg(&mut self, view: &'b DeviceViewMut<'_, T>) -> &mut Self {
        self.push_buffer(view.as_view())
    }
}

// SAFETY: as for `&DeviceView<T>`; the exclusive borrow lets the kernel
// write the view's range.
unsafe impl<'a, 'b: 'a, T: Pod> PushKernelArg<&'b mut DeviceViewMut<'_, T>> for Launch<'a> {
    #[inline(always)]
    fn arg(&mut self, view: &'b mut DeviceViewMut<'_, T>) -> &mut Self {
        self.push_buffer(view.as_view())
    }
}

// ---------------------------------------------------------------------------
// cudarc's pointer traits for buffers and views.

/// `stream`'s cudarc handle, for `DeviceSlice::stream`, which cannot fail.
fn handle_of(stream: &Stream) -> &Arc<CudaStream> {
    match stream.cudarc_stream() {
        Ok(handle) => handle,
        // The trait cannot return the error; `Stream::cudarc_stream` does.
        Err(e) => panic!("somalloc: no cudarc handle for the buffer's stream: {e}"),
    }
}

/// The device address of `view` for work that cudarc enqueues on `theirs`,
/// ordered as cudarc's traits ask (see "Buffers in cudarc's calls" in the
/// module docs): nothing to do on the buffer's stream or one given to
/// `use_on`; on any other stream, that stream first waits for the buffer's
/// stream, and the returned guard waits on the host for that stream's use
/// when it is dropped; where neither is possible, a null address and an
/// error recorded on cudarc's context.
fn address_for<'a, T: Pod>(view: DeviceView<'a, T>, theirs: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
    let address = view.as_raw() as CUdeviceptr;
    if view.size_in_bytes() == 0 || view.owner().is_usable_on_raw(theirs.cu_stream() as *mut c_void) {
        return (address, SyncOnDrop::Record(None));
    }
    match order_foreign(&view, theirs) {
        Ok(()) => (address, SyncOnDrop::sync_stream(theirs)),
        Err(e) => {
            let code = match e {
                Error::Capture { .. } => CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                _ => CUresult::CUDA_ERROR_INVALID_VALUE,
            };
            theirs.context().record_err::<()>(Err(DriverError(code)));
            (0, SyncOnDrop::Record(None))
        }
    }
}

/// Orders `theirs`, a stream the buffer was not given to, after everything
/// queued so far on the buffer's stream (its allocation included). Refused:
/// a stream of another device or context, and either stream capturing
/// (the wait would pull the other stream into the capture, or join a graph
/// that replays after the free).
fn order_foreign<T: Pod>(view: &DeviceView<'_, T>, theirs: &CudaStream) -> Result<()> {
    let owner = view.stream();
    let ctx = theirs.context();
    if !ctx.is_primary() || ctx.ordinal() != owner.device().ordinal() {
        return Err(InvalidReason::WrongDevice.error(format!(
            "a buffer of device {} used on a cudarc stream of {} context of device {}",
            owner.device().ordinal(),
            if ctx.is_primary() {
                "the primary"
            } else {
                "a non-primary"
            },
            ctx.ordinal()
        )));
    }
    if let Some(c) = owner.capturing()? {
        return Err(Error::capture(format!(
            "the buffer's stream is in capture {}: give the buffer to the cudarc stream with use_on \
             within the capture",
            c.id
        )));
    }
    let raw = theirs.cu_stream() as *mut c_void;
    if special_handle(raw).is_some() {
        // The legacy or per-thread default stream: not one stream to wait
        // with, so the host waits for the allocation.
        return owner.synchronize();
    }
    let foreign = Stream::borrowed(&owner.device(), raw, None)?;
    if let Some(c) = foreign.capturing()? {
        return Err(Error::capture(format!(
            "the cudarc stream is in capture {}: give the buffer to it with use_on",
            c.id
        )));
    }
    order_after(&foreign, owner)
}

impl<T: Pod> DeviceSlice<T> for DeviceBuffer<T> {
    fn len(&self) -> usize {
        DeviceBuffer::len(self)
    }

    /// The buffer's stream as cudarc's handle ([`Stream::cudarc_stream`]).
    ///
    /// # Panics
    /// When cudarc cannot open the device (the trait has no way to return
    /// the error): call `buf.stream().cudarc_stream()?` first to get it as
    /// an error; once that succeeded, this cannot fail.
    fn stream(&self) -> &Arc<CudaStream> {
        handle_of(DeviceBuffer::stream(self))
    }
}

/// A read of the buffer by cudarc work on `stream` (cuBLAS, cuDNN,
/// cudarc's copies); see "Buffers in cudarc's calls" in the module docs.
impl<T: Pod> DevicePtr<T> for DeviceBuffer<T> {
    fn device_ptr<'a>(&'a self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        address_for(self.view(), stream)
    }
}

/// A write of the buffer by cudarc work on `stream`; as for [`DevicePtr`].
impl<T: Pod> DevicePtrMut<T> for DeviceBuffer<T> {
    fn device_ptr_mut<'a>(&'a mut self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        address_for(self.view(), stream)
    }
}

impl<T: Pod> DeviceSlice<T> for DeviceView<'_, T> {
    fn len(&self) -> usize {
        DeviceView::len(self)
    }

    /// As for `DeviceBuffer`: the buffer's stream as cudarc's handle.
    ///
    /// # Panics
    /// As for `DeviceBuffer`'s.
    fn stream(&self) -> &Arc<CudaStream> {
        handle_of(DeviceView::stream(self))
    }
}

/// A read of the view by cudarc work; as for `DeviceBuffer`.
impl<T: Pod> DevicePtr<T> for DeviceView<'_, T> {
    fn device_ptr<'a>(&'a self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        address_for(*self, stream)
    }
}

impl<T: Pod> DeviceSlice<T> for DeviceViewMut<'_, T> {
    fn len(&self) -> usize {
        DeviceViewMut::len(self)
    }

    /// As for `DeviceBuffer`: the buffer's stream as cudarc's handle.
    ///
    /// # Panics
    /// As for `DeviceBuffer`'s.
    fn stream(&self) -> &Arc<CudaStream> {
        handle_of(DeviceViewMut::stream(self))
    }
}

/// A read of the view by cudarc work; as for `DeviceBuffer`.
impl<T: Pod> DevicePtr<T> for DeviceViewMut<'_, T> {
    fn device_ptr<'a>(&'a self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        address_for(self.as_view(), stream)
    }
}

/// A write of the view by cudarc work; as for `DeviceBuffer`.
impl<T: Pod> DevicePtrMut<T> for DeviceViewMut<'_, T> {
    fn device_ptr_mut<'a>(&'a mut self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        address_for(self.as_view(), stream)
    }
}
