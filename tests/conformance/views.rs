//! Views of buffers on a device: copies, fills and kernels on sub-ranges
//! touch exactly their range, and keep the buffer's stream rules.

use somalloc::{DeviceBuffer, InvalidReason};

use crate::common::setup;

/// Host copies, a fill, a kernel and a device copy, each on a different
/// range of one buffer; the whole buffer read back shows each where it
/// belongs and nothing outside.
#[test]
fn ranges_are_copied_filled_and_written_by_kernels() {
    let Some(ctx) = setup("views::ranges_are_copied_filled_and_written_by_kernels") else {
        return;
    };
    const N: usize = 4096;
    let s = &ctx.stream;
    let mut buf = DeviceBuffer::<u32>::new_in(N, &ctx.pool, s).unwrap();
    buf.memset(0).unwrap();
    let mut want = vec![0u32; N];

    // Host to a range, and back from a range.
    let data: Vec<u32> = (0..100).map(|i| 7 * i + 1).collect();
    buf.slice_mut(10..110).unwrap().copy_from_host(&data).unwrap();
    want[10..110].copy_from_slice(&data);
    assert_eq!(buf.slice(10..110).unwrap().to_vec().unwrap(), data);

    // A fill of a range (bytes 0xAB).
    buf.slice_mut(200..300).unwrap().memset(0xAB).unwrap();
    want[200..300].fill(0xABAB_ABAB);

    // A kernel on a range: element i of the view gets 3 i + 5.
    ctx.k
        .iota_u32(&mut buf.slice_mut(1000..1500).unwrap(), 3, 5, s)
        .unwrap();
    for (i, w) in want[1000..1500].iter_mut().enumerate() {
        *w = 3 * i as u32 + 5;
    }

    // A device copy from a range of another buffer into a range of this
    // one, and from one half of this buffer into the other (split views).
    let src = DeviceBuffer::from_slice(&(0..N as u32).collect::<Vec<_>>(), s).unwrap();
    buf.slice_mut(2000..2100)
        .unwrap()
        .copy_from_device(&src.slice(50..150).unwrap())
        .unwrap();
    for (i, w) in want[2000..2100].iter_mut().enumerate() {
        *w = 50 + i as u32;
    }
    let (head, mut tail) = buf.view_mut().split_at_mut(N / 2).unwrap();
    tail.slice_mut(..100)
        .unwrap()
        .copy_from_device(&head.slice(10..110).unwrap())
        .unwrap();
    want.copy_within(10..110, N / 2);

    assert_eq!(buf.to_vec().unwrap(), want);
    // Reading a range reads only it.
    let mut part = [0u32; 3];
    buf.slice(1000..1003).unwrap().copy_to_host(&mut part).unwrap();
    assert_eq!(part, [5, 8, 11]);
    drop((buf, src));
    ctx.finish(&[]);
}

/// A view is usable where its buffer is, and nowhere else; ranges are
/// checked before anything is enqueued.
#[test]
fn views_keep_the_buffers_stream_rules() {
    let Some(ctx) = setup("views::views_keep_the_buffers_stream_rules") else {
        return;
    };
    let b = ctx.new_stream();
    let mut buf = DeviceBuffer::<u8>::new_in(1 << 20, &ctx.pool, &ctx.stream).unwrap();
    ctx.k.fill(&mut buf, 3, &ctx.stream).unwrap();
    {
        let mut view = buf.slice_mut(4096..8192).unwrap();
        let refused = ctx.k.fill(&mut view, 4, &b).unwrap_err();
        assert_eq!(refused.invalid_reason(), Some(InvalidReason::WrongStream));
    }
    let out_of_range = buf.slice(0..(1 << 20) + 1).unwrap_err();
    assert_eq!(out_of_range.invalid_reason(), Some(InvalidReason::OutOfBounds));

    buf.use_on(&b).unwrap();
    let view = buf.slice(..).unwrap();
    assert!(view.is_usable_on(&b));
    assert_eq!(
        ctx.k.verify(&view, 3, &b).unwrap(),
        0,
        "b sees the fill through the view"
    );
    // The free waits for b's use of the view, as for the buffer.
    drop(buf);
    ctx.finish(&[&b]);
}
