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
pub(crate) const LEGACY: usize = 0;
pub(crate) const LEGACY_ALIAS: usize = 0x1;
/// The per-thread default stream's handle.
pub(crate) const PER_THREAD: usize = 0x2;

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
/// per-thread default stream). Generic over the entry so that the order of
/// `forget` can be tested without a GPU.
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

    /// Forgets stream `key`: `tier` lets go of it in the cache tier, then
    /// `arena` in the arena (after the tier's frees on it, which the arena
    /// waits for), and only then does its entry leave the registry. If
    /// either fails, the error is returned and the entry stays: a second
    /// call tries both again, instead of answering that the stream is
    /// unknown while the tier or the arena still hold it and would go on
    /// recording on it after the caller destroys it. `false`: the stream
    /// was not registered, and nothing was called.
    ///
    /// Both are called twice: first without the lock, so that the arena's
    /// wait for the stream's frees holds up no other stream's allocations
    /// and frees; then again under the write lock, right before the
    /// removal. The second pass is what keeps the order. Until the removal
    /// the entry is registered, so an allocation on the stream that comes
    /// after the first pass finds it and can give the arena state for the
    /// stream again (the entry's cache, which the tier has let go of,
    /// passes the allocation through to the arena, which learns the stream
    /// again). An allocation uses an entry only while it holds the read
    /// lock (a stream seen for the first time is registered first and then
    /// served under it, `DeviceState::allocate`), and nothing the callbacks
    /// call takes the registry's lock (they reach the library's tier and
    /// arena only). So while the write lock is held no allocation is
    /// between finding the entry and being done with it, and none can start
    /// until the entry is gone: what one gave the tier or the arena before,
    /// the second pass lets go of (usually there is nothing, and both calls
    /// return at once); one that comes after finds no entry and registers
    /// the stream anew, as it would after this call, for a later forget to
    /// let go of. Either way, once this returns `Ok`, nothing that came
    /// through the removed entry is left in the tier or the arena. The
    /// calls that hold an entry outside the lock (the frees not served
    /// under it, which go back on the block's own stream, and a trace's
    /// device time) put work on the stream itself, which the header's
    /// contract orders before `somalloc_stream_forget`.
    ///
    /// If another forget of the same stream removed the entry in between,
    /// there is nothing left to do: this call let go of it in its first
    /// pass and answers `true`. If the entry was then registered anew, the
    /// second pass lets go of the new one and removes it.
    pub fn forget(
        &self,
        key: usize,
        mut tier: impl FnMut(&E) -> Result<(), CapiError>,
        mut arena: impl FnMut(&E) -> Result<(), CapiError>,
    ) -> Result<bool, CapiError> {
        let Some(entry) = self.seen(key) else {
            return Ok(false);
        };
        tier(&entry)?;
        arena(&entry)?;
        drop(entry);
        let mut map = self.write();
        if let Some(entry) = map.get(&key).cloned() {
            tier(&entry)?;
            arena(&entry)?;
            map.remove(&key);
        }
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
    use crate::error::Status;
    use std::cell::RefCell;
    use std::collections::HashSet;

    /// A stream as the tests see it: its key.
    struct Fake(usize);

    /// The tier and the arena of a fake device: the streams each holds,
    /// what each was asked, and the failures it answers with.
    #[derive(Default)]
    struct Below {
        tier: HashSet<usize>,
        arena: HashSet<usize>,
        calls: Vec<&'static str>,
        tier_fails: usize,
        arena_fails: usize,
    }

    impl Below {
        /// An allocation on `key` through the registry: the tier and the
        /// arena learn the stream.
        fn allocate(&mut self, streams: &Streams<Fake>, key: usize) {
            let e = streams.insert_with(key, || Fake(key));
            self.tier.insert(e.0);
            self.arena.insert(e.0);
        }

        fn tier(&mut self, e: &Fake) -> Result<(), CapiError> {
            self.calls.push("tier");
            if self.tier_fails > 0 {
                self.tier_fails -= 1;
                return Err(CapiError::new(Status::Vendor, "the tier's frees failed"));
            }
            self.tier.remove(&e.0);
            Ok(())
        }

        fn arena(&mut self, e: &Fake) -> Result<(), CapiError> {
            self.calls.push("arena");
            if self.arena_fails > 0 {
                self.arena_fails -= 1;
                return Err(CapiError::new(Status::Vendor, "the arena's wait failed"));
            }
            self.arena.remove(&e.0);
            Ok(())
        }
    }

    const S: usize = 0x7000;

    fn forget(streams: &Streams<Fake>, below: &RefCell<Below>) -> Result<bool, CapiError> {
        streams.forget(S, |e| below.borrow_mut().tier(e), |e| below.borrow_mut().arena(e))
    }

    #[test]
    fn forgetting_lets_go_in_the_tier_then_the_arena_then_drops_the_entry() {
        let streams = Streams::default();
        let below = RefCell::new(Below::default());
        below.borrow_mut().allocate(&streams, S);
        below.borrow_mut().allocate(&streams, 0x8000);
        // Whether the stream was registered when the tier and the arena
        // were first asked (the second pass runs under the write lock,
        // where the registry cannot be read).
        let registered = RefCell::new(Vec::new());
        let forgotten = streams.forget(
            S,
            |e| {
                if registered.borrow().is_empty() {
                    registered.borrow_mut().push(streams.seen(S).is_some());
                }
                below.borrow_mut().tier(e)
            },
            |e| {
                if registered.borrow().len() == 1 {
                    registered.borrow_mut().push(streams.seen(S).is_some());
                }
                below.borrow_mut().arena(e)
            },
        );
        assert!(forgotten.unwrap());
        assert_eq!(
            *registered.borrow(),
            [true, true],
            "registered while the tier and the arena let go"
        );
        let b = below.borrow();
        assert_eq!(b.calls[..2], ["tier", "arena"]);
        assert!(!b.tier.contains(&S) && !b.arena.contains(&S));
        assert!(streams.seen(S).is_none(), "the entry is gone");
        assert!(streams.seen(0x8000).is_some(), "another stream stays");
    }

    #[test]
    fn forgetting_an_unknown_stream_calls_nothing() {
        let streams = Streams::default();
        let below = RefCell::new(Below::default());
        assert!(!forget(&streams, &below).unwrap());
        assert!(below.borrow().calls.is_empty());
    }

    #[test]
    fn a_failed_tier_removal_keeps_the_stream_and_a_retry_reaches_the_arena() {
        let streams = Streams::default();
        let below = RefCell::new(Below::default());
        below.borrow_mut().allocate(&streams, S);
        below.borrow_mut().tier_fails = 1;
        assert_eq!(forget(&streams, &below).unwrap_err().status, Status::Vendor);
        assert!(streams.seen(S).is_some(), "the stream stays registered");
        assert_eq!(below.borrow().calls, ["tier"]);
        assert!(below.borrow().arena.contains(&S));

        below.borrow_mut().calls.clear();
        assert!(forget(&streams, &below).unwrap(), "the retry finds the stream");
        assert!(
            below.borrow().calls.contains(&"arena"),
            "the retry reaches the arena"
        );
        assert!(!below.borrow().arena.contains(&S) && !below.borrow().tier.contains(&S));
        assert!(streams.seen(S).is_none());
    }

    #[test]
    fn a_failed_arena_forget_keeps_the_stream_and_a_retry_reaches_the_arena_again() {
        let streams = Streams::default();
        let below = RefCell::new(Below::default());
        below.borrow_mut().allocate(&streams, S);
        below.borrow_mut().arena_fails = 1;
        assert_eq!(forget(&streams, &below).unwrap_err().status, Status::Vendor);
        assert!(streams.seen(S).is_some(), "the stream stays registered");
        assert_eq!(below.borrow().calls, ["tier", "arena"]);
        assert!(below.borrow().arena.contains(&S));

        below.borrow_mut().calls.clear();
        assert!(forget(&streams, &below).unwrap());
        assert_eq!(
            below.borrow().calls[..2],
            ["tier", "arena"],
            "the retry reaches the arena again"
        );
        assert!(!below.borrow().arena.contains(&S));
        assert!(streams.seen(S).is_none());
    }

    #[test]
    fn a_failure_under_the_lock_keeps_the_stream_too() {
        let streams = Streams::default();
        let below = RefCell::new(Below::default());
        below.borrow_mut().allocate(&streams, S);
        // The first pass lets go, an allocation comes in between and the
        // arena fails to let go of it again.
        let mut passes = 0;
        let result = streams.forget(
            S,
            |e| below.borrow_mut().tier(e),
            |e| {
                passes += 1;
                let r = below.borrow_mut().arena(e);
                if passes == 1 {
                    below.borrow_mut().allocate(&streams, S);
                    below.borrow_mut().arena_fails = 1;
                }
                r
            },
        );
        assert_eq!(result.unwrap_err().status, Status::Vendor);
        assert!(streams.seen(S).is_some());
        assert!(below.borrow().arena.contains(&S));
        assert!(forget(&streams, &below).unwrap());
        assert!(streams.seen(S).is_none() && !below.borrow().arena.contains(&S));
    }

    #[test]
    fn an_allocation_between_the_let_go_and_the_removal_is_let_go_of_too() {
        let streams = Streams::default();
        let below = RefCell::new(Below::default());
        below.borrow_mut().allocate(&streams, S);
        // Right after the arena let go, an allocation on the stream (still
        // registered) gives the tier and the arena state for it again.
        let mut once = true;
        let result = streams.forget(
            S,
            |e| below.borrow_mut().tier(e),
            |e| {
                let r = below.borrow_mut().arena(e);
                if std::mem::take(&mut once) {
                    below.borrow_mut().allocate(&streams, S);
                }
                r
            },
        );
        assert!(result.unwrap());
        assert!(streams.seen(S).is_none());
        let b = below.borrow();
        assert!(
            !b.tier.contains(&S),
            "the tier holds a stream the registry forgot"
        );
        assert!(
            !b.arena.contains(&S),
            "the arena holds a stream the registry forgot"
        );
    }

    #[test]
    fn an_allocation_after_the_forget_registers_the_stream_anew() {
        let streams = Streams::default();
        let below = RefCell::new(Below::default());
        below.borrow_mut().allocate(&streams, S);
        assert!(forget(&streams, &below).unwrap());
        below.borrow_mut().allocate(&streams, S);
        assert!(streams.seen(S).is_some());
        assert!(forget(&streams, &below).unwrap());
        assert!(streams.seen(S).is_none() && !below.borrow().arena.contains(&S));
    }

    #[test]
    fn the_legacy_handles_are_one_key() {
        assert_eq!(key_of(std::ptr::null_mut()), key_of(LEGACY_ALIAS as *mut c_void));
        assert_ne!(key_of(PER_THREAD as *mut c_void), LEGACY);
        assert_eq!(key_of(0x7000 as *mut c_void), 0x7000);
    }
}
