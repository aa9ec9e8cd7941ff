//! One stream's cache: [`StreamCache`], the resource that serves one
//! stream's allocations and frees from its free lists.

use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

use super::hot::Ask;
use super::lock::{CachePadded, Guard, StreamLock};
use super::shared::Shared;
use super::state::State;
use super::{Sealed, StreamCacheStats};
use crate::device::Device;
use crate::error::{record_drop_error, Error, InvalidReason, Result};
use crate::resource::MemoryResource;
use crate::stream::{Asked, Stream};

/// The cache of one stream: a [`MemoryResource`] that serves allocations
/// and frees on that stream only. Get it from [`CacheTier::for_stream`](crate::CacheTier::for_stream) and
/// use it as the resource of [`DeviceBuffer::new_with`](crate::DeviceBuffer::new_with)
/// (or call it directly).
///
/// It is `Sync`: any thread may use it, through a lock of its own that is
/// uncontended when one thread at a time drives the stream. An allocation or
/// a free on another stream is refused with [`Error::InvalidArgument`] (and
/// such a free leaves the block allocated). It keeps its stream alive, and
/// it stays alive itself while a [`DeviceBuffer`](crate::DeviceBuffer) made
/// from it by `new_with` holds one of its blocks.
///
/// ```no_run
/// use std::sync::Arc;
/// use somalloc::{CacheConfig, CacheTier, Device, MemPool, MemoryResource, Stream};
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let tier = CacheTier::new(Arc::new(MemPool::default_for(&dev)?), CacheConfig::default())?;
/// let stream = Stream::new(&dev)?;
/// let cache = tier.for_stream(&stream)?;
/// let ptr = cache.allocate(1000, &stream)?; // a 1024-byte block from the pool
/// // SAFETY: from this cache, freed once, unused after this point of `stream`.
/// unsafe { cache.deallocate(ptr, 1000, &stream)? }; // into the cache
/// assert_eq!(cache.allocate(1000, &stream)?, ptr); // the same block, no driver call
/// # Ok(()) }
/// ```
pub struct StreamCache {
    pub(super) state: CachePadded<StreamLock<State>>,
    pub(super) stream: Stream,
    pub(super) key: usize,
    /// `config.max_block_bytes` and `config.per_stream_cap`, copied here
    /// to spare the hot path a look into `shared`.
    pub(super) max_block: usize,
    pub(super) cap: usize,
    /// The upstream hands out pinned host memory (its placement, read once).
    pinned_host: bool,
    pub(super) shared: Arc<Shared>,
}

impl fmt::Debug for StreamCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamCache")
            .field("stream", &format_args!("{:#x}", self.key))
            .field("stats", &self.stats())
            .finish()
    }
}

impl StreamCache {
    pub(super) fn new(stream: &Stream, shared: Arc<Shared>) -> StreamCache {
        let config = &shared.config;
        StreamCache {
            state: CachePadded(StreamLock::new(State::new(shared.classes), config.thread_bias)),
            stream: stream.clone(),
            key: stream.as_raw() as usize,
            max_block: config.max_block_bytes,
            cap: config.per_stream_cap,
            pinned_host: shared.upstream.placement().is_pinned_host(),
            shared,
        }
    }

    /// Whether this cache hands out pinned host memory (one load, for
    /// `DeviceBuffer::new_with`'s check).
    #[inline]
    pub(crate) fn serves_pinned_host(&self) -> bool {
        self.pinned_host
    }

    #[inline]
    pub(super) fn lock(&self) -> Guard<'_, State> {
        self.state.lock()
    }

    /// The stream this cache serves.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Bytes cached for this stream now.
    pub fn cached_bytes(&self) -> usize {
        self.lock().cached
    }

    /// This stream's counters.
    pub fn stats(&self) -> StreamCacheStats {
        self.lock().stats(self.key)
    }

    /// Returns every cached block of this stream to the upstream resource
    /// (stream-ordered frees on this stream). Does nothing while the stream
    /// is capturing (the frees would be recorded into the graph). Like any
    /// call that enqueues work on the stream, it must not run while another
    /// thread begins a capture of the stream: the capture is asked about
    /// once, before the frees, and a capture begun in between would record
    /// them.
    pub fn flush(&self) -> Result<()> {
        crate::trace::note(
            crate::trace::Action::Flush,
            self.stream.device().ordinal(),
            Some(&self.stream),
            0,
        );
        self.release_all().map(|_| ())
    }

    /// Returns cached blocks, largest first, until at most `bytes_to_keep`
    /// stay cached for this stream. Does nothing while the stream is
    /// capturing; as for [`flush`](StreamCache::flush), it must not run
    /// while another thread begins a capture of the stream.
    pub fn trim(&self, bytes_to_keep: usize) -> Result<()> {
        crate::trace::note(
            crate::trace::Action::Trim,
            self.stream.device().ordinal(),
            Some(&self.stream),
            bytes_to_keep,
        );
        if self.stream.capturing()?.is_some() {
            return Ok(());
        }
        let mut blocks = Vec::new();
        {
            let mut state = self.lock();
            state.take_down_to(bytes_to_keep, &mut blocks);
            state.return_slack(&self.shared, self.shared.granule);
        }
        // SAFETY: cached blocks of this stream (see `free_upstream`).
        unsafe { self.free_upstream(&blocks, Asked::answer(None)) }
    }

    /// Turns the cache into a pass-through (the tier lets go of it) and
    /// returns its cached blocks (see `let_go`). While buffers hold blocks
    /// of it without a reference, it keeps `self` (the tier's reference)
    /// until the last of them comes back.
    pub(super) fn detach(self: &Arc<Self>) -> Result<usize> {
        self.let_go(Some(self))
    }

    /// Detaches the cache and empties it, in one access: from then on no
    /// allocation gets a cached block, and every pinned block that a buffer
    /// holds is covered by `self_keep` (given `me`, the cache's own
    /// reference; `None` when it is being dropped, so nothing is pinned).
    /// The cached blocks are freed on the stream, or, while it captures or
    /// when that cannot be known, wait in the deferred-free queue until the
    /// stream leaves the capture. The bytes freed now.
    ///
    /// The stream is asked once whether it captures, before the access
    /// (nothing inside one calls the runtime), and that answer decides for
    /// every block; the frees are enqueued after the access, telling the
    /// upstream that the stream does not capture. So **a capture of this
    /// stream must not begin, on any thread, between this call's start and
    /// its return**: a capture begun before is seen (the blocks wait in the
    /// queue) and one begun after finds the frees already enqueued, but one
    /// begun in between receives them as if the stream did not capture:
    /// they go into the capture (recorded into its graph, or refused by the
    /// runtime) instead of waiting in the queue for it to end, and the
    /// cache counts them as returned. Neither asking under the lock nor
    /// asking again after it would close that window: beginning a capture
    /// takes no lock of the cache, so it can always come between the last
    /// question and the frees. It is the rule for every call that enqueues
    /// work on a stream (a program orders the beginning of a stream's
    /// capture with the work it enqueues there), and it reaches the program
    /// through this function's callers, which must not run on one thread
    /// while another begins a capture of this stream:
    /// [`CacheTier::remove_stream`](crate::CacheTier::remove_stream) and the
    /// tier's drop (through `detach`), and the drop of the cache's last
    /// reference (`Drop`: the last handle dropped after the tier let go of
    /// the cache, or a buffer's last block coming back to a detached one).
    fn let_go(&self, me: Option<&Arc<Self>>) -> Result<usize> {
        // Asked before the access: nothing inside one calls the runtime
        // (the window that leaves is the caller's to keep closed, above).
        let capturing = self.stream.capturing();
        let mut blocks = Vec::new();
        {
            let mut state = self.lock();
            state.detached = true;
            if let Some(me) = me {
                if state.pinned > 0 && state.self_keep.is_none() {
                    state.self_keep = Some(Arc::clone(me));
                }
            }
            state.take_down_to(0, &mut blocks);
            state.return_slack(&self.shared, 0);
        }
        #[cfg(test)]
        super::pause::point("cache: detached");
        match capturing {
            Ok(None) => {
                // SAFETY: cached blocks of this stream (see `free_upstream`).
                unsafe { self.free_upstream(&blocks, Asked::answer(None))? };
                Ok(blocks.iter().map(|b| b.1).sum())
            }
            Ok(Some(_)) => {
                self.park(blocks);
                Ok(0)
            }
            Err(e) => {
                self.park(blocks);
                Err(e)
            }
        }
    }

    /// Returns every cached block, with stream-ordered frees on this
    /// stream: the bytes returned. While the stream captures, the blocks
    /// stay and 0 is returned. Called for other streams by an allocation
    /// that ran out of memory: the rule of `let_go` (no capture of this
    /// stream may begin meanwhile) reaches programs through the crate
    /// docs' section on the cache tier under capture.
    pub(super) fn release_all(&self) -> Result<usize> {
        if self.stream.capturing()?.is_some() {
            return Ok(0);
        }
        let mut blocks = Vec::new();
        {
            let mut state = self.lock();
            state.take_down_to(0, &mut blocks);
            state.return_slack(&self.shared, 0);
        }
        // SAFETY: cached blocks of this stream (see `free_upstream`).
        unsafe { self.free_upstream(&blocks, Asked::answer(None))? };
        Ok(blocks.iter().map(|b| b.1).sum())
    }

    /// Frees blocks taken out of this cache through the upstream resource,
    /// on this stream (`asked`: what the caller knows about its capture);
    /// tries all and reports the first error. A block whose free failed
    /// goes back into its bin (over the caps if need be), so that a later
    /// flush, trim or the cache's drop tries it again: nothing is lost to a
    /// failed call.
    ///
    /// # Safety
    /// Each `(addr, size)` is a block that this cache took out of its bins
    /// (so it came from `upstream.allocate(size, stream)` and it is in no
    /// bin and no buffer any more).
    pub(super) unsafe fn free_upstream(&self, blocks: &[(usize, usize)], asked: Asked) -> Result<()> {
        let mut first_error = None;
        let mut kept = Vec::new();
        for &(addr, size) in blocks {
            // SAFETY: the block came from `upstream.allocate(size, stream)`
            // (the class size, on this stream); it entered the cache through
            // `deallocate` on this stream, whose caller ordered every use
            // before that point of the stream, and this free is enqueued
            // after that point; the caller took it out of the bins, so it is
            // freed once.
            let r = unsafe {
                self.shared
                    .upstream
                    .deallocate_asked(addr as *mut c_void, size, &self.stream, asked)
            };
            if let Err(e) = r {
                first_error.get_or_insert(e);
                kept.push((addr, size));
            }
        }
        if !kept.is_empty() {
            self.lock().restore(&kept, &self.shared);
        }
        first_error.map_or(Ok(()), Err)
    }

    #[inline]
    pub(super) fn check_stream(&self, stream: &Stream) -> Result<()> {
        if stream.as_raw() as usize != self.key {
            return Err(self.wrong_stream(stream));
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn wrong_stream(&self, stream: &Stream) -> Error {
        InvalidReason::WrongStream.error(format!(
            "the cache of stream {:#x} was used with stream {:#x}: \
             get that stream's cache from CacheTier::for_stream",
            self.key,
            stream.as_raw() as usize
        ))
    }

    /// A miss: upstream (`asked`: what the caller knows about the stream's
    /// capture), with recovery from out of memory.
    pub(super) fn allocate_upstream(&self, bytes: usize, size: usize, asked: Asked) -> Result<*mut c_void> {
        let upstream = &self.shared.upstream;
        let mut result = upstream.allocate_asked(size, &self.stream, asked);
        // Out of memory: first this stream's cached blocks (freed on this
        // stream, so the upstream can reuse them for this allocation at
        // once), then every other stream's; retry after each that freed any.
        for others in [false, true] {
            if !matches!(result, Err(Error::OutOfMemory { .. })) {
                break;
            }
            let freed = if others {
                self.shared.release_others(self.key)?
            } else {
                self.release_all()?
            };
            if freed > 0 {
                result = upstream.allocate_asked(size, &self.stream, asked);
            }
        }
        match result {
            Err(Error::OutOfMemory { stats, .. }) => Err(Error::OutOfMemory {
                requested: bytes,
                stats,
                arena: None,
            }),
            other => other,
        }
    }
}

// SAFETY: every block it hands out came from the upstream resource (a
// `MemoryResource`) on this stream and is handed out once: a cached block
// re-enters a bin only through `deallocate` on this stream, whose caller
// orders every use before that point, and leaves it for one allocation on
// the same stream (see "Why a cached block is safe to reuse" in the module
// docs). Under capture it passes allocations and frees through to the
// upstream and never caches a block allocated or freed during a capture.
unsafe impl MemoryResource for StreamCache {
    #[inline]
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<*mut c_void> {
        self.allocate_asked(bytes, stream, Asked::NOT_YET)
    }

    #[inline]
    unsafe fn deallocate(&self, ptr: *mut c_void, bytes: usize, stream: &Stream) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.deallocate_asked(ptr, bytes, stream, Asked::NOT_YET) }
    }

    #[inline]
    fn allocate_asked(&self, bytes: usize, stream: &Stream, asked: Asked) -> Result<*mut c_void> {
        match self.try_hit_asked(bytes, stream, false, asked) {
            Some(ptr) => Ok(ptr),
            None => self
                .take_slow(bytes, stream, Ask::PLAIN, asked)
                .map(|(ptr, _)| ptr),
        }
    }

    #[inline]
    unsafe fn deallocate_asked(
        &self,
        ptr: *mut c_void,
        bytes: usize,
        stream: &Stream,
        asked: Asked,
    ) -> Result<()> {
        if self.try_put(ptr, bytes, stream, false, asked) {
            return Ok(());
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.give_slow(ptr, bytes, stream, asked) }
    }

    fn device(&self) -> Device {
        self.shared.device
    }

    fn placement(&self) -> crate::Placement {
        self.shared.upstream.placement()
    }

    fn stream_cache(&self, _: Sealed) -> Option<&(dyn std::any::Any + Send + Sync)> {
        Some(self)
    }
}

impl Drop for StreamCache {
    fn drop(&mut self) {
        // Normally empty by now: the tier detached it when it let it go.
        record_drop_error(self.let_go(None).map(|_| ()));
    }
}
