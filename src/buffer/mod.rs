//! Device buffers allocated in stream order.
//!
//! `mod.rs`: the type, its constructors, and use on other streams;
//! `origin.rs`: where a buffer's memory came from (and so where its free
//! goes); `free.rs`: the free, under capture too, and `Drop`; `copy.rs`:
//! copies and fills of a whole buffer; `view.rs`: views (sub-ranges) and
//! their copies and fills; `ipc.rs`: export to and import from other
//! processes.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::mem::{size_of, ManuallyDrop};
use std::ptr::NonNull;
use std::sync::Arc;

use bytemuck::Pod;

use crate::backend::{Backend, DevicePtr};
use crate::cache::{Sealed, StreamCache};
use crate::current;
use crate::error::{Error, InvalidReason, Result};
use crate::graph::{self, Capturing};
use crate::pool::{with_stats, MemPool, Placement};
use crate::resource::{MemoryResource, SharedResource};
use crate::stream::{order_after, Asked, Stream};
use crate::Active;

mod copy;
mod free;
mod ipc;
mod origin;
mod view;

pub use ipc::ExportedBuffer;
use origin::{CachePtr, Origin, Users};
pub use view::{AsDeviceView, AsDeviceViewMut, DeviceView, DeviceViewMut};

/// `len` elements of `T` in bytes, or `InvalidArgument` on overflow.
pub(crate) fn bytes_for<T>(len: usize) -> Result<usize> {
    len.checked_mul(size_of::<T>()).ok_or_else(|| {
        InvalidReason::SizeOverflow.error(format!(
            "{len} elements of {} bytes overflow usize",
            size_of::<T>()
        ))
    })
}

/// A typed allocation of device memory, owned by one stream.
///
/// * Allocation and free are stream-ordered: [`DeviceBuffer::new`] enqueues
///   the allocation on the stream and `Drop` enqueues the free on the same
///   stream, without blocking the host.
/// * Work on other streams goes through [`DeviceBuffer::use_on`], which orders
///   the other stream after the allocation and makes the eventual free wait
///   for the other stream's work.
/// * A buffer of 0 bytes (0 elements, or a zero-sized `T`) never calls the
///   vendor runtime on any backend: it has a null address, and copies and
///   fills of it do nothing.
/// * Under stream capture, allocation and free follow the rules of the
///   [stream capture](crate#stream-capture-and-graphs): inside a capture they become graph
///   memory nodes; a buffer allocated outside a capture and dropped inside
///   it is freed once the graph is gone; a buffer allocated in a capture and
///   still alive at its end is a graph output.
///
/// ```no_run
/// use somalloc::{Device, DeviceBuffer, Stream};
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let stream = Stream::new(&dev)?;
/// let mut buf = DeviceBuffer::<f32>::new(1024, &stream)?;
/// buf.copy_from_host(&vec![1.0; 1024])?;
/// assert_eq!(buf.to_vec()?[0], 1.0);
/// # Ok(()) }
/// ```
pub struct DeviceBuffer<T: Pod> {
    ptr: DevicePtr,
    len: usize,
    /// The owning stream: a handle of the buffer's own, dropped with it;
    /// for `Origin::cache`, a copy of the stream cache's handle that is
    /// never dropped (the cache keeps its stream alive while the block is
    /// live, and the buffer does not use it after the block's free).
    stream: ManuallyDrop<Stream>,
    /// Where the memory came from, and so where the free goes.
    origin: Origin,
    /// Other streams this buffer was used on (see `use_on`).
    users: Users,
    /// The capture the allocation was made in (0: none).
    capture_id: u64,
    _marker: PhantomData<T>,
}

impl<T: Pod> fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &format_args!("{:#x}", self.ptr.0))
            .field("len", &self.len)
            .field("stream", &self.stream.as_raw())
            .field("users", &self.users.len())
            .finish()
    }
}

impl<T: Pod> DeviceBuffer<T> {
    /// Allocates `len` elements on `stream` from the current resource of the
    /// stream's device ([`set_current_resource`](crate::set_current_resource):
    /// a cache tier, an adaptor stack, a pool), or, where none is set (the
    /// default), from the vendor's current pool of that device
    /// ([`MemPool::current`]). The contents are uninitialised device memory.
    ///
    /// ```no_run
    /// use somalloc::{Device, DeviceBuffer, Stream};
    /// # fn main() -> somalloc::Result<()> {
    /// let dev = Device::get(0)?;
    /// let stream = Stream::new(&dev)?;
    /// let buf = DeviceBuffer::<f32>::new(1 << 20, &stream)?; // enqueued, no sync
    /// assert_eq!(buf.len(), 1 << 20);
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn new(len: usize, stream: &Stream) -> Result<Self> {
        // One relaxed load while no current resource is set anywhere.
        if current::any_set() {
            return Self::new_current(len, stream);
        }
        Self::new_vendor(len, stream)
    }

    /// `new` with a current resource set on some device.
    #[cold]
    #[inline(never)]
    fn new_current(len: usize, stream: &Stream) -> Result<Self> {
        match current::get(&stream.device()) {
            Some(resource) => Self::new_with(len, &resource, stream),
            None => Self::new_vendor(len, stream),
        }
    }

    /// `new` from the vendor's current pool.
    #[inline]
    fn new_vendor(len: usize, stream: &Stream) -> Result<Self> {
        let bytes = bytes_for::<T>(len)?;
        if bytes == 0 {
            return Ok(Self::empty(len, stream, Origin::CURRENT_POOL));
        }
        graph::reclaim_if_ready();
        let capture = stream.capturing()?;
        match Active::malloc_async(bytes, stream.raw()) {
            Ok(ptr) => Ok(Self::wrap_vendor(ptr, len, stream, Origin::CURRENT_POOL, capture)),
            Err(e) => Err(with_stats(e, MemPool::current(&stream.device()).ok())),
        }
    }

    /// Allocates `len` elements on `stream` from `pool`, which must belong to
    /// the stream's device.
    pub fn new_in(len: usize, pool: &MemPool, stream: &Stream) -> Result<Self> {
        refuse_host_memory(pool.placement(), "pool")?;
        Self::alloc_in(len, pool, stream)
    }

    /// `new_in` for any placement (`HostBuffer` holds its memory in one).
    pub(crate) fn alloc_in(len: usize, pool: &MemPool, stream: &Stream) -> Result<Self> {
        if pool.device() != stream.device() {
            return Err(InvalidReason::WrongDevice.error(format!(
                "pool of device {} used with a stream of device {}",
                pool.device().ordinal(),
                stream.device().ordinal()
            )));
        }
        let bytes = bytes_for::<T>(len)?;
        let keep = Origin::pool(pool);
        if bytes == 0 {
            return Ok(Self::empty(len, stream, keep));
        }
        graph::reclaim_if_ready();
        let capture = stream.capturing()?;
        match Active::malloc_from_pool_async(bytes, pool.raw(), stream.raw()) {
            Ok(ptr) => Ok(Self::wrap_vendor(ptr, len, stream, keep, capture)),
            Err(e) => Err(with_stats(e, Some(pool.clone()))),
        }
    }

    /// Allocates `len` elements on `stream` from `resource` (a
    /// [`MemoryResource`]: a pool, the cache tier, an adaptor stack), which
    /// must hand out memory of the stream's device. `resource` is any
    /// `&Arc<R>` for a resource `R`, or an `&Arc<dyn MemoryResource>` (see
    /// [`SharedResource`]). Dropping the buffer gives
    /// the memory back through the resource's `deallocate`, on `stream`,
    /// after every stream given to [`DeviceBuffer::use_on`] (as for any
    /// buffer). A buffer of 0 bytes does not call the resource. Such a buffer
    /// is never used on another device: `use_on` refuses that.
    ///
    /// The buffer keeps the resource alive: with a reference count, except on
    /// a [`StreamCache`], which keeps itself and its stream alive until the
    /// buffer's memory is back (even after the tier and every handle to the
    /// cache are gone), so that the buffer holds no reference count at all
    /// (see [the hot path](crate#the-hot-path)). A
    /// [`CacheTier`](crate::CacheTier) given here serves the allocation from
    /// `stream`'s cache in the same way (after finding it under the tier's
    /// lock).
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use somalloc::{CacheConfig, CacheTier, Device, DeviceBuffer, MemPool, Stream};
    /// # fn main() -> somalloc::Result<()> {
    /// let dev = Device::get(0)?;
    /// let stream = Stream::new(&dev)?;
    /// let pool = Arc::new(MemPool::default_for(&dev)?);
    /// let a = DeviceBuffer::<f32>::new_with(1 << 20, &pool, &stream)?;
    /// let tier = CacheTier::new(pool, CacheConfig::default())?;
    /// let cache = tier.for_stream(&stream)?;
    /// let b = DeviceBuffer::<f32>::new_with(1 << 20, &cache, &stream)?;
    /// # drop((a, b));
    /// # Ok(()) }
    /// ```
    #[inline(always)]
    pub fn new_with<S: SharedResource>(len: usize, resource: &S, stream: &Stream) -> Result<Self> {
        let r = resource.resource();
        match r
            .stream_cache(Sealed(()))
            .and_then(|c| c.downcast_ref::<StreamCache>())
        {
            Some(cache) => {
                if cache.serves_pinned_host() {
                    refuse_host_memory(cache.placement(), "resource")?;
                }
                Self::alloc_cached(len, cache, resource, stream)
            }
            None => {
                refuse_host_memory(r.placement(), "resource")?;
                Self::alloc_other(len, resource, stream)
            }
        }
    }

    /// Allocates `len` elements from `cache` on its own stream: what
    /// [`new_with`](DeviceBuffer::new_with) does with the cache and
    /// [`cache.stream()`](StreamCache::stream), without naming the stream
    /// again.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use somalloc::{CacheConfig, CacheTier, Device, DeviceBuffer, MemPool, Stream};
    /// # fn main() -> somalloc::Result<()> {
    /// let dev = Device::get(0)?;
    /// let tier = CacheTier::new(Arc::new(MemPool::default_for(&dev)?), CacheConfig::default())?;
    /// let cache = tier.for_stream(&Stream::new(&dev)?)?;
    /// for _ in 0..1000 {
    ///     let buf = DeviceBuffer::<f32>::new_cached(1 << 20, &cache)?; // a hit after the first
    ///     assert!(buf.stream() == cache.stream());
    /// }
    /// # Ok(()) }
    /// ```
    #[inline(always)]
    pub fn new_cached(len: usize, cache: &Arc<StreamCache>) -> Result<Self> {
        Self::new_with(len, cache, cache.stream())
    }

    /// `new_with` for any placement (`HostBuffer` holds its memory in one).
    pub(crate) fn alloc_with<S: SharedResource>(len: usize, resource: &S, stream: &Stream) -> Result<Self> {
        match resource
            .resource()
            .stream_cache(Sealed(()))
            .and_then(|c| c.downcast_ref::<StreamCache>())
        {
            Some(cache) => Self::alloc_cached(len, cache, resource, stream),
            None => Self::alloc_other(len, resource, stream),
        }
    }

    /// `new_with` on a stream cache: no reference count is taken while the
    /// cache pins the block. `resource` is the cache's handle (for a buffer
    /// of 0 bytes and a detached cache, which hold it counted).
    #[inline(always)]
    fn alloc_cached<S: SharedResource + ?Sized>(
        len: usize,
        cache: &StreamCache,
        resource: &S,
        stream: &Stream,
    ) -> Result<Self> {
        let bytes = bytes_for::<T>(len)?;
        if bytes == 0 {
            return Self::alloc_any(len, &resource.to_dyn(), stream);
        }
        graph::reclaim_if_ready();
        // The allocation's one question (none on an owned stream outside
        // captures; the cache's handle of the stream counts too, should it
        // be another `Stream` of the same handle): a capturing stream gets
        // graph memory, never a cached block. The cache takes the answer.
        let capture = stream.capturing_with(cache.stream())?;
        let (ptr, pinned) = cache.take_pinned(bytes, stream, Asked::answer(capture))?;
        let (stream, origin) = if pinned {
            // SAFETY: a bitwise copy of the cache's own handle, never
            // dropped (see the field); the pinned block keeps the cache,
            // and so the handle, alive until the buffer's free, after which
            // the buffer does not use it.
            let copy = unsafe { std::ptr::read(cache.stream()) };
            let origin = Origin {
                cache: Some(CachePtr(NonNull::from(cache))),
                ..Origin::CURRENT_POOL
            };
            (copy, origin)
        } else {
            // A detached cache: an ordinary resource buffer.
            (stream.clone(), Origin::resource(&resource.to_dyn()))
        };
        Ok(DeviceBuffer {
            ptr: DevicePtr(ptr as usize),
            len,
            stream: ManuallyDrop::new(stream),
            origin,
            users: Users::NONE,
            // The cache keeps its own books of graph memory.
            capture_id: capture.map_or(0, |c| c.id),
            _marker: PhantomData,
        })
    }

    /// `new_with` on a resource that is not a stream cache: a tier's cache
    /// for the stream, or the resource itself.
    fn alloc_other<S: SharedResource + ?Sized>(len: usize, resource: &S, stream: &Stream) -> Result<Self> {
        match resource.resource().cache_for(stream, Sealed(())) {
            Some(cache) => match cache?.downcast::<StreamCache>() {
                Ok(cache) => Self::alloc_cached(len, &cache, &cache, stream),
                // Only the tier answers, with one of its stream caches.
                Err(_) => Self::alloc_any(len, &resource.to_dyn(), stream),
            },
            None => Self::alloc_any(len, &resource.to_dyn(), stream),
        }
    }

    fn alloc_any(len: usize, resource: &Arc<dyn MemoryResource>, stream: &Stream) -> Result<Self> {
        if resource.device() != stream.device() {
            return Err(InvalidReason::WrongDevice.error(format!(
                "resource of device {} used with a stream of device {}",
                resource.device().ordinal(),
                stream.device().ordinal()
            )));
        }
        let bytes = bytes_for::<T>(len)?;
        let keep = Origin::resource(resource);
        if bytes == 0 {
            return Ok(Self::empty(len, stream, keep));
        }
        graph::reclaim_if_ready();
        // The allocation's one question, whose answer the resource takes
        // (somalloc's pool and stream cache do; another resource asks
        // itself if it needs to).
        let capture = stream.capturing()?;
        let ptr = resource.allocate_asked(bytes, stream, Asked::answer(capture))?;
        if ptr.is_null() {
            return Err(Error::invalid("the memory resource returned a null address"));
        }
        let mut buf = Self::wrap(DevicePtr(ptr as usize), len, stream, keep);
        // The resource keeps its own books of graph memory (a pool does).
        buf.capture_id = capture.map_or(0, |c| c.id);
        Ok(buf)
    }

    /// Allocates and fills with zero bytes (stream-ordered).
    pub fn zeroed(len: usize, stream: &Stream) -> Result<Self> {
        let mut buf = Self::new(len, stream)?;
        buf.memset(0)?;
        Ok(buf)
    }

    /// Allocates on `stream` and copies `data` in; returns once the copy is done.
    pub fn from_slice(data: &[T], stream: &Stream) -> Result<Self> {
        let mut buf = Self::new(data.len(), stream)?;
        buf.copy_from_host(data)?;
        Ok(buf)
    }

    fn empty(len: usize, stream: &Stream, origin: Origin) -> Self {
        Self::wrap(DevicePtr::NULL, len, stream, origin)
    }

    fn wrap(ptr: DevicePtr, len: usize, stream: &Stream, origin: Origin) -> Self {
        DeviceBuffer {
            ptr,
            len,
            stream: ManuallyDrop::new(stream.clone()),
            origin,
            users: Users::NONE,
            capture_id: 0,
            _marker: PhantomData,
        }
    }

    /// A vendor pool allocation, made on `stream` in `capture` (if any).
    fn wrap_vendor(
        ptr: DevicePtr,
        len: usize,
        stream: &Stream,
        origin: Origin,
        capture: Option<Capturing>,
    ) -> Self {
        let mut buf = Self::wrap(ptr, len, stream, origin);
        if let Some(c) = capture {
            graph::note_graph_alloc(ptr, &c);
            buf.capture_id = c.id;
        }
        buf
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn size_in_bytes(&self) -> usize {
        self.len * size_of::<T>()
    }

    /// The device address (null for a 0-byte buffer). Valid for work ordered
    /// after the allocation on the owning stream, or on streams given to
    /// [`DeviceBuffer::use_on`], until the buffer is dropped.
    pub fn as_raw(&self) -> *mut c_void {
        self.ptr.as_mut_ptr()
    }

    /// The stream that owns the allocation (and will free it).
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Whether work on `stream` may use this buffer: it is the owning stream
    /// or was given to [`DeviceBuffer::use_on`].
    ///
    /// For a stream of another device this also asks the pool, each time,
    /// whether that device still has access.
    pub fn is_usable_on(&self, stream: &Stream) -> bool {
        if *self.stream == *stream {
            return true;
        }
        self.users.iter().any(|u| u == stream) && self.check_device_access(stream).is_ok()
    }

    /// `is_usable_on` for a stream known by its vendor handle only.
    #[cfg_attr(not(feature = "cudarc"), allow(dead_code))]
    pub(crate) fn is_usable_on_raw(&self, raw: *mut c_void) -> bool {
        if self.stream.as_raw() == raw {
            return true;
        }
        self.users
            .iter()
            .find(|u| u.as_raw() == raw)
            .is_some_and(|u| self.check_device_access(u).is_ok())
    }

    /// Cross-device use needs a pool that grants the other device access.
    fn check_device_access(&self, other: &Stream) -> Result<()> {
        let (mine, theirs) = (self.stream.device(), other.device());
        if mine == theirs {
            return Ok(());
        }
        let origin = &self.origin;
        let raw = match (&origin.pool, origin.default_pool) {
            (Some(pool), _) => pool.raw(),
            (None, Some(raw)) => raw,
            _ if origin.resource.is_some() || origin.cache.is_some() => {
                return Err(InvalidReason::NoPeerAccess.error(format!(
                    "a buffer from a memory resource (new_with, or new with a current resource set) \
                     of device {} cannot be used on device {}: allocate it with new_in from a pool \
                     that grants access",
                    mine.ordinal(),
                    theirs.ordinal()
                )))
            }
            _ => {
                return Err(InvalidReason::NoPeerAccess.error(format!(
                    "a buffer from the current pool of device {} cannot be used on device {}: \
                     allocate it with new_in from a pool that grants access",
                    mine.ordinal(),
                    theirs.ordinal()
                )))
            }
        };
        match crate::pool::raw_access(raw, &theirs)? {
            crate::PeerAccess::None => Err(InvalidReason::NoPeerAccess.error(format!(
                "the pool of device {} grants device {} no access (MemPool::set_access)",
                mine.ordinal(),
                theirs.ordinal()
            ))),
            _ => Ok(()),
        }
    }

    /// Makes the buffer usable on `other`:
    ///
    /// 1. `other` waits for everything queued on the owning stream so far (the
    ///    allocation included), through an event;
    /// 2. when the buffer is dropped, the owning stream first waits for all
    ///    work queued on `other` up to that moment, then frees.
    ///
    /// Calling it again for the same stream only repeats step 1. A stream of
    /// another device is accepted only for a buffer from an explicit pool
    /// ([`DeviceBuffer::new_in`]) that grants that device access
    /// ([`MemPool::set_access`]); otherwise (a buffer from the current pool,
    /// or from a resource through [`DeviceBuffer::new_with`]) this is
    /// `InvalidArgument`.
    ///
    /// Under stream capture both streams must be in the same capture (a
    /// stream joins a capture by waiting on an event recorded during it,
    /// see [`Stream::wait_event`]); a capturing and a non-capturing stream,
    /// or two captures, are [`Error::Capture`] (the runtime would silently
    /// pull `other` into the capture, or invalidate it).
    pub fn use_on(&mut self, other: &Stream) -> Result<()> {
        if *self.stream == *other {
            return Ok(());
        }
        self.check_device_access(other)?;
        if self.stream.may_capture() || other.may_capture() {
            let mine = self.stream.capturing()?.map(|c| c.id);
            let theirs = other.capturing()?.map(|c| c.id);
            if mine != theirs {
                let name = |c: Option<u64>| c.map_or("no capture".to_string(), |id| format!("capture {id}"));
                return Err(Error::capture(format!(
                    "use_on between a stream in {} and a stream in {}: both must be in the same capture \
                     (fork a stream into a capture by waiting on an event recorded during it)",
                    name(mine),
                    name(theirs)
                )));
            }
        }
        order_after(other, &self.stream)?;
        if !self.users.iter().any(|u| u == other) {
            self.users.push(other.clone());
        }
        Ok(())
    }

    /// Frees now (stream-ordered) and reports an error instead of recording
    /// it, as `Drop` would.
    #[inline(always)]
    pub fn release(self) -> Result<()> {
        let this = ManuallyDrop::new(self);
        // Nothing is written into the buffer on the way: the compiler may
        // read its fields where the caller has them, without a copy.
        let result = this.free().map_err(|e| this.give_up(e));
        let own_stream = this.origin.cache.is_none();
        // SAFETY: what `Drop` drops after its free, each once; `this` is
        // not used again (and not dropped: ManuallyDrop).
        unsafe {
            drop(std::ptr::read(&this.users));
            drop(std::ptr::read(&this.origin));
            if own_stream {
                drop(ManuallyDrop::into_inner(std::ptr::read(&this.stream)));
            }
        }
        result
    }
}

/// A `DeviceBuffer` never holds pinned host memory (a `HostBuffer` does).
#[cold]
fn refuse_host_memory(placement: Placement, what: &str) -> Result<()> {
    if placement.is_pinned_host() {
        return Err(Error::invalid(format!(
            "a {what} of pinned host memory ({:?}): allocate a HostBuffer from it, not a DeviceBuffer",
            placement.location
        )));
    }
    Ok(())
}
