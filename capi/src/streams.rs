//! The streams a device has seen: how a stream handle keys them, each
//! stream's entry (its handle, its cache of the cache tier, its part of a
//! plan), the registry that holds the entries, and the order in which a
//! stream is forgotten (the cache tier and the arena let go of it before
//! its entry leaves the registry).

use std::ffi::c_void;
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use somalloc_rs::adaptors::{PlanShare, StreamPlans};
use somalloc_rs::{CacheTier, Device, Stream, StreamCache};

use crate::error::CapiError;
use crate::registry::AddrMap;

/// The legacy default stream's handles (null, and `0x1`,
/// `cudaStreamLegacy`): one key.
pub const LEGACY: usize = 0;
pub const LEGACY_ALIAS: usize = 0x1;
/// The per-thread default stream's handle.
pub const PER_THREAD: usize = 0x2;

/// The key of a stream handle: the legacy stream's two handles name one
/// stream.
pub fn key_of(stream: *mut c_void) -> usize {
    match stream as usize {
        LEGACY_ALIAS => LEGACY,
        k => k,
    }
}

/// A stream somalloc has seen on a device, with its cache and its plan.
pub struct Entry {
    pub stream: Stream,
    pub cache: Option<Arc<StreamCache>>,
    /// Its part of a plan: taken when the stream is first seen (`plan:PATH`),
    /// or set once at the switch (`plan:auto`).
    pub plan: OnceLock<PlanShare>,
    /// The legacy default stream, which the runtime never captures
    /// (`cudaStreamBeginCapture` refuses it, and it cannot join a capture).
    pub legacy: bool,
}

impl Entry {
    /// Whether the stream is capturing: the runtime is asked, except for
    /// the legacy default stream.
    pub fn is_capturing(&self) -> Result<bool, CapiError> {
        Ok(!self.legacy && self.stream.is_capturing()?)
    }
}

/// A device's streams by key (the legacy stream under 0; never the
/// per-thread default stream). Generic over the entry, so that it can be
/// tested without a GPU.
pub struct Streams<E = Entry> {
    map: RwLock<AddrMap<Arc<E>>>,
}

impl<E> Default for Streams<E> {
    fn default() -> Streams<E> {
        Streams {
            map: RwLock::new(AddrMap::default()),
        }
    }
}

impl<E> Streams<E> {
    /// The registry under its read lock. The allocations and frees on a
    /// stream seen before are served under it; nothing they call takes the
    /// registry's lock again.
    pub fn read(&self) -> RwLockReadGuard<'_, AddrMap<Arc<E>>> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, AddrMap<Arc<E>>> {
        self.map.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The entry of stream `key` if it was seen.
    pub fn seen(&self, key: usize) -> Option<Arc<E>> {
        self.read().get(&key).cloned()
    }

    /// Every entry.
    pub fn all(&self) -> Vec<Arc<E>> {
        self.read().values().cloned().collect()
    }

    /// The entry of stream `key`, made by `make` under the write lock if
    /// there is none: of two threads that register one stream at once, one
    /// makes it and both get it.
    pub fn insert_with(&self, key: usize, make: impl FnOnce() -> E) -> Arc<E> {
        let mut map = self.write();
        Arc::clone(map.entry(key).or_insert_with(|| Arc::new(make())))
    }

    /// Forgets stream `key`: its entry leaves the registry, then `tier`
    /// lets go of it in the cache tier, then `arena` in the arena (after the
    /// tier's frees on it, which the arena waits for). `false`: the stream
    /// was not registered, and nothing was called.
    pub fn forget(
        &self,
        key: usize,
        mut tier: impl FnMut(&E) -> Result<(), CapiError>,
        mut arena: impl FnMut(&E) -> Result<(), CapiError>,
    ) -> Result<bool, CapiError> {
        let Some(entry) = self.write().remove(&key) else {
            return Ok(false);
        };
        tier(&entry)?;
        arena(&entry)?;
        Ok(true)
    }
}

impl Streams<Entry> {
    /// The entry of a stream that is not the per-thread default stream,
    /// registered on its first use (with its cache of `tier`, and its plan
    /// from `plans`).
    pub fn entry(
        &self,
        key: usize,
        device: &Device,
        tier: Option<&CacheTier>,
        plans: Option<&StreamPlans>,
    ) -> Result<Arc<Entry>, CapiError> {
        if let Some(e) = self.seen(key) {
            return Ok(e);
        }
        let stream = if key == LEGACY {
            // SAFETY: every runtime call with this stream happens inside an
            // entry point that made this device current first
            // (`DeviceGuard`), on the calling thread: the null handle then
            // names this device's legacy default stream. (The legacy
            // stream's planned slots make no runtime call and skip that.)
            unsafe { Stream::legacy_default(device) }
        } else {
            // SAFETY: the caller of the entry point promises that the handle
            // is a live stream of this device and stays alive while somalloc
            // uses it (the header's contract: until `somalloc_stream_forget`
            // when the cache tier is on, or until its allocations are freed).
            unsafe { Stream::from_raw(device, key as *mut c_void)? }
        };
        let cache = match tier {
            Some(t) => Some(t.for_stream(&stream)?),
            None => None,
        };
        // The plan is taken under the lock, by the one thread that adds
        // the stream: a stream takes one plan, in the order streams come.
        Ok(self.insert_with(key, || {
            let plan = plans.and_then(|p| p.take(key == LEGACY));
            Entry {
                stream,
                cache,
                plan: plan.map_or_else(OnceLock::new, OnceLock::from),
                legacy: key == LEGACY,
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_legacy_handles_are_one_key() {
        assert_eq!(key_of(std::ptr::null_mut()), key_of(LEGACY_ALIAS as *mut c_void));
        assert_ne!(key_of(PER_THREAD as *mut c_void), LEGACY);
        assert_eq!(key_of(0x7000 as *mut c_void), 0x7000);
    }
}
