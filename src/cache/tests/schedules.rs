//! Schedules that once broke the cache tier, replayed with pause points
//! (`crate::cache::pause`): a thread is stopped inside a window and other
//! threads are driven through it. Each test failed before its fix.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::fast::quiet;
use super::*;
use crate::cache::lock::{StreamLock, FIRST_GRANT, MAX_GRANT};
use crate::cache::{barrier, pause};

const PATIENCE: Duration = Duration::from_secs(20);

/// A thread that owned the lock checks that it still does, and is stopped
/// before it says it is inside. Another thread takes the lock away from it
/// and earns ownership itself, and enters. The stopped thread then goes
/// on: it must find that it lost ownership and wait for the new owner,
/// never enter beside it (once, a flag shared by all owners let the stale
/// owner clear the new owner's "inside" mark and then take the lock away
/// from it while it was inside).
#[test]
fn a_stale_owner_never_enters_beside_the_new_owner() {
    if !barrier::available() {
        println!("SKIP a_stale_owner_never_enters_beside_the_new_owner: no process-wide barrier here, so the lock is never owned");
        return;
    }
    // The value counts the threads inside.
    let lock = StreamLock::new(AtomicU32::new(0), true);
    let stale_entered = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let (gate_tx, gate_rx) = std::sync::mpsc::channel();
        let (lock, stale_entered) = (&lock, &stale_entered);
        let stale = scope.spawn(move || {
            for _ in 0..=FIRST_GRANT {
                drop(lock.lock());
            }
            assert!(lock.owned_here(), "the first thread did not become the owner");
            gate_tx.send(pause::arm("lock: owner checked")).unwrap();
            let guard = lock.lock();
            let inside = guard.fetch_add(1, Ordering::SeqCst) + 1;
            stale_entered.store(true, Ordering::SeqCst);
            guard.fetch_sub(1, Ordering::SeqCst);
            inside
        });
        let gate = gate_rx.recv().unwrap();
        assert!(
            gate.wait_reached(PATIENCE),
            "the first thread never reached its check"
        );
        // Take the lock until this thread owns it (revoking the stopped
        // owner on the way, which is not inside).
        let mut takes = 0;
        while !lock.owned_here() {
            drop(lock.lock());
            takes += 1;
            assert!(takes <= MAX_GRANT, "this thread never became the owner");
        }
        let guard = lock.lock();
        assert_eq!(guard.fetch_add(1, Ordering::SeqCst), 0);
        gate.release();
        // Give the stale owner every chance to come in wrongly.
        let end = Instant::now() + Duration::from_millis(300);
        while Instant::now() < end && !stale_entered.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let entered_beside = stale_entered.load(Ordering::SeqCst);
        guard.fetch_sub(1, Ordering::SeqCst);
        drop(guard);
        let inside = stale.join().unwrap();
        assert!(
            !entered_beside,
            "the stale owner entered while the new owner was inside"
        );
        assert_eq!(inside, 1, "two threads inside the lock at once");
    });
}

/// How the cache is let go of in [`detaching_races_a_hit`].
#[derive(Clone, Copy, Debug)]
enum LetGo {
    RemoveStream,
    DropTier,
}

/// Detaching a stream's cache (by `remove_stream` or by dropping the tier)
/// is stopped right after it marked the cache detached, and a buffer is
/// allocated from that cache meanwhile. Once the tier and the resource
/// handle are dropped, the buffer must still keep the cache alive (once,
/// the buffer took a cached block, counted as pinned on a cache that had
/// already decided it needed no reference to itself, and the buffer's
/// drop then used freed memory).
fn detaching_races_a_hit(how: LetGo, paused: bool) -> Result<(), String> {
    let fake = FakeResource::new(None);
    let tier = tier_over(&fake, CacheConfig::default());
    let s = quiet(40);
    let cache = tier.for_stream(&s).unwrap();
    let weak = Arc::downgrade(&cache);
    let res: Arc<dyn MemoryResource> = cache;
    // Warm: four cached blocks of the size the race allocates.
    let warm: Vec<_> = (0..4)
        .map(|_| DeviceBuffer::<u8>::new_with(4096, &res, &s).unwrap())
        .collect();
    drop(warm);
    let mut held = Vec::new();
    let (gate_tx, gate_rx) = std::sync::mpsc::channel();
    let done = Arc::new(AtomicBool::new(false));
    let detacher = std::thread::spawn({
        let s = s.clone();
        let done = Arc::clone(&done);
        move || {
            if paused {
                gate_tx.send(pause::arm("cache: detached")).unwrap();
            } else {
                drop(gate_tx);
            }
            let kept = match how {
                LetGo::RemoveStream => {
                    assert!(tier.remove_stream(&s).unwrap());
                    Some(tier)
                }
                LetGo::DropTier => {
                    drop(tier);
                    None
                }
            };
            done.store(true, Ordering::SeqCst);
            kept
        }
    });
    if let Ok(gate) = gate_rx.recv() {
        assert!(
            gate.wait_reached(PATIENCE),
            "detaching never reached its pause point"
        );
        held.push(DeviceBuffer::<u8>::new_with(4096, &res, &s).unwrap());
        gate.release();
    } else {
        while !done.load(Ordering::SeqCst) {
            held.push(DeviceBuffer::<u8>::new_with(4096, &res, &s).unwrap());
            if held.len() > 3 {
                held.remove(0);
            }
        }
    }
    let tier = detacher.join().unwrap();
    drop(tier);
    drop(res);
    if !held.is_empty() && weak.upgrade().is_none() {
        // Dropping these would use the freed cache.
        std::mem::forget(held);
        return Err(format!("{how:?}: a live buffer's stream cache is gone"));
    }
    drop(held);
    if weak.upgrade().is_some() {
        return Err(format!("{how:?}: the cache outlived its last buffer"));
    }
    if !fake.state().live.is_empty() {
        return Err(format!("{how:?}: blocks left in the upstream"));
    }
    fake.assert_clean();
    Ok(())
}

#[test]
fn removing_a_stream_races_a_hit() {
    detaching_races_a_hit(LetGo::RemoveStream, true).unwrap();
}

#[test]
fn dropping_the_tier_races_a_hit() {
    detaching_races_a_hit(LetGo::DropTier, true).unwrap();
}

/// The same races with no pause point, many times: whatever the schedule,
/// no buffer outlives its cache and nothing is left upstream.
#[test]
fn detaching_races_hits_unpaused() {
    for i in 0..200 {
        let how = if i % 2 == 0 {
            LetGo::RemoveStream
        } else {
            LetGo::DropTier
        };
        detaching_races_a_hit(how, false).unwrap();
    }
}
