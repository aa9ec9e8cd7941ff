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
