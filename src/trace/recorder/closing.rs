//! Closing the recorder without losing the event of a push that found it
//! open: the handshake between the pushes and the writer's last round,
//! and its loom models.

use crate::sync;

// Closing without losing an event
//
// A thread that finds the recorder open and then pushes must not push
// after the writer's last drain: its event would be neither written nor
// counted, and a ring it registered then would never be taken. So a push
// announces itself before it looks at `closed`, and the writer's last
// round, after setting `closed`, waits for every push it can see announced
// before it drains for the last time.
//
// A push into the thread's own ring announces itself in that ring's
// `Window`: a counter only that thread writes, on a cache line of its own,
// odd from before the push looks at `closed` until it has pushed. A push
// with no ring to push into (it registers one, or the thread's storage is
// gone and the event goes to `fallback`) announces itself in `entering`,
// a count shared by all threads: such pushes are rare.
//
//   push:    window += 1 (Release) | entering += 1
//            F1: fence(SeqCst)
//            load `closed`; if open, push (ring / `pending` / `fallback`)
//            window += 1 (Release) | entering -= 1 (Release)
//   writer:  store `closed`
//            F2: fence(SeqCst)
//            wait until `entering` is 0 (Acquire loads)
//            take `pending`; for each ring, load its window (Acquire) and,
//            if odd, wait until it changes (Acquire loads)
//            drain every ring and `fallback` for the last time
//
// Why every event is written or counted. All SeqCst fences lie in one
// total order S. Take a push with announcement A, fence F1, and the
// writer's F2 (the writer's loads are on its own thread, after F2).
// * F2 before F1 in S: the `closed` store is sequenced before F2 and the
//   push's load after F1, so the load sees it (the fence rule of the
//   memory model: a load after the later of two SeqCst fences sees a store
//   before the earlier, or a later store). The push is refused and counted
//   in `late`.
// * F1 before F2 in S: by the same rule, the writer's loads see A or a
//   later store of the same counter.
//   - `entering`: in the count's modification order a push's subtraction
//     comes after its addition, so a 0 at or after A comes after this
//     push's subtraction. Every change of the count is a read-modify-write,
//     so that 0 lies in the release sequence of the subtraction, and the
//     writer's Acquire load synchronises with it: the ring put in `pending`
//     or the event put in `fallback` happens before the writer takes them.
//   - a window: the writer reads v at or after A. Even: a Release store
//     the thread made after this push ended. Odd: a push is inside (this
//     one or a later one), and the writer waits for a later value, which
//     the thread stores (Release) after that push ended. The Acquire load
//     synchronises with it, so this push's `head` store happens before the
//     last drain, which reads it.
//   A push of that thread announced after the value the writer read sees
//   `closed`: had its F1 come before F2, the writer's load would have seen
//   its announcement or later, not an earlier value. So the writer waits
//   for at most one push per ring, and never for a push it cannot see.
//
// On the fast path this costs two plain stores (Release is a plain store
// on x86), a load and a fence: no lock and no cache line shared with other
// threads. The models at the end of this file run both kinds of push
// against the writer's close under loom (`ci/loom.sh`); the schedule tests
// (`src/trace/tests.rs`) stop a real push inside its window while `finish`
// runs.

/// One ring's announcements (see "Closing" above): odd while its thread is
/// inside a push. Written by that thread only.
#[repr(align(128))]
pub(super) struct Window(sync::AtomicU64);

impl Window {
    pub(super) fn new() -> Window {
        Window(sync::AtomicU64::new(0))
    }

    /// Enters or leaves the window: its thread only.
    #[inline]
    pub(super) fn step(&self) {
        // Relaxed: this thread is the only writer, so it reads its own
        // last store.
        let v = self.0.load(sync::Ordering::Relaxed);
        self.0.store(v + 1, sync::Ordering::Release);
    }

    /// The writer, after [`Closing::close`]: waits until the push inside
    /// the window now (if any) has left it.
    pub(super) fn wait_quiet(&self) {
        let v = self.0.load(sync::Ordering::Acquire);
        if v % 2 == 1 {
            while self.0.load(sync::Ordering::Acquire) == v {
                sync::yield_now();
            }
        }
    }
}

/// Whether the recorder is closed, and the handshake that closes it
/// without losing a push (see "Closing" above).
pub(super) struct Closing {
    closed: sync::AtomicBool,
    /// Pushes inside their window that have no ring of their own.
    entering: sync::AtomicUsize,
}

impl Closing {
    pub(super) fn new() -> Closing {
        Closing {
            closed: sync::AtomicBool::new(false),
            entering: sync::AtomicUsize::new(0),
        }
    }

    /// Whether it is closed, as a hint (no ordering).
    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(sync::Ordering::Relaxed)
    }

    /// A push into `window`'s ring enters: `true` if open, and then the
    /// push ends with [`leave`](Closing::leave); `false` if closed.
    #[inline]
    pub(super) fn enter(&self, window: &Window) -> bool {
        window.step();
        sync::fence_seq_cst();
        if self.closed.load(sync::Ordering::Relaxed) {
            window.step();
            return false;
        }
        true
    }

    #[inline]
    pub(super) fn leave(&self, window: &Window) {
        window.step();
    }

    /// A push with no ring of its own enters: as [`enter`](Closing::enter),
    /// ended with [`leave_shared`](Closing::leave_shared).
    pub(super) fn enter_shared(&self) -> bool {
        self.entering.fetch_add(1, sync::Ordering::Relaxed);
        sync::fence_seq_cst();
        if self.closed.load(sync::Ordering::Relaxed) {
            self.entering.fetch_sub(1, sync::Ordering::Release);
            return false;
        }
        true
    }

    pub(super) fn leave_shared(&self) {
        self.entering.fetch_sub(1, sync::Ordering::Release);
    }

    /// The writer's last round, on the writer thread: closes, and waits for
    /// the pushes with no ring of their own. The caller then waits on each
    /// ring's window ([`Window::wait_quiet`]) before its last drain.
    pub(super) fn close(&self) {
        self.closed.store(true, sync::Ordering::Relaxed);
        sync::fence_seq_cst();
        while self.entering.load(sync::Ordering::Acquire) != 0 {
            sync::yield_now();
        }
    }
}

/// Model-checked (`ci/loom.sh`): the closing handshake ("Closing" above),
/// the real `Closing`, `Window` and ring, under every interleaving of a
/// recording thread and the writer's last round, with every load free to
/// return any store the memory model allows. Each event must be drained or
/// refused (counted), never left behind.
#[cfg(all(loom, test))]
mod models {
    use loom::thread;

    use super::{Closing, Window};
    use crate::sync::{Arc, AtomicUsize, Mutex, Ordering};
    use crate::trace::ring::ring;

    /// Two pushes into a thread's ring against the writer's close, its
    /// wait on the window and its last drain: the first push may land
    /// before, inside or after the close, the second after the writer
    /// looked at the window.
    #[test]
    fn loom_recorder_a_push_into_a_ring_is_drained_or_refused() {
        loom::model(|| {
            let closing = Arc::new(Closing::new());
            let window = Arc::new(Window::new());
            let (mut producer, mut consumer) = ring::<u64>(2);
            let writer = {
                let (closing, window) = (Arc::clone(&closing), Arc::clone(&window));
                thread::spawn(move || {
                    closing.close();
                    window.wait_quiet();
                    let mut got = 0;
                    consumer.drain(|_| got += 1);
                    got
                })
            };
            let mut refused = 0;
            for event in 0..2u64 {
                if closing.enter(&window) {
                    producer.push(event).unwrap(); // ok: a loom model (test code), two events fit
                    closing.leave(&window);
                } else {
                    refused += 1;
                }
            }
            let drained = writer.join().unwrap(); // ok: a loom model (test code), a failure is the finding
            assert_eq!(drained + refused, 2, "an event neither drained nor refused");
        });
    }

    /// A push with no ring of its own (a registration, the fallback)
    /// against the writer's close and its take of what was handed over.
    #[test]
    fn loom_recorder_a_push_without_a_ring_is_taken_or_refused() {
        loom::model(|| {
            let closing = Arc::new(Closing::new());
            let pending = Arc::new(Mutex::new(Vec::new()));
            let refused = Arc::new(AtomicUsize::new(0));
            let pushers: Vec<_> = (0..2u64)
                .map(|event| {
                    let (closing, pending, refused) =
                        (Arc::clone(&closing), Arc::clone(&pending), Arc::clone(&refused));
                    thread::spawn(move || {
                        if closing.enter_shared() {
                            pending.lock().unwrap().push(event); // ok: a loom model (test code)
                            closing.leave_shared();
                        } else {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            closing.close();
            let taken = std::mem::take(&mut *pending.lock().unwrap()).len(); // ok: a loom model (test code)
            for p in pushers {
                p.join().unwrap(); // ok: a loom model (test code), a failure is the finding
            }
            assert_eq!(
                taken + refused.load(Ordering::Relaxed),
                2,
                "a push neither taken nor refused"
            );
        });
    }
}
