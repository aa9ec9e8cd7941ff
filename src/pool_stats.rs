//! The byte counts of a pool, in a module of their own: [`Error`] carries
//! them (`OutOfMemory`), and the pool code returns them.
//!
//! [`Error`]: crate::Error

use std::fmt;
use std::time::Duration;

/// Byte counts of a pool, as the runtime reports them.
/// Read-only: fields may be added, so it is made only by somalloc.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Bytes the pool holds from the device now.
    pub reserved_current: usize,
    /// Highest `reserved_current` since creation or the last reset.
    pub reserved_peak: usize,
    /// Bytes handed out to allocations now.
    pub used_current: usize,
    /// Highest `used_current` since creation or the last reset.
    pub used_peak: usize,
}

impl fmt::Display for PoolStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "used {} (peak {}), reserved {} (peak {})",
            self.used_current, self.used_peak, self.reserved_current, self.reserved_peak
        )
    }
}

/// A byte count the runtime reports as a 64-bit integer, as `usize` (on a
/// 64-bit host the same number; a count above `usize::MAX` saturates).
pub(crate) fn bytes(reported: u64) -> usize {
    usize::try_from(reported).unwrap_or(usize::MAX)
}

/// What a [`VmmArena`](crate::VmmArena) holds and has done.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct ArenaStats {
    /// Bytes of live blocks (rounded up to 512 bytes each).
    pub live_bytes: usize,
    /// Live blocks.
    pub live_blocks: usize,
    /// Device memory mapped (the arena's footprint on the device).
    pub mapped_bytes: usize,
    /// Address space reserved.
    pub reserved_bytes: usize,
    /// Mapped bytes not live.
    pub free_bytes: usize,
    /// The longest free range.
    pub largest_free: usize,
    /// `1 - largest_free / free_bytes` (0 with nothing free): how far the
    /// free memory is from being one range.
    pub fragmentation: f64,
    /// Bytes in idle chunks (all free, every free complete): what
    /// [`VmmArena::trim`](crate::VmmArena::trim) would give back without waiting.
    pub idle_bytes: usize,
    /// Mapped chunks.
    pub chunks: usize,
    /// Unmapped chunks whose release the runtime refused: memory still held
    /// from the device, released again at the next trim.
    pub unreleased_bytes: usize,
    /// The most bytes mapped at once (since creation or
    /// [`VmmArena::reset_peaks`](crate::VmmArena::reset_peaks)).
    pub peak_mapped: usize,
    /// The most live bytes at once.
    pub peak_live: usize,
    /// Chunks made and mapped so far (moves are counted in `moves`).
    pub maps: u64,
    /// Successful unmaps so far: of chunks given back, and of the addresses
    /// moved chunks left.
    pub unmaps: u64,
    /// Physical chunks made (`cuMemCreate` / `hipMemCreate`) so far.
    pub creates: u64,
    /// Physical chunks released so far.
    pub releases: u64,
    /// Every call of the runtime's virtual-memory API so far, refused ones
    /// included: reserving and freeing address space, making, mapping,
    /// granting access, unmapping and releasing. Once a program's steps
    /// are warm it stays put.
    pub vmm_calls: u64,
    /// Events recorded to learn that frees completed.
    pub fences: u64,
    /// Host waits on those events (trim and out-of-memory recovery).
    pub waits: u64,
    /// Recovery steps taken when growing failed.
    pub recoveries: u64,
    /// Allocations refused.
    pub refusals: u64,
    /// Wholly free chunks moved to where the arena grew, instead of new
    /// memory.
    pub moves: u64,
    /// Device waits one stream made for another's fence, to reuse that
    /// stream's frees instead of growing
    /// ([`ArenaOptions::stream_waits`](crate::ArenaOptions::stream_waits)).
    pub stream_waits: u64,
    /// Allocations the device's pool served because a virtual-memory call
    /// of the arena failed.
    pub pool_allocations: u64,
    /// The host's time in the runtime's virtual-memory calls so far
    /// (reserving, making, mapping with the access grant, unmapping and
    /// releasing chunks): the part of the arena's cost that growth, moves
    /// and trims add to the calls that made them.
    pub vmm_time: Duration,
    /// Calls on the arena (from any thread) that found it busy with
    /// another thread's call: a call that maps or moves chunks holds the
    /// arena for as long as its virtual-memory calls take.
    pub lock_waits: u64,
    /// The time those calls waited, in all.
    pub lock_wait_time: Duration,
}

impl fmt::Display for ArenaStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "live {} in {} blocks, mapped {} (peak {}), reserved {}, free {} (largest range {}, \
             fragmentation {:.1}%), idle {}",
            self.live_bytes,
            self.live_blocks,
            self.mapped_bytes,
            self.peak_mapped,
            self.reserved_bytes,
            self.free_bytes,
            self.largest_free,
            self.fragmentation * 100.0,
            self.idle_bytes
        )
    }
}
