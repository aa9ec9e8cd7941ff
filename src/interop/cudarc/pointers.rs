//! cudarc's pointer traits ([`DevicePtr`], [`DevicePtrMut`], [`DeviceSlice`])
//! for buffers and views: see "Buffers in cudarc's calls" in the
//! [module docs](super).

use std::ffi::c_void;
use std::sync::Arc;

use ::cudarc::driver::sys::{CUdeviceptr, CUresult};
use ::cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, DriverError, SyncOnDrop};
use bytemuck::Pod;

use crate::buffer::{DeviceBuffer, DeviceView, DeviceViewMut};
use crate::error::{Error, InvalidReason, Result};
use crate::stream::{order_after, special_handle, Stream};

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
