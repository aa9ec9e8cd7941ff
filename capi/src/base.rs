//! What serves a device's allocations below the cache tier: its pool, or
//! with `pool:vmm` a virtual-memory arena with that pool behind it (for the
//! allocations of capturing streams, graph memory, and for what the arena
//! cannot serve).

use std::ffi::c_void;
use std::sync::Arc;

use somalloc_rs::{ArenaOptions, Device, MemPool, MemoryResource, Stream, VmmArena};

use crate::conf::Conf;
use crate::error::CapiError;
use crate::state::DeviceState;
use crate::{SomallocSegment, SomallocStats};

/// The arena options of a configuration: `release_threshold` (`max`: keep
/// idle chunks until a trim), `max_size` (the most the arena maps),
/// `arena_moves`, `arena_whole_blocks` and `arena_stream_waits`.
pub fn arena_options(conf: &Conf) -> ArenaOptions {
    let threshold = match conf.release_threshold {
        u64::MAX => None,
        n => Some(usize::try_from(n).unwrap_or(usize::MAX)),
    };
    ArenaOptions::default()
        .release_threshold(threshold)
        .max_mapped(conf.max_size)
        .moves(conf.arena_moves)
        .whole_blocks(conf.arena_whole_blocks)
        .stream_waits(conf.arena_stream_waits)
}

/// The arena of `pool`'s device for `pool:vmm` (or, `by_default`, for
/// `pool:auto`: `VmmArena::as_default`, which also refuses where the
/// runtime could not give the arena's memory back), with every peer that
/// can reach the device granted access when `peer_access` is on. Where it
/// cannot be made (no virtual-memory management, a call the runtime
/// refused), one line on stderr says why and the pool alone serves the
/// device: never a failure of the device.
pub fn arena_for(device: &Device, pool: &MemPool, conf: &Conf, by_default: bool) -> Option<Arc<VmmArena>> {
    let options = arena_options(conf);
    let made = if by_default {
        VmmArena::as_default(pool.clone(), options)
    } else {
        VmmArena::with_pool(pool.clone(), options)
    }
    .map_err(CapiError::from);
    let granted = made.and_then(|arena| {
        if conf.peer_access {
            for other in 0..Device::count()? {
                let peer = Device::get(other)?;
                if peer != *device && peer.can_access_peer(device)? {
                    arena.grant_access(&peer)?;
                }
            }
        }
        Ok(arena)
    });
    match granted {
        Ok(arena) => Some(Arc::new(arena)),
        Err(e) if by_default => {
            eprintln!(
                "somalloc: pool:auto: device {} is served by its own pool, not the virtual-memory arena \
                 ({}); pool:own does the same without this line",
                device.ordinal(),
                e.text
            );
            None
        }
        Err(e) => {
            eprintln!(
                "somalloc: pool:vmm: device {} has no virtual-memory arena ({}); its pool serves it",
                device.ordinal(),
                e.text
            );
            None
        }
    }
}

/// The resource the cache tier sits in front of: the arena if there is
/// one, else the pool.
pub fn upstream(pool: &MemPool, arena: &Option<Arc<VmmArena>>) -> Arc<dyn MemoryResource> {
    match arena {
        Some(a) => Arc::clone(a) as Arc<dyn MemoryResource>,
        None => Arc::new(pool.clone()),
    }
}

impl DeviceState {
    /// What serves the allocations that go past the cache tier
    /// (`Path::Pool`): the arena if there is one, else the pool.
    pub(crate) fn base(&self) -> &dyn MemoryResource {
        match &self.arena {
            Some(a) => a.as_ref(),
            None => &self.pool,
        }
    }

    /// Allocates `size` bytes from the arena or the pool, in the order of
    /// `stream`.
    pub fn base_allocate(&self, size: usize, stream: &Stream) -> Result<*mut c_void, CapiError> {
        Ok(self.base().allocate(size, stream)?)
    }

    /// Frees what `base_allocate` returned.
    ///
    /// # Safety
    /// `ptr` came from `base_allocate` with `size` bytes and is freed once;
    /// every use is ordered before this point of `stream`.
    pub unsafe fn base_deallocate(
        &self,
        ptr: *mut c_void,
        size: usize,
        stream: &Stream,
    ) -> Result<(), CapiError> {
        // SAFETY: the caller's guarantees; the arena hands what it did not
        // allocate itself back to the pool it came from.
        unsafe { Ok(self.base().deallocate(ptr, size, stream)?) }
    }

    /// Gives unused memory back to the device until at most `keep_bytes`
    /// of it stay with the arena (idle chunks, after waiting for every
    /// stream's frees) and at most `keep_bytes` with the pool.
    pub fn base_trim_to(&self, keep_bytes: usize) -> Result<(), CapiError> {
        if let Some(arena) = &self.arena {
            arena.trim(keep_bytes);
        }
        Ok(self.pool.trim_to(keep_bytes)?)
    }

    /// Fills the arena's fields of `s` (all 0 without an arena).
    pub fn arena_stats(&self, s: &mut SomallocStats) {
        let Some(arena) = &self.arena else { return };
        let a = arena.stats();
        s.arena_enabled = 1;
        s.arena_mapped_bytes = a.mapped_bytes as u64;
        s.arena_mapped_peak_bytes = a.peak_mapped as u64;
        s.arena_reserved_bytes = a.reserved_bytes as u64;
        s.arena_largest_free_bytes = a.largest_free as u64;
        s.arena_fragmentation_ppm = (a.fragmentation.clamp(0.0, 1.0) * 1e6).round() as u64;
        s.arena_idle_bytes = a.idle_bytes as u64;
        s.arena_maps = a.maps;
        s.arena_unmaps = a.unmaps;
        s.arena_pool_allocations = a.pool_allocations;
        s.arena_moves = a.moves;
        s.arena_stream_waits = a.stream_waits;
        s.arena_vmm_ns = u64::try_from(a.vmm_time.as_nanos()).unwrap_or(u64::MAX);
        s.arena_lock_waits = a.lock_waits;
        s.arena_lock_wait_ns = u64::try_from(a.lock_wait_time.as_nanos()).unwrap_or(u64::MAX);
        s.arena_vmm_calls = a.vmm_calls;
    }

    /// The arena's mapped chunks in address order (none without an arena).
    pub fn segments(&self) -> Vec<SomallocSegment> {
        let Some(arena) = &self.arena else {
            return Vec::new();
        };
        arena
            .segments()
            .into_iter()
            .map(|s| SomallocSegment {
                address: s.address as u64,
                bytes: s.bytes as u64,
            })
            .collect()
    }
}
