use somalloc::{DeviceBuffer, Error, InvalidReason};

use crate::common::{setup, spin_cycles};

/// The seeds' exercise 3: allocate on A, fill on A, use on B, free on A.
/// B sees A's data (B waited for A), and the free on A waits for B's work
/// (a new allocation on A that reuses the block is not overwritten by B).
#[test]
fn allocate_on_a_use_on_b_free_on_a() {
    let Some(ctx) = setup("cross_stream::allocate_on_a_use_on_b_free_on_a") else {
        return;
    };
    let a = &ctx.stream;
    let b = ctx.new_stream();
    let bytes = 16 << 20;

    let mut buf = DeviceBuffer::<u8>::new_in(bytes, &ctx.pool, a).unwrap();
    ctx.k.spin(spin_cycles(30), a).unwrap(); // A's fill runs late
    ctx.k.fill(&mut buf, 7, a).unwrap();
    buf.use_on(&b).unwrap();
    assert_eq!(ctx.k.verify(&buf, 7, &b).unwrap(), 0, "B did not see A's fill");

    // B works on the buffer late; the free on A must wait for it.
    ctx.k.spin(spin_cycles(30), &b).unwrap();
    ctx.k.fill(&mut buf, 9, &b).unwrap();
    let addr = buf.as_raw() as usize;
    drop(buf);
    let mut c = DeviceBuffer::<u8>::new_in(bytes, &ctx.pool, a).unwrap();
    ctx.k.fill(&mut c, 11, a).unwrap();
    // Let B's late write land wherever it lands, then look at C.
    b.synchronize().unwrap();
    assert_eq!(
        ctx.k.verify(&c, 11, a).unwrap(),
        0,
        "B's late write landed in A's next allocation"
    );
    crate::common::say(&format!(
        "cross_stream::allocate_on_a_use_on_b_free_on_a: block reused on A: {}",
        c.as_raw() as usize == addr
    ));
    drop(c);
    ctx.finish(&[&b]);
}

#[test]
fn other_streams_need_use_on() {
    let Some(ctx) = setup("cross_stream::other_streams_need_use_on") else {
        return;
    };
    let b = ctx.new_stream();
    let mut buf = DeviceBuffer::<u8>::new_in(4096, &ctx.pool, &ctx.stream).unwrap();
    assert!(!buf.is_usable_on(&b));
    assert!(matches!(
        ctx.k.fill(&mut buf, 1, &b),
        Err(Error::InvalidArgument {
            reason: InvalidReason::WrongStream,
            ..
        })
    ));
    let mut other = DeviceBuffer::<u8>::new_in(4096, &ctx.pool, &b).unwrap();
    assert!(matches!(
        other.copy_from_device(&buf),
        Err(Error::InvalidArgument {
            reason: InvalidReason::WrongStream,
            ..
        })
    ));
    buf.use_on(&b).unwrap();
    buf.use_on(&b).unwrap(); // again: harmless
    assert!(buf.is_usable_on(&b));
    ctx.k.fill(&mut buf, 1, &ctx.stream).unwrap();
    buf.use_on(&b).unwrap(); // orders B after the fill above
    other.copy_from_device(&buf).unwrap();
    assert_eq!(ctx.k.verify(&other, 1, &b).unwrap(), 0);
    drop(buf);
    drop(other);
    ctx.finish(&[&b]);
}
