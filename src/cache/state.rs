//! One stream's books, kept behind its lock: the free lists per size
//! class, the cached bytes and the credit leased for them, the counters,
//! and what keeps the cache alive for the buffers that point into it.

use std::collections::HashMap;
use std::sync::Arc;

use super::class::class_size;
use super::shared::BuildAddrHasher;
use super::shared::Shared;
use super::stream_cache::StreamCache;
use super::StreamCacheStats;

/// One stream's cache, behind its lock.
pub(super) struct State {
    /// Free blocks (addresses) per size class; the last pushed is reused
    /// first (the warmest).
    pub(super) bins: Vec<Vec<usize>>,
    pub(super) cached: usize,
    pub(super) blocks: usize,
    /// Bytes of the total cap leased to this stream; `cached <= credit`.
    pub(super) credit: usize,
    pub(super) live: usize,
    pub(super) live_high: usize,
    /// The tier dropped this cache (or `remove_stream`): pass everything
    /// through to upstream. Set in the same access that empties the bins
    /// and decides `self_keep`; from then on no block is handed out of a
    /// bin (a block whose upstream free failed may sit in one, waiting to
    /// be freed again by the cache's drop).
    pub(super) detached: bool,
    /// Blocks handed to buffers that hold no reference to this cache
    /// (`DeviceBuffer::new_with`): the cache stays alive until each is back.
    pub(super) pinned: usize,
    /// The tier's reference, kept by a detached cache while `pinned > 0`
    /// and given up (to be dropped outside the lock) when the last comes back.
    pub(super) self_keep: Option<Arc<StreamCache>>,
    pub(super) hits: u64,
    pub(super) reused_larger: u64,
    pub(super) misses: u64,
    pub(super) bypassed: u64,
    pub(super) spilled: u64,
    pub(super) released: u64,
    /// Live blocks handed out for a request of a smaller class
    /// (`reuse_larger`): address -> their class.
    pub(super) larger: HashMap<usize, usize, BuildAddrHasher>,
    /// Blocks allocated while the stream was capturing (graph memory) and
    /// not freed yet: address -> the size asked of the upstream.
    pub(super) captured: HashMap<usize, usize>,
    pub(super) captured_allocs: u64,
}

/// What a free did with the block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Put {
    Cached,
    /// Return it upstream.
    Spill,
    /// The total cap has no room left for this stream right now.
    NoCredit,
}

impl State {
    pub(super) fn new(classes: usize) -> State {
        State {
            bins: (0..classes).map(|_| Vec::new()).collect(),
            cached: 0,
            blocks: 0,
            credit: 0,
            live: 0,
            live_high: 0,
            detached: false,
            pinned: 0,
            self_keep: None,
            hits: 0,
            reused_larger: 0,
            misses: 0,
            bypassed: 0,
            spilled: 0,
            released: 0,
            larger: HashMap::default(),
            captured: HashMap::new(),
            captured_allocs: 0,
        }
    }

    /// The class of a live block freed with a request of class `idx`:
    /// `idx`, or the larger class it was handed out in (forgotten now).
    #[inline]
    pub(super) fn real_class(&mut self, addr: usize, idx: usize) -> usize {
        if self.larger.is_empty() {
            return idx;
        }
        self.larger.remove(&addr).unwrap_or(idx)
    }

    /// A cached block of a class above `idx` (up to `above` classes up),
    /// the smallest there is.
    pub(super) fn larger_cached(&self, idx: usize, above: usize) -> Option<usize> {
        let end = idx.saturating_add(above).min(self.bins.len().saturating_sub(1));
        (idx + 1..=end).find(|&j| self.bins.get(j).is_some_and(|b| !b.is_empty()))
    }

    /// A cached block of class `idx` for an allocation (a hit), if there is
    /// one: counted as live. A detached cache hands out none.
    #[inline]
    pub(super) fn take_hit(&mut self, idx: usize, size: usize) -> Option<usize> {
        if self.detached {
            return None;
        }
        let addr = self.bins.get_mut(idx)?.pop()?;
        self.cached -= size;
        self.blocks -= 1;
        self.hits += 1;
        self.live += size;
        self.live_high = self.live_high.max(self.live);
        Some(addr)
    }

    /// Caches a freed live block of class `idx` if it fits the credit
    /// already leased and the per-stream cap; `false` (nothing changed)
    /// otherwise, for `put` to decide.
    #[inline]
    pub(super) fn try_put_fast(&mut self, idx: usize, size: usize, addr: usize, cap: usize) -> bool {
        let (idx, size, larger) = match self.larger.is_empty() {
            true => (idx, size, false),
            false => match self.larger_class(addr) {
                Some(real) => (real, class_size(real), true),
                None => (idx, size, false),
            },
        };
        let cached = self.cached + size;
        if self.detached || cached > self.credit || cached > cap || !self.captured.is_empty() {
            return false;
        }
        let Some(bin) = self.bins.get_mut(idx) else {
            return false;
        };
        bin.push(addr);
        self.cached = cached;
        self.blocks += 1;
        self.live = self.live.saturating_sub(size);
        if larger {
            self.larger.remove(&addr);
        }
        true
    }

    /// The class a live block was handed out in, if larger than its
    /// request's (`reuse_larger`).
    #[cold]
    #[inline(never)]
    fn larger_class(&self, addr: usize) -> Option<usize> {
        self.larger.get(&addr).copied()
    }

    fn pop(&mut self, idx: usize) -> Option<usize> {
        let addr = self.bins.get_mut(idx)?.pop()?;
        // Never below zero: `cached` and `blocks` count exactly the bins.
        self.cached = self.cached.saturating_sub(class_size(idx));
        self.blocks = self.blocks.saturating_sub(1);
        Some(addr)
    }

    /// Puts a block into its bin; `false` (nothing changed) for a class the
    /// table does not have.
    fn push(&mut self, idx: usize, addr: usize) -> bool {
        let Some(bin) = self.bins.get_mut(idx) else {
            return false;
        };
        bin.push(addr);
        self.cached += class_size(idx);
        self.blocks += 1;
        true
    }

    /// The largest class with a cached block.
    fn largest(&self) -> Option<usize> {
        self.bins.iter().rposition(|b| !b.is_empty())
    }

    /// Takes cached blocks, largest first, until at most `keep` bytes stay.
    pub(super) fn take_down_to(&mut self, keep: usize, out: &mut Vec<(usize, usize)>) {
        while self.cached > keep {
            let Some(idx) = self.largest() else { break };
            let Some(addr) = self.pop(idx) else { break };
            out.push((addr, class_size(idx)));
            self.released += 1;
        }
    }

    /// Puts blocks back into their bins after their upstream free failed
    /// (they were taken out by `take_down_to`), leasing the credit they need
    /// even beyond the total cap: they are still this stream's, and a later
    /// release tries them again.
    pub(super) fn restore(&mut self, blocks: &[(usize, usize)], shared: &Shared) {
        for &(addr, size) in blocks {
            if self.push(super::class::class_index(size), addr) {
                self.released = self.released.saturating_sub(1);
            }
        }
        if self.cached > self.credit {
            shared.lease_over_cap(self.cached - self.credit);
            self.credit = self.cached;
        }
    }

    /// Gives back leased credit beyond `cached + keep_slack`.
    pub(super) fn return_slack(&mut self, shared: &Shared, keep_slack: usize) {
        let keep = self.cached.saturating_add(keep_slack);
        if self.credit > keep {
            shared.give_back(self.credit - keep);
            self.credit = keep;
        }
    }

    /// Leases credit until `cached` bytes are covered.
    fn cover(&mut self, cached: usize, shared: &Shared) -> bool {
        if cached <= self.credit {
            return true;
        }
        let need = cached - self.credit;
        let rounded = need.div_ceil(shared.granule).saturating_mul(shared.granule);
        for amount in [rounded, need] {
            if shared.lease(amount) {
                self.credit += amount;
                return true;
            }
        }
        false
    }

    /// Caches a freed block if the caps allow.
    pub(super) fn put(&mut self, idx: usize, size: usize, addr: usize, shared: &Shared) -> Put {
        if self.detached {
            return Put::Spill;
        }
        let Some(cached) = self.cached.checked_add(size) else {
            return Put::Spill;
        };
        if cached > shared.config.per_stream_cap {
            return Put::Spill;
        }
        if !self.cover(cached, shared) {
            return Put::NoCredit;
        }
        if self.push(idx, addr) {
            Put::Cached
        } else {
            Put::Spill
        }
    }

    pub(super) fn stats(&self, stream: usize) -> StreamCacheStats {
        StreamCacheStats {
            stream,
            cached_bytes: self.cached,
            cached_blocks: self.blocks,
            credit_bytes: self.credit,
            live_bytes: self.live,
            live_peak: self.live_high,
            hits: self.hits,
            reused_larger: self.reused_larger,
            misses: self.misses,
            bypassed: self.bypassed,
            spilled: self.spilled,
            released: self.released,
            captured: self.captured_allocs,
            captured_live: self.captured.len(),
        }
    }
}
