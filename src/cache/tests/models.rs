//! Model-checked tests (`RUSTFLAGS="--cfg loom"`, see `ci/loom.sh`): loom
//! runs each body under every interleaving of the threads' atomic
//! operations, lock acquisitions and spin-loop yields (up to
//! `LOOM_MAX_PREEMPTIONS` preemptions per execution), with each relaxed or
//! acquire load free to return any store that the memory model allows, and
//! checks every access to the stream lock's value (a `crate::sync::UnsafeCell`)
//! against the happens-before order: two accesses that it does not order
//! fail the model. So a lock that let two threads in at once, or that did
//! not publish one holder's writes to the next, fails here.
//!
//! In the model the lock grants ownership after one take and again after
//! every revocation (`FIRST_GRANT` = `MAX_GRANT` = 1), so that a few accesses
//! already cover grant, revocation, re-grant and a stale owner; the
//! process-wide barrier runs as a `SeqCst` fence, and the owner's compiler
//! fence as another (the argument is in `barrier.rs`, next to the model).
//!
//! * the lock: an owner against a revoker; a stale owner (it passed its
//!   first check, then lost ownership to a thread that was granted it in
//!   turn) against the new owner; `try_lock` with and without revoking;
//! * a stream cache: a hit and a cached free on one thread against a flush,
//!   a trim of the cache and a trim of the tier on another; two threads
//!   taking turns on one cache;
//! * detaching (`remove_stream`, the tier's drop) against a hit for a
//!   buffer that pins its cache: while the buffer lives, the cache does;
//! * the shared credit: a free that finds no room under the total cap takes
//!   the idle credit of another stream (revoking its owner) while that
//!   stream's thread hits in its own cache.

use std::sync::Arc;

use loom::thread;

use super::fast::quiet;
use super::*;
use crate::cache::lock::StreamLock;
use crate::sync::{AtomicUsize, Ordering};

/// Each access of the lock's value adds one (loom checks the access).
fn bump(lock: &StreamLock<u64>) {
    *lock.lock() += 1;
}

/// A lock that the calling thread owns (one take grants it in the model).
fn owned_lock() -> Arc<StreamLock<u64>> {
    let lock = Arc::new(StreamLock::new(0u64, true));
    bump(&lock);
    assert!(lock.owned_here(), "one take grants ownership in the model");
    lock
}

#[test]
fn loom_lock_owner_against_a_revoker() {
    loom::model(|| {
        let lock = owned_lock();
        let other = lock.clone();
        let revoker = thread::spawn(move || bump(&other));
        // The owner's way in, or (revoked meanwhile) the spin lock.
        bump(&lock);
        revoker.join().unwrap();
        assert_eq!(*lock.lock(), 3);
    });
}

#[test]
fn loom_lock_stale_owner_against_the_new_owner() {
    loom::model(|| {
        // The main thread owns the lock. The other thread revokes it, is
        // granted ownership itself and enters again as the owner; the main
        // thread's second access may have passed its first check before
        // the revocation (a stale owner), and must then wait for the new
        // owner, revoking it in turn.
        let lock = owned_lock();
        let other = lock.clone();
        let new_owner = thread::spawn(move || {
            bump(&other);
            bump(&other);
        });
        bump(&lock);
        bump(&lock);
        new_owner.join().unwrap();
        assert_eq!(*lock.lock(), 5);
    });
}

#[test]
fn loom_lock_try_lock_against_the_owner() {
    loom::model(|| {
        let lock = owned_lock();
        let other = lock.clone();
        let trier = thread::spawn(move || {
            let mut got = 0;
            // Without revoking: refused while another thread owns it.
            if let Some(mut g) = other.try_lock(false) {
                *g += 1;
                got += 1;
            }
            // Revoking: taken unless the spin lock is held right now.
            if let Some(mut g) = other.try_lock(true) {
                *g += 1;
                got += 1;
            }
            got
        });
        bump(&lock);
        let got = trier.join().unwrap();
        assert_eq!(*lock.lock(), 2 + got);
    });
}

fn small_tier(fake: &Arc<FakeResource>, config: CacheConfig) -> Arc<CacheTier> {
    Arc::new(tier_over(fake, config))
}

/// Every block back upstream once, and nothing freed twice.
fn all_back(fake: &FakeResource) {
    let s = fake.state();
    assert!(s.errors.is_empty(), "fake upstream saw: {:?}", s.errors);
    assert!(s.live.is_empty(), "blocks left upstream: {:x?}", s.live);
}

/// A hit and a cached free on one thread against `release` on another.
fn hit_and_put_against(release: impl Fn(&CacheTier, &StreamCache) + Send + Sync + 'static) {
    loom::model(move || {
        let fake = FakeResource::new(None);
        let tier = small_tier(&fake, CacheConfig::default());
        let s = quiet(70);
        let cache = tier.for_stream(&s).unwrap();
        let warm = alloc(&cache, 4096);
        free(&cache, warm, 4096);
        let user = cache.clone();
        let worker = thread::spawn(move || {
            let a = alloc(&user, 4096);
            free(&user, a, 4096);
        });
        release(&tier, &cache);
        worker.join().unwrap();
        // The books match the upstream's: what is not cached went back.
        let st = cache.stats();
        assert_eq!(fake.state().used, st.cached_bytes);
        assert_eq!((st.live_bytes, st.cached_blocks <= 1), (0, true));
        drop(cache);
        drop(tier);
        all_back(&fake);
    });
}

#[test]
fn loom_cache_hit_and_put_against_a_flush() {
    hit_and_put_against(|_, cache| cache.flush().unwrap());
}

#[test]
fn loom_cache_hit_and_put_against_a_trim() {
    hit_and_put_against(|_, cache| cache.trim(0).unwrap());
}

#[test]
fn loom_cache_hit_and_put_against_a_tier_trim() {
    hit_and_put_against(|tier, _| tier.trim(0).unwrap());
}

#[test]
fn loom_cache_two_threads_taking_turns() {
    loom::model(|| {
        let fake = FakeResource::new(None);
        let tier = small_tier(&fake, CacheConfig::default());
        let s = quiet(71);
        let cache = tier.for_stream(&s).unwrap();
        let warm = alloc(&cache, 4096);
        free(&cache, warm, 4096);
        let user = cache.clone();
        let other = thread::spawn(move || alloc(&user, 4096));
        let mine = alloc(&cache, 4096);
        let theirs = other.join().unwrap();
        // One cached block: at most one of the two got it.
        assert_ne!(mine, theirs, "one block handed out twice");
        assert_eq!(cache.stats().hits, 1);
        free(&cache, mine, 4096);
        free(&cache, theirs, 4096);
        drop(cache);
        drop(tier);
        all_back(&fake);
    });
}

/// A buffer pins its cache (no reference count) on a hit while another
/// thread detaches the cache (`detach`): while the buffer lives the cache
/// must, and after the buffer's free it must be gone.
fn pinned_hit_against(detach: impl Fn(Arc<CacheTier>, &Stream) + Send + Sync + 'static) {
    loom::model(move || {
        let fake = FakeResource::new(None);
        let tier = small_tier(&fake, CacheConfig::default());
        let s = quiet(72);
        let cache = tier.for_stream(&s).unwrap();
        let warm = alloc(&cache, 4096);
        free(&cache, warm, 4096);
        let weak = Arc::downgrade(&cache);
        let res: Arc<dyn MemoryResource> = cache;
        let stream = s.clone();
        let user = thread::spawn(move || {
            let buf = DeviceBuffer::<u8>::new_with(4096, &res, &stream).unwrap();
            drop(res);
            buf
        });
        detach(tier, &s);
        let buf = user.join().unwrap();
        assert!(weak.upgrade().is_some(), "a buffer points into a freed cache");
        drop(buf);
        assert!(
            weak.upgrade().is_none(),
            "the detached cache outlived its last block"
        );
        all_back(&fake);
    });
}

#[test]
fn loom_detach_by_remove_stream_against_a_pinned_hit() {
    pinned_hit_against(|tier, s| {
        assert!(tier.remove_stream(s).unwrap());
    });
}

#[test]
fn loom_detach_by_the_tiers_drop_against_a_pinned_hit() {
    pinned_hit_against(|tier, _| drop(tier));
}

#[test]
fn loom_credit_is_taken_back_from_an_idle_stream() {
    loom::model(|| {
        let fake = FakeResource::new(None);
        // Room for two blocks of 256 bytes in all (granule 256).
        let cap = 512;
        let tier = small_tier(&fake, CacheConfig::default().total_cap(cap));
        let (sa, sb) = (quiet(73), quiet(74));
        let (a, b) = (tier.for_stream(&sa).unwrap(), tier.for_stream(&sb).unwrap());
        // A caches both blocks (the whole cap); B holds one block.
        let a1 = alloc(&a, 256);
        let a2 = alloc(&a, 256);
        free(&a, a1, 256);
        free(&a, a2, 256);
        let x = alloc(&b, 256);
        assert_eq!(tier.stats().leased_bytes, cap);
        let leased = Arc::new(AtomicUsize::new(0));
        let (user, seen) = (a.clone(), leased.clone());
        let shared = tier.shared.clone();
        // A's thread takes a block back (a hit: A keeps the credit as slack)
        // while B's free finds no room and takes A's idle credit.
        let hitter = thread::spawn(move || {
            let got = alloc(&user, 256);
            seen.store(shared.leased.load(Ordering::Relaxed), Ordering::Relaxed);
            got
        });
        free(&b, x, 256);
        assert!(tier.shared.leased.load(Ordering::Relaxed) <= cap);
        let got = hitter.join().unwrap();
        assert!(
            leased.load(Ordering::Relaxed) <= cap,
            "leased beyond the total cap"
        );
        // The books: each stream caches within its credit, and the credits
        // add up to the lease, within the cap.
        let st = tier.stats();
        assert!(st.leased_bytes <= cap);
        assert_eq!(
            st.streams.iter().map(|s| s.credit_bytes).sum::<usize>(),
            st.leased_bytes
        );
        for s in &st.streams {
            assert!(s.cached_bytes <= s.credit_bytes);
        }
        assert_eq!(fake.state().used, st.total.cached_bytes + 256);
        free(&a, got, 256);
        drop((a, b));
        drop(tier);
        all_back(&fake);
    });
}

#[test]
fn loom_credit_two_streams_race_for_the_last_granule() {
    loom::model(|| {
        let fake = FakeResource::new(None);
        // Room for one block of 256 bytes in all (granule 256).
        let cap = 256;
        let tier = small_tier(&fake, CacheConfig::default().total_cap(cap));
        let (sa, sb) = (quiet(75), quiet(76));
        let (a, b) = (tier.for_stream(&sa).unwrap(), tier.for_stream(&sb).unwrap());
        let (x, y) = (alloc(&a, 256), alloc(&b, 256));
        let other = b.clone();
        // Both free at once: one block fits under the cap, the other goes
        // upstream (or takes the first's credit back, when idle).
        let freer = thread::spawn(move || free(&other, y, 256));
        free(&a, x, 256);
        freer.join().unwrap();
        let st = tier.stats();
        assert!(
            st.leased_bytes <= cap,
            "leased {} beyond the cap",
            st.leased_bytes
        );
        assert_eq!(
            st.streams.iter().map(|s| s.credit_bytes).sum::<usize>(),
            st.leased_bytes
        );
        assert!(st.total.cached_bytes <= cap && st.total.cached_blocks <= 1);
        assert_eq!(fake.state().used, st.total.cached_bytes);
        drop((a, b));
        drop(tier);
        all_back(&fake);
    });
}
