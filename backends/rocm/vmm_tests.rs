//! Tests of the HIP virtual-memory calls that need no GPU.

use super::super::Rocm;
use super::*;
use crate::backend::Backend;
use crate::error::Error;

const ROCM_5_2_3: i32 = 50_221_153;
const ROCM_5_3_0: i32 = 50_322_062;
const ROCM_6_1: i32 = 60_140_091;
const ROCM_6_3_4: i32 = 60_342_134;
const ROCM_6_4_0: i32 = 60_443_482;
const ROCM_6_4_1: i32 = 60_443_483;
const ROCM_6_4_2: i32 = 60_443_484;
const ROCM_7_0: i32 = 70_051_831;
const ROCM_7_1: i32 = 70_125_424;
const ROCM_7_2: i32 = 70_253_211;
const ROCM_7_14: i32 = 71_460_850;
const ROCM_10: i32 = 100_000_000;
const HIP_ON_CUDA_12_8: i32 = 12_080;

fn props(device: usize, posix_fd: bool, rdma: bool) -> PhysProps {
    PhysProps {
        device,
        posix_fd,
        rdma,
    }
}

/// The bytes the runtime reads at `offset` (4 of them).
fn u32_at(prop: &AllocationProp, offset: usize) -> u32 {
    // SAFETY: both layouts are 32 bytes of initialised fields at the offsets
    // read here (sys.rs asserts them).
    unsafe {
        prop.as_ptr()
            .cast::<u8>()
            .add(offset)
            .cast::<u32>()
            .read_unaligned()
    }
}

#[test]
fn the_allocation_layout_follows_the_runtime_version() {
    for version in [ROCM_5_2_3, 50_100_000, 50_299_999] {
        let p = AllocationProp::new(version, props(3, true, false)).unwrap();
        assert!(matches!(p, AllocationProp::Rocm52(_)), "{version}");
        // ROCm 5.2: location at 4 (type, id), handle type at 12, type at 16.
        assert_eq!(u32_at(&p, 4), sys::hipMemLocationTypeDevice);
        assert_eq!(u32_at(&p, 8), 3);
        assert_eq!(u32_at(&p, 12), sys::hipMemHandleTypePosixFileDescriptor);
        assert_eq!(u32_at(&p, 16), sys::hipMemAllocationTypePinned);
    }
    for version in [
        50_300_000,
        ROCM_5_3_0,
        ROCM_6_4_2,
        ROCM_7_14,
        ROCM_10,
        HIP_ON_CUDA_12_8,
    ] {
        let p = AllocationProp::new(version, props(3, false, true)).unwrap();
        let AllocationProp::Rocm53(fields) = p else {
            panic!("{version}: {p:?}");
        };
        // CUDA's order: type at 0, handle type at 4, location at 8, the RDMA
        // flag at 25.
        assert_eq!(u32_at(&p, 0), sys::hipMemAllocationTypePinned);
        assert_eq!(u32_at(&p, 4), sys::hipMemHandleTypeNone);
        assert_eq!(
            (u32_at(&p, 8), u32_at(&p, 12)),
            (sys::hipMemLocationTypeDevice, 3)
        );
        assert_eq!(fields.allocFlags.gpuDirectRDMACapable, 1);
        // SAFETY: byte 25 is `gpuDirectRDMACapable` (sys.rs).
        assert_eq!(unsafe { p.as_ptr().cast::<u8>().add(25).read() }, 1);
    }
    // The old layout has no RDMA flag: asking for one is refused.
    assert!(matches!(
        AllocationProp::new(ROCM_5_2_3, props(0, false, true)),
        Err(Error::Unsupported {
            backend: crate::Vendor::Rocm,
            ..
        })
    ));
    assert!(AllocationProp::new(ROCM_6_4_2, props(usize::MAX, false, false)).is_err());
}

#[test]
fn quirks_follow_the_runtime_version() {
    let q = vmm_quirks;
    // HIP on NVIDIA: CUDA's driver, none.
    assert_eq!(q(HIP_ON_CUDA_12_8), VmmQuirks::NONE);
    // hipMemRelease leaks on 6.4.0 and 6.4.1 (HIP 6.4.43482, 6.4.43483).
    assert!(!q(ROCM_6_3_4).release_leaks);
    assert!(q(ROCM_6_4_0).release_leaks && q(ROCM_6_4_1).release_leaks);
    assert!(!q(ROCM_6_4_2).release_leaks && !q(ROCM_7_2).release_leaks);
    // Memory held by the reservation: 7.1 up to 10.
    assert!(!q(ROCM_6_4_2).reservation_holds_memory && !q(ROCM_7_0).reservation_holds_memory);
    assert!(q(ROCM_7_1).reservation_holds_memory && q(ROCM_7_2).reservation_holds_memory);
    assert!(q(ROCM_7_14).reservation_holds_memory && !q(ROCM_10).reservation_holds_memory);
    // A file descriptor per chunk: 7.2 up to 10.
    assert!(!q(ROCM_7_1).fd_per_create && q(ROCM_7_2).fd_per_create);
    assert!(q(ROCM_7_14).fd_per_create && !q(ROCM_10).fd_per_create);
    // Chunks of at most 256 MiB before 7.0.
    for version in [ROCM_5_3_0, ROCM_6_1, ROCM_6_4_2] {
        assert_eq!(q(version).max_chunk, Some(256 << 20), "{version}");
    }
    for version in [ROCM_7_0, ROCM_7_14, ROCM_10] {
        assert_eq!(q(version).max_chunk, None, "{version}");
    }
    assert_eq!(
        q(ROCM_10),
        VmmQuirks {
            release_leaks: false,
            reservation_holds_memory: false,
            fd_per_create: false,
            max_chunk: None
        }
    );
}

#[test]
fn handles_travel_as_integers() {
    let h = 0x7f00_dead_b000_usize as sys::hipMemGenericAllocationHandle_t;
    assert_eq!(handle(h), PhysHandle(0x7f00_dead_b000));
    assert_eq!(raw(handle(h)), h);
}

#[test]
fn vmm_support_without_a_gpu_is_an_error_or_a_reason() {
    match Rocm::vmm_support(0) {
        Ok(s) => {
            assert_eq!(s.supported, s.why_not.is_none());
            if s.supported {
                assert!(s.granularity > 0 && s.recommended >= s.granularity);
            } else {
                assert_eq!((s.granularity, s.recommended), (0, 0));
            }
        }
        Err(Error::RuntimeNotFound { .. } | Error::NoDevice { .. } | Error::Unsupported { .. }) => {}
        // A runtime without a device may also call the ordinal invalid.
        Err(Error::Vendor { call, .. }) => assert_eq!(call, "hipDeviceGetAttribute"),
        Err(e) => panic!("vmm_support: unexpected error {e}"),
    }
    // Without a runtime: no known faults, and the calls fail cleanly.
    if Rocm::init().is_err() {
        assert_eq!(Rocm::vmm_quirks(), VmmQuirks::NONE);
        assert!(Rocm::vmm_reserve(2 << 20, 0).is_err());
        assert!(Rocm::vmm_create(2 << 20, props(0, false, false)).is_err());
        assert!(Rocm::vmm_retain(DevicePtr(0x1000)).is_err());
    }
}

#[test]
fn a_chunk_round_trips_on_a_gpu() {
    if let Some(why) = common::vmm_round_trip::<Rocm>() {
        println!("SKIP a_chunk_round_trips_on_a_gpu: {why}");
    }
}
