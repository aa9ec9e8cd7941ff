//! Tests of the CUDA virtual-memory calls that need no GPU.

use super::*;
use crate::backend::Backend;
use crate::error::{Error, VendorCode};

#[test]
fn cuda_results_are_named_by_the_driver_or_by_number() {
    // Without the driver's cuGetErrorName: the number.
    assert_eq!(texts(&Driver::NONE, 1), ("CUresult 1".to_string(), String::new()));
    assert_eq!(
        texts(&Driver::NONE, 999),
        ("CUresult 999".to_string(), String::new())
    );
    // With whatever driver this machine has (none here: the same).
    let (name, _) = texts(driver(), 1);
    assert!(
        name == "CUresult 1" || name == "CUDA_ERROR_INVALID_VALUE",
        "{name}"
    );
}

#[test]
fn cuda_results_map_to_errors_as_runtime_codes_do() {
    // Out of memory from cuMemCreate is OutOfMemory with the request.
    assert!(matches!(
        common::check_alloc::<DriverCodes>("cuMemCreate", sys::CUDA_ERROR_OUT_OF_MEMORY, 2 << 20),
        Err(Error::OutOfMemory {
            requested: 0x20_0000,
            stats: None,
            ..
        })
    ));
    assert!(common::check_alloc::<DriverCodes>("cuMemCreate", sys::CUDA_SUCCESS, 64).is_ok());
    // Elsewhere 2 is an ordinary vendor error, with the call and the code.
    match driver_check("cuMemMap", sys::CUDA_ERROR_OUT_OF_MEMORY) {
        Err(Error::Vendor { call, code, name, .. }) => {
            assert_eq!(call, "cuMemMap");
            assert_eq!(code, VendorCode(2));
            assert!(!name.is_empty());
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(matches!(
        driver_check("cuDeviceGet", sys::CUDA_ERROR_NO_DEVICE),
        Err(Error::NoDevice {
            backend: crate::Vendor::Cuda,
            ..
        })
    ));
    assert!(matches!(
        driver_check("cuMemCreate", sys::CUDA_ERROR_NOT_SUPPORTED),
        Err(Error::Unsupported {
            backend: crate::Vendor::Cuda,
            ..
        })
    ));
    assert!(driver_check("cuMemMap", sys::CUDA_SUCCESS).is_ok());
}

#[test]
fn a_driver_without_an_entry_point_names_it() {
    assert_eq!(
        Driver::NONE.missing(),
        Some("cuCtxGetCurrent not found in the driver")
    );
    let partial = Driver {
        ctx_get_current: driver_fn_stub(),
        ..Driver::NONE
    };
    assert_eq!(partial.missing(), Some("cuDeviceGet not found in the driver"));
    match need::<fn()>(None, "cuMemCreate") {
        Err(Error::Unsupported { backend, what }) => {
            assert_eq!(backend, crate::Vendor::Cuda);
            assert!(what.starts_with("cuMemCreate not found in the driver"), "{what}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// A function of cuCtxGetCurrent's type (never called).
fn driver_fn_stub() -> sys::PFN_cuCtxGetCurrent_v4000 {
    unsafe extern "C" fn stub(_: *mut sys::CUcontext) -> i32 {
        sys::CUDA_SUCCESS
    }
    Some(stub)
}

#[test]
fn allocation_properties_follow_the_request() {
    let plain = allocation_prop(PhysProps {
        device: 1,
        posix_fd: false,
        rdma: false,
    })
    .unwrap();
    assert_eq!(plain.type_, sys::CU_MEM_ALLOCATION_TYPE_PINNED);
    assert_eq!(plain.requestedHandleTypes, sys::CU_MEM_HANDLE_TYPE_NONE);
    assert_eq!(
        (plain.location.type_, plain.location.id),
        (sys::CU_MEM_LOCATION_TYPE_DEVICE, 1)
    );
    assert!(plain.win32HandleMetaData.is_null());
    assert_eq!(plain.allocFlags.gpuDirectRDMACapable, 0);
    let shared = allocation_prop(PhysProps {
        device: 0,
        posix_fd: true,
        rdma: true,
    })
    .unwrap();
    assert_eq!(
        shared.requestedHandleTypes,
        sys::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    );
    assert_eq!(shared.allocFlags.gpuDirectRDMACapable, 1);
    assert_eq!(
        (shared.allocFlags.compressionType, shared.allocFlags.usage),
        (0, 0)
    );
    assert!(allocation_prop(PhysProps {
        device: usize::MAX,
        posix_fd: false,
        rdma: false,
    })
    .is_err());
}

#[test]
fn vmm_support_without_a_gpu_is_an_error_or_a_reason() {
    match Cuda::vmm_support(0) {
        // A machine with a GPU: either answer is fine, with a reason when not.
        Ok(s) => {
            assert_eq!(s.supported, s.why_not.is_none());
            if s.supported {
                assert!(s.granularity > 0 && s.recommended >= s.granularity);
            } else {
                assert_eq!((s.granularity, s.recommended), (0, 0));
            }
        }
        Err(Error::RuntimeNotFound { .. } | Error::NoDevice { .. } | Error::Unsupported { .. }) => {}
        Err(e) => panic!("vmm_support: unexpected error {e}"),
    }
    assert_eq!(Cuda::vmm_quirks(), VmmQuirks::NONE);
    // The other calls fail cleanly too where there is no runtime or device.
    if Cuda::device_count().is_err() {
        assert!(Cuda::vmm_reserve(2 << 20, 0).is_err());
        assert!(Cuda::vmm_create(
            2 << 20,
            PhysProps {
                device: 0,
                posix_fd: false,
                rdma: false
            }
        )
        .is_err());
        assert!(Cuda::vmm_import_fd(-1).is_err());
    }
}

#[test]
fn a_chunk_round_trips_on_a_gpu() {
    if let Some(why) = common::vmm_round_trip::<Cuda>() {
        println!("SKIP a_chunk_round_trips_on_a_gpu: {why}");
    }
}
