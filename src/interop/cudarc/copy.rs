//! Copies between somalloc buffers (and views) and cudarc's memory.

use std::ffi::c_void;
use std::sync::Arc;

use ::cudarc::driver::sys::CUstream;
use ::cudarc::driver::{CudaContext, CudaStream, DevicePtr, DevicePtrMut};
use bytemuck::Pod;

use super::driver_error;
use crate::backend::Backend;
use crate::buffer::{DeviceBuffer, DeviceView, DeviceViewMut};
use crate::error::{InvalidReason, Result};
use crate::stream::Stream;
use crate::Active;

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
