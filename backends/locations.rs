//! Pool locations and allocation types (pinned host pools, managed pools):
//! the vendors' numbers and the CUDA versions that create each kind of pool.

use std::ffi::c_int;

use crate::backend::{RawAlloc, RawLocation};

/// `cudaMemLocationType` / `hipMemLocationType`: the same numbers on both
/// (HIP declares the host types from ROCm 6; each backend asserts its own
/// constants against these).
pub(crate) const LOCATION_NONE: u32 = 0;
pub(crate) const LOCATION_DEVICE: u32 = 1;
pub(crate) const LOCATION_HOST: u32 = 2;
pub(crate) const LOCATION_HOST_NUMA: u32 = 3;
/// `cudaMemAllocationType` / `hipMemAllocationType`.
pub(crate) const ALLOC_PINNED: u32 = 1;
pub(crate) const ALLOC_MANAGED: u32 = 2;

/// The CUDA runtime versions that create each kind of pool, from the
/// `cudaMemPoolCreate` documentation of each release's headers and the
/// releases CUDA's own C++ libraries (CCCL) gate them on:
///
/// | pool | CUDA |
/// |---|---|
/// | pinned, on a host NUMA node (`HostNuma`) | 12.6 (the 12.2-12.5 headers name the type, CCCL's host pool needs 12.6) |
/// | pinned, on the host without a node (`Host`) | 13.0 (the 12.x headers call it an invalid value) |
/// | managed (`cudaMemAllocationTypeManaged`) | 13.0 (the type is new in its headers) |
///
/// The same numbers serve HIP on NVIDIA (a runtime that reports a CUDA
/// version).
pub(crate) const CUDA_VERSION_HOST_NUMA_POOLS: i32 = 12_060;
pub(crate) const CUDA_VERSION_HOST_POOLS: i32 = 13_000;
pub(crate) const CUDA_VERSION_MANAGED_POOLS: i32 = 13_000;

/// The location as the vendor's (type, id) pair.
pub(crate) fn location_parts(location: RawLocation) -> (u32, c_int) {
    match location {
        RawLocation::Device(id) => (LOCATION_DEVICE, id),
        RawLocation::Host => (LOCATION_HOST, 0),
        RawLocation::HostNuma(node) => (LOCATION_HOST_NUMA, node),
        RawLocation::Unspecified => (LOCATION_NONE, 0),
    }
}

/// The vendor's allocation type.
pub(crate) fn alloc_type(alloc: RawAlloc) -> u32 {
    match alloc {
        RawAlloc::Pinned => ALLOC_PINNED,
        RawAlloc::Managed => ALLOC_MANAGED,
    }
}

/// Why a CUDA runtime of `version` (`major * 1000 + minor * 10`) cannot
/// create a pool at `location` of `alloc`, if it cannot; `runtime` names the
/// loaded runtime for the message.
pub(crate) fn cuda_pool_refusal(
    version: i32,
    location: RawLocation,
    alloc: RawAlloc,
    runtime: &str,
) -> Option<String> {
    match (alloc, location) {
        (RawAlloc::Managed, _) if version < CUDA_VERSION_MANAGED_POOLS => Some(format!(
            "managed memory pools need CUDA 13.0 or later; this runtime is {runtime}"
        )),
        (RawAlloc::Pinned, RawLocation::HostNuma(_)) if version < CUDA_VERSION_HOST_NUMA_POOLS => Some(format!(
            "pools of pinned host memory (on a host NUMA node) need CUDA 12.6 or later; this runtime is {runtime}"
        )),
        (RawAlloc::Pinned, RawLocation::Host) if version < CUDA_VERSION_HOST_POOLS => Some(format!(
            "pools of pinned host memory without a NUMA node need CUDA 13.0 or later (CUDA 12.6 to 12.9 \
             take a host NUMA node: Location::HostNuma); this runtime is {runtime}"
        )),
        _ => None,
    }
}
