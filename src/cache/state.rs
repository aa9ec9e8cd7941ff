//! One stream's books, kept behind its lock: the free lists per size
//! class, the cached bytes and the credit leased for them, the counters.

use std::collections::HashMap;

use super::class::class_size;
use super::shared::Shared;
use super::StreamCacheStats;

/// One stream's cache, behind its lock.
pub(super) struct State {
    /// Free blocks (addresses) per size class; the last pushed is reused
    /// first (the warmest).
    pub(super) bins: Vec<Vec<usize>>,
    /// One bit per class: its bin is not empty.
    pub(super) nonempty: Vec<u64>,
    pub(super) cached: usize,
    pub(super) blocks: usize,
    /// Bytes of the total cap leased to this stream; `cached <= credit`.
    pub(super) credit: usize,
    pub(super) live: usize,
    pub(super) live_high: usize,
    /// The tier dropped this cache (or `remove_stream`): pass everything
    /// through to upstream.
    pub(super) detached: bool,
    pub(super) hits: u64,
    pub(super) misses: u64,
    pub(super) bypassed: u64,
    pub(super) spilled: u64,
    pub(super) released: u64,
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
            nonempty: vec![0; classes.div_ceil(64)],
            cached: 0,
            blocks: 0,
            credit: 0,
            live: 0,
            live_high: 0,
            detached: false,
            hits: 0,
            misses: 0,
            bypassed: 0,
            spilled: 0,
            released: 0,
            captured: HashMap::new(),
            captured_allocs: 0,
        }
    }

    pub(super) fn pop(&mut self, idx: usize) -> Option<usize> {
        let bin = self.bins.get_mut(idx)?;
        let addr = bin.pop()?;
        if bin.is_empty() {
            if let Some(word) = self.nonempty.get_mut(idx / 64) {
                *word &= !(1u64 << (idx % 64));
            }
        }
        // Never below zero: `cached` and `blocks` count exactly the bins.
        self.cached = self.cached.saturating_sub(class_size(idx));
        self.blocks = self.blocks.saturating_sub(1);
        Some(addr)
    }

    /// Puts a block into its bin; `false` (nothing changed) for a class the
    /// table does not have.
    pub(super) fn push(&mut self, idx: usize, addr: usize) -> bool {
        let (Some(bin), Some(word)) = (self.bins.get_mut(idx), self.nonempty.get_mut(idx / 64)) else {
            return false;
        };
        bin.push(addr);
        *word |= 1u64 << (idx % 64);
        self.cached += class_size(idx);
        self.blocks += 1;
        true
    }

    /// The largest class with a cached block.
    pub(super) fn largest(&self) -> Option<usize> {
        self.nonempty
            .iter()
            .enumerate()
            .rev()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i * 64 + 63 - w.leading_zeros() as usize)
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

    /// Gives back leased credit beyond `cached + keep_slack`.
    pub(super) fn return_slack(&mut self, shared: &Shared, keep_slack: usize) {
        let keep = self.cached.saturating_add(keep_slack);
        if self.credit > keep {
            shared.give_back(self.credit - keep);
            self.credit = keep;
        }
    }

    /// Leases credit until `cached` bytes are covered.
    pub(super) fn cover(&mut self, cached: usize, shared: &Shared) -> bool {
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
            live_high: self.live_high,
            hits: self.hits,
            misses: self.misses,
            bypassed: self.bypassed,
            spilled: self.spilled,
            released: self.released,
            captured: self.captured_allocs,
            captured_live: self.captured.len(),
        }
    }
}
