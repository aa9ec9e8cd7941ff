//! Tests of streams and events on fake handles (no GPU needed).

use super::*;

fn refused(raw: usize) -> String {
    let dev = Device::fake(0);
    // SAFETY: the special handles are refused before any use (and before
    // any runtime call, so this runs without a GPU).
    match unsafe { Stream::from_raw(&dev, raw as *mut c_void) } {
        Err(Error::InvalidArgument {
            reason: InvalidReason::SpecialStreamHandle,
            why,
        }) => why,
        other => panic!("handle {raw:#x} was not refused: {other:?}"),
    }
}

#[test]
fn special_handles_are_refused_without_a_runtime_call() {
    for raw in [0usize, 1, 2] {
        let why = refused(raw);
        assert!(why.contains("Stream::new"), "{why}");
        assert!(why.contains("Stream::from_cudarc"), "{why}");
        // The default streams have constructors of their own.
        assert!(why.contains("Stream::legacy_default"), "{why}");
        assert!(why.contains("Stream::per_thread_default"), "{why}");
    }
    assert!(refused(0).contains("null"));
    assert!(refused(1).contains("cudaStreamLegacy"));
    assert!(refused(2).contains("hipStreamPerThread"));
}

#[test]
fn ordinary_handles_are_borrowed_by_identity() {
    let dev = Device::fake(0);
    // SAFETY: never used with the runtime (dropping a borrowed stream
    // calls nothing).
    let a = unsafe { Stream::from_raw(&dev, 0x1000 as *mut c_void) }.unwrap();
    // SAFETY: as above.
    let b = unsafe { Stream::from_raw(&dev, 0x1000 as *mut c_void) }.unwrap();
    // SAFETY: as above.
    let c = unsafe { Stream::from_raw(&dev, 0x3 as *mut c_void) }.unwrap();
    assert!(!a.is_owned());
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_eq!(a.as_raw() as usize, 0x1000);
    // Equal handles hash alike: a set keeps one of them. (The hash reads
    // only the handle, which never changes.)
    #[allow(clippy::mutable_key_type)]
    let set: std::collections::HashSet<Stream> = [a.clone(), b, c, a.clone()].into_iter().collect();
    assert_eq!(set.len(), 2);
    assert!(set.contains(&a));
}

#[test]
fn keep_alive_lives_as_long_as_the_last_clone() {
    let token = Arc::new(7u32);
    let s = Stream::borrowed(
        &Device::fake(0),
        0x1000 as *mut c_void,
        Some(Box::new(Arc::clone(&token))),
    )
    .unwrap();
    assert_eq!(s.keep_alive::<Arc<u32>>().map(|t| **t), Some(7));
    assert!(s.keep_alive::<String>().is_none());
    let clone = s.clone();
    drop(s);
    assert_eq!(Arc::strong_count(&token), 2);
    drop(clone);
    assert_eq!(Arc::strong_count(&token), 1);
    // A refused handle drops what it was given at once.
    let refused = Stream::borrowed(
        &Device::fake(0),
        0x2 as *mut c_void,
        Some(Box::new(Arc::clone(&token))),
    );
    assert!(refused.is_err());
    assert_eq!(Arc::strong_count(&token), 1);
}

// ---------------------------------------------------------------------------
// The capture question on borrowed streams: how many times a path asks.

mod questions {
    use std::sync::Arc;

    use crate::buffer::DeviceBuffer;
    use crate::cache::{CacheConfig, CacheTier};
    use crate::graph::CaptureStatus;
    use crate::resource::MemoryResource;
    use crate::stream::Stream;
    use crate::testing::FakeResource;

    /// Runs `n` allocate + free pairs of `bytes` through `f` and returns the
    /// questions asked about `s` per pair.
    fn per_pair(s: &Stream, n: usize, mut f: impl FnMut()) -> f64 {
        let before = s.questions();
        for _ in 0..n {
            f();
        }
        (s.questions() - before) as f64 / n as f64
    }

    /// A borrowed stream (made here as a fake one: it reports the capture
    /// state the test sets), its tier over a fake upstream that asks like
    /// the pool does unless given the answer, and the resources to use.
    /// The cache's cap is small (1 MiB), so that frees spill upstream.
    struct Setup {
        s: Stream,
        fake: Arc<FakeResource>,
        _tier: CacheTier,
        stats: Arc<crate::StreamCache>,
        cache: Arc<dyn MemoryResource>,
        upstream: Arc<dyn MemoryResource>,
    }

    fn setup(id: usize) -> Setup {
        let s = Stream::fake(0x7_0000 + 16 * id, 0);
        assert!(!s.is_owned() && s.may_capture());
        let fake = FakeResource::new(None);
        let upstream: Arc<dyn MemoryResource> = fake.clone();
        let config = CacheConfig::default().per_stream_cap(1 << 20);
        let tier = CacheTier::new(upstream.clone(), config).unwrap();
        let stats = tier.for_stream(&s).unwrap();
        let cache: Arc<dyn MemoryResource> = stats.clone();
        Setup {
            s,
            fake,
            _tier: tier,
            stats,
            cache,
            upstream,
        }
    }

    /// Every allocation and free path of a buffer and of the cache tier,
    /// `n` pairs each; the questions per pair of each.
    fn paths(t: &Setup, n: usize) -> [f64; 5] {
        let (s, cache, upstream) = (&t.s, &t.cache, &t.upstream);
        [
            // A cached block under a buffer (the first pair a miss).
            per_pair(s, n, || {
                drop(DeviceBuffer::<u8>::new_with(4096, cache, s).unwrap())
            }),
            // Above the classes: past the cache to the upstream and back.
            per_pair(s, n, || {
                drop(DeviceBuffer::<u8>::new_with(100 << 20, cache, s).unwrap())
            }),
            // The stream cache through the resource trait.
            per_pair(s, n, || {
                let p = cache.allocate(5000, s).unwrap();
                // SAFETY: from this cache, freed once, never used.
                unsafe { cache.deallocate(p, 5000, s) }.unwrap();
            }),
            // A buffer on another resource (the fake upstream, as a pool).
            per_pair(s, n, || {
                drop(DeviceBuffer::<u8>::new_with(3000, upstream, s).unwrap())
            }),
            // Misses, and frees that the cap spills upstream: many live
            // blocks, then all freed.
            {
                let before = s.questions();
                let live: Vec<_> = (0..n)
                    .map(|i| DeviceBuffer::<u8>::new_with(1 << (10 + i % 12), cache, s).unwrap())
                    .collect();
                drop(live);
                (s.questions() - before) as f64 / n as f64
            },
        ]
    }

    #[test]
    fn a_borrowed_stream_is_asked_once_per_allocation_and_once_per_free() {
        let t = setup(1);
        assert_eq!(paths(&t, 40), [2.0; 5]);
        let st = t.stats.stats();
        assert!(
            st.hits > 0 && st.misses > 0 && st.bypassed > 0 && st.spilled > 0,
            "{st:?}"
        );
        t.fake.assert_clean();
    }

    #[test]
    fn a_promised_borrowed_stream_is_never_asked() {
        let t = setup(2);
        // SAFETY: nothing captures this fake stream.
        unsafe { t.s.assume_captured_only_by_somalloc() };
        assert!(!t.s.may_capture());
        assert_eq!(paths(&t, 40), [0.0; 5]);
        // The promise holds for clones made before and after it.
        let clone = t.s.clone();
        assert!(!clone.may_capture());
        t.fake.assert_clean();
    }

    /// While the stream captures, each allocation and each free asks one
    /// question: the status call, then (it is capturing) which capture.
    #[test]
    fn a_capturing_borrowed_stream_is_asked_once_per_call() {
        let t = setup(3);
        t.s.set_fake_capture(CaptureStatus::Active, 77);
        assert_eq!(paths(&t, 10), [4.0; 5]);
        t.s.set_fake_capture(CaptureStatus::None, 0);
        let _ = crate::graph::reclaim_graph_frees();
        t.fake.assert_clean();
    }
}

/// Another thread begins a capture of the stream between `record`'s
/// question and the record itself: the event counts as the capture's (no
/// host query, no device wait as a point of the stream) until it is
/// recorded again outside a capture.
#[test]
fn an_event_recorded_as_a_capture_begins_is_the_captures() {
    let s = Stream::fake(0x5e_c000, 0);
    let e = Event::for_stream(&s, false).unwrap();
    crate::testing::begin_capture_at_next_record(&s, 0x77);
    e.record(&s).unwrap();
    assert!(matches!(e.is_complete(), Err(Error::Capture { .. })));
    assert!(matches!(e.synchronize(), Err(Error::Capture { .. })));
    assert!(e.refuse_if_captured("a wait").is_err());
    s.set_fake_capture(crate::capture::CaptureStatus::None, 0);
    e.record(&s).unwrap();
    assert!(e.is_complete().is_ok());
    assert!(e.refuse_if_captured("a wait").is_ok());
}
