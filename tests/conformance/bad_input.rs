//! Rows of the bad-input table (`docs/bad_input.md`) not covered elsewhere.

use somalloc::{DeviceBuffer, Error, Stream};

use crate::common::setup;

#[test]
fn usize_max_bytes_is_out_of_memory() {
    let Some(ctx) = setup("bad_input::usize_max_bytes_is_out_of_memory") else {
        return;
    };
    match DeviceBuffer::<u8>::new_in(usize::MAX, &ctx.pool, &ctx.stream) {
        Err(Error::OutOfMemory { requested, .. }) => assert_eq!(requested, usize::MAX),
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    ctx.finish(&[]);
}

/// Dropping every handle to a stream while a buffer lives on it is fine: the
/// buffer keeps the stream alive and frees on it.
#[test]
fn stream_dropped_while_buffers_live() {
    let Some(ctx) = setup("bad_input::stream_dropped_while_buffers_live") else {
        return;
    };
    let before = somalloc::drop_errors().count;
    let s = Stream::new(&ctx.dev).unwrap();
    let mut buf = DeviceBuffer::<u8>::new_in(1 << 20, &ctx.pool, &s).unwrap();
    drop(s);
    let s = buf.stream().clone();
    ctx.k.fill(&mut buf, 12, &s).unwrap();
    assert_eq!(ctx.k.verify(&buf, 12, &s).unwrap(), 0);
    drop(buf);
    s.synchronize().unwrap();
    assert_eq!(somalloc::drop_errors().count, before, "a Drop failed");
    ctx.finish(&[]);
}
