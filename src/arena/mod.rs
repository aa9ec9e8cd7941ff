//! [`VmmArena`]: device memory that somalloc owns through the vendor's
//! virtual-memory API, split, merged and given back at the granularity of
//! the device's pages.
//!
//! # What it does
//!
//! The vendor pool hands out whole blocks that nothing else can split,
//! merge or move; a cache in front of it holds them per stream. The arena
//! instead reserves one range of device address space and maps physical
//! chunks into it as it grows:
//!
//! * **Placement.** Blocks are carved from free ranges by best fit and merge
//!   with their free neighbours when freed. Blocks of at most 1 MiB live in
//!   small chunks (one device page, 2 MiB on current GPUs), larger ones in
//!   large chunks ([`ArenaOptions::chunk_bytes`], 20 MiB by default), so
//!   long-lived small blocks never split the ranges large blocks need.
//!   Blocks of 512 MiB or more (a language model's logits) live in huge
//!   chunks of the same size, placed apart in the address space; another
//!   block goes there only when nothing else holds it and the arena would
//!   grow, so that each step's huge blocks find the windows they had the
//!   step before instead of having chunks moved to make them (the recorded
//!   training steps of `benches/data`, replayed eight times over in one
//!   arena, make no virtual-memory call after the third replay). A
//!   large block that does not fit extends a free range that ends where
//!   unmapped address space begins, mapping only what it lacks. Blocks of
//!   32 MiB or more are kept from touching chunks they barely need (a
//!   chunk goes back only when all of it is free, so a long-lived block
//!   holds every chunk it touches): such a block extends a range only
//!   where that maps less than chunks of its own, and one of 32 to 64 MiB
//!   taken from a longer range goes to the range's end or to a chunk
//!   boundary just past its start where that touches fewer chunks.
//! * **Moving memory instead of making it.** When the arena must grow by
//!   64 MiB or more, it first takes chunks that are wholly free elsewhere
//!   (free for the growing stream: its own frees, or frees known complete)
//!   and maps their physical memory where it grows; the old addresses are
//!   unmapped once their frees are complete. So free memory scattered in
//!   whole chunks is no reason to ask the device for a large block's
//!   memory ([`ArenaOptions::moves`]). Smaller growths map new memory: the
//!   holes that moves leave in the address space cost them more than
//!   moving saves. On the recorded training steps of `benches/data`,
//!   replayed eight times over, the arena maps 1.01 to 1.02 times the live
//!   peak (ResNet-50 and GPT-2 small; GPT-2 1.07 without moves).
//! * **Stream order.** A block freed on stream S is reused by S at once.
//!   Another stream T reuses it once the free is known complete, or after
//!   T is made to wait for it on the device: when a stream finds nothing it
//!   can use, the arena records an event on each stream whose frees are not
//!   yet known complete and queries it at the next miss; and before T grows
//!   the arena it takes S's frees that such an event covers, if they would
//!   hold its request, by making T wait for the event (a device-side wait,
//!   as `cudaStreamWaitEvent`; [`ArenaOptions::stream_waits`] turns it
//!   off). When such frees lie scattered among live blocks, so that none
//!   of their windows holds a growth of 64 MiB or more, T waits for them
//!   all the same and moves their whole chunks where it grows, as it moves
//!   its own. The host never waits, and nothing synchronizes the device, on
//!   any path but [`VmmArena::trim`] and running out of memory.
//! * **Giving memory back.** A chunk whose bytes are all free, with every
//!   free complete, is *idle*. [`VmmArena::trim`] waits for every stream's
//!   frees (host waits on events, not on the device) and unmaps and
//!   releases idle chunks; the memory goes back to the device and can back
//!   any later growth of any stream. After the recorded programs of
//!   `benches/data` freed their models, a trim left 66, 74 and 154 MiB
//!   mapped for their 65, 65 and 130 MiB still live (the libraries'
//!   workspaces). With
//!   [`ArenaOptions::release_threshold`] the arena also gives back idle
//!   chunks above that many bytes before it grows.
//! * **Out of memory.** Before refusing, the arena turns completed frees
//!   into reusable memory, gives back idle chunks, waits for every
//!   stream's pending frees and gives back again, retrying after each
//!   step. The refusal is [`Error::OutOfMemory`](crate::Error::OutOfMemory) with the arena's
//!   [`ArenaStats`] in `arena`.
//! * **The per-thread default stream** (`cudaStreamPerThread`, which names
//!   another stream on every thread) is never one of the arena's streams:
//!   the arena keys frees by stream and records its fences from whichever
//!   thread allocates. Allocations on it come from the device's pool. An
//!   arena block freed on it is marked there by an event recorded at the
//!   free, on the freeing thread; a stream of the arena's own waits for
//!   that event on the device and the block is freed on that stream. Such
//!   a free while the per-thread stream captures is refused
//!   ([`Error::Capture`](crate::Error::Capture); nothing is freed): free it
//!   on its own stream, or after the capture.
//! * **The legacy default stream** (null, or `0x1`) is one arena stream per
//!   device; its fences are recorded and waited for with that device made
//!   current.
//! * **Capture.** An allocation on a capturing stream is graph memory from
//!   the device's default pool (the vendor's graph-memory path, as for a
//!   pool); an arena block freed during a capture is freed once the graph
//!   and its executables are gone. The arena records its events on a
//!   stream only after asking whether it captures (a capturing stream is
//!   skipped), and does so from whichever thread allocates: as for the
//!   cache tier's recovery from out of memory, a capture of one of its
//!   streams should not begin while another thread allocates from the
//!   arena (if one does begin in between, the event may become a node of
//!   the graph: the arena asks again after the record, and a capture seen
//!   then makes the event count as the graph's, never complete and never
//!   waited for by another stream, until it is recorded again).
//! * **Failed virtual-memory calls.** A map whose access grant fails is
//!   unmapped again; if that unmap fails too, the mapping is kept in the
//!   books (nothing maps over it, its memory is not released while mapped)
//!   and unmapped at a later growth or trim.
//! * **NCCL and IPC.** Chunks are made shareable as POSIX file descriptors
//!   (and GPUDirect-RDMA-capable where the device says so), so the vendor
//!   can name the physical allocation behind any arena address
//!   (`cuMemRetainAllocationHandle`), which NCCL's buffer registration
//!   needs. [`VmmArena::segments`] lists the mapped chunks; each is one
//!   physical allocation starting on the device's recommended granularity.
//!   A block may span several adjacent chunks: register every segment it
//!   touches.
//!
//! # Address space
//!
//! One reservation per arena, twice the device's memory by default
//! ([`ArenaOptions::reserve_bytes`]); more is reserved only when no hole of
//! the reservations can hold a block, up to [`ArenaOptions::max_reserved`]
//! (eight times the device's memory by default). Neither depends on the
//! number of streams.
//!
//! ```no_run
//! use std::sync::Arc;
//! use somalloc::{ArenaOptions, Device, DeviceBuffer, MemoryResource, Stream, VmmArena};
//! # fn main() -> somalloc::Result<()> {
//! let device = Device::get(0)?;
//! let arena = Arc::new(VmmArena::new(&device, ArenaOptions::default())?);
//! let stream = Stream::new(&device)?;
//! let buf = DeviceBuffer::<f32>::new_with(1 << 20, &arena, &stream)?;
//! drop(buf);
//! stream.synchronize()?;
//! arena.trim(0); // give every idle chunk back to the device
//! println!("{}", arena.stats());
//! # Ok(()) }
//! ```

mod book;
mod choice;
mod core;
mod device;
mod figures;
mod front;
mod growth;
mod handover;
mod index;
mod mapping;
mod moves;
mod phys;

#[cfg(test)]
mod book_check_tests;
#[cfg(test)]
mod cost_tests;
#[cfg(test)]
mod fake;
#[cfg(test)]
mod growth_tests;
#[cfg(test)]
mod replay_tests;
#[cfg(test)]
mod soundness_tests;
#[cfg(test)]
mod tests;

pub use crate::pool_stats::ArenaStats;

pub use self::device::VmmArena;

/// How a [`VmmArena`] grows and gives memory back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArenaOptions {
    pub(crate) chunk_bytes: usize,
    pub(crate) release_threshold: Option<usize>,
    pub(crate) max_mapped: Option<usize>,
    pub(crate) reserve_bytes: Option<usize>,
    pub(crate) max_reserved: usize,
    /// Set from the runtime's known faults: idle chunks are never given
    /// back (releasing would not free the memory).
    pub(crate) keep_chunks: bool,
    /// Set from the runtime's known faults: the least one growth maps (0:
    /// one granule).
    pub(crate) min_grow: usize,
    /// Growth moves wholly free chunks before it makes memory (see
    /// [`ArenaOptions::moves`]).
    pub(crate) moves: bool,
    /// The least growth that moves chunks (see `Arena::grow`).
    pub(crate) move_min: usize,
    /// Every block within one chunk (see [`ArenaOptions::whole_blocks`]).
    pub(crate) whole_blocks: bool,
    /// Growth first takes other streams' frees by a device wait (see
    /// [`ArenaOptions::stream_waits`]).
    pub(crate) stream_waits: bool,
}

impl Default for ArenaOptions {
    fn default() -> Self {
        ArenaOptions {
            chunk_bytes: 20 << 20,
            release_threshold: None,
            max_mapped: None,
            reserve_bytes: None,
            max_reserved: usize::MAX,
            keep_chunks: false,
            min_grow: 0,
            moves: true,
            move_min: 64 << 20,
            whole_blocks: false,
            stream_waits: true,
        }
    }
}

impl ArenaOptions {
    /// The most a large chunk holds (rounded up to the device's
    /// granularity; 20 MiB by default). Making and mapping a chunk costs
    /// the same whatever its size (about 51 µs on an H200, 2 MiB or 20
    /// MiB alike), so larger chunks make growth cheaper; but a chunk is
    /// given back only when all of it is free, so smaller chunks give
    /// memory back sooner.
    pub fn chunk_bytes(mut self, bytes: usize) -> Self {
        self.chunk_bytes = bytes;
        self
    }

    /// Idle bytes the arena keeps mapped when it grows: above them it gives
    /// idle chunks back first (`None`, the default: it keeps them all until
    /// [`VmmArena::trim`] or memory runs out).
    pub fn release_threshold(mut self, bytes: Option<usize>) -> Self {
        self.release_threshold = bytes;
        self
    }

    /// The most memory the arena maps (`None`, the default: no limit but
    /// the device's). Above it an allocation is refused, after the same
    /// recovery steps as when the device runs out.
    pub fn max_mapped(mut self, bytes: Option<usize>) -> Self {
        self.max_mapped = bytes;
        self
    }

    /// Address space reserved up front (`None`, the default: twice the
    /// device's memory).
    pub fn reserve_bytes(mut self, bytes: Option<usize>) -> Self {
        self.reserve_bytes = bytes;
        self
    }

    /// Whether growth first moves chunks that are wholly free elsewhere into
    /// the range it grows (mapping their memory there too, and unmapping
    /// the old addresses once their frees are complete) before it makes new
    /// memory: the arena then holds no more memory than its fragmentation
    /// at the granularity of chunks needs. On by default, for growths of
    /// 64 MiB or more; a move costs a map and, later, an unmap, no more
    /// than making a chunk.
    pub fn moves(mut self, on: bool) -> Self {
        self.moves = on;
        self
    }

    /// Whether every block lies within one chunk, that is one physical
    /// allocation of the vendor (off by default). NCCL before 2.29.2
    /// registers a buffer for zero-copy transfers only when one physical
    /// allocation holds all of it; with this on, the arena grows by one
    /// chunk of the block's size instead of extending free ranges or moving
    /// chunks, and places blocks only where one chunk holds them, which
    /// costs memory.
    pub fn whole_blocks(mut self, on: bool) -> Self {
        self.whole_blocks = on;
        self
    }

    /// Whether a stream that would grow the arena first takes another
    /// stream's frees by waiting for them on the device (on by default).
    /// When another stream's frees, not yet known complete, would hold the
    /// request, the allocating stream is made to wait (as
    /// `cudaStreamWaitEvent` / `hipStreamWaitEvent` do) for the event the
    /// arena recorded on that stream after them, and reuses them at once
    /// (in place, or, for a growth of 64 MiB or more with
    /// [`moves`](ArenaOptions::moves), by moving their whole chunks where
    /// it grows); the host never waits. This keeps programs that free on
    /// one stream and allocate on another from mapping memory for each
    /// stream's share, at the cost of that ordering between the streams; off, a
    /// stream reuses another's frees only once an event query finds them
    /// complete, and grows meanwhile. A capturing stream never waits
    /// (its allocations are graph memory anyway), and with
    /// [`whole_blocks`](ArenaOptions::whole_blocks) it is off.
    pub fn stream_waits(mut self, on: bool) -> Self {
        self.stream_waits = on;
        self
    }

    /// The most address space the arena ever reserves (the default, as
    /// [`VmmArena::new`] sets it: eight times the device's memory).
    pub fn max_reserved(mut self, bytes: usize) -> Self {
        self.max_reserved = bytes;
        self
    }
}

/// A mapped chunk of a [`VmmArena`] ([`VmmArena::segments`]): one physical
/// allocation at `address`, of `bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ArenaSegment {
    /// The device address of the chunk's first byte.
    pub address: usize,
    /// Its length.
    pub bytes: usize,
}
