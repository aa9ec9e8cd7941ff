//! Peer access to a pool's memory, inter-process sharing (export and
//! import), the raw handle, and the error helper of the allocation paths.

use super::*;

impl MemPool {
    /// Grants or removes `device`'s access to this pool's memory (the pool's
    /// own device always has read-write access and cannot be changed).
    ///
    /// A buffer of this pool can be given to a stream of `device` with
    /// [`DeviceBuffer::use_on`](crate::DeviceBuffer::use_on) only while
    /// access is granted; removing it makes somalloc refuse such use rather
    /// than let a kernel fault.
    pub fn set_access(&self, device: &Device, access: PeerAccess) -> Result<()> {
        if *device == self.inner.device {
            return Err(Error::invalid("a pool's own device always has read-write access"));
        }
        Active::pool_set_access(self.inner.raw, device.ordinal(), access.flags())
    }

    /// How `device` may access this pool's memory.
    pub fn access(&self, device: &Device) -> Result<PeerAccess> {
        raw_access(self.inner.raw, device)
    }

    /// Whether this is the device's default pool (which lives as long as
    /// the process, so buffers need not hold a reference to it).
    pub(crate) fn is_default(&self) -> bool {
        self.inner.default
    }

    /// Exports the pool as a new POSIX file descriptor, to be passed to
    /// another process (e.g. over a Unix socket with `SCM_RIGHTS`) and
    /// imported there with [`MemPool::import_fd`]. The pool must have been
    /// created with [`ExportHandle::PosixFd`].
    pub fn export_fd(&self) -> Result<OwnedFd> {
        let fd = Active::pool_export_fd(self.inner.raw)?;
        if fd < 0 {
            return Err(Error::invalid("the runtime returned no file descriptor"));
        }
        // SAFETY: the runtime just created this descriptor for the caller,
        // who now owns it; nothing else refers to it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Imports a pool exported by another process. The descriptor stays
    /// the caller's. An imported pool cannot allocate; it serves
    /// [`DeviceBuffer::import`](crate::DeviceBuffer::import). It is released
    /// when the last handle and buffer are gone.
    pub fn import_fd(device: &Device, fd: BorrowedFd<'_>) -> Result<MemPool> {
        let raw = Active::pool_import_fd(fd.as_raw_fd())?;
        Ok(Self::owned(device, raw, Placement::device(device.ordinal())))
    }

    /// The vendor handle, still owned by this `MemPool` when created by it.
    pub fn as_raw(&self) -> *mut c_void {
        Active::pool_as_raw(self.inner.raw)
    }

    pub(crate) fn raw(&self) -> RawPool {
        self.inner.raw
    }
}

/// Gives the device a pinned host pool is used from read-write access (the
/// runtimes make host pools accessible from the host only).
pub(super) fn grant_own_device(raw: RawPool, device: &Device) -> Result<()> {
    Active::pool_set_access(raw, device.ordinal(), PeerAccess::ReadWrite.flags())
}

/// How `device` may access the memory of the pool `raw` (which must be alive).
pub(crate) fn raw_access(raw: RawPool, device: &Device) -> Result<PeerAccess> {
    PeerAccess::from_flags(Active::pool_get_access(raw, device.ordinal())?)
}

/// An out-of-memory error with the statistics of `pool` (the pool that
/// refused) filled in, when they can be read; any other error unchanged.
pub(crate) fn with_stats(e: Error, pool: Option<MemPool>) -> Error {
    match e {
        Error::OutOfMemory {
            requested,
            stats: None,
            arena: None,
        } => Error::OutOfMemory {
            requested,
            stats: pool.and_then(|p| p.stats().ok()),
            arena: None,
        },
        other => other,
    }
}
