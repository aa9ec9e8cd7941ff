//! The hot paths of a [`StreamCache`]: a hit and a cached free, then the
//! slow paths (misses, caps, capture) and the pinned blocks of buffers.
//!
//! A hit is: the stream check, the capture check (two relaxed loads for an
//! owned stream), the size class, the stream's lock (no atomic
//! read-modify-write for the thread that owns it, see `lock.rs`), a pop
//! from the class's free list and a few counters. The fast paths answer
//! with a plain `Option`/`bool` so that nothing as large as a `Result` is
//! moved around on a hit; everything else goes to the `#[cold]` paths.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use super::class::{class_index, class_size};
use super::state::Put;
use super::stream_cache::StreamCache;
use super::LARGER_CLASSES;
use crate::error::{record_drop_error, InvalidReason, Result};
use crate::stream::{Asked, Stream};

/// What an allocation may get beyond a block of its class.
#[derive(Clone, Copy)]
pub(super) struct Ask {
    /// Counted as pinned (a buffer holds no reference to the cache).
    pub(super) pin: bool,
    /// A larger cached block (`reuse_larger`).
    pub(super) larger: bool,
}

impl Ask {
    pub(super) const PLAIN: Ask = Ask {
        pin: false,
        larger: true,
    };
    pub(super) const PINNED: Ask = Ask {
        pin: true,
        larger: true,
    };
    /// Through the tier as a resource: it frees a block of a removed
    /// stream upstream in the class of its request, so the block must be
    /// of that class.
    pub(super) const TIER: Ask = Ask {
        pin: false,
        larger: false,
    };
}

impl StreamCache {
    /// A cached block for `bytes` on `stream`, if this is a plain
    /// cacheable request and one is there; `None`: take the slow path.
    /// With `pin`, the block is counted as pinned.
    #[inline(always)]
    pub(super) fn try_hit(&self, bytes: usize, stream: &Stream, pin: bool) -> Option<*mut c_void> {
        self.try_hit_asked(bytes, stream, pin, Asked::NOT_YET)
    }

    /// [`StreamCache::try_hit`] with what the caller knows about the
    /// stream's capture: a hit only where it is certainly not capturing.
    #[inline(always)]
    pub(super) fn try_hit_asked(
        &self,
        bytes: usize,
        stream: &Stream,
        pin: bool,
        asked: Asked,
    ) -> Option<*mut c_void> {
        if stream.as_raw() as usize != self.key
            || bytes == 0
            || bytes > self.max_block
            || !asked.quiet(&self.stream)
        {
            return None;
        }
        let idx = class_index(bytes);
        let mut state = self.lock();
        // `take_hit` refuses a detached cache, so a block is pinned only on
        // an attached one: detaching then covers it with `self_keep`, in
        // the same access that marks the cache detached. The credit stays:
        // the next free reuses it without touching the shared counter;
        // other streams take idle credit back when they need it
        // (`reclaim_slack`).
        let addr = state.take_hit(idx, class_size(idx))?;
        state.pinned += usize::from(pin);
        Some(addr as *mut c_void)
    }

    /// An allocation on this cache's stream, for a buffer that holds no
    /// reference to the cache: the block is counted as pinned unless the
    /// cache is detached (the answer's `bool`), and the cache then stays
    /// alive until it comes back through [`StreamCache::free_pinned`].
    /// `asked`: what the caller knows about the stream's capture.
    #[inline(always)]
    pub(crate) fn take_pinned(
        &self,
        bytes: usize,
        stream: &Stream,
        asked: Asked,
    ) -> Result<(*mut c_void, bool)> {
        match self.try_hit_asked(bytes, stream, true, asked) {
            Some(ptr) => Ok((ptr, true)),
            None => self.take_slow(bytes, stream, Ask::PINNED, asked),
        }
    }

    /// Caches a freed block if this is a plain cacheable free that fits
    /// the leased credit and the cap; `false`: take the slow path (nothing
    /// changed). With `unpin`, the block was counted as pinned.
    /// `asked`: what the caller knows about the stream's capture.
    #[inline(always)]
    pub(super) fn try_put(
        &self,
        ptr: *mut c_void,
        bytes: usize,
        stream: &Stream,
        unpin: bool,
        asked: Asked,
    ) -> bool {
        if stream.as_raw() as usize != self.key || !asked.quiet(&self.stream) {
            return false;
        }
        self.try_put_here(ptr, bytes, unpin)
    }

    /// `try_put` for a free known to be on this cache's stream, which
    /// somalloc does not consider capturing.
    #[inline(always)]
    fn try_put_here(&self, ptr: *mut c_void, bytes: usize, unpin: bool) -> bool {
        if bytes == 0 || bytes > self.max_block {
            return false;
        }
        let idx = class_index(bytes);
        let mut state = self.lock();
        if !state.try_put_fast(idx, class_size(idx), ptr as usize, self.cap) {
            return false;
        }
        // Attached (a detached cache takes no block): nothing to give up.
        // A pinned block is counted, so this never goes below zero.
        state.pinned = state.pinned.saturating_sub(usize::from(unpin));
        true
    }

    /// The free of a block handed out by [`StreamCache::take_pinned`], on
    /// `stream`, this cache's own handle (the buffer's copy of it), with
    /// what the caller knows about its capture: when the caller has just
    /// found that it is not capturing, the fast path skips the stream and
    /// capture checks, and the slow path asks nothing either.
    ///
    /// # Safety
    /// `cache` is the cache that pinned the block (alive, since the block
    /// is counted); otherwise as for [`MemoryResource::deallocate`](crate::MemoryResource::deallocate). The
    /// cache may be gone when this returns.
    #[inline(always)]
    pub(crate) unsafe fn free_pinned(
        cache: NonNull<StreamCache>,
        ptr: *mut c_void,
        bytes: usize,
        stream: &Stream,
        asked: Asked,
    ) -> Result<()> {
        // SAFETY: the pinned block keeps the cache alive until it is
        // counted back, which is the last thing done with the reference.
        let this = unsafe { cache.as_ref() };
        if asked.quiet(&this.stream) && this.try_put_here(ptr, bytes, true) {
            return Ok(());
        }
        // SAFETY: forwarded.
        unsafe { Self::free_pinned_slow(cache, ptr, bytes, stream, asked) }
    }

    /// # Safety
    /// As for [`StreamCache::free_pinned`].
    #[cold]
    #[inline(never)]
    unsafe fn free_pinned_slow(
        cache: NonNull<StreamCache>,
        ptr: *mut c_void,
        bytes: usize,
        stream: &Stream,
        asked: Asked,
    ) -> Result<()> {
        let (result, keep) = {
            // SAFETY: as in `free_pinned`; the reference is not used after
            // this block.
            let this = unsafe { cache.as_ref() };
            // SAFETY: forwarded from the caller.
            let result = unsafe { this.give_slow(ptr, bytes, stream, asked) };
            // A failed free did nothing (see `give_slow`): the block stays
            // pinned, for the caller to try again or to give up on it
            // (`forget_pinned`).
            let keep = if result.is_ok() { this.unpin_one() } else { None };
            (result, keep)
        };
        // Maybe the cache's last reference: dropped only now that nothing
        // refers into it.
        drop(keep);
        result
    }

    /// Gives up on a pinned block whose free failed and will not be tried
    /// again (its buffer is gone): the cache stops counting it as live and
    /// as pinned, so that it is not kept alive for it. The memory stays
    /// allocated upstream (leaked; the failure was reported).
    ///
    /// # Safety
    /// As for [`StreamCache::free_pinned`]: `cache` pinned the block, which
    /// is counted; `ptr` and `bytes` are the block's.
    #[cold]
    pub(crate) unsafe fn forget_pinned(cache: NonNull<StreamCache>, ptr: *mut c_void, bytes: usize) {
        let keep = {
            // SAFETY: as in `free_pinned`; not used after this block.
            let this = unsafe { cache.as_ref() };
            let addr = ptr as usize;
            // Graph memory this cache handed out before its stream was
            // removed is in the tier's record (no stream lock held here).
            let detached = this.lock().detached;
            if !detached || this.shared.take_removed_capture(this.key, addr).is_none() {
                let mut state = this.lock();
                if state.captured.remove(&addr).is_none() {
                    if let Some(idx) = this.shared.class_of(bytes) {
                        let size = class_size(state.real_class(addr, idx));
                        state.live = state.live.saturating_sub(size);
                    }
                }
            }
            this.unpin_one()
        };
        drop(keep);
    }

    /// Counts a pinned block back; the tier's reference when it was the
    /// last of a detached cache (to be dropped by the caller, after its
    /// last use of the cache).
    fn unpin_one(&self) -> Option<Arc<StreamCache>> {
        let mut state = self.lock();
        state.pinned = state.pinned.saturating_sub(1);
        if state.pinned == 0 {
            state.self_keep.take()
        } else {
            None
        }
    }

    /// Counts a block handed out past the bins as pinned, unless the cache
    /// is detached (`false`).
    fn pin_one(&self) -> bool {
        let mut state = self.lock();
        if state.detached {
            return false;
        }
        state.pinned += 1;
        true
    }

    /// An allocation that is not a hit: another stream (refused), 0 bytes,
    /// above the classes, a stream that may be capturing, or a miss.
    /// `asked`: what the caller knows about the stream's capture.
    #[cold]
    #[inline(never)]
    pub(super) fn take_slow(
        &self,
        bytes: usize,
        stream: &Stream,
        ask: Ask,
        asked: Asked,
    ) -> Result<(*mut c_void, bool)> {
        let pin = ask.pin;
        self.check_stream(stream)?;
        if bytes == 0 {
            return Err(InvalidReason::ZeroBytes.error("0-byte allocation from a stream cache"));
        }
        // The allocation's question, unless the caller asked already (then
        // the answer goes upstream with the request).
        let capture = asked.capturing(&self.stream)?;
        let asked = Asked::answer(capture);
        let ptr = if capture.is_some() {
            self.allocate_captured(bytes, asked)?
        } else if let Some(idx) = self.shared.class_of(bytes) {
            let size = class_size(idx);
            {
                let mut state = self.lock();
                if let Some(addr) = state.take_hit(idx, size) {
                    state.pinned += usize::from(pin);
                    return Ok((addr as *mut c_void, pin));
                }
            }
            return self.miss(bytes, idx, ask, asked);
        } else {
            let ptr = self.shared.upstream.allocate_asked(bytes, &self.stream, asked)?;
            self.lock().bypassed += 1;
            ptr
        };
        Ok((ptr, pin && self.pin_one()))
    }

    /// A cacheable request that found no block of its class: a larger
    /// cached block when the footprint is over its budget
    /// (`reuse_larger`), else the upstream.
    fn miss(&self, bytes: usize, idx: usize, ask: Ask, asked: Asked) -> Result<(*mut c_void, bool)> {
        let pin = ask.pin;
        let shared = &*self.shared;
        let size = class_size(idx);
        let mut victims = Vec::new();
        {
            let mut state = self.lock();
            if let (Some(budget), true, false) = (shared.config.reuse_larger, ask.larger, state.detached) {
                let want = state.live + size;
                let peak = state.live_high.max(want);
                if want + state.cached > peak.saturating_add(budget.above(peak)) {
                    if let Some(real) = state.larger_cached(idx, LARGER_CLASSES) {
                        if let Some(addr) = state.take_hit(real, class_size(real)) {
                            state.reused_larger += 1;
                            state.larger.insert(addr, real);
                            state.pinned += usize::from(pin);
                            return Ok((addr as *mut c_void, pin));
                        }
                    }
                }
            }
            if !state.detached {
                state.misses += 1;
                // A miss costs an upstream call anyway: give back slack
                // beyond two granules here rather than on hits.
                if state.credit.saturating_sub(state.cached) > 2 * shared.granule {
                    state.return_slack(shared, shared.granule);
                }
                if let Some(headroom) = shared.config.headroom {
                    let want = state.live + size;
                    let peak = state.live_high.max(want);
                    let budget = peak.saturating_add(headroom.above(peak));
                    let keep = budget.saturating_sub(want);
                    state.take_down_to(keep, &mut victims);
                    if !victims.is_empty() {
                        state.return_slack(shared, shared.granule);
                    }
                }
            }
        }
        // SAFETY: blocks taken out of this stream's bins just above. Their
        // failed frees leave them cached (tried again later) and do not fail
        // this allocation; the error is counted as a background one.
        record_drop_error(unsafe { self.free_upstream(&victims, asked) });
        let ptr = self.allocate_upstream(bytes, size, asked)?;
        let mut state = self.lock();
        state.live += size;
        state.live_high = state.live_high.max(state.live);
        let pinned = pin && !state.detached;
        state.pinned += usize::from(pinned);
        Ok((ptr, pinned))
    }

    /// A free that is not a plain cached one: another stream (refused), 0
    /// bytes, above the classes, a stream that may be capturing, a block of
    /// a capture, or one the caps or the credit do not let in. `asked`:
    /// what the caller knows about the stream's capture.
    ///
    /// An error means that nothing was done: the block is still the
    /// caller's, and the books are as before (the caller may try again, or
    /// give the block up).
    ///
    /// # Safety
    /// As for [`MemoryResource::deallocate`](crate::MemoryResource::deallocate).
    #[cold]
    #[inline(never)]
    pub(super) unsafe fn give_slow(
        &self,
        ptr: *mut c_void,
        bytes: usize,
        stream: &Stream,
        asked: Asked,
    ) -> Result<()> {
        self.check_stream(stream)?;
        if bytes == 0 {
            return Err(InvalidReason::ZeroBytes.error("0-byte free to a stream cache"));
        }
        // The free's question, unless the caller asked already (then the
        // answer goes upstream with the free).
        let capture = asked.capturing(&self.stream)?;
        let asked = Asked::answer(capture);
        let shared = &*self.shared;
        let addr = ptr as usize;
        if self.lock().detached {
            if let Some(size) = shared.take_removed_capture(self.key, addr) {
                // Graph memory this cache handed out before its stream was
                // removed: upstream (never cached), in the size asked.
                // SAFETY: allocated upstream in `size` on this stream (see
                // `allocate_captured`); the caller's guarantees carry over.
                let r = unsafe { shared.upstream.deallocate_asked(ptr, size, &self.stream, asked) };
                if r.is_err() {
                    shared.return_removed_capture(self.key, addr, size);
                }
                return r;
            }
        }
        if capture.is_some() {
            // SAFETY: forwarded from the caller.
            return unsafe { self.deallocate_captured(ptr, bytes, asked) };
        }
        let Some(idx) = shared.class_of(bytes) else {
            // A block allocated during a capture is not remembered any more.
            let was = self.lock().captured.remove(&addr);
            // SAFETY: a request above max_block_bytes went to
            // `upstream.allocate(bytes, stream)` unrounded; the caller's
            // guarantees (freed once, uses ordered before this point of this
            // stream) carry over.
            let r = unsafe { shared.upstream.deallocate_asked(ptr, bytes, &self.stream, asked) };
            if let (Err(_), Some(size)) = (&r, was) {
                self.lock().captured.insert(addr, size);
            }
            return r;
        };
        let (mut put, idx, size, first) = {
            let mut state = self.lock();
            let was = if state.captured.is_empty() {
                None
            } else {
                state.captured.remove(&addr)
            };
            if let Some(was) = was {
                // Graph memory from a capture: upstream, never cached.
                drop(state);
                // SAFETY: allocated upstream in its class size (see
                // `allocate_captured`); the caller's guarantees carry over.
                let r = unsafe {
                    shared
                        .upstream
                        .deallocate_asked(ptr, class_size(idx), &self.stream, asked)
                };
                if r.is_err() {
                    // Still graph memory, for a later attempt.
                    self.lock().captured.insert(addr, was);
                }
                return r;
            }
            // The class the block was handed out in (larger, if it was).
            let first = idx;
            let idx = state.real_class(addr, idx);
            let size = class_size(idx);
            state.live = state.live.saturating_sub(size);
            (state.put(idx, size, addr, shared), idx, size, first)
        };
        if put == Put::NoCredit {
            shared.reclaim_slack(self.key);
            let mut state = self.lock();
            put = match state.put(idx, size, addr, shared) {
                Put::NoCredit => Put::Spill,
                other => other,
            };
        }
        if put == Put::Cached {
            return Ok(());
        }
        self.lock().spilled += 1;
        // SAFETY: the block came from `upstream.allocate(size, stream)` (its
        // class, remembered if larger than `bytes`'); the caller frees it once and
        // ordered every use before this point of this stream; it was not
        // cached.
        let r = unsafe { shared.upstream.deallocate_asked(ptr, size, &self.stream, asked) };
        if r.is_err() {
            // Nothing was freed: the books as they were.
            let mut state = self.lock();
            state.spilled -= 1;
            state.live += size;
            if idx != first {
                state.larger.insert(addr, idx);
            }
        }
        r
    }
}
