//! Device times of recorded events ([`RecordOptions::device_times`]): a
//! timing event recorded on the event's stream when the event is recorded,
//! read by the writer thread once the device has reached it.
//!
//! Each device has an origin: a timing event recorded just before the
//! device's first timed event, with device time 0. An event's device time
//! is its origin's plus the elapsed time between the two. The vendor gives
//! elapsed times in milliseconds as an `f32`, whose resolution falls with
//! the time elapsed; so an event completed more than [`REBASE_MS`] after
//! its origin becomes the device's new origin, and later events are
//! measured from it.
//!
//! [`RecordOptions::device_times`]: crate::trace::RecordOptions::device_times

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::backend::Backend;
use crate::error::{Error, VendorCode};
use crate::stream::{Event, Stream};
use crate::Active;

/// Both vendors' code for "not completed yet" (`cudaErrorNotReady`,
/// `hipErrorNotReady`).
const NOT_READY: VendorCode = VendorCode(600);

/// An event completed this long after its device's origin becomes the new
/// origin (an `f32` of milliseconds near 1000 resolves 0.06 µs).
pub(crate) const REBASE_MS: f32 = 1000.0;

/// Timing events kept for reuse per device, at most.
const SPARE_KEPT: usize = 4096;

/// An event whose device time is known: of `handle` on `device`, recorded
/// at host time `t_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reached {
    pub(crate) device: u32,
    pub(crate) handle: u64,
    pub(crate) t_ns: u64,
    pub(crate) device_ns: i64,
}

struct Pending {
    event: Event,
    device: u32,
    handle: u64,
    t_ns: u64,
}

#[derive(Default)]
struct Inner {
    /// Each device's origin: a completed (or the first recorded) timing
    /// event, with its own device time.
    origins: HashMap<u32, (Arc<Event>, i64)>,
    /// Recorded, not yet read, in the order they were recorded.
    pending: VecDeque<Pending>,
    /// Completed events, per device, to record again.
    spare: HashMap<u32, Vec<Event>>,
    /// The host time of each stream's last timing event.
    last: HashMap<(u32, u64), u64>,
}

/// The device times of one recorder.
pub(crate) struct DeviceClock {
    inner: Mutex<Inner>,
    /// A stream gets a timing event at most once per this many host
    /// nanoseconds.
    interval_ns: u64,
    /// Events that should have had a timing event and have none: it could
    /// not be recorded (a runtime error) or read, or the device had not
    /// reached it when the recording finished. (Capturing streams' events
    /// and the ones the interval skips are not counted.)
    missed: AtomicU64,
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    // No code panics while holding this lock; the data stays consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn is_not_ready(e: &Error) -> bool {
    matches!(e, Error::Vendor { code, .. } if *code == NOT_READY)
}

impl DeviceClock {
    pub(crate) fn new(interval_ns: u64) -> DeviceClock {
        DeviceClock {
            inner: Mutex::new(Inner::default()),
            interval_ns,
            missed: AtomicU64::new(0),
        }
    }

    /// Records a timing event at the current end of `stream`'s queue, for
    /// the event recorded at host time `t_ns`, unless the stream had one
    /// less than the interval before. The caller makes the stream's device
    /// current where the handle needs it (the legacy default stream). A
    /// capturing stream's event gets none (its queue is a graph's, not the
    /// device's).
    pub(crate) fn mark(&self, stream: &Stream, t_ns: u64) {
        #[cfg(test)]
        if stream.fake_domain().is_some() {
            // Fake streams have no queue to time.
            self.missed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let device = stream.device();
        let ordinal = device.ordinal() as u32;
        let handle = stream.as_raw() as u64;
        {
            let mut g = lock(&self.inner);
            match g.last.get(&(ordinal, handle)) {
                Some(&last) if t_ns.saturating_sub(last) < self.interval_ns => return,
                _ => {}
            }
            g.last.insert((ordinal, handle), t_ns);
        }
        if !matches!(stream.capturing(), Ok(None)) {
            return;
        }
        // The events to record, taken from the spares under the lock; the
        // runtime is called outside it.
        let (origin, event) = {
            let mut g = lock(&self.inner);
            let need_origin = !g.origins.contains_key(&ordinal);
            let spare = g.spare.entry(ordinal).or_default();
            let origin = if need_origin { Some(spare.pop()) } else { None };
            (origin, spare.pop())
        };
        let make = |e: Option<Event>| match e {
            Some(e) => Ok(e),
            None => Event::with_timing(&device),
        };
        let recorded = (|| {
            let origin = match origin {
                Some(o) => {
                    let o = make(o)?;
                    o.record(stream)?;
                    Some(o)
                }
                None => None,
            };
            let event = make(event)?;
            event.record(stream)?;
            Ok::<_, Error>((origin, event))
        })();
        match recorded {
            Ok((origin, event)) => {
                let mut g = lock(&self.inner);
                if let Some(o) = origin {
                    g.origins.entry(ordinal).or_insert((Arc::new(o), 0));
                }
                g.pending.push_back(Pending {
                    event,
                    device: ordinal,
                    handle,
                    t_ns,
                });
            }
            Err(_) => {
                self.missed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The events the devices have reached since the last call, in the
    /// order they were recorded; stops at the first one not reached yet.
    /// The runtime is asked outside the lock, so that recording threads
    /// never wait for it.
    pub(crate) fn harvest(&self, out: &mut Vec<Reached>) {
        let (mut pending, mut origins) = {
            let mut g = lock(&self.inner);
            if g.pending.is_empty() {
                return;
            }
            (std::mem::take(&mut g.pending), g.origins.clone())
        };
        let mut done: Vec<(u32, Event)> = Vec::new();
        let mut current: Option<u32> = None;
        while let Some(front) = pending.front() {
            let device = front.device;
            let Some((origin, at_ns)) = origins.get(&device).cloned() else {
                // An origin whose recording failed: this event cannot be timed.
                pending.pop_front();
                self.missed.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            if current != Some(device) {
                // The runtime reads an event on any thread; making its
                // device current (on the writer's own thread) is for
                // runtimes that want it.
                let _ = Active::set_device(device as usize);
                current = Some(device);
            }
            match origin.elapsed_ms(&front.event) {
                Ok(ms) => {
                    let device_ns = at_ns + (f64::from(ms) * 1e6).round() as i64;
                    let Some(p) = pending.pop_front() else { break };
                    out.push(Reached {
                        device,
                        handle: p.handle,
                        t_ns: p.t_ns,
                        device_ns,
                    });
                    if ms > REBASE_MS {
                        // A completed event far from the origin: the new origin.
                        origins.insert(device, (Arc::new(p.event), device_ns));
                    } else {
                        done.push((device, p.event));
                    }
                }
                Err(e) if is_not_ready(&e) => break,
                Err(_) => {
                    pending.pop_front();
                    self.missed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let mut g = lock(&self.inner);
        // What was not reached goes back ahead of what came meanwhile.
        while let Some(p) = pending.pop_back() {
            g.pending.push_front(p);
        }
        for (device, o) in origins {
            // New origins; an old one is dropped with its last `Arc`.
            g.origins.insert(device, o);
        }
        for (device, e) in done {
            let kept = g.spare.entry(device).or_default();
            if kept.len() < SPARE_KEPT {
                kept.push(e);
            }
        }
    }

    /// Gives up the events not reached yet (the recording finishes);
    /// returns how many events in all got no device time.
    pub(crate) fn finish(&self) -> u64 {
        let mut g = lock(&self.inner);
        let left = g.pending.len() as u64;
        g.pending.clear();
        g.spare.clear();
        g.origins.clear();
        self.missed.fetch_add(left, Ordering::Relaxed) + left
    }

    /// Events with no device time so far.
    pub(crate) fn missed(&self) -> u64 {
        self.missed.load(Ordering::Relaxed)
    }
}
