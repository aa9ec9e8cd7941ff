//! One pass over a trace's events: the allocations with their lifetimes,
//! live bytes (in all, per stream, per device), their peaks, and what did
//! not add up (frees of unknown addresses, allocations left live).

use std::collections::HashMap;

use crate::format::{Action, Trace};

/// One allocation and its lifetime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alloc {
    /// Index of its allocate event.
    pub start: usize,
    /// Index of its free event; `None` while live at the end.
    pub end: Option<usize>,
    pub addr: u64,
    pub bytes: u64,
    pub device: u32,
    pub stream: Option<u32>,
    pub thread: u32,
    pub backtrace: Option<u32>,
}

impl Alloc {
    /// Whether it is live after event `i`.
    pub fn live_after(&self, i: usize) -> bool {
        self.start <= i && self.end.is_none_or(|e| e > i)
    }
}

/// A peak of live bytes: how many, and after which event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peak {
    pub bytes: u64,
    /// The event after which it was reached (0 if never above 0).
    pub event: usize,
}

impl Peak {
    fn update(&mut self, bytes: u64, event: usize) {
        if bytes > self.bytes {
            *self = Peak { bytes, event };
        }
    }
}

/// Per stream (or per device) figures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub allocations: u64,
    pub frees: u64,
    pub failed: u64,
    pub bytes_allocated: u64,
    pub live: u64,
    pub peak: Peak,
}

/// What one pass found.
#[derive(Clone, Debug, Default)]
pub struct Analysis {
    pub allocs: Vec<Alloc>,
    /// Live bytes of all streams after each event.
    pub live_total: Vec<u64>,
    pub total: Counts,
    /// Keyed by stream index (`None`: events of no stream).
    pub streams: HashMap<Option<u32>, Counts>,
    pub devices: HashMap<u32, Counts>,
    /// Count of each action.
    pub actions: HashMap<Action, u64>,
    /// Frees of an address that was not live (allocated before the
    /// recording started, or its allocation was dropped).
    pub unknown_frees: u64,
    /// Frees whose size differs from the allocation's.
    pub size_mismatches: u64,
    /// Allocations of an address that was still live (its free was
    /// dropped): the earlier one is taken as freed there.
    pub reused_live: u64,
}

impl Analysis {
    pub fn of(trace: &Trace) -> Analysis {
        let mut a = Analysis {
            live_total: Vec::with_capacity(trace.events.len()),
            ..Analysis::default()
        };
        let mut live: HashMap<(u32, u64), usize> = HashMap::new();
        for (i, e) in trace.events.iter().enumerate() {
            *a.actions.entry(e.action).or_default() += 1;
            match e.action {
                Action::Allocate => {
                    if let Some(old) = live.remove(&(e.device, e.addr)) {
                        a.reused_live += 1;
                        a.close(old, i);
                    }
                    live.insert((e.device, e.addr), a.allocs.len());
                    a.allocs.push(Alloc {
                        start: i,
                        end: None,
                        addr: e.addr,
                        bytes: e.bytes,
                        device: e.device,
                        stream: e.stream,
                        thread: e.thread,
                        backtrace: e.backtrace,
                    });
                    for c in a.counts(e.device, e.stream) {
                        c.allocations += 1;
                        c.bytes_allocated += e.bytes;
                        c.live += e.bytes;
                        c.peak.update(c.live, i);
                    }
                }
                Action::Free => match live.remove(&(e.device, e.addr)) {
                    Some(idx) => {
                        if a.allocs[idx].bytes != e.bytes {
                            a.size_mismatches += 1;
                        }
                        a.close(idx, i);
                        for c in a.counts(e.device, e.stream) {
                            c.frees += 1;
                        }
                    }
                    None => a.unknown_frees += 1,
                },
                Action::FailedAllocate => {
                    for c in a.counts(e.device, e.stream) {
                        c.failed += 1;
                    }
                }
                _ => {}
            }
            a.live_total.push(a.total.live);
        }
        a
    }

    /// The counters an event of (`device`, `stream`) updates.
    fn counts(&mut self, device: u32, stream: Option<u32>) -> [&mut Counts; 3] {
        [
            &mut self.total,
            self.streams.entry(stream).or_default(),
            self.devices.entry(device).or_default(),
        ]
    }

    /// Ends allocation `idx` at event `i`, taking its bytes off the live
    /// counts of the stream and device it was allocated on.
    fn close(&mut self, idx: usize, i: usize) {
        let (bytes, device, stream) = {
            let al = &mut self.allocs[idx];
            al.end = Some(i);
            (al.bytes, al.device, al.stream)
        };
        for c in self.counts(device, stream) {
            c.live = c.live.saturating_sub(bytes);
        }
    }

    /// Allocations live at the end of the trace.
    pub fn live_at_end(&self) -> impl Iterator<Item = &Alloc> {
        self.allocs.iter().filter(|a| a.end.is_none())
    }

    /// The allocations live after event `i`, largest first.
    pub fn live_after(&self, i: usize) -> Vec<&Alloc> {
        let mut v: Vec<&Alloc> = self.allocs.iter().filter(|a| a.live_after(i)).collect();
        v.sort_by(|x, y| y.bytes.cmp(&x.bytes).then(x.start.cmp(&y.start)));
        v
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::format::{Event, Source, StreamInfo, ThreadInfo};

    pub fn trace_of(events: Vec<Event>) -> Trace {
        Trace {
            source: Source::Somalloc,
            version: 1,
            meta: Vec::new(),
            threads: vec![ThreadInfo { name: "t".into() }],
            streams: vec![
                StreamInfo { device: 0, handle: 1 },
                StreamInfo { device: 0, handle: 2 },
            ],
            backtraces: Vec::new(),
            events,
            dropped: 0,
            complete: true,
        }
    }

    #[test]
    fn peaks_lifetimes_and_what_does_not_add_up() {
        let ev = |t, action, stream, bytes, addr| Event::new(t, action, 0, 0).on(stream).at(bytes, addr);
        let t = trace_of(vec![
            ev(1, Action::Allocate, 0, 100, 0x1000),
            ev(2, Action::Allocate, 1, 300, 0x2000),
            ev(3, Action::Free, 0, 100, 0x1000),
            ev(4, Action::Allocate, 0, 50, 0x1000),
            ev(5, Action::Free, 1, 999, 0x9999), // unknown
            ev(6, Action::FailedAllocate, 1, 1 << 40, 0),
            ev(7, Action::Allocate, 1, 10, 0x2000), // 0x2000 still live: its free was lost
            ev(8, Action::Free, 0, 60, 0x1000),     // size differs
        ]);
        let a = Analysis::of(&t);
        assert_eq!(a.allocs.len(), 4);
        assert_eq!(a.total.peak, Peak { bytes: 400, event: 1 });
        assert_eq!(a.streams[&Some(0)].peak, Peak { bytes: 100, event: 0 });
        assert_eq!(a.streams[&Some(1)].peak, Peak { bytes: 300, event: 1 });
        assert_eq!(a.live_total, [100, 400, 300, 350, 350, 350, 60, 10]);
        assert_eq!((a.unknown_frees, a.size_mismatches, a.reused_live), (1, 1, 1));
        assert_eq!(a.total.failed, 1);
        assert_eq!(a.actions[&Action::Allocate], 4);
        let at_peak: Vec<u64> = a.live_after(1).iter().map(|x| x.bytes).collect();
        assert_eq!(at_peak, [300, 100]);
        let end: Vec<u64> = a.live_at_end().map(|x| x.bytes).collect();
        assert_eq!(end, [10]);
        assert_eq!(a.allocs[1].end, Some(6));
    }
}
