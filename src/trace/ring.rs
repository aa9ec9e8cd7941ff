//! A bounded single-producer, single-consumer ring: each recording thread
//! pushes its events into a ring of its own, and the recorder's writer
//! thread drains them all.
//!
//! # Why it is sound
//!
//! A ring has `N` slots (a power of two) and two counters that only grow:
//! `head`, the number of events pushed, and `tail`, the number drained.
//! Event `i` lives in slot `i mod N`. There is exactly one [`Producer`] and
//! one [`Consumer`] per ring (made together by [`ring`], neither `Clone`,
//! each used through `&mut self`), so `head` has one writer (the producer)
//! and `tail` has one writer (the consumer).
//!
//! * The slots `tail..head` hold events and belong to the consumer; the
//!   slots `head..tail + N` are free and belong to the producer. The
//!   invariant `tail <= head <= tail + N` holds at every point: the
//!   producer advances `head` only after it saw `head < tail' + N` for a
//!   `tail'` it loaded, and `tail' <= tail` (tail only grows); the consumer
//!   advances `tail` only up to a `head'` it loaded, and `head' <= head`.
//! * The producer writes slot `head mod N` only when `head - tail' < N`, so
//!   the slot is not in `tail'..head` and, since `tail' <= tail`, not in
//!   `tail..head` either: the consumer is not reading it. The consumer read
//!   it (if ever) before it stored the `tail` that made it free; that store
//!   is `Release` and the producer's load of it `Acquire`, so that read
//!   happens before the producer's write.
//! * The producer publishes event `i` by storing `head = i + 1` with
//!   `Release` after writing the slot; the consumer loads `head` with
//!   `Acquire` before it reads slots below it, so it reads what was written.
//! * Each event is moved out of its slot once (the consumer's `tail`
//!   advances past it right after), and the events still in the ring when
//!   both sides are gone are dropped by the ring's own `Drop`, which runs
//!   with no other access possible.
//!
//! The producer keeps the last `tail` it loaded and loads `tail` again only
//! when the ring looks full, so a push is a slot write and one `Release`
//! store (a plain store on x86), with no read-modify-write. A push into a
//! full ring does not wait: the event is dropped and counted.
//!
//! The schedule tests (`tests.rs`) stop the consumer inside its read window
//! and drive the producer against it; the loom models at the end of this
//! file run a producer against the consumer under every interleaving (with
//! wrap-around, a full ring and the final drain), checking each slot access
//! against the happens-before order.

use std::mem::MaybeUninit;

// loom's primitives in the model-checked build (`models` below).
use crate::sync::{Arc, AtomicBool, AtomicU64, Ordering, UnsafeCell};

/// A value on a cache line of its own, so that the producer's and the
/// consumer's counters do not share one.
#[repr(align(128))]
struct Padded<T>(T);

struct Shared<T> {
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    mask: u64,
    /// Events pushed; written by the producer only.
    head: Padded<AtomicU64>,
    /// Events drained; written by the consumer only.
    tail: Padded<AtomicU64>,
    /// Pushes refused because the ring was full; written by the producer.
    dropped: AtomicU64,
    /// Set (`Release`) when the producer is dropped, after its last push.
    producer_gone: AtomicBool,
}

// SAFETY: the slots are accessed as the module docs argue: a slot is
// written only by the one producer while it is free and read only by the
// one consumer while it holds an event, with the `head`/`tail`
// release/acquire pairs ordering the two. `T: Send` because events move
// from the producer's thread to the consumer's.
unsafe impl<T: Send> Sync for Shared<T> {}
// SAFETY: as above; the ring owns its events, which are `Send`.
unsafe impl<T: Send> Send for Shared<T> {}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // Both sides are gone (this is the last `Arc`): drop the events
        // that were never drained.
        // (Relaxed: `&mut self`, no other access exists.)
        let head = self.head.0.load(Ordering::Relaxed);
        let tail = self.tail.0.load(Ordering::Relaxed);
        for i in tail..head {
            let slot = self.slots[(i & self.mask) as usize].get();
            // SAFETY: slots `tail..head` hold initialised events that were
            // never moved out (the consumer advances `tail` past every
            // event it reads); nothing else accesses them now.
            unsafe { (*slot).assume_init_drop() };
        }
    }
}

/// The pushing side of a ring (one per ring).
pub(crate) struct Producer<T> {
    ring: Arc<Shared<T>>,
    /// `head` as this side last stored it.
    head: u64,
    /// `tail` as this side last loaded it (at most the real one).
    tail_seen: u64,
}

/// The draining side of a ring (one per ring).
pub(crate) struct Consumer<T> {
    ring: Arc<Shared<T>>,
    /// `tail` as this side last stored it.
    tail: u64,
}

/// A ring of `capacity` slots (rounded up to a power of two, at least 2).
pub(crate) fn ring<T: Send>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    let n = capacity.max(2).next_power_of_two();
    let slots: Box<[UnsafeCell<MaybeUninit<T>>]> =
        (0..n).map(|_| UnsafeCell::new(MaybeUninit::uninit())).collect();
    // Touch every page now, so that pushes never take a page fault for
    // memory the allocator handed out untouched.
    for slot in slots.iter() {
        // SAFETY: writing zero bytes over a slot that holds no value (all
        // are uninitialised here, and `MaybeUninit` accepts any bytes); the
        // ring is not shared yet.
        unsafe { std::ptr::write_bytes((*slot.get()).as_mut_ptr(), 0, 1) };
    }
    let ring = Arc::new(Shared {
        slots,
        mask: n as u64 - 1,
        head: Padded(AtomicU64::new(0)),
        tail: Padded(AtomicU64::new(0)),
        dropped: AtomicU64::new(0),
        producer_gone: AtomicBool::new(false),
    });
    (
        Producer {
            ring: Arc::clone(&ring),
            head: 0,
            tail_seen: 0,
        },
        Consumer { ring, tail: 0 },
    )
}

impl<T: Send> Producer<T> {
    /// Slots in the ring.
    pub(crate) fn capacity(&self) -> u64 {
        self.ring.mask + 1
    }

    /// Events held now, as this side knows (an upper bound).
    #[inline]
    pub(crate) fn len_seen(&self) -> u64 {
        self.head - self.tail_seen
    }

    /// Whether the ring has room for one more event; loads the consumer's
    /// `tail` only when the ring looked full.
    #[inline]
    pub(crate) fn has_room(&mut self) -> bool {
        if self.head - self.tail_seen <= self.ring.mask {
            return true;
        }
        self.tail_seen = self.ring.tail.0.load(Ordering::Acquire);
        self.head - self.tail_seen <= self.ring.mask
    }

    /// Pushes `value`; hands it back (and counts it as dropped) when the
    /// ring is full. Never waits.
    #[inline]
    pub(crate) fn push(&mut self, value: T) -> Result<(), T> {
        if !self.has_room() {
            self.count_dropped(1);
            return Err(value);
        }
        let slot = &self.ring.slots[(self.head & self.ring.mask) as usize];
        // SAFETY: `head - tail_seen < N` (checked above) with
        // `tail_seen <= tail`: the slot is free and owned by this, the only
        // producer (module docs); the consumer's last read of it happened
        // before the `tail` store this side acquired.
        unsafe { (*slot.get()).write(value) };
        self.head += 1;
        self.ring.head.0.store(self.head, Ordering::Release);
        Ok(())
    }

    /// Counts `n` events this side dropped without pushing.
    pub(crate) fn count_dropped(&self, n: u64) {
        self.ring.dropped.fetch_add(n, Ordering::Relaxed);
    }
}

impl<T: Send> Consumer<T> {
    /// Moves every published event out, oldest first, into `f`; returns
    /// how many.
    pub(crate) fn drain(&mut self, mut f: impl FnMut(T)) -> u64 {
        let head = self.ring.head.0.load(Ordering::Acquire);
        let start = self.tail;
        while self.tail < head {
            let slot = &self.ring.slots[(self.tail & self.ring.mask) as usize];
            // SAFETY: `tail < head` (acquired above): the slot holds the
            // event the producer published before its `head` store, and no
            // one else reads it (module docs).
            let value = unsafe { (*slot.get()).assume_init_read() };
            #[cfg(test)]
            crate::cache::pause::point("ring: read, tail not stored");
            // The slot is free once `tail` passes it: store before handing
            // the value on, so a panic in `f` cannot leave it to be read
            // (and dropped) twice.
            self.tail += 1;
            self.ring.tail.0.store(self.tail, Ordering::Release);
            f(value);
        }
        self.tail - start
    }

    /// Pushes the producer refused so far.
    pub(crate) fn dropped(&self) -> u64 {
        self.ring.dropped.load(Ordering::Relaxed)
    }

    /// Whether the producer is gone: after `true`, one more `drain` gets
    /// every event it ever pushed (its last `head` store happened before
    /// the flag's, which this load acquires).
    pub(crate) fn producer_gone(&self) -> bool {
        self.ring.producer_gone.load(Ordering::Acquire)
    }
}

impl<T> Drop for Producer<T> {
    fn drop(&mut self) {
        self.ring.producer_gone.store(true, Ordering::Release);
    }
}

/// Model-checked (`ci/loom.sh`): loom runs these under every interleaving
/// of the two sides' atomic operations (up to the preemption bound), with
/// every load free to return any store the memory model allows, and checks
/// each slot access (a `crate::sync::UnsafeCell`) against the
/// happens-before order: a producer writing a slot the consumer may still
/// be reading, or a consumer reading a slot before its event was published,
/// fails the model. With the `Release` store of `head` made `Relaxed`, the
/// first model reports "Causality violation: Concurrent write accesses to
/// `UnsafeCell`"; with that of `tail`, both do; with the producer's
/// `producer_gone` store `Relaxed`, the final drain misses an event.
#[cfg(all(loom, test))]
mod models {
    use loom::thread;

    use super::ring;
    use crate::sync::{Arc, AtomicUsize, Ordering};

    /// Two slots and four pushes: the ring wraps around, may be full
    /// (pushes refused and counted), and the consumer drains while the
    /// producer pushes, then everything left once the producer is gone.
    #[test]
    fn loom_ring_producer_against_the_consumer() {
        loom::model(|| {
            let (mut producer, mut consumer) = ring::<u64>(2);
            let drainer = thread::spawn(move || {
                let mut got = Vec::new();
                while !consumer.producer_gone() {
                    consumer.drain(|v| got.push(v));
                    thread::yield_now();
                }
                consumer.drain(|v| got.push(v));
                (got, consumer.dropped())
            });
            let mut accepted = Vec::new();
            for i in 0..4u64 {
                if producer.push(i).is_ok() {
                    accepted.push(i);
                }
            }
            drop(producer);
            let (got, dropped) = drainer.join().unwrap();
            assert_eq!(got, accepted, "every accepted event once, in order");
            assert_eq!(dropped as usize + accepted.len(), 4, "every refused push counted");
        });
    }

    /// An event that is dropped (not moved out).
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Events never drained are dropped by the ring once both sides are
    /// gone, and a drained one by whoever took it: each exactly once.
    #[test]
    fn loom_ring_events_left_behind_are_dropped_once() {
        loom::model(|| {
            let drops = Arc::new(AtomicUsize::new(0));
            let (mut producer, mut consumer) = ring::<Counted>(2);
            let drainer = thread::spawn(move || {
                consumer.drain(drop);
            });
            for _ in 0..3 {
                let _ = producer.push(Counted(drops.clone()));
            }
            drop(producer);
            drainer.join().unwrap();
            assert_eq!(drops.load(Ordering::Relaxed), 3);
        });
    }
}
