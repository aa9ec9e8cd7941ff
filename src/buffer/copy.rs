//! Copies between host and device, between buffers, and fills: those of
//! the buffer's whole view (see `view.rs`).

use bytemuck::Pod;

use super::view::AsDeviceView;
use super::DeviceBuffer;
use crate::error::Result;

impl<T: Pod> DeviceBuffer<T> {
    /// Copies `src` into the buffer and waits for the copy to finish.
    ///
    /// On a capturing stream this is [`Error::Capture`](crate::Error::Capture)
    /// and nothing is enqueued (the graph would read `src` at every launch,
    /// long after this borrow ends). A range of the buffer:
    /// [`DeviceViewMut::copy_from_host`](crate::DeviceViewMut::copy_from_host).
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        self.view_mut().copy_from_host(src)
    }

    /// Copies the buffer into `dst` and waits for the copy to finish.
    ///
    /// On a capturing stream this is [`Error::Capture`](crate::Error::Capture)
    /// and nothing is enqueued (the graph would write `dst` at every launch).
    /// A range of the buffer: [`DeviceView::copy_to_host`](crate::DeviceView::copy_to_host).
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.view().copy_to_host(dst)
    }

    /// Copies the buffer into a new `Vec` (waits for the copy).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.view().to_vec()
    }

    /// Enqueues a copy of `src` into the buffer on the owning stream.
    ///
    /// # Safety
    /// `src` must stay alive and unchanged until the copy has completed
    /// (for example until the stream is synchronised). On a capturing
    /// stream the copy is recorded into the graph and happens at every
    /// launch: `src` must then stay alive and unchanged for as long as the
    /// graph (or an executable graph made from it) may be launched.
    pub unsafe fn copy_from_host_async(&mut self, src: &[T]) -> Result<()> {
        // SAFETY: the caller's contract, for the whole buffer.
        unsafe { self.view_mut().copy_from_host_async(src) }
    }

    /// Enqueues a copy of the buffer into `dst` on the owning stream.
    ///
    /// # Safety
    /// `dst` must stay alive and must not be read or written until the copy
    /// has completed (for example until the stream is synchronised). On a
    /// capturing stream the copy happens at every launch of the graph: `dst`
    /// must then stay alive, and unaccessed while a launch runs, for as long
    /// as the graph may be launched.
    pub unsafe fn copy_to_host_async(&self, dst: &mut [T]) -> Result<()> {
        // SAFETY: the caller's contract, for the whole buffer.
        unsafe { self.view().copy_to_host_async(dst) }
    }

    /// Enqueues a device-to-device copy of `src` (a buffer or a view of one,
    /// of the same length) into this buffer on this buffer's stream. `src`
    /// must be usable on that stream (its owner, or given to `src.use_on`).
    ///
    /// ```no_run
    /// use somalloc::{Device, DeviceBuffer, Stream};
    /// # fn main() -> somalloc::Result<()> {
    /// let stream = Stream::new(&Device::get(0)?)?;
    /// let big = DeviceBuffer::from_slice(&[1u16, 2, 3, 4], &stream)?;
    /// let mut small = DeviceBuffer::<u16>::zeroed(2, &stream)?;
    /// small.copy_from_device(&big.slice(1..3)?)?; // a range of `big`
    /// small.slice_mut(..1)?.copy_from_device(&big.slice(3..)?)?; // into a range
    /// assert_eq!(small.to_vec()?, [4, 3]);
    /// # Ok(()) }
    /// ```
    pub fn copy_from_device<S: AsDeviceView<T> + ?Sized>(&mut self, src: &S) -> Result<()> {
        self.view_mut().copy_from_device(src)
    }

    /// Enqueues a fill of every byte with `value` on the owning stream. A
    /// range of the buffer: [`DeviceViewMut::memset`](crate::DeviceViewMut::memset).
    pub fn memset(&mut self, value: u8) -> Result<()> {
        self.view_mut().memset(value)
    }
}
