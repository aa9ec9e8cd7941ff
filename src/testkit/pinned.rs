//! Pinned host memory from the synchronous calls: the baselines for pools of
//! pinned host memory.

use std::ffi::c_void;

use crate::backend::TestSupport;
use crate::error::{record_drop_error, Error, Result};
use crate::Active;

/// Which synchronous call a [`PinnedHost`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinnedHostCall {
    /// `cudaMallocHost` (HIP: `hipHostMalloc` with `hipHostMallocDefault`).
    MallocHost,
    /// `cudaHostAlloc` / `hipHostMalloc` with the default flag.
    HostAlloc,
    /// `cudaHostAlloc` / `hipHostMalloc` with the portable flag (pinned for
    /// every device).
    HostAllocPortable,
}

impl PinnedHostCall {
    /// The call's name on this backend.
    pub fn name(self) -> &'static str {
        match (crate::VENDOR, self) {
            (crate::Vendor::Rocm, _) => "hipHostMalloc",
            (_, PinnedHostCall::MallocHost) => "cudaMallocHost",
            _ => "cudaHostAlloc",
        }
    }
}

/// Pinned host memory from a synchronous call (`cudaMallocHost`,
/// `cudaHostAlloc`; HIP: `hipHostMalloc`), freed with `cudaFreeHost` /
/// `hipHostFree` on drop, which waits for the device: how pinned staging
/// memory is made without a host pool. The host may use it at once.
#[derive(Debug)]
pub struct PinnedHost {
    ptr: *mut u8,
    bytes: usize,
}

// SAFETY: the allocation is plain host memory owned by this value; access
// goes through `&self` / `&mut self` like a `Vec<u8>`'s.
unsafe impl Send for PinnedHost {}
// SAFETY: as above; `&PinnedHost` only reads.
unsafe impl Sync for PinnedHost {}

impl PinnedHost {
    /// `bytes` (at least 1) of pinned host memory from `call`.
    pub fn new(bytes: usize, call: PinnedHostCall) -> Result<PinnedHost> {
        if bytes == 0 {
            return Err(Error::invalid("PinnedHost of 0 bytes"));
        }
        let ptr = match call {
            PinnedHostCall::MallocHost => Active::malloc_host(bytes)?,
            PinnedHostCall::HostAlloc => Active::host_alloc(bytes, false)?,
            PinnedHostCall::HostAllocPortable => Active::host_alloc(bytes, true)?,
        };
        if ptr.is_null() {
            return Err(Error::invalid("the runtime returned a null host allocation"));
        }
        Ok(PinnedHost {
            ptr: ptr.cast(),
            bytes,
        })
    }

    /// The bytes, for the host.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `bytes` bytes of host memory owned by this value and
        // allocated synchronously (the host may use them at once).
        unsafe { std::slice::from_raw_parts(self.ptr, self.bytes) }
    }

    /// The bytes, for the host to write.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.bytes) }
    }

    /// The address.
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr.cast()
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Always false (a `PinnedHost` holds at least one byte).
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        // SAFETY: allocated by `new` with a pinned-host call and freed once;
        // the caller's copies from or to it were made with borrows of it,
        // which have ended (synchronous copies, or async ones the caller
        // waited for).
        record_drop_error(unsafe { Active::host_free(self.ptr.cast()) });
    }
}
