use super::*;
use crate::backend::{Backend, GraphMemAttr, RawPoolProps};
use crate::error::VendorCode;

#[test]
fn init_and_device_count_fail_cleanly_without_gpu() {
    match Rocm::init() {
        Ok(()) => match Rocm::device_count() {
            Ok(_) => {}
            Err(Error::NoDevice { backend, .. }) => assert_eq!(backend, crate::Vendor::Rocm),
            Err(e) => panic!("device_count: unexpected error {e}"),
        },
        Err(Error::RuntimeNotFound {
            library, searched, ..
        }) => {
            assert_eq!(library, "libamdhip64");
            assert!(searched.iter().any(|s| s == "libamdhip64.so"));
        }
        Err(e) => panic!("init: unexpected error {e}"),
    }
}

#[test]
fn error_codes_map_like_cuda() {
    assert!(matches!(
        common::vendor::<RocmCodes>("hipGetDeviceCount", 100),
        Error::NoDevice {
            backend: crate::Vendor::Rocm,
            ..
        }
    ));
    assert!(matches!(
        common::vendor::<RocmCodes>("hipGetDeviceCount", 35),
        Error::NoDevice {
            backend: crate::Vendor::Rocm,
            ..
        }
    ));
    assert!(matches!(
        common::vendor::<RocmCodes>("hipMemPoolCreate", 801),
        Error::Unsupported {
            backend: crate::Vendor::Rocm,
            ..
        }
    ));
    match common::vendor::<RocmCodes>("hipStreamSynchronize", 1) {
        Error::Vendor { call, code, .. } => {
            assert_eq!(call, "hipStreamSynchronize");
            assert_eq!(code, VendorCode(1));
        }
        e => panic!("unexpected {e}"),
    }
    // A code no runtime knows is still just data.
    assert!(matches!(
        common::vendor::<RocmCodes>("hipFoo", 123_456),
        Error::Vendor { .. }
    ));
    assert!(matches!(
        check_alloc("hipMallocAsync", 2, 64),
        Err(Error::OutOfMemory {
            requested: 64,
            stats: None,
            arena: None,
        })
    ));
    assert!(check_alloc("hipMallocAsync", 0, 64).is_ok());
    // Outside the malloc calls, 2 is an ordinary vendor error.
    assert!(matches!(check("hipMemPoolCreate", 2), Err(Error::Vendor { .. })));
}

#[test]
fn max_size_needs_rocm_6_2() {
    assert!(!pool_max_size_supported(50_221_153)); // ROCm 5.2.3
    assert!(!pool_max_size_supported(60_140_091)); // ROCm 6.1
    assert!(pool_max_size_supported(60_200_000)); // ROCm 6.2.0
    assert!(pool_max_size_supported(70_000_000)); // ROCm 7.0
    assert!(!pool_max_size_supported(12_010)); // HIP on CUDA 12.1
    assert!(pool_max_size_supported(12_080)); // HIP on CUDA 12.8
    assert_eq!(version_text(50_221_153), "HIP 5.2");
    assert_eq!(version_text(60_203_000), "HIP 6.2");
}

#[test]
fn hip_gaps_are_errors_not_no_ops() {
    // Checked before any runtime call, so these hold with or without one.
    let props = RawPoolProps {
        location: crate::backend::RawLocation::Device(0),
        alloc: crate::backend::RawAlloc::Pinned,
        max_size: 0,
        handle_types: 2,
    };
    assert!(matches!(
        Rocm::pool_create(&props),
        Err(Error::Unsupported {
            backend: crate::Vendor::Rocm,
            ..
        })
    ));
    let null_stream = Rocm::stream_from_raw(std::ptr::null_mut());
    assert!(matches!(
        Rocm::malloc_async(0, null_stream),
        Err(Error::InvalidArgument { .. })
    ));
    let null_pool = RocmPool(std::ptr::null_mut());
    assert!(matches!(
        Rocm::malloc_from_pool_async(0, null_pool, null_stream),
        Err(Error::InvalidArgument { .. })
    ));
    // SAFETY: a null pointer is never passed to the runtime.
    assert!(unsafe { Rocm::free_async(DevicePtr::NULL, null_stream) }.is_ok());
}

#[test]
fn alloc_in_capture_needs_rocm_5_5() {
    assert!(!alloc_in_capture_supported(50_221_153)); // ROCm 5.2.3
    assert!(!alloc_in_capture_supported(50_403_000)); // ROCm 5.4
    assert!(alloc_in_capture_supported(50_500_000)); // ROCm 5.5.0
    assert!(alloc_in_capture_supported(60_213_000)); // the HIP-on-CUDA shim
    assert!(alloc_in_capture_supported(70_000_000));
    assert!(alloc_in_capture_supported(12_080)); // HIP on NVIDIA: CUDA
}

unsafe extern "C" fn never_called(_: *mut c_void) {
    unreachable!("no graph exists in this test")
}

#[test]
fn graph_calls_an_old_runtime_lacks_are_unsupported_with_both_versions() {
    let Ok(version) = Rocm::init().and_then(|()| Rocm::runtime_version()) else {
        return; // no runtime here
    };
    if !(sys::HIP_VERSION_MAJOR_SCALE..50_300_000).contains(&version) {
        return; // a runtime that has them; needs a device to go on
    }
    let text = version_text(version);
    let expect = |r: Result<()>, call: &str, since: &str| match r {
        Err(Error::Unsupported {
            backend: crate::Vendor::Rocm,
            what,
        }) => {
            assert_eq!(
                what,
                format!("{call} needs {since} or later; this runtime is {text}")
            )
        }
        other => panic!("{call}: expected Unsupported, got {other:?}"),
    };
    let (exec, stream) = (
        RocmGraphExec(std::ptr::null_mut()),
        RocmStream(std::ptr::null_mut()),
    );
    expect(Rocm::graph_upload(exec, stream), "hipGraphUpload", "ROCm 5.5");
    let used = Rocm::graph_mem_get(0, GraphMemAttr::UsedMemCurrent).map(|_| ());
    expect(used, "hipDeviceGetGraphMemAttribute", "ROCm 5.3");
    expect(Rocm::graph_mem_trim(0), "hipDeviceGraphMemTrim", "ROCm 5.3");
    // SAFETY: refused before any runtime call; `never_called` is not
    // handed to the runtime.
    let retained = unsafe {
        Rocm::graph_retain_release(
            RocmGraph(std::ptr::null_mut()),
            never_called,
            std::ptr::null_mut(),
        )
    };
    expect(retained, "hipUserObjectCreate", "ROCm 5.3");
}

#[test]
fn a_failed_call_leaves_the_runtimes_last_error() {
    if Rocm::init().is_err() {
        return; // no runtime here
    }
    if Rocm::device_count().is_ok() {
        return; // a GPU: hipGetDeviceCount does not fail
    }
    // The same library again (dlopen hands back the loaded one).
    let lib = common::library_candidates(LIBRARY_ENV, LIBRARY_NAMES)
        .into_iter()
        // SAFETY: the runtime is loaded already; opening it again runs
        // no initialiser.
        .find_map(|name| unsafe { libloading::Library::new(name) }.ok())
        .expect("the loaded runtime opens again");
    // SAFETY: `hipError_t hipGetLastError(void)` in every HIP.
    let last =
        unsafe { lib.get::<unsafe extern "C" fn() -> i32>(b"hipGetLastError\0") }.expect("hipGetLastError");
    // SAFETY: no arguments.
    let code = unsafe { last() };
    // Not cleared by somalloc. (Which code it is varies: ROCm 5.2
    // without a GPU reports hipErrorInvalidDevice from its own
    // initialisation; the HIP-on-CUDA shim reports hipGetDeviceCount's.)
    assert_ne!(code, sys::hipSuccess, "the failed call's last error was cleared");
}

#[test]
fn max_size_on_an_old_runtime_is_unsupported() {
    let Ok(version) = Rocm::init().and_then(|()| Rocm::runtime_version()) else {
        return; // no runtime here
    };
    if pool_max_size_supported(version) {
        return; // a runtime that reads maxSize; needs a device to go on
    }
    let props = RawPoolProps {
        location: crate::backend::RawLocation::Device(0),
        alloc: crate::backend::RawAlloc::Pinned,
        max_size: 1 << 20,
        handle_types: 0,
    };
    assert!(matches!(
        Rocm::pool_create(&props),
        Err(Error::Unsupported {
            backend: crate::Vendor::Rocm,
            ..
        })
    ));
}

#[test]
fn rocm_pools_take_device_locations_only() {
    use crate::backend::{RawAlloc, RawLocation};
    let props = |location, alloc| RawPoolProps {
        location,
        alloc,
        max_size: 0,
        handle_types: 0,
    };
    for version in [50_221_153, 60_200_000, 70_200_000] {
        assert!(refuse_pool_placement(version, &props(RawLocation::Device(0), RawAlloc::Pinned)).is_ok());
        for (loc, alloc) in [
            (RawLocation::Host, RawAlloc::Pinned),
            (RawLocation::HostNuma(0), RawAlloc::Pinned),
            (RawLocation::Device(0), RawAlloc::Managed),
        ] {
            match refuse_pool_placement(version, &props(loc, alloc)) {
                Err(Error::Unsupported {
                    backend: crate::Vendor::Rocm,
                    what,
                }) => {
                    assert!(what.contains(&version_text(version)), "{what}")
                }
                other => panic!("{loc:?} {alloc:?} on {version}: {other:?}"),
            }
        }
    }
    // HIP on NVIDIA (a CUDA version): CUDA's table.
    assert!(refuse_pool_placement(13_000, &props(RawLocation::Host, RawAlloc::Pinned)).is_ok());
    assert!(refuse_pool_placement(12_080, &props(RawLocation::HostNuma(0), RawAlloc::Pinned)).is_ok());
    assert!(refuse_pool_placement(12_080, &props(RawLocation::Host, RawAlloc::Pinned)).is_err());
}

#[test]
fn pointer_types_by_rocm_numbering() {
    use crate::backend::MemoryType;
    let attr = |t: i32, managed: i32| sys::hipPointerAttribute_t {
        memoryType: t,
        isManaged: managed,
        ..sys::hipPointerAttribute_t::zeroed()
    };
    // ROCm 5.x: Host 0, Device 1, Array 2, Unified 3; isManaged flags managed.
    let r5 = 50_221_153;
    assert_eq!(memory_type(r5, &attr(0, 0)), MemoryType::PinnedHost);
    assert_eq!(memory_type(r5, &attr(1, 0)), MemoryType::Device);
    assert_eq!(memory_type(r5, &attr(0, 1)), MemoryType::Managed);
    // ROCm 6.0 and HIP on NVIDIA: CUDA's numbers.
    for v in [60_000_000, 70_100_000, 13_000] {
        assert_eq!(memory_type(v, &attr(0, 0)), MemoryType::Pageable);
        assert_eq!(memory_type(v, &attr(1, 0)), MemoryType::PinnedHost);
        assert_eq!(memory_type(v, &attr(2, 0)), MemoryType::Device);
        assert_eq!(memory_type(v, &attr(3, 1)), MemoryType::Managed);
        assert_eq!(memory_type(v, &attr(10, 0)), MemoryType::Other(10));
    }
}

#[test]
fn host_pools_on_an_old_runtime_are_unsupported() {
    let Ok(version) = Rocm::init().and_then(|()| Rocm::runtime_version()) else {
        return; // no runtime here
    };
    if version < sys::HIP_VERSION_MAJOR_SCALE {
        return; // HIP on NVIDIA; needs a device to go on
    }
    let props = RawPoolProps {
        location: crate::backend::RawLocation::Host,
        alloc: crate::backend::RawAlloc::Pinned,
        max_size: 0,
        handle_types: 0,
    };
    // Refused before the runtime is asked, naming it (here: Debian's ROCm
    // 5.2.3 library, no GPU needed).
    assert!(matches!(
        Rocm::pool_create(&props),
        Err(Error::Unsupported { backend: crate::Vendor::Rocm, what }) if what.contains("this runtime is HIP")
    ));
    // The lookups by location exist only for device pools.
    assert!(matches!(
        Rocm::default_pool_at(props.location, props.alloc),
        Err(Error::Unsupported {
            backend: crate::Vendor::Rocm,
            ..
        })
    ));
}
