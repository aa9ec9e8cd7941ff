//! Tests of the CUDA backend that need no GPU.

use super::*;
use crate::backend::{Backend, RawPoolProps};
use crate::error::VendorCode;

#[test]
fn init_and_device_count_fail_cleanly_without_gpu() {
    match Cuda::init() {
        Ok(()) => match Cuda::device_count() {
            Ok(_) => {}
            Err(Error::NoDevice { backend, .. }) => assert_eq!(backend, crate::Vendor::Cuda),
            Err(e) => panic!("device_count: unexpected error {e}"),
        },
        Err(Error::RuntimeNotFound {
            library, searched, ..
        }) => {
            assert_eq!(library, "libcudart");
            if std::env::var_os("SOMALLOC_CUDART").is_none() {
                assert_eq!(searched, ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]);
            }
        }
        Err(e) => panic!("init: unexpected error {e}"),
    }
}

#[test]
fn pointer_types_are_cuda_memory_types() {
    assert_eq!(memory_type(0), MemoryType::Pageable);
    assert_eq!(memory_type(1), MemoryType::PinnedHost);
    assert_eq!(memory_type(2), MemoryType::Device);
    assert_eq!(memory_type(3), MemoryType::Managed);
    assert_eq!(memory_type(9), MemoryType::Other(9));
    // A CUDA 12 runtime writes the first 24 bytes, a CUDA 13 one all 88.
    let attr = sys::cudaPointerAttributesStorage::zeroed();
    assert!(attr.devicePointer.is_null() && attr.reserved == [0; 8]);
}

#[test]
fn only_cuda_12_and_13_runtimes_are_used() {
    assert!(unsupported_major(11_080).is_some_and(|why| why.contains("CUDA 11.8")));
    assert!(unsupported_major(12_000).is_none());
    assert!(unsupported_major(12_080).is_none());
    assert!(unsupported_major(13_000).is_none());
    assert!(unsupported_major(13_010).is_none());
    assert!(unsupported_major(14_000).is_some_and(|why| why.contains("CUDA 14.0")));
    assert!(unsupported_major(0).is_some());
    assert_eq!(version_text(12_080), "CUDA 12.8");
    assert_eq!(version_text(13_000), "CUDA 13.0");
}

#[test]
fn error_codes_map_to_errors() {
    assert!(matches!(
        common::vendor::<CudaCodes>("cudaGetDeviceCount", 100),
        Error::NoDevice {
            backend: crate::Vendor::Cuda,
            ..
        }
    ));
    assert!(matches!(
        common::vendor::<CudaCodes>("cudaGetDeviceCount", 35),
        Error::NoDevice {
            backend: crate::Vendor::Cuda,
            ..
        }
    ));
    assert!(matches!(
        common::vendor::<CudaCodes>("cudaMemPoolCreate", 801),
        Error::Unsupported {
            backend: crate::Vendor::Cuda,
            ..
        }
    ));
    // The capture errors are ordinary vendor errors with their code.
    for code in [
        sys::cudaErrorStreamCaptureUnsupported,
        sys::cudaErrorStreamCaptureInvalidated,
    ] {
        match common::vendor::<CudaCodes>("cudaStreamEndCapture", code) {
            Error::Vendor { call, code: c, .. } => {
                assert_eq!(call, "cudaStreamEndCapture");
                assert_eq!(c, VendorCode(code));
            }
            e => panic!("unexpected {e}"),
        }
    }
    assert!(matches!(
        check_alloc("cudaMallocAsync", 2, 64),
        Err(Error::OutOfMemory {
            requested: 64,
            stats: None,
            arena: None,
        })
    ));
    assert!(matches!(check("cudaMemPoolCreate", 2), Err(Error::Vendor { .. })));
}

#[test]
fn bad_input_is_refused_before_the_runtime() {
    let props = RawPoolProps {
        location: crate::backend::RawLocation::Device(0),
        alloc: crate::backend::RawAlloc::Pinned,
        max_size: 0,
        handle_types: 2,
    };
    assert!(matches!(
        Cuda::pool_create(&props),
        Err(Error::Unsupported {
            backend: crate::Vendor::Cuda,
            ..
        })
    ));
}
