use std::sync::Arc;

use somalloc::{DeviceBuffer, Stream};

use crate::common::{eight_threads_never_overlap, setup, ThreadAlloc};

#[test]
fn allocate_on_one_thread_free_on_another() {
    let Some(ctx) = setup("threads::allocate_on_one_thread_free_on_another") else {
        return;
    };
    let mut buf = DeviceBuffer::<u32>::new_in(1 << 20, &ctx.pool, &ctx.stream).unwrap();
    ctx.k.fill(&mut buf, 77, &ctx.stream).unwrap();
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

/// 8 threads, each with its own stream, allocate from the test pool, fill,
/// verify and free; at a barrier all live buffers are checked for overlap on
/// the host (address ranges) and on the device (every buffer still holds its
/// own pattern after all the others were filled).
#[test]
fn eight_threads_with_own_streams_never_overlap() {
    let Some(ctx) = setup("threads::eight_threads_with_own_streams_never_overlap") else {
        return;
    };
    let ctx = Arc::new(ctx);
    let pool = ctx.pool.clone();
    eight_threads_never_overlap(&ctx, move |stream: &Stream| -> ThreadAlloc {
        let (pool, stream) = (pool.clone(), stream.clone());
        Box::new(move |bytes| DeviceBuffer::<u8>::new_in(bytes, &pool, &stream).unwrap())
    });
    ctx.finish(&[]);
}

/// The same on a virtual-memory arena (a SKIP line where the device has no
/// virtual-memory management): blocks of one arena, split and merged from
/// shared chunks, never overlap, and every buffer keeps its pattern.
#[test]
fn eight_threads_never_overlap_on_the_arena() {
    let name = "threads::eight_threads_never_overlap_on_the_arena";
    let Some(ctx) = setup(name) else {
        return;
    };
    let arena = match somalloc::VmmArena::new(&ctx.dev, somalloc::ArenaOptions::default()) {
        Ok(a) => Arc::new(a),
        Err(e @ somalloc::Error::Unsupported { .. }) => {
            crate::common::say(&format!("SKIP {name}: {e}"));
            return;
        }
        Err(e) => panic!("{name}: {e}"),
    };
    let ctx = Arc::new(ctx);
    let res: Arc<dyn somalloc::MemoryResource> = arena.clone();
    let streams = eight_threads_never_overlap(&ctx, move |stream: &Stream| -> ThreadAlloc {
        let (res, stream) = (res.clone(), stream.clone());
        Box::new(move |bytes| DeviceBuffer::<u8>::new_with(bytes, &res, &stream).unwrap())
    });
    drop(streams);
    ctx.finish(&[]);
    assert_eq!(arena.stats().live_bytes, 0, "every arena block came back");
}
