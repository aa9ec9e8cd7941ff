//! The current resource of a device on a GPU: `DeviceBuffer::new` allocates
//! from what `set_current_resource` installed (a cache tier over a created
//! pool, an adaptor), the memory works, and after a reset `new` is back on
//! the vendor's current pool. A binary of its own: the setting is
//! process-wide, so no other test may allocate with `new` meanwhile (the
//! tests here take turns).

mod support;

use std::sync::Arc;

use somalloc::adaptors::StatisticsAdaptor;
use somalloc::testkit::TestKernels;
use somalloc::{CacheConfig, CacheTier, DeviceBuffer, MemPool, MemoryResource, PoolProperties, Stream};
use support::{device_or_skip, exclusive};

/// A tier over a created pool, installed for device 0: every `new`,
/// `zeroed` and `from_slice` comes from the stream's cache (the created
/// pool grows, the default pool does not), kernels see the memory, and the
/// buffers' frees go back into the cache.
#[test]
fn new_allocates_from_an_installed_tier() {
    let _turn = exclusive();
    let Some(dev) = device_or_skip("current_resource::new_allocates_from_an_installed_tier") else {
        return;
    };
    let k = TestKernels::load(&dev).unwrap();
    let pool = MemPool::create(&dev, PoolProperties::default()).unwrap();
    pool.set_release_threshold(usize::MAX).unwrap();
    let tier = Arc::new(CacheTier::new(Arc::new(pool.clone()), CacheConfig::default()).unwrap());
    assert!(somalloc::set_current_resource(&dev, tier.clone())
        .unwrap()
        .is_none());
    let current = somalloc::current_resource(&dev).expect("installed");
    assert_eq!(current.device(), dev);

    let stream = Stream::new(&dev).unwrap();
    let before = pool.stats().unwrap().used_current;
    for round in 0..4u32 {
        let mut buf = DeviceBuffer::<u8>::new(4 << 20, &stream).unwrap();
        k.fill(&mut buf, round, &stream).unwrap();
        assert_eq!(k.verify(&buf, round, &stream).unwrap(), 0, "round {round}");
    }
    let data: Vec<u32> = (0..1000).collect();
    let copied = DeviceBuffer::from_slice(&data, &stream).unwrap();
    assert_eq!(copied.to_vec().unwrap(), data);
    let zeroed = DeviceBuffer::<u64>::zeroed(512, &stream).unwrap();
    assert!(zeroed.to_vec().unwrap().iter().all(|&x| x == 0));
    drop((copied, zeroed));

    let stats = tier.stats();
    assert!(stats.total.hits >= 3, "later rounds were cache hits: {stats}");
    assert!(
        pool.stats().unwrap().used_current >= before + (4 << 20),
        "the tier's pool holds the blocks"
    );

    // Reset: `new` is back on the vendor's current pool; the tier's books
    // do not move.
    let removed = somalloc::reset_current_resource(&dev).expect("was installed");
    assert!(somalloc::current_resource(&dev).is_none());
    drop(removed);
    let calls = (stats.total.hits, stats.total.misses);
    drop(DeviceBuffer::<u8>::new(1 << 20, &stream).unwrap());
    let after = tier.stats();
    assert_eq!((after.total.hits, after.total.misses), calls);
    stream.synchronize().unwrap();
    tier.flush().unwrap();
    stream.synchronize().unwrap();
    assert_eq!(pool.stats().unwrap().used_current, before);
    assert_eq!(somalloc::drop_errors().last.map(|e| e.to_string()), None);
}

/// An adaptor stack installed and replaced: each buffer's free goes back
/// to the resource it came from, whatever is current at the free.
#[test]
fn buffers_keep_the_resource_they_came_from() {
    let _turn = exclusive();
    let Some(dev) = device_or_skip("current_resource::buffers_keep_the_resource_they_came_from") else {
        return;
    };
    let stream = Stream::new(&dev).unwrap();
    let first = Arc::new(StatisticsAdaptor::new(Arc::new(
        MemPool::default_for(&dev).unwrap(),
    )));
    let second = Arc::new(StatisticsAdaptor::new(Arc::new(
        MemPool::default_for(&dev).unwrap(),
    )));
    somalloc::set_current_resource(&dev, first.clone()).unwrap();
    let a = DeviceBuffer::<f32>::new(1 << 18, &stream).unwrap();
    let replaced = somalloc::set_current_resource(&dev, second.clone()).unwrap();
    assert!(replaced.is_some_and(|r| Arc::ptr_eq(&r, &(first.clone() as Arc<dyn MemoryResource>))));
    let b = DeviceBuffer::<f32>::new(1 << 18, &stream).unwrap();
    assert_eq!((first.stats().allocations, second.stats().allocations), (1, 1));
    drop(a);
    assert_eq!(first.stats().deallocations, 1, "a went back to the first stack");
    assert_eq!(second.stats().deallocations, 0);
    somalloc::reset_current_resource(&dev);
    drop(b);
    assert_eq!(second.stats().deallocations, 1, "b went back to the second stack");
    stream.synchronize().unwrap();
}

/// `fast_path`: a tier over a pool of its own, installed for device 0. The
/// second allocation of a size on a stream is a hit of the tier, the memory
/// works, the vendor's default pool is neither used nor reconfigured, and a
/// reset takes `new` back to the vendor's current pool.
#[test]
fn fast_path_serves_new_from_a_tier_over_an_own_pool() {
    let _turn = exclusive();
    let Some(dev) = device_or_skip("current_resource::fast_path_serves_new_from_a_tier_over_an_own_pool")
    else {
        return;
    };
    let default_pool = MemPool::default_for(&dev).unwrap();
    let threshold = default_pool.release_threshold().unwrap();
    let default_used = default_pool.stats().unwrap().used_current;

    let tier = somalloc::fast_path(&dev).unwrap();
    let current = somalloc::current_resource(&dev).expect("installed");
    assert!(
        std::ptr::addr_eq(Arc::as_ptr(&current), Arc::as_ptr(&tier)),
        "the tier is the device's current resource"
    );
    drop(current);

    let stream = Stream::new(&dev).unwrap();
    let data: Vec<u32> = (0..1 << 18).collect();
    let first = DeviceBuffer::from_slice(&data, &stream).unwrap();
    assert_eq!(first.to_vec().unwrap(), data);
    drop(first);
    let second = DeviceBuffer::<u32>::new(1 << 18, &stream).unwrap();
    let stats = tier.stats();
    assert_eq!(
        (stats.total.hits, stats.total.misses),
        (1, 1),
        "the second allocation of the size came from the stream's cache: {stats}"
    );
    assert_eq!(
        default_pool.stats().unwrap().used_current,
        default_used,
        "nothing came from the default pool"
    );
    assert_eq!(default_pool.release_threshold().unwrap(), threshold);
    drop(second);

    assert!(somalloc::reset_current_resource(&dev).is_some());
    assert!(somalloc::current_resource(&dev).is_none());
    drop(DeviceBuffer::<u8>::new(4096, &stream).unwrap());
    let after = tier.stats();
    assert_eq!(
        (after.total.hits, after.total.misses),
        (1, 1),
        "after the reset, new does not reach the tier"
    );
    stream.synchronize().unwrap();
    drop(tier); // its cached block goes back to its pool, and the pool is destroyed
    stream.synchronize().unwrap();
    assert_eq!(somalloc::drop_errors().last.map(|e| e.to_string()), None);
}
