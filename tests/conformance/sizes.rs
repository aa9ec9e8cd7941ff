use somalloc::testkit::pattern_byte;
use somalloc::{DeviceBuffer, Error, InvalidReason};

use crate::common::setup;

#[test]
fn sizes_from_zero_to_one_gib() {
    let Some(ctx) = setup("sizes::sizes_from_zero_to_one_gib") else {
        return;
    };
    // Sanitizer runs lower the top size (SOMALLOC_TEST_MAX_BYTES): a 1 GiB
    // kernel under instrumentation takes minutes.
    let max = std::env::var("SOMALLOC_TEST_MAX_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1usize << 30);
    let sizes = [0usize, 1, 4, 1 << 10, 1 << 20, 1 << 30];
    for (i, &bytes) in sizes.iter().filter(|&&b| b <= max).enumerate() {
        let mut buf = DeviceBuffer::<u8>::new_in(bytes, &ctx.pool, &ctx.stream).unwrap();
        assert_eq!(buf.len(), bytes);
        assert_eq!(buf.as_raw().is_null(), bytes == 0, "null address iff 0 bytes");
        let seed = 100 + i as u32;
        ctx.k.fill(&mut buf, seed, &ctx.stream).unwrap();
        assert_eq!(ctx.k.verify(&buf, seed, &ctx.stream).unwrap(), 0, "{bytes} bytes");
        if bytes > 0 {
            let used = ctx.pool.stats().unwrap().used_current;
            assert!(used >= bytes, "used {used} < {bytes}");
        }
        if bytes <= 1 << 20 {
            let host = buf.to_vec().unwrap();
            assert!(host
                .iter()
                .enumerate()
                .all(|(j, &b)| b == pattern_byte(j as u64, seed)));
        }
    }
    ctx.finish(&[]);
}

#[test]
fn zero_bytes_never_reach_the_vendor() {
    let Some(ctx) = setup("sizes::zero_bytes_never_reach_the_vendor") else {
        return;
    };
    let before = ctx.pool.stats().unwrap();
    let mut empty = DeviceBuffer::<u32>::new_in(0, &ctx.pool, &ctx.stream).unwrap();
    assert!(empty.is_empty() && empty.as_raw().is_null());
    empty.memset(7).unwrap();
    empty.copy_from_host(&[]).unwrap();
    assert_eq!(empty.to_vec().unwrap(), Vec::<u32>::new());
    let also_empty = DeviceBuffer::<u32>::new(0, &ctx.stream).unwrap();
    drop(also_empty);
    empty.release().unwrap();
    assert_eq!(ctx.pool.stats().unwrap(), before);
    ctx.finish(&[]);
}

#[test]
fn one_pebibyte_is_out_of_memory() {
    let Some(ctx) = setup("sizes::one_pebibyte_is_out_of_memory") else {
        return;
    };
    let _guard = crate::common::current_pool_lock();
    let pib = 1usize << 50;
    match DeviceBuffer::<u8>::new_in(pib, &ctx.pool, &ctx.stream) {
        Err(Error::OutOfMemory {
            requested,
            stats,
            arena: None,
        }) => {
            assert_eq!(requested, pib);
            assert!(stats.is_some(), "the error carries the pool's stats");
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    match DeviceBuffer::<u8>::new(pib, &ctx.stream) {
        Err(Error::OutOfMemory { requested, .. }) => assert_eq!(requested, pib),
        other => panic!("expected OutOfMemory from the current pool, got {other:?}"),
    }
    // The pool and the stream are still usable.
    let mut buf = DeviceBuffer::<u8>::new_in(1 << 20, &ctx.pool, &ctx.stream).unwrap();
    ctx.k.fill(&mut buf, 5, &ctx.stream).unwrap();
    assert_eq!(ctx.k.verify(&buf, 5, &ctx.stream).unwrap(), 0);
    drop(buf);
    ctx.finish(&[]);
}

#[test]
fn element_count_overflow_is_invalid_argument() {
    let Some(ctx) = setup("sizes::element_count_overflow_is_invalid_argument") else {
        return;
    };
    let r = DeviceBuffer::<u64>::new_in(usize::MAX / 4, &ctx.pool, &ctx.stream);
    assert!(
        matches!(
            r,
            Err(Error::InvalidArgument {
                reason: InvalidReason::SizeOverflow,
                ..
            })
        ),
        "{r:?}"
    );
    let r = DeviceBuffer::<[u8; 3]>::new(usize::MAX / 2, &ctx.stream);
    assert!(
        matches!(
            r,
            Err(Error::InvalidArgument {
                reason: InvalidReason::SizeOverflow,
                ..
            })
        ),
        "{r:?}"
    );
    ctx.finish(&[]);
}
