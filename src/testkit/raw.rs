//! The vendor's stream-ordered calls with nothing on top, through the same
//! FFI the backend uses: the baseline benchmarks compare somalloc against,
//! and captures as another library would make them. Unstable, like the
//! whole [test kit](super).

use std::ffi::c_void;

use crate::backend::{Backend, DevicePtr};
use crate::error::Result;
use crate::pool::MemPool;
use crate::stream::Stream;
use crate::Active;

/// `cudaMallocAsync` / `hipMallocAsync` from the stream's current pool.
#[inline]
pub fn malloc_async(bytes: usize, stream: &Stream) -> Result<*mut c_void> {
    Active::malloc_async(bytes, stream.raw()).map(DevicePtr::as_mut_ptr)
}

/// `cudaMallocFromPoolAsync` / `hipMallocFromPoolAsync`.
#[inline]
pub fn malloc_from_pool_async(bytes: usize, pool: &MemPool, stream: &Stream) -> Result<*mut c_void> {
    Active::malloc_from_pool_async(bytes, pool.raw(), stream.raw()).map(DevicePtr::as_mut_ptr)
}

/// `cudaFreeAsync` / `hipFreeAsync`.
///
/// # Safety
/// `ptr` came from one of the allocation functions above, is freed once,
/// and no work uses it after this point of `stream`'s order.
#[inline]
pub unsafe fn free_async(ptr: *mut c_void, stream: &Stream) -> Result<()> {
    // SAFETY: forwarded from the caller.
    unsafe { Active::free_async(DevicePtr(ptr as usize), stream.raw()) }
}

/// `cudaStreamBeginCapture` with nothing of somalloc's around it: a
/// capture as another library would begin it (somalloc does not count
/// it). For tests of borrowed streams.
#[doc(hidden)]
pub fn begin_capture(stream: &Stream, mode: crate::CaptureMode) -> Result<()> {
    Active::stream_begin_capture(stream.raw(), mode.to_raw())
}

/// `cudaStreamEndCapture` with nothing of somalloc's around it.
#[doc(hidden)]
pub fn end_capture(stream: &Stream) -> Result<RawGraph> {
    Active::stream_end_capture(stream.raw()).map(RawGraph)
}

/// `cudaStreamSynchronize` without somalloc's capture check: during a
/// capture it invalidates the capture. For tests of invalidated captures.
#[doc(hidden)]
pub fn synchronize(stream: &Stream) -> Result<()> {
    Active::stream_synchronize(stream.raw())
}

/// A graph as another library holds it; destroyed on drop.
#[doc(hidden)]
#[derive(Debug)]
pub struct RawGraph(<Active as Backend>::Graph);

impl RawGraph {
    /// `cudaGraphInstantiateWithFlags`, with or without auto-free-on-launch.
    pub fn instantiate(&self, auto_free_on_launch: bool) -> Result<RawGraphExec> {
        Active::graph_instantiate(self.0, auto_free_on_launch).map(RawGraphExec)
    }
}

impl Drop for RawGraph {
    fn drop(&mut self) {
        crate::error::record_drop_error(Active::graph_destroy(self.0));
    }
}

/// An executable graph as another library holds it; destroyed on drop.
#[doc(hidden)]
#[derive(Debug)]
pub struct RawGraphExec(<Active as Backend>::GraphExec);

impl RawGraphExec {
    /// `cudaGraphLaunch`.
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        Active::graph_launch(self.0, stream.raw())
    }
}

impl Drop for RawGraphExec {
    fn drop(&mut self) {
        crate::error::record_drop_error(Active::graph_exec_destroy(self.0));
    }
}
