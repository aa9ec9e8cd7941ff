//! Tests of the capture bookkeeping on fake streams.

use super::*;
use crate::capture::captures_in_progress;

#[test]
fn fake_streams_report_their_capture() {
    let s = Stream::fake(0x9000, 0);
    assert!(s.capturing().unwrap().is_none());
    s.set_fake_capture(CaptureStatus::Active, 42);
    let c = s.capturing().unwrap().unwrap();
    assert_eq!((c.status, c.id), (CaptureStatus::Active, 42));
    assert!(s.is_capturing().unwrap());
    s.set_fake_capture(CaptureStatus::None, 0);
    assert!(!s.is_capturing().unwrap());
}

#[test]
fn a_free_deferred_without_a_graph_waits_for_its_stream() {
    let s = Stream::fake(0x9100, 0);
    s.set_fake_capture(CaptureStatus::Invalidated, 7);
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    defer(
        Deferred {
            stream: s.clone(),
            users: Vec::new(),
            free: Box::new(move |_| {
                d.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }),
        },
        &[s.capturing().unwrap().unwrap()],
    )
    .unwrap();
    // (The count is the process's: other tests' frees may finish at the
    // same time, so it says nothing of this one. Its own checks follow.)
    // Still capturing: not done.
    reclaim_graph_frees().unwrap();
    assert_eq!(done.load(Ordering::Relaxed), 0);
    s.set_fake_capture(CaptureStatus::None, 0);
    // Other tests may drain the queue too (and run the free a moment
    // later, on their thread); either way it runs once.
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while done.load(Ordering::Relaxed) == 0 && std::time::Instant::now() < end {
        let _ = reclaim_graph_frees().unwrap();
        std::thread::yield_now();
    }
    assert_eq!(done.load(Ordering::Relaxed), 1);
}

#[test]
fn an_active_capture_without_a_graph_is_an_error_not_a_free() {
    let s = Stream::fake(0x9200, 0);
    let c = Capturing {
        status: CaptureStatus::Active,
        id: 3,
        graph: None,
    };
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    let r = defer(
        Deferred {
            stream: s,
            users: Vec::new(),
            free: Box::new(move |_| {
                d.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }),
        },
        &[c],
    );
    assert!(matches!(r, Err(Error::Capture { .. })));
    let _ = reclaim_graph_frees();
    assert_eq!(done.load(Ordering::Relaxed), 0);
}

/// A failed `end_capture` whose follow-up question fails too leaves the
/// capture counted: owned streams must keep asking the runtime, since the
/// capture may still be running. A later `end_capture` that learns the
/// stream is free stops counting it. It runs in a process of its own.
#[test]
fn an_unknown_end_keeps_the_capture_counted() {
    // The count it raises would turn off the fast path of every other test
    // running beside it.
    if !crate::testing::in_own_process("graph::tests::an_unknown_end_keeps_the_capture_counted") {
        return;
    }
    let s = Stream::fake(0x7_0000, 0);
    s.set_fake_capture(CaptureStatus::Active, 99);
    // What `begin_capture` does before the runtime call.
    CAPTURES.fetch_add(1, Ordering::SeqCst);
    s.set_capture_flag(capture_flag::API_CAPTURE);
    // The question before the end answers; the one after it fails.
    s.fail_fake_queries_after(1);
    assert!(s.end_capture().is_err());
    assert!(captures_in_progress(), "the capture is still counted");
    assert!(
        s.take_capture_flag(capture_flag::API_CAPTURE),
        "still marked as captured through the API"
    );
    s.set_capture_flag(capture_flag::API_CAPTURE);
    // Now the stream says it is not capturing: the count goes.
    s.fail_fake_queries_after(-1);
    s.set_fake_capture(CaptureStatus::None, 0);
    let before = CAPTURES.load(Ordering::SeqCst);
    assert!(s.end_capture().is_err(), "the fake end still fails");
    assert_eq!(CAPTURES.load(Ordering::SeqCst), before - 1);
    assert!(!s.take_capture_flag(capture_flag::API_CAPTURE));
}

/// A deferred free whose call fails freed nothing: it stays queued and is
/// tried again at a later reclaim, so the memory is not lost.
#[test]
fn a_deferred_free_that_fails_is_tried_again() {
    let s = Stream::fake(0x9300, 0);
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    defer(
        Deferred {
            stream: s,
            users: Vec::new(),
            free: Box::new(move |_| {
                if c.fetch_add(1, Ordering::Relaxed) == 0 {
                    Err(Error::invalid("the first try fails"))
                } else {
                    Ok(())
                }
            }),
        },
        &[],
    )
    .unwrap();
    // Other tests may drain the queue too; either way it is tried twice.
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while calls.load(Ordering::Relaxed) < 2 && std::time::Instant::now() < end {
        let _ = reclaim_graph_frees();
        std::thread::yield_now();
    }
    assert_eq!(
        calls.load(Ordering::Relaxed),
        2,
        "tried once more after its failure, then done"
    );
}
