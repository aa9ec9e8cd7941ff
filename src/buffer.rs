//! Device buffers allocated in stream order.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::mem::size_of;
use std::sync::Arc;

use bytemuck::Pod;

use crate::backend::{Backend, DevicePtr};
use crate::error::{record_drop_error, Error, InvalidReason, Result};
use crate::graph::{self, CaptureStatus, Capturing, Deferred};
use crate::pool::{with_stats, MemPool, Placement};
use crate::resource::MemoryResource;
use crate::stream::{Event, Stream};
use crate::Active;

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
    stream: Stream,
    /// Where the memory came from, and so where the free goes.
    origin: Origin,
    /// Other streams this buffer was used on (see `use_on`).
    users: Vec<Stream>,
    /// The capture the allocation was made in (0: none).
    capture_id: u64,
    _marker: PhantomData<T>,
}

/// Where a buffer's memory came from.
#[derive(Clone)]
enum Origin {
    /// `new`: the current pool of the stream's device (freed with the plain
    /// stream-ordered free).
    CurrentPool,
    /// `new_in` from the device's default pool: it lives as long as the
    /// process, so no reference count is taken on the hot path.
    DefaultPool(<Active as Backend>::Pool),
    /// `new_in`, `import`: an explicit pool. Keeps a created pool alive, and
    /// answers whether another device may use the memory.
    Pool(MemPool),
    /// `new_with`: a memory resource, kept alive; the free goes to its
    /// `deallocate`.
    Resource(Arc<dyn MemoryResource>),
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
    /// Allocates `len` elements on `stream` from the current pool of the
    /// stream's device. The contents are uninitialised device memory.
    pub fn new(len: usize, stream: &Stream) -> Result<Self> {
        let bytes = bytes_for::<T>(len)?;
        if bytes == 0 {
            return Ok(Self::empty(len, stream, Origin::CurrentPool));
        }
        graph::reclaim_if_ready();
        let capture = stream.capturing()?;
        match Active::malloc_async(bytes, stream.raw()) {
            Ok(ptr) => Ok(Self::wrap_vendor(ptr, len, stream, Origin::CurrentPool, capture)),
            Err(e) => Err(with_stats(e, MemPool::current(&stream.device()).ok())),
        }
    }

    /// Allocates `len` elements on `stream` from `pool`, which must belong to
    /// the stream's device. A pool of pinned host memory is refused
    /// (`InvalidArgument`): its buffers are [`HostBuffer`](crate::HostBuffer)s.
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
        let keep = if pool.is_default() {
            Origin::DefaultPool(pool.raw())
        } else {
            Origin::Pool(pool.clone())
        };
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
    /// must serve the stream's device and hand out device (or managed)
    /// memory: a resource of pinned host memory is refused
    /// (`InvalidArgument`; see [`HostBuffer::new_with`](crate::HostBuffer::new_with)).
    /// Dropping the buffer gives
    /// the memory back through the resource's `deallocate`, on `stream`,
    /// after every stream given to [`DeviceBuffer::use_on`] (as for any
    /// buffer). A buffer of 0 bytes does not call the resource. Such a buffer
    /// is never used on another device: `use_on` refuses that.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use somalloc::{CacheConfig, CacheTier, Device, DeviceBuffer, MemPool, MemoryResource, Stream};
    /// # fn main() -> somalloc::Result<()> {
    /// let dev = Device::get(0)?;
    /// let stream = Stream::new(&dev)?;
    /// let tier = CacheTier::new(Arc::new(MemPool::default_for(&dev)?), CacheConfig::default())?;
    /// let res: Arc<dyn MemoryResource> = tier.for_stream(&stream)?;
    /// let buf = DeviceBuffer::<f32>::new_with(1 << 20, &res, &stream)?;
    /// # drop(buf);
    /// # Ok(()) }
    /// ```
    pub fn new_with(len: usize, resource: &Arc<dyn MemoryResource>, stream: &Stream) -> Result<Self> {
        refuse_host_memory(resource.placement(), "resource")?;
        Self::alloc_with(len, resource, stream)
    }

    /// `new_with` for any placement (`HostBuffer` holds its memory in one).
    pub(crate) fn alloc_with(
        len: usize,
        resource: &Arc<dyn MemoryResource>,
        stream: &Stream,
    ) -> Result<Self> {
        if resource.device() != stream.device() {
            return Err(InvalidReason::WrongDevice.error(format!(
                "resource of device {} used with a stream of device {}",
                resource.device().ordinal(),
                stream.device().ordinal()
            )));
        }
        let bytes = bytes_for::<T>(len)?;
        let keep = Origin::Resource(Arc::clone(resource));
        if bytes == 0 {
            return Ok(Self::empty(len, stream, keep));
        }
        graph::reclaim_if_ready();
        let capture = stream.capturing()?;
        let ptr = resource.allocate(bytes, stream)?;
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
            stream: stream.clone(),
            origin,
            users: Vec::new(),
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
        if self.stream.same_as(stream) {
            return true;
        }
        self.users.iter().any(|u| u.same_as(stream)) && self.check_device_access(stream).is_ok()
    }

    /// Cross-device use needs a pool that grants the other device access.
    fn check_device_access(&self, other: &Stream) -> Result<()> {
        let (mine, theirs) = (self.stream.device(), other.device());
        if mine == theirs {
            return Ok(());
        }
        let raw = match &self.origin {
            Origin::Pool(pool) => pool.raw(),
            Origin::DefaultPool(raw) => *raw,
            Origin::Resource(_) => {
                return Err(InvalidReason::NoPeerAccess.error(format!(
                    "a buffer from a memory resource (new_with) of device {} cannot be used on \
                     device {}: allocate it with new_in from a pool that grants access",
                    mine.ordinal(),
                    theirs.ordinal()
                )))
            }
            Origin::CurrentPool => {
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
        if self.stream.same_as(other) {
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
        if !self.users.iter().any(|u| u.same_as(other)) {
            self.users.push(other.clone());
        }
        Ok(())
    }

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

    /// Names this allocation for another process (IPC). The buffer must come
    /// from a pool created with [`ExportHandle::PosixFd`](crate::ExportHandle)
    /// and the other process imports it from that pool ([`MemPool::export_fd`],
    /// [`MemPool::import_fd`], [`DeviceBuffer::import`]).
    pub fn export(&self) -> Result<ExportedBuffer> {
        if self.ptr == DevicePtr::NULL {
            return Err(InvalidReason::ZeroBytes.error("a 0-byte buffer cannot be exported"));
        }
        Ok(ExportedBuffer {
            data: Active::pool_export_pointer(self.ptr)?,
            bytes: self.size_in_bytes() as u64,
        })
    }

    /// Maps a buffer exported by another process, from the pool imported
    /// from that process, as a buffer on `stream`. Dropping it frees the
    /// mapping on `stream` (stream-ordered, like any buffer); synchronise
    /// the stream before telling the exporter it may free.
    ///
    /// # Safety
    /// `exported` comes from [`DeviceBuffer::export`] on an allocation of
    /// `pool`'s exporter, whose allocation has completed on the exporter's
    /// stream and stays allocated until this buffer is dropped and its free
    /// has completed (the importer frees first).
    ///
    /// The size in `exported` is trusted: the runtime maps the allocation
    /// without telling the importer its extent, so every safe method of the
    /// returned buffer relies on `exported.size_in_bytes()` being at most the
    /// size of the exported allocation. Take it only from the exporter's
    /// `export`, over a channel that delivers the wire form unchanged.
    pub unsafe fn import(pool: &MemPool, exported: &ExportedBuffer, stream: &Stream) -> Result<Self> {
        let bytes = usize::try_from(exported.bytes)
            .map_err(|_| InvalidReason::SizeOverflow.error("exported size too large"))?;
        let size = size_of::<T>();
        if size == 0 || bytes % size != 0 {
            return Err(Error::invalid(format!(
                "{bytes} exported bytes are not a whole number of {size}-byte elements"
            )));
        }
        if pool.device() != stream.device() {
            return Err(
                InvalidReason::WrongDevice.error("import the buffer on a stream of the pool's device")
            );
        }
        let ptr = Active::pool_import_pointer(pool.raw(), &exported.data)?;
        Ok(Self::wrap(ptr, bytes / size, stream, Origin::Pool(pool.clone())))
    }

    /// Frees now (stream-ordered) and reports an error instead of recording
    /// it, as `Drop` would.
    pub fn release(mut self) -> Result<()> {
        self.free()
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

    fn free(&mut self) -> Result<()> {
        if self.ptr == DevicePtr::NULL {
            return Ok(());
        }
        let ptr = std::mem::replace(&mut self.ptr, DevicePtr::NULL);
        if self.capture_id != 0
            || self.stream.may_capture()
            || graph::frees_ready()
            || (!self.users.is_empty() && self.users.iter().any(Stream::may_capture))
        {
            return self.free_under_capture(ptr);
        }
        // Order the free after every other stream's use. If that fails the
        // block is leaked rather than freed under running work.
        if !self.users.is_empty() {
            for user in std::mem::take(&mut self.users) {
                order_after(&self.stream, &user)?;
            }
        }
        // SAFETY: `ptr` is this buffer's live allocation (now forgotten by
        // it, so freed once), and every stream that used it is ordered
        // before this point of the owning stream.
        unsafe { free_via(&self.origin, ptr, self.size_in_bytes(), &self.stream) }
    }

    /// The free when a capture may be involved: of this buffer's stream, of
    /// a stream it was used on, or of the allocation itself.
    #[cold]
    fn free_under_capture(&mut self, ptr: DevicePtr) -> Result<()> {
        graph::reclaim_if_ready();
        let mine = self.stream.capturing()?;
        let mut theirs = Vec::with_capacity(self.users.len());
        for user in &self.users {
            theirs.push(user.capturing()?);
        }
        let bytes = self.size_in_bytes();
        let in_graph = match mine {
            // No capture anywhere: the ordinary free (a graph output's
            // rules are applied by the pool).
            None if theirs.iter().all(Option::is_none) => true,
            // Allocated in a capture that was invalidated: it never
            // existed; the origin only updates its books.
            Some(c) if c.id == self.capture_id && c.status == CaptureStatus::Invalidated => {
                self.users.clear();
                true
            }
            // Allocated and freed in the same capture, used only in it: a
            // graph free node.
            Some(c) if c.id == self.capture_id && c.status == CaptureStatus::Active => {
                theirs.iter().all(|t| matches!(t, Some(u) if u.id == c.id))
            }
            _ => false,
        };
        if in_graph {
            for user in std::mem::take(&mut self.users) {
                order_after(&self.stream, &user)?;
            }
            // SAFETY: as in `free`: the live allocation, freed once, every
            // use ordered before this point of the owning stream (in the
            // graph, when capturing).
            return unsafe { free_via(&self.origin, ptr, bytes, &self.stream) };
        }
        // A graph that is being captured may use the memory on each replay:
        // free it after every such graph is gone.
        let captures: Vec<Capturing> = mine.into_iter().chain(theirs.into_iter().flatten()).collect();
        let origin = self.origin.clone();
        graph::defer(
            Deferred {
                stream: self.stream.clone(),
                users: std::mem::take(&mut self.users),
                // SAFETY (of the call inside): this buffer's live
                // allocation, freed once, on its own stream after the
                // streams that used it (ordered by the queue's drain), once
                // no graph that may use it exists.
                free: Box::new(move |stream: &Stream| unsafe { free_via(&origin, ptr, bytes, stream) }),
            },
            &captures,
        )
    }
}

/// A `DeviceBuffer` never holds pinned host memory (a `HostBuffer` does).
fn refuse_host_memory(placement: Placement, what: &str) -> Result<()> {
    if placement.is_pinned_host() {
        return Err(Error::invalid(format!(
            "a {what} of pinned host memory ({:?}): allocate a HostBuffer from it, not a DeviceBuffer",
            placement.location
        )));
    }
    Ok(())
}

/// Frees `ptr` (`bytes` long) through where it came from, on `stream`.
///
/// # Safety
/// `ptr` and `bytes` are a live allocation of `origin` made on `stream`,
/// freed once, and every use is ordered before this point of `stream`.
unsafe fn free_via(origin: &Origin, ptr: DevicePtr, bytes: usize, stream: &Stream) -> Result<()> {
    match origin {
        // SAFETY: the caller's guarantees, for the resource that allocated it.
        Origin::Resource(resource) => unsafe { resource.deallocate(ptr.as_mut_ptr(), bytes, stream) },
        // SAFETY: the caller's guarantees; the pool's stream-ordered free.
        Origin::CurrentPool | Origin::DefaultPool(_) | Origin::Pool(_) => unsafe {
            graph::vendor_free(ptr, stream)
        },
    }
}

/// What names a buffer for another process: the runtime's 64 opaque bytes
/// and the size. Send [`ExportedBuffer::to_bytes`] over any channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportedBuffer {
    data: [u8; 64],
    bytes: u64,
}

impl ExportedBuffer {
    /// Size of the wire form.
    pub const WIRE_SIZE: usize = 72;

    /// The wire form: the 64 runtime bytes, then the size (little-endian).
    pub fn to_bytes(&self) -> [u8; Self::WIRE_SIZE] {
        let mut out = [0u8; Self::WIRE_SIZE];
        out[..64].copy_from_slice(&self.data);
        out[64..].copy_from_slice(&self.bytes.to_le_bytes());
        out
    }

    /// Reads the wire form back.
    pub fn from_bytes(wire: &[u8; Self::WIRE_SIZE]) -> ExportedBuffer {
        let mut data = [0u8; 64];
        data.copy_from_slice(&wire[..64]);
        let mut size = [0u8; 8];
        size.copy_from_slice(&wire[64..]);
        ExportedBuffer {
            data,
            bytes: u64::from_le_bytes(size),
        }
    }

    /// Size of the exported allocation in bytes.
    pub fn size_in_bytes(&self) -> u64 {
        self.bytes
    }
}

/// `waiter` waits for everything queued so far on `target`.
fn order_after(waiter: &Stream, target: &Stream) -> Result<()> {
    let event = Event::new(&target.device())?;
    event.record(target)?;
    waiter.wait_event(&event)
    // Destroying a recorded event is fine: the runtime keeps it until the
    // wait is satisfied.
}

impl<T: Pod> Drop for DeviceBuffer<T> {
    #[inline]
    fn drop(&mut self) {
        // Nothing to do after `release` or for a 0-byte buffer.
        if self.ptr != DevicePtr::NULL {
            record_drop_error(self.free());
        }
    }
}
