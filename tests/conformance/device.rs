use somalloc::{Device, Error, Event, Stream};

use crate::common::{device, setup, spin_cycles};

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
    assert!(borrowed.same_as(&owned));
    borrowed.synchronize().unwrap();
    drop(borrowed);
    // Still alive: a destroyed stream would fail here.
    owned.synchronize().unwrap();
    // SAFETY: a null handle is refused before it is used.
    let null = unsafe { Stream::from_raw(&dev, std::ptr::null_mut()) };
    assert!(matches!(null, Err(Error::InvalidArgument { .. })));
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
