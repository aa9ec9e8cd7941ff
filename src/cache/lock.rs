//! The lock of one stream's cache: a spin lock that is biased to the thread
//! that keeps using it, and cache-line padding.
//!
//! A stream is nearly always driven by one thread at a time. Taking an
//! uncontended spin lock still costs an atomic read-modify-write, which
//! drains the store buffer and is most of the cost of a cached allocation.
//! So after a thread has taken the lock [`FIRST_GRANT`] times in a row, the
//! lock names it the *owner*, and from then on that thread enters with no
//! atomic read-modify-write and no hardware fence.
//!
//! Every thread has an *inside flag* of its own (one per thread, not one
//! per lock), which only that thread ever writes. The lock records, under
//! its spin lock, the owner's id and which flag is the owner's:
//!
//! ```text
//! owner T: if owner == T { F_T = true; compiler fence;
//!                          if owner == T { use the value; F_T = false (release) }
//!                          else { F_T = false } }
//! other R: take the spin lock; if owner is some T != R:
//!              owner = 0; process-wide barrier; wait until !F_T (acquire)
//!          use the value; release the spin lock
//! ```
//!
//! This is Dekker's exclusion with the two fences made asymmetric: the owner
//! only keeps the compiler from reordering its `F_T` store and its second
//! `owner` load, and the revoker pays for the missing hardware fence with
//! the process-wide barrier of `barrier.rs` (every running thread executes a
//! full fence during that call; a thread that is not running passes one
//! before it runs again). After the barrier either T's `F_T = true` is
//! visible to R (which then waits for T's release), or T's second check
//! comes after its fence and sees `owner != T` (it clears its own flag and
//! takes the spin lock like anyone else). Only T sets `owner = T` (under the
//! spin lock, in `lock_slow`), so once revoked T cannot pass its second
//! check again until it has taken the spin lock itself. The value's accesses
//! are published by the release store of the owner's flag (owner) and of
//! the spin lock (everyone else), and acquired by the loads that wait on
//! them.
//!
//! **Stale owners.** A thread S may pass its *first* check, stop (preempted)
//! and run on after it was revoked and another thread B became the owner.
//! Everything S then writes is its own flag `F_S`: it cannot touch `F_B`,
//! which B's revoker waits on, so B's exclusion is the argument above, for
//! B. S's second check sees `owner == B`, so S clears `F_S` and takes the
//! spin lock, revokes B and waits on `F_B`. (When all owners shared one flag,
//! S's `false` store could land while B was inside, and S then revoked B,
//! saw the flag clear and entered beside it: `tests/schedules.rs` replays
//! that schedule.) A revoker that waits on `F_S` while S is stopped between
//! its two stores waits until S runs on, which it does within its own
//! short, lock-free sequence.
//!
//! **Flags outlive threads.** A thread's flag is returned to a pool when the
//! thread exits and may be given to a new thread; ids are never reused. A
//! lock whose owner exited keeps that owner's id (which no live thread has)
//! and the flag it had, so its next revoker may wait on a flag that now
//! belongs to another thread: that thread is inside some access only for a
//! bounded time, so the wait ends; it only ever costs time. A thread whose
//! thread-local storage is being torn down gets no flag and is never
//! granted ownership.
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
//! stream cache, and never calls the upstream resource): a thread is inside
//! at most one access, which is why one flag per thread is enough. A panic
//! inside an access would mean that the books' invariants are broken
//! (arithmetic that cannot overflow while they hold): the guard then aborts
//! the process while unwinding, since going on with half-updated books
//! could hand one block out twice. A guard can never move to another
//! thread (it is neither `Send` nor `Sync`): the flag it clears is its
//! thread's.

use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr;
use std::sync::atomic::{compiler_fence, AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

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

/// A thread's inside flag (module docs): written only by the thread it
/// belongs to, read by revokers. Never freed: a flag goes back to
/// [`SPARE_FLAGS`] when its thread exits.
type Flag = CachePadded<AtomicBool>;

/// Flags of threads that have exited, for new threads.
static SPARE_FLAGS: Mutex<Vec<&'static Flag>> = Mutex::new(Vec::new());

/// The id of a thread that has none (its thread-local storage is being
/// torn down): never an owner.
const NO_ID: u64 = u64::MAX;

thread_local! {
    /// This thread's id for the locks (0: not drawn yet) and its flag.
    static ME: Cell<(u64, *const Flag)> = const { Cell::new((0, ptr::null())) };
    /// Gives the thread's flag back when the thread exits.
    static FLAG_HOME: FlagHome = const { FlagHome };
}

struct FlagHome;

impl Drop for FlagHome {
    fn drop(&mut self) {
        let (_, flag) = ME.get();
        ME.set((NO_ID, ptr::null()));
        // SAFETY: a flag in `ME` is a `&'static Flag` (see `me_slow`).
        if let Some(flag) = unsafe { flag.as_ref() } {
            // Not inside any access: a thread exits with no guard alive.
            super::lock(&SPARE_FLAGS).push(flag);
        }
    }
}

/// This thread's id and flag: an id no other live thread has (drawn from a
/// counter, never reused, so that a thread that exits while it owns a lock
/// leaves nothing a new thread could mistake for its own), or [`NO_ID`]
/// and null.
#[inline]
fn me() -> (u64, *const Flag) {
    match ME.get() {
        (0, _) => me_slow(),
        known => known,
    }
}

#[cold]
#[inline(never)]
fn me_slow() -> (u64, *const Flag) {
    // Registers the flag's way home first; a thread already tearing down
    // its thread-local storage cannot, and goes without a flag.
    if FLAG_HOME.try_with(|_| ()).is_err() {
        ME.set((NO_ID, ptr::null()));
        return (NO_ID, ptr::null());
    }
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let spare = super::lock(&SPARE_FLAGS).pop();
    let flag: &'static Flag =
        spare.unwrap_or_else(|| Box::leak(Box::new(CachePadded(AtomicBool::new(false)))));
    ME.set((id, flag));
    (id, flag)
}

/// Who took the lock lately, and whose flag the owner's is: kept under the
/// spin lock.
struct Grant {
    last: u64,
    streak: u32,
    threshold: u32,
    /// The flag of the thread in `owner` (null while there is none).
    owner_flag: *const Flag,
}

pub(super) struct StreamLock<T> {
    /// The thread that may use `value` without the spin lock (0: none).
    /// Written only with the spin lock held.
    owner: AtomicU64,
    /// The spin lock.
    locked: AtomicBool,
    /// Whether ownership may be granted at all.
    bias: bool,
    grant: UnsafeCell<Grant>,
    value: UnsafeCell<T>,
}

// SAFETY: the value is used by one thread at a time: the holder of the spin
// lock (after it took ownership away, see the module docs) or the owner
// between the stores of its flag; each hand-over is a release store followed
// by an acquire load of the same flag, as for a Mutex. Moving the value
// between threads needs only `T: Send`. `Grant` (raw pointer included) is
// used only under the spin lock.
unsafe impl<T: Send> Sync for StreamLock<T> {}
// SAFETY: as above; the flag pointer names a flag that is never freed.
unsafe impl<T: Send> Send for StreamLock<T> {}

impl<T> StreamLock<T> {
    /// A lock around `value`; with `bias`, it grants ownership to a thread
    /// that keeps taking it (where the process-wide barrier works).
    pub(super) fn new(value: T, bias: bool) -> StreamLock<T> {
        StreamLock {
            owner: AtomicU64::new(0),
            locked: AtomicBool::new(false),
            bias,
            grant: UnsafeCell::new(Grant {
                last: 0,
                streak: 0,
                threshold: FIRST_GRANT,
                owner_flag: ptr::null(),
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
        let guard = Guard::spun(self);
        let owner = self.owner.load(Ordering::Relaxed);
        if owner != 0 && owner != me().0 {
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
        self.owner.load(Ordering::Relaxed) == me().0
    }

    /// The owner's way in: no read-modify-write, no hardware fence.
    #[inline]
    fn enter_as_owner(&self) -> Option<Guard<'_, T>> {
        let (me, flag) = me();
        if self.owner.load(Ordering::Relaxed) != me {
            return None;
        }
        #[cfg(test)]
        super::pause::point("lock: owner checked");
        // SAFETY: `owner == me` means this thread was granted ownership,
        // which needs a flag (`lock_slow`); flags are never freed.
        let flag: &'static AtomicBool = unsafe { &(*flag).0 };
        debug_assert!(!flag.load(Ordering::Relaxed), "nested stream-cache lock");
        flag.store(true, Ordering::Relaxed);
        // Keeps the compiler from moving the check above the store; the
        // CPU's reordering of the two is undone by the revoker's
        // process-wide barrier (module docs).
        compiler_fence(Ordering::SeqCst);
        if self.owner.load(Ordering::Acquire) == me {
            return Some(Guard {
                lock: self,
                flag,
                unwinding: std::thread::panicking(),
                _not_send: PhantomData,
            });
        }
        // Revoked in between: a revoker may be waiting for this store.
        flag.store(false, Ordering::Release);
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
        let guard = Guard::spun(self);
        if self.bias {
            // SAFETY: the spin lock is held (by `guard`).
            let grant = unsafe { &mut *self.grant.get() };
            let (me, flag) = me();
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
            if owner != me && !flag.is_null() && grant.streak >= grant.threshold && barrier::available() {
                // From the next access on, `me` enters without the lock,
                // marking itself inside with `flag`.
                grant.owner_flag = flag;
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
        let flag = std::mem::replace(&mut grant.owner_flag, ptr::null());
        if !barrier::heavy() {
            // ok: cannot happen (ownership is granted only after the barrier
            // was registered, and a registered barrier does not fail;
            // `heavy` registers again after a fork); going on without it
            // could let two threads into the value.
            std::process::abort();
        }
        // SAFETY: the owner's flag, set with `owner` (never freed); null
        // only if no thread was ever granted, and then nobody is inside.
        if let Some(flag) = unsafe { flag.as_ref() } {
            let mut spins = 0u32;
            while flag.0.load(Ordering::Acquire) {
                if spins < 100 {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        grant.threshold = grant.threshold.saturating_mul(4).min(MAX_GRANT);
        grant.streak = 0;
    }
}

/// Exclusive access to the value; released on drop. Neither `Send` nor
/// `Sync`: the owner's flag it clears belongs to this thread.
pub(super) struct Guard<'a, T> {
    lock: &'a StreamLock<T>,
    /// Entered as the owner: this thread's flag. Else (`SPUN`): holds the
    /// spin lock.
    flag: &'static AtomicBool,
    /// The thread was unwinding already when it entered (a drop during a
    /// panic elsewhere), so unwinding at the exit says nothing about the
    /// access.
    unwinding: bool,
    _not_send: PhantomData<*const ()>,
}

/// The `flag` of a guard that holds the spin lock.
static SPUN: AtomicBool = AtomicBool::new(false);

impl<'a, T> Guard<'a, T> {
    fn spun(lock: &'a StreamLock<T>) -> Guard<'a, T> {
        Guard {
            lock,
            flag: &SPUN,
            unwinding: std::thread::panicking(),
            _not_send: PhantomData,
        }
    }
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
        if std::thread::panicking() && !self.unwinding {
            // A panic inside the access: the books may be half-updated
            // (module docs).
            abort_inside();
        }
        if ptr::eq(self.flag, &SPUN) {
            self.lock.locked.store(false, Ordering::Release);
        } else {
            self.flag.store(false, Ordering::Release);
        }
    }
}

#[cold]
#[inline(never)]
fn abort_inside() -> ! {
    eprintln!("somalloc: a panic inside a stream cache's lock left its books half-updated; aborting");
    std::process::abort()
}
