//! The stream cache tier. Its design is documented for users in the crate
//! docs (lib.rs, "The stream cache tier").
//!
//! The files:
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
#[cfg(test)]
pub(crate) mod pause;
mod shared;
mod state;
mod stats;
mod stream_cache;
mod tier;

pub use config::{CacheConfig, Headroom};
pub(crate) use shared::BuildAddrHasher;
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

/// The token of [`MemoryResource`](crate::MemoryResource)'s hidden hooks,
/// under the name the tier's code uses.
pub(crate) use crate::resource::OnlyHere as Sealed;

/// Locks a mutex whether or not a panic poisoned it: no code here panics
/// while holding one, so the data is consistent either way.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests;
