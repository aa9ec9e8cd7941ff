//! What the arena needs from the device: address space, physical chunks,
//! mappings, and fences (a marker in a stream's queue whose completion the
//! host can ask about). The arena is written against [`Phys`] so that its
//! books run on the fake of the unit tests (`super::fake`) as on a device
//! ([`DevicePhys`]).

use crate::error::Result;
use crate::stream::Stream;

/// The device side of an arena (see the module docs).
///
/// # Safety
///
/// The arena hands out the addresses an implementation maps as memory that
/// work on the device reads and writes: `map` must leave `[addr, addr +
/// bytes)` backed by the handle's memory, and a successful `grant` must
/// make a mapped range usable by the device named; a fence's `done` may
/// answer `true` only once
/// every piece of work enqueued on its stream before the record has
/// completed on the device; after `wait_on` succeeds, no work enqueued on
/// the waiting stream afterwards may begin on the device before the
/// fence's last record has completed.
pub(crate) unsafe trait Phys: Send + Sync + 'static {
    /// A reusable fence.
    type Fence: Send;

    /// Reserves `bytes` of address space aligned to `align`; its base.
    fn reserve(&self, bytes: usize, align: usize) -> Result<usize>;
    /// Gives back a whole reservation.
    ///
    /// # Safety
    /// Nothing is mapped in it.
    unsafe fn unreserve(&self, base: usize, bytes: usize) -> Result<()>;
    /// Makes `bytes` of physical memory (a multiple of the granule).
    fn create(&self, bytes: usize) -> Result<u64>;
    /// Frees a physical chunk that is not mapped.
    ///
    /// # Safety
    /// From `create`, released once, not mapped.
    unsafe fn release(&self, handle: u64) -> Result<()>;
    /// Maps `handle` (of `bytes`) at `addr`, with no access granted yet
    /// (the arena grants it: see `Arena::map_usable`). On failure nothing
    /// is mapped.
    ///
    /// # Safety
    /// `[addr, addr + bytes)` lies in a reservation and is unmapped.
    unsafe fn map(&self, addr: usize, bytes: usize, handle: u64) -> Result<()>;
    /// Grants device `device` (the arena's own, [`Phys::device`], or a
    /// peer) read-write access to a mapped range.
    ///
    /// # Safety
    /// The range is mapped.
    unsafe fn grant(&self, addr: usize, bytes: usize, device: usize) -> Result<()>;
    /// The ordinal of the arena's device.
    fn device(&self) -> usize;
    /// A stream of the arena's own, on its device: the relay of the frees
    /// made on the per-thread default stream (see `Front`).
    fn new_stream(&self) -> Result<Stream>;
    /// Unmaps a mapping made by `map`.
    ///
    /// # Safety
    /// Exactly one mapping, that no work in flight uses.
    unsafe fn unmap(&self, addr: usize, bytes: usize) -> Result<()>;
    /// A fence for `stream`'s device (not recorded yet).
    fn new_fence(&self, stream: &Stream) -> Result<Self::Fence>;
    /// Records the fence at the current end of `stream`'s queue.
    fn record(&self, fence: &Self::Fence, stream: &Stream) -> Result<()>;
    /// Whether everything before the fence's last record has completed.
    fn done(&self, fence: &Self::Fence) -> Result<bool>;
    /// Waits on the host until it has.
    fn wait(&self, fence: &Self::Fence) -> Result<()>;
    /// Makes the work enqueued on `stream` from now on wait, on the device,
    /// until everything before the fence's last record has completed (the
    /// host does not wait).
    fn wait_on(&self, stream: &Stream, fence: &Self::Fence) -> Result<()>;
}
