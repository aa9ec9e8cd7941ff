//! The virtual-memory API of the CUDA backend: the driver's `cuMem*` calls
//! (`cuMemAddressReserve`, `cuMemCreate`, `cuMemMap`, ...) behind the
//! `vmm_*` functions of `Backend` (`backend_impl!` forwards to this module).
//!
//! # Driver calls without naming libcuda
//!
//! The runtime has no virtual-memory calls: they are the driver's. As for
//! the capture queries (`driver_capture` in mod.rs), each function is found
//! once through the loaded runtime: `cudaGetDriverEntryPointByVersion` at
//! [`sys::DRIVER_ABI_VERSION`], or on a runtime older than 12.5
//! `cudaGetDriverEntryPoint`, which gives the ABI of the runtime's own
//! version. Either is right here: every function used has had one ABI since
//! it appeared (the `_vNNNNN` of its type in sys.rs). So somalloc never
//! loads or names libcuda, and uses the very driver the runtime loaded.
//!
//! # The current context
//!
//! Driver calls act on the calling thread's current context, which the
//! runtime makes current only inside its own calls. Before each call,
//! [`context`] asks `cuCtxGetCurrent`; on a thread with none, it has the
//! runtime make the current device's primary context current
//! (`cudaSetDevice` of that device, which initialises the context from CUDA
//! 12.0 on; `cudaFree(NULL)` should it not have). The calls that name a
//! device (`support`, `create`) first make that device current and restore
//! the previous one afterwards (`DeviceGuard`), as the rest of the backend
//! does; the others work on whatever context is current (the driver's
//! address space and its physical allocations are the process's, not a
//! context's).
//!
//! # Errors
//!
//! The calls return `CUresult`s, decoded as the runtime's codes are
//! (`common::vendor`), with the driver's own names and messages
//! (`cuGetErrorName`, `cuGetErrorString`, found the same way; without them
//! the name is "CUresult N"). The codes that get an `Error` variant of their
//! own have the runtime's numbers (asserted below): out of memory (2) from
//! `cuMemCreate` is `Error::OutOfMemory`, no device (100) `Error::NoDevice`,
//! not supported (801) `Error::Unsupported`.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use super::{api, common, driver_entry_point, sys, unsupported, version_text, Api, Cuda, BACKEND};
use crate::backend::{DevicePtr, PhysHandle, PhysProps, VmmQuirks, VmmSupport};
use crate::common::{CurrentDevice, DeviceGuard};
use crate::error::Result;

const _: () = {
    assert!(sys::CUDA_SUCCESS == common::SUCCESS);
    assert!(sys::CUDA_ERROR_OUT_OF_MEMORY == common::ERROR_OUT_OF_MEMORY);
    assert!(sys::CUDA_ERROR_NO_DEVICE == common::ERROR_NO_DEVICE);
    assert!(sys::CUDA_ERROR_NOT_SUPPORTED == common::ERROR_NOT_SUPPORTED);
};

/// The driver's functions, each found once (`None`: the runtime did not
/// give it).
struct Driver {
    get_error_name: sys::PFN_cuGetErrorName_v6000,
    get_error_string: sys::PFN_cuGetErrorString_v6000,
    ctx_get_current: sys::PFN_cuCtxGetCurrent_v4000,
    device_get: sys::PFN_cuDeviceGet_v2000,
    device_get_attribute: sys::PFN_cuDeviceGetAttribute_v2000,
    address_reserve: sys::PFN_cuMemAddressReserve_v10020,
    address_free: sys::PFN_cuMemAddressFree_v10020,
    create: sys::PFN_cuMemCreate_v10020,
    release: sys::PFN_cuMemRelease_v10020,
    map: sys::PFN_cuMemMap_v10020,
    unmap: sys::PFN_cuMemUnmap_v10020,
    set_access: sys::PFN_cuMemSetAccess_v10020,
    granularity: sys::PFN_cuMemGetAllocationGranularity_v10020,
    retain: sys::PFN_cuMemRetainAllocationHandle_v11000,
    export: sys::PFN_cuMemExportToShareableHandle_v10020,
    import: sys::PFN_cuMemImportFromShareableHandle_v10020,
}

impl Driver {
    /// Nothing found (no runtime).
    const NONE: Driver = Driver {
        get_error_name: None,
        get_error_string: None,
        ctx_get_current: None,
        device_get: None,
        device_get_attribute: None,
        address_reserve: None,
        address_free: None,
        create: None,
        release: None,
        map: None,
        unmap: None,
        set_access: None,
        granularity: None,
        retain: None,
        export: None,
        import: None,
    };

    /// Why the API cannot be used: the first function the `vmm_*` calls
    /// need that was not found (the error texts are not needed).
    fn missing(&self) -> Option<&'static str> {
        [
            (
                self.ctx_get_current.is_some(),
                "cuCtxGetCurrent not found in the driver",
            ),
            (self.device_get.is_some(), "cuDeviceGet not found in the driver"),
            (
                self.device_get_attribute.is_some(),
                "cuDeviceGetAttribute not found in the driver",
            ),
            (
                self.address_reserve.is_some(),
                "cuMemAddressReserve not found in the driver",
            ),
            (
                self.address_free.is_some(),
                "cuMemAddressFree not found in the driver",
            ),
            (self.create.is_some(), "cuMemCreate not found in the driver"),
            (self.release.is_some(), "cuMemRelease not found in the driver"),
            (self.map.is_some(), "cuMemMap not found in the driver"),
            (self.unmap.is_some(), "cuMemUnmap not found in the driver"),
            (
                self.set_access.is_some(),
                "cuMemSetAccess not found in the driver",
            ),
            (
                self.granularity.is_some(),
                "cuMemGetAllocationGranularity not found in the driver",
            ),
            (
                self.retain.is_some(),
                "cuMemRetainAllocationHandle not found in the driver",
            ),
            (
                self.export.is_some(),
                "cuMemExportToShareableHandle not found in the driver",
            ),
            (
                self.import.is_some(),
                "cuMemImportFromShareableHandle not found in the driver",
            ),
        ]
        .into_iter()
        .find(|(found, _)| !found)
        .map(|(_, why)| why)
    }
}

/// The driver's entry point of `symbol`, as `F`.
///
/// # Safety
/// `F` is a function-pointer type of `symbol`'s one ABI (the same in every
/// CUDA version that has it).
unsafe fn entry<F: Copy>(api: &Api, symbol: &CStr) -> Option<F> {
    const { assert!(size_of::<F>() == size_of::<*mut c_void>()) };
    // SAFETY: any ABI version is right for a function with one ABI (the
    // caller's contract).
    let f = unsafe { driver_entry_point(api, symbol, true) }?;
    // SAFETY: a non-null entry point, read as the caller's type of the same
    // size.
    Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&f) })
}

fn driver() -> &'static Driver {
    static DRIVER: OnceLock<Driver> = OnceLock::new();
    DRIVER.get_or_init(|| {
        let Ok(api) = api() else {
            return Driver::NONE;
        };
        // SAFETY: each type is the one `PFN_` type cudaTypedefs.h declares
        // for that symbol (checked by ci/bindgen-check.sh), and each
        // function has had that one ABI since it appeared.
        unsafe {
            Driver {
                get_error_name: entry(api, c"cuGetErrorName"),
                get_error_string: entry(api, c"cuGetErrorString"),
                ctx_get_current: entry(api, c"cuCtxGetCurrent"),
                device_get: entry(api, c"cuDeviceGet"),
                device_get_attribute: entry(api, c"cuDeviceGetAttribute"),
                address_reserve: entry(api, c"cuMemAddressReserve"),
                address_free: entry(api, c"cuMemAddressFree"),
                create: entry(api, c"cuMemCreate"),
                release: entry(api, c"cuMemRelease"),
                map: entry(api, c"cuMemMap"),
                unmap: entry(api, c"cuMemUnmap"),
                set_access: entry(api, c"cuMemSetAccess"),
                granularity: entry(api, c"cuMemGetAllocationGranularity"),
                retain: entry(api, c"cuMemRetainAllocationHandle"),
                export: entry(api, c"cuMemExportToShareableHandle"),
                import: entry(api, c"cuMemImportFromShareableHandle"),
            }
        }
    })
}

/// The function, or `Unsupported` naming it.
fn need<F>(f: Option<F>, name: &str) -> Result<F> {
    f.ok_or_else(|| {
        unsupported(format!(
            "{name} not found in the driver (asked of the runtime with cudaGetDriverEntryPoint)"
        ))
    })
}

// ---------------------------------------------------------------------------
// Errors.

/// The driver's codes, named by the driver.
struct DriverCodes;

impl common::Codes for DriverCodes {
    const BACKEND: crate::Vendor = BACKEND;

    fn version_text(version: i32) -> String {
        version_text(version)
    }

    fn texts(code: i32) -> (String, String) {
        texts(driver(), code)
    }
}

/// The name and message of `code` from `driver`'s cuGetErrorName and
/// cuGetErrorString; "CUresult N" and no message where it has none.
fn texts(driver: &Driver, code: i32) -> (String, String) {
    let ask = |f: sys::PFN_cuGetErrorName_v6000| {
        let f = f?;
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: any code may be asked; the driver writes a static string
        // or null (an unknown code).
        (unsafe { f(code, &mut p) } == sys::CUDA_SUCCESS)
            .then(|| common::c_str(p))
            .filter(|s| !s.is_empty())
    };
    (
        ask(driver.get_error_name).unwrap_or_else(|| format!("CUresult {code}")),
        ask(driver.get_error_string).unwrap_or_default(),
    )
}

fn driver_check(call: &'static str, code: i32) -> Result<()> {
    common::check::<DriverCodes>(call, code)
}

// ---------------------------------------------------------------------------
// Contexts and devices.

/// Makes sure the thread has a current context (see the module doc).
fn context(api: &Api, driver: &Driver) -> Result<()> {
    let get = need(driver.ctx_get_current, "cuCtxGetCurrent")?;
    let current = || {
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        (unsafe { get(&mut ctx) } == sys::CUDA_SUCCESS) && !ctx.is_null()
    };
    if current() {
        return Ok(());
    }
    // No context: the runtime makes its current device's primary context
    // current (the device the user chose stays the current one).
    let device = <Cuda as CurrentDevice>::current()?;
    <Cuda as CurrentDevice>::make_current(device)?;
    if current() {
        return Ok(());
    }
    // SAFETY: freeing null frees nothing; the runtime initialises its
    // context for it.
    common::check::<super::CudaCodes>("cudaFree", unsafe { (api.free)(std::ptr::null_mut()) })
}

/// The driver's handle of a device ordinal (the runtime's and the driver's
/// ordinals are the same: both count the visible devices).
fn cu_device(driver: &Driver, device: usize) -> Result<sys::CUdevice> {
    let get = need(driver.device_get, "cuDeviceGet")?;
    let mut dev: sys::CUdevice = 0;
    // SAFETY: a valid out-pointer; the driver validates the ordinal.
    driver_check("cuDeviceGet", unsafe { get(&mut dev, common::ordinal(device)?) })?;
    Ok(dev)
}

/// `cuMemCreate`'s properties for `props`: pinned memory on the device,
/// exportable as a POSIX fd and RDMA-capable as asked.
fn allocation_prop(props: PhysProps) -> Result<sys::CUmemAllocationProp> {
    Ok(sys::CUmemAllocationProp {
        type_: sys::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: if props.posix_fd {
            sys::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        } else {
            sys::CU_MEM_HANDLE_TYPE_NONE
        },
        location: sys::CUmemLocation {
            type_: sys::CU_MEM_LOCATION_TYPE_DEVICE,
            id: common::ordinal(props.device)?,
        },
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st_allocFlags {
            compressionType: 0,
            gpuDirectRDMACapable: u8::from(props.rdma),
            usage: 0,
            reserved: [0; 4],
        },
    })
}

fn address(ptr: DevicePtr) -> sys::CUdeviceptr {
    ptr.0 as sys::CUdeviceptr
}

// ---------------------------------------------------------------------------
// The calls of `Backend::vmm_*`.

pub(super) fn support(device: usize) -> Result<VmmSupport> {
    let api = api()?;
    let driver = driver();
    if let Some(why) = driver.missing() {
        return Ok(VmmSupport::unsupported(why));
    }
    let _device = DeviceGuard::<Cuda>::set(device)?;
    context(api, driver)?;
    let dev = cu_device(driver, device)?;
    let get = need(driver.device_get_attribute, "cuDeviceGetAttribute")?;
    let attribute = |attr: sys::CUdevice_attribute| -> Result<bool> {
        let mut v: c_int = 0;
        // SAFETY: a valid out-pointer; an attribute of the enum.
        driver_check("cuDeviceGetAttribute", unsafe { get(&mut v, attr, dev) })?;
        Ok(v != 0)
    };
    if !attribute(sys::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)? {
        return Ok(VmmSupport::unsupported(
            "the device does not support virtual memory management",
        ));
    }
    // A driver that does not know an attribute does not offer it.
    let posix_fd =
        attribute(sys::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED).unwrap_or(false);
    let rdma = attribute(sys::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED).unwrap_or(false);
    let prop = allocation_prop(PhysProps {
        device,
        posix_fd,
        rdma,
    })?;
    let granularity = need(driver.granularity, "cuMemGetAllocationGranularity")?;
    let ask = |option: sys::CUmemAllocationGranularity_flags| -> Result<usize> {
        let mut bytes = 0usize;
        // SAFETY: a valid out-pointer and properties struct; a value of the
        // enum.
        driver_check("cuMemGetAllocationGranularity", unsafe {
            granularity(&mut bytes, &prop, option)
        })?;
        Ok(bytes)
    };
    Ok(VmmSupport {
        supported: true,
        posix_fd,
        rdma,
        granularity: ask(sys::CU_MEM_ALLOC_GRANULARITY_MINIMUM)?,
        recommended: ask(sys::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)?,
        why_not: None,
    })
}

/// CUDA's virtual-memory API has no known faults for the arena to work
/// around.
pub(super) fn quirks() -> VmmQuirks {
    VmmQuirks::NONE
}

pub(super) fn reserve(bytes: usize, align: usize) -> Result<DevicePtr> {
    let (api, driver) = (api()?, driver());
    let reserve = need(driver.address_reserve, "cuMemAddressReserve")?;
    context(api, driver)?;
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: a valid out-pointer; no fixed address, no flags.
    driver_check("cuMemAddressReserve", unsafe {
        reserve(&mut ptr, bytes, align, 0, 0)
    })?;
    Ok(DevicePtr(ptr as usize))
}

/// # Safety
/// A whole reservation from `reserve`, nothing mapped in it.
pub(super) unsafe fn free_reservation(base: DevicePtr, bytes: usize) -> Result<()> {
    let (api, driver) = (api()?, driver());
    let free = need(driver.address_free, "cuMemAddressFree")?;
    context(api, driver)?;
    // SAFETY: the caller's contract.
    driver_check("cuMemAddressFree", unsafe { free(address(base), bytes) })
}

pub(super) fn create(bytes: usize, props: PhysProps) -> Result<PhysHandle> {
    let (api, driver) = (api()?, driver());
    let create = need(driver.create, "cuMemCreate")?;
    let prop = allocation_prop(props)?;
    let _device = DeviceGuard::<Cuda>::set(props.device)?;
    context(api, driver)?;
    let mut handle: sys::CUmemGenericAllocationHandle = 0;
    // SAFETY: a valid out-pointer and a fully initialised properties struct;
    // no flags.
    let code = unsafe { create(&mut handle, bytes, &prop, 0) };
    common::check_alloc::<DriverCodes>("cuMemCreate", code, bytes)?;
    Ok(PhysHandle(handle))
}

/// # Safety
/// A handle from `create`, `retain` or `import_fd`, released once.
pub(super) unsafe fn release(handle: PhysHandle) -> Result<()> {
    let (api, driver) = (api()?, driver());
    let release = need(driver.release, "cuMemRelease")?;
    context(api, driver)?;
    // SAFETY: the caller's contract.
    driver_check("cuMemRelease", unsafe { release(handle.0) })
}

/// # Safety
/// `[ptr, ptr + bytes)` lies in a reservation and is unmapped; `bytes` is
/// the handle's size.
pub(super) unsafe fn map(ptr: DevicePtr, bytes: usize, handle: PhysHandle) -> Result<()> {
    let (api, driver) = (api()?, driver());
    let map = need(driver.map, "cuMemMap")?;
    context(api, driver)?;
    // SAFETY: the caller's contract; the whole handle from offset 0, no
    // flags.
    driver_check("cuMemMap", unsafe { map(address(ptr), bytes, 0, handle.0, 0) })
}

/// # Safety
/// The range is mapped.
pub(super) unsafe fn set_access(ptr: DevicePtr, bytes: usize, device: usize, read_write: bool) -> Result<()> {
    let (api, driver) = (api()?, driver());
    let set = need(driver.set_access, "cuMemSetAccess")?;
    let desc = sys::CUmemAccessDesc {
        location: sys::CUmemLocation {
            type_: sys::CU_MEM_LOCATION_TYPE_DEVICE,
            id: common::ordinal(device)?,
        },
        flags: if read_write {
            sys::CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        } else {
            sys::CU_MEM_ACCESS_FLAGS_PROT_NONE
        },
    };
    context(api, driver)?;
    // SAFETY: the caller's contract; one valid descriptor.
    driver_check("cuMemSetAccess", unsafe { set(address(ptr), bytes, &desc, 1) })
}

/// # Safety
/// The range is mapped (whole mappings), and no work in flight uses it.
pub(super) unsafe fn unmap(ptr: DevicePtr, bytes: usize) -> Result<()> {
    let (api, driver) = (api()?, driver());
    let unmap = need(driver.unmap, "cuMemUnmap")?;
    context(api, driver)?;
    // SAFETY: the caller's contract.
    driver_check("cuMemUnmap", unsafe { unmap(address(ptr), bytes) })
}

pub(super) fn retain(ptr: DevicePtr) -> Result<PhysHandle> {
    let (api, driver) = (api()?, driver());
    let retain = need(driver.retain, "cuMemRetainAllocationHandle")?;
    context(api, driver)?;
    let mut handle: sys::CUmemGenericAllocationHandle = 0;
    // SAFETY: a valid out-pointer; the driver looks the address up.
    driver_check("cuMemRetainAllocationHandle", unsafe {
        retain(&mut handle, ptr.as_mut_ptr())
    })?;
    Ok(PhysHandle(handle))
}

pub(super) fn export_fd(handle: PhysHandle) -> Result<i32> {
    let (api, driver) = (api()?, driver());
    let export = need(driver.export, "cuMemExportToShareableHandle")?;
    context(api, driver)?;
    let mut fd: c_int = -1;
    // SAFETY: for the POSIX fd handle type the driver writes an int; it
    // validates the handle.
    driver_check("cuMemExportToShareableHandle", unsafe {
        export(
            (&mut fd as *mut c_int).cast(),
            handle.0,
            sys::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            0,
        )
    })?;
    Ok(fd)
}

pub(super) fn import_fd(fd: i32) -> Result<PhysHandle> {
    let (api, driver) = (api()?, driver());
    let import = need(driver.import, "cuMemImportFromShareableHandle")?;
    context(api, driver)?;
    let mut handle: sys::CUmemGenericAllocationHandle = 0;
    // SAFETY: a valid out-pointer; for the POSIX fd handle type the handle
    // argument is the descriptor's value itself, which the caller still owns.
    driver_check("cuMemImportFromShareableHandle", unsafe {
        import(
            &mut handle,
            fd as isize as *mut c_void,
            sys::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        )
    })?;
    Ok(PhysHandle(handle))
}

#[cfg(test)]
#[path = "vmm_tests.rs"]
mod tests;
