//! Tests of the pool types and the registry (no GPU needed).

use super::*;

#[test]
fn pool_properties_build_up() {
    let d = PoolProperties::device();
    assert_eq!(d, PoolProperties::default());
    assert_eq!(
        (d.location, d.allocation, d.max_size, d.export),
        (None, AllocationType::Pinned, None, ExportHandle::None)
    );
    let h = PoolProperties::host().max_size(1 << 20);
    assert_eq!((h.location, h.max_size), (Some(Location::Host), Some(1 << 20)));
    assert_eq!(PoolProperties::host_numa(2).location, Some(Location::HostNuma(2)));
    let m = PoolProperties::managed().location(Location::Unspecified);
    assert_eq!(
        (m.location, m.allocation),
        (Some(Location::Unspecified), AllocationType::Managed)
    );
    let e = PoolProperties::device()
        .export(ExportHandle::PosixFd)
        .allocation(AllocationType::Pinned);
    assert_eq!(e.export, ExportHandle::PosixFd);
    assert!(Location::Host.is_host() && Location::HostNuma(0).is_host());
    assert!(!Location::Device(0).is_host() && !Location::Unspecified.is_host());
    assert_eq!(Location::HostNuma(7).raw().unwrap(), RawLocation::HostNuma(7));
    assert!(Location::HostNuma(u32::MAX).raw().is_err());
    assert!(Location::Device(usize::MAX).raw().is_err());
    assert_eq!(AllocationType::Managed.raw(), RawAlloc::Managed);
}

#[test]
fn pinned_memory_needs_the_streams_device_or_a_host_location() {
    let dev = Device::fake(0);
    let ok = |p| MemPool::check_placement_for(&dev, p).is_ok();
    assert!(ok(Placement::device(0)));
    assert!(!ok(Placement::device(1)));
    assert!(ok(Placement::new(Location::Host, AllocationType::Pinned)));
    assert!(!ok(Placement::new(Location::Unspecified, AllocationType::Pinned)));
    assert!(ok(Placement::new(Location::Unspecified, AllocationType::Managed)));
}

#[test]
fn registry_answers_live_dying_and_unknown() {
    let reg: Registry<u32> = Registry::new();
    let a = Arc::new(1u32);
    reg.lock().register(0x10, &a);
    match reg.lock().lookup(0x10) {
        Lookup::Live(found) => assert!(Arc::ptr_eq(&found, &a)),
        other => panic!("expected live, got {other:?}"),
    }
    assert!(matches!(reg.lock().lookup(0x20), Lookup::Unknown));
    // A lookup hands out a strong reference: the owner stays alive.
    let Lookup::Live(extra) = reg.lock().lookup(0x10) else {
        panic!("expected live")
    };
    let addr = Arc::as_ptr(&a);
    drop(a);
    assert_eq!(*extra, 1);
    drop(extra);
    // The last strong reference is gone but the owner has not
    // unregistered yet: the pool is being destroyed.
    assert!(matches!(reg.lock().lookup(0x10), Lookup::Dying));
    reg.lock().unregister(0x10, addr);
    assert!(matches!(reg.lock().lookup(0x10), Lookup::Unknown));
}

#[test]
fn registry_handle_reuse_replaces_and_keeps_the_newer_owner() {
    let reg: Registry<u32> = Registry::new();
    let old = Arc::new(1u32);
    let new = Arc::new(2u32);
    reg.lock().register(0x10, &old);
    // The runtime reused the handle for a new object before the old
    // owner unregistered: the newer registration wins ...
    reg.lock().register(0x10, &new);
    // ... and the old owner's unregister does not remove it.
    reg.lock().unregister(0x10, Arc::as_ptr(&old));
    match reg.lock().lookup(0x10) {
        Lookup::Live(found) => assert_eq!(*found, 2),
        other => panic!("expected the newer owner, got {other:?}"),
    }
    assert_eq!(reg.lock().0.len(), 1);
    reg.lock().unregister(0x10, Arc::as_ptr(&new));
    assert!(reg.lock().0.is_empty());
}
