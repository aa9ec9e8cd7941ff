//! Pools beyond device memory: pools of pinned host memory and of managed
//! memory, `HostBuffer`, and pointer attributes. Each GPU test prints one
//! SKIP line and returns where there is no GPU; where the runtime lacks a
//! pool kind, the test checks the `Unsupported` answer instead.

mod support;

use std::sync::{Arc, MutexGuard};
use support::say;

use somalloc::adaptors::{LimitingAdaptor, StatisticsAdaptor};
use somalloc::testkit::{pattern_byte, PinnedHost, PinnedHostCall, TestKernels};
use somalloc::{
    pointer_info, AllocationType, CacheConfig, CacheTier, CaptureMode, Device, DeviceBuffer, Error, Event,
    ExportHandle, HostBuffer, Location, MemPool, MemoryResource, MemoryType, PeerAccess, Placement,
    PoolProperties, Stream, Vendor,
};

const MIB: usize = 1 << 20;

/// About `ms` milliseconds of spinning on a GPU clocked near 2 GHz.
fn spin_cycles(ms: u64) -> u64 {
    ms * 2_000_000
}

struct Gpu {
    dev: Device,
    k: TestKernels,
    stream: Stream,
    _exclusive: MutexGuard<'static, ()>,
}

/// The tests here time copies against running kernels and wait on whole
/// streams: they take turns, so that no other test's work shares the device.
fn gpu(test: &str) -> Option<Gpu> {
    let exclusive = support::exclusive();
    let dev = support::device_or_skip(test)?;
    Some(Gpu {
        k: TestKernels::load(&dev).expect("load test kernels"),
        stream: Stream::new(&dev).expect("stream"),
        dev,
        _exclusive: exclusive,
    })
}

/// The runtime's version as the backends print it in their messages.
fn runtime_text() -> String {
    let v = Device::runtime_version().expect("runtime version");
    if Device::backend() == Vendor::Rocm && v >= 10_000_000 {
        format!("HIP {}.{}", v / 10_000_000, (v % 10_000_000) / 100_000)
    } else if Device::backend() == Vendor::Rocm {
        format!("runtime version {v}")
    } else {
        format!("CUDA {}.{}", v / 1000, (v % 1000) / 10)
    }
}

/// Whether this runtime's pools take `placement`, by the table of
/// `somalloc::Location` (CUDA; HIP on NVIDIA reports a CUDA version).
fn expected(placement: Placement) -> bool {
    let v = Device::runtime_version().expect("runtime version");
    let amd = Device::backend() == Vendor::Rocm && v >= 10_000_000;
    match (placement.allocation, placement.location) {
        (AllocationType::Pinned, Location::Device(_)) => true,
        (_, _) if amd => false,
        (AllocationType::Managed, _) => v >= 13_000,
        (AllocationType::Pinned, Location::HostNuma(_)) => v >= 12_060,
        (AllocationType::Pinned, Location::Host) => v >= 13_000,
        _ => false,
    }
}

/// A pool of pinned host memory for `dev`: `Location::Host`, else (CUDA
/// 12.6-12.9) NUMA node 0; `None` after one SKIP line where the runtime has
/// neither (the `Unsupported` answer is checked by
/// `unsupported_and_invalid_requests_are_refused`).
fn host_pool(test: &str, dev: &Device) -> Option<MemPool> {
    host_pool_or(dev, |e| {
        say(&format!(
            "SKIP {test}: no pools of pinned host memory on this runtime ({e})"
        ))
    })
}

/// `host_pool` for a test that has already checked something: a note
/// instead of the SKIP line.
fn host_pool_after_checks(test: &str, dev: &Device) -> Option<MemPool> {
    host_pool_or(dev, |e| {
        say(&format!(
            "{test}: the rest needs a pool of pinned host memory ({e})"
        ))
    })
}

fn host_pool_or(dev: &Device, none: impl FnOnce(Error)) -> Option<MemPool> {
    let pool = match MemPool::create(dev, PoolProperties::host()) {
        Ok(p) => p,
        Err(Error::Unsupported { .. }) => match MemPool::create(dev, PoolProperties::host_numa(0)) {
            Ok(p) => p,
            Err(e @ Error::Unsupported { .. }) => {
                none(e);
                return None;
            }
            Err(e) => panic!("host NUMA pool: {e}"),
        },
        Err(e) => panic!("host pool: {e}"),
    };
    pool.set_release_threshold(usize::MAX).expect("threshold");
    Some(pool)
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u64).map(|i| pattern_byte(i, seed)).collect()
}

fn assert_unsupported_naming_runtime<T: std::fmt::Debug>(r: somalloc::Result<T>, what: &str) {
    match r {
        Err(Error::Unsupported { what: why, .. }) => {
            assert!(
                why.contains(&runtime_text())
                    || why.contains("MemPoolCreate")
                    || why.contains("MemGetDefaultMemPool"),
                "{what}: the refusal should name the runtime ({}): {why}",
                runtime_text()
            );
        }
        other => panic!("{what}: expected Unsupported, got {other:?}"),
    }
}

#[test]
fn every_pool_kind_the_runtime_has() {
    let test = "host::every_pool_kind_the_runtime_has";
    let Some(g) = gpu(test) else {
        return;
    };
    let d = g.dev.ordinal();
    let kinds = [
        PoolProperties::device(),
        PoolProperties::host(),
        PoolProperties::host_numa(0),
        PoolProperties::managed(),
        PoolProperties::managed().location(Location::Unspecified),
        PoolProperties::managed().location(Location::Host),
    ];
    // Every kind is tried and every finding reported before the test fails.
    let mut failures: Vec<String> = Vec::new();
    let mut made = 0;
    for props in kinds {
        let placement = Placement::new(props.location.unwrap_or(Location::Device(d)), props.allocation);
        let pool = match MemPool::create(&g.dev, props) {
            Ok(p) => p,
            Err(e @ Error::Unsupported { .. }) if !expected(placement) => {
                say(&format!("{test}: {placement:?}: {e}"));
                if !e.to_string().contains(&runtime_text()) {
                    failures.push(format!(
                        "{placement:?}: the refusal does not name {}: {e}",
                        runtime_text()
                    ));
                }
                continue;
            }
            // The platform may refuse a kind its runtime has (a host NUMA
            // node it lacks; managed memory without concurrent managed
            // access): the runtime's own answer, reported, not failed.
            Err(e @ (Error::Unsupported { .. } | Error::Vendor { .. }))
                if !placement.is_device_memory() && e.to_string().contains("MemPoolCreate") =>
            {
                say(&format!("{test}: {placement:?}: refused by the runtime ({e})"));
                continue;
            }
            Err(e) => {
                let want = if expected(placement) {
                    "a pool"
                } else {
                    "Unsupported"
                };
                failures.push(format!("{placement:?}: {e} (expected {want})"));
                continue;
            }
        };
        if !expected(placement) {
            failures.push(format!(
                "{placement:?} was created, but the table says the runtime lacks it"
            ));
        }
        if pool.placement() != placement {
            failures.push(format!("{placement:?}: the pool says {:?}", pool.placement()));
        }
        made += 1;
        // Allocate, write, read back, through the buffer type that holds it.
        let n = MIB + 13;
        let data = pattern(n, 5);
        if placement.is_host_accessible() {
            let mut h = HostBuffer::<u8>::new_in(n, &pool, &g.stream).unwrap();
            h.wait_slice_mut().unwrap().copy_from_slice(&data);
            let mut dev_side = DeviceBuffer::<u8>::new(n, &g.stream).unwrap();
            h.copy_to_device(&mut dev_side).unwrap();
            if dev_side.to_vec().unwrap() != data {
                failures.push(format!("{placement:?}: host to device changed the bytes"));
            }
            let want = if placement.is_pinned_host() {
                MemoryType::PinnedHost
            } else {
                MemoryType::Managed
            };
            let info = h.pointer_info().unwrap().unwrap();
            say(&format!("{test}: {placement:?}: HostBuffer memory {info:?}"));
            if info.memory_type != want {
                failures.push(format!(
                    "{placement:?}: HostBuffer memory is {info:?}, want {want:?}"
                ));
            }
        }
        if !placement.is_pinned_host() {
            let mut b = DeviceBuffer::<u8>::new_in(n, &pool, &g.stream).unwrap();
            b.copy_from_host(&data).unwrap();
            let bad = g.k.verify(&b, 5, &g.stream).unwrap();
            if bad != 0 {
                failures.push(format!(
                    "{placement:?}: {bad} bytes differ after a kernel read them"
                ));
            }
            let want = if placement.is_device_memory() {
                MemoryType::Device
            } else {
                MemoryType::Managed
            };
            let info = pointer_info(b.as_raw()).unwrap();
            if info.memory_type != want {
                failures.push(format!(
                    "{placement:?}: DeviceBuffer memory is {info:?}, want {want:?}"
                ));
            }
        } else if !matches!(
            DeviceBuffer::<u8>::new_in(n, &pool, &g.stream),
            Err(Error::InvalidArgument { .. })
        ) {
            failures.push(format!(
                "{placement:?}: a DeviceBuffer of pinned host memory was not refused"
            ));
        }
        g.stream.synchronize().unwrap();
    }
    say(&format!("{test}: {made} pool kinds made on {}", runtime_text()));
    assert!(made >= 1, "not even a device pool");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn pointer_attributes_tell_pinned_from_pageable() {
    let test = "host::pointer_attributes_tell_pinned_from_pageable";
    let Some(g) = gpu(test) else {
        return;
    };
    // Device memory and pageable host memory, on every runtime.
    let d = DeviceBuffer::<u8>::new(4096, &g.stream).unwrap();
    g.stream.synchronize().unwrap();
    let info = pointer_info(d.as_raw()).unwrap();
    assert_eq!(info.memory_type, MemoryType::Device);
    assert_eq!(info.device, Some(g.dev.ordinal()));
    let v = vec![1u8; 4096];
    assert_eq!(
        pointer_info(v.as_ptr().cast()).unwrap().memory_type,
        MemoryType::Pageable
    );
    // The synchronous baselines are pinned.
    for call in [
        PinnedHostCall::MallocHost,
        PinnedHostCall::HostAlloc,
        PinnedHostCall::HostAllocPortable,
    ] {
        let p = PinnedHost::new(4096, call).unwrap();
        let info = pointer_info(p.as_ptr()).unwrap();
        assert_eq!(info.memory_type, MemoryType::PinnedHost, "{}", call.name());
        assert!(info.host_accessible, "{}", call.name());
    }
    // A host pool's memory is pinned and the pool's device can address it.
    let Some(pool) = host_pool_after_checks(test, &g.dev) else {
        return;
    };
    let h = HostBuffer::<u8>::new_in(4096, &pool, &g.stream).unwrap();
    let _ = h.wait_slice().unwrap(); // the allocation has happened
    let info = h.pointer_info().unwrap().expect("a 4 KiB buffer has memory");
    say(&format!("{test}: host pool memory: {info:?}"));
    assert_eq!(pool.access(&g.dev).unwrap(), PeerAccess::ReadWrite);
    assert_eq!(info.memory_type, MemoryType::PinnedHost, "{info:?}");
    assert!(
        info.device_accessible,
        "the pool's device was granted access: {info:?}"
    );
}

#[test]
fn a_copy_from_pool_memory_overlaps_a_running_kernel() {
    let test = "host::a_copy_from_pool_memory_overlaps_a_running_kernel";
    let Some(g) = gpu(test) else {
        return;
    };
    let Some(pool) = host_pool(test, &g.dev) else {
        return;
    };
    const N: usize = 64 * MIB;
    let copier = Stream::new(&g.dev).unwrap();
    let mut h = HostBuffer::<u8>::new_in(N, &pool, &copier).unwrap();
    let data = pattern(N, 11);
    h.wait_slice_mut().unwrap().copy_from_slice(&data);
    let mut d = DeviceBuffer::<u8>::new(N, &copier).unwrap();
    let mut back = HostBuffer::<u8>::new_in(N, &pool, &copier).unwrap();
    copier.synchronize().unwrap();

    // A kernel of about 300 ms on one stream; both copies on another.
    let (k_start, k_end, c_end) = (
        Event::with_timing(&g.dev).unwrap(),
        Event::with_timing(&g.dev).unwrap(),
        Event::with_timing(&g.dev).unwrap(),
    );
    k_start.record(&g.stream).unwrap();
    g.k.spin(spin_cycles(300), &g.stream).unwrap();
    k_end.record(&g.stream).unwrap();
    h.copy_to_device(&mut d).unwrap();
    back.copy_from_device(&d).unwrap();
    c_end.record(&copier).unwrap();
    c_end.synchronize().unwrap();
    k_end.synchronize().unwrap();
    let copies_done = k_start.elapsed_ms(&c_end).unwrap();
    let kernel_done = k_start.elapsed_ms(&k_end).unwrap();
    say(&format!(
        "{test}: 2 x 64 MiB copied {copies_done:.1} ms after the kernel began, which ran {kernel_done:.1} ms"
    ));
    assert!(
        copies_done < kernel_done,
        "the copies ended after the kernel ({copies_done} ms >= {kernel_done} ms): they did not overlap"
    );
    assert!(
        back.wait_slice().unwrap() == data.as_slice(),
        "the round trip changed the data"
    );
}

#[test]
fn the_accessor_waits_for_every_stream() {
    let test = "host::the_accessor_waits_for_every_stream";
    let Some(g) = gpu(test) else {
        return;
    };
    let Some(pool) = host_pool(test, &g.dev) else {
        return;
    };
    const N: usize = 8 * MIB;
    // A copy into the buffer queued behind a long kernel: reading must wait
    // for it, and see its bytes.
    let mut h = HostBuffer::<u8>::new_in(N, &pool, &g.stream).unwrap();
    h.wait_slice_mut().unwrap().fill(0);
    let mut d = DeviceBuffer::<u8>::new(N, &g.stream).unwrap();
    g.k.spin(spin_cycles(200), &g.stream).unwrap();
    g.k.fill(&mut d, 21, &g.stream).unwrap();
    h.copy_from_device(&d).unwrap();
    assert!(
        h.wait_slice().unwrap() == pattern(N, 21).as_slice(),
        "read before the copy was done"
    );

    // A copy out of the buffer on another stream (given to use_on), queued
    // behind a long kernel there: writing must wait for it, so the copy
    // reads the old bytes.
    let other = Stream::new(&g.dev).unwrap();
    let mut d2 = DeviceBuffer::<u8>::new(N, &other).unwrap();
    h.use_on(&other).unwrap();
    g.k.spin(spin_cycles(200), &other).unwrap();
    h.copy_to_device(&mut d2).unwrap();
    h.wait_slice_mut().unwrap().fill(0xEE);
    assert!(
        d2.to_vec().unwrap() == pattern(N, 21),
        "written while a copy still read it"
    );
    assert!(h.wait_slice().unwrap().iter().all(|&b| b == 0xEE));

    // Without use_on, the other stream may not use the buffer.
    let third = Stream::new(&g.dev).unwrap();
    let mut d3 = DeviceBuffer::<u8>::new(N, &third).unwrap();
    assert!(matches!(
        h.copy_to_device(&mut d3),
        Err(Error::InvalidArgument { .. })
    ));
    let d4 = DeviceBuffer::<u8>::new(N, &third).unwrap();
    assert!(matches!(
        h.copy_from_device(&d4),
        Err(Error::InvalidArgument { .. })
    ));
    // Dropping the buffer frees it after `other`'s copy (use_on).
    drop(h);
    g.stream.synchronize().unwrap();
    other.synchronize().unwrap();
    third.synchronize().unwrap();
}

#[test]
fn async_copies_both_ways_keep_the_contents() {
    let test = "host::async_copies_both_ways_keep_the_contents";
    let Some(g) = gpu(test) else {
        return;
    };
    let Some(pool) = host_pool(test, &g.dev) else {
        return;
    };
    let used_at_start = pool.stats().unwrap().used_current;
    for (i, n) in [0usize, 1, 255, 4097, MIB + 3, 32 * MIB].into_iter().enumerate() {
        let seed = 100 + i as u32;
        let mut h = HostBuffer::<u8>::new_in(n, &pool, &g.stream).unwrap();
        assert_eq!(h.len(), n);
        h.wait_slice_mut().unwrap().copy_from_slice(&pattern(n, seed));
        let mut d = DeviceBuffer::<u8>::new(n, &g.stream).unwrap();
        h.copy_to_device(&mut d).unwrap(); // host -> device, queued
        assert_eq!(
            g.k.verify(&d, seed, &g.stream).unwrap(),
            0,
            "{n} bytes to the device"
        );
        g.k.fill(&mut d, seed + 50, &g.stream).unwrap();
        h.copy_from_device(&d).unwrap(); // device -> host, queued
        assert!(
            h.wait_slice().unwrap() == pattern(n, seed + 50).as_slice(),
            "{n} bytes to the host"
        );
        if n == 0 {
            assert!(h.pointer_info().unwrap().is_none());
            assert!(h.as_raw().is_null());
        }
    }
    // Typed elements.
    let mut h = HostBuffer::<f32>::new_in(1000, &pool, &g.stream).unwrap();
    for (i, x) in h.wait_slice_mut().unwrap().iter_mut().enumerate() {
        *x = i as f32 * 0.5;
    }
    let mut d = DeviceBuffer::<f32>::new(1000, &g.stream).unwrap();
    h.copy_to_device(&mut d).unwrap();
    assert_eq!(d.to_vec().unwrap()[999], 499.5);
    let mut wrong = DeviceBuffer::<f32>::new(999, &g.stream).unwrap();
    assert!(matches!(
        h.copy_to_device(&mut wrong),
        Err(Error::InvalidArgument { .. })
    ));
    drop((h, d, wrong));
    g.stream.synchronize().unwrap();
    assert_eq!(
        pool.stats().unwrap().used_current,
        used_at_start,
        "pool bytes leaked"
    );
}

#[test]
fn cache_tier_and_adaptors_over_a_host_pool() {
    let test = "host::cache_tier_and_adaptors_over_a_host_pool";
    let Some(g) = gpu(test) else {
        return;
    };
    let Some(pool) = host_pool(test, &g.dev) else {
        return;
    };
    let pool_res: Arc<dyn MemoryResource> = Arc::new(pool.clone());
    // The cache tier: the second allocation of a size comes from the cache
    // (the same block), and its contents go both ways.
    let tier = CacheTier::new(pool_res.clone(), CacheConfig::default()).unwrap();
    let res: Arc<dyn MemoryResource> = tier.for_stream(&g.stream).unwrap();
    assert_eq!(res.placement(), pool.placement());
    let first = HostBuffer::<u8>::new_with(MIB, &res, &g.stream).unwrap();
    let addr = first.as_raw();
    drop(first);
    let mut again = HostBuffer::<u8>::new_with(MIB, &res, &g.stream).unwrap();
    assert_eq!(
        again.as_raw(),
        addr,
        "the freed block was not reused from the cache"
    );
    let stats = tier.stats().total;
    assert!(stats.hits >= 1, "{stats:?}");
    again.wait_slice_mut().unwrap().copy_from_slice(&pattern(MIB, 7));
    let mut d = DeviceBuffer::<u8>::new(MIB, &g.stream).unwrap();
    again.copy_to_device(&mut d).unwrap();
    assert_eq!(g.k.verify(&d, 7, &g.stream).unwrap(), 0);
    assert_eq!(
        again.pointer_info().unwrap().unwrap().memory_type,
        MemoryType::PinnedHost
    );
    // A device buffer from the tier of a host pool is refused.
    assert!(matches!(
        DeviceBuffer::<u8>::new_with(MIB, &res, &g.stream),
        Err(Error::InvalidArgument { .. })
    ));
    drop((again, d));
    tier.flush().unwrap();

    // Adaptors: statistics over a limit over the pool.
    let limited: Arc<dyn MemoryResource> = Arc::new(LimitingAdaptor::new(pool_res.clone(), 4 * MIB));
    let counted = Arc::new(StatisticsAdaptor::new(limited));
    let res: Arc<dyn MemoryResource> = counted.clone();
    assert!(res.placement().is_pinned_host());
    let mut a = HostBuffer::<u32>::new_with(MIB / 4, &res, &g.stream).unwrap();
    a.wait_slice_mut().unwrap().fill(0xABCD_1234);
    assert!(a.to_vec().unwrap().iter().all(|&x| x == 0xABCD_1234));
    // Over the 4 MiB limit: refused by the adaptor, as for device memory.
    assert!(HostBuffer::<u8>::new_with(4 * MIB, &res, &g.stream).is_err());
    drop(a);
    let s = counted.stats();
    assert_eq!((s.allocations, s.deallocations), (1, 1), "{s:?}");

    // And the other way round: a HostBuffer refuses device memory.
    let device_pool = MemPool::default_for(&g.dev).unwrap();
    assert!(matches!(
        HostBuffer::<u8>::new_in(16, &device_pool, &g.stream),
        Err(Error::InvalidArgument { .. })
    ));
    let device_res: Arc<dyn MemoryResource> = Arc::new(device_pool);
    assert!(matches!(
        HostBuffer::<u8>::new_with(16, &device_res, &g.stream),
        Err(Error::InvalidArgument { .. })
    ));
    g.stream.synchronize().unwrap();
}

#[test]
fn default_and_current_pools_by_location() {
    let test = "host::default_and_current_pools_by_location";
    let Some(g) = gpu(test) else {
        return;
    };
    let host = Placement::new(Location::Host, AllocationType::Pinned);
    // The device's own placement is the classic per-device pool on every
    // runtime.
    let dflt = MemPool::default_at(&g.dev, Placement::device(g.dev.ordinal())).unwrap();
    assert_eq!(dflt, MemPool::default_for(&g.dev).unwrap());
    let v = Device::runtime_version().unwrap();
    // cudaMemGetDefaultMemPool and its kin: CUDA 13.0; on HIP only the
    // per-device calls exist.
    let by_location = Device::backend() == Vendor::Cuda && v >= 13_000;
    if !by_location {
        assert_unsupported_naming_runtime(MemPool::default_at(&g.dev, host), "default host pool");
        assert_unsupported_naming_runtime(MemPool::current_at(&g.dev, host), "current host pool");
        say(&format!(
            "{test}: no pools by location on {}: Unsupported, as expected",
            runtime_text()
        ));
        return;
    }
    let default_host = MemPool::default_at(&g.dev, host).unwrap();
    assert_eq!(default_host.placement(), host);
    assert!(!default_host.is_owned());
    let mut h = HostBuffer::<u8>::new_in(MIB, &default_host, &g.stream).unwrap();
    h.wait_slice_mut().unwrap().copy_from_slice(&pattern(MIB, 3));
    let mut d = DeviceBuffer::<u8>::new(MIB, &g.stream).unwrap();
    h.copy_to_device(&mut d).unwrap();
    assert_eq!(g.k.verify(&d, 3, &g.stream).unwrap(), 0);
    assert_eq!(
        h.pointer_info().unwrap().unwrap().memory_type,
        MemoryType::PinnedHost
    );
    drop((h, d));
    // The current host pool: the default one, until a created one is set.
    let current = MemPool::current_at(&g.dev, host).unwrap();
    assert_eq!(current, default_host);
    let mine = MemPool::create(&g.dev, PoolProperties::host()).unwrap();
    MemPool::set_current(&mine).unwrap();
    let now = MemPool::current_at(&g.dev, host).unwrap();
    assert!(
        now == mine && now.is_owned(),
        "the current host pool is the created one"
    );
    // The device's current pool did not change.
    assert_eq!(
        MemPool::current(&g.dev).unwrap(),
        MemPool::default_for(&g.dev).unwrap()
    );
    MemPool::set_current(&default_host).unwrap();
    assert_eq!(MemPool::current_at(&g.dev, host).unwrap(), default_host);
    g.stream.synchronize().unwrap();
}

#[test]
fn unsupported_and_invalid_requests_are_refused() {
    let test = "host::unsupported_and_invalid_requests_are_refused";
    let Some(g) = gpu(test) else {
        return;
    };
    // Each kind the table says this runtime lacks: Unsupported, naming it.
    for props in [
        PoolProperties::host(),
        PoolProperties::host_numa(0),
        PoolProperties::managed(),
    ] {
        let placement = Placement::new(props.location.unwrap_or(Location::Device(0)), props.allocation);
        if !expected(placement) {
            assert_unsupported_naming_runtime(MemPool::create(&g.dev, props), &format!("{placement:?}"));
        }
    }
    // What no runtime does.
    assert!(matches!(
        MemPool::create(&g.dev, PoolProperties::host().export(ExportHandle::PosixFd)),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        MemPool::create(&g.dev, PoolProperties::device().location(Location::Unspecified)),
        Err(Error::InvalidArgument { .. })
    ));
    let other = Location::Device(g.dev.ordinal() + 1);
    assert!(matches!(
        MemPool::create(&g.dev, PoolProperties::device().location(other)),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        pointer_info(std::ptr::null()),
        Err(Error::InvalidArgument { .. })
    ));
    // The own device of a host pool keeps its access.
    if let Some(pool) = host_pool_after_checks(test, &g.dev) {
        assert!(matches!(
            pool.set_access(&g.dev, PeerAccess::None),
            Err(Error::InvalidArgument { .. })
        ));
    }
}

#[test]
fn host_work_is_refused_under_capture() {
    let test = "host::host_work_is_refused_under_capture";
    let Some(g) = gpu(test) else {
        return;
    };
    let Some(pool) = host_pool(test, &g.dev) else {
        return;
    };
    let mut h = HostBuffer::<u8>::new_in(MIB, &pool, &g.stream).unwrap();
    h.wait_slice_mut().unwrap().fill(9);
    let mut d = DeviceBuffer::<u8>::new(MIB, &g.stream).unwrap();
    g.stream.synchronize().unwrap();
    g.stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    assert!(matches!(
        HostBuffer::<u8>::new_in(16, &pool, &g.stream),
        Err(Error::Capture { .. })
    ));
    assert!(matches!(h.copy_to_device(&mut d), Err(Error::Capture { .. })));
    assert!(matches!(h.copy_from_device(&d), Err(Error::Capture { .. })));
    assert!(matches!(h.wait_slice(), Err(Error::Capture { .. })));
    assert!(matches!(h.wait_slice_mut(), Err(Error::Capture { .. })));
    // Nothing was recorded and the capture is intact.
    let graph = g.stream.end_capture().expect("the capture was not invalidated");
    drop(graph);
    h.copy_to_device(&mut d).unwrap();
    assert!(d.to_vec().unwrap().iter().all(|&b| b == 9));
    assert!(h.wait_slice().unwrap().iter().all(|&b| b == 9));
}

#[test]
fn peer_access_to_a_host_pool() {
    let test = "host::peer_access_to_a_host_pool";
    let Some(g) = gpu(test) else {
        return;
    };
    if Device::count().unwrap() < 2 {
        say(&format!("SKIP {test}: needs 2 GPUs"));
        return;
    }
    let Some(pool) = host_pool(test, &g.dev) else {
        return;
    };
    let d1 = Device::get(1).unwrap();
    let s1 = Stream::new(&d1).unwrap();
    let mut h = HostBuffer::<u8>::new_in(MIB, &pool, &g.stream).unwrap();
    h.wait_slice_mut().unwrap().copy_from_slice(&pattern(MIB, 44));
    assert_eq!(pool.access(&d1).unwrap(), PeerAccess::None);
    pool.set_access(&d1, PeerAccess::ReadWrite).unwrap();
    assert_eq!(pool.access(&d1).unwrap(), PeerAccess::ReadWrite);
    // Using the buffer on the other device's stream is refused, clearly,
    // before anything is queued.
    assert!(matches!(h.use_on(&s1), Err(Error::Unsupported { .. })));
    assert!(h.wait_slice().unwrap() == pattern(MIB, 44));
    drop(h);
    g.stream.synchronize().unwrap();
}
