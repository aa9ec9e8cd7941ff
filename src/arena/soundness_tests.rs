//! What a device does with stream handles, captures and half-failed calls,
//! on the fake device that models it (see `fake.rs`): the per-thread
//! default stream freed from one thread and reused from another, a capture
//! that begins at a fence's record, a map whose access grant and undoing
//! unmap both fail, and a stream destroyed under the arena.

use std::ffi::c_void;

use super::fake::Op;
use super::tests::{alloc, arena, assert_all_back, clean, free, front, stream};
use super::ArenaOptions;
use crate::capture::CaptureStatus;
use crate::resource::MemoryResource;
use crate::stream::{Stream, PER_THREAD};

const MIB: usize = 1 << 20;

/// Thread A frees a block on its per-thread default stream after using it
/// there; thread B then allocates on another stream, and trims. Neither
/// the reuse nor the unmap may come before A's use completes, which only
/// a record on A's thread can mark.
#[test]
fn a_free_on_the_per_thread_stream_is_ordered_on_the_freeing_thread() {
    for stream_waits in [true, false] {
        let (fr, f, _pool) = {
            let (a, f) = arena(1 << 30, ArenaOptions::default().stream_waits(stream_waits));
            let pool = crate::testing::FakeResource::new(None);
            let fr = super::front::Front::new(
                a,
                crate::device::Device::fake(0),
                pool.clone() as std::sync::Arc<dyn MemoryResource>,
            );
            (fr, f, pool)
        };
        let s = stream(500);
        let t = stream(501);
        // One whole chunk, so that T can only get it by reuse.
        let x = fr.allocate(20 * MIB, &s).unwrap() as usize;
        f.handed(x, 20 * MIB, &s);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let per_thread = Stream::fake(PER_THREAD, 0);
                f.enqueue(&per_thread); // A's kernels using the block
                f.freed(x, 20 * MIB, &per_thread);
                // SAFETY: allocated above, freed once, after its last use
                // on this thread's per-thread stream.
                unsafe { fr.deallocate(x as *mut c_void, 20 * MIB, &per_thread).unwrap() };
            });
        });
        for _ in 0..2 {
            let y = fr.allocate(20 * MIB, &t).unwrap() as usize;
            f.handed(y, 20 * MIB, &t);
            f.enqueue(&t);
            f.freed(y, 20 * MIB, &t);
            // SAFETY: allocated just above, freed once.
            unsafe { fr.deallocate(y as *mut c_void, 20 * MIB, &t).unwrap() };
        }
        fr.arena.trim(0);
        clean(&fr.arena, &f);
    }
}

/// An arena block freed on a capturing per-thread stream is refused, and
/// stays live (freed later on its own stream).
#[test]
fn a_captured_free_on_the_per_thread_stream_is_refused() {
    let (fr, f, _pool) = front(1 << 30);
    let s = stream(502);
    let x = fr.allocate(4096, &s).unwrap();
    let per_thread = Stream::fake(PER_THREAD, 0);
    per_thread.set_fake_capture(CaptureStatus::Active, 0x5ca0);
    crate::testing::fake_graph_begin(0x5ca0, 0);
    // SAFETY: refused, so not freed; freed below.
    let e = unsafe { fr.deallocate(x, 4096, &per_thread) }.unwrap_err();
    assert!(matches!(e, crate::Error::Capture { .. }), "{e:?}");
    assert_eq!(fr.arena.stats().live_blocks, 1);
    per_thread.set_fake_capture(CaptureStatus::None, 0);
    crate::testing::fake_graph_destroy(0x5ca0);
    // SAFETY: allocated above, freed once.
    unsafe { fr.deallocate(x, 4096, &s).unwrap() };
    assert_eq!(fr.arena.stats().live_blocks, 0);
    clean(&fr.arena, &f);
}

/// Another thread begins a capture of S between the arena's question and
/// its fence's record on S: the fence is a node of the graph, which T
/// must never wait on (T would join the capture, ordered after nothing).
#[test]
fn a_capture_that_begins_at_a_fence_record_is_never_waited_on() {
    let (a, f) = arena(1 << 30, ArenaOptions::default());
    let s = stream(510);
    let t = stream(511);
    let x = alloc(&a, &f, 20 * MIB, &s);
    free(&a, &f, x, 20 * MIB, &s);
    crate::testing::begin_capture_at_next_record(&s, 0x5ca7);
    let y = alloc(&a, &f, 20 * MIB, &t);
    assert_ne!(x, y, "S's free is not T's before S's capture ends");
    assert!(f.vm().violations.is_empty(), "{:#?}", f.vm().violations);
    s.set_fake_capture(CaptureStatus::None, 0);
    free(&a, &f, y, 20 * MIB, &t);
    // Once the capture is over, S's free is reused as usual.
    let z = alloc(&a, &f, 20 * MIB, &t);
    free(&a, &f, z, 20 * MIB, &t);
    a.trim(0);
    clean(&a, &f);
}

/// A growth whose access grant fails, and whose undoing unmap fails too,
/// leaves its mapping in place: the handle is not released while mapped,
/// nothing maps over it, and a later trim unmaps and releases it.
#[test]
fn a_map_that_cannot_be_undone_is_kept_until_it_unmaps() {
    let (a, f) = arena(1 << 30, ArenaOptions::default());
    let s = stream(520);
    f.fail(Op::Grant, 0);
    f.fail(Op::Unmap, 0);
    assert!(a.allocate(4 * MIB, &s).is_err(), "the growth fails");
    assert!(f.vm().violations.is_empty(), "{:#?}", f.vm().violations);
    assert_eq!(a.lock().orphans.len(), 1);
    let x = alloc(&a, &f, 4 * MIB, &s);
    free(&a, &f, x, 4 * MIB, &s);
    a.trim(0);
    assert!(a.lock().orphans.is_empty(), "unmapped and released at the trim");
    clean(&a, &f);
    drop(a);
    assert_all_back(&f);
}

/// The same for a move: the moved chunk's handle stays mapped at the
/// window, so the chunk it came from is not given back (its handle
/// released) before that mapping is gone.
#[test]
fn a_move_that_cannot_be_undone_keeps_its_chunk_until_it_unmaps() {
    let (a, f) = arena(1 << 30, ArenaOptions::default());
    let s = stream(521);
    // Four whole chunks, two of them freed (not adjacent): movable.
    let blocks: Vec<usize> = (0..4).map(|_| alloc(&a, &f, 20 * MIB, &s)).collect();
    free(&a, &f, blocks[0], 20 * MIB, &s);
    free(&a, &f, blocks[2], 20 * MIB, &s);
    let moves = a.stats().moves;
    f.fail(Op::Grant, 0);
    f.fail(Op::Unmap, 0);
    assert!(a.allocate(100 * MIB, &s).is_err(), "the growth stops at the move");
    assert_eq!(a.stats().moves, moves, "nothing moved");
    assert!(f.vm().violations.is_empty(), "{:#?}", f.vm().violations);
    f.complete(&s);
    a.trim(0);
    assert!(f.vm().violations.is_empty(), "{:#?}", f.vm().violations);
    let big = alloc(&a, &f, 100 * MIB, &s);
    free(&a, &f, big, 100 * MIB, &s);
    for &b in &[blocks[1], blocks[3]] {
        free(&a, &f, b, 20 * MIB, &s);
    }
    a.trim(0);
    clean(&a, &f);
    drop(a);
    assert_all_back(&f);
}

/// A stream destroyed while the arena still knows it, and later a new
/// stream with the same handle. Without `forget` first, the arena records
/// on the destroyed stream, and then on the new one as if it were the old
/// (whose frees it would take as complete): the fake sees both. With
/// `forget` first, nothing.
#[test]
fn a_stream_is_forgotten_before_it_is_destroyed() {
    for forget in [false, true] {
        let (a, f) = arena(1 << 30, ArenaOptions::default());
        let s = stream(530);
        let t = stream(531);
        let x = alloc(&a, &f, 20 * MIB, &s);
        free(&a, &f, x, 20 * MIB, &s);
        if forget {
            assert!(a.forget(&s).unwrap());
        }
        f.destroy(&s);
        let y = alloc(&a, &f, 20 * MIB, &t);
        let dead = f.vm().violations.iter().any(|v| v.contains("destroyed stream"));
        assert_eq!(dead, !forget, "{:#?}", f.vm().violations);
        f.reuse(&s);
        let again = stream(530); // the handle names a new stream now
        let z = alloc(&a, &f, 4096, &again);
        let w = alloc(&a, &f, 20 * MIB, &t);
        assert_eq!(f.vm().violations.is_empty(), forget, "{:#?}", f.vm().violations);
        if forget {
            free(&a, &f, y, 20 * MIB, &t);
            free(&a, &f, w, 20 * MIB, &t);
            free(&a, &f, z, 4096, &again);
            a.trim(0);
            clean(&a, &f);
        }
    }
}
