use somalloc::{DeviceBuffer, Error, Event, MemPool, PoolProperties, ReusePolicy};

use crate::common::{current_pool_lock, setup, setup_with, spin_cycles};

const MIB: usize = 1 << 20;

#[test]
fn release_threshold_and_trim() {
    let Some(ctx) = setup("pool::release_threshold_and_trim") else {
        return;
    };
    let bytes = 64 * MIB;

    ctx.pool.set_release_threshold(0).unwrap();
    assert_eq!(ctx.pool.release_threshold().unwrap(), 0);
    drop(DeviceBuffer::<u8>::new_in(bytes, &ctx.pool, &ctx.stream).unwrap());
    ctx.stream.synchronize().unwrap();
    let s = ctx.pool.stats().unwrap();
    assert_eq!(
        s.reserved_current, 0,
        "threshold 0 keeps memory after a sync: {s}"
    );
    assert!(s.reserved_peak >= bytes, "{s}");

    ctx.pool.set_release_threshold(usize::MAX).unwrap();
    assert_eq!(ctx.pool.release_threshold().unwrap(), usize::MAX);
    drop(DeviceBuffer::<u8>::new_in(bytes, &ctx.pool, &ctx.stream).unwrap());
    ctx.stream.synchronize().unwrap();
    let s = ctx.pool.stats().unwrap();
    assert!(s.reserved_current >= bytes, "threshold MAX released memory: {s}");

    ctx.pool.trim_to(0).unwrap();
    let s = ctx.pool.stats().unwrap();
    assert_eq!(s.reserved_current, 0, "trim_to(0) kept memory: {s}");
    ctx.finish(&[]);
}

#[test]
fn reuse_policy_round_trips() {
    let Some(ctx) = setup("pool::reuse_policy_round_trips") else {
        return;
    };
    assert_eq!(
        ctx.pool.reuse_policy().unwrap(),
        ReusePolicy::ALL,
        "both runtimes default to all on"
    );
    for bits in 0..8u8 {
        let p = ReusePolicy::NONE
            .follow_event_dependencies(bits & 1 != 0)
            .allow_opportunistic(bits & 2 != 0)
            .allow_internal_dependencies(bits & 4 != 0);
        ctx.pool.set_reuse_policy(p).unwrap();
        assert_eq!(ctx.pool.reuse_policy().unwrap(), p);
    }
    ctx.finish(&[]);
}

/// With every reuse flag off, a block freed on A behind a running kernel is
/// not handed to an allocation on an unrelated stream B.
#[test]
fn reuse_flags_off_keep_streams_apart() {
    let Some(ctx) = setup("pool::reuse_flags_off_keep_streams_apart") else {
        return;
    };
    ctx.pool.set_reuse_policy(ReusePolicy::NONE).unwrap();
    let a = &ctx.stream;
    let b = ctx.new_stream();
    let bytes = 16 * MIB;
    for round in 0..3u32 {
        let mut x = DeviceBuffer::<u8>::new_in(bytes, &ctx.pool, a).unwrap();
        let x_range = x.as_raw() as usize..x.as_raw() as usize + bytes;
        ctx.k.spin(spin_cycles(50), a).unwrap();
        ctx.k.fill(&mut x, round, a).unwrap();
        drop(x); // freed on A, behind the spin
        let mut y = DeviceBuffer::<u8>::new_in(bytes, &ctx.pool, &b).unwrap();
        let y_start = y.as_raw() as usize;
        let overlap = y_start < x_range.end && x_range.start < y_start + bytes;
        assert!(!overlap, "round {round}: B got A's pending block");
        ctx.k.fill(&mut y, 100 + round, &b).unwrap();
        assert_eq!(ctx.k.verify(&y, 100 + round, &b).unwrap(), 0);
        drop(y);
    }
    // With following event dependencies on, B may take A's block once it
    // waits on an event recorded after the free; content stays right.
    ctx.pool
        .set_reuse_policy(ReusePolicy::NONE.follow_event_dependencies(true))
        .unwrap();
    let mut x = DeviceBuffer::<u8>::new_in(bytes, &ctx.pool, a).unwrap();
    ctx.k.spin(spin_cycles(20), a).unwrap();
    ctx.k.fill(&mut x, 1, a).unwrap();
    drop(x);
    let e = Event::new(&ctx.dev).unwrap();
    e.record(a).unwrap();
    b.wait_event(&e).unwrap();
    let mut y = DeviceBuffer::<u8>::new_in(bytes, &ctx.pool, &b).unwrap();
    ctx.k.fill(&mut y, 2, &b).unwrap();
    assert_eq!(ctx.k.verify(&y, 2, &b).unwrap(), 0);
    drop(y);
    ctx.finish(&[&b]);
}

#[test]
fn stats_follow_allocations() {
    let Some(ctx) = setup("pool::stats_follow_allocations") else {
        return;
    };
    let bytes = 8 * MIB;
    let start = ctx.pool.stats().unwrap();
    let buf = DeviceBuffer::<u8>::new_in(bytes, &ctx.pool, &ctx.stream).unwrap();
    let during = ctx.pool.stats().unwrap();
    assert!(during.used_current >= start.used_current + bytes, "{during}");
    assert!(during.reserved_current >= during.used_current, "{during}");
    drop(buf);
    ctx.stream.synchronize().unwrap();
    let after = ctx.pool.stats().unwrap();
    assert_eq!(after.used_current, start.used_current, "{after}");
    assert!(after.used_peak >= bytes, "{after}");
    ctx.pool.reset_peaks().unwrap();
    let reset = ctx.pool.stats().unwrap();
    assert_eq!(reset.used_peak, reset.used_current, "{reset}");
    assert_eq!(reset.reserved_peak, reset.reserved_current, "{reset}");
    ctx.finish(&[]);
}

#[test]
fn max_size_caps_a_created_pool() {
    let props = PoolProperties::device().max_size(32 * MIB);
    let Some(ctx) = setup_with("pool::max_size_caps_a_created_pool", props) else {
        return;
    };
    let a = DeviceBuffer::<u8>::new_in(16 * MIB, &ctx.pool, &ctx.stream).unwrap();
    let r = DeviceBuffer::<u8>::new_in(64 * MIB, &ctx.pool, &ctx.stream);
    assert!(
        matches!(r, Err(Error::OutOfMemory { requested, .. }) if requested == 64 * MIB),
        "{r:?}"
    );
    let r = DeviceBuffer::<u8>::new_in(24 * MIB, &ctx.pool, &ctx.stream);
    assert!(
        matches!(r, Err(Error::OutOfMemory { .. })),
        "16 + 24 MiB fit in a 32 MiB pool: {r:?}"
    );
    // Still usable within the cap.
    let mut b = DeviceBuffer::<u8>::new_in(8 * MIB, &ctx.pool, &ctx.stream).unwrap();
    ctx.k.fill(&mut b, 3, &ctx.stream).unwrap();
    assert_eq!(ctx.k.verify(&b, 3, &ctx.stream).unwrap(), 0);
    drop((a, b));
    assert!(matches!(
        MemPool::create(&ctx.dev, PoolProperties::device().max_size(0)),
        Err(Error::InvalidArgument { .. })
    ));
    ctx.finish(&[]);
}

#[test]
fn chosen_and_current_pools() {
    let Some(ctx) = setup("pool::chosen_and_current_pools") else {
        return;
    };
    let _guard = current_pool_lock();
    let default = MemPool::default_for(&ctx.dev).unwrap();
    assert!(!default.is_owned());
    assert!(ctx.pool.is_owned());

    // Allocation from a chosen pool lands in that pool.
    let buf = DeviceBuffer::<u8>::new_in(4 * MIB, &ctx.pool, &ctx.stream).unwrap();
    assert!(ctx.pool.stats().unwrap().used_current >= 4 * MIB);
    drop(buf);

    // Set / get current: `DeviceBuffer::new` then uses it.
    MemPool::set_current(&ctx.pool).unwrap();
    assert_eq!(MemPool::current(&ctx.dev).unwrap(), ctx.pool);
    let before = ctx.pool.stats().unwrap().used_current;
    let buf = DeviceBuffer::<u8>::new(2 * MIB, &ctx.stream).unwrap();
    assert!(ctx.pool.stats().unwrap().used_current >= before + 2 * MIB);
    drop(buf);
    MemPool::set_current(&default).unwrap();
    assert_eq!(MemPool::current(&ctx.dev).unwrap(), default);

    // Dropping a handle to the default pool never destroys it.
    drop(MemPool::default_for(&ctx.dev).unwrap());
    let mut buf = DeviceBuffer::<u8>::new_in(MIB, &default, &ctx.stream).unwrap();
    ctx.k.fill(&mut buf, 4, &ctx.stream).unwrap();
    assert_eq!(ctx.k.verify(&buf, 4, &ctx.stream).unwrap(), 0);
    drop(buf);
    ctx.finish(&[]);
}

/// A created pool whose handle is dropped lives on while buffers from it do.
#[test]
fn buffers_keep_their_pool_alive() {
    let Some(ctx) = setup("pool::buffers_keep_their_pool_alive") else {
        return;
    };
    let pool = MemPool::create(&ctx.dev, PoolProperties::default()).unwrap();
    let mut buf = DeviceBuffer::<u8>::new_in(MIB, &pool, &ctx.stream).unwrap();
    drop(pool);
    ctx.k.fill(&mut buf, 8, &ctx.stream).unwrap();
    assert_eq!(ctx.k.verify(&buf, 8, &ctx.stream).unwrap(), 0);
    drop(buf); // frees, then destroys the pool
    ctx.finish(&[]);
}
