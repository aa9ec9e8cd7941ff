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

mod copy;
mod launch;
mod pointers;

pub use launch::Launch;

use std::ffi::c_void;
use std::sync::Arc;

use ::cudarc::driver::sys::CUstream;
use ::cudarc::driver::{CudaContext, CudaStream, DriverError};

use crate::device::Device;
use crate::error::{Error, InvalidReason, Result, VendorCode};
use crate::stream::{special_handle, Stream};

// For the links of the module docs.
#[cfg(doc)]
use {
    crate::buffer::{DeviceBuffer, DeviceView, DeviceViewMut},
    ::cudarc::driver::{DevicePtr, DevicePtrMut, DeviceSlice, PushKernelArg},
};

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

/// Why `Stream::from_cudarc` refuses `raw`, if it is one of the special
/// handles: what it is, and what to use instead.
fn special_stream_refusal(raw: *mut c_void) -> Option<Error> {
    let what = special_handle(raw)?;
    let instead = if raw as usize == crate::stream::PER_THREAD {
        "cudarc's per_thread_stream() cannot be wrapped as one stream; use unsafe { \
         Stream::per_thread_default(&device) } on one thread, with that device current \
         (ctx.bind_to_thread()), or a stream of your own: Stream::from_cudarc(&ctx.new_stream()?)"
    } else {
        "cudarc's default_stream() is the legacy default stream of whichever device is current \
         on the calling thread, not of one device, so from_cudarc cannot wrap it; use unsafe { \
         Stream::legacy_default(&device) } on threads that keep that device current \
         (ctx.bind_to_thread()), or a stream of your own: Stream::from_cudarc(&ctx.new_stream()?)"
    };
    Some(InvalidReason::SpecialStreamHandle.error(format!("{what}: {instead}")))
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
    /// * cudarc's `ctx.default_stream()` and `ctx.per_thread_stream()`.
    ///   Their handles do not name one stream by themselves: the null handle
    ///   is the legacy default stream of whichever device is current on the
    ///   calling thread, and `0x2` is another stream on every thread. Buffers
    ///   can live on both, through [`Stream::legacy_default`] and
    ///   [`Stream::per_thread_default`], which are `unsafe` because the
    ///   caller keeps the device current on every thread that uses the
    ///   stream (cudarc's `ctx.bind_to_thread()`), and the per-thread stream
    ///   on its one thread. A stream of its own (`ctx.new_stream()`) needs
    ///   neither promise, and the cache tier serves it;
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
        if let Some(refused) = special_stream_refusal(raw) {
            return Err(refused);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The refusal of a default stream's handle says what to use instead,
    /// as the docs of `Stream::legacy_default` and `per_thread_default` do.
    #[test]
    fn the_default_streams_refusal_names_what_to_use_instead() {
        for raw in [0usize, 1] {
            let e = special_stream_refusal(raw as *mut c_void).expect("refused");
            assert_eq!(e.invalid_reason(), Some(InvalidReason::SpecialStreamHandle));
            let why = e.to_string();
            for words in [
                "legacy default stream",
                "Stream::legacy_default",
                "bind_to_thread",
                "new_stream",
            ] {
                assert!(why.contains(words), "{raw:#x}: {words:?} in {why}");
            }
            assert!(!why.contains("not one stream"), "{why}");
        }
        let e = special_stream_refusal(crate::stream::PER_THREAD as *mut c_void).expect("refused");
        let why = e.to_string();
        for words in ["per_thread_stream", "Stream::per_thread_default", "new_stream"] {
            assert!(why.contains(words), "{words:?} in {why}");
        }
        assert!(special_stream_refusal(0x1234 as *mut c_void).is_none());
    }
}
