//! Devices.

use crate::backend::Backend;
use crate::error::{Error, Result, Vendor};
use crate::Active;

/// One GPU, by ordinal.
///
/// ```no_run
/// # fn main() -> somalloc::Result<()> {
/// for ordinal in 0..somalloc::Device::count()? {
///     let dev = somalloc::Device::get(ordinal)?;
///     println!("{ordinal}: {} ({} bytes)", dev.name()?, dev.total_memory()?);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Device {
    ordinal: usize,
}

impl Device {
    /// How many devices the runtime sees.
    ///
    /// Without a runtime library this is [`Error::RuntimeNotFound`]; with a
    /// runtime but no device (or no driver) it is [`Error::NoDevice`].
    pub fn count() -> Result<usize> {
        Active::init()?;
        let n = Active::device_count()?;
        if n == 0 {
            return Err(Error::NoDevice {
                backend: crate::VENDOR,
                detail: "the runtime reports 0 devices".into(),
            });
        }
        Ok(n)
    }

    /// The device with this ordinal, checked against [`Device::count`].
    pub fn get(ordinal: usize) -> Result<Device> {
        let count = Device::count()?;
        if ordinal >= count {
            return Err(Error::InvalidDevice { ordinal, count });
        }
        Ok(Device { ordinal })
    }

    /// A device value that was not checked against the runtime: for unit
    /// tests of host-side bookkeeping, which never hand it to the runtime.
    #[cfg(test)]
    pub(crate) fn fake(ordinal: usize) -> Device {
        Device { ordinal }
    }

    /// The ordinal this device was opened with.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The marketing name, e.g. `NVIDIA H100 80GB HBM3`.
    pub fn name(&self) -> Result<String> {
        Active::device_name(self.ordinal)
    }

    /// Total device memory in bytes.
    pub fn total_memory(&self) -> Result<usize> {
        Ok(Active::mem_info(self.ordinal)?.1)
    }

    /// Device memory not in use by anyone, in bytes.
    pub fn free_memory(&self) -> Result<usize> {
        Ok(Active::mem_info(self.ordinal)?.0)
    }

    /// Whether the device supports stream-ordered memory pools.
    pub fn supports_memory_pools(&self) -> Result<bool> {
        Active::pools_supported(self.ordinal)
    }

    /// Whether kernels on this device can access memory of `peer`.
    pub fn can_access_peer(&self, peer: &Device) -> Result<bool> {
        Active::can_access_peer(self.ordinal, peer.ordinal)
    }

    /// The calling thread's current device (`cudaGetDevice` /
    /// `hipGetDevice`).
    pub fn current() -> Result<Device> {
        Active::init()?;
        let ordinal = <Active as crate::common::CurrentDevice>::current()?;
        Ok(Device {
            ordinal: usize::try_from(ordinal).unwrap_or(0), // ok: the runtime reports a valid ordinal, never negative
        })
    }

    /// Makes this device current on the calling thread.
    pub fn bind_to_thread(&self) -> Result<()> {
        Active::set_device(self.ordinal)
    }

    /// Which vendor's backend this crate was built for (the `cuda` or the
    /// `rocm` feature).
    ///
    /// ```
    /// use somalloc::{Device, Vendor};
    /// let api = match Device::backend() {
    ///     Vendor::Cuda => "CUDA",
    ///     Vendor::Rocm => "HIP",
    ///     _ => "another runtime",
    /// };
    /// println!("built for {} ({api})", Device::backend());
    /// ```
    pub fn backend() -> Vendor {
        crate::VENDOR
    }

    /// The runtime's version number (e.g. 13000 for CUDA 13.0).
    pub fn runtime_version() -> Result<i32> {
        Active::init()?;
        Active::runtime_version()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendor_is_the_backend_built() {
        let name = if cfg!(somalloc_cuda) { "cuda" } else { "rocm" };
        assert_eq!(Device::backend().as_str(), name);
        assert_eq!(Device::backend().to_string(), name);
        assert_ne!(Vendor::Cuda, Vendor::Rocm);
    }
}
