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
//!   copy between a buffer and a `CudaSlice` (or view), stream-ordered.
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

use ::cudarc::driver::sys::{CUevent_flags, CUstream};
use ::cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaStream, DevicePtr, DevicePtrMut, DriverError, LaunchArgs,
    LaunchConfig, PushKernelArg,
};
use bytemuck::Pod;

use crate::backend::Backend;
use crate::buffer::DeviceBuffer;
use crate::device::Device;
use crate::error::{Error, InvalidReason, Result, VendorCode};
use crate::stream::{special_handle, Stream};
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

    /// The cudarc stream this `Stream` was made from with
    /// [`Stream::from_cudarc`], if it was.
    pub fn cudarc_stream(&self) -> Option<&Arc<CudaStream>> {
        self.keep_alive::<Arc<CudaStream>>()
    }
}

/// A cudarc stream object for `stream` in `ctx`: the one it was made from,
/// or a borrowed wrapper (which never destroys it) when `ctx` is the primary
/// context of the stream's device.
fn cudarc_view(stream: &Stream, ctx: &Arc<CudaContext>) -> Result<Arc<CudaStream>> {
    if let Some(cs) = stream.cudarc_stream() {
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
    /// same length) into this buffer, on this buffer's stream, and returns.
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
        self.check_cudarc_len(src.len())?;
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
            // (below); the destination is this live allocation, on its own
            // stream.
            unsafe { Active::copy_async(self.as_raw(), ptr as *const c_void, bytes, self.stream().raw()) }?;
        }
        if !same {
            theirs
                .join(&mine)
                .map_err(|e| driver_error("cuStreamWaitEvent", e))?;
        }
        ctx.check_err().map_err(|e| driver_error("cuEventRecord", e))
    }

    /// Enqueues a copy of this buffer into `dst` (a cudarc `CudaSlice` or
    /// `CudaViewMut` of the same length), on this buffer's stream, and
    /// returns.
    ///
    /// Ordering, whatever cudarc's event tracking is set to: the copy runs
    /// after all work queued so far on `dst`'s own stream (its allocation
    /// included) and after the reads and writes cudarc's events track;
    /// `dst`'s stream waits for the copy (so its later work sees the new
    /// contents), and cudarc's write event, where it tracks one, is recorded
    /// after it. Errors as for [`DeviceBuffer::copy_from_cudarc`].
    pub fn copy_to_cudarc<D: DevicePtrMut<T>>(&self, dst: &mut D) -> Result<()> {
        self.check_cudarc_len(dst.len())?;
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

    fn check_cudarc_len(&self, theirs: usize) -> Result<()> {
        if theirs != self.len() {
            return Err(InvalidReason::LengthMismatch.error(format!(
                "length mismatch: buffer has {} elements, the cudarc memory {theirs}",
                self.len()
            )));
        }
        Ok(())
    }
}

/// cudarc's kernel launch builder, for launches whose arguments include
/// somalloc buffers.
///
/// It takes every argument cudarc's `LaunchArgs` takes (through cudarc's
/// [`PushKernelArg`]: `.arg(&x)`), plus `&DeviceBuffer<T>` and
/// `&mut DeviceBuffer<T>`, passed to the kernel as the device address (a
/// `T*` parameter). A buffer that is not usable on the launch stream (its
/// own stream, or one given to [`DeviceBuffer::use_on`]) makes
/// [`Launch::launch`] return [`Error::InvalidArgument`] without launching.
/// The buffers stay borrowed until the `Launch` is dropped, so none can be
/// freed between `arg` and `launch`.
///
/// See the [module documentation](self) for an example.
#[derive(Debug)]
pub struct Launch<'a> {
    args: LaunchArgs<'a>,
    stream: Stream,
    /// The device addresses of buffer arguments. `args` points into these
    /// boxes, whose contents never move and live as long as `self` (a plain
    /// `Vec<u64>` would move them when it grows).
    #[allow(clippy::vec_box)]
    addresses: Vec<Box<u64>>,
    pushed: usize,
    refused: Option<Error>,
}

impl<'a> Launch<'a> {
    /// A builder for `func` on `stream`; the stream is refused as by
    /// [`Stream::from_cudarc`].
    pub fn new(stream: &'a Arc<CudaStream>, func: &'a CudaFunction) -> Result<Launch<'a>> {
        Ok(Launch {
            stream: Stream::from_cudarc(stream)?,
            args: stream.launch_builder(func),
            addresses: Vec::new(),
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

    fn push_buffer<T: Pod>(&mut self, buf: &DeviceBuffer<T>) -> &mut Self {
        let position = self.pushed;
        self.pushed += 1;
        if self.refused.is_none() && !buf.is_usable_on(&self.stream) {
            self.refused = Some(InvalidReason::WrongStream.error(format!(
                "kernel argument {position}: the buffer is not usable on the launch stream (it is \
                 neither the buffer's stream nor one given to use_on); call \
                 buf.use_on(&Stream::from_cudarc(&stream)?) first"
            )));
        }
        let address = Box::new(buf.as_raw() as u64);
        let at: *const u64 = &*address;
        self.addresses.push(address);
        // SAFETY: `at` points into a box owned by `self.addresses`, which is
        // never shrunk: the value stays at that address until `self` is
        // dropped. `LaunchArgs` only keeps the pointer and reads it during
        // `launch`, which takes `&mut self`, so every read happens while the
        // box is alive; the longer lifetime is never used after that.
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
        self.push_buffer(buf)
    }
}

// SAFETY: as for `&DeviceBuffer<T>`.
unsafe impl<'a, 'b: 'a, T: Pod> PushKernelArg<&'b mut DeviceBuffer<T>> for Launch<'a> {
    #[inline(always)]
    fn arg(&mut self, buf: &'b mut DeviceBuffer<T>) -> &mut Self {
        self.push_buffer(buf)
    }
}
