//! The stream cache tier: per-stream free lists in front of any resource.
//!
//! The vendor pool costs a driver call (and, across threads, the driver's
//! lock) for every allocation and every free. But a block freed on stream
//! `S` may be handed to a later allocation on `S` with no call at all: later
//! work on `S` is ordered after earlier work on `S`. [`CacheTier`] keeps such
//! blocks, per stream and per size class, and hands them out again.
//!
//! ```no_run
//! use std::sync::Arc;
//! use somalloc::{CacheConfig, CacheTier, Device, DeviceBuffer, MemPool, MemoryResource, Stream};
//!
//! # fn main() -> somalloc::Result<()> {
//! let dev = Device::get(0)?;
//! let pool = MemPool::default_for(&dev)?;
//! let tier = CacheTier::new(Arc::new(pool), CacheConfig::default())?;
//! let stream = Stream::new(&dev)?;
//! let res: Arc<dyn MemoryResource> = tier.for_stream(&stream)?; // once per stream
//! for _ in 0..1000 {
//!     let buf = DeviceBuffer::<f32>::new_with(1 << 20, &res, &stream)?; // a hit after the first
//!     drop(buf); // back into `stream`'s cache, no driver call
//! }
//! println!("{}", tier.stats());
//! tier.flush()?; // everything cached goes back to the pool (stream-ordered frees)
//! # Ok(()) }
//! ```
//!
//! # The hot path
//!
//! Each stream has its own [`StreamCache`] (from [`CacheTier::for_stream`]),
//! a separate heap object aligned to its own cache lines, with its own
//! lock. A hit is the stream check, the capture check (two relaxed loads
//! for an owned stream), the size class, the lock, a pop from the class's
//! free list and a few counters; a cached free pushes the block back the
//! same way. What makes it cheap:
//!
//! * **A lock biased to its thread.** A stream is nearly always driven by
//!   one thread, so the thread that has taken a stream's lock 16 times in
//!   a row becomes its owner and from then on enters and leaves with plain
//!   stores and a compiler fence: no atomic read-modify-write, which would
//!   drain the store buffer and cost more than the rest of the hit. Another
//!   thread that needs the stream takes the ownership away, paying for both
//!   sides with a process-wide memory barrier (Linux `membarrier`, a few
//!   microseconds), and each take-away makes the next grant four times
//!   harder to earn, so threads that take turns on a stream soon all use
//!   the plain spin lock (one compare-and-swap). Where the OS has no such
//!   barrier, or with [`CacheConfig::thread_bias`] off, the lock is a plain
//!   spin lock.
//! * **Nothing shared is written.** Threads with streams of their own never
//!   touch a common cache line on a hit or a cached free. The shared parts
//!   are touched only on slow paths: the total cap's byte counter (a stream
//!   leases credit for its cached bytes in granules of `total_cap / 64`, at
//!   most 16 MiB, keeps it across hits, and gives back what exceeds two
//!   granules of slack on a miss, a trim or a flush; a stream that finds
//!   the cap used up takes back other streams' idle credit), and the
//!   registry of streams (registration, flush, trim, recovery from out of
//!   memory, reclaiming idle credit).
//! * **Buffers hold no reference count on their cache.** A
//!   [`DeviceBuffer`](crate::DeviceBuffer) made by
//!   [`new_with`](crate::DeviceBuffer::new_with) on a `StreamCache` does not
//!   clone the `Arc` of the cache nor of the stream: the cache counts the
//!   block as *pinned* (under the lock it takes anyway) and stays alive,
//!   with its stream, until the block comes back, even after the tier and
//!   every handle to it are gone. The buffer's drop is a static call.
//! * **Small answers on the fast paths.** The hit and the cached free answer
//!   with an `Option` or a `bool`; the misses, the caps and capture go
//!   through `#[cold]` functions.
//!
//! The README's Measured section gives the costs on a real device.
//!
//! # Size classes and waste
//!
//! Requests of `1..=max_block_bytes` bytes are rounded up to a size class
//! and the class size is what the upstream resource allocates, so a cached
//! block serves any request of its class. Classes start at 256 bytes and
//! have 8 steps per power of two: 256, 288, 320, …, 480, 512, 576, …. A
//! request of `b ≥ 256` bytes gets a block of less than `b × 9/8`
//! ([`CacheTier::block_size`]), i.e. at most 12.5 % waste (about 4.5 % on
//! average for log-uniform sizes); smaller requests get 256 bytes. Requests
//! above `max_block_bytes` go straight to the upstream resource, unrounded
//! and uncached.
//!
//! # Caps, the footprint budget, and the footprint guard
//!
//! * On a free, a block goes back to the upstream resource (a stream-ordered
//!   free on its stream) instead of into the cache when keeping it would put
//!   the stream's cached bytes above `per_stream_cap` (default 256 MiB), or
//!   the total cached bytes of all streams above `total_cap` (default
//!   1 GiB). Cached bytes are never above either cap.
//! * The footprint budget ([`CacheConfig::reuse_larger`], on by default):
//!   when a miss would take the stream's footprint (live + cached bytes)
//!   above its highest live bytes so far plus a headroom (12.5 % of that
//!   peak), the miss takes a cached block of
//!   up to twice its class size (the next eight classes), if there is one,
//!   instead of asking the upstream. The block keeps its size: its free
//!   puts it back in its own class (the cache remembers which blocks are
//!   out in a larger class), and the upstream sees it back in the size it
//!   handed out. Nothing is returned upstream for this, so the upstream
//!   sees fewer allocations and no extra frees, and a pool does not
//!   fragment on them. Allocations through the tier itself (the tier as
//!   the resource) never get a larger block.
//! * On an out-of-memory answer from upstream, the stream returns all its
//!   cached blocks and retries; then those of every other stream, and
//!   retries once more.
//! * The footprint guard ([`Headroom`] in [`CacheConfig::headroom`], off by
//!   default): on a miss, when the stream's live bytes plus its cached
//!   bytes would exceed its highest live bytes so far plus the headroom,
//!   the stream first returns cached blocks (largest first) to the
//!   upstream, on its own stream, so that what it holds from the upstream
//!   (live + cached) stays within its live peak (in class sizes) plus the
//!   headroom. The model test gives 1.08 × the requested peak on the churn
//!   workload. But the CUDA pool does not reuse blocks returned in one size
//!   for requests of another size well: on a real device the guard made
//!   the pool's reserved peak on the churn workload larger than without it,
//!   and larger than the raw pool's. Hence off unless the upstream reuses
//!   freed memory well; the footprint budget above keeps the footprint down
//!   without those frees.
//!
//! On the churn workload (up to 1000 live buffers of 2^U(8,22) bytes, one
//! stream) the default configuration serves nearly every allocation from
//! the cache, and the pool sees few frees, so it fragments less than under
//! the raw calls; its used bytes count the cached blocks too.
//!
//! [`CacheTier::flush`] and [`CacheTier::trim`] return cached blocks on
//! demand; dropping the tier returns everything (a [`StreamCache`] that a
//! buffer still holds is detached: its later frees go straight upstream).
//!
//! # Why a cached block is safe to reuse
//!
//! A block enters the cache of stream `S` only through
//! [`MemoryResource::deallocate`](crate::MemoryResource::deallocate) on `S`, whose contract is that every use
//! of the block, on any stream, is ordered before that point of `S`.
//! [`DeviceBuffer`](crate::DeviceBuffer)'s drop keeps it: before it calls
//! `deallocate` it makes `S` wait on an event recorded on every stream the
//! buffer was given to with `use_on`, so the uses on those streams that
//! were enqueued before the drop precede that point of `S`, and the uses on
//! `S` precede it by stream order. A later allocation on `S` that takes the
//! block from the cache enqueues its work on `S` after that point, hence
//! after every earlier use; a stream it is then given to waits on an event
//! recorded on `S` after the allocation, hence after them too. Work on
//! another stream `T` is not ordered after that point of `S`, so the cache
//! is keyed by stream: a [`StreamCache`] refuses (with
//! [`Error::InvalidArgument`](crate::Error::InvalidArgument)) an allocation or a free on any stream other
//! than its own, and never hands a block cached on `S` to `T`. Returning a
//! cached block upstream (flush, trim, caps, guard, recovery, drop) frees it
//! on `S`, after that same point.
//!
//! # Under stream capture
//!
//! While `S` is captured into a graph, an allocation on `S` records a graph
//! allocation node: the graph owns that memory and replays its work on it
//! later, again and again. A cached block handed into a capture would be
//! used by every replay of the graph while the cache (which saw it come
//! back at the captured free) hands it to ordinary allocations too; a
//! graph address taken into the cache would be handed out while the graph
//! owns it. So the cache stands aside while its stream captures:
//!
//! * an allocation goes to the upstream resource (a graph allocation node
//!   when the upstream is a pool), in its class size, and is counted in
//!   [`StreamCacheStats::captured`]; the block is remembered (in a small map
//!   looked at only while it is not empty), so that its free, during the
//!   capture or after it, goes back upstream and never into the cache;
//! * a free on the capturing stream goes upstream too (the pool defers the
//!   free of memory allocated outside the capture until the graph is gone;
//!   a [`DeviceBuffer`](crate::DeviceBuffer) defers it before it reaches
//!   the cache);
//! * flush, trim and out-of-memory recovery leave a capturing stream's
//!   cached blocks where they are (they are freed on a later call); dropping
//!   the tier or removing the stream hands them to the queue of frees that
//!   wait for the stream to leave its capture.
//!
//! Knowing that the stream captures costs two relaxed loads for an owned
//! stream while no capture is in progress (see
//! [Stream capture](crate::Stream#stream-capture)); a borrowed stream asks
//! the runtime on every allocation and free.
//!
//! # The files
//!
//! `class.rs` the size classes; `lock.rs` the per-stream lock (biased to
//! its thread) and `barrier.rs` the process-wide barrier it relies on;
//! `config.rs` and `stats.rs` the public settings and counters; `shared.rs`
//! what every stream of a tier sees (the upstream, the total cap's lease,
//! the registry); `state.rs` one stream's books; `stream_cache.rs` the
//! per-stream resource, `hot.rs` its allocation and free paths, and
//! `capture.rs` its paths under stream capture; `tier.rs` the tier.

use std::sync::{Mutex, MutexGuard};

mod barrier;
mod capture;
mod class;
mod config;
mod hot;
mod lock;
mod shared;
mod state;
mod stats;
mod stream_cache;
mod tier;

pub use config::{CacheConfig, Headroom};
pub use stats::{CacheStats, StreamCacheStats};
pub use stream_cache::StreamCache;
pub use tier::CacheTier;

#[cfg(test)]
use {
    crate::error::Error,
    crate::resource::MemoryResource,
    crate::stream::Stream,
    class::{class_index, class_size},
};

const MIB: usize = 1 << 20;
/// How many classes above its own a request may be served from under
/// `reuse_larger`: eight, one power of two (a block of at most twice the
/// request's class).
const LARGER_CLASSES: usize = 8;

/// A type that only this crate can name: the argument of
/// [`MemoryResource::stream_cache`](crate::MemoryResource), so that no
/// implementation outside the crate can override that method.
pub(crate) mod seal {
    /// See the module.
    #[derive(Clone, Copy, Debug)]
    pub struct Sealed(pub(crate) ());
}
pub(crate) use seal::Sealed;

/// Locks a mutex whether or not a panic poisoned it: no code here panics
/// while holding one, so the data is consistent either way.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests;
