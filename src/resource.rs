//! Memory resources: where stream-ordered memory comes from.
//!
//! A [`MemoryResource`] hands out memory in stream order and takes it back
//! in stream order, like RMM's `device_memory_resource`. The vendor pool
//! ([`MemPool`]) is one; the cache tier ([`CacheTier`](crate::CacheTier),
//! [`StreamCache`](crate::StreamCache)) and the adaptors in
//! [`adaptors`](crate::adaptors) are others, and each of those wraps any
//! resource, so they compose. A [`DeviceBuffer`](crate::DeviceBuffer) comes
//! from any resource of device memory through
//! [`DeviceBuffer::new_with`](crate::DeviceBuffer::new_with), a
//! [`HostBuffer`](crate::HostBuffer) from any resource of host-accessible
//! memory (a pool of pinned host memory, and whatever wraps one) through
//! [`HostBuffer::new_with`](crate::HostBuffer::new_with): a resource says
//! which it hands out with [`MemoryResource::placement`].
//!
//! ```no_run
//! use std::sync::Arc;
//! use somalloc::adaptors::{LimitingAdaptor, StatisticsAdaptor};
//! use somalloc::{Device, DeviceBuffer, MemPool, MemoryResource, Stream};
//!
//! # fn main() -> somalloc::Result<()> {
//! let dev = Device::get(0)?;
//! let stream = Stream::new(&dev)?;
//! let pool = MemPool::default_for(&dev)?;
//! let limited = Arc::new(LimitingAdaptor::new(Arc::new(pool), 1 << 30));
//! let stats = Arc::new(StatisticsAdaptor::new(limited));
//! let res: Arc<dyn MemoryResource> = stats.clone();
//! let buf = DeviceBuffer::<f32>::new_with(1 << 20, &res, &stream)?;
//! drop(buf); // the free goes back through the statistics and the limit
//! println!("{}", stats.stats());
//! # Ok(()) }
//! ```

use std::any::Any;
use std::ffi::c_void;
use std::sync::Arc;

use crate::backend::{Backend, DevicePtr};
use crate::device::Device;
use crate::error::{InvalidReason, Result};
use crate::graph;
use crate::pool::{with_stats, MemPool, Placement};
use crate::stream::{Asked, Stream};
use crate::Active;

/// A type that only this crate can name: the argument of the hidden hooks
/// of [`MemoryResource`] (`stream_cache`, `cache_for`, the asked forms), so
/// that no implementation outside the crate can override them.
pub(crate) mod only_here {
    /// See the module.
    #[derive(Clone, Copy, Debug)]
    pub struct OnlyHere(pub(crate) ());
}
pub(crate) use only_here::OnlyHere;

/// A source of stream-ordered device memory.
///
/// * [`allocate`](MemoryResource::allocate) returns memory that work enqueued
///   on `stream` after the call may use (other streams go through events, as
///   [`DeviceBuffer::use_on`](crate::DeviceBuffer::use_on) does).
/// * [`deallocate`](MemoryResource::deallocate) gives it back at the current
///   end of `stream`'s queue: the resource may hand it to later work on that
///   stream at once, without waiting for the device.
///
/// Callers never pass 0 bytes (a 0-byte [`DeviceBuffer`](crate::DeviceBuffer)
/// does not call its resource); implementations may answer 0 with
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument). Implementations are shared between threads,
/// hence `Send + Sync`.
///
/// # Safety
///
/// The trait is `unsafe` to implement because the safe methods of
/// [`DeviceBuffer`](crate::DeviceBuffer) (copies, fills, kernels given its
/// address, `use_on`) trust what it hands out. An implementation promises:
///
/// 1. `allocate(bytes, stream)` returns `Ok(ptr)` only for memory of at
///    least `bytes` bytes, non-null, aligned to at least 256 bytes, of the
///    kind and at the location [`placement()`](MemoryResource::placement)
///    says, used from the streams of [`device()`](MemoryResource::device)
///    (neither ever changes), that work enqueued on `stream` after the call
///    may read and write (and, for host-accessible memory, the host once
///    that point of `stream` has completed), and that no
///    other work uses from that point on: the range is not handed out again
///    (by this resource or any other) and not used by the resource itself
///    until it comes back through `deallocate` and every use ordered before
///    that point of its stream has completed on the device.
/// 2. `deallocate` returns memory only in the order of the given stream:
///    the range may be reused by work ordered after that point of `stream`
///    (or, on another stream, only once that point has completed on the
///    device or is ordered before it through an event).
/// 3. Under stream capture (see [stream capture](crate#stream-capture-and-graphs)): on a capturing
///    stream, `allocate` returns memory that is safe for the graph to use on
///    every replay — a graph allocation (the vendor's stream-ordered
///    allocation on that stream, as a pool makes it) or memory that nobody
///    else uses until the graph and all its executables are destroyed —
///    never a block that work outside the graph uses or will use; and
///    `deallocate` on a capturing stream never makes memory available to
///    work outside the graph (a cache must not keep it). A block allocated
///    during a capture and freed after it must not be cached either: it is
///    graph memory.
///
/// Breaking any of these lets safe code race with, or overwrite, memory
/// that other work is using. Callers promise the rest (through the
/// `unsafe` of `deallocate`).
///
/// ```compile_fail
/// use std::ffi::c_void;
/// use somalloc::{Device, MemoryResource, Stream};
/// struct Mine;
/// impl MemoryResource for Mine { // error: the trait is unsafe to implement
///     fn allocate(&self, _: usize, _: &Stream) -> somalloc::Result<*mut c_void> { Ok(std::ptr::null_mut()) }
///     unsafe fn deallocate(&self, _: *mut c_void, _: usize, _: &Stream) -> somalloc::Result<()> { Ok(()) }
///     fn device(&self) -> Device { unreachable!() }
/// }
/// ```
///
/// ```no_run
/// use std::sync::Arc;
/// use somalloc::{Device, DeviceBuffer, MemPool, MemoryResource, Stream};
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let stream = Stream::new(&dev)?;
/// let pool: Arc<dyn MemoryResource> = Arc::new(MemPool::default_for(&dev)?);
/// let ptr = pool.allocate(4096, &stream)?;
/// // SAFETY: from this resource's allocate, freed once, unused after this point.
/// unsafe { pool.deallocate(ptr, 4096, &stream)? };
/// let buf = DeviceBuffer::<u8>::new_with(4096, &pool, &stream)?; // or through a buffer
/// # drop(buf);
/// # Ok(()) }
/// ```
pub unsafe trait MemoryResource: Send + Sync {
    /// Allocates `bytes` (> 0) in the order of `stream`.
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<*mut c_void>;

    /// Frees `ptr` in the order of `stream`.
    ///
    /// An error means that nothing was freed (part of the trait's
    /// contract): the block is still the caller's, who may call
    /// `deallocate` for it again (somalloc tries a deferred free again at a
    /// later safe point) or give it up (its memory then stays allocated; a
    /// dropped buffer does this and counts the error).
    ///
    /// # Safety
    /// `ptr` and `bytes` come from one call of this resource's
    /// [`allocate`](MemoryResource::allocate), `ptr` is freed once (a call
    /// that failed freed nothing), and every use of the memory (on any
    /// stream) is ordered before this point of `stream`.
    unsafe fn deallocate(&self, ptr: *mut c_void, bytes: usize, stream: &Stream) -> Result<()>;

    /// The device whose streams this resource serves (for device memory:
    /// where it lives).
    fn device(&self) -> Device;

    /// Where the memory this resource hands out lives and how it is
    /// allocated; by default pinned memory of [`device()`](MemoryResource::device).
    /// A resource of pinned host (or managed) memory says so here, and an
    /// adaptor answers what the resource it wraps answers: buffers rely on
    /// it ([`DeviceBuffer`](crate::DeviceBuffer) refuses pinned host memory,
    /// [`HostBuffer`](crate::HostBuffer) hands the memory to the host as a
    /// slice only when it is host-accessible).
    fn placement(&self) -> Placement {
        Placement::device(self.device().ordinal())
    }

    /// The stream cache this resource is, if it is one: a
    /// [`DeviceBuffer`](crate::DeviceBuffer) then holds no reference count
    /// on it (the cache keeps itself and its stream alive while a block it
    /// handed to a buffer is live). Only somalloc's
    /// [`StreamCache`](crate::StreamCache) answers; no other implementation
    /// can override this (its argument cannot be named outside the crate).
    ///
    /// (The answer is the cache as `Any`: this module sits below the cache
    /// tier's and does not name its types.)
    #[doc(hidden)]
    #[inline]
    fn stream_cache(&self, _: OnlyHere) -> Option<&(dyn Any + Send + Sync)> {
        None
    }

    /// [`allocate`](MemoryResource::allocate), called by somalloc with what
    /// it already knows about whether `stream` is capturing, so that an
    /// allocation asks the runtime at most once. Only somalloc's own
    /// resources use it (the pool, the stream cache); no other
    /// implementation can override or call it (its argument cannot be
    /// named or made outside the crate).
    #[doc(hidden)]
    #[inline]
    fn allocate_asked(&self, bytes: usize, stream: &Stream, _: Asked) -> Result<*mut c_void> {
        self.allocate(bytes, stream)
    }

    /// [`deallocate`](MemoryResource::deallocate), with what somalloc
    /// already knows about `stream`'s capture (see
    /// [`allocate_asked`](MemoryResource::allocate_asked)).
    ///
    /// # Safety
    /// As for [`deallocate`](MemoryResource::deallocate).
    #[doc(hidden)]
    #[inline]
    unsafe fn deallocate_asked(
        &self,
        ptr: *mut c_void,
        bytes: usize,
        stream: &Stream,
        _: Asked,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.deallocate(ptr, bytes, stream) }
    }

    /// The stream cache that serves `stream` for this resource, if it has
    /// per-stream caches (a [`CacheTier`](crate::CacheTier) answers with
    /// [`CacheTier::for_stream`](crate::CacheTier::for_stream)): a
    /// [`DeviceBuffer`](crate::DeviceBuffer) then allocates from that cache
    /// directly. Only somalloc's tier answers; no other implementation can
    /// override this (its argument cannot be named outside the crate).
    #[doc(hidden)]
    #[inline]
    fn cache_for(&self, _stream: &Stream, _: OnlyHere) -> Option<Result<Arc<dyn Any + Send + Sync>>> {
        None
    }
}

/// A shared handle to a memory resource: `Arc<R>` for any resource type `R`
/// ([`MemPool`], [`CacheTier`](crate::CacheTier),
/// [`StreamCache`](crate::StreamCache), an adaptor, your own), or
/// `Arc<dyn MemoryResource>`. What
/// [`DeviceBuffer::new_with`](crate::DeviceBuffer::new_with) and
/// [`HostBuffer::new_with`](crate::HostBuffer::new_with) take, so that a
/// concrete handle needs no conversion:
///
/// ```no_run
/// use std::sync::Arc;
/// use somalloc::{Device, DeviceBuffer, MemPool, MemoryResource, Stream};
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let stream = Stream::new(&dev)?;
/// let pool = Arc::new(MemPool::default_for(&dev)?);
/// let a = DeviceBuffer::<f32>::new_with(1024, &pool, &stream)?; // Arc<MemPool>
/// let res: Arc<dyn MemoryResource> = pool;
/// let b = DeviceBuffer::<f32>::new_with(1024, &res, &stream)?; // Arc<dyn MemoryResource>
/// # drop((a, b));
/// # Ok(()) }
/// ```
///
/// Sealed: a buffer allocates through [`resource`](SharedResource::resource)
/// and frees through the handle [`to_dyn`](SharedResource::to_dyn) gives,
/// which must be the same object; only the two implementations here
/// guarantee that.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a shared handle to a memory resource",
    label = "expected `&Arc<R>` for a resource `R`, or `&Arc<dyn MemoryResource>`",
    note = "wrap the resource in an `Arc` once and pass a reference to it: `&Arc::new(pool)`"
)]
pub trait SharedResource: seal::Sealed {
    /// The resource's type (`dyn MemoryResource` for a type-erased handle).
    type Resource: MemoryResource + ?Sized;

    /// The resource itself.
    fn resource(&self) -> &Self::Resource;

    /// Another handle to the same resource, type-erased.
    fn to_dyn(&self) -> Arc<dyn MemoryResource>;
}

mod seal {
    pub trait Sealed {}
}

impl<R: MemoryResource + 'static> seal::Sealed for Arc<R> {}
impl<R: MemoryResource + 'static> SharedResource for Arc<R> {
    type Resource = R;

    #[inline(always)]
    fn resource(&self) -> &R {
        self
    }

    fn to_dyn(&self) -> Arc<dyn MemoryResource> {
        Arc::clone(self) as Arc<dyn MemoryResource>
    }
}

impl seal::Sealed for Arc<dyn MemoryResource> {}
impl SharedResource for Arc<dyn MemoryResource> {
    type Resource = dyn MemoryResource;

    #[inline(always)]
    fn resource(&self) -> &Self::Resource {
        &**self
    }

    fn to_dyn(&self) -> Arc<dyn MemoryResource> {
        Arc::clone(self)
    }
}

/// The vendor pool as a resource: `cudaMallocFromPoolAsync` /
/// `cudaFreeAsync` (HIP: the same names), of the memory the pool's
/// [`placement`](MemPool::placement) says (device, pinned host or managed).
/// The stream must belong to the pool's device; an allocation the pool
/// refuses is
/// [`Error::OutOfMemory`](crate::Error::OutOfMemory) with the pool's statistics.
///
/// Under stream capture the allocation is a graph allocation node and its
/// free in the same capture a graph free node; a free on a capturing stream
/// of memory allocated outside that capture waits until the graph is
/// destroyed; a graph output freed after the capture follows the rules of
/// the [stream capture](crate#stream-capture-and-graphs) docs.
// SAFETY: the vendor's stream-ordered allocation and free keep points 1 and
// 2 of the contract; under capture the allocation is graph memory (point
// 3), and `graph::vendor_free` never frees memory from outside a capture
// into it.
unsafe impl MemoryResource for MemPool {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<*mut c_void> {
        self.allocate_asked(bytes, stream, Asked::NOT_YET)
    }

    unsafe fn deallocate(&self, ptr: *mut c_void, bytes: usize, stream: &Stream) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.deallocate_asked(ptr, bytes, stream, Asked::NOT_YET) }
    }

    fn allocate_asked(&self, bytes: usize, stream: &Stream, asked: Asked) -> Result<*mut c_void> {
        if bytes == 0 {
            return Err(InvalidReason::ZeroBytes.error("0-byte allocation from a pool resource"));
        }
        let device = MemPool::device(self);
        if stream.device() != device {
            return Err(InvalidReason::WrongDevice.error(format!(
                "pool of device {} used with a stream of device {}",
                device.ordinal(),
                stream.device().ordinal()
            )));
        }
        // The allocation's question, unless the caller asked already: an
        // allocation in a capture is graph memory, remembered as such.
        let capture = asked.capturing(stream)?;
        match Active::malloc_from_pool_async(bytes, self.raw(), stream.raw()) {
            Ok(ptr) => {
                if let Some(c) = capture {
                    graph::note_graph_alloc(ptr, &c);
                }
                Ok(ptr.as_mut_ptr())
            }
            Err(e) => Err(with_stats(e, Some(self.clone()))),
        }
    }

    unsafe fn deallocate_asked(
        &self,
        ptr: *mut c_void,
        _bytes: usize,
        stream: &Stream,
        asked: Asked,
    ) -> Result<()> {
        // SAFETY: the caller guarantees `ptr` came from `allocate` above
        // (malloc_from_pool_async), is freed once, and that every use of it
        // is ordered before this point of `stream`.
        unsafe { graph::vendor_free_asked(DevicePtr(ptr as usize), stream, asked) }
    }

    fn device(&self) -> Device {
        MemPool::device(self)
    }

    fn placement(&self) -> Placement {
        MemPool::placement(self)
    }
}
