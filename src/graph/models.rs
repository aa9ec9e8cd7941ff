//! Model-checked tests of the deferred-free queue (`RUSTFLAGS="--cfg
//! loom"`, see `ci/loom.sh` and the argument in `deferred.rs`): a free that
//! waits for two graphs, each destroyed on a thread of its own (as the
//! runtime calls its release callbacks), while another thread drains the
//! queue. Loom runs every interleaving (up to the preemption bound) and
//! checks that loom's `Arc` of the slot is never leaked.

use std::ffi::c_void;

use loom::thread;

use super::deferred::{defer_with, queue, Deferred};
use super::*;
use crate::backend::GraphRelease;
use crate::sync::{self, AtomicBool, AtomicUsize};

/// A fake graph's registration: the graph is destroyed at once, on a
/// thread of its own, which marks it gone and then calls the release
/// callback (as the runtime does), while `defer_with` goes on.
fn destroyed_on_its_own_thread(
    gone: sync::Arc<AtomicBool>,
    release: GraphRelease,
    data: *mut c_void,
) -> thread::JoinHandle<()> {
    let data = data as usize;
    thread::spawn(move || {
        gone.store(true, sync::Ordering::Relaxed);
        // SAFETY: the callback and its data, registered once by
        // `defer_with`, called once.
        unsafe { release(data as *mut c_void) };
    })
}

fn fake_stream() -> Stream {
    Stream::fake(0xD000, 0)
}

#[test]
fn loom_deferred_free_waits_for_every_graph_and_runs_once() {
    loom::model(|| {
        let gone: Vec<sync::Arc<AtomicBool>> =
            (0..2).map(|_| sync::Arc::new(AtomicBool::new(false))).collect();
        let done = sync::Arc::new(AtomicUsize::new(0));
        let (seen, count) = (gone.clone(), done.clone());
        let item = Deferred {
            stream: fake_stream(),
            users: Vec::new(),
            free: Box::new(move |_| {
                // Everything each graph's release did happens before the free.
                assert!(
                    seen.iter().all(|g| g.load(sync::Ordering::Relaxed)),
                    "a deferred free ran before a graph let go of it"
                );
                count.fetch_add(1, sync::Ordering::Relaxed);
                Ok(())
            }),
        };
        // Another thread drains the queue meanwhile.
        let drainer = thread::spawn(|| reclaim_graph_frees().unwrap()); // ok: a loom model (test code), a failure is the finding
        let mut destructors = Vec::new();
        defer_with(item, vec![0usize, 1], |g, release, data| {
            destructors.push(destroyed_on_its_own_thread(gone[g].clone(), release, data));
            Ok(())
        })
        .unwrap(); // ok: a loom model (test code), a failure is the finding
        for d in destructors {
            d.join().unwrap(); // ok: a loom model (test code), a failure is the finding
        }
        let drained = drainer.join().unwrap(); // ok: a loom model (test code), a failure is the finding
        let here = reclaim_graph_frees().unwrap(); // ok: a loom model (test code), a failure is the finding
        assert_eq!(drained + here, 1);
        assert_eq!(done.load(sync::Ordering::Relaxed), 1);
        assert_eq!(pending_graph_frees(), 0);
        assert_eq!(queue_len(), (0, 0));
    });
}

#[test]
fn loom_deferred_free_whose_registration_fails_never_runs() {
    loom::model(|| {
        let gone = sync::Arc::new(AtomicBool::new(false));
        let dropped = sync::Arc::new(AtomicUsize::new(0));
        /// Counts its drop (the free's closure is dropped exactly once).
        struct Witness(sync::Arc<AtomicUsize>);
        impl Drop for Witness {
            fn drop(&mut self) {
                self.0.fetch_add(1, sync::Ordering::Relaxed);
            }
        }
        let witness = Witness(dropped.clone());
        let item = Deferred {
            stream: fake_stream(),
            users: Vec::new(),
            free: Box::new(move |_| {
                let _keep = &witness;
                panic!("a free whose registration failed ran");
            }),
        };
        // The first graph takes it (and is destroyed concurrently), the
        // second refuses it.
        let mut destructors = Vec::new();
        let r = defer_with(item, vec![0usize, 1], |g, release, data| {
            if g == 1 {
                return Err(Error::invalid("refused"));
            }
            destructors.push(destroyed_on_its_own_thread(gone.clone(), release, data));
            Ok(())
        });
        assert!(r.is_err());
        for d in destructors {
            d.join().unwrap(); // ok: a loom model (test code), a failure is the finding
        }
        assert_eq!(reclaim_graph_frees().unwrap(), 0); // ok: a loom model (test code), a failure is the finding
        assert_eq!(
            dropped.load(sync::Ordering::Relaxed),
            1,
            "the free was not dropped once"
        );
        assert_eq!(pending_graph_frees(), 0);
    });
}

/// (ready items, `ready_len`) of the queue.
fn queue_len() -> (usize, usize) {
    let q = queue();
    let ready = q.ready.lock().unwrap().len(); // ok: a loom model (test code), a failure is the finding
    (ready, q.ready_len.load(sync::Ordering::Relaxed))
}
