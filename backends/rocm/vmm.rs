//! The virtual-memory API of the ROCm backend: HIP's `hipMemAddressReserve`,
//! `hipMemCreate`, `hipMemMap`, ... (optional symbols of mod.rs) behind the
//! `vmm_*` functions of `Backend` (`backend_impl!` forwards to this module).
//!
//! # What each ROCm release offers
//!
//! From the sources of ROCm's HIP runtime (`src/hip_vm.cpp` of ROCm/hipamd up
//! to 5.6, `hipamd/src/hip_vm.cpp` of ROCm/clr from 5.6) and the headers of
//! ROCm/HIP:
//!
//! | ROCm | what changes                                                    |
//! |------|-----------------------------------------------------------------|
//! | 5.1  | the eleven functions are exported (version node hip_5.1); in    |
//! |      | 5.2.3 `hipMemAddressReserve` answers success without reserving  |
//! |      | (nor writing the address), and there is no device attribute     |
//! | 5.3  | a working `hipMemAddressReserve`; the attribute                 |
//! |      | `hipDeviceAttributeVirtualMemoryManagementSupported` (89);      |
//! |      | `hipMemAllocationProp` takes CUDA's layout (sys.rs)             |
//! | 6.2  | POSIX file-descriptor handles: before, `hipMemCreate` refuses   |
//! |      | any requested handle type and export and import answer          |
//! |      | `hipErrorNotSupported`                                          |
//! | 7.13 | `hipDeviceAttributeGPUDirectRDMAWithHipVMMSupported` (94)       |
//!
//! So [`support`] answers not supported below ROCm 5.3 without asking;
//! `posix_fd` is the version's answer (HIP has no device attribute for it),
//! true from ROCm 6.2 on AMD, false on HIP on NVIDIA (not known there);
//! `rdma` is attribute 94 from HIP 7.13, false before (the 5.3 layout has
//! the flag, but no attribute says whether the device honours it). The
//! allocation properties are written in the layout of the runtime's
//! version: ROCm 5.1/5.2's, or CUDA's from 5.3 (and on HIP on NVIDIA, whose
//! struct is CUDA's). HIP has no contexts to make current: only
//! `import_fd` depends on the calling thread's current device (ROCm imports
//! onto it).
//!
//! # Known faults, by version ([`quirks`])
//!
//! A fault is assumed from the first release after the last one reported
//! good, up to the first release reported (or, where no report says,
//! assumed) fixed. `hipRuntimeGetVersion` gives HIP's
//! major.minor.patch, whose patch field is a build number that moves only
//! when the HIP runtime changes (ROCm/hip#3703): ROCm 6.4.0 reports HIP
//! 6.4.43482, 6.4.1 6.4.43483, 6.4.2 and 6.4.3 6.4.43484.
//!
//! * `release_leaks`, ROCm 6.4.0 and 6.4.1: `hipMemRelease` answers success
//!   and frees nothing, even after the reservation is freed
//!   (ROCm/hip#3781: reported on 6.4.0, 6.3.4 good, fixed in 6.4.2).
//! * `reservation_holds_memory`, ROCm 7.1 up to (not including) 10: after
//!   `hipMemUnmap` and `hipMemRelease` the physical memory stays allocated
//!   until `hipMemAddressFree` of the whole reservation: ROCr keeps the
//!   chunk's DMA-buf mapped into the address range
//!   (ROCm/legacy-rocm-build#6021: 7.2 and 7.11-preview, Linux only;
//!   fzyzcjy/torch_memory_saver#83 and radixark/miles#1680: 7.0 good, 7.2.0
//!   to 7.2.4 affected). The fix (rocm-systems#4363) went to the development
//!   branch in March 2026, into no 7.2.x; ROCm 10 is assumed fixed.
//!   vLLM (vllm-project/vllm#37533) works around it by freeing the
//!   reservation and reserving the same addresses again.
//! * `fd_per_create`, ROCm 7.2 up to 10: each `hipMemCreate` keeps a DMA-buf
//!   file descriptor open, so `ulimit -n` (1024 by default) caps the live
//!   chunks, and reaching it reads as `hipErrorOutOfMemory`
//!   (ROCm/legacy-rocm-build#6661: 7.1.1 good, 7.14.0 affected, fixed in
//!   ROCm 10 by rocm-systems#7786; also rocm-systems#10604 on 7.14.0).
//! * `max_chunk`, ROCm below 7.0: large `hipMemCreate`s must be made in
//!   chunks. torch_memory_saver keeps a chunked path for ROCm 6.x that it
//!   drops from 7.0 (fzyzcjy/torch_memory_saver#14, #52); vLLM's ROCm
//!   sleep mode creates 256 MiB chunks by default (csrc/cumem_allocator.cpp,
//!   from vllm-project/vllm#12695), which is the limit given here. Nothing
//!   is reported of 5.x; the same limit is assumed there.
//!
//! Also known, and left to the arena's way of working: before ROCm 7.0,
//! one `hipMemUnmap` over several mappings fails to release the range
//! (ROCm/ROCR-Runtime#285): unmap each mapping on its own. Sizes that are
//! not multiples of the granularity are refused (ROCm 10 checks
//! `hipMemMap`'s too).

use std::ffi::{c_int, c_void};

use super::{api, check, check_alloc, common, rocm_at_least, sys, unsupported, Api, RocmCodes};
use crate::backend::{DevicePtr, PhysHandle, PhysProps, VmmQuirks, VmmSupport};
use crate::error::Result;

// The library's own version numbers (HIP_VERSION: major * 10^7 +
// minor * 10^5 + patch; a HIP-on-NVIDIA runtime reports CUDA's version,
// below `sys::HIP_VERSION_MAJOR_SCALE`).

/// ROCm 5.3: a working API, its device attribute, CUDA's layout of
/// `hipMemAllocationProp`.
const HIP_VERSION_VMM: i32 = 50_300_000;
/// ROCm 6.2: POSIX file-descriptor handles.
const HIP_VERSION_VMM_POSIX_FD: i32 = 60_200_000;
/// HIP 7.13: the device attribute for GPUDirect RDMA with VMM memory.
const HIP_VERSION_VMM_RDMA_ATTRIBUTE: i32 = 71_300_000;
/// ROCm 6.4.0 (HIP 6.4.43482) to 6.4.2 (HIP 6.4.43484): hipMemRelease
/// leaks.
const HIP_VERSIONS_RELEASE_LEAKS: (i32, i32) = (60_400_000, 60_443_484);
/// ROCm 7.1 to 10: memory held until the reservation is freed.
const HIP_VERSIONS_RESERVATION_HOLDS_MEMORY: (i32, i32) = (70_100_000, 100_000_000);
/// ROCm 7.2 to 10: a file descriptor per chunk.
const HIP_VERSIONS_FD_PER_CREATE: (i32, i32) = (70_200_000, 100_000_000);
/// ROCm 7.0: large chunks no longer need splitting.
const HIP_VERSION_UNCHUNKED: i32 = 70_000_000;
/// The largest chunk before ROCm 7.0 (vLLM's default on ROCm).
const MAX_CHUNK_BEFORE_7: usize = 256 << 20;

const WHY_BEFORE_5_3: &str = "ROCm 5.2 and older have no working virtual memory management \
     (no device attribute; hipMemAddressReserve reserves nothing)";

/// The faults of the virtual-memory API of a runtime reporting `version`
/// (see the module doc for each and its sources).
pub(crate) fn vmm_quirks(version: i32) -> VmmQuirks {
    if version < sys::HIP_VERSION_MAJOR_SCALE {
        // HIP on NVIDIA: CUDA's driver underneath.
        return VmmQuirks::NONE;
    }
    let within = |(from, to): (i32, i32)| (from..to).contains(&version);
    VmmQuirks {
        release_leaks: within(HIP_VERSIONS_RELEASE_LEAKS),
        reservation_holds_memory: within(HIP_VERSIONS_RESERVATION_HOLDS_MEMORY),
        fd_per_create: within(HIP_VERSIONS_FD_PER_CREATE),
        max_chunk: (version < HIP_VERSION_UNCHUNKED).then_some(MAX_CHUNK_BEFORE_7),
    }
}

/// `hipMemAllocationProp` in the layout a runtime of a version reads.
#[derive(Clone, Copy, Debug)]
enum AllocationProp {
    /// ROCm 5.1 and 5.2.
    Rocm52(sys::hipMemAllocationProp_5_2),
    /// ROCm 5.3 and later, and HIP on NVIDIA (CUDA's order).
    Rocm53(sys::hipMemAllocationProp_5_3),
}

impl AllocationProp {
    /// Pinned memory on `props.device`, exportable as a POSIX fd and
    /// RDMA-capable as asked; RDMA on the 5.2 layout, which has no flag for
    /// it, is `Unsupported`.
    fn new(version: i32, props: PhysProps) -> Result<AllocationProp> {
        let location = sys::hipMemLocation {
            type_: sys::hipMemLocationTypeDevice,
            id: common::ordinal(props.device)?,
        };
        let handle_type = if props.posix_fd {
            sys::hipMemHandleTypePosixFileDescriptor
        } else {
            sys::hipMemHandleTypeNone
        };
        if rocm_at_least(version, HIP_VERSION_VMM) {
            return Ok(AllocationProp::Rocm53(sys::hipMemAllocationProp_5_3 {
                type_: sys::hipMemAllocationTypePinned,
                requestedHandleType: handle_type,
                location,
                win32HandleMetaData: std::ptr::null_mut(),
                allocFlags: sys::hipMemAllocationProp_allocFlags {
                    compressionType: 0,
                    gpuDirectRDMACapable: u8::from(props.rdma),
                    usage: 0,
                },
            }));
        }
        if props.rdma {
            return Err(unsupported(
                "GPUDirect RDMA for virtual memory: hipMemAllocationProp of ROCm 5.2 and older has no flag for it",
            ));
        }
        Ok(AllocationProp::Rocm52(sys::hipMemAllocationProp_5_2 {
            compressionType: 0,
            location,
            requestedHandleType: handle_type,
            type_: sys::hipMemAllocationTypePinned,
            usage: 0,
            win32HandleMetaData: std::ptr::null_mut(),
        }))
    }

    fn as_ptr(&self) -> *const c_void {
        match self {
            AllocationProp::Rocm52(p) => (p as *const sys::hipMemAllocationProp_5_2).cast(),
            AllocationProp::Rocm53(p) => (p as *const sys::hipMemAllocationProp_5_3).cast(),
        }
    }
}

/// Why the loaded runtime cannot serve the API: the first function missing.
fn missing(api: &Api) -> Option<&'static str> {
    [
        (
            api.mem_address_reserve.get::<RocmCodes>().is_ok(),
            "hipMemAddressReserve not found in the runtime",
        ),
        (
            api.mem_address_free.get::<RocmCodes>().is_ok(),
            "hipMemAddressFree not found in the runtime",
        ),
        (
            api.mem_create.get::<RocmCodes>().is_ok(),
            "hipMemCreate not found in the runtime",
        ),
        (
            api.mem_release.get::<RocmCodes>().is_ok(),
            "hipMemRelease not found in the runtime",
        ),
        (
            api.mem_map.get::<RocmCodes>().is_ok(),
            "hipMemMap not found in the runtime",
        ),
        (
            api.mem_set_access.get::<RocmCodes>().is_ok(),
            "hipMemSetAccess not found in the runtime",
        ),
        (
            api.mem_unmap.get::<RocmCodes>().is_ok(),
            "hipMemUnmap not found in the runtime",
        ),
        (
            api.mem_get_allocation_granularity.get::<RocmCodes>().is_ok(),
            "hipMemGetAllocationGranularity not found in the runtime",
        ),
        (
            api.mem_retain_allocation_handle.get::<RocmCodes>().is_ok(),
            "hipMemRetainAllocationHandle not found in the runtime",
        ),
        (
            api.mem_export_to_shareable_handle.get::<RocmCodes>().is_ok(),
            "hipMemExportToShareableHandle not found in the runtime",
        ),
        (
            api.mem_import_from_shareable_handle.get::<RocmCodes>().is_ok(),
            "hipMemImportFromShareableHandle not found in the runtime",
        ),
    ]
    .into_iter()
    .find(|(found, _)| !found)
    .map(|(_, why)| why)
}

fn handle(raw: sys::hipMemGenericAllocationHandle_t) -> PhysHandle {
    PhysHandle(raw as usize as u64)
}

fn raw(handle: PhysHandle) -> sys::hipMemGenericAllocationHandle_t {
    handle.0 as usize as sys::hipMemGenericAllocationHandle_t
}

// ---------------------------------------------------------------------------
// The calls of `Backend::vmm_*`.

pub(super) fn support(device: usize) -> Result<VmmSupport> {
    let api = api()?;
    let version = api.version;
    if let Some(why) = missing(api) {
        return Ok(VmmSupport::unsupported(why));
    }
    if !rocm_at_least(version, HIP_VERSION_VMM) {
        return Ok(VmmSupport::unsupported(WHY_BEFORE_5_3));
    }
    let ordinal = common::ordinal(device)?;
    let attribute = |attr: sys::hipDeviceAttribute_t| -> Result<bool> {
        let mut v: c_int = 0;
        // SAFETY: a valid out-pointer; an attribute this runtime knows (the
        // callers check the version).
        check("hipDeviceGetAttribute", unsafe {
            (api.device_get_attribute)(&mut v, attr, ordinal)
        })?;
        Ok(v != 0)
    };
    if !attribute(sys::hipDeviceAttributeVirtualMemoryManagementSupported)? {
        return Ok(VmmSupport::unsupported(
            "the device does not support virtual memory management",
        ));
    }
    let amd = version >= sys::HIP_VERSION_MAJOR_SCALE;
    let posix_fd = amd && version >= HIP_VERSION_VMM_POSIX_FD;
    let rdma = amd
        && version >= HIP_VERSION_VMM_RDMA_ATTRIBUTE
        && attribute(sys::hipDeviceAttributeGPUDirectRDMAWithHipVMMSupported).unwrap_or(false);
    let prop = AllocationProp::new(
        version,
        PhysProps {
            device,
            posix_fd,
            rdma,
        },
    )?;
    let granularity = api.mem_get_allocation_granularity.get::<RocmCodes>()?;
    let ask = |option: sys::hipMemAllocationGranularity_flags| -> Result<usize> {
        let mut bytes = 0usize;
        // SAFETY: a valid out-pointer; properties in the layout this
        // runtime reads; a value of the enum.
        check("hipMemGetAllocationGranularity", unsafe {
            granularity(&mut bytes, prop.as_ptr(), option)
        })?;
        Ok(bytes)
    };
    Ok(VmmSupport {
        supported: true,
        posix_fd,
        rdma,
        granularity: ask(sys::hipMemAllocationGranularityMinimum)?,
        recommended: ask(sys::hipMemAllocationGranularityRecommended)?,
        why_not: None,
    })
}

/// The faults of the loaded runtime ([`VmmQuirks::NONE`] without one).
pub(super) fn quirks() -> VmmQuirks {
    api().map_or(VmmQuirks::NONE, |api| vmm_quirks(api.version))
}

pub(super) fn reserve(bytes: usize, align: usize) -> Result<DevicePtr> {
    let reserve = api()?.mem_address_reserve.get::<RocmCodes>()?;
    let mut ptr: *mut c_void = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; no fixed address, no flags.
    check("hipMemAddressReserve", unsafe {
        reserve(&mut ptr, bytes, align, std::ptr::null_mut(), 0)
    })?;
    if ptr.is_null() {
        // ROCm 5.2 answers success and reserves nothing.
        return Err(unsupported(WHY_BEFORE_5_3));
    }
    Ok(DevicePtr(ptr as usize))
}

/// # Safety
/// A whole reservation from `reserve`, nothing mapped in it.
pub(super) unsafe fn free_reservation(base: DevicePtr, bytes: usize) -> Result<()> {
    let free = api()?.mem_address_free.get::<RocmCodes>()?;
    // SAFETY: the caller's contract.
    check("hipMemAddressFree", unsafe { free(base.as_mut_ptr(), bytes) })
}

pub(super) fn create(bytes: usize, props: PhysProps) -> Result<PhysHandle> {
    let api = api()?;
    let create = api.mem_create.get::<RocmCodes>()?;
    let prop = AllocationProp::new(api.version, props)?;
    let mut h: sys::hipMemGenericAllocationHandle_t = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; properties in the layout this runtime
    // reads; no flags.
    let code = unsafe { create(&mut h, bytes, prop.as_ptr(), 0) };
    check_alloc("hipMemCreate", code, bytes)?;
    Ok(handle(h))
}

/// # Safety
/// A handle from `create`, `retain` or `import_fd`, released once.
pub(super) unsafe fn release(handle: PhysHandle) -> Result<()> {
    let release = api()?.mem_release.get::<RocmCodes>()?;
    // SAFETY: the caller's contract.
    check("hipMemRelease", unsafe { release(raw(handle)) })
}

/// # Safety
/// `[ptr, ptr + bytes)` lies in a reservation and is unmapped; `bytes` is
/// the handle's size.
pub(super) unsafe fn map(ptr: DevicePtr, bytes: usize, handle: PhysHandle) -> Result<()> {
    let map = api()?.mem_map.get::<RocmCodes>()?;
    // SAFETY: the caller's contract; the whole handle from offset 0, no
    // flags.
    check("hipMemMap", unsafe {
        map(ptr.as_mut_ptr(), bytes, 0, raw(handle), 0)
    })
}

/// # Safety
/// The range is mapped.
pub(super) unsafe fn set_access(ptr: DevicePtr, bytes: usize, device: usize, read_write: bool) -> Result<()> {
    let set = api()?.mem_set_access.get::<RocmCodes>()?;
    let desc = sys::hipMemAccessDesc {
        location: sys::hipMemLocation {
            type_: sys::hipMemLocationTypeDevice,
            id: common::ordinal(device)?,
        },
        flags: if read_write {
            sys::hipMemAccessFlagsProtReadWrite
        } else {
            sys::hipMemAccessFlagsProtNone
        },
    };
    // SAFETY: the caller's contract; one valid descriptor.
    check("hipMemSetAccess", unsafe {
        set(ptr.as_mut_ptr(), bytes, &desc, 1)
    })
}

/// # Safety
/// The range is mapped (whole mappings), and no work in flight uses it.
pub(super) unsafe fn unmap(ptr: DevicePtr, bytes: usize) -> Result<()> {
    let unmap = api()?.mem_unmap.get::<RocmCodes>()?;
    // SAFETY: the caller's contract.
    check("hipMemUnmap", unsafe { unmap(ptr.as_mut_ptr(), bytes) })
}

pub(super) fn retain(ptr: DevicePtr) -> Result<PhysHandle> {
    let retain = api()?.mem_retain_allocation_handle.get::<RocmCodes>()?;
    let mut h: sys::hipMemGenericAllocationHandle_t = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the runtime looks the address up.
    check("hipMemRetainAllocationHandle", unsafe {
        retain(&mut h, ptr.as_mut_ptr())
    })?;
    Ok(handle(h))
}

pub(super) fn export_fd(handle: PhysHandle) -> Result<i32> {
    let export = api()?.mem_export_to_shareable_handle.get::<RocmCodes>()?;
    let mut fd: c_int = -1;
    // SAFETY: for the POSIX fd handle type the runtime writes an int; it
    // validates the handle.
    check("hipMemExportToShareableHandle", unsafe {
        export(
            (&mut fd as *mut c_int).cast(),
            raw(handle),
            sys::hipMemHandleTypePosixFileDescriptor,
            0,
        )
    })?;
    Ok(fd)
}

/// Imports onto the calling thread's current device (ROCm's behaviour).
pub(super) fn import_fd(fd: i32) -> Result<PhysHandle> {
    let import = api()?.mem_import_from_shareable_handle.get::<RocmCodes>()?;
    let mut h: sys::hipMemGenericAllocationHandle_t = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; for the POSIX fd handle type the handle
    // argument is the descriptor's value itself, which the caller still owns.
    check("hipMemImportFromShareableHandle", unsafe {
        import(
            &mut h,
            fd as isize as *mut c_void,
            sys::hipMemHandleTypePosixFileDescriptor,
        )
    })?;
    Ok(handle(h))
}

#[cfg(test)]
#[path = "vmm_tests.rs"]
mod tests;
