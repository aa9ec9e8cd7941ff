//! The synchronisation primitives of the hand-written concurrent code (the
//! stream cache's lock and credit, the deferred-free queue): those of `std`,
//! or loom's in the model-checked build of the unit tests
//! (`RUSTFLAGS="--cfg loom" cargo test --lib loom_`, see `ci/loom.sh`), where
//! loom runs each test under every interleaving of these operations (up to
//! a bound) and checks every access to an [`UnsafeCell`] against the
//! happens-before order.
//!
//! Only the code that the models exercise takes its primitives from here;
//! the rest of the crate uses `std` directly. Outside `cfg(all(loom, test))`
//! everything here is `std` itself or an `#[inline(always)]` wrapper of it.

#![cfg_attr(not(all(loom, test)), allow(dead_code, unused_imports))]

#[cfg(not(all(loom, test)))]
pub(crate) use std::sync::{
    atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    Arc, Mutex, MutexGuard,
};

#[cfg(all(loom, test))]
pub(crate) use loom::sync::{
    atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    Arc, Mutex, MutexGuard,
};

/// `thread_local!` with `const` initialisers (loom's has none, and gives
/// each modelled thread its own value).
#[cfg(not(all(loom, test)))]
macro_rules! thread_local_const {
    ($($(#[$attr:meta])* static $name:ident: $t:ty = $init:expr;)*) => {
        std::thread_local! { $($(#[$attr])* static $name: $t = const { $init };)* }
    };
}
#[cfg(all(loom, test))]
macro_rules! thread_local_const {
    ($($(#[$attr:meta])* static $name:ident: $t:ty = $init:expr;)*) => {
        loom::thread_local! { $($(#[$attr])* static $name: $t = $init;)* }
    };
}
pub(crate) use thread_local_const;

/// `get` and `set` of a thread-local `Cell`, which `std`'s `LocalKey` has
/// and loom's lacks.
#[cfg(all(loom, test))]
pub(crate) trait LocalCell<T> {
    fn get(&'static self) -> T;
    fn set(&'static self, value: T);
}

#[cfg(all(loom, test))]
impl<T: Copy + 'static> LocalCell<T> for loom::thread::LocalKey<std::cell::Cell<T>> {
    fn get(&'static self) -> T {
        self.with(|c| c.get())
    }
    fn set(&'static self, value: T) {
        self.with(|c| c.set(value))
    }
}

/// A busy-wait step: the CPU's spin hint; under loom a yield, so that the
/// model lets the thread being waited for run.
#[inline(always)]
pub(crate) fn spin_loop() {
    #[cfg(not(all(loom, test)))]
    std::hint::spin_loop();
    #[cfg(all(loom, test))]
    loom::thread::yield_now();
}

/// Gives the CPU to another thread (under loom: to another modelled thread).
#[inline(always)]
pub(crate) fn yield_now() {
    #[cfg(not(all(loom, test)))]
    std::thread::yield_now();
    #[cfg(all(loom, test))]
    loom::thread::yield_now();
}

/// The owner's side of an asymmetric fence: a compiler fence, which costs
/// nothing at run time. Its partner is the process-wide barrier
/// (`cache::barrier::heavy`): between the two, the pair orders like two
/// sequentially consistent fences (see `barrier.rs` for the argument), and
/// that is how the model runs it: under loom it is a `SeqCst` fence.
#[inline(always)]
pub(crate) fn light_fence() {
    #[cfg(not(all(loom, test)))]
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    #[cfg(all(loom, test))]
    loom::sync::atomic::fence(Ordering::SeqCst);
}

/// A sequentially consistent fence (the revoker's side, under loom).
#[inline(always)]
pub(crate) fn fence_seq_cst() {
    #[cfg(not(all(loom, test)))]
    std::sync::atomic::fence(Ordering::SeqCst);
    #[cfg(all(loom, test))]
    loom::sync::atomic::fence(Ordering::SeqCst);
}

/// An `UnsafeCell` whose every access is a checked write under loom (two
/// accesses from threads that the happens-before order does not separate
/// fail the model); `std`'s otherwise.
pub(crate) struct UnsafeCell<T> {
    #[cfg(not(all(loom, test)))]
    inner: std::cell::UnsafeCell<T>,
    #[cfg(all(loom, test))]
    inner: loom::cell::UnsafeCell<T>,
}

impl<T> UnsafeCell<T> {
    #[cfg(not(all(loom, test)))]
    pub(crate) const fn new(value: T) -> UnsafeCell<T> {
        UnsafeCell {
            inner: std::cell::UnsafeCell::new(value),
        }
    }

    #[cfg(all(loom, test))]
    pub(crate) fn new(value: T) -> UnsafeCell<T> {
        UnsafeCell {
            inner: loom::cell::UnsafeCell::new(value),
        }
    }

    /// The pointer to the value; under loom this records a write access
    /// at this point of the calling thread.
    #[inline(always)]
    pub(crate) fn get(&self) -> *mut T {
        #[cfg(not(all(loom, test)))]
        return self.inner.get();
        #[cfg(all(loom, test))]
        return self.inner.with_mut(|p| p);
    }
}
