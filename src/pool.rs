//! Vendor memory pools (`cudaMemPool_t` / `hipMemPool_t`).

use std::ffi::c_void;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::backend::{Backend, PoolAttr, RawAlloc, RawLocation, RawPoolProps};
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

/// Where a pool's memory lives (`cudaMemLocation` / `hipMemLocation`).
///
/// Which locations a runtime's pools take, by allocation type:
///
/// | location | pinned | managed |
/// |---|---|---|
/// | `Device` | every runtime | CUDA 13.0+ |
/// | `HostNuma` | CUDA 12.6+ | CUDA 13.0+ |
/// | `Host` | CUDA 13.0+ | CUDA 13.0+ |
/// | `Unspecified` | never | CUDA 13.0+ |
///
/// HIP's `hipMemPoolCreate` takes device locations and pinned memory only
/// (every ROCm release to 7.2); anything else is [`Error::Unsupported`]
/// naming the runtime, and so is a location an older CUDA lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Location {
    /// Memory of the device with this ordinal.
    Device(usize),
    /// Host memory on no particular NUMA node (`cudaMemLocationTypeHost`).
    Host,
    /// Host memory on this NUMA node (`cudaMemLocationTypeHostNuma`).
    HostNuma(u32),
    /// No preferred location (`cudaMemLocationTypeNone`): managed pools only.
    Unspecified,
}

impl Location {
    /// Whether this is host memory (`Host` or `HostNuma`).
    pub fn is_host(self) -> bool {
        matches!(self, Location::Host | Location::HostNuma(_))
    }

    pub(crate) fn raw(self) -> Result<RawLocation> {
        let c_int = |what: &str, n: usize| {
            i32::try_from(n).map_err(|_| Error::invalid(format!("{what} {n} does not fit in a C int")))
        };
        Ok(match self {
            Location::Device(d) => RawLocation::Device(c_int("device ordinal", d)?),
            Location::Host => RawLocation::Host,
            Location::HostNuma(node) => RawLocation::HostNuma(c_int("NUMA node", node as usize)?),
            Location::Unspecified => RawLocation::Unspecified,
        })
    }
}

/// How a pool allocates (`cudaMemAllocationType` / `hipMemAllocationType`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AllocationType {
    /// Memory that stays where it was allocated while in use (device
    /// memory, or page-locked host memory that copies use without staging).
    #[default]
    Pinned,
    /// Managed (unified) memory, which migrates between host and devices
    /// (CUDA 13.0+).
    Managed,
}

impl AllocationType {
    pub(crate) fn raw(self) -> RawAlloc {
        match self {
            AllocationType::Pinned => RawAlloc::Pinned,
            AllocationType::Managed => RawAlloc::Managed,
        }
    }
}

/// Where the memory of a pool or a [`MemoryResource`](crate::MemoryResource)
/// lives and how it is allocated: what decides which buffer type may hold
/// it. [`DeviceBuffer`](crate::DeviceBuffer) refuses pinned host memory,
/// [`HostBuffer`](crate::HostBuffer) refuses pinned device memory, and both
/// take managed memory.
///
/// ```
/// use somalloc::{AllocationType, Location, Placement};
/// let p = Placement::new(Location::HostNuma(0), AllocationType::Pinned);
/// assert!(p.is_host_accessible() && !p.is_device_memory());
/// assert!(Placement::device(0).is_device_memory());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Placement {
    /// Where the memory lives.
    pub location: Location,
    /// How it is allocated.
    pub allocation: AllocationType,
}

impl Placement {
    /// `allocation` at `location`.
    pub const fn new(location: Location, allocation: AllocationType) -> Placement {
        Placement { location, allocation }
    }

    /// Pinned memory of the device with this ordinal (what every resource
    /// hands out unless it says otherwise).
    pub const fn device(ordinal: usize) -> Placement {
        Placement::new(Location::Device(ordinal), AllocationType::Pinned)
    }

    /// Whether the host may read and write the memory (once the work on it
    /// is done): pinned host memory or managed memory.
    pub fn is_host_accessible(&self) -> bool {
        self.location.is_host() || self.allocation == AllocationType::Managed
    }

    /// Whether this is pinned device memory (the host cannot touch it).
    pub fn is_device_memory(&self) -> bool {
        self.allocation == AllocationType::Pinned && matches!(self.location, Location::Device(_))
    }

    /// Whether this is pinned host memory.
    pub fn is_pinned_host(&self) -> bool {
        self.allocation == AllocationType::Pinned && self.location.is_host()
    }
}

/// How to create a pool; see [`MemPool::create`].
///
/// Start from [`PoolProperties::device`], [`PoolProperties::host`],
/// [`PoolProperties::host_numa`] or [`PoolProperties::managed`] and set the
/// rest with the builder methods:
///
/// ```no_run
/// use somalloc::{Device, ExportHandle, MemPool, PoolProperties};
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let capped = MemPool::create(&dev, PoolProperties::device().max_size(1 << 30))?;
/// let shared = MemPool::create(&dev, PoolProperties::device().export(ExportHandle::PosixFd))?;
/// let pinned = MemPool::create(&dev, PoolProperties::host_numa(0))?; // CUDA 12.6+
/// # drop((capped, shared, pinned));
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolProperties {
    /// Where the memory lives; `None`: on the device the pool is created
    /// for.
    pub location: Option<Location>,
    /// Pinned or managed memory.
    pub allocation: AllocationType,
    /// Most bytes the pool may reserve; `None`: no limit beyond the
    /// device (or the host).
    pub max_size: Option<usize>,
    /// Export handle types.
    pub export: ExportHandle,
}

impl PoolProperties {
    /// Pinned memory of the device the pool is created for.
    pub const fn device() -> PoolProperties {
        PoolProperties {
            location: None,
            allocation: AllocationType::Pinned,
            max_size: None,
            export: ExportHandle::None,
        }
    }

    /// Pinned (page-locked) host memory on no particular NUMA node
    /// (CUDA 13.0+; on CUDA 12.6-12.9 use [`PoolProperties::host_numa`]).
    pub const fn host() -> PoolProperties {
        PoolProperties::device().location(Location::Host)
    }

    /// Pinned host memory on NUMA node `node` (CUDA 12.6+).
    pub const fn host_numa(node: u32) -> PoolProperties {
        PoolProperties::device().location(Location::HostNuma(node))
    }

    /// Managed memory preferring the device the pool is created for
    /// (CUDA 13.0+); set another location with [`PoolProperties::location`]
    /// ([`Location::Unspecified`]: no preference).
    pub const fn managed() -> PoolProperties {
        PoolProperties::device().allocation(AllocationType::Managed)
    }

    /// Sets where the memory lives.
    pub const fn location(mut self, location: Location) -> PoolProperties {
        self.location = Some(location);
        self
    }

    /// Sets pinned or managed memory.
    pub const fn allocation(mut self, allocation: AllocationType) -> PoolProperties {
        self.allocation = allocation;
        self
    }

    /// Caps the bytes the pool may reserve (more than 0).
    pub const fn max_size(mut self, bytes: usize) -> PoolProperties {
        self.max_size = Some(bytes);
        self
    }

    /// Sets the export handle types (IPC).
    pub const fn export(mut self, export: ExportHandle) -> PoolProperties {
        self.export = export;
        self
    }
}

impl Default for PoolProperties {
    /// [`PoolProperties::device`].
    fn default() -> Self {
        PoolProperties::device()
    }
}

#[derive(Debug)]
struct PoolInner {
    raw: RawPool,
    device: Device,
    /// Where its memory lives and how it is allocated.
    placement: Placement,
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

/// A stream-ordered memory pool, used from the streams of one device.
///
/// Cheap to clone. A pool made by [`MemPool::create`] is destroyed when the
/// last clone and the last buffer allocated from it are gone; the default
/// pools are never destroyed.
///
/// Its memory is usually that device's ([`Location::Device`]); a pool of
/// pinned host memory or of managed memory (see [`PoolProperties`]) serves
/// [`HostBuffer`](crate::HostBuffer)s on the streams of its device, which
/// somalloc grants read-write access to it.
///
/// ```no_run
/// use somalloc::{Device, MemPool, PoolProperties};
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let pool = MemPool::create(&dev, PoolProperties::device().max_size(1 << 30))?;
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
        Self::borrowed_at(device, raw, default, Placement::device(device.ordinal()))
    }

    fn borrowed_at(device: &Device, raw: RawPool, default: bool, placement: Placement) -> MemPool {
        MemPool {
            inner: Arc::new(PoolInner {
                raw,
                device: *device,
                placement,
                owned: false,
                default,
            }),
        }
    }

    /// A pool somalloc destroys when the last handle and buffer are gone.
    fn owned(device: &Device, raw: RawPool, placement: Placement) -> MemPool {
        let inner = Arc::new(PoolInner {
            raw,
            device: *device,
            placement,
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
        Self::for_raw_at(device, raw, found, Placement::device(device.ordinal()))
    }

    /// `for_raw` for the current pool of a placement.
    fn for_raw_at(
        device: &Device,
        raw: RawPool,
        found: Lookup<PoolInner>,
        placement: Placement,
    ) -> Result<MemPool> {
        match found {
            Lookup::Live(inner) if inner.device == *device && inner.placement == placement => {
                Ok(MemPool { inner })
            }
            Lookup::Dying => Self::default_at(device, placement),
            Lookup::Live(_) | Lookup::Unknown => Ok(Self::borrowed_at(device, raw, false, placement)),
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
    /// device (for a pool of another placement: the current pool of that
    /// location and allocation type, `cudaMemSetMemPool`, CUDA 13.0+). When
    /// a created pool that is current is destroyed, the runtime makes the
    /// default pool current again.
    pub fn set_current(pool: &MemPool) -> Result<()> {
        let p = pool.inner.placement;
        if p == Placement::device(pool.inner.device.ordinal()) {
            return Active::set_current_pool(pool.inner.device.ordinal(), pool.inner.raw);
        }
        Active::set_current_pool_at(p.location.raw()?, p.allocation.raw(), pool.inner.raw)
    }

    /// The default pool of a location and allocation type, for the streams
    /// of `device` (`cudaMemGetDefaultMemPool`, CUDA 13.0+; for
    /// `Placement::device(device.ordinal())` it is [`MemPool::default_for`]
    /// on every runtime). Never destroyed by somalloc.
    ///
    /// For the default pool of pinned host memory, `device` is granted
    /// read-write access to it (a process-wide setting of that pool, which
    /// the runtime leaves without any device access).
    ///
    /// ```no_run
    /// use somalloc::{AllocationType, Device, HostBuffer, Location, MemPool, Placement, Stream};
    /// # fn main() -> somalloc::Result<()> {
    /// let dev = Device::get(0)?;
    /// let stream = Stream::new(&dev)?;
    /// let pinned = MemPool::default_at(&dev, Placement::new(Location::Host, AllocationType::Pinned))?;
    /// let staging = HostBuffer::<u8>::new_in(1 << 20, &pinned, &stream)?;
    /// # drop(staging);
    /// # Ok(()) }
    /// ```
    pub fn default_at(device: &Device, placement: Placement) -> Result<MemPool> {
        if placement == Placement::device(device.ordinal()) {
            return Self::default_for(device);
        }
        Self::check_placement_for(device, placement)?;
        let raw = Active::default_pool_at(placement.location.raw()?, placement.allocation.raw())?;
        if placement.is_pinned_host() {
            grant_own_device(raw, device)?;
        }
        Ok(Self::borrowed_at(device, raw, true, placement))
    }

    /// The current pool of a location and allocation type, for the streams
    /// of `device` (`cudaMemGetMemPool`, CUDA 13.0+; for
    /// `Placement::device(device.ordinal())` it is [`MemPool::current`] on
    /// every runtime). As with [`MemPool::current`], a pool somalloc created
    /// comes back as a clone of its owning handle.
    pub fn current_at(device: &Device, placement: Placement) -> Result<MemPool> {
        if placement == Placement::device(device.ordinal()) {
            return Self::current(device);
        }
        Self::check_placement_for(device, placement)?;
        let (location, alloc) = (placement.location.raw()?, placement.allocation.raw());
        let (raw, found) = {
            let created = CREATED.lock();
            let raw = Active::current_pool_at(location, alloc)?;
            (raw, created.lookup(pool_key(raw)))
        };
        Self::for_raw_at(device, raw, found, placement)
    }

    /// A device location must be `device`'s own.
    fn check_placement_for(device: &Device, placement: Placement) -> Result<()> {
        match placement.location {
            Location::Device(d) if d != device.ordinal() => Err(Error::invalid(format!(
                "a pool located on device {d} for the streams of device {}",
                device.ordinal()
            ))),
            Location::Unspecified if placement.allocation == AllocationType::Pinned => Err(Error::invalid(
                "pinned memory needs a location (Location::Unspecified is for managed pools)",
            )),
            _ => Ok(()),
        }
    }

    /// Creates a pool whose memory is used from the streams of `device`. Its
    /// release threshold starts at 0 (freed memory is released at the next
    /// synchronisation) as on both runtimes; set it with
    /// [`MemPool::set_release_threshold`].
    ///
    /// Where the memory lives is `props.location` (by default on `device`);
    /// a location or allocation type the loaded runtime's pools do not take
    /// is [`Error::Unsupported`] naming the runtime (see [`Location`]). A
    /// pool of pinned host memory is made accessible (read-write) to
    /// `device`, so that its streams copy to and from it without staging;
    /// other devices get access through [`MemPool::set_access`]. Host pools
    /// are not exportable: [`ExportHandle::PosixFd`] with a host location is
    /// `Unsupported` (CUDA refuses IPC for `Location::Host`, and an imported
    /// pool's location cannot be read back from the runtime).
    ///
    /// ```no_run
    /// use somalloc::{Device, Error, MemPool, PoolProperties};
    /// # fn main() -> somalloc::Result<()> {
    /// let dev = Device::get(0)?;
    /// let pinned = match MemPool::create(&dev, PoolProperties::host()) {
    ///     Err(Error::Unsupported { .. }) => MemPool::create(&dev, PoolProperties::host_numa(0))?, // CUDA 12.6-12.9
    ///     other => other?,
    /// };
    /// assert!(pinned.placement().is_pinned_host());
    /// # Ok(()) }
    /// ```
    pub fn create(device: &Device, props: PoolProperties) -> Result<MemPool> {
        let max_size = match props.max_size {
            None => 0,
            Some(0) => return Err(Error::invalid("max_size of 0: use None for no limit")),
            Some(n) => n,
        };
        let placement = Placement::new(
            props.location.unwrap_or(Location::Device(device.ordinal())),
            props.allocation,
        );
        Self::check_placement_for(device, placement)?;
        if placement.location.is_host() && props.export != ExportHandle::None {
            return Err(Error::Unsupported {
                backend: Active::NAME,
                what: "exporting a pool of host memory (IPC of host pools is not supported)".into(),
            });
        }
        let raw = Active::pool_create(&RawPoolProps {
            location: placement.location.raw()?,
            alloc: placement.allocation.raw(),
            max_size,
            handle_types: props.export.mask(),
        })?;
        if placement.is_pinned_host() {
            if let Err(e) = grant_own_device(raw, device) {
                record_drop_error(Active::pool_destroy(raw));
                return Err(e);
            }
        }
        Ok(Self::owned(device, raw, placement))
    }

    /// The device whose streams use the pool (for a device pool: where its
    /// memory lives).
    pub fn device(&self) -> Device {
        self.inner.device
    }

    /// Where the pool's memory lives and how it is allocated.
    pub fn placement(&self) -> Placement {
        self.inner.placement
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
fn grant_own_device(raw: RawPool, device: &Device) -> Result<()> {
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
    fn pool_properties_build_up() {
        let d = PoolProperties::device();
        assert_eq!(d, PoolProperties::default());
        assert_eq!(
            (d.location, d.allocation, d.max_size, d.export),
            (None, AllocationType::Pinned, None, ExportHandle::None)
        );
        let h = PoolProperties::host().max_size(1 << 20);
        assert_eq!((h.location, h.max_size), (Some(Location::Host), Some(1 << 20)));
        assert_eq!(PoolProperties::host_numa(2).location, Some(Location::HostNuma(2)));
        let m = PoolProperties::managed().location(Location::Unspecified);
        assert_eq!(
            (m.location, m.allocation),
            (Some(Location::Unspecified), AllocationType::Managed)
        );
        let e = PoolProperties::device()
            .export(ExportHandle::PosixFd)
            .allocation(AllocationType::Pinned);
        assert_eq!(e.export, ExportHandle::PosixFd);
        assert!(Location::Host.is_host() && Location::HostNuma(0).is_host());
        assert!(!Location::Device(0).is_host() && !Location::Unspecified.is_host());
        assert_eq!(Location::HostNuma(7).raw().unwrap(), RawLocation::HostNuma(7));
        assert!(Location::HostNuma(u32::MAX).raw().is_err());
        assert!(Location::Device(usize::MAX).raw().is_err());
        assert_eq!(AllocationType::Managed.raw(), RawAlloc::Managed);
    }

    #[test]
    fn pinned_memory_needs_the_streams_device_or_a_host_location() {
        let dev = Device::fake(0);
        let ok = |p| MemPool::check_placement_for(&dev, p).is_ok();
        assert!(ok(Placement::device(0)));
        assert!(!ok(Placement::device(1)));
        assert!(ok(Placement::new(Location::Host, AllocationType::Pinned)));
        assert!(!ok(Placement::new(Location::Unspecified, AllocationType::Pinned)));
        assert!(ok(Placement::new(Location::Unspecified, AllocationType::Managed)));
    }

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
