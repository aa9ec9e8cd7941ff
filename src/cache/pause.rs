//! Pause points for the tests that replay a schedule: a test arms a named
//! point on one of its threads, that thread stops there until the test
//! releases it, and meanwhile the test drives other threads through the
//! window that the point opens. Only in test builds; a point that is not
//! armed on the calling thread does nothing (other tests' threads never
//! stop).

use std::cell::RefCell;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// One armed point: reached by the paused thread, released by the test.
#[derive(Default)]
pub(crate) struct Gate {
    /// (reached, released)
    state: Mutex<(bool, bool)>,
    changed: Condvar,
}

impl Gate {
    /// Waits until the armed thread stands at the point; `false` after
    /// `limit` without it.
    pub(crate) fn wait_reached(&self, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while !state.0 {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }

    /// Lets the paused thread go on.
    pub(crate) fn release(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.changed.notify_all();
    }

    fn stop_here(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.0 = true;
        self.changed.notify_all();
        while !state.1 {
            state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }
}

thread_local! {
    static ARMED: RefCell<Option<(&'static str, Arc<Gate>)>> = const { RefCell::new(None) };
}

/// Arms `name` on the calling thread, once: the next time this thread
/// passes that point it stops until the gate is released.
pub(crate) fn arm(name: &'static str) -> Arc<Gate> {
    let gate = Arc::new(Gate::default());
    ARMED.with(|a| *a.borrow_mut() = Some((name, Arc::clone(&gate))));
    gate
}

/// A pause point: stops here if the calling thread armed `name`.
pub(crate) fn point(name: &'static str) {
    let gate = ARMED.with(|a| {
        let mut armed = a.borrow_mut();
        match armed.as_ref() {
            Some((n, _)) if *n == name => armed.take().map(|(_, g)| g),
            _ => None,
        }
    });
    if let Some(gate) = gate {
        gate.stop_here();
    }
}
