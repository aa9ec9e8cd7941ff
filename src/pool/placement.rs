//! Where a pool's memory lives and how it is allocated ([`Location`],
//! [`AllocationType`], [`Placement`]), and how to create a pool
//! ([`PoolProperties`]).

use super::*;

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
