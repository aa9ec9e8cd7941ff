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
use std::sync::{Mutex, MutexGuard};

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

struct Origin {
    event: Event,
    /// The origin's own device time.
    at_ns: i64,
}

#[derive(Default)]
struct Inner {
    origins: HashMap<u32, Origin>,
    /// Recorded, not yet read, in the order they were recorded.
    pending: VecDeque<Pending>,
    /// Completed events, per device, to record again.
    spare: HashMap<u32, Vec<Event>>,
}

/// The device times of one recorder.
#[derive(Default)]
pub(crate) struct DeviceClock {
    inner: Mutex<Inner>,
    /// Events with no device time: their timing event could not be
    /// recorded (a capturing stream, a runtime error) or read, or the
    /// device had not reached it when the recording finished.
    missed: AtomicU64,
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    // No code panics while holding this lock; the data stays consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn is_not_ready(e: &Error) -> bool {
    matches!(e, Error::Vendor { code, .. } if *code == NOT_READY)
}

impl DeviceClock {
    /// Records a timing event at the current end of `stream`'s queue, for
    /// the event recorded at host time `t_ns`. The caller makes the
    /// stream's device current where the handle needs it (the legacy
    /// default stream). A capturing stream's event gets no device time
    /// (its queue is a graph's, not the device's).
    pub(crate) fn mark(&self, stream: &Stream, t_ns: u64) {
        if self.try_mark(stream, t_ns).is_err() {
            self.missed.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn try_mark(&self, stream: &Stream, t_ns: u64) -> Result<(), ()> {
        #[cfg(test)]
        if stream.fake_domain().is_some() {
            // Fake streams have no queue to time.
            return Err(());
        }
        if !matches!(stream.capturing(), Ok(None)) {
            return Err(());
        }
        let device = stream.device();
        let ordinal = device.ordinal() as u32;
        let mut g = lock(&self.inner);
        let take = |g: &mut Inner| match g.spare.get_mut(&ordinal).and_then(Vec::pop) {
            Some(e) => Ok(e),
            None => Event::with_timing(&device).map_err(|_| ()),
        };
        if !g.origins.contains_key(&ordinal) {
            let origin = take(&mut g)?;
            origin.record(stream).map_err(|_| ())?;
            g.origins.insert(
                ordinal,
                Origin {
                    event: origin,
                    at_ns: 0,
                },
            );
        }
        let event = take(&mut g)?;
        event.record(stream).map_err(|_| ())?;
        g.pending.push_back(Pending {
            event,
            device: ordinal,
            handle: stream.as_raw() as u64,
            t_ns,
        });
        Ok(())
    }

    /// The events the devices have reached since the last call, in the
    /// order they were recorded; stops at the first one not reached yet.
    pub(crate) fn harvest(&self, out: &mut Vec<Reached>) {
        let mut g = lock(&self.inner);
        let g = &mut *g;
        let mut current: Option<u32> = None;
        while let Some(front) = g.pending.front() {
            let device = front.device;
            let Some(origin) = g.origins.get(&device) else {
                // Never happens: a device's origin comes with its first event.
                g.pending.pop_front();
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
            match origin.event.elapsed_ms(&front.event) {
                Ok(ms) => {
                    let device_ns = origin.at_ns + (f64::from(ms) * 1e6).round() as i64;
                    let Some(p) = g.pending.pop_front() else { break };
                    out.push(Reached {
                        device,
                        handle: p.handle,
                        t_ns: p.t_ns,
                        device_ns,
                    });
                    let spare = if ms > REBASE_MS {
                        let old = g.origins.insert(
                            device,
                            Origin {
                                event: p.event,
                                at_ns: device_ns,
                            },
                        );
                        old.map(|o| o.event)
                    } else {
                        Some(p.event)
                    };
                    if let Some(e) = spare {
                        let kept = g.spare.entry(device).or_default();
                        if kept.len() < SPARE_KEPT {
                            kept.push(e);
                        }
                    }
                }
                Err(e) if is_not_ready(&e) => break,
                Err(_) => {
                    g.pending.pop_front();
                    self.missed.fetch_add(1, Ordering::Relaxed);
                }
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
