//! The lock of one stream's cache: a spin lock that is biased to the thread
//! that keeps using it, and cache-line padding.
//!
//! A stream is nearly always driven by one thread at a time. Taking an
//! uncontended spin lock still costs an atomic read-modify-write, which
//! drains the store buffer and is most of the cost of a cached allocation.
//! So after a thread has taken the lock [`FIRST_GRANT`] times in a row, the
//! lock names it the *owner*, and from then on that thread enters with no
//! atomic read-modify-write and no hardware fence:
//!
//! ```text
//! owner:   busy = true; compiler fence; if owner == me { use the value; busy = false (release) }
//! other:   take the spin lock; owner = 0; process-wide barrier; wait until !busy (acquire); use the value
//! ```
//!
//! This is Dekker's exclusion with the two fences made asymmetric: the owner
//! only keeps the compiler from reordering its `busy` store and its `owner`
//! load, and the other thread pays for the missing hardware fence with the
//! process-wide barrier of `barrier.rs` (every running thread executes a
//! full fence during that call). After the barrier either the owner's
//! `busy = true` is visible to the other thread (which then waits for the
//! owner's release), or the owner's check comes after its fence and sees
//! `owner == 0` (and it takes the spin lock like anyone else). The value's
//! accesses are published by the release store of `busy` (owner) and of the
//! spin lock (everyone else), and acquired by the loads that wait on them.
//!
//! Taking ownership away costs a few microseconds, so each revocation makes
//! the next grant four times harder to earn (up to [`MAX_GRANT`] takes in a
//! row): threads that take turns on one stream soon all use the spin lock,
//! and a thread that keeps the stream to itself pays nothing. Without a
//! process-wide barrier (see `barrier.rs`), or with
//! [`CacheConfig::thread_bias`](super::CacheConfig::thread_bias) off,
//! ownership is never granted and this is a plain spin lock.
//!
//! No access is ever nested (a critical section never takes a lock of a
//! stream cache, and never calls the upstream resource), and no code panics
//! inside one (a panic would leave it locked: no poisoning).

use std::cell::{Cell, UnsafeCell};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{compiler_fence, AtomicBool, AtomicU64, Ordering};

use super::barrier;

/// Takes of the lock in a row by one thread before it becomes the owner.
pub(super) const FIRST_GRANT: u32 = 16;
/// The most takes in a row a grant may ask for after revocations.
pub(super) const MAX_GRANT: u32 = 1 << 16;

/// Revocations so far (unit tests check that they happen).
#[cfg(test)]
pub(super) static REVOCATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Aligns its contents to their own cache lines (two, for the adjacent-line
/// prefetcher), so that per-stream state never shares a line.
#[repr(align(128))]
pub(super) struct CachePadded<T>(pub(super) T);

impl<T> Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

thread_local! {
    /// This thread's id for the locks (0: not drawn yet).
    static ME: Cell<u64> = const { Cell::new(0) };
}

/// A number no other live thread has (drawn from a counter, never reused,
/// so that a thread that exits while it owns a lock leaves nothing a new
/// thread could mistake for its own).
#[inline]
fn me() -> u64 {
    ME.with(|id| match id.get() {
        0 => {
            static NEXT: AtomicU64 = AtomicU64::new(1);
            let new = NEXT.fetch_add(1, Ordering::Relaxed);
            id.set(new);
            new
        }
        known => known,
    })
}

/// Who took the lock lately: kept under the spin lock.
struct Grant {
    last: u64,
    streak: u32,
    threshold: u32,
}

pub(super) struct StreamLock<T> {
    /// The thread that may use `value` without the spin lock (0: none).
    /// Written only with the spin lock held.
    owner: AtomicU64,
    /// The owner is inside an access. Written only by the owner thread.
    busy: AtomicBool,
    /// The spin lock.
    locked: AtomicBool,
    /// Whether ownership may be granted at all.
    bias: bool,
    grant: UnsafeCell<Grant>,
    value: UnsafeCell<T>,
}

// SAFETY: the value is used by one thread at a time: the holder of the spin
// lock (after it took ownership away, see the module docs) or the owner
// between its `busy` stores; each hand-over is a release store followed by
// an acquire load of the same flag, as for a Mutex. Moving the value between
// threads needs only `T: Send`.
unsafe impl<T: Send> Sync for StreamLock<T> {}

impl<T> StreamLock<T> {
    /// A lock around `value`; with `bias`, it grants ownership to a thread
    /// that keeps taking it (where the process-wide barrier works).
    pub(super) fn new(value: T, bias: bool) -> StreamLock<T> {
        StreamLock {
            owner: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            locked: AtomicBool::new(false),
            bias,
            grant: UnsafeCell::new(Grant {
                last: 0,
                streak: 0,
                threshold: FIRST_GRANT,
            }),
            value: UnsafeCell::new(value),
        }
    }

    /// Exclusive access, waiting for it if need be.
    #[inline]
    pub(super) fn lock(&self) -> Guard<'_, T> {
        if self.bias {
            if let Some(guard) = self.enter_as_owner() {
                return guard;
            }
        }
        self.lock_slow()
    }

    /// Exclusive access if it is free now, without waiting; ownership of
    /// another thread is taken away only with `may_revoke`.
    pub(super) fn try_lock(&self, may_revoke: bool) -> Option<Guard<'_, T>> {
        if self.bias {
            if let Some(guard) = self.enter_as_owner() {
                return Some(guard);
            }
        }
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        let guard = Guard {
            lock: self,
            owned: false,
        };
        let owner = self.owner.load(Ordering::Relaxed);
        if owner != 0 && owner != me() {
            if !may_revoke {
                return None; // the guard's drop releases the spin lock
            }
            // SAFETY: the spin lock is held (by `guard`).
            self.revoke(unsafe { &mut *self.grant.get() });
        }
        Some(guard)
    }

    /// Whether the calling thread owns the lock now.
    #[cfg(test)]
    pub(super) fn owned_here(&self) -> bool {
        self.owner.load(Ordering::Relaxed) == me()
    }

    /// The owner's way in: no read-modify-write, no hardware fence.
    #[inline]
    fn enter_as_owner(&self) -> Option<Guard<'_, T>> {
        let me = me();
        if self.owner.load(Ordering::Relaxed) != me {
            return None;
        }
        debug_assert!(!self.busy.load(Ordering::Relaxed), "nested stream-cache lock");
        self.busy.store(true, Ordering::Relaxed);
        // Keeps the compiler from moving the check above the store; the
        // CPU's reordering of the two is undone by the revoker's
        // process-wide barrier (module docs).
        compiler_fence(Ordering::SeqCst);
        if self.owner.load(Ordering::Acquire) == me {
            return Some(Guard {
                lock: self,
                owned: true,
            });
        }
        // Revoked in between: the revoker waits for this store.
        self.busy.store(false, Ordering::Release);
        None
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self) -> Guard<'_, T> {
        loop {
            if self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                break;
            }
            let mut spins = 0u32;
            while self.locked.load(Ordering::Relaxed) {
                if spins < 100 {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        let guard = Guard {
            lock: self,
            owned: false,
        };
        if self.bias {
            // SAFETY: the spin lock is held (by `guard`).
            let grant = unsafe { &mut *self.grant.get() };
            let me = me();
            let owner = self.owner.load(Ordering::Relaxed);
            if owner != 0 && owner != me {
                self.revoke(grant);
            }
            if grant.last == me {
                grant.streak = grant.streak.saturating_add(1);
            } else {
                grant.last = me;
                grant.streak = 1;
            }
            if owner != me && grant.streak >= grant.threshold && barrier::available() {
                // From the next access on, `me` enters without the lock.
                self.owner.store(me, Ordering::Relaxed);
            }
        }
        guard
    }

    /// Takes ownership away from another thread and waits until it is out
    /// of its access. The spin lock is held.
    #[cold]
    fn revoke(&self, grant: &mut Grant) {
        #[cfg(test)]
        REVOCATIONS.fetch_add(1, Ordering::Relaxed);
        self.owner.store(0, Ordering::Relaxed);
        if !barrier::heavy() {
            // ok: cannot happen (ownership is granted only after the barrier
            // was registered, and a registered barrier does not fail;
            // `heavy` registers again after a fork); going on without it
            // could let two threads into the value.
            std::process::abort();
        }
        let mut spins = 0u32;
        while self.busy.load(Ordering::Acquire) {
            if spins < 100 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        grant.threshold = grant.threshold.saturating_mul(4).min(MAX_GRANT);
        grant.streak = 0;
    }
}

/// Exclusive access to the value; released on drop.
pub(super) struct Guard<'a, T> {
    lock: &'a StreamLock<T>,
    /// Entered as the owner (else: holds the spin lock).
    owned: bool,
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard gives exclusive access (module docs), so no
        // other reference to the value exists until it is dropped.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only use of
        // the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if self.owned {
            self.lock.busy.store(false, Ordering::Release);
        } else {
            self.lock.locked.store(false, Ordering::Release);
        }
    }
}
