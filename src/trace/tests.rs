//! GPU-free tests of the trace format, the RMM reader, the ring and the
//! recorder (over the fake upstream and fake streams).

use std::io::{self, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::ring::ring;
use super::*;
use crate::adaptors::RecordingAdaptor;
use crate::cache::{pause, CacheConfig, CacheTier};
use crate::error::Error;
use crate::format::{write_trace, TraceWriter};
use crate::resource::MemoryResource;
use crate::stream::Stream;
use crate::testing::FakeResource;

const PATIENCE: Duration = Duration::from_secs(20);

/// A `Write` into a shared buffer, read back by the test.
#[derive(Clone, Default)]
struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl SharedBuf {
    fn trace(&self) -> Trace {
        Trace::parse(&self.0.lock().unwrap()).unwrap()
    }
}

fn sample_trace() -> Trace {
    Trace {
        source: Source::Somalloc,
        version: VERSION,
        meta: vec![
            ("program".into(), "test".into()),
            ("pool_reserved_peak".into(), "4096".into()),
        ],
        threads: vec![
            ThreadInfo { name: "main".into() },
            ThreadInfo {
                name: "worker".into(),
            },
        ],
        streams: vec![
            StreamInfo {
                device: 0,
                handle: 0x7f00_1234_5000,
            },
            StreamInfo {
                device: 1,
                handle: 0x10,
            },
        ],
        backtraces: vec!["   0: app::main\n             at src/main.rs:3:5".into()],
        events: vec![
            Event::new(10, Action::Allocate, 0, 0)
                .on(0)
                .at(1000, 0x7f12_0000_0000)
                .with_backtrace(0)
                .with_device_ns(5_000),
            Event::new(20, Action::Allocate, 1, 1).on(1).at(1 << 40, 0x200),
            Event::new(30, Action::Free, 0, 0)
                .on(0)
                .at(1000, 0x7f12_0000_0000)
                .with_device_ns(-7),
            Event::new(31, Action::FailedAllocate, 1, 1).on(1).at(1 << 50, 0),
            Event::new(40, Action::Flush, 0, 0),
            Event::new(41, Action::Trim, 0, 1).at(4096, 0),
            Event::new(50, Action::CaptureBegin, 1, 0).on(0),
            Event::new(60, Action::CaptureEnd, 1, 0).on(0),
            Event::new(u64::MAX / 2, Action::Free, 1, 1)
                .on(1)
                .at(1 << 40, 0x200),
        ],
        dropped: 3,
        complete: true,
    }
}

#[test]
fn a_trace_reads_back_as_written() {
    let t = sample_trace();
    let bytes = write_trace(&t, Vec::new()).unwrap();
    assert!(bytes.starts_with(b"somalloc-trace/1\n"));
    let back = Trace::parse(&bytes).unwrap();
    assert_eq!(back, t);
    assert_eq!(back.meta("pool_reserved_peak"), Some("4096"));
    assert_eq!(back.meta("nothing"), None);
    // Compact: the nine events take well under 20 bytes each.
    assert!(bytes.len() < 400, "{} bytes", bytes.len());
}

#[test]
fn device_times_find_their_events_by_stream_and_time() {
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    w.thread(0, "main").unwrap();
    w.stream(0, 0, 0x10).unwrap();
    w.stream(1, 0, 0x20).unwrap();
    // Two events of stream 0 at one host time, one of stream 1 at the same.
    let e = |t, s| Event::new(t, Action::Allocate, 0, 0).on(s).at(64, 0x1000 + t);
    w.event(&e(100, 0)).unwrap();
    w.event(&e(100, 0)).unwrap();
    w.event(&e(100, 1)).unwrap();
    w.event(&e(200, 1)).unwrap();
    // Device times come later, in any order; one matches no event.
    w.device_time(1, 200, 9_000).unwrap();
    w.device_time(0, 100, 1_000).unwrap();
    w.device_time(1, 100, 8_000).unwrap();
    w.device_time(0, 100, 1_500).unwrap();
    w.device_time(0, 150, 77).unwrap();
    let t = Trace::parse(&w.finish(0).unwrap()).unwrap();
    let got: Vec<(Option<u32>, u64, Option<i64>)> =
        t.events.iter().map(|e| (e.stream, e.t_ns, e.device_ns)).collect();
    assert_eq!(
        got,
        [
            (Some(0), 100, Some(1_000)),
            (Some(0), 100, Some(1_500)),
            (Some(1), 100, Some(8_000)),
            (Some(1), 200, Some(9_000)),
        ]
    );
}

#[test]
fn events_are_sorted_by_time_keeping_each_threads_order() {
    let mut t = sample_trace();
    t.backtraces.clear();
    t.events = vec![
        Event::new(50, Action::Allocate, 1, 0).on(0).at(1, 0x100),
        Event::new(10, Action::Allocate, 0, 0).on(0).at(1, 0x200),
        Event::new(50, Action::Free, 1, 0).on(0).at(1, 0x100),
        Event::new(20, Action::Free, 0, 0).on(0).at(1, 0x200),
    ];
    let back = Trace::parse(&write_trace(&t, Vec::new()).unwrap()).unwrap();
    let order: Vec<(u64, Action)> = back.events.iter().map(|e| (e.t_ns, e.action)).collect();
    assert_eq!(
        order,
        [
            (10, Action::Allocate),
            (20, Action::Free),
            (50, Action::Allocate),
            (50, Action::Free)
        ]
    );
}

#[test]
fn a_cut_file_reads_up_to_the_cut_and_bad_files_are_refused() {
    let t = sample_trace();
    let bytes = write_trace(&t, Vec::new()).unwrap();
    // Cut inside the end record: every event is there, not complete.
    let cut = Trace::parse(&bytes[..bytes.len() - 2]).unwrap();
    assert!(!cut.complete);
    assert_eq!(cut.events.len(), t.events.len());
    // Cut in the middle: some events.
    let half = Trace::parse(&bytes[..bytes.len() / 2]).unwrap();
    assert!(!half.complete && half.events.len() < t.events.len());
    // Another version, another format, garbage.
    let mut v2 = bytes.clone();
    v2[15] = b'2';
    let e = Trace::parse(&v2).unwrap_err();
    assert!(e.what.contains("version 2"), "{e}");
    assert!(Trace::parse(b"hello\n").unwrap_err().what.contains("not a trace"));
    // An end record whose count disagrees with the file.
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    w.thread(0, "t").unwrap();
    w.event(&Event::new(1, Action::Flush, 0, 0)).unwrap();
    let mut bad = w.finish(0).unwrap();
    let n = bad.len();
    bad[n - 2] = 5; // the end record's event count
    assert!(Trace::parse(&bad).unwrap_err().what.contains("end record"));
    // An event naming a stream defined nowhere.
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    w.thread(0, "t").unwrap();
    w.event(&Event::new(1, Action::Allocate, 0, 0).on(3).at(1, 1))
        .unwrap();
    let e = Trace::parse(&w.finish(0).unwrap()).unwrap_err();
    assert!(e.what.contains("defined nowhere"), "{e}");
}

#[test]
fn unknown_records_and_trailing_fields_are_skipped() {
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    w.thread(0, "t").unwrap();
    let mut bytes = w.finish(0).unwrap();
    // Drop the end record (tag 7, length 2, two zero counts) and append
    // a record of an unknown tag, then an event with an extra field.
    bytes.truncate(bytes.len() - 4);
    bytes.extend_from_slice(&[99, 3, 1, 2, 3]);
    // event: action 1, thread 0, dt 2 (zigzag 4), device 0, stream 0,
    // bytes 7, addr +256 (zigzag 512 = 0x80 0x04), no backtrace, then 42.
    bytes.extend_from_slice(&[5, 10, 1, 0, 4, 0, 0, 7, 0x80, 0x04, 0, 42]);
    let t = Trace::parse(&bytes).unwrap();
    assert_eq!(t.events, [Event::new(2, Action::Allocate, 0, 0).at(7, 256)]);
    assert!(!t.complete);
}

#[test]
fn rmm_logs_read_as_traces() {
    let csv = "Thread,Time,Action,Pointer,Size,Stream\n\
               140213,23:59:59.999000,allocate,0x7f4a00000000,1024,0x0\n\
               140214,23:59:59.999500,allocate,7f4a00000400,2048,0x5a5a\n\
               140213,00:00:00.000250,free,0x7f4a00000000,1024,0x0\n\
               140214,00:00:00.001,allocate failure,(nil),1099511627776,5a5a\n\
               \n";
    let t = Trace::parse(csv.as_bytes()).unwrap();
    assert_eq!(t.source, Source::RmmCsv);
    assert_eq!(t.threads.len(), 2);
    assert_eq!(t.threads[1].name, "140214");
    assert_eq!(t.streams.len(), 2);
    assert_eq!(t.streams[1].handle, 0x5a5a);
    let got: Vec<(u64, Action, u32, u64, u64)> = t
        .events
        .iter()
        .map(|e| (e.t_ns, e.action, e.thread, e.addr, e.bytes))
        .collect();
    assert_eq!(
        got,
        [
            (0, Action::Allocate, 0, 0x7f4a_0000_0000, 1024),
            (500_000, Action::Allocate, 1, 0x7f4a_0000_0400, 2048),
            // Past midnight: the next day.
            (1_250_000, Action::Free, 0, 0x7f4a_0000_0000, 1024),
            (2_000_000, Action::FailedAllocate, 1, 0, 1 << 40),
        ]
    );
    assert!(t.events.iter().all(|e| e.device == 0 && e.stream.is_some()));
    // Columns in another order, and bad lines.
    let moved = "Action,Size,Pointer,Stream,Thread,Time\nfree,8,0x10,0x1,7,01:02:03.5\n";
    let t = Trace::parse(moved.as_bytes()).unwrap();
    assert_eq!(
        (t.events[0].action, t.events[0].bytes, t.events[0].addr),
        (Action::Free, 8, 0x10)
    );
    let bad = "Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.1,resize,0x1,1,0x0\n";
    let e = Trace::parse(bad.as_bytes()).unwrap_err();
    assert_eq!(e.position, "line 2");
    assert!(e.what.contains("resize"));
    let e = Trace::parse(b"Thread,Time,Action,Pointer,Size\n").unwrap_err();
    assert!(e.what.contains("Stream"), "{e}");
    let e = Trace::parse(b"Thread,Time,Action,Pointer,Size,Stream\n1,noon,free,0x1,1,0x0\n").unwrap_err();
    assert!(e.what.contains("HH:MM:SS"), "{e}");
}

// ---------------------------------------------------------------------------
// The ring

#[test]
fn a_ring_keeps_order_and_drops_when_full() {
    let (mut p, mut c) = ring::<u32>(3); // rounded up to 4
    assert_eq!(p.capacity(), 4);
    for i in 0..4 {
        p.push(i).unwrap();
    }
    assert_eq!(p.push(4), Err(4));
    assert_eq!(c.dropped(), 1);
    let mut got = Vec::new();
    assert_eq!(c.drain(|v| got.push(v)), 4);
    for i in 5..9 {
        p.push(i).unwrap();
    }
    c.drain(|v| got.push(v));
    assert_eq!(got, [0, 1, 2, 3, 5, 6, 7, 8]);
    assert!(!c.producer_gone());
    drop(p);
    assert!(c.producer_gone());
}

/// Counts live payloads: a payload dropped twice or never shows up here.
#[derive(Debug)]
struct Payload(u64, Arc<AtomicUsize>);

impl Payload {
    fn new(v: u64, live: &Arc<AtomicUsize>) -> Payload {
        live.fetch_add(1, Ordering::SeqCst);
        Payload(v, Arc::clone(live))
    }
}

impl Drop for Payload {
    fn drop(&mut self) {
        self.1.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The consumer is stopped after it read the oldest event of a full ring
/// and before it stored the tail that frees the slot. The producer must
/// find the ring still full and drop, never write over the slot being read;
/// once the consumer goes on, the producer has room again.
#[test]
fn the_producer_never_writes_a_slot_the_consumer_is_reading() {
    let live = Arc::new(AtomicUsize::new(0));
    let (mut p, mut c) = ring::<Payload>(2);
    p.push(Payload::new(10, &live)).unwrap();
    p.push(Payload::new(11, &live)).unwrap();
    std::thread::scope(|scope| {
        let (gate_tx, gate_rx) = std::sync::mpsc::channel();
        let consumer = scope.spawn(move || {
            gate_tx.send(pause::arm("ring: read, tail not stored")).unwrap();
            let mut got = Vec::new();
            c.drain(|v| got.push(v.0));
            (got, c)
        });
        let gate = gate_rx.recv().unwrap();
        assert!(gate.wait_reached(PATIENCE), "the consumer never read");
        // The consumer holds event 10 and has not freed its slot.
        for v in 20..25 {
            assert!(
                p.push(Payload::new(v, &live)).is_err(),
                "pushed {v} into a full ring"
            );
        }
        gate.release();
        let (got, mut c) = consumer.join().unwrap();
        assert_eq!(got, [10, 11]);
        assert_eq!(c.dropped(), 5);
        p.push(Payload::new(30, &live)).unwrap();
        let mut more = Vec::new();
        c.drain(|v| more.push(v.0));
        assert_eq!(more, [30]);
    });
    assert_eq!(
        live.load(Ordering::SeqCst),
        0,
        "a payload leaked or was dropped twice"
    );
}

/// Many pushes against a concurrent drain: every value arrives once, in
/// order, or is counted as dropped; nothing leaks, nothing is dropped twice
/// (also the events left in the ring when both sides are gone).
#[test]
fn a_ring_under_a_concurrent_drain_loses_and_duplicates_nothing() {
    const N: u64 = 200_000;
    let live = Arc::new(AtomicUsize::new(0));
    let (mut p, mut c) = ring::<Payload>(64);
    let got = std::thread::scope(|scope| {
        let live2 = Arc::clone(&live);
        let producer = scope.spawn(move || {
            let mut refused = 0;
            for v in 0..N {
                if p.push(Payload::new(v, &live2)).is_err() {
                    refused += 1;
                }
            }
            refused
        });
        let mut got: Vec<u64> = Vec::new();
        loop {
            let done = c.producer_gone();
            c.drain(|v| got.push(v.0));
            if done {
                break;
            }
            std::thread::yield_now();
        }
        let refused = producer.join().unwrap();
        assert_eq!(c.dropped(), refused);
        assert_eq!(got.len() as u64 + refused, N);
        got
    });
    assert!(got.windows(2).all(|w| w[0] < w[1]), "out of order or twice");
    assert_eq!(live.load(Ordering::SeqCst), 0);
    // Events still in a ring when both sides go are dropped with it.
    let (mut p, c) = ring::<Payload>(8);
    for v in 0..5 {
        p.push(Payload::new(v, &live)).unwrap();
    }
    drop((p, c));
    assert_eq!(live.load(Ordering::SeqCst), 0);
}

// ---------------------------------------------------------------------------
// The recorder and the adaptor

fn s(id: usize) -> Stream {
    Stream::fake(id, 0)
}

#[test]
fn the_adaptor_records_allocations_frees_and_failures() {
    let fake = FakeResource::new(Some(1 << 20));
    let out = SharedBuf::default();
    let recorder = Recorder::to_writer(out.clone(), RecordOptions::default().markers(false)).unwrap();
    let rec = Arc::new(RecordingAdaptor::new(fake.clone(), recorder.clone()));
    let res: Arc<dyn MemoryResource> = rec.clone();
    let (a, b) = (s(0x4000), s(0x5000));
    let p = res.allocate(1000, &a).unwrap();
    let q = res.allocate(5000, &b).unwrap();
    assert!(res.allocate(2 << 20, &a).is_err());
    // SAFETY: fake addresses from this stack, freed once.
    unsafe {
        res.deallocate(q, 5000, &b).unwrap();
        res.deallocate(p, 1000, &a).unwrap();
    }
    // A free the inner resource refuses is not recorded.
    let r = res.allocate(10, &a).unwrap();
    fake.fail_frees(true);
    // SAFETY: the fake refuses without freeing.
    assert!(unsafe { res.deallocate(r, 10, &a) }.is_err());
    fake.fail_frees(false);
    // SAFETY: from this stack, freed once.
    unsafe { res.deallocate(r, 10, &a).unwrap() };
    recorder.flush().unwrap();
    let mid = out.trace();
    assert_eq!(mid.events.len(), 7);
    assert!(!mid.complete);
    let stats = recorder.finish().unwrap();
    assert_eq!((stats.events, stats.dropped, stats.threads), (7, 0, 1));
    assert!(stats.error.is_none());
    let t = out.trace();
    assert!(t.complete);
    assert_eq!(t.meta("backtraces"), Some("false"));
    assert_eq!(t.meta("pid"), Some(std::process::id().to_string().as_str()));
    let got: Vec<(Action, u64, u64, u64)> = t
        .events
        .iter()
        .map(|e| {
            (
                e.action,
                e.bytes,
                e.addr,
                t.streams[e.stream.unwrap() as usize].handle,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (Action::Allocate, 1000, p as u64, 0x4000),
            (Action::Allocate, 5000, q as u64, 0x5000),
            (Action::FailedAllocate, 2 << 20, 0, 0x4000),
            (Action::Free, 5000, q as u64, 0x5000),
            (Action::Free, 1000, p as u64, 0x4000),
            (Action::Allocate, 10, r as u64, 0x4000),
            (Action::Free, 10, r as u64, 0x4000),
        ]
    );
    assert!(t.events.windows(2).all(|w| w[0].t_ns < w[1].t_ns));
    assert!(t.events.iter().all(|e| e.backtrace.is_none() && e.device == 0));
    // Finished: later events are dropped and counted, the file stays whole.
    drop(res.allocate(1, &a));
    assert_eq!(recorder.stats().dropped, 1);
    assert_eq!(out.trace().events.len(), 7);
    assert!(matches!(recorder.finish(), Ok(s) if s.events == 7));
    fake.state().live.clear();
}

#[test]
fn device_times_are_counted_missing_where_a_stream_has_no_device_queue() {
    // Fake streams have no queue to time: every allocation and free is
    // counted as missing its device time, and nothing else changes.
    let fake = FakeResource::new(None);
    let out = SharedBuf::default();
    let options = RecordOptions::default().markers(false).device_times(true);
    let recorder = Recorder::to_writer(out.clone(), options).unwrap();
    assert!(recorder.device_times());
    let res: Arc<dyn MemoryResource> = Arc::new(RecordingAdaptor::new(fake.clone(), recorder.clone()));
    let a = s(0x4000);
    for _ in 0..3 {
        let p = res.allocate(256, &a).unwrap();
        // SAFETY: from this stack, freed once.
        unsafe { res.deallocate(p, 256, &a).unwrap() };
    }
    let t0 = recorder.now_ns();
    recorder.record(t0, Action::Allocate, 0, Some(0x4000), 8, 0x10);
    recorder.record_device_time(&a, t0);
    let stats = recorder.finish().unwrap();
    assert_eq!(
        (stats.events, stats.device_times, stats.device_times_missed),
        (7, 0, 7)
    );
    let t = out.trace();
    assert_eq!(t.meta("device_times"), Some("true"));
    assert_eq!(t.meta("device_times_missed"), Some("7"));
    assert!(t.events.iter().all(|e| e.device_ns.is_none()));
    fake.state().live.clear();
}

#[test]
fn threads_record_into_their_own_buffers_and_exiting_threads_lose_nothing() {
    let fake = FakeResource::new(None);
    let out = SharedBuf::default();
    let recorder = Recorder::to_writer(
        out.clone(),
        RecordOptions::default().buffer_events(1 << 14).markers(false),
    )
    .unwrap();
    let rec = Arc::new(RecordingAdaptor::new(fake.clone(), recorder.clone()));
    const PER_THREAD: usize = 2000;
    std::thread::scope(|scope| {
        for t in 0..4usize {
            let rec = Arc::clone(&rec);
            std::thread::Builder::new()
                .name(format!("worker-{t}"))
                .spawn_scoped(scope, move || {
                    let stream = s(0x100 + t);
                    for i in 0..PER_THREAD {
                        let p = rec.allocate(256 + i, &stream).unwrap();
                        // SAFETY: from this adaptor, freed once.
                        unsafe { rec.deallocate(p, 256 + i, &stream).unwrap() };
                    }
                })
                .unwrap();
        }
    });
    // The threads are gone; their last events still reach the file.
    let stats = recorder.finish().unwrap();
    assert_eq!(stats.dropped, 0, "{stats}");
    assert_eq!(stats.events, 4 * 2 * PER_THREAD as u64);
    let t = out.trace();
    assert_eq!(t.threads.len(), 4);
    let mut names: Vec<&str> = t.threads.iter().map(|x| x.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["worker-0", "worker-1", "worker-2", "worker-3"]);
    // Each thread's events: its own stream, alternating allocate/free of
    // the same address, sizes in order.
    for th in 0..4u32 {
        let mine: Vec<&Event> = t.events.iter().filter(|e| e.thread == th).collect();
        assert_eq!(mine.len(), 2 * PER_THREAD);
        let handle = t.streams[mine[0].stream.unwrap() as usize].handle;
        assert!((0x100..0x104).contains(&handle));
        for (i, pair) in mine.chunks(2).enumerate() {
            assert_eq!((pair[0].action, pair[1].action), (Action::Allocate, Action::Free));
            assert_eq!((pair[0].addr, pair[0].bytes), (pair[1].addr, 256 + i as u64));
            assert_eq!(pair[1].bytes, 256 + i as u64);
        }
    }
    assert!(fake.state().live.is_empty());
}

/// Runs `finish` on a thread of its own while `gate`'s thread stands inside
/// a push that found the recorder open, and lets that push go on only once
/// `finish` has returned or has waited 300 ms for it (it must wait: it
/// returning first fails the test); returns its figures.
fn finish_around_a_paused_push(recorder: &Arc<Recorder>, gate: &pause::Gate) -> RecorderStats {
    assert!(gate.wait_reached(PATIENCE), "the push never reached its window");
    let finisher = {
        let recorder = Arc::clone(recorder);
        std::thread::spawn(move || recorder.finish().unwrap())
    };
    // A `finish` that does not wait for the push returns meanwhile, its last
    // drain done: the push then lands where no one takes it.
    let start = Instant::now();
    while !finisher.is_finished() && start.elapsed() < Duration::from_millis(300) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let returned_early = finisher.is_finished();
    gate.release();
    let stats = finisher.join().unwrap();
    assert!(
        !returned_early,
        "finish returned while a push it let in had not pushed: {stats}"
    );
    stats
}

/// A thread checks that the recorder is open and is stopped before it
/// pushes into its ring; `finish` runs meanwhile. The event is written
/// (`finish` waits for the push), never lost uncounted.
#[test]
fn finish_waits_for_a_push_into_a_ring_that_found_the_recorder_open() {
    let out = SharedBuf::default();
    let recorder = Recorder::to_writer(out.clone(), RecordOptions::default().markers(false)).unwrap();
    let (gate_tx, gate_rx) = mpsc::channel();
    let pusher = {
        let recorder = Arc::clone(&recorder);
        std::thread::spawn(move || {
            let t = recorder.now_ns();
            // The first event registers the thread's ring.
            recorder.record(t, Action::Allocate, 0, Some(0x10), 64, 0x1000);
            gate_tx.send(pause::arm("recorder: open, not pushed")).unwrap();
            recorder.record(t + 1, Action::Free, 0, Some(0x10), 64, 0x1000);
        })
    };
    let gate = gate_rx.recv().unwrap();
    let stats = finish_around_a_paused_push(&recorder, &gate);
    pusher.join().unwrap();
    assert_eq!((stats.events, stats.dropped), (2, 0), "{stats}");
    assert_eq!(recorder.stats(), stats);
    let t = out.trace();
    let actions: Vec<Action> = t.events.iter().map(|e| e.action).collect();
    assert_eq!(actions, [Action::Allocate, Action::Free]);
    // A push after `finish` is dropped and counted.
    recorder.record(0, Action::Free, 0, None, 64, 0x1000);
    assert_eq!(recorder.stats().dropped, 1);
}

/// As above for a thread's first push, which registers its ring: the ring
/// is taken and its event written.
#[test]
fn finish_waits_for_a_push_registering_its_ring_that_found_the_recorder_open() {
    let out = SharedBuf::default();
    let recorder = Recorder::to_writer(out.clone(), RecordOptions::default().markers(false)).unwrap();
    let (gate_tx, gate_rx) = mpsc::channel();
    let pusher = {
        let recorder = Arc::clone(&recorder);
        std::thread::Builder::new()
            .name("late-registrant".into())
            .spawn(move || {
                gate_tx.send(pause::arm("recorder: open, registering")).unwrap();
                let t = recorder.now_ns();
                recorder.record(t, Action::Allocate, 0, Some(0x10), 64, 0x1000);
            })
            .unwrap()
    };
    let gate = gate_rx.recv().unwrap();
    let stats = finish_around_a_paused_push(&recorder, &gate);
    pusher.join().unwrap();
    assert_eq!((stats.events, stats.dropped, stats.threads), (1, 0, 1), "{stats}");
    let t = out.trace();
    assert_eq!(t.events.len(), 1);
    assert_eq!(t.threads[0].name, "late-registrant");
}

/// A `Write` whose first write waits until the test opens it, and which
/// fails after `fail_after` bytes.
struct Stuck {
    open: Arc<(Mutex<bool>, Condvar)>,
    fail_after: usize,
    written: usize,
}

impl Write for Stuck {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let (m, cv) = &*self.open;
        let mut open = m.lock().unwrap();
        while !*open {
            open = cv.wait(open).unwrap();
        }
        if self.written + b.len() > self.fail_after {
            return Err(io::Error::other("disk full"));
        }
        self.written += b.len();
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The writer is stuck in its first write: recording threads go on,
/// filling their buffer and then dropping (counted), never waiting.
#[test]
fn a_stuck_writer_never_blocks_the_recording_thread() {
    let fake = FakeResource::new(None);
    let open = Arc::new((Mutex::new(false), Condvar::new()));
    let stuck = Stuck {
        open: Arc::clone(&open),
        fail_after: usize::MAX,
        written: 0,
    };
    let recorder =
        Recorder::to_writer(stuck, RecordOptions::default().buffer_events(8).markers(false)).unwrap();
    let rec = RecordingAdaptor::new(fake.clone(), recorder.clone());
    let stream = s(0x4000);
    for _ in 0..50 {
        let p = rec.allocate(512, &stream).unwrap();
        // SAFETY: from this adaptor, freed once.
        unsafe { rec.deallocate(p, 512, &stream).unwrap() };
    }
    // 100 events, 8 buffered, the writer has taken none.
    *open.0.lock().unwrap() = true;
    open.1.notify_all();
    let stats = recorder.finish().unwrap();
    assert_eq!((stats.events, stats.dropped), (8, 92), "{stats}");
}

#[test]
fn a_failing_file_is_an_error_and_recording_goes_on() {
    let fake = FakeResource::new(None);
    let failing = Stuck {
        open: Arc::new((Mutex::new(true), Condvar::new())),
        fail_after: 200,
        written: 0,
    };
    let recorder = Recorder::to_writer(failing, RecordOptions::default().markers(false)).unwrap();
    let rec = RecordingAdaptor::new(fake.clone(), recorder.clone());
    let stream = s(0x4000);
    for _ in 0..5000 {
        let p = rec.allocate(512, &stream).unwrap();
        // SAFETY: from this adaptor, freed once.
        unsafe { rec.deallocate(p, 512, &stream).unwrap() };
    }
    match recorder.finish() {
        Err(Error::Io { message, .. }) => assert!(message.contains("disk full"), "{message}"),
        other => panic!("expected an Io error, got {other:?}"),
    }
    let stats = recorder.stats();
    assert!(stats.error.is_some());
    assert!(stats.dropped > 0, "{stats}");
    assert!(fake.state().live.is_empty());
    // A file that cannot be created.
    match Recorder::to_file("/nonexistent-dir/x.trace", RecordOptions::default()) {
        Err(Error::Io { kind, what, .. }) => {
            assert_eq!(kind, io::ErrorKind::NotFound);
            assert!(what.contains("/nonexistent-dir/x.trace"));
        }
        other => panic!("expected an Io error, got {other:?}"),
    }
}

#[test]
fn backtraces_when_asked_and_markers_of_flush_and_trim() {
    let fake = FakeResource::new(None);
    let out = SharedBuf::default();
    let recorder = Recorder::to_writer(out.clone(), RecordOptions::default().backtraces(true)).unwrap();
    let tier = CacheTier::new(fake.clone(), CacheConfig::default()).unwrap();
    let stream = s(0x4000);
    let rec = Arc::new(RecordingAdaptor::new(
        tier.for_stream(&stream).unwrap(),
        recorder.clone(),
    ));
    let p = rec.allocate(4096, &stream).unwrap();
    // SAFETY: from this adaptor, freed once.
    unsafe { rec.deallocate(p, 4096, &stream).unwrap() };
    tier.for_stream(&stream).unwrap().trim(0).unwrap();
    tier.flush().unwrap();
    recorder.set_meta("pool_reserved_peak", "12345");
    drop(rec);
    recorder.finish().unwrap();
    let t = out.trace();
    assert_eq!(t.meta("backtraces"), Some("true"));
    assert_eq!(t.meta("pool_reserved_peak"), Some("12345"));
    // The markers of other tests running meanwhile land here too: only
    // this thread's events are looked at.
    let me = std::thread::current().name().unwrap().to_string();
    let mine = t.threads.iter().position(|x| x.name == me).unwrap() as u32;
    let events: Vec<&Event> = t.events.iter().filter(|e| e.thread == mine).collect();
    let actions: Vec<Action> = events.iter().map(|e| e.action).collect();
    assert_eq!(
        actions,
        [Action::Allocate, Action::Free, Action::Trim, Action::Flush]
    );
    let trim = events[2];
    assert_eq!(
        (trim.bytes, t.streams[trim.stream.unwrap() as usize].handle),
        (0, 0x4000)
    );
    assert_eq!(events[3].stream, None);
    // The allocation's backtrace names this test and not the recorder.
    let bt = &t.backtraces[events[0].backtrace.expect("a backtrace") as usize];
    assert!(!bt.trim().is_empty());
    if bt.lines().all(|l| l.contains("<unknown>") || !l.contains(':')) {
        // A binary without symbols (stripped): the frames have no names.
        println!("backtraces_when_asked_and_markers_of_flush_and_trim: no symbols, names not checked");
    } else {
        assert!(bt.contains("backtraces_when_asked"), "{bt}");
        assert!(!bt.contains("Backtrace::force_capture"), "{bt}");
    }
    assert!(events[1].backtrace.is_none(), "frees have none");
    assert!(fake.state().live.is_empty() || tier.cached_bytes() > 0);
}

#[test]
fn a_trace_file_round_trip_through_the_file_system() {
    let dir = std::env::temp_dir().join(format!("somalloc-trace-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("run.trace");
    let fake = FakeResource::new(None);
    {
        let rec =
            RecordingAdaptor::to_file(fake.clone(), &path, RecordOptions::default().markers(false)).unwrap();
        let stream = s(0x4000);
        let p = rec.allocate(300, &stream).unwrap();
        // SAFETY: from this adaptor, freed once.
        unsafe { rec.deallocate(p, 300, &stream).unwrap() };
        // Dropping the adaptor (the recorder's last holder) finishes the file.
    }
    let t = Trace::read(&path).unwrap();
    assert!(t.complete);
    assert_eq!(t.events.len(), 2);
    // Written back and read again: the same trace.
    let copy = dir.join("copy.trace");
    t.write(&copy).unwrap();
    assert_eq!(Trace::read(&copy).unwrap(), t);
    assert!(matches!(
        Trace::read(dir.join("missing")),
        Err(Error::Io {
            kind: io::ErrorKind::NotFound,
            ..
        })
    ));
    std::fs::write(dir.join("bad"), "nonsense").unwrap();
    assert!(matches!(
        Trace::read(dir.join("bad")),
        Err(Error::Io {
            kind: io::ErrorKind::InvalidData,
            ..
        })
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}
