//! The writer thread: drains every ring into the file.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::{lock, NewRing, RawEvent, Shared, Window};
use crate::format::{Event, TraceWriter};
use crate::sync;
use crate::trace::device_time::Reached;
use crate::trace::ring::Consumer;

/// A ring the writer drains.
struct Drained {
    consumer: Consumer<RawEvent>,
    window: sync::Arc<Window>,
    thread: u32,
    /// The ring's drop count already written.
    dropped_written: u64,
}

struct Writer {
    out: Option<TraceWriter<Box<dyn Write + Send>>>,
    shared: Arc<Shared>,
    rings: Vec<Drained>,
    streams: HashMap<(u32, u64), u32>,
    /// The stream of the last event: (device, handle) and its index.
    last_stream: Option<((u32, u64), u32)>,
    backtraces: HashMap<String, u32>,
    /// Events taken from a ring, before they are written (kept to reuse
    /// its memory).
    batch: Vec<RawEvent>,
    /// Events lost because the file could not be written.
    lost: u64,
    /// Drops written into the file (all rings, the late ones included).
    dropped_written: u64,
    late_written: u64,
    /// Device times read and not yet written (kept to reuse its memory).
    reached: Vec<Reached>,
    device_times: u64,
}

impl Writer {
    /// Runs `f` on the output unless an earlier write failed; a failure is
    /// kept in the stats and ends the writing.
    fn io(&mut self, f: impl FnOnce(&mut TraceWriter<Box<dyn Write + Send>>) -> std::io::Result<()>) -> bool {
        let Some(out) = self.out.as_mut() else {
            return false;
        };
        match f(out) {
            Ok(()) => true,
            Err(e) => {
                lock(&self.shared.stats)
                    .error
                    .get_or_insert_with(|| e.to_string());
                self.out = None;
                false
            }
        }
    }

    fn take_new_rings(&mut self) {
        let new: Vec<NewRing> = std::mem::take(&mut *lock(&self.shared.pending));
        for r in new {
            self.io(|w| w.thread(r.thread, &r.name));
            self.rings.push(Drained {
                consumer: r.consumer,
                window: r.window,
                thread: r.thread,
                dropped_written: 0,
            });
        }
    }

    /// The last round's start: closes the recorder and waits for the pushes
    /// that found it open (see "Closing" in `closing.rs`), so that the
    /// drain after this gets every event not counted as dropped.
    fn close(&mut self) {
        self.shared.closing.close();
        self.take_new_rings();
        for r in &self.rings {
            r.window.wait_quiet();
        }
    }

    /// The index of stream `handle` of `device`, its record written the
    /// first time.
    fn stream_index(&mut self, device: u32, handle: u64) -> u32 {
        let key = (device, handle);
        match self.last_stream {
            // Most events are on the stream of the one before.
            Some((k, i)) if k == key => i,
            _ => {
                let next = self.streams.len() as u32;
                let index = *self.streams.entry(key).or_insert(next);
                if index == next {
                    self.io(|w| w.stream(index, device, handle));
                }
                self.last_stream = Some((key, index));
                index
            }
        }
    }

    /// Writes the device times the devices have reached.
    fn write_device_times(&mut self) -> u64 {
        let Some(clock) = &self.shared.device_clock else {
            return 0;
        };
        let mut reached = std::mem::take(&mut self.reached);
        clock.harvest(&mut reached);
        let n = reached.len() as u64;
        for r in reached.drain(..) {
            let index = self.stream_index(r.device, r.handle);
            if self.io(|w| w.device_time(index, r.t_ns, r.device_ns)) {
                self.device_times += 1;
            }
        }
        self.reached = reached;
        n
    }

    fn write_event(&mut self, thread: u32, raw: RawEvent) {
        if self.out.is_none() {
            self.lost += 1;
            return;
        }
        let mut e = Event::new(raw.t_ns, raw.action, thread, raw.device).at(raw.bytes, raw.addr);
        if let Some(handle) = raw.stream {
            e = e.on(self.stream_index(raw.device, handle));
        }
        if let Some(bt) = raw.backtrace {
            let text = clean_backtrace(&bt.to_string());
            let next = self.backtraces.len() as u32;
            let index = match self.backtraces.get(&text) {
                Some(i) => *i,
                None => {
                    self.io(|w| w.backtrace(next, &text));
                    self.backtraces.insert(text, next);
                    next
                }
            };
            e = e.with_backtrace(index);
        }
        if !self.io(|w| w.event(&e)) {
            self.lost += 1;
        }
    }

    /// Takes every published event; returns how many.
    fn drain(&mut self) -> u64 {
        self.take_new_rings();
        let mut n = 0;
        let mut i = 0;
        while i < self.rings.len() {
            // Whether the thread is gone, asked before the drain, so that
            // this drain gets its last events.
            let gone = self.rings[i].consumer.producer_gone();
            let thread = self.rings[i].thread;
            let mut batch = std::mem::take(&mut self.batch);
            n += self.rings[i].consumer.drain(|e| batch.push(e));
            for e in batch.drain(..) {
                self.write_event(thread, e);
            }
            self.batch = batch;
            let dropped = self.rings[i].consumer.dropped();
            let new = dropped - self.rings[i].dropped_written;
            if new > 0 {
                let t = self.shared.now_ns();
                self.io(|w| w.dropped(thread, new, t));
                self.rings[i].dropped_written = dropped;
                self.dropped_written += new;
            }
            if gone {
                self.rings.swap_remove(i);
            } else {
                i += 1;
            }
        }
        let fallback: Vec<RawEvent> = std::mem::take(&mut *lock(&self.shared.fallback));
        if !fallback.is_empty() {
            // Events of exiting threads: under a thread of their own.
            let thread = self.shared.next_thread.fetch_add(1, Ordering::Relaxed);
            self.io(|w| w.thread(thread, "(exiting threads)"));
            n += fallback.len() as u64;
            for e in fallback {
                self.write_event(thread, e);
            }
        }
        let late = self.shared.late.load(Ordering::Relaxed);
        if late > self.late_written {
            let t = self.shared.now_ns();
            let new = late - self.late_written;
            self.io(|w| w.dropped(u32::MAX, new, t));
            self.late_written = late;
        }
        n
    }

    fn publish_stats(&self) {
        let mut s = lock(&self.shared.stats);
        if let Some(out) = &self.out {
            s.events = out.events();
            s.bytes = out.bytes_written();
        }
        s.threads = self.shared.next_thread.load(Ordering::Relaxed);
        s.device_times = self.device_times;
        // Late drops are added by `Recorder::stats`.
        s.dropped = self.dropped_written
            + self.lost
            + self
                .rings
                .iter()
                .map(|r| r.consumer.dropped() - r.dropped_written)
                .sum::<u64>();
    }
}

pub(super) fn writer_thread(shared: Arc<Shared>, out: Box<dyn Write + Send>, meta: Vec<(String, String)>) {
    let mut w = Writer {
        out: None,
        shared: Arc::clone(&shared),
        rings: Vec::new(),
        streams: HashMap::new(),
        last_stream: None,
        backtraces: HashMap::new(),
        batch: Vec::new(),
        lost: 0,
        dropped_written: 0,
        late_written: 0,
        reached: Vec::new(),
        device_times: 0,
    };
    match TraceWriter::new(out) {
        Ok(tw) => w.out = Some(tw),
        Err(e) => {
            lock(&shared.stats).error = Some(e.to_string());
        }
    }
    for (k, v) in &meta {
        w.io(|o| o.meta(k, v));
    }
    let mut idle = Duration::from_millis(1);
    loop {
        let (target, stop, meta) = {
            let mut c = lock(&shared.control);
            (c.flush_requested, c.stop, std::mem::take(&mut c.meta))
        };
        for (k, v) in &meta {
            w.io(|o| o.meta(k, v));
        }
        if stop {
            w.close();
        }
        // Events first: a device time's event is in its thread's ring
        // before the timing event is recorded.
        let n = w.drain() + w.write_device_times();
        if stop {
            if let Some(clock) = &shared.device_clock {
                let missed = clock.finish();
                lock(&shared.stats).device_times_missed = missed;
                w.io(|o| o.meta("device_times_missed", &missed.to_string()));
            }
        }
        if n > 0 || target > 0 || stop || !meta.is_empty() {
            // Hand what is written to the OS each round, so that a crash
            // loses at most the events of the last round.
            w.io(|o| o.flush());
        }
        w.publish_stats();
        if stop {
            let dropped = w.dropped_written + w.late_written + w.lost;
            if let Some(out) = w.out.take() {
                if let Err(e) = out.finish(dropped) {
                    lock(&shared.stats).error.get_or_insert_with(|| e.to_string());
                }
            }
            // The end record's bytes.
            break;
        }
        let mut c = lock(&shared.control);
        if c.flush_done < target {
            c.flush_done = target;
            shared.flushed.notify_all();
        }
        idle = if n > 0 {
            Duration::from_millis(1)
        } else {
            (idle * 2).min(Duration::from_millis(16))
        };
        if c.flush_requested == c.flush_done && !c.stop && c.meta.is_empty() {
            shared.sleeping.store(true, Ordering::Relaxed);
            c = shared
                .wake
                .wait_timeout(c, idle)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            shared.sleeping.store(false, Ordering::Relaxed);
        }
        drop(c);
    }
    let mut c = lock(&shared.control);
    c.flush_done = c.flush_requested;
    shared.flushed.notify_all();
}

/// A backtrace's text without the frames of the capture itself and of the
/// recording (the leading frames up to the last of somalloc's recording
/// frames), at most 40 frames.
pub(crate) fn clean_backtrace(text: &str) -> String {
    let mut frames: Vec<Vec<&str>> = Vec::new();
    for line in text.lines() {
        let t = line.trim_start();
        let starts_frame = t
            .split_once(": ")
            .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        match frames.last_mut() {
            Some(f) if !starts_frame => f.push(line),
            _ => frames.push(vec![line]),
        }
    }
    let internal = |f: &Vec<&str>| {
        let head = f.first().copied().unwrap_or("");
        head.contains("std::backtrace")
            || head.contains("somalloc::adaptors::record::")
            || head.contains("somalloc::trace::recorder::")
    };
    // Only the leading frames are the recorder's own (a program's own
    // frames further down may well be in somalloc).
    let skip = frames.iter().take(24).rposition(internal).map_or(0, |i| i + 1);
    frames[skip..]
        .iter()
        .take(40)
        .flatten()
        .copied()
        .collect::<Vec<_>>()
        .join("\n")
}
