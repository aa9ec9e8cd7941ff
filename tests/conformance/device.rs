use std::ffi::c_void;

use somalloc::{Device, DeviceBuffer, Error, Event, InvalidReason, MemPool, PoolProperties, Stream};

use crate::common::{current_pool_lock, device, setup, setup_alone, spin_cycles};

/// Runs everywhere: without a runtime or device the answer is a typed error,
/// never a panic.
#[test]
fn environment_problems_are_typed_errors() {
    match Device::count() {
        Ok(n) => assert!(n > 0),
        Err(Error::RuntimeNotFound { searched, .. }) => assert!(!searched.is_empty()),
        Err(Error::NoDevice { .. }) => {}
        Err(e) => panic!("unexpected error: {e}"),
    }
    match Device::get(0) {
        Ok(d) => assert_eq!(d.ordinal(), 0),
        Err(Error::RuntimeNotFound { .. } | Error::NoDevice { .. }) => {}
        Err(e) => panic!("unexpected error: {e}"),
    }
}

#[test]
fn device_properties() {
    let Some(dev) = device("device::device_properties") else {
        return;
    };
    let count = Device::count().unwrap();
    assert!(count >= 1);
    assert!(!dev.name().unwrap().is_empty());
    let total = dev.total_memory().unwrap();
    let free = dev.free_memory().unwrap();
    assert!(total > 0 && free <= total, "free {free} total {total}");
    assert!(dev.supports_memory_pools().unwrap());
    assert!(
        matches!(Device::get(count), Err(Error::InvalidDevice { ordinal, count: c }) if ordinal == count && c == count)
    );
    assert!(Device::runtime_version().unwrap() > 0);
}

#[test]
fn borrowed_streams_are_not_destroyed() {
    let Some(dev) = device("device::borrowed_streams_are_not_destroyed") else {
        return;
    };
    let owned = Stream::new(&dev).unwrap();
    assert!(owned.is_owned());
    // SAFETY: `owned` outlives `borrowed`.
    let borrowed = unsafe { Stream::from_raw(&dev, owned.as_raw()) }.unwrap();
    assert!(!borrowed.is_owned());
    assert_eq!(borrowed, owned);
    borrowed.synchronize().unwrap();
    drop(borrowed);
    // Still alive: a destroyed stream would fail here.
    owned.synchronize().unwrap();
    // SAFETY: a null handle is refused before it is used.
    let null = unsafe { Stream::from_raw(&dev, std::ptr::null_mut()) };
    assert!(matches!(
        null,
        Err(Error::InvalidArgument {
            reason: InvalidReason::SpecialStreamHandle,
            ..
        })
    ));
}

/// The legacy and per-thread handles are not one stream: streams are told
/// apart by their handle (`==`, `use_on`, the cache tier), so these are
/// refused, with a message naming what to use instead.
#[test]
fn legacy_and_per_thread_handles_are_refused() {
    let Some(dev) = device("device::legacy_and_per_thread_handles_are_refused") else {
        return;
    };
    for raw in [0usize, 0x1, 0x2] {
        // SAFETY: the special handles are refused before they are used.
        match unsafe { Stream::from_raw(&dev, raw as *mut c_void) } {
            Err(Error::InvalidArgument {
                reason: InvalidReason::SpecialStreamHandle,
                why,
            }) => {
                assert!(
                    why.contains("Stream::new") && why.contains("Stream::from_cudarc"),
                    "{why}"
                )
            }
            other => panic!("handle {raw:#x} was accepted: {other:?}"),
        }
    }
}

/// `MemPool::current` answers with the owning handle of a pool somalloc
/// created, so the pool outlives the creator's handle while it is in use.
#[test]
fn current_handle_of_a_created_pool_owns_it() {
    let Some(dev) = device("device::current_handle_of_a_created_pool_owns_it") else {
        return;
    };
    let _current = current_pool_lock();
    let default = MemPool::default_for(&dev).unwrap();
    assert!(
        !MemPool::current(&dev).unwrap().is_owned(),
        "the default pool is borrowed"
    );

    let created = MemPool::create(&dev, PoolProperties::default()).unwrap();
    MemPool::set_current(&created).unwrap();
    let current = MemPool::current(&dev).unwrap();
    assert!(
        current.is_owned(),
        "somalloc created this pool: the handle must own it"
    );
    assert_eq!(current, created);
    // The creator's handle goes; `current` keeps the pool alive (a borrowed
    // handle would now name a destroyed pool).
    drop(created);
    assert_ne!(current, default);
    current.set_release_threshold(usize::MAX).unwrap();
    assert_eq!(current.release_threshold().unwrap(), usize::MAX);
    let stream = Stream::new(&dev).unwrap();
    let before = current.stats().unwrap().used_current;
    let buf = DeviceBuffer::<u8>::new(1 << 20, &stream).unwrap(); // from the current pool
    assert!(current.stats().unwrap().used_current >= before + (1 << 20));
    drop(buf);
    stream.synchronize().unwrap();
    assert_eq!(current.stats().unwrap().used_current, before);
    assert_eq!(MemPool::current(&dev).unwrap(), current);

    // Back to the default pool; the last handle destroys the created one.
    MemPool::set_current(&default).unwrap();
    drop(current);
    let after = MemPool::current(&dev).unwrap();
    assert!(after == default && !after.is_owned());
    assert_eq!(somalloc::drop_errors().last.map(|e| e.to_string()), None);
}

#[test]
fn events_order_streams_and_time_work() {
    let Some(ctx) = setup("device::events_order_streams_and_time_work") else {
        return;
    };
    let start = Event::with_timing(&ctx.dev).unwrap();
    let end = Event::with_timing(&ctx.dev).unwrap();
    start.record(&ctx.stream).unwrap();
    ctx.k.spin(spin_cycles(20), &ctx.stream).unwrap();
    end.record(&ctx.stream).unwrap();
    // Another stream that waits on `end` cannot finish before the spin.
    let other = ctx.new_stream();
    end.wait(&other).unwrap();
    other.synchronize().unwrap();
    let ms = start.elapsed_ms(&end).unwrap();
    assert!(ms > 1.0, "spin of ~20 ms measured {ms} ms");
    ctx.finish(&[&other]);
}

#[test]
fn events_say_whether_their_work_is_done() {
    // Alone on the device: a test loading its kernels meanwhile can hold
    // the runtime up for longer than the spin, and the event is then done.
    let Some(ctx) = setup_alone("device::events_say_whether_their_work_is_done") else {
        return;
    };
    let never = Event::new(&ctx.dev).unwrap();
    assert!(
        never.is_complete().unwrap(),
        "an event never recorded has nothing to wait for"
    );
    let event = Event::new(&ctx.dev).unwrap();
    ctx.k.spin(spin_cycles(50), &ctx.stream).unwrap();
    event.record(&ctx.stream).unwrap();
    assert!(!event.is_complete().unwrap(), "recorded behind a 50 ms spin");
    // "Not ready" is an answer, not a failure: a caller that checks its own
    // launches with cudaGetLastError must not find it there.
    assert_eq!(somalloc::testkit::runtime_last_error().unwrap(), 0);
    ctx.stream.synchronize().unwrap();
    assert!(event.is_complete().unwrap(), "the stream finished");
    ctx.finish(&[]);
}
