//! Vendor memory pools (`cudaMemPool_t` / `hipMemPool_t`).

use std::ffi::c_void;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::backend::{Backend, PoolAttr, RawPoolProps};
use crate::device::Device;
use crate::error::{record_drop_error, Error, Result};
use crate::pool_stats::PoolStats;
use crate::Active;

type RawPool = <Active as Backend>::Pool;

/// The three reuse-policy switches of a pool. All are on by default on both
/// vendors.
///
/// What the runtimes promise when a block freed on stream A is wanted by an
/// allocation on stream B:
///
/// | flag | on: the pool may hand the block to B … | off |
/// |---|---|---|
/// | `follow_event_dependencies` | … when B already waits (through events) on the work that preceded the free on A | no reuse through event edges |
/// | `allow_opportunistic` | … when the free has already completed on the device at the time of the allocation | no reuse based on observed completion |
/// | `allow_internal_dependencies` | … after inserting a wait on A into B, so B's later work is ordered after A's free | B is never made to wait on A |
///
/// With all three off, a block freed on A is reused only by later allocations
/// on A itself (or after it has been released and re-reserved). Both CUDA
/// and HIP document the same three attributes with the same numbering; the
/// conformance suite checks the "all off" guarantee on each.
///
/// Start from [`ReusePolicy::ALL`] or [`ReusePolicy::NONE`] and change
/// single flags with the `with_*` methods (flags may be added, so the
/// struct cannot be written out in full):
///
/// ```
/// use somalloc::ReusePolicy;
/// let p = ReusePolicy::NONE.with_follow_event_dependencies(true);
/// assert!(p.follow_event_dependencies && !p.allow_opportunistic);
/// assert_eq!(ReusePolicy::default(), ReusePolicy::ALL);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReusePolicy {
    /// `cudaMemPoolReuseFollowEventDependencies` / `hipMemPoolReuseFollowEventDependencies`.
    pub follow_event_dependencies: bool,
    /// `cudaMemPoolReuseAllowOpportunistic` / `hipMemPoolReuseAllowOpportunistic`.
    pub allow_opportunistic: bool,
    /// `cudaMemPoolReuseAllowInternalDependencies` / `hipMemPoolReuseAllowInternalDependencies`.
    pub allow_internal_dependencies: bool,
}

impl ReusePolicy {
    /// All three on (the runtimes' default).
    pub const ALL: ReusePolicy = ReusePolicy {
        follow_event_dependencies: true,
        allow_opportunistic: true,
        allow_internal_dependencies: true,
    };
    /// All three off: a freed block is reused only on its own stream.
    pub const NONE: ReusePolicy = ReusePolicy {
        follow_event_dependencies: false,
        allow_opportunistic: false,
        allow_internal_dependencies: false,
    };

    /// This policy with `follow_event_dependencies` set to `on`.
    pub const fn with_follow_event_dependencies(mut self, on: bool) -> ReusePolicy {
        self.follow_event_dependencies = on;
        self
    }

    /// This policy with `allow_opportunistic` set to `on`.
    pub const fn with_allow_opportunistic(mut self, on: bool) -> ReusePolicy {
        self.allow_opportunistic = on;
        self
    }

    /// This policy with `allow_internal_dependencies` set to `on`.
    pub const fn with_allow_internal_dependencies(mut self, on: bool) -> ReusePolicy {
        self.allow_internal_dependencies = on;
        self
    }
}

/// [`ReusePolicy::ALL`], the runtimes' default.
impl Default for ReusePolicy {
    fn default() -> ReusePolicy {
        ReusePolicy::ALL
    }
}

/// How another device may access a pool's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerAccess {
    /// No access (the default for created pools on other devices).
    None,
    /// Reads only.
    Read,
    /// Reads and writes.
    ReadWrite,
}

impl PeerAccess {
    fn flags(self) -> u32 {
        match self {
            PeerAccess::None => 0,
            PeerAccess::Read => 1,
            PeerAccess::ReadWrite => 3,
        }
    }

    fn from_flags(flags: u32) -> Result<PeerAccess> {
        match flags {
            0 => Ok(PeerAccess::None),
            1 => Ok(PeerAccess::Read),
            3 => Ok(PeerAccess::ReadWrite),
            other => Err(Error::Unsupported {
                backend: Active::NAME,
                what: format!("access flags {other:#x} reported by the runtime"),
            }),
        }
    }
}

/// Export handle types a created pool supports (for IPC).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExportHandle {
    /// Not exportable.
    #[default]
    None,
    /// A POSIX file descriptor (Linux).
    PosixFd,
}

impl ExportHandle {
    fn mask(self) -> u32 {
        match self {
            ExportHandle::None => 0,
            ExportHandle::PosixFd => 1,
        }
    }
}

/// How to create a pool; see [`MemPool::create`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolProperties {
    /// Most bytes the pool may reserve from the device; `None`: no limit
    /// beyond the device.
    pub max_size: Option<usize>,
    /// Export handle types.
    pub export: ExportHandle,
}

impl Default for PoolProperties {
    fn default() -> Self {
        PoolProperties {
            max_size: None,
            export: ExportHandle::None,
        }
    }
}

#[derive(Debug)]
struct PoolInner {
    raw: RawPool,
    device: Device,
    owned: bool,
    /// The device's default pool, which lives as long as the process.
    default: bool,
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        if self.owned {
            // Under the registry's lock, so `MemPool::current` never hands out
            // a handle to a pool between its destruction and its removal.
            let mut created = CREATED.lock();
            // Buffers hold a clone of their pool, so none is outstanding on
            // the host side. Frees still queued on streams are fine: the
            // runtime releases the pool's memory once they have run.
            record_drop_error(Active::pool_destroy(self.raw));
            created.unregister(pool_key(self.raw), self);
        }
    }
}

/// The pools somalloc created or imported and has not destroyed, by raw
/// handle, so that a handle the runtime reports (the current pool) can be
/// answered with the owning `MemPool` instead of a borrowed one.
static CREATED: Registry<PoolInner> = Registry::new();

fn pool_key(raw: RawPool) -> usize {
    Active::pool_as_raw(raw) as usize
}

/// Raw handle -> weak reference to the owner, for objects that unregister
/// themselves (under the lock) when destroyed.
struct Registry<T> {
    entries: Mutex<Vec<(usize, Weak<T>)>>,
}

/// What the registry knows about a raw handle.
#[derive(Debug)]
enum Lookup<T> {
    /// A live owner: a new strong reference to it.
    Live(Arc<T>),
    /// Registered, but its owner is being destroyed right now (its last
    /// strong reference is gone and its `Drop` waits for the lock).
    Dying,
    /// Not one of ours.
    Unknown,
}

impl<T> Registry<T> {
    const fn new() -> Self {
        Registry {
            entries: Mutex::new(Vec::new()),
        }
    }

    /// The entries, locked. A panic elsewhere while holding the lock cannot
    /// leave them inconsistent (every change is one `Vec` call), so a
    /// poisoned lock is used as is.
    fn lock(&self) -> RegistryGuard<'_, T> {
        RegistryGuard(self.entries.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

struct RegistryGuard<'a, T>(MutexGuard<'a, Vec<(usize, Weak<T>)>>);

impl<T> RegistryGuard<'_, T> {
    /// Records `owner` as the owner of `key` (replacing a stale entry: the
    /// runtime may reuse the handle of a destroyed object).
    fn register(&mut self, key: usize, owner: &Arc<T>) {
        self.0.retain(|(k, _)| *k != key);
        self.0.push((key, Arc::downgrade(owner)));
    }

    fn lookup(&self, key: usize) -> Lookup<T> {
        match self.0.iter().find(|(k, _)| *k == key) {
            Some((_, weak)) => weak.upgrade().map_or(Lookup::Dying, Lookup::Live),
            None => Lookup::Unknown,
        }
    }

    /// Removes `key` if it is still registered to `owner` (the object at
    /// that address), not to a newer object that reused the handle.
    fn unregister(&mut self, key: usize, owner: *const T) {
        self.0.retain(|(k, weak)| !(*k == key && weak.as_ptr() == owner));
    }
}

/// A stream-ordered memory pool of one device.
///
/// Cheap to clone. A pool made by [`MemPool::create`] is destroyed when the
/// last clone and the last buffer allocated from it are gone; the device's
/// default pool is never destroyed.
///
/// ```no_run
/// use somalloc::{Device, MemPool, PoolProperties};
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let pool = MemPool::create(&dev, PoolProperties { max_size: Some(1 << 30), ..Default::default() })?;
/// pool.set_release_threshold(u64::MAX)?; // keep freed memory for reuse
/// println!("{}", pool.stats()?);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MemPool {
    inner: Arc<PoolInner>,
}

impl MemPool {
    fn borrowed(device: &Device, raw: RawPool, default: bool) -> MemPool {
        MemPool {
            inner: Arc::new(PoolInner {
                raw,
                device: *device,
                owned: false,
                default,
            }),
        }
    }

    /// A pool somalloc destroys when the last handle and buffer are gone.
    fn owned(device: &Device, raw: RawPool) -> MemPool {
        let inner = Arc::new(PoolInner {
            raw,
            device: *device,
            owned: true,
            default: false,
        });
        CREATED.lock().register(pool_key(raw), &inner);
        MemPool { inner }
    }

    /// The handle for `raw`, a pool of `device` that `found` tells about:
    /// the owning handle when somalloc created the pool and it is alive, the
    /// device's default pool when somalloc is destroying it right now (the
    /// runtime then makes the default pool current again), else a borrowed
    /// handle. Called after the registry's lock is released, so that
    /// dropping a strong reference here cannot wait for that lock.
    fn for_raw(device: &Device, raw: RawPool, found: Lookup<PoolInner>) -> Result<MemPool> {
        match found {
            Lookup::Live(inner) if inner.device == *device => Ok(MemPool { inner }),
            Lookup::Dying => Self::default_for(device),
            Lookup::Live(_) | Lookup::Unknown => Ok(Self::borrowed(device, raw, false)),
        }
    }

    /// The device's default pool (never destroyed by somalloc).
    pub fn default_for(device: &Device) -> Result<MemPool> {
        Ok(Self::borrowed(
            device,
            Active::default_pool(device.ordinal())?,
            true,
        ))
    }

    /// The pool that allocations without an explicit pool use on `device`.
    ///
    /// When that is a pool somalloc created ([`MemPool::create`]), the
    /// answer is a clone of its owning handle: it keeps the pool alive, so
    /// [`MemPool::stats`] and the setters stay valid after the creator's
    /// handle is dropped. Any other pool (the default pool, or one made
    /// outside somalloc) comes back as a borrowed handle that never destroys
    /// it ([`MemPool::is_owned`] is `false`). Being current does not keep a
    /// created pool alive: when its last handle goes, it is destroyed and
    /// the runtime makes the default pool current again.
    ///
    /// ```no_run
    /// use somalloc::{Device, MemPool, PoolProperties};
    /// # fn main() -> somalloc::Result<()> {
    /// let dev = Device::get(0)?;
    /// let pool = MemPool::create(&dev, PoolProperties::default())?;
    /// MemPool::set_current(&pool)?;
    /// let current = MemPool::current(&dev)?;
    /// assert!(current.is_owned() && current.same_as(&pool));
    /// drop(pool);
    /// println!("{}", current.stats()?); // `current` keeps the pool alive
    /// MemPool::set_current(&MemPool::default_for(&dev)?)?;
    /// # Ok(()) }
    /// ```
    pub fn current(device: &Device) -> Result<MemPool> {
        // The lock is held across the query so that a pool being destroyed
        // is seen either before (registered, dying) or after (no longer
        // current) its destruction.
        let (raw, found) = {
            let created = CREATED.lock();
            let raw = Active::current_pool(device.ordinal())?;
            (raw, created.lookup(pool_key(raw)))
        };
        Self::for_raw(device, raw, found)
    }

    /// Makes `pool` the one allocations without an explicit pool use on its
    /// device. When a created pool that is current is destroyed, the
    /// runtime makes the default pool current again.
    pub fn set_current(pool: &MemPool) -> Result<()> {
        Active::set_current_pool(pool.inner.device.ordinal(), pool.inner.raw)
    }

    /// Creates a pool on `device`. Its release threshold starts at 0 (freed
    /// memory goes back to the device at the next synchronisation) as on
    /// both runtimes; set it with [`MemPool::set_release_threshold`].
    pub fn create(device: &Device, props: PoolProperties) -> Result<MemPool> {
        let max_size = match props.max_size {
            None => 0,
            Some(0) => return Err(Error::invalid("max_size of 0: use None for no limit")),
            Some(n) => n,
        };
        let device_id = i32::try_from(device.ordinal())
            .map_err(|_| Error::invalid("device ordinal does not fit in a C int"))?;
        let raw = Active::pool_create(&RawPoolProps {
            device: device_id,
            max_size,
            handle_types: props.export.mask(),
        })?;
        Ok(Self::owned(device, raw))
    }

    /// The device the pool belongs to.
    pub fn device(&self) -> Device {
        self.inner.device
    }

    /// Whether somalloc created this pool (and will destroy it).
    pub fn is_owned(&self) -> bool {
        self.inner.owned
    }

    /// Whether two handles name the same pool.
    pub fn same_as(&self, other: &MemPool) -> bool {
        self.inner.raw == other.inner.raw
    }

    /// Bytes of unused memory the pool keeps when a stream, event or device
    /// is synchronised; above it, memory goes back to the device.
    pub fn release_threshold(&self) -> Result<u64> {
        Active::pool_get(self.inner.raw, PoolAttr::ReleaseThreshold)
    }

    /// Sets the release threshold; `u64::MAX` keeps everything.
    pub fn set_release_threshold(&self, bytes: u64) -> Result<()> {
        Active::pool_set(self.inner.raw, PoolAttr::ReleaseThreshold, bytes)
    }

    /// The three reuse-policy flags.
    pub fn reuse_policy(&self) -> Result<ReusePolicy> {
        let get = |a| Active::pool_get(self.inner.raw, a).map(|v| v != 0);
        Ok(ReusePolicy {
            follow_event_dependencies: get(PoolAttr::ReuseFollowEventDependencies)?,
            allow_opportunistic: get(PoolAttr::ReuseAllowOpportunistic)?,
            allow_internal_dependencies: get(PoolAttr::ReuseAllowInternalDependencies)?,
        })
    }

    /// Sets the three reuse-policy flags.
    pub fn set_reuse_policy(&self, policy: ReusePolicy) -> Result<()> {
        let set = |a, on: bool| Active::pool_set(self.inner.raw, a, u64::from(on));
        set(
            PoolAttr::ReuseFollowEventDependencies,
            policy.follow_event_dependencies,
        )?;
        set(PoolAttr::ReuseAllowOpportunistic, policy.allow_opportunistic)?;
        set(
            PoolAttr::ReuseAllowInternalDependencies,
            policy.allow_internal_dependencies,
        )
    }

    /// Releases unused memory until at most `keep_bytes` stay reserved
    /// (memory backing live allocations is never released).
    pub fn trim_to(&self, keep_bytes: usize) -> Result<()> {
        Active::pool_trim_to(self.inner.raw, keep_bytes)
    }

    /// Reserved and used bytes, current and high-water.
    pub fn stats(&self) -> Result<PoolStats> {
        let get = |a| Active::pool_get(self.inner.raw, a);
        Ok(PoolStats {
            reserved_current: get(PoolAttr::ReservedMemCurrent)?,
            reserved_high: get(PoolAttr::ReservedMemHigh)?,
            used_current: get(PoolAttr::UsedMemCurrent)?,
            used_high: get(PoolAttr::UsedMemHigh)?,
        })
    }

    /// Resets both high-water marks to the current values.
    pub fn reset_high_water(&self) -> Result<()> {
        // Both runtimes accept only 0 here, meaning "reset to current".
        Active::pool_set(self.inner.raw, PoolAttr::ReservedMemHigh, 0)?;
        Active::pool_set(self.inner.raw, PoolAttr::UsedMemHigh, 0)
    }

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
        Ok(Self::owned(device, Active::pool_import_fd(fd.as_raw_fd())?))
    }

    /// The vendor handle, still owned by this `MemPool` when created by it.
    pub fn as_raw(&self) -> *mut c_void {
        Active::pool_as_raw(self.inner.raw)
    }

    pub(crate) fn raw(&self) -> RawPool {
        self.inner.raw
    }
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
        } => Error::OutOfMemory {
            requested,
            stats: pool.and_then(|p| p.stats().ok()),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_answers_live_dying_and_unknown() {
        let reg: Registry<u32> = Registry::new();
        let a = Arc::new(1u32);
        reg.lock().register(0x10, &a);
        match reg.lock().lookup(0x10) {
            Lookup::Live(found) => assert!(Arc::ptr_eq(&found, &a)),
            other => panic!("expected live, got {other:?}"),
        }
        assert!(matches!(reg.lock().lookup(0x20), Lookup::Unknown));
        // A lookup hands out a strong reference: the owner stays alive.
        let Lookup::Live(extra) = reg.lock().lookup(0x10) else {
            panic!("expected live")
        };
        let addr = Arc::as_ptr(&a);
        drop(a);
        assert_eq!(*extra, 1);
        drop(extra);
        // The last strong reference is gone but the owner has not
        // unregistered yet: the pool is being destroyed.
        assert!(matches!(reg.lock().lookup(0x10), Lookup::Dying));
        reg.lock().unregister(0x10, addr);
        assert!(matches!(reg.lock().lookup(0x10), Lookup::Unknown));
    }

    #[test]
    fn registry_handle_reuse_replaces_and_keeps_the_newer_owner() {
        let reg: Registry<u32> = Registry::new();
        let old = Arc::new(1u32);
        let new = Arc::new(2u32);
        reg.lock().register(0x10, &old);
        // The runtime reused the handle for a new object before the old
        // owner unregistered: the newer registration wins ...
        reg.lock().register(0x10, &new);
        // ... and the old owner's unregister does not remove it.
        reg.lock().unregister(0x10, Arc::as_ptr(&old));
        match reg.lock().lookup(0x10) {
            Lookup::Live(found) => assert_eq!(*found, 2),
            other => panic!("expected the newer owner, got {other:?}"),
        }
        assert_eq!(reg.lock().0.len(), 1);
        reg.lock().unregister(0x10, Arc::as_ptr(&new));
        assert!(reg.lock().0.is_empty());
    }
}
