//! The registry of the pools somalloc created or imported, so that a raw
//! handle the runtime reports can be answered with its owning `MemPool`.

use super::*;

/// The pools somalloc created or imported and has not destroyed, by raw
/// handle, so that a handle the runtime reports (the current pool) can be
/// answered with the owning `MemPool` instead of a borrowed one.
pub(super) static CREATED: Registry<PoolInner> = Registry::new();

pub(super) fn pool_key(raw: RawPool) -> usize {
    Active::pool_as_raw(raw) as usize
}

/// Raw handle -> weak reference to the owner, for objects that unregister
/// themselves (under the lock) when destroyed.
pub(super) struct Registry<T> {
    entries: Mutex<Vec<(usize, Weak<T>)>>,
}

/// What the registry knows about a raw handle.
#[derive(Debug)]
pub(super) enum Lookup<T> {
    /// A live owner: a new strong reference to it.
    Live(Arc<T>),
    /// Registered, but its owner is being destroyed right now (its last
    /// strong reference is gone and its `Drop` waits for the lock).
    Dying,
    /// Not one of ours.
    Unknown,
}

impl<T> Registry<T> {
    pub(super) const fn new() -> Self {
        Registry {
            entries: Mutex::new(Vec::new()),
        }
    }

    /// The entries, locked. A panic elsewhere while holding the lock cannot
    /// leave them inconsistent (every change is one `Vec` call), so a
    /// poisoned lock is used as is.
    pub(super) fn lock(&self) -> RegistryGuard<'_, T> {
        RegistryGuard(self.entries.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

pub(super) struct RegistryGuard<'a, T>(pub(super) MutexGuard<'a, Vec<(usize, Weak<T>)>>);

impl<T> RegistryGuard<'_, T> {
    /// Records `owner` as the owner of `key` (replacing a stale entry: the
    /// runtime may reuse the handle of a destroyed object).
    pub(super) fn register(&mut self, key: usize, owner: &Arc<T>) {
        self.0.retain(|(k, _)| *k != key);
        self.0.push((key, Arc::downgrade(owner)));
    }

    pub(super) fn lookup(&self, key: usize) -> Lookup<T> {
        match self.0.iter().find(|(k, _)| *k == key) {
            Some((_, weak)) => weak.upgrade().map_or(Lookup::Dying, Lookup::Live),
            None => Lookup::Unknown,
        }
    }

    /// Removes `key` if it is still registered to `owner` (the object at
    /// that address), not to a newer object that reused the handle.
    pub(super) fn unregister(&mut self, key: usize, owner: *const T) {
        self.0.retain(|(k, weak)| !(*k == key && weak.as_ptr() == owner));
    }
}
