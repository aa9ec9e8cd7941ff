//! GPU-free tests of the adaptors over a fake upstream and fake streams.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::*;
use crate::buffer::DeviceBuffer;
use crate::cache::{CacheConfig, CacheTier};
use crate::error::{Error, InvalidReason};
use crate::resource::MemoryResource;
use crate::stream::Stream;
use crate::testing::FakeResource;

fn s() -> Stream {
    Stream::fake(0x4000, 0)
}

fn dyn_res<R: MemoryResource + 'static>(r: &Arc<R>) -> Arc<dyn MemoryResource> {
    r.clone()
}

#[test]
fn statistics_count_bytes_peaks_and_sizes() {
    let fake = FakeResource::new(Some(1 << 20));
    let stats = Arc::new(StatisticsAdaptor::new(fake.clone()));
    let res = dyn_res(&stats);
    let stream = s();
    let a = res.allocate(3000, &stream).unwrap();
    let b = res.allocate(1, &stream).unwrap();
    let c = res.allocate(4096, &stream).unwrap();
    assert!(res.allocate(2 << 20, &stream).is_err());
    // SAFETY: fake addresses from this stack, freed once.
    unsafe { res.deallocate(c, 4096, &stream).unwrap() };
    let st = stats.stats();
    assert_eq!(
        (st.allocations, st.deallocations, st.failed_allocations),
        (3, 1, 1)
    );
    assert_eq!(
        (st.bytes_current, st.bytes_peak, st.bytes_total),
        (3001, 7097, 7097)
    );
    assert_eq!((st.outstanding, st.outstanding_peak), (2, 3));
    assert_eq!((st.histogram[0], st.histogram[11], st.histogram[12]), (1, 1, 1));
    assert_eq!(st.buckets().count(), 3);
    assert!(st.to_string().contains("allocations 3 (failed 1)"));
    stats.reset_peaks();
    assert_eq!(stats.stats().bytes_peak, 3001);
    // SAFETY: as above.
    unsafe {
        res.deallocate(a, 3000, &stream).unwrap();
        res.deallocate(b, 1, &stream).unwrap();
    }
    assert_eq!(stats.stats().bytes_current, 0);
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

#[test]
fn limiting_refuses_above_the_cap_without_calling_inner() {
    let fake = FakeResource::new(None);
    let limit = Arc::new(LimitingAdaptor::new(fake.clone(), 10_000));
    let res = dyn_res(&limit);
    let stream = s();
    let a = res.allocate(6000, &stream).unwrap();
    let calls = fake.state().allocs;
    match res.allocate(5000, &stream) {
        Err(Error::OutOfMemory {
            requested,
            stats,
            arena: None,
        }) => {
            assert_eq!(requested, 5000);
            assert!(stats.is_none());
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    assert_eq!(fake.state().allocs, calls, "the inner resource was not asked");
    let b = res.allocate(4000, &stream).unwrap();
    assert_eq!(limit.allocated_bytes(), 10_000);
    // SAFETY: fake addresses from this stack, freed once.
    unsafe { res.deallocate(a, 6000, &stream).unwrap() };
    assert_eq!(limit.allocated_bytes(), 4000);
    let c = res.allocate(6000, &stream).unwrap();
    // An inner failure gives the reservation back.
    let tiny = Arc::new(LimitingAdaptor::new(FakeResource::new(Some(10)), 100));
    assert!(tiny.allocate(50, &stream).is_err());
    assert_eq!(tiny.allocated_bytes(), 0);
    // SAFETY: as above.
    unsafe {
        res.deallocate(b, 4000, &stream).unwrap();
        res.deallocate(c, 6000, &stream).unwrap();
    }
    assert_eq!(limit.allocated_bytes(), 0);
    fake.assert_clean();
}

#[test]
fn limiting_holds_under_threads() {
    let fake = FakeResource::new(None);
    let limit = Arc::new(LimitingAdaptor::new(fake.clone(), 64 * 1000));
    let high = Arc::new(AtomicUsize::new(0));
    std::thread::scope(|scope| {
        for t in 0..8 {
            let (limit, high, fake) = (limit.clone(), high.clone(), fake.clone());
            scope.spawn(move || {
                let stream = Stream::fake(0x100 + t, 0);
                for _ in 0..2000 {
                    if let Ok(p) = limit.allocate(1000, &stream) {
                        high.fetch_max(fake.state().used, Ordering::Relaxed);
                        // SAFETY: fake address from this adaptor, freed once.
                        unsafe { limit.deallocate(p, 1000, &stream).unwrap() };
                    }
                }
            });
        }
    });
    assert!(high.load(Ordering::Relaxed) <= 64 * 1000);
    assert_eq!(limit.allocated_bytes(), 0);
}

#[test]
fn tracking_reports_outstanding_and_refuses_bad_frees() {
    let fake = FakeResource::new(None);
    let tracking = Arc::new(TrackingAdaptor::new(fake.clone(), Backtraces::Capture));
    let res = dyn_res(&tracking);
    let stream = s();
    assert!(tracking.leak_report().contains("no outstanding"));
    let a = res.allocate(100, &stream).unwrap();
    let b = res.allocate(200, &stream).unwrap();
    assert_eq!(tracking.outstanding_bytes(), 300);
    let out = tracking.outstanding();
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].stream, 0x4000);
    let report = tracking.leak_report();
    assert!(
        report.contains("2 outstanding allocation(s), 300 bytes"),
        "{report}"
    );
    assert!(
        report.contains(&format!("{:#x}: 100 bytes", a as usize)),
        "{report}"
    );
    assert!(
        report.lines().count() > 3,
        "backtraces are in the report: {report}"
    );
    // Wrong size, double free and foreign pointers never reach the inner resource.
    // SAFETY: each of these is refused before the inner resource sees it.
    unsafe {
        assert!(matches!(
            res.deallocate(a, 99, &stream),
            Err(Error::InvalidArgument {
                reason: InvalidReason::UnknownAllocation,
                ..
            })
        ));
        res.deallocate(a, 100, &stream).unwrap();
        assert!(matches!(
            res.deallocate(a, 100, &stream),
            Err(Error::InvalidArgument {
                reason: InvalidReason::UnknownAllocation,
                ..
            })
        ));
        assert!(matches!(
            res.deallocate(0x1234 as *mut c_void, 1, &stream),
            Err(Error::InvalidArgument {
                reason: InvalidReason::UnknownAllocation,
                ..
            })
        ));
    }
    fake.assert_clean();
    // A failed inner free keeps the record.
    fake.fail_frees(true);
    // SAFETY: the fake refuses without freeing; `b` stays allocated.
    assert!(unsafe { res.deallocate(b, 200, &stream) }.is_err());
    fake.fail_frees(false);
    assert_eq!(tracking.outstanding_bytes(), 200);
    // Dropping with `b` outstanding writes the report to stderr (no panic).
    drop(res);
    drop(tracking);
    assert_eq!(fake.state().live.len(), 1);
}

#[test]
fn tracking_without_backtraces_and_through_buffers() {
    let fake = FakeResource::new(None);
    let tracking = Arc::new(TrackingAdaptor::new(fake.clone(), Backtraces::Off));
    let res = dyn_res(&tracking);
    let stream = s();
    let buf = DeviceBuffer::<u32>::new_with(25, &res, &stream).unwrap();
    let report = tracking.leak_report();
    assert_eq!(report.lines().count(), 2, "{report}");
    assert!(report.contains("100 bytes"));
    drop(buf);
    assert!(tracking.outstanding().is_empty());
    fake.assert_clean();
}

#[test]
fn retry_runs_the_steps_in_order_then_retries_once() {
    let fake = FakeResource::new(None);
    let limit = Arc::new(LimitingAdaptor::new(fake.clone(), 1000));
    let stream = s();
    let hog = Mutex::new(Some(limit.allocate(800, &stream).unwrap() as usize));
    let order = Arc::new(Mutex::new(Vec::new()));
    let (o1, o2, o3) = (order.clone(), order.clone(), order.clone());
    let limit2 = limit.clone();
    let retry = Arc::new(
        RetryAdaptor::new(limit.clone())
            .on_oom("fails", move |bytes, _| {
                o1.lock().unwrap().push(("fails", bytes));
                Err(Error::invalid("this step fails"))
            })
            .on_oom("frees the hog", move |bytes, stream| {
                o2.lock().unwrap().push(("frees", bytes));
                match hog.lock().unwrap().take() {
                    // SAFETY: `hog` came from `limit2` and is freed once, here.
                    Some(hog) => unsafe { limit2.deallocate(hog as *mut c_void, 800, stream) },
                    None => Ok(()),
                }
            })
            .on_oom("after", move |bytes, _| {
                o3.lock().unwrap().push(("after", bytes));
                Ok(())
            }),
    );
    assert_eq!(retry.steps(), ["fails", "frees the hog", "after"]);
    let p = retry.allocate(500, &stream).unwrap();
    assert_eq!(
        *order.lock().unwrap(),
        [("fails", 500), ("frees", 500), ("after", 500)]
    );
    assert_eq!(
        retry.stats(),
        RetryStats {
            out_of_memory: 1,
            recovered: 1,
            step_errors: 1
        }
    );
    // Nothing to recover: the retry's OutOfMemory comes back.
    assert!(matches!(
        retry.allocate(900, &stream),
        Err(Error::OutOfMemory { requested: 900, .. })
    ));
    assert_eq!(retry.stats().out_of_memory, 2);
    assert_eq!(retry.stats().recovered, 1);
    // Other errors are not retried.
    let zero = RetryAdaptor::new(fake.clone());
    assert!(matches!(
        zero.allocate(0, &stream),
        Err(Error::InvalidArgument { .. })
    ));
    assert_eq!(zero.stats().out_of_memory, 0);
    fake.state().errors.clear(); // the 0-byte call above was on purpose
                                 // SAFETY: from this stack, freed once.
    unsafe { retry.deallocate(p, 500, &stream).unwrap() };
    assert!(fake.state().live.is_empty());
}

#[test]
fn retry_flushes_a_cache_tier_that_holds_the_memory() {
    // Cached blocks of a tier count against a shared limit; an allocation
    // beside the tier that hits the limit gets through after the flush.
    let fake = FakeResource::new(None);
    let limit = Arc::new(LimitingAdaptor::new(fake.clone(), 1 << 20));
    let tier = Arc::new(CacheTier::new(limit.clone(), CacheConfig::default()).unwrap());
    let stream = s();
    let cache = tier.for_stream(&stream).unwrap();
    let blocks: Vec<_> = (0..3)
        .map(|_| cache.allocate(256 << 10, &stream).unwrap())
        .collect();
    for b in blocks {
        // SAFETY: from this cache, freed once.
        unsafe { cache.deallocate(b, 256 << 10, &stream).unwrap() };
    }
    assert_eq!(limit.allocated_bytes(), 768 << 10);
    let retry = RetryAdaptor::new(limit.clone()).flush_on_oom(&tier);
    let p = retry.allocate(512 << 10, &stream).unwrap();
    assert_eq!(tier.cached_bytes(), 0);
    assert_eq!(retry.stats().recovered, 1);
    // SAFETY: from `limit` through `retry`, freed once.
    unsafe { retry.deallocate(p, 512 << 10, &stream).unwrap() };
    // A flush step whose tier is gone does nothing.
    drop(cache);
    drop(tier);
    let orphan = Arc::new(LimitingAdaptor::new(fake.clone(), 10));
    let gone = {
        let t = Arc::new(CacheTier::new(orphan.clone(), CacheConfig::default()).unwrap());
        RetryAdaptor::new(orphan.clone()).flush_on_oom(&t)
    };
    assert!(gone.allocate(100, &stream).is_err());
    assert_eq!(gone.stats().step_errors, 0);
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

#[test]
fn adaptors_compose_over_the_cache_tier() {
    let fake = FakeResource::new(None);
    let tier = Arc::new(CacheTier::new(fake.clone(), CacheConfig::default()).unwrap());
    let stream = s();
    let cache: Arc<dyn MemoryResource> = tier.for_stream(&stream).unwrap();
    let tracking = Arc::new(TrackingAdaptor::new(cache, Backtraces::Off));
    let limited = Arc::new(LimitingAdaptor::new(tracking.clone(), 1 << 20));
    let stats = Arc::new(StatisticsAdaptor::new(limited.clone()));
    let res = dyn_res(&stats);
    for _ in 0..10 {
        let a = DeviceBuffer::<u8>::new_with(5000, &res, &stream).unwrap();
        let b = DeviceBuffer::<u8>::new_with(70_000, &res, &stream).unwrap();
        assert_eq!(tracking.outstanding_bytes(), 75_000);
        drop((a, b));
    }
    assert!(matches!(
        DeviceBuffer::<u8>::new_with(2 << 20, &res, &stream),
        Err(Error::OutOfMemory { .. })
    ));
    let st = stats.stats();
    assert_eq!(
        (st.allocations, st.deallocations, st.failed_allocations),
        (20, 20, 1)
    );
    assert_eq!(st.bytes_peak, 75_000);
    assert_eq!(tier.stats().total.hits, 18);
    assert_eq!(fake.state().allocs, 2, "two upstream allocations for 20 buffers");
    drop(res);
    drop(stats);
    drop(limited);
    drop(tracking);
    drop(tier);
    assert!(fake.state().live.is_empty());
    fake.assert_clean();
}

// ---------------------------------------------------------------------------
// The planning adaptor.

#[cfg(feature = "plan")]
mod planning {
    use super::*;
    use crate::graph::CaptureStatus;
    use crate::trace::{Action, Event, Source, StreamInfo, ThreadInfo, Trace};

    const STEP: [usize; 4] = [1000, 2000, 3000, 4000];

    /// A program on one stream: `steps` steps of four blocks freed at once
    /// and a 512-byte one (a gradient) freed at the next step's start.
    /// Calls `alloc(size)` / `free(number)` in order.
    fn program(steps: usize, mut alloc: impl FnMut(usize), mut free: impl FnMut(usize)) {
        let mut n = 0;
        let mut grad = None;
        for _ in 0..steps {
            if let Some(g) = grad.take() {
                free(g);
            }
            for size in STEP {
                alloc(size);
                free(n);
                n += 1;
            }
            alloc(512);
            grad = Some(n);
            n += 1;
        }
    }

    fn recorded(steps: usize) -> Trace {
        let events = std::cell::RefCell::new(Vec::new());
        let addr = |k: usize| 0x10_0000 + k as u64 * 0x10_0000;
        let sizes = std::cell::RefCell::new(Vec::new());
        program(
            steps,
            |size| {
                let k = sizes.borrow().len();
                sizes.borrow_mut().push(size);
                events.borrow_mut().push(
                    Event::new(0, Action::Allocate, 0, 0)
                        .on(0)
                        .at(size as u64, addr(k)),
                );
            },
            |k| {
                let size = sizes.borrow()[k] as u64;
                events
                    .borrow_mut()
                    .push(Event::new(0, Action::Free, 0, 0).on(0).at(size, addr(k)));
            },
        );
        Trace {
            source: Source::Somalloc,
            version: 1,
            meta: Vec::new(),
            threads: vec![ThreadInfo { name: "t".into() }],
            streams: vec![StreamInfo {
                device: 0,
                handle: 0x7000,
            }],
            backtraces: Vec::new(),
            events: events.into_inner(),
            dropped: 0,
            complete: true,
        }
    }

    /// Runs `steps` steps through `res` on `stream`; every block live at
    /// once holds its own bytes.
    fn run(res: &dyn MemoryResource, stream: &Stream, steps: usize) {
        let live = std::cell::RefCell::new(Vec::<(usize, usize)>::new());
        let blocks = std::cell::RefCell::new(Vec::<(*mut c_void, usize)>::new());
        program(
            steps,
            |size| {
                let p = res.allocate(size, stream).unwrap();
                let (a, b) = (p as usize, p as usize + size);
                assert!(
                    live.borrow().iter().all(|&(c, d)| b <= c || d <= a),
                    "{a:#x} overlaps"
                );
                live.borrow_mut().push((a, b));
                blocks.borrow_mut().push((p, size));
            },
            |k| {
                let (p, size) = blocks.borrow()[k];
                live.borrow_mut().retain(|&(a, _)| a != p as usize);
                // SAFETY: allocated above on this stream, freed once.
                unsafe { res.deallocate(p, size, stream).unwrap() };
            },
        );
        // The last gradient.
        let (p, size) = *blocks.borrow().last().unwrap();
        // SAFETY: as above.
        unsafe { res.deallocate(p, size, stream).unwrap() };
    }

    #[test]
    fn a_recorded_program_is_served_from_its_plan_for_more_steps() {
        let fake = FakeResource::new(None);
        let planned = Arc::new(PlanningAdaptor::new(fake.clone(), &recorded(3)).unwrap());
        // Another run's stream takes the recorded stream's plan.
        let stream = Stream::fake(0x7100, 0);
        run(&*planned, &stream, 10);
        assert_eq!(planned.counts(), (50, 0));
        // The arena: the largest block (each is freed before the next is
        // allocated, the gradient included, so they all share it).
        assert_eq!(planned.arena_bytes(), 4096);
        assert_eq!(fake.live(), 1, "one allocation upstream: the arena");
        assert!(planned.release(&stream).unwrap());
        fake.assert_clean();
        // Released: the stream is served upstream from now on.
        run(&*planned, &stream, 1);
        assert_eq!(planned.counts(), (50, 0));
        fake.assert_clean();
    }

    #[test]
    fn strays_captures_and_streams_without_a_plan_go_upstream() {
        let fake = FakeResource::new(None);
        let planned = Arc::new(PlanningAdaptor::new(fake.clone(), &recorded(3)).unwrap());
        let stream = Stream::fake(0x7200, 0);
        // A size the plan does not have: upstream, and counted.
        let odd = planned.allocate(777, &stream).unwrap();
        assert_eq!(planned.counts(), (0, 1));
        assert_eq!(fake.live(), 2, "the arena and the odd block");
        // While the stream captures, nothing comes from the plan.
        stream.set_fake_capture(CaptureStatus::Active, 9);
        let captured = planned.allocate(1000, &stream).unwrap();
        assert_eq!(planned.counts(), (0, 1));
        stream.set_fake_capture(CaptureStatus::None, 0);
        // A second stream finds no plan left.
        let other = Stream::fake(0x7300, 0);
        let p = planned.allocate(1000, &other).unwrap();
        assert_eq!(fake.live(), 4);
        // A block still live: the arena is kept.
        let held = planned.allocate(1000, &stream).unwrap();
        assert_eq!(planned.counts(), (1, 1));
        assert!(!planned.release(&stream).unwrap());
        // SAFETY: each allocated above, freed once on its stream.
        unsafe {
            planned.deallocate(held, 1000, &stream).unwrap();
            planned.deallocate(p, 1000, &other).unwrap();
            planned.deallocate(captured, 1000, &stream).unwrap();
            planned.deallocate(odd, 777, &stream).unwrap();
        }
        assert!(planned.release(&stream).unwrap());
        fake.assert_clean();
    }

    #[test]
    fn a_planned_block_freed_twice_is_an_error_not_a_second_free() {
        let fake = FakeResource::new(None);
        let planned = PlanningAdaptor::new(fake.clone(), &recorded(3)).unwrap();
        let stream = Stream::fake(0x7400, 0);
        let p = planned.allocate(1000, &stream).unwrap();
        // SAFETY: allocated above; the second free is the error under test
        // (the adaptor knows the block is no longer live).
        unsafe {
            planned.deallocate(p, 1000, &stream).unwrap();
            assert!(planned.deallocate(p, 1000, &stream).is_err());
        }
        assert!(planned.release(&stream).unwrap());
        fake.assert_clean();
    }
}
