//! hip-sys interop (feature `hip-sys`, which implies `rocm`).
//!
//! The [`hip-sys`](https://crates.io/crates/hip-sys) crate re-exports
//! `hip-runtime-sys`: bindgen output of the HIP 5.4 headers, linked against
//! `libamdhip64` when a binary is linked. Its handles are typed raw pointers
//! (`hipStream_t = *mut ihipStream_t`, ...). This module converts them to
//! and from somalloc's types without `as` casts; somalloc itself still loads
//! the HIP runtime at run time and calls none of hip-sys's functions.
//!
//! A raw handle carries no lifetime, so taking one in is `unsafe` with the
//! contract of [`Stream::from_raw`]; handing one out is safe (the handle is
//! still owned by the somalloc object).
//!
//! hip-sys declares `hipError_t` as a Rust enum, so a code that a newer HIP
//! runtime returns and the HIP 5.4 headers lack is undefined behaviour in a
//! direct call of a hip-sys function; somalloc's own calls return plain
//! integers. Prefer somalloc's API for what it covers.
//!
//! ```no_run
//! use hip_sys::hiprt;
//! use somalloc::{Device, DeviceBuffer, Stream};
//! # fn main() -> somalloc::Result<()> {
//! let dev = Device::get(0)?;
//! let stream = Stream::new(&dev)?;
//! // Hand the stream to code written against hip-sys ...
//! let raw: hiprt::hipStream_t = stream.as_hip_sys();
//! // ... and take a hip-sys stream in.
//! // SAFETY: `raw` is a live stream of `dev`; `stream` (which owns it)
//! // outlives `borrowed` and the buffer below.
//! let borrowed = unsafe { Stream::from_hip_sys(&dev, raw) }?;
//! assert!(borrowed == stream);
//! let buf = DeviceBuffer::<u32>::zeroed(256, &borrowed)?;
//! drop(buf);
//! borrowed.synchronize()?;
//! # Ok(()) }
//! ```

use hip_sys::hiprt;

use crate::device::Device;
use crate::error::Result;
use crate::pool::MemPool;
use crate::stream::{Event, Stream};

impl Stream {
    /// Borrows a stream made through hip-sys (never destroyed by somalloc).
    /// The special handles are refused as by [`Stream::from_raw`] (null,
    /// `0x1`, and `hipStreamPerThread`): create a stream instead.
    ///
    /// # Safety
    /// As for [`Stream::from_raw`]: `stream` is a live stream of `device`
    /// and outlives the returned `Stream`, its clones and every buffer
    /// allocated on it.
    pub unsafe fn from_hip_sys(device: &Device, stream: hiprt::hipStream_t) -> Result<Stream> {
        // SAFETY: forwarded from the caller.
        unsafe { Stream::from_raw(device, stream.cast()) }
    }

    /// The stream as hip-sys's `hipStream_t`, still owned by this `Stream`
    /// (or by whoever lent it).
    pub fn as_hip_sys(&self) -> hiprt::hipStream_t {
        self.as_raw().cast()
    }
}

impl Event {
    /// The event as hip-sys's `hipEvent_t`, still owned by this `Event`.
    pub fn as_hip_sys(&self) -> hiprt::hipEvent_t {
        self.as_raw().cast()
    }
}

impl MemPool {
    /// The pool as hip-sys's `hipMemPool_t`, still owned by this `MemPool`
    /// when somalloc created it.
    pub fn as_hip_sys(&self) -> hiprt::hipMemPool_t {
        self.as_raw().cast()
    }
}

/// hip-sys's generated layouts and values (HIP 5.4 headers) against the
/// ones the ROCm backend writes by hand (`backends/rocm/sys.rs`): a second,
/// independent reading of the headers, checked at compile time.
mod layout_check {
    use std::mem::{align_of, offset_of, size_of};

    use hip_sys::hiprt as h;

    const _: () = assert!(size_of::<h::hipStream_t>() == size_of::<*mut std::ffi::c_void>());
    const _: () = assert!(size_of::<h::hipMemLocation>() == 8);
    const _: () = assert!(size_of::<h::hipMemAccessDesc>() == 12);
    const _: () = assert!(size_of::<h::hipMemPoolPtrExportData>() == 64);
    // ROCm < 6.2: `reserved[64]` where 6.2 has `maxSize` and `reserved[56]`;
    // the size and the fields before it are the same.
    const _: () = assert!(size_of::<h::hipMemPoolProps>() == 88);
    const _: () = assert!(align_of::<h::hipMemPoolProps>() == 8);
    const _: () = assert!(offset_of!(h::hipMemPoolProps, location) == 8);
    const _: () = assert!(offset_of!(h::hipMemPoolProps, win32SecurityAttributes) == 16);
    const _: () = assert!(offset_of!(h::hipMemPoolProps, reserved) == 24);

    const _: () = assert!(h::hipError_t::hipSuccess as i32 == 0);
    const _: () = assert!(h::hipError_t::hipErrorOutOfMemory as i32 == 2);
    const _: () = assert!(h::hipError_t::hipErrorInsufficientDriver as i32 == 35);
    const _: () = assert!(h::hipError_t::hipErrorNoDevice as i32 == 100);
    const _: () = assert!(h::hipError_t::hipErrorNotSupported as i32 == 801);
    const _: () = assert!(h::hipDeviceAttribute_t::hipDeviceAttributeMemoryPoolsSupported as i32 == 88);
    const _: () = assert!(h::hipMemPoolAttr::hipMemPoolReuseFollowEventDependencies as i32 == 1);
    const _: () = assert!(h::hipMemPoolAttr::hipMemPoolReuseAllowOpportunistic as i32 == 2);
    const _: () = assert!(h::hipMemPoolAttr::hipMemPoolReuseAllowInternalDependencies as i32 == 3);
    const _: () = assert!(h::hipMemPoolAttr::hipMemPoolAttrReleaseThreshold as i32 == 4);
    const _: () = assert!(h::hipMemPoolAttr::hipMemPoolAttrReservedMemCurrent as i32 == 5);
    const _: () = assert!(h::hipMemPoolAttr::hipMemPoolAttrReservedMemHigh as i32 == 6);
    const _: () = assert!(h::hipMemPoolAttr::hipMemPoolAttrUsedMemCurrent as i32 == 7);
    const _: () = assert!(h::hipMemPoolAttr::hipMemPoolAttrUsedMemHigh as i32 == 8);
    const _: () = assert!(h::hipMemcpyKind::hipMemcpyDefault as i32 == 4);
    const _: () = assert!(h::hipMemAllocationType::hipMemAllocationTypePinned as i32 == 1);
    const _: () = assert!(h::hipMemAllocationHandleType::hipMemHandleTypePosixFileDescriptor as i32 == 1);
    const _: () = assert!(h::hipMemLocationType::hipMemLocationTypeDevice as i32 == 1);
    const _: () = assert!(h::hipStreamNonBlocking == 1);
    const _: () = assert!(h::hipEventDisableTiming == 2);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn hip_sys_special_handles_are_refused() {
        let dev = Device::fake(0);
        for raw in [0usize, 1, 2] {
            // SAFETY: refused before any use.
            let r = unsafe { Stream::from_hip_sys(&dev, raw as hiprt::hipStream_t) };
            assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{raw:#x}");
        }
    }

    #[test]
    fn hip_sys_handles_round_trip() {
        let dev = Device::fake(0);
        let raw = 0x1000 as hiprt::hipStream_t;
        // SAFETY: never used with the runtime (a borrowed stream calls
        // nothing when dropped).
        let s = unsafe { Stream::from_hip_sys(&dev, raw) }.unwrap(); // ok: a test; a non-special handle is taken
        assert_eq!(s.as_hip_sys(), raw);
        assert!(!s.is_owned());
    }
}
