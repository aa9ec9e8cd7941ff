//! Views: typed sub-ranges of a buffer ([`DeviceView`], [`DeviceViewMut`]),
//! and the copies and fills, which work on views (a buffer's own copies
//! are those of its whole view).

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::mem::size_of;
use std::ops::{Bound, RangeBounds};

use bytemuck::Pod;

use super::DeviceBuffer;
use crate::backend::{Backend, DevicePtr};
use crate::error::{Error, InvalidReason, Result};
use crate::stream::Stream;
use crate::Active;

/// A shared view of `len` elements of a [`DeviceBuffer`], from
/// [`DeviceBuffer::slice`] (or [`DeviceBuffer::view`] for all of it).
///
/// It goes where the buffer goes for reading: a copy source
/// ([`DeviceBuffer::copy_from_device`], [`HostBuffer::copy_from_device`](crate::HostBuffer::copy_from_device),
/// [`DeviceView::copy_to_host`], cudarc's copies), a kernel argument (with
/// the `cudarc` feature, `interop::cudarc::Launch`). It borrows the buffer,
/// so the buffer's stream rules hold unchanged: the view is usable on the
/// buffer's stream and on the streams given to
/// [`DeviceBuffer::use_on`], and the buffer (and its free) outlives it.
///
/// Cheap to copy: a reference, an address and a length.
///
/// ```no_run
/// use somalloc::{Device, DeviceBuffer, Stream};
/// # fn main() -> somalloc::Result<()> {
/// let stream = Stream::new(&Device::get(0)?)?;
/// let buf = DeviceBuffer::from_slice(&[1u32, 2, 3, 4, 5, 6], &stream)?;
/// let middle = buf.slice(2..5)?;
/// assert_eq!(middle.to_vec()?, [3, 4, 5]);
/// let (left, right) = middle.split_at(1)?;
/// assert_eq!((left.len(), right.len()), (1, 2));
/// assert!(buf.slice(4..7).is_err()); // InvalidReason::OutOfBounds
/// # Ok(()) }
/// ```
pub struct DeviceView<'a, T: Pod> {
    owner: &'a DeviceBuffer<T>,
    /// The address of the first element (null when the buffer has none).
    ptr: DevicePtr,
    len: usize,
}

/// An exclusive view of `len` elements of a [`DeviceBuffer`], from
/// [`DeviceBuffer::slice_mut`] (or [`DeviceBuffer::view_mut`]): what a
/// [`DeviceView`] does, and writing: a copy destination
/// ([`DeviceViewMut::copy_from_host`], [`DeviceViewMut::copy_from_device`],
/// [`HostBuffer::copy_to_device`](crate::HostBuffer::copy_to_device),
/// cudarc's copies), a fill ([`DeviceViewMut::memset`]), a kernel argument
/// that the kernel writes.
///
/// It borrows the buffer mutably, so nothing else reads or writes the
/// buffer through somalloc while it lives, except other views of disjoint
/// ranges split off the same borrow ([`DeviceViewMut::split_at_mut`]).
///
/// ```no_run
/// use somalloc::{Device, DeviceBuffer, Stream};
/// # fn main() -> somalloc::Result<()> {
/// let stream = Stream::new(&Device::get(0)?)?;
/// let mut buf = DeviceBuffer::<u8>::zeroed(8, &stream)?;
/// buf.slice_mut(2..4)?.memset(7)?;
/// let (mut head, mut tail) = buf.view_mut().split_at_mut(6)?;
/// head.slice_mut(..1)?.copy_from_host(&[1])?;
/// tail.copy_from_host(&[9, 9])?;
/// assert_eq!(buf.to_vec()?, [1, 0, 7, 7, 0, 0, 9, 9]);
/// # Ok(()) }
/// ```
pub struct DeviceViewMut<'a, T: Pod> {
    /// The buffer, read only for its stream, its `use_on` streams and its
    /// device: the memory of `ptr..ptr + len` is this view's alone while it
    /// lives (it was made from a `&'a mut` of the buffer, or split off such
    /// a view into disjoint ranges).
    owner: &'a DeviceBuffer<T>,
    ptr: DevicePtr,
    len: usize,
    _exclusive: PhantomData<&'a mut [T]>,
}

/// Device memory that can be read through a [`DeviceView`]: a
/// [`DeviceBuffer`], a [`DeviceView`], a [`DeviceViewMut`]. The copy
/// sources take it, so a whole buffer and a range of one go to the same
/// call.
pub trait AsDeviceView<T: Pod> {
    /// The view of the whole of it.
    fn device_view(&self) -> DeviceView<'_, T>;
}

/// Device memory that can be written through a [`DeviceViewMut`]: a
/// [`DeviceBuffer`] or a [`DeviceViewMut`]. The copy destinations take it.
pub trait AsDeviceViewMut<T: Pod>: AsDeviceView<T> {
    /// The exclusive view of the whole of it.
    fn device_view_mut(&mut self) -> DeviceViewMut<'_, T>;
}

impl<T: Pod> AsDeviceView<T> for DeviceBuffer<T> {
    fn device_view(&self) -> DeviceView<'_, T> {
        self.view()
    }
}

impl<T: Pod> AsDeviceViewMut<T> for DeviceBuffer<T> {
    fn device_view_mut(&mut self) -> DeviceViewMut<'_, T> {
        self.view_mut()
    }
}

impl<T: Pod> AsDeviceView<T> for DeviceView<'_, T> {
    fn device_view(&self) -> DeviceView<'_, T> {
        *self
    }
}

impl<T: Pod> AsDeviceView<T> for DeviceViewMut<'_, T> {
    fn device_view(&self) -> DeviceView<'_, T> {
        self.as_view()
    }
}

impl<T: Pod> AsDeviceViewMut<T> for DeviceViewMut<'_, T> {
    fn device_view_mut(&mut self) -> DeviceViewMut<'_, T> {
        self.reborrow()
    }
}

/// `start..end` of `range` over `len` elements, or `OutOfBounds`.
fn bounds(range: impl RangeBounds<usize>, len: usize) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(s), Some(e)) if s <= e && e <= len => Ok((s, e)),
        _ => Err(InvalidReason::OutOfBounds.error(format!(
            "the range {:?}..{:?} is not within the {len} elements of the buffer or view",
            range.start_bound(),
            range.end_bound()
        ))),
    }
}

/// The address of element `index` of memory that starts at `ptr`.
fn offset<T>(ptr: DevicePtr, index: usize) -> DevicePtr {
    // `index` is at most the length of a live allocation (or of a 0-byte
    // buffer, whose address is null and whose elements take 0 bytes), so
    // the product is at most its size, which fits.
    DevicePtr(ptr.0 + index * size_of::<T>())
}

fn check_len(mine: usize, other: usize, what: &str) -> Result<()> {
    if mine != other {
        return Err(InvalidReason::LengthMismatch.error(format!(
            "length mismatch: the buffer or view has {mine} elements, {what} {other}"
        )));
    }
    Ok(())
}

impl<T: Pod> DeviceBuffer<T> {
    /// The shared view of the whole buffer.
    pub fn view(&self) -> DeviceView<'_, T> {
        DeviceView {
            owner: self,
            ptr: self.ptr,
            len: self.len,
        }
    }

    /// The exclusive view of the whole buffer.
    pub fn view_mut(&mut self) -> DeviceViewMut<'_, T> {
        DeviceViewMut {
            ptr: self.ptr,
            len: self.len,
            owner: self,
            _exclusive: PhantomData,
        }
    }

    /// A shared view of the elements in `range` (`2..5`, `..n`, `3..`,
    /// `..`); a range outside the buffer is [`InvalidReason::OutOfBounds`].
    /// See [`DeviceView`].
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceView<'_, T>> {
        self.view().slice(range)
    }

    /// An exclusive view of the elements in `range`; a range outside the
    /// buffer is [`InvalidReason::OutOfBounds`]. See [`DeviceViewMut`].
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<DeviceViewMut<'_, T>> {
        self.view_mut().into_slice(range)
    }
}

impl<T: Pod> Clone for DeviceView<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Pod> Copy for DeviceView<'_, T> {}

impl<T: Pod> fmt::Debug for DeviceView<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceView")
            .field("ptr", &format_args!("{:#x}", self.ptr.0))
            .field("len", &self.len)
            .field("stream", &self.owner.stream().as_raw())
            .finish()
    }
}

impl<T: Pod> fmt::Debug for DeviceViewMut<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceViewMut")
            .field("ptr", &format_args!("{:#x}", self.ptr.0))
            .field("len", &self.len)
            .field("stream", &self.owner.stream().as_raw())
            .finish()
    }
}

/// The accessors that a shared and a mutable view have alike (the same
/// fields, the same meaning).
macro_rules! view_accessors {
    () => {
        /// Number of elements.
        pub fn len(&self) -> usize {
            self.len
        }

        /// Whether the view has no elements.
        pub fn is_empty(&self) -> bool {
            self.len == 0
        }

        /// Size in bytes.
        pub fn size_in_bytes(&self) -> usize {
            self.len * size_of::<T>()
        }

        /// The device address of the first element (null when the buffer has
        /// no memory), valid as the buffer's is ([`DeviceBuffer::as_raw`]).
        pub fn as_raw(&self) -> *mut c_void {
            self.ptr.as_mut_ptr()
        }

        /// The buffer's stream (which owns the memory and will free it).
        pub fn stream(&self) -> &'a Stream {
            self.owner.stream()
        }

        /// Whether work on `stream` may use the view: as for its buffer
        /// ([`DeviceBuffer::is_usable_on`]).
        pub fn is_usable_on(&self, stream: &Stream) -> bool {
            self.owner.is_usable_on(stream)
        }
    };
}

impl<'a, T: Pod> DeviceView<'a, T> {
    view_accessors!();

    /// The buffer the view is of.
    #[cfg_attr(not(feature = "cudarc"), allow(dead_code))]
    pub(crate) fn owner(&self) -> &'a DeviceBuffer<T> {
        self.owner
    }

    /// The elements in `range` of this view; a range outside it is
    /// [`InvalidReason::OutOfBounds`].
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceView<'a, T>> {
        let (start, end) = bounds(range, self.len)?;
        Ok(DeviceView {
            owner: self.owner,
            ptr: offset::<T>(self.ptr, start),
            len: end - start,
        })
    }

    /// The first `mid` elements and the rest; `mid` above the length is
    /// [`InvalidReason::OutOfBounds`].
    pub fn split_at(&self, mid: usize) -> Result<(DeviceView<'a, T>, DeviceView<'a, T>)> {
        Ok((self.slice(..mid)?, self.slice(mid..)?))
    }

    /// Copies the view into `dst` (of the same length) and waits for the
    /// copy, on the buffer's stream; as [`DeviceBuffer::copy_to_host`].
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        check_len(self.len, dst.len(), "the host slice")?;
        refuse_host_copy_in_capture(self.stream())?;
        // SAFETY: `dst` is borrowed until the stream is synchronised below.
        unsafe { self.copy_to_host_async(dst)? };
        self.stream().synchronize()
    }

    /// Copies the view into a new `Vec` (waits for the copy).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }

    /// Enqueues a copy of the view into `dst` on the buffer's stream; as
    /// [`DeviceBuffer::copy_to_host_async`].
    ///
    /// # Safety
    /// As for [`DeviceBuffer::copy_to_host_async`].
    pub unsafe fn copy_to_host_async(&self, dst: &mut [T]) -> Result<()> {
        check_len(self.len, dst.len(), "the host slice")?;
        if self.size_in_bytes() == 0 {
            return Ok(());
        }
        // SAFETY: the device range is within this live allocation (the
        // view's bounds were checked); the host range is `dst`, whose
        // lifetime the caller guarantees.
        unsafe {
            Active::copy_async(
                dst.as_mut_ptr().cast(),
                self.as_raw(),
                self.size_in_bytes(),
                self.stream().raw(),
            )
        }
    }
}

impl<'a, T: Pod> DeviceViewMut<'a, T> {
    view_accessors!();

    /// A shared view of the same elements, for as long as it is borrowed.
    pub fn as_view(&self) -> DeviceView<'_, T> {
        DeviceView {
            owner: self.owner,
            ptr: self.ptr,
            len: self.len,
        }
    }

    /// This view again, for a shorter borrow (to pass it on and keep it).
    pub fn reborrow(&mut self) -> DeviceViewMut<'_, T> {
        DeviceViewMut {
            owner: self.owner,
            ptr: self.ptr,
            len: self.len,
            _exclusive: PhantomData,
        }
    }

    /// A shared view of the elements in `range`; outside the view:
    /// [`InvalidReason::OutOfBounds`].
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceView<'_, T>> {
        self.as_view().slice(range)
    }

    /// An exclusive view of the elements in `range`, for as long as this
    /// one is borrowed; outside the view: [`InvalidReason::OutOfBounds`].
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<DeviceViewMut<'_, T>> {
        self.reborrow().into_slice(range)
    }

    /// This view narrowed to the elements in `range`; outside the view:
    /// [`InvalidReason::OutOfBounds`].
    pub fn into_slice(self, range: impl RangeBounds<usize>) -> Result<DeviceViewMut<'a, T>> {
        let (start, end) = bounds(range, self.len)?;
        Ok(DeviceViewMut {
            owner: self.owner,
            ptr: offset::<T>(self.ptr, start),
            len: end - start,
            _exclusive: PhantomData,
        })
    }

    /// The first `mid` elements and the rest, as two exclusive views (of
    /// disjoint ranges); `mid` above the length is
    /// [`InvalidReason::OutOfBounds`].
    pub fn split_at_mut(self, mid: usize) -> Result<(DeviceViewMut<'a, T>, DeviceViewMut<'a, T>)> {
        if mid > self.len {
            return Err(InvalidReason::OutOfBounds
                .error(format!("split at {mid} of a view of {} elements", self.len)));
        }
        let tail = DeviceViewMut {
            owner: self.owner,
            ptr: offset::<T>(self.ptr, mid),
            len: self.len - mid,
            _exclusive: PhantomData,
        };
        let head = DeviceViewMut { len: mid, ..self };
        Ok((head, tail))
    }

    /// Copies the view into `dst` and waits; as [`DeviceView::copy_to_host`].
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.as_view().copy_to_host(dst)
    }

    /// Copies the view into a new `Vec` (waits for the copy).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.as_view().to_vec()
    }

    /// Copies `src` (of the same length) into the view and waits for the
    /// copy, on the buffer's stream; as [`DeviceBuffer::copy_from_host`].
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        check_len(self.len, src.len(), "the host slice")?;
        refuse_host_copy_in_capture(self.stream())?;
        // SAFETY: `src` is borrowed until the stream is synchronised below.
        unsafe { self.copy_from_host_async(src)? };
        self.stream().synchronize()
    }

    /// Enqueues a copy of `src` into the view on the buffer's stream; as
    /// [`DeviceBuffer::copy_from_host_async`].
    ///
    /// # Safety
    /// As for [`DeviceBuffer::copy_from_host_async`].
    pub unsafe fn copy_from_host_async(&mut self, src: &[T]) -> Result<()> {
        check_len(self.len, src.len(), "the host slice")?;
        if self.size_in_bytes() == 0 {
            return Ok(());
        }
        // SAFETY: the device range is within this live allocation and this
        // view's alone; the host range is `src`, whose lifetime the caller
        // guarantees.
        unsafe {
            Active::copy_async(
                self.as_raw(),
                src.as_ptr().cast(),
                self.size_in_bytes(),
                self.stream().raw(),
            )
        }
    }

    /// Enqueues a device-to-device copy of `src` (a buffer or a view of the
    /// same length) into this view, on this view's stream. `src` must be
    /// usable on that stream (its buffer's stream, or given to that
    /// buffer's [`use_on`](DeviceBuffer::use_on)); otherwise
    /// [`InvalidReason::WrongStream`].
    pub fn copy_from_device<S: AsDeviceView<T> + ?Sized>(&mut self, src: &S) -> Result<()> {
        let src = src.device_view();
        check_len(self.len, src.len(), "the source")?;
        if !src.is_usable_on(self.stream()) {
            return Err(InvalidReason::WrongStream
                .error("the source is not usable on the destination's stream; call use_on first"));
        }
        if self.size_in_bytes() == 0 {
            return Ok(());
        }
        // SAFETY: both ranges are within live allocations and of the same
        // size; `src` is ordered on this stream (checked above; its
        // buffer's free waits for this stream if it is not the owner), and
        // this range is this view's alone (`src` borrows another buffer, or
        // a disjoint range of this one).
        unsafe {
            Active::copy_async(
                self.as_raw(),
                src.as_raw(),
                self.size_in_bytes(),
                self.stream().raw(),
            )
        }
    }

    /// Enqueues a fill of every byte of the view with `value`, on the
    /// buffer's stream.
    pub fn memset(&mut self, value: u8) -> Result<()> {
        if self.size_in_bytes() == 0 {
            return Ok(());
        }
        // SAFETY: the range is within this live allocation and this view's
        // alone.
        unsafe { Active::memset_async(self.ptr, value, self.size_in_bytes(), self.stream().raw()) }
    }
}

/// A synchronous copy between host and device cannot be recorded into a
/// graph (the graph would read or write the host memory at every launch,
/// long after the borrow ends).
fn refuse_host_copy_in_capture(stream: &Stream) -> Result<()> {
    match stream.capturing()? {
        Some(c) => Err(Error::capture(format!(
            "a synchronous copy between host and device on a stream in capture {}; \
             end the capture first",
            c.id
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeResource;

    #[test]
    fn ranges_resolve_or_are_out_of_bounds() {
        assert_eq!(bounds(.., 6).unwrap(), (0, 6));
        assert_eq!(bounds(2..5, 6).unwrap(), (2, 5));
        assert_eq!(bounds(2..=5, 6).unwrap(), (2, 6));
        assert_eq!(bounds(..0, 6).unwrap(), (0, 0));
        assert_eq!(bounds(6.., 6).unwrap(), (6, 6));
        assert_eq!(bounds((Bound::Excluded(1), Bound::Unbounded), 6).unwrap(), (2, 6));
        for bad in [
            bounds(5..7, 6),
            bounds(7.., 6),
            bounds(..=6, 6),
            bounds(0..=usize::MAX, 6),
        ] {
            assert_eq!(
                bad.unwrap_err().invalid_reason(),
                Some(InvalidReason::OutOfBounds)
            );
        }
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = bounds(4..2, 6);
        assert_eq!(
            reversed.unwrap_err().invalid_reason(),
            Some(InvalidReason::OutOfBounds)
        );
        let past_max = bounds((Bound::Excluded(usize::MAX), Bound::Unbounded), 6);
        assert_eq!(
            past_max.unwrap_err().invalid_reason(),
            Some(InvalidReason::OutOfBounds)
        );
    }

    /// Views of a buffer of a fake resource (made-up addresses, no
    /// runtime call): addresses, lengths, splits and the checks that come
    /// before any copy.
    #[test]
    fn views_address_their_range_and_keep_the_buffers_stream_rules() {
        let fake = FakeResource::new(None);
        let (s, other) = (Stream::fake(0x100, 0), Stream::fake(0x200, 0));
        let mut buf = DeviceBuffer::<u32>::new_with(10, &fake, &s).unwrap();
        let base = buf.as_raw() as usize;
        let v = buf.slice(2..7).unwrap();
        assert_eq!(
            (v.as_raw() as usize, v.len(), v.size_in_bytes()),
            (base + 8, 5, 20)
        );
        let (a, b) = v.split_at(2).unwrap();
        assert_eq!((a.as_raw() as usize, a.len()), (base + 8, 2));
        assert_eq!((b.as_raw() as usize, b.len()), (base + 16, 3));
        assert_eq!(v.slice(5..).unwrap().len(), 0);
        assert_eq!(
            v.split_at(6).unwrap_err().invalid_reason(),
            Some(InvalidReason::OutOfBounds)
        );
        assert!(v.stream() == &s && v.is_usable_on(&s) && !v.is_usable_on(&other));
        assert_eq!(
            buf.slice(..11).unwrap_err().invalid_reason(),
            Some(InvalidReason::OutOfBounds)
        );

        let (head, mut tail) = buf.view_mut().split_at_mut(4).unwrap();
        assert_eq!((head.as_raw() as usize, head.len()), (base, 4));
        assert_eq!((tail.as_raw() as usize, tail.len()), (base + 16, 6));
        let inner = tail.slice_mut(1..=2).unwrap();
        assert_eq!((inner.as_raw() as usize, inner.len()), (base + 20, 2));
        // Lengths are checked before anything reaches the runtime.
        let e = tail.copy_from_device(&head).unwrap_err();
        assert_eq!(e.invalid_reason(), Some(InvalidReason::LengthMismatch));
        let e = tail.copy_from_host(&[0; 5]).unwrap_err();
        assert_eq!(e.invalid_reason(), Some(InvalidReason::LengthMismatch));
        let mut short = [0u32; 1];
        let e = head.copy_to_host(&mut short).unwrap_err();
        assert_eq!(e.invalid_reason(), Some(InvalidReason::LengthMismatch));

        // A view of a buffer on another stream is a source only where that
        // buffer was given.
        let src = DeviceBuffer::<u32>::new_with(6, &fake, &other).unwrap();
        let e = tail.copy_from_device(&src.view()).unwrap_err();
        assert_eq!(e.invalid_reason(), Some(InvalidReason::WrongStream));
        let e = buf.slice_mut(..6).unwrap().copy_from_device(&src).unwrap_err();
        assert_eq!(e.invalid_reason(), Some(InvalidReason::WrongStream));
        drop((src, buf));
        fake.assert_clean();
    }
}
