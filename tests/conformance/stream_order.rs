use somalloc::testkit::pattern_byte;
use somalloc::DeviceBuffer;

use crate::common::{setup, spin_cycles};

#[test]
fn allocate_fill_copy_back_verify() {
    let Some(ctx) = setup("stream_order::allocate_fill_copy_back_verify") else {
        return;
    };
    let _guard = crate::common::current_pool_lock();
    let n = 3 * (1 << 20) + 5;
    let mut buf = DeviceBuffer::<u8>::new_in(n, &ctx.pool, &ctx.stream).unwrap();
    ctx.k.fill(&mut buf, 42, &ctx.stream).unwrap();
    let host = buf.to_vec().unwrap();
    let bad = host
        .iter()
        .enumerate()
        .filter(|(i, &b)| b != pattern_byte(*i as u64, 42))
        .count();
    assert_eq!(bad, 0);
    // And the other direction: host → device → host.
    let data: Vec<u32> = (0..1000u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let dev = DeviceBuffer::from_slice(&data, &ctx.stream).unwrap();
    assert_eq!(dev.to_vec().unwrap(), data);
    drop(dev);
    drop(buf);
    // `from_slice` used the current pool: only our pool is checked.
    ctx.finish(&[]);
}

/// The seeds' loop: allocate, compute, deallocate, repeat; 100 iterations
/// with no synchronisation in between, verified by content afterwards.
/// Odd iterations run the seeds' processKernel, even ones fill a pattern, so
/// a block reused too early would show the wrong content.
#[test]
fn allocate_compute_deallocate_repeat() {
    let Some(ctx) = setup("stream_order::allocate_compute_deallocate_repeat") else {
        return;
    };
    const N: usize = 1 << 20; // 4 MiB of f32, as in the seeds
    const ITERS: usize = 100;
    let mut results: Vec<DeviceBuffer<f32>> = (0..ITERS)
        .map(|_| DeviceBuffer::new_in(N, &ctx.pool, &ctx.stream).unwrap())
        .collect();
    for (i, result) in results.iter_mut().enumerate() {
        let mut data = DeviceBuffer::<f32>::new_in(N, &ctx.pool, &ctx.stream).unwrap();
        ctx.k.fill(&mut data, i as u32, &ctx.stream).unwrap();
        if i % 2 == 1 {
            ctx.k.process(&data, &ctx.stream).unwrap();
        }
        result.copy_from_device(&data).unwrap();
        drop(data); // free enqueued; the next iteration likely reuses the block
    }
    ctx.stream.synchronize().unwrap();
    let sqrt: Vec<f32> = (0..N).map(|i| (i as f32).sqrt()).collect();
    for (i, r) in results.iter().enumerate() {
        if i % 2 == 1 {
            assert!(
                r.to_vec().unwrap() == sqrt,
                "iteration {i}: processKernel output differs"
            );
        } else {
            assert_eq!(
                ctx.k.verify(r, i as u32, &ctx.stream).unwrap(),
                0,
                "iteration {i}"
            );
        }
    }
    drop(results);
    ctx.finish(&[]);
}

/// A block freed behind a long kernel and taken again on the same stream is
/// not written by the old kernel after the new owner starts.
#[test]
fn same_stream_reuse_is_race_free() {
    let Some(ctx) = setup("stream_order::same_stream_reuse_is_race_free") else {
        return;
    };
    let bytes = 64 << 20;
    let mut a = DeviceBuffer::<u8>::new_in(bytes, &ctx.pool, &ctx.stream).unwrap();
    let a_addr = a.as_raw() as usize;
    ctx.k.spin(spin_cycles(50), &ctx.stream).unwrap();
    ctx.k.fill(&mut a, 1, &ctx.stream).unwrap(); // runs ~50 ms from now
    drop(a);
    let mut b = DeviceBuffer::<u8>::new_in(bytes, &ctx.pool, &ctx.stream).unwrap();
    let reused = b.as_raw() as usize == a_addr;
    ctx.k.fill(&mut b, 2, &ctx.stream).unwrap();
    assert_eq!(ctx.k.verify(&b, 2, &ctx.stream).unwrap(), 0);
    crate::common::say(&format!(
        "stream_order::same_stream_reuse_is_race_free: block reused: {reused}"
    ));
    drop(b);
    ctx.finish(&[]);
}
