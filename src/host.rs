//! Pinned host memory allocated in stream order: [`HostBuffer`], and what
//! the runtime says about an address ([`pointer_info`]).
//!
//! A copy between the host and a device runs asynchronously only from and
//! to pinned (page-locked) host memory; from pageable memory the runtime
//! stages it through a pinned buffer of its own and the host waits. A pool
//! of pinned host memory ([`PoolProperties::host`](crate::PoolProperties::host),
//! [`PoolProperties::host_numa`](crate::PoolProperties::host_numa)) hands out
//! such memory in stream order, like device memory: no synchronous
//! `cudaMallocHost` / `cudaFreeHost` (which wait for the device) on the
//! path, and freed blocks are reused.
//!
//! ```no_run
//! use somalloc::{Device, DeviceBuffer, HostBuffer, MemPool, PoolProperties, Stream};
//!
//! # fn main() -> somalloc::Result<()> {
//! let dev = Device::get(0)?;
//! let stream = Stream::new(&dev)?;
//! let pinned = MemPool::create(&dev, PoolProperties::host_numa(0))?; // CUDA 12.6+
//! pinned.set_release_threshold(usize::MAX)?;
//!
//! let mut staging = HostBuffer::<f32>::new_in(1 << 20, &pinned, &stream)?;
//! staging.wait_slice_mut()?.fill(1.0); // waits for the allocation, then borrows
//! let mut data = DeviceBuffer::<f32>::new(1 << 20, &stream)?;
//! staging.copy_to_device(&mut data)?; // stream-ordered, no staging, no wait
//! staging.copy_from_device(&data)?; // and back
//! assert_eq!(staging.wait_slice()?[0], 1.0); // waits for the copies
//! # Ok(()) }
//! ```

use std::ffi::c_void;
use std::fmt;
use std::mem::align_of;
use std::ptr::NonNull;

use bytemuck::Pod;

use crate::backend::{Backend, MemoryType};
use crate::buffer::{AsDeviceView, AsDeviceViewMut, DeviceBuffer};
use crate::error::{Error, InvalidReason, Result};
use crate::pool::{MemPool, Placement};
use crate::resource::{MemoryResource, SharedResource};
use crate::stream::Stream;
use crate::Active;

/// What the runtime says about an address; see [`pointer_info`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PointerInfo {
    /// The kind of memory.
    pub memory_type: MemoryType,
    /// The device the runtime associates with it: where device memory
    /// lives; for pinned host memory the device that was current when it
    /// was allocated (or none).
    pub device: Option<usize>,
    /// Whether the calling thread's current device can address it (the
    /// runtime gave a device address for it).
    pub device_accessible: bool,
    /// Whether the host can address it (the runtime gave a host address).
    pub host_accessible: bool,
}

/// Asks the runtime what `ptr` is: pinned host memory, pageable host
/// memory, device or managed memory. Only the address is looked up; the
/// memory is not touched. A null address is `InvalidArgument`.
///
/// ```no_run
/// use somalloc::{pointer_info, Device, MemoryType};
/// # fn main() -> somalloc::Result<()> {
/// let _dev = Device::get(0)?;
/// let v = vec![0u8; 4096];
/// assert_eq!(pointer_info(v.as_ptr().cast())?.memory_type, MemoryType::Pageable);
/// # Ok(()) }
/// ```
pub fn pointer_info(ptr: *const c_void) -> Result<PointerInfo> {
    if ptr.is_null() {
        return Err(Error::invalid("pointer_info of a null address"));
    }
    let raw = Active::pointer_info(ptr)?;
    Ok(PointerInfo {
        memory_type: raw.kind,
        device: usize::try_from(raw.device)
            .ok()
            .filter(|_| raw.kind != MemoryType::Pageable),
        device_accessible: raw.device_pointer,
        host_accessible: raw.host_pointer || matches!(raw.kind, MemoryType::Pageable),
    })
}

/// A typed allocation of host-accessible memory (pinned host memory, or
/// managed memory), allocated and freed in stream order, owned by one
/// stream.
///
/// It comes from a pool of pinned host memory ([`HostBuffer::new_in`]) or
/// any [`MemoryResource`] whose [`placement`](MemoryResource::placement) is
/// host-accessible ([`HostBuffer::new_with`]: the cache tier and the
/// adaptors over such a pool); device memory is refused
/// (`InvalidArgument`).
///
/// * **The host reads and writes it only through [`HostBuffer::wait_slice`]
///   and [`HostBuffer::wait_slice_mut`]**, which first wait for the owning
///   stream and every stream given to [`HostBuffer::use_on`] (the
///   allocation, and every copy queued on them), then borrow the buffer: no
///   copy can be queued while the slice is alive, and none that was queued
///   is still running. Reading too early does not compile or waits.
/// * [`HostBuffer::copy_to_device`] and [`HostBuffer::copy_from_device`]
///   queue copies to and from a [`DeviceBuffer`] without staging and
///   without waiting, on the destination's stream; the other buffer must be
///   usable there (its own stream, or given to `use_on`), as for device
///   copies. The free waits for them like for any stream given to
///   `use_on`.
/// * Under stream capture: allocating, copying and reading are
///   [`Error::Capture`] on a capturing stream (a graph would read or write
///   the host memory at every launch, long after the borrow; waiting for a
///   capturing stream would invalidate the capture). A buffer freed while
///   its stream is captured is freed once the graphs are gone, as a
///   `DeviceBuffer` is.
///
/// The contents of a new buffer are whatever the memory held (the runtime's
/// pages, or a block freed earlier).
///
/// Why a type of its own rather than `DeviceBuffer` over another location:
/// the two hand out different things. A `HostBuffer` gives the host a slice
/// (after waiting), which a device buffer must never do; a `DeviceBuffer`
/// goes to kernels of the test kit and to cudarc as device memory, which
/// pinned host memory is not meant to be. Underneath it is the same
/// stream-ordered allocation, with the same `use_on`, free and capture
/// rules.
pub struct HostBuffer<T: Pod> {
    /// The allocation, its owning stream, origin, `use_on` streams and
    /// capture bookkeeping (the same machinery as a device buffer's).
    buf: DeviceBuffer<T>,
    /// The streams given to `use_on`, waited for before the host touches
    /// the memory.
    users: Vec<Stream>,
}

impl<T: Pod> fmt::Debug for HostBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostBuffer")
            .field("ptr", &self.buf.as_raw())
            .field("len", &self.buf.len())
            .field("stream", &self.buf.stream().as_raw())
            .field("users", &self.users.len())
            .finish()
    }
}

impl<T: Pod> HostBuffer<T> {
    /// Allocates `len` elements on `stream` from `pool`: a pool of pinned
    /// host memory (or of managed memory) whose device is the stream's.
    ///
    /// ```no_run
    /// use somalloc::{Device, HostBuffer, MemPool, PoolProperties, Stream};
    /// # fn main() -> somalloc::Result<()> {
    /// let dev = Device::get(0)?;
    /// let stream = Stream::new(&dev)?;
    /// let pool = MemPool::create(&dev, PoolProperties::host())?; // CUDA 13.0+
    /// let mut buf = HostBuffer::<u32>::new_in(1024, &pool, &stream)?;
    /// buf.wait_slice_mut()?.copy_from_slice(&[7; 1024]);
    /// # Ok(()) }
    /// ```
    pub fn new_in(len: usize, pool: &MemPool, stream: &Stream) -> Result<Self> {
        refuse_device_memory(pool.placement(), "pool")?;
        refuse_in_capture(stream, "allocating a HostBuffer")?;
        Self::wrap(DeviceBuffer::alloc_in(len, pool, stream)?)
    }

    /// Allocates `len` elements on `stream` from `resource` (any `&Arc<R>`
    /// for a resource `R`, or an `&Arc<dyn MemoryResource>`), which must
    /// serve the stream's device and hand out host-accessible memory (its
    /// [`placement`](MemoryResource::placement)): a pool of pinned host
    /// memory, the cache tier over one, an adaptor stack over either.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use somalloc::{CacheConfig, CacheTier, Device, HostBuffer, MemPool, MemoryResource, PoolProperties, Stream};
    /// # fn main() -> somalloc::Result<()> {
    /// let dev = Device::get(0)?;
    /// let stream = Stream::new(&dev)?;
    /// let pinned = MemPool::create(&dev, PoolProperties::host_numa(0))?;
    /// let tier = CacheTier::new(Arc::new(pinned), CacheConfig::default())?;
    /// let res: Arc<dyn MemoryResource> = tier.for_stream(&stream)?;
    /// for _ in 0..100 {
    ///     drop(HostBuffer::<u8>::new_with(1 << 20, &res, &stream)?); // cached after the first
    /// }
    /// # Ok(()) }
    /// ```
    pub fn new_with<S: SharedResource>(len: usize, resource: &S, stream: &Stream) -> Result<Self> {
        refuse_device_memory(resource.resource().placement(), "resource")?;
        refuse_in_capture(stream, "allocating a HostBuffer")?;
        Self::wrap(DeviceBuffer::alloc_with(len, resource, stream)?)
    }

    fn wrap(buf: DeviceBuffer<T>) -> Result<Self> {
        // Pools and resources align to 256 bytes; a `T` that asks for more
        // cannot be viewed as a slice there.
        if buf.size_in_bytes() != 0 && !(buf.as_raw() as usize).is_multiple_of(align_of::<T>()) {
            return Err(Error::invalid(format!(
                "the memory is not aligned to the {} bytes the element type needs",
                align_of::<T>()
            )));
        }
        Ok(HostBuffer {
            buf,
            users: Vec::new(),
        })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Size in bytes.
    pub fn size_in_bytes(&self) -> usize {
        self.buf.size_in_bytes()
    }

    /// The address (null for a 0-byte buffer): a host address, which the
    /// device the pool grants access to can use too. Valid for work ordered
    /// after the allocation on the owning stream (or on streams given to
    /// [`HostBuffer::use_on`]) until the buffer is dropped.
    pub fn as_raw(&self) -> *mut c_void {
        self.buf.as_raw()
    }

    /// The stream that owns the allocation (and will free it).
    pub fn stream(&self) -> &Stream {
        self.buf.stream()
    }

    /// Whether work on `stream` may use this buffer: the owning stream, or
    /// one given to [`HostBuffer::use_on`] (for another device's stream,
    /// while the pool grants that device access).
    pub fn is_usable_on(&self, stream: &Stream) -> bool {
        self.buf.is_usable_on(stream)
    }

    /// Makes the buffer usable on `other`, with the rules of
    /// [`DeviceBuffer::use_on`]: `other` waits for the allocation, and the
    /// free waits for `other`'s work; the host accessors wait for it too.
    pub fn use_on(&mut self, other: &Stream) -> Result<()> {
        let (mine, theirs) = (self.buf.stream().device(), other.device());
        if mine != theirs {
            // A copy between a host pool's memory and another device's
            // memory, on that device's stream, was refused by the runtime
            // (cudaErrorInvalidValue) on two H200s although the pool grants
            // that device access; until that is understood, say so here
            // instead of failing at the copy.
            return Err(Error::Unsupported {
                backend: crate::VENDOR,
                what: format!(
                    "using a HostBuffer of device {} on a stream of device {}: use a host pool \
                     created for that device",
                    mine.ordinal(),
                    theirs.ordinal()
                ),
            });
        }
        self.buf.use_on(other)?;
        if self.buf.stream() != other && !self.users.iter().any(|u| u == other) {
            self.users.push(other.clone());
        }
        Ok(())
    }

    /// Waits for the owning stream and every stream given to `use_on`.
    fn wait_for_streams(&self) -> Result<()> {
        self.buf.stream().synchronize()?;
        for user in &self.users {
            user.synchronize()?;
        }
        Ok(())
    }

    /// The contents, for the host: waits until the owning stream and every
    /// stream given to [`HostBuffer::use_on`] have finished all their work
    /// (the allocation, and any copy into the buffer), then borrows the
    /// buffer, so no copy can be queued while the slice lives.
    ///
    /// On a capturing stream this is [`Error::Capture`] (waiting would
    /// invalidate the capture).
    pub fn wait_slice(&self) -> Result<&[T]> {
        if self.size_in_bytes() == 0 {
            // A dangling, aligned pointer is a valid empty (or zero-sized)
            // slice.
            // SAFETY: no memory is accessed through a 0-byte slice.
            return Ok(unsafe { std::slice::from_raw_parts(NonNull::<T>::dangling().as_ptr(), self.len()) });
        }
        self.wait_for_streams()?;
        // SAFETY: `len` elements of host-accessible memory (checked at
        // allocation: the placement is host-accessible), aligned for `T`
        // (checked in `wrap`), owned by this buffer until it is dropped; the
        // allocation and every queued device access have completed (waited
        // for above), and no new one can be queued through this buffer while
        // `&self` is borrowed except copies that only read it. `T: Pod`, so
        // any bytes are a valid `T`.
        Ok(unsafe { std::slice::from_raw_parts(self.buf.as_raw().cast::<T>(), self.len()) })
    }

    /// The contents, for the host to write: as [`HostBuffer::wait_slice`],
    /// with the buffer borrowed mutably (no copy reads or writes it while
    /// the slice lives).
    pub fn wait_slice_mut(&mut self) -> Result<&mut [T]> {
        if self.size_in_bytes() == 0 {
            // A dangling, aligned pointer is a valid empty (or zero-sized)
            // slice.
            // SAFETY: no memory is accessed through a 0-byte slice.
            return Ok(unsafe {
                std::slice::from_raw_parts_mut(NonNull::<T>::dangling().as_ptr(), self.len())
            });
        }
        self.wait_for_streams()?;
        // SAFETY: as in `wait_slice`; `&mut self` excludes every other access
        // through this buffer for the slice's lifetime.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.buf.as_raw().cast::<T>(), self.len()) })
    }

    /// Copies the contents into a new `Vec` (waits, as
    /// [`HostBuffer::wait_slice`] does).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        Ok(self.wait_slice()?.to_vec())
    }

    /// Queues a copy of this buffer into `dst` (a [`DeviceBuffer`] or a
    /// [`DeviceViewMut`](crate::DeviceViewMut) of one) on `dst`'s stream, without
    /// waiting and without staging. This buffer must be usable on that
    /// stream (its owning stream, or given to [`HostBuffer::use_on`]); its
    /// free, and the host accessors, wait for the copy.
    ///
    /// On a capturing stream this is [`Error::Capture`] and nothing is
    /// queued.
    pub fn copy_to_device<D: AsDeviceViewMut<T> + ?Sized>(&self, dst: &mut D) -> Result<()> {
        let dst = dst.device_view_mut();
        check_len(self.len(), dst.len())?;
        if !self.is_usable_on(dst.stream()) {
            return Err(InvalidReason::WrongStream
                .error("the host buffer is not usable on the device buffer's stream; call use_on first"));
        }
        refuse_in_capture(dst.stream(), "a copy from a HostBuffer")?;
        if self.size_in_bytes() == 0 {
            return Ok(());
        }
        // SAFETY: both ranges are within live allocations and of the same
        // size. The device range is `dst`'s alone (an exclusive view),
        // ordered on its own stream; the host range stays
        // allocated until this buffer's free, which waits for `dst`'s stream
        // (it is this buffer's stream or a `use_on` stream), and the host
        // writes to it only through `wait_slice_mut`, which waits for that
        // stream first.
        unsafe {
            Active::copy_async(
                dst.as_raw(),
                self.buf.as_raw(),
                self.size_in_bytes(),
                dst.stream().raw(),
            )
        }
    }

    /// Queues a copy of `src` (a [`DeviceBuffer`] or a view of one) into
    /// this buffer on this buffer's stream,
    /// without waiting and without staging. `src` must be usable on that
    /// stream (its owning stream, or given to [`DeviceBuffer::use_on`]).
    /// Read the result with [`HostBuffer::wait_slice`], which waits for it.
    ///
    /// On a capturing stream this is [`Error::Capture`] and nothing is
    /// queued.
    pub fn copy_from_device<S: AsDeviceView<T> + ?Sized>(&mut self, src: &S) -> Result<()> {
        let src = src.device_view();
        check_len(self.len(), src.len())?;
        if !src.is_usable_on(self.buf.stream()) {
            return Err(InvalidReason::WrongStream
                .error("the device buffer is not usable on the host buffer's stream; call use_on first"));
        }
        refuse_in_capture(self.buf.stream(), "a copy into a HostBuffer")?;
        if self.size_in_bytes() == 0 {
            return Ok(());
        }
        // SAFETY: both ranges are within live allocations and of the same
        // size, `src` ordered on this stream (checked above; its free waits for this stream if
        // it is not its owner). The host range is this buffer's, which the
        // host touches only through the accessors, which wait for this
        // stream first.
        unsafe {
            Active::copy_async(
                self.buf.as_raw(),
                src.as_raw(),
                self.size_in_bytes(),
                self.buf.stream().raw(),
            )
        }
    }

    /// Where the memory lives, as the runtime reports it ([`pointer_info`]);
    /// `None` for a 0-byte buffer (it has no memory).
    pub fn pointer_info(&self) -> Result<Option<PointerInfo>> {
        if self.size_in_bytes() == 0 {
            return Ok(None);
        }
        pointer_info(self.as_raw()).map(Some)
    }

    /// Frees now (stream-ordered) and reports an error instead of recording
    /// it, as `Drop` would.
    pub fn release(self) -> Result<()> {
        self.buf.release()
    }
}

fn check_len(mine: usize, other: usize) -> Result<()> {
    if mine != other {
        return Err(InvalidReason::LengthMismatch.error(format!(
            "length mismatch: host buffer has {mine} elements, the other side {other}"
        )));
    }
    Ok(())
}

/// A `HostBuffer` never holds memory the host cannot touch.
fn refuse_device_memory(placement: Placement, what: &str) -> Result<()> {
    if !placement.is_host_accessible() {
        return Err(Error::invalid(format!(
            "a {what} of device memory ({:?}): a HostBuffer needs pinned host or managed memory \
             (PoolProperties::host, PoolProperties::host_numa)",
            placement.location
        )));
    }
    Ok(())
}

/// Host memory in a graph would be read or written at every launch, long
/// after the buffer's borrow ends: refused on a capturing stream.
fn refuse_in_capture(stream: &Stream, what: &str) -> Result<()> {
    match stream.capturing()? {
        Some(c) => Err(Error::capture(format!(
            "{what} on a stream in capture {}: host memory cannot be captured safely; end the capture first",
            c.id
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
