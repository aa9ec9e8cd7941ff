//! A recording thread's side of the recorder: its ring of each recorder,
//! the push into it, and the markers sent to every live recorder.

use std::backtrace::Backtrace;
use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::{lock, NewRing, RawEvent, Shared, Window, LIVE, REGISTRY};
use crate::format::Action;
use crate::stream::Stream;
use crate::sync;
use crate::trace::ring::{ring, Producer};

/// The thread's side of one recorder.
struct Local {
    shared: Arc<Shared>,
    producer: Producer<RawEvent>,
    /// Where this thread's pushes into `producer` announce themselves.
    window: sync::Arc<Window>,
}

thread_local! {
    /// The rings this thread records into, one per recorder (nearly always
    /// one). Dropping it at thread exit drops the producers, which tells
    /// the writer that the rings are complete.
    static LOCAL: RefCell<Vec<Local>> = const { RefCell::new(Vec::new()) };
}

impl Shared {
    /// Hands `event` to this thread's ring of this recorder; never waits
    /// for the writer.
    #[inline]
    pub(crate) fn push(self: &Arc<Self>, event: RawEvent) {
        let done = LOCAL.try_with(|local| {
            let Ok(mut local) = local.try_borrow_mut() else {
                return Err(event);
            };
            match local.iter_mut().find(|l| l.shared.id == self.id) {
                Some(l) => {
                    if self.closing.enter(&l.window) {
                        #[cfg(test)]
                        crate::cache::pause::point("recorder: open, not pushed");
                        push_into(l, event);
                        self.closing.leave(&l.window);
                    } else {
                        self.late.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                }
                None => {
                    self.push_registering(&mut local, event);
                    Ok(())
                }
            }
        });
        match done {
            Ok(Ok(())) => {}
            // The thread's storage is gone (the thread is exiting) or in use.
            Ok(Err(event)) => self.push_fallback(event),
            Err(_) => self.push_fallback_lost(),
        }
    }

    /// The thread's first push into this recorder: registers its ring.
    #[cold]
    fn push_registering(self: &Arc<Self>, local: &mut Vec<Local>, event: RawEvent) {
        if !self.closing.enter_shared() {
            self.late.fetch_add(1, Ordering::Relaxed);
            return;
        }
        #[cfg(test)]
        crate::cache::pause::point("recorder: open, registering");
        let mut l = self.register(local);
        push_into(&mut l, event);
        local.push(l);
        self.closing.leave_shared();
    }

    /// Inside [`Closing::enter_shared`](super::Closing::enter_shared):
    /// the writer's last round takes the ring.
    fn register(self: &Arc<Self>, local: &mut Vec<Local>) -> Local {
        // Rings of finished recorders are of no use any more.
        local.retain(|l| !l.shared.closing.is_closed());
        let (producer, consumer) = ring(self.ring_events);
        let window = sync::Arc::new(Window::new());
        let thread = self.next_thread.fetch_add(1, Ordering::Relaxed);
        let current = std::thread::current();
        let name = match current.name() {
            Some(n) => n.to_string(),
            None => format!("{:?}", current.id()),
        };
        lock(&self.pending).push(NewRing {
            consumer,
            window: sync::Arc::clone(&window),
            thread,
            name,
        });
        Local {
            shared: Arc::clone(self),
            producer,
            window,
        }
    }

    #[cold]
    fn push_fallback(&self, event: RawEvent) {
        if !self.closing.enter_shared() {
            self.late.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut f = lock(&self.fallback);
        if f.len() < self.ring_events {
            f.push(event);
        } else {
            drop(f);
            self.late.fetch_add(1, Ordering::Relaxed);
        }
        self.closing.leave_shared();
    }

    #[cold]
    fn push_fallback_lost(&self) {
        // `try_with` failed: the event went with the closure; count it.
        self.late.fetch_add(1, Ordering::Relaxed);
    }

    /// Wakes the writer if it sleeps.
    #[cold]
    fn nudge(&self) {
        let _guard = lock(&self.control);
        self.wake.notify_one();
    }
}

#[inline]
fn push_into(l: &mut Local, event: RawEvent) {
    // Dropped (and counted) by the ring when full; the event (with its
    // backtrace, if any) is dropped here.
    let _ = l.producer.push(event);
    // Half full: make sure the writer comes soon (it may be sleeping for
    // a longer round).
    if l.producer.len_seen() == l.producer.capacity() / 2 && l.shared.sleeping.load(Ordering::Relaxed) {
        l.shared.nudge();
    }
}

/// Hands an event to `shared`, with a backtrace for an allocation when
/// `backtraces` is on.
#[inline]
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_into(
    shared: &Arc<Shared>,
    backtraces: bool,
    t_ns: u64,
    action: Action,
    device: u32,
    stream: Option<u64>,
    bytes: usize,
    addr: usize,
) {
    let backtrace = match action {
        Action::Allocate | Action::FailedAllocate if backtraces => Some(Box::new(Backtrace::force_capture())),
        _ => None,
    };
    shared.push(RawEvent {
        t_ns,
        action,
        device,
        stream,
        bytes: bytes as u64,
        addr: addr as u64,
        backtrace,
    });
}

/// Sends a marker (flush, trim, capture) to every live recorder. One
/// relaxed load when no recorder is alive.
#[inline]
pub(crate) fn note(action: Action, device: usize, stream: Option<&Stream>, bytes: usize) {
    if LIVE.load(Ordering::Relaxed) != 0 {
        note_slow(action, device, stream, bytes);
    }
}

#[cold]
fn note_slow(action: Action, device: usize, stream: Option<&Stream>, bytes: usize) {
    let live: Vec<Arc<Shared>> = lock(&REGISTRY)
        .iter()
        .filter_map(Weak::upgrade)
        .filter(|s| !s.closing.is_closed())
        .collect();
    for shared in live {
        let t_ns = shared.now_ns();
        shared.push(RawEvent {
            t_ns,
            action,
            device: device as u32,
            stream: stream.map(|s| s.as_raw() as u64),
            bytes: bytes as u64,
            addr: 0,
            backtrace: None,
        });
    }
}
