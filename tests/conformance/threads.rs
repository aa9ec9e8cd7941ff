use std::sync::{Arc, Barrier, Mutex};

use somalloc::{DeviceBuffer, Stream};

use crate::common::setup;

#[test]
fn allocate_on_one_thread_free_on_another() {
    let Some(ctx) = setup("threads::allocate_on_one_thread_free_on_another") else {
        return;
    };
    let buf = DeviceBuffer::<u32>::new_in(1 << 20, &ctx.pool, &ctx.stream).unwrap();
    ctx.k.fill(&buf, 77, &ctx.stream).unwrap();
    let stream = ctx.stream.clone();
    std::thread::spawn(move || {
        // The free is enqueued from this thread, on the buffer's stream.
        drop(buf);
        stream.synchronize().unwrap();
    })
    .join()
    .unwrap();
    ctx.finish(&[]);
}

/// 8 threads, each with its own stream, allocate, fill, verify and free; at
/// a barrier all live buffers are checked for overlap on the host (address
/// ranges) and on the device (every buffer still holds its own pattern after
/// all the others were filled).
#[test]
fn eight_threads_with_own_streams_never_overlap() {
    let Some(ctx) = setup("threads::eight_threads_with_own_streams_never_overlap") else {
        return;
    };
    const THREADS: usize = 8;
    const ROUNDS: usize = 4;
    const PER_THREAD: usize = 6;
    let barrier = Arc::new(Barrier::new(THREADS));
    let live: Arc<Mutex<Vec<(usize, usize, usize)>>> = Arc::new(Mutex::new(Vec::new()));
    let ctx = Arc::new(ctx);
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (barrier, live, ctx) = (barrier.clone(), live.clone(), ctx.clone());
            std::thread::spawn(move || {
                let stream = Stream::new(&ctx.dev).unwrap();
                let mut rng = 0x9E37_79B9u32 ^ (t as u32 * 7919);
                for round in 0..ROUNDS {
                    let mut bufs = Vec::new();
                    for j in 0..PER_THREAD {
                        rng ^= rng << 13;
                        rng ^= rng >> 17;
                        rng ^= rng << 5;
                        let bytes = 256 + (rng as usize % (2 << 20));
                        let seed = ((t * ROUNDS + round) * PER_THREAD + j) as u32;
                        let b = DeviceBuffer::<u8>::new_in(bytes, &ctx.pool, &stream).unwrap();
                        ctx.k.fill(&b, seed, &stream).unwrap();
                        live.lock().unwrap().push((b.as_raw() as usize, bytes, t));
                        bufs.push((b, seed));
                    }
                    stream.synchronize().unwrap();
                    barrier.wait(); // every thread's buffers are live and filled
                    if t == 0 {
                        let mut all = live.lock().unwrap().clone();
                        all.sort();
                        for w in all.windows(2) {
                            assert!(
                                w[0].0 + w[0].1 <= w[1].0,
                                "live buffers overlap: {:?} and {:?}",
                                w[0],
                                w[1]
                            );
                        }
                        assert_eq!(all.len(), THREADS * PER_THREAD);
                    }
                    for (b, seed) in &bufs {
                        assert_eq!(
                            ctx.k.verify(b, *seed, &stream).unwrap(),
                            0,
                            "thread {t} round {round}"
                        );
                    }
                    barrier.wait(); // checks done before anyone frees
                    if t == 0 {
                        live.lock().unwrap().clear();
                    }
                    drop(bufs);
                    barrier.wait();
                }
                stream.synchronize().unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    ctx.finish(&[]);
}
