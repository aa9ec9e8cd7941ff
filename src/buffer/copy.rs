//! Copies between host and device, between buffers, and fills.

use bytemuck::Pod;

use super::DeviceBuffer;
use crate::backend::Backend;
use crate::error::{Error, InvalidReason, Result};
use crate::Active;

impl<T: Pod> DeviceBuffer<T> {
    /// Copies `src` into the buffer and waits for the copy to finish.
    ///
    /// On a capturing stream this is [`Error::Capture`] and nothing is
    /// enqueued (the graph would read `src` at every launch, long after this
    /// borrow ends).
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        self.check_len(src.len())?;
        self.refuse_host_copy_in_capture()?;
        // SAFETY: `src` is borrowed until the stream is synchronised below.
        unsafe { self.copy_from_host_async(src)? };
        self.stream.synchronize()
    }

    /// Copies the buffer into `dst` and waits for the copy to finish.
    ///
    /// On a capturing stream this is [`Error::Capture`] and nothing is
    /// enqueued (the graph would write `dst` at every launch).
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.check_len(dst.len())?;
        self.refuse_host_copy_in_capture()?;
        // SAFETY: `dst` is borrowed until the stream is synchronised below.
        unsafe { self.copy_to_host_async(dst)? };
        self.stream.synchronize()
    }

    /// A synchronous host copy cannot be recorded into a graph.
    fn refuse_host_copy_in_capture(&self) -> Result<()> {
        match self.stream.capturing()? {
            Some(c) => Err(Error::capture(format!(
                "a synchronous copy between host and device on a stream in capture {}; \
                 end the capture first",
                c.id
            ))),
            None => Ok(()),
        }
    }

    /// Copies the buffer into a new `Vec` (waits for the copy).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
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
        self.check_len(src.len())?;
        if self.size_in_bytes() == 0 {
            return Ok(());
        }
        // SAFETY: the device range is this live allocation; the host range
        // is `src`, whose lifetime the caller guarantees.
        unsafe {
            Active::copy_async(
                self.ptr.as_mut_ptr(),
                src.as_ptr().cast(),
                self.size_in_bytes(),
                self.stream.raw(),
            )
        }
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
        self.check_len(dst.len())?;
        if self.size_in_bytes() == 0 {
            return Ok(());
        }
        // SAFETY: as above, for the opposite direction.
        unsafe {
            Active::copy_async(
                dst.as_mut_ptr().cast(),
                self.ptr.as_mut_ptr(),
                self.size_in_bytes(),
                self.stream.raw(),
            )
        }
    }

    /// Enqueues a device-to-device copy of `src` into this buffer on this
    /// buffer's stream. `src` must be usable on that stream (its owner, or
    /// given to `src.use_on`).
    pub fn copy_from_device(&mut self, src: &DeviceBuffer<T>) -> Result<()> {
        self.check_len(src.len())?;
        if !src.is_usable_on(&self.stream) {
            return Err(InvalidReason::WrongStream
                .error("source buffer is not usable on the destination's stream; call use_on first"));
        }
        if self.size_in_bytes() == 0 {
            return Ok(());
        }
        // SAFETY: both are live allocations of the same size, and `src` is
        // ordered on this stream (checked above); its free waits for this
        // stream if it is not the owner.
        unsafe {
            Active::copy_async(
                self.ptr.as_mut_ptr(),
                src.ptr.as_mut_ptr(),
                self.size_in_bytes(),
                self.stream.raw(),
            )
        }
    }

    /// Enqueues a fill of every byte with `value` on the owning stream.
    pub fn memset(&mut self, value: u8) -> Result<()> {
        if self.size_in_bytes() == 0 {
            return Ok(());
        }
        // SAFETY: the range is exactly this live allocation.
        unsafe { Active::memset_async(self.ptr, value, self.size_in_bytes(), self.stream.raw()) }
    }

    fn check_len(&self, other: usize) -> Result<()> {
        if other != self.len {
            return Err(InvalidReason::LengthMismatch.error(format!(
                "length mismatch: buffer has {} elements, the other side {other}",
                self.len
            )));
        }
        Ok(())
    }
}
