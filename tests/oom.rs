//! Out of memory: allocate until the pool or the whole device refuses. The
//! refusal is a typed error, the pool stays usable afterwards, and nothing
//! leaks. (Its own binary: exhausting the device must not run beside other
//! tests. The two tests here take a lock for the same reason.)

use std::io::Write;
use std::sync::Mutex;

use somalloc::testkit::TestKernels;
use somalloc::{Device, DeviceBuffer, Error, MemPool, PoolProperties, Stream};

static EXCLUSIVE: Mutex<()> = Mutex::new(());
const MIB: usize = 1 << 20;

fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

fn device(test: &str) -> Option<Device> {
    match Device::get(0) {
        Ok(d) => Some(d),
        Err(e @ (Error::RuntimeNotFound { .. } | Error::NoDevice { .. })) => {
            say(&format!("SKIP {test}: no GPU ({e})"));
            None
        }
        Err(e) => panic!("device 0: {e}"),
    }
}

/// Allocates `chunk` bytes until the first error; returns the buffers and it.
fn fill_up(pool: &MemPool, stream: &Stream, chunk: usize, limit: usize) -> (Vec<DeviceBuffer<u8>>, Error) {
    let mut held = Vec::new();
    for _ in 0..limit {
        match DeviceBuffer::<u8>::new_in(chunk, pool, stream) {
            Ok(b) => held.push(b),
            Err(e) => return (held, e),
        }
    }
    panic!("no out-of-memory after {limit} allocations of {chunk} bytes");
}

#[test]
fn capped_pool_until_out_of_memory() {
    let test = "oom::capped_pool_until_out_of_memory";
    let _x = EXCLUSIVE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(dev) = device(test) else { return };
    let k = TestKernels::load(&dev).unwrap();
    let cap = 256 * MIB;
    let pool = MemPool::create(
        &dev,
        PoolProperties {
            max_size: Some(cap),
            ..Default::default()
        },
    )
    .unwrap();
    let stream = Stream::new(&dev).unwrap();
    let (held, e) = fill_up(&pool, &stream, 16 * MIB, 1000);
    match &e {
        Error::OutOfMemory {
            requested,
            stats: Some(s),
        } => {
            assert_eq!(*requested, 16 * MIB);
            assert!(s.reserved_current <= cap as u64, "reserved beyond the cap: {s}");
        }
        other => panic!("expected OutOfMemory with stats, got {other}"),
    }
    assert!(
        (12..=16).contains(&held.len()),
        "{} chunks of 16 MiB in a 256 MiB pool",
        held.len()
    );
    say(&format!(
        "{test}: {} x 16 MiB fit under the 256 MiB cap, then: {e}",
        held.len()
    ));
    drop(held);
    stream.synchronize().unwrap();
    assert_eq!(pool.stats().unwrap().used_current, 0);
    // Usable again, up to the cap.
    let (again, _) = fill_up(&pool, &stream, 16 * MIB, 1000);
    assert!(again.len() >= 12);
    k.fill(&again[0], 3, &stream).unwrap();
    assert_eq!(k.verify(&again[0], 3, &stream).unwrap(), 0);
    drop(again);
    stream.synchronize().unwrap();
    assert_eq!(pool.stats().unwrap().used_current, 0);
}

#[test]
fn whole_device_until_out_of_memory() {
    let test = "oom::whole_device_until_out_of_memory";
    let _x = EXCLUSIVE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(dev) = device(test) else { return };
    let k = TestKernels::load(&dev).unwrap();
    let pool = MemPool::create(&dev, PoolProperties::default()).unwrap();
    pool.set_release_threshold(0).unwrap();
    let stream = Stream::new(&dev).unwrap();
    let free_before = dev.free_memory().unwrap();
    let chunk = 1usize << 30;
    let (held, e) = fill_up(&pool, &stream, chunk, 4096);
    assert!(
        matches!(e, Error::OutOfMemory { requested, .. } if requested == chunk),
        "{e}"
    );
    let expected = free_before / chunk;
    assert!(
        held.len() + 2 >= expected,
        "only {} GiB before OOM with {expected} GiB free",
        held.len()
    );
    say(&format!(
        "{test}: {} GiB allocated of {} GiB free, then: {e}",
        held.len(),
        free_before >> 30
    ));
    // The device is full: a small allocation from another pool may fail too,
    // and must fail typed.
    match DeviceBuffer::<u8>::new(64 * MIB, &stream) {
        Ok(b) => drop(b),
        Err(Error::OutOfMemory { .. }) => {}
        Err(other) => panic!("expected OutOfMemory or success, got {other}"),
    }
    drop(held);
    stream.synchronize().unwrap();
    let s = pool.stats().unwrap();
    assert_eq!(s.used_current, 0, "{s}");
    assert_eq!(
        s.reserved_current, 0,
        "threshold 0 keeps memory after a sync: {s}"
    );
    let free_after = dev.free_memory().unwrap();
    assert!(
        free_after + 256 * MIB >= free_before,
        "leaked: {free_before} free before, {free_after} after"
    );
    let b = DeviceBuffer::<u8>::new_in(chunk, &pool, &stream).unwrap();
    k.fill(&b, 4, &stream).unwrap();
    assert_eq!(k.verify(&b, 4, &stream).unwrap(), 0);
    drop(b);
    stream.synchronize().unwrap();
    assert_eq!(pool.stats().unwrap().used_current, 0);
}
