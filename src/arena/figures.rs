//! The arena's figures: what [`ArenaStats`] reports of its books and
//! counters, and the peaks started over.

use super::core::{Arena, State};
use super::phys::Phys;
use super::ArenaStats;

impl<P: Phys> Arena<P> {
    pub(crate) fn stats(&self) -> ArenaStats {
        let state = self.lock();
        self.stats_of(&state)
    }

    pub(super) fn stats_of(&self, state: &State<P::Fence>) -> ArenaStats {
        let b = &state.book;
        let largest = b.largest_free();
        let c = state.counters;
        ArenaStats {
            live_bytes: b.live_bytes,
            live_blocks: b.live_count(),
            mapped_bytes: b.mapped_bytes,
            reserved_bytes: b.reserved_bytes(),
            free_bytes: b.free_bytes + b.parked_bytes,
            largest_free: largest,
            fragmentation: if b.free_bytes + b.parked_bytes == 0 {
                0.0
            } else {
                1.0 - largest as f64 / (b.free_bytes + b.parked_bytes) as f64
            },
            idle_bytes: b.idle_bytes(),
            chunks: b.chunks().count(),
            unreleased_bytes: state.unreleased.iter().map(|&(_, l)| l).sum(),
            peak_mapped: c.peak_mapped,
            peak_live: c.peak_live,
            maps: c.maps,
            unmaps: c.unmaps,
            creates: c.creates,
            releases: c.releases,
            vmm_calls: c.vmm_calls,
            fences: c.fences,
            waits: c.waits,
            recoveries: c.recoveries,
            refusals: c.refusals,
            moves: c.moves,
            stream_waits: c.handovers,
            pool_allocations: 0,
            vmm_time: c.vmm,
            lock_waits: c.lock_waits,
            lock_wait_time: c.lock_wait,
        }
    }

    pub(crate) fn reset_peaks(&self) {
        let mut state = self.lock();
        state.counters.peak_live = state.book.live_bytes;
        state.counters.peak_mapped = state.book.mapped_bytes;
    }
}
