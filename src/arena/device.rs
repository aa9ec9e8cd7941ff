//! [`VmmArena`]: the arena on a device, through the backend's
//! virtual-memory calls.

use std::ffi::c_void;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::core::Arena;
use super::front::Front;
use super::phys::Phys;
use super::{ArenaOptions, ArenaSegment, ArenaStats};
use crate::backend::{Backend, DevicePtr, PhysHandle, PhysProps};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::pool::MemPool;
use crate::resource::MemoryResource;
use crate::stream::{Asked, Event, Stream};
use crate::Active;

/// The chunk size (and least growth) where the runtime holds a file
/// descriptor per chunk: 256 MiB keeps a 192 GiB device under 800 of them.
const FD_QUIRK_CHUNK: usize = 256 << 20;

/// The device side of a [`VmmArena`].
pub(crate) struct DevicePhys {
    props: PhysProps,
}

/// Runs `f` with `stream`'s device current when the stream is the legacy
/// default stream, whose handle (null, or `0x1`) the runtime reads as the
/// legacy stream of the *current* device: a fence recorded or waited for
/// from a thread with another device current would otherwise order that
/// device's stream. Any other handle names its stream whatever is current.
fn on_device<T>(stream: &Stream, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let raw = stream.as_raw() as usize;
    if raw > 1 {
        return f();
    }
    let want = stream.device();
    let current = Device::current()?;
    if current == want {
        return f();
    }
    want.bind_to_thread()?;
    let r = f();
    // The device that was current a moment ago can be made current again;
    // should the runtime refuse, the result of `f` still stands.
    crate::error::record_drop_error(current.bind_to_thread());
    r
}

// SAFETY: `map` maps the handle and `grant` grants read-write access (the
// arena unmaps again if a grant fails); fences are events, whose query
// answers complete only once the work before the record completed, and a
// fence last recorded during a capture (a node of the graph, not a point
// of a stream) is never complete and never waited on (`Event::record`
// marks it, `is_complete` and `wait_on` refuse it). The legacy stream's
// fences are recorded and waited for with its device current.
unsafe impl Phys for DevicePhys {
    type Fence = Event;

    fn reserve(&self, bytes: usize, align: usize) -> Result<usize> {
        Active::vmm_reserve(bytes, align).map(|p| p.0)
    }

    unsafe fn unreserve(&self, base: usize, bytes: usize) -> Result<()> {
        // SAFETY: the caller's guarantees.
        unsafe { Active::vmm_free_reservation(DevicePtr(base), bytes) }
    }

    fn create(&self, bytes: usize) -> Result<u64> {
        Active::vmm_create(bytes, self.props).map(|h| h.0)
    }

    unsafe fn release(&self, handle: u64) -> Result<()> {
        // SAFETY: the caller's guarantees.
        unsafe { Active::vmm_release(PhysHandle(handle)) }
    }

    unsafe fn map(&self, addr: usize, bytes: usize, handle: u64) -> Result<()> {
        // SAFETY: the caller's guarantees.
        unsafe { Active::vmm_map(DevicePtr(addr), bytes, PhysHandle(handle)) }
    }

    unsafe fn grant(&self, addr: usize, bytes: usize, device: usize) -> Result<()> {
        // SAFETY: the caller's guarantees.
        unsafe { Active::vmm_set_access(DevicePtr(addr), bytes, device, true) }
    }

    fn device(&self) -> usize {
        self.props.device
    }

    fn new_stream(&self) -> Result<Stream> {
        Stream::new(&Device::get(self.props.device)?)
    }

    unsafe fn unmap(&self, addr: usize, bytes: usize) -> Result<()> {
        // SAFETY: the caller's guarantees.
        unsafe { Active::vmm_unmap(DevicePtr(addr), bytes) }
    }

    fn new_fence(&self, stream: &Stream) -> Result<Event> {
        Event::for_stream(stream, false)
    }

    fn record(&self, fence: &Event, stream: &Stream) -> Result<()> {
        on_device(stream, || fence.record(stream))
    }

    fn done(&self, fence: &Event) -> Result<bool> {
        fence.is_complete()
    }

    fn wait(&self, fence: &Event) -> Result<()> {
        fence.synchronize()
    }

    fn wait_on(&self, stream: &Stream, fence: &Event) -> Result<()> {
        // A fence recorded in a capture is a node of that graph: waiting on
        // it would pull `stream` into the capture, with no order between
        // the streams' work at all.
        fence.refuse_if_captured("an arena's device wait")?;
        // A capturing stream refuses (`Error::Capture`): the arena then
        // grows instead.
        on_device(stream, || stream.wait_event(fence))
    }
}

/// Device memory owned through the vendor's virtual-memory API: see [the
/// module docs](crate::arena) for what it does and guarantees.
///
/// A [`MemoryResource`] of one device: use it with
/// [`DeviceBuffer::new_with`](crate::DeviceBuffer::new_with),
/// [`set_current_resource`](crate::set_current_resource), or under a
/// [`CacheTier`](crate::CacheTier).
pub struct VmmArena {
    front: Arc<Front<DevicePhys>>,
}

impl fmt::Debug for VmmArena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VmmArena")
            .field("device", &self.front.device().ordinal())
            .field("stats", &self.stats())
            .finish()
    }
}

impl VmmArena {
    /// An arena of `device`, with `options`.
    ///
    /// [`Error::Unsupported`] where the device or the loaded runtime has no
    /// virtual-memory management (the reason says which); nothing is
    /// reserved then.
    pub fn new(device: &Device, options: ArenaOptions) -> Result<VmmArena> {
        VmmArena::with_pool(MemPool::default_for(device)?, options)
    }

    /// An arena of `pool`'s device whose captured allocations (graph
    /// memory) and the allocations it cannot serve come from `pool` instead
    /// of the device's default pool; otherwise as [`VmmArena::new`].
    pub fn with_pool(pool: MemPool, options: ArenaOptions) -> Result<VmmArena> {
        VmmArena::make(pool, options, false)
    }

    /// [`VmmArena::with_pool`] for a program that asked for no allocator in
    /// particular: refused also where the loaded runtime could not give the
    /// arena's memory back (ROCm versions whose release leaks, or whose
    /// address reservation holds released memory; `with_pool` keeps its
    /// chunks there instead). [`Error::Unsupported`] says why; the caller
    /// serves the device from `pool` then. Nothing is reserved on a
    /// refusal.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use somalloc::{ArenaOptions, Device, MemPool, MemoryResource, VmmArena};
    /// # fn main() -> somalloc::Result<()> {
    /// let device = Device::get(0)?;
    /// let pool = MemPool::default_for(&device)?;
    /// let serving: Arc<dyn MemoryResource> = match VmmArena::as_default(pool.clone(), ArenaOptions::default()) {
    ///     Ok(arena) => Arc::new(arena),
    ///     Err(e) => {
    ///         eprintln!("{e}; the pool serves device 0");
    ///         Arc::new(pool)
    ///     }
    /// };
    /// # drop(serving);
    /// # Ok(()) }
    /// ```
    pub fn as_default(pool: MemPool, options: ArenaOptions) -> Result<VmmArena> {
        VmmArena::make(pool, options, true)
    }

    fn make(pool: MemPool, options: ArenaOptions, by_default: bool) -> Result<VmmArena> {
        let device = &pool.device();
        let ordinal = device.ordinal();
        let support = Active::vmm_support(ordinal)?;
        let quirks = Active::vmm_quirks();
        let refused = if by_default {
            super::choice::refusal(&support, &quirks)
        } else {
            (!support.supported).then(|| support.why_not.unwrap_or("not supported").to_string())
        };
        if let Some(why) = refused {
            return Err(Error::Unsupported {
                backend: crate::VENDOR,
                what: format!("a virtual-memory arena on device {ordinal}: {why}"),
            });
        }
        let granule = support.recommended.max(support.granularity);
        let total = device.total_memory()?;
        let mut opts = options;
        if let Some(max) = quirks.max_chunk {
            opts.chunk_bytes = opts.chunk_bytes.min(max);
        }
        opts.keep_chunks = quirks.release_leaks || quirks.reservation_holds_memory;
        if opts.max_reserved == usize::MAX {
            opts.max_reserved = total.saturating_mul(8);
        }
        let reserve = opts.reserve_bytes.unwrap_or(total.saturating_mul(2));
        if quirks.fd_per_create {
            // The runtime holds a file descriptor per chunk: few, large
            // chunks keep the process under its descriptor limit.
            opts.chunk_bytes = opts.chunk_bytes.max(FD_QUIRK_CHUNK);
            opts.min_grow = FD_QUIRK_CHUNK;
        }
        let phys = DevicePhys {
            props: PhysProps {
                device: ordinal,
                posix_fd: support.posix_fd,
                rdma: support.rdma,
            },
        };
        let arena = Arena::new(phys, granule, opts, reserve)?;
        let pool: Arc<dyn MemoryResource> = Arc::new(pool);
        Ok(VmmArena {
            front: Front::new(arena, *device, pool),
        })
    }

    /// What the arena holds and has done.
    pub fn stats(&self) -> ArenaStats {
        let mut s = self.front.arena.stats();
        s.pool_allocations = self.front.stepped_aside.load(Ordering::Relaxed);
        s
    }

    /// The bytes of the mapped chunks that any of `blocks` (address,
    /// bytes) touches: what the arena keeps mapped for as long as those
    /// blocks live, whatever else it gives back. Addresses outside the
    /// arena count nothing.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use somalloc::{ArenaOptions, Device, DeviceBuffer, Stream, VmmArena};
    /// # fn main() -> somalloc::Result<()> {
    /// let device = Device::get(0)?;
    /// let arena = Arc::new(VmmArena::new(&device, ArenaOptions::default())?);
    /// let stream = Stream::new(&device)?;
    /// let weights = DeviceBuffer::<f32>::new_with(1 << 20, &arena, &stream)?;
    /// let held = arena.mapped_holding(&[(weights.as_raw() as usize, weights.size_in_bytes())]);
    /// assert!(held >= weights.size_in_bytes());
    /// # Ok(()) }
    /// ```
    pub fn mapped_holding(&self, blocks: &[(usize, usize)]) -> usize {
        self.front.arena.lock().book.holding(blocks)
    }

    /// Starts the peaks of [`stats`](VmmArena::stats) over from now.
    pub fn reset_peaks(&self) {
        self.front.arena.reset_peaks();
    }

    /// Waits on the host for every stream's frees (events, not the whole
    /// device), then unmaps and releases idle chunks until at most
    /// `keep_bytes` idle bytes stay mapped. Returns the bytes given back.
    /// (With a runtime whose release does not free memory — see the module
    /// docs — nothing is given back.)
    pub fn trim(&self, keep_bytes: usize) -> usize {
        self.front.arena.trim(keep_bytes)
    }

    /// The mapped chunks, in address order: what to register with NCCL
    /// (`ncclCommRegister`) or to check with the vendor's
    /// `cuMemRetainAllocationHandle`. Each starts on the device's
    /// recommended granularity and is one physical allocation; a block may
    /// span adjacent segments.
    pub fn segments(&self) -> Vec<ArenaSegment> {
        self.front
            .arena
            .segments()
            .into_iter()
            .map(|(address, bytes)| ArenaSegment { address, bytes })
            .collect()
    }

    /// Lets go of `stream`: its frees are waited for (on the host, through
    /// an event), after which the arena neither records on it nor keys
    /// anything by its handle. Call it before destroying a stream that the
    /// arena has seen but that somalloc does not own (a borrowed one): the
    /// arena otherwise records events on it when other streams look for
    /// memory. `false` if the arena never saw it. [`trim`](VmmArena::trim)
    /// also lets go of every stream with nothing left in the arena.
    pub fn forget_stream(&self, stream: &Stream) -> Result<bool> {
        self.front.arena.forget(stream)
    }

    /// Lets `peer`'s kernels read and write every chunk, now and as the
    /// arena grows (peer access to pool memory does not cover an arena's
    /// chunks).
    pub fn grant_access(&self, peer: &Device) -> Result<()> {
        self.front.arena.grant(peer.ordinal())
    }

    /// The device the arena serves.
    pub fn device(&self) -> Device {
        self.front.device()
    }
}

// SAFETY: forwarded to `Front`, whose contract is argued there.
unsafe impl MemoryResource for VmmArena {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<*mut c_void> {
        self.front.allocate_asked(bytes, stream, Asked::NOT_YET)
    }

    unsafe fn deallocate(&self, ptr: *mut c_void, bytes: usize, stream: &Stream) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.front.deallocate_asked(ptr, bytes, stream, Asked::NOT_YET) }
    }

    fn allocate_asked(&self, bytes: usize, stream: &Stream, asked: Asked) -> Result<*mut c_void> {
        self.front.allocate_asked(bytes, stream, asked)
    }

    unsafe fn deallocate_asked(
        &self,
        ptr: *mut c_void,
        bytes: usize,
        stream: &Stream,
        asked: Asked,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.front.deallocate_asked(ptr, bytes, stream, asked) }
    }

    fn device(&self) -> Device {
        self.front.device()
    }
}
